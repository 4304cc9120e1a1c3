"""tasks.py's config fields as a saved run's config may hold them (JSON anyone can edit): a value
of the wrong kind is one UserError naming the field, not a TypeError."""

import importlib
import json

import ml_collections
import numpy as np
import pytest

from bert_jax import cli
from bert_jax.finetune import glue, tasks


@pytest.mark.parametrize(
    "labels, names",
    [
        ("neg,neutral,pos", ("neg", "neutral", "pos")),
        (("neg,pos",), ("neg", "pos")),
        ((0, 1), ("0", "1")),
        ([""], ()),
        ((), ()),
    ],
)
def test_label_names(labels, names):
    assert tasks.label_names(labels) == names


@pytest.mark.parametrize("labels", [5, None, {"a": 1}])
def test_label_names_of_the_wrong_kind_name_the_field(labels):
    with pytest.raises(cli.UserError, match=r"config\.data\.labels="):
        tasks.label_names(labels)


@pytest.mark.parametrize("value", [["glue"], 3, None])
def test_format_and_layout_of_the_wrong_kind_name_the_field(value):
    data = ml_collections.ConfigDict({"format": value, "layout": "sst2"})
    with pytest.raises(cli.UserError, match=r"config\.data\.format="):
        tasks.make_task(data)
    with pytest.raises(cli.UserError, match=r"config\.data\.layout"):
        glue.get_layout(value)


@pytest.mark.parametrize("v2", [True, False])
def test_squad_v2_questions_without_answers_are_unanswerable(tmp_path, tok, v2):
    # A v2.0 dev file that leaves is_impossible out (an unanswerable question: answers []) is
    # scored as evaluate-v2.0.py scores it; it was refused as "has no labels".
    qas = [
        {"id": "a", "question": "what color ?", "answers": [{"text": "red", "answer_start": 4}]},
        {"id": "b", "question": "what size ?", "answers": []},
    ]
    doc = {"data": [{"title": "t", "paragraphs": [{"context": "the red box", "qas": qas}]}]}
    (tmp_path / "dev.json").write_text(json.dumps(doc))
    data = ml_collections.ConfigDict(
        {"max_seq_length": 32, "doc_stride": 16, "max_query_length": 8}
    )
    data.version_2_with_negative = v2
    task = tasks.SpanTask(data)
    ds = task.encode(tok, task.read(str(tmp_path / "dev.json")), (), training=False)
    assert ds.has_labels == v2
    unlabelled = [{"id": q["id"], "question": q["question"]} for q in qas]
    doc["data"][0]["paragraphs"][0]["qas"] = unlabelled  # a test file: no answers at all
    (tmp_path / "test.json").write_text(json.dumps(doc))
    assert not task.encode(tok, task.read(str(tmp_path / "test.json")), (), False).has_labels


def _sample(layout: str, n: int) -> str:
    """A valid data file of the layout, n examples, with non-ASCII words."""
    words = ["héllo", "中文", "world", "😀", "a"]
    if layout == "conll":
        rows = (f"{words[i % 5]} NN B-NP {'O' if i % 3 else 'B-PER'}" for i in range(n))
        return "-DOCSTART- -X- -X- O\n\n" + "\n".join(rows) + "\n"
    if layout == "squad":
        context = " ".join(words[i % 5] for i in range(n))
        qas = [{"id": "q", "question": "a?", "answers": [{"text": "a", "answer_start": 0}]}]
        doc = {"data": [{"paragraphs": [{"context": context, "qas": qas}]}]}
        return json.dumps(doc, ensure_ascii=False)
    return "sentence\tlabel\n" + "".join(f"{words[i % 5]} x\t{i % 2}\n" for i in range(n))


@pytest.mark.parametrize("layout", ["sst2", "conll", "squad"])
def test_a_byte_that_is_not_utf8_is_named_where_it_is_in_the_file(tmp_path, layout):
    """The file's offset and line of the first bad byte, whatever the reader decodes by (a
    whole file after a BOM, CoNLL's columns, SQuAD's text-mode chunks of 8 KiB): they named
    the offset in that piece ('byte 0' for a bad word on line 900)."""
    config = importlib.import_module(f"configs.finetune.{layout}").get_config()
    task = tasks.make_task(config.data)
    rng = np.random.default_rng(0)
    path = tmp_path / "data"
    for case in range(6):
        text = _sample(layout, int(rng.integers(5, 3000)))
        cut = int(rng.integers(len(text) // 2, len(text)))
        bad = [b"\xff", b"\xed\xa0\x80", b"\xc3 ", b"\x80"][case % 4]
        data = (b"\xef\xbb\xbf" if case % 2 else b"") + text[:cut].encode() + bad
        path.write_bytes(data + text[cut:].encode())
        with pytest.raises(cli.UserError) as e:
            tasks.read_examples(task, str(path))
        line = data.count(b"\n") + 1
        start = len(data) - len(bad)
        assert f"(line {line}, byte {start}:" in str(e.value), (layout, case)
