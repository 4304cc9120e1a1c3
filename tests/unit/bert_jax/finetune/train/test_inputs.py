"""Bad fine-tuning input files are refused with a message naming the file, before the run creates
its workdir (issue 12): an empty or header-only TSV, labels with stray spaces, and the same in an
eval or test file, which used to surface only after training (or after the workdir existed);
regression targets that parse as floats but are not finite."""

import os
import sys

import pytest
from flax import nnx

from bert_jax.finetune import train
from bert_jax.hf import bert
from bert_jax.model import encoder
from support.finetune_data import make_config, sst2_file, stsb_file


def sst2_config(tmp_path, train_file, **data):
    config = make_config(format="glue", layout="sst2", train_file=train_file, **data)
    config.eval.at_start = False
    return config


def refused(config, tmp_path, tiny_hf, match):
    workdir = tmp_path / "work"
    with pytest.raises(ValueError, match=match):
        train.finetune(config, str(workdir), tiny_hf)
    assert not os.path.exists(workdir), "the workdir was created before the input was checked"


@pytest.mark.parametrize(
    "content, match",
    [
        ("", r"train.tsv is empty"),
        ("sentence\tlabel\n", r"train.tsv holds no examples"),
        ("sentence\tlabel\n\n\n", r"train.tsv holds no examples"),
    ],
    ids=["empty", "header-only", "header-and-blank-lines"],
)
def test_empty_or_header_only_train_file(tmp_path, tiny_hf, content, match):
    (tmp_path / "train.tsv").write_text(content)
    refused(sst2_config(tmp_path, str(tmp_path / "train.tsv")), tmp_path, tiny_hf, match)


@pytest.mark.parametrize("label", ["1 ", " 0", " 1 "], ids=["trailing", "leading", "both"])
def test_labels_with_stray_spaces(tmp_path, tiny_hf, label):
    path = tmp_path / "train.tsv"
    path.write_text(f"sentence\tlabel\nw1 good w2\t1\nw3 bad w4\t{label}\n")
    refused(
        sst2_config(tmp_path, str(path)),
        tmp_path,
        tiny_hf,
        r"train.tsv:3: label '.*' has spaces around it",
    )


@pytest.mark.parametrize("role", ["eval_files", "test_file"])
@pytest.mark.parametrize(
    "content, match",
    [
        ("", r"dev.tsv is empty"),
        ("sentence\tlabel\n", r"dev.tsv holds no examples"),
        ("sentence\tlabel\nw1 good\t1 \n", r"dev.tsv:2: label '1 ' has spaces around it"),
    ],
    ids=["empty", "header-only", "stray-space"],
)
def test_bad_eval_and_test_files_are_refused_before_training(
    tmp_path, tiny_hf, role, content, match
):
    train_file = sst2_file(tmp_path / "train.tsv", 32, 0)
    (tmp_path / "dev.tsv").write_text(content)
    config = sst2_config(tmp_path, train_file, **{role: str(tmp_path / "dev.tsv")})
    refused(config, tmp_path, tiny_hf, match)


@pytest.mark.parametrize("target", ["nan", "inf", "-Infinity", "five"])
def test_regression_targets_must_be_finite_numbers(tmp_path, tiny_hf, target):
    path = tmp_path / "train.tsv"
    lines = open(stsb_file(path, 4, 0)).read().splitlines()
    lines[2] = lines[2].rsplit("\t", 1)[0] + "\t" + target  # example 1's score
    path.write_text("\n".join(lines) + "\n")
    config = make_config(format="glue", layout="stsb", train_file=str(path))
    refused(config, tmp_path, tiny_hf, rf"example 1: regression target '{target}' is not a finite")


@pytest.mark.parametrize(
    "override, names",
    [
        ("neg,neutral,pos", ("neg", "neutral", "pos")),  # as docs/finetuning.md writes it
        ("('neg', 'neutral', 'pos')", ("neg", "neutral", "pos")),
        ("0,1", ("0", "1")),  # read by ml_collections as integers
        ("B-PER, I-PER,O", ("B-PER", "I-PER", "O")),
    ],
)
def test_a_label_list_on_the_command_line_is_its_names(override, names, monkeypatch):
    """--config.data.labels=neg,neutral,pos was one label named 'neg,neutral,pos' (ml_collections
    reads a tuple override as a Python literal): it is three now, through the real flag parser
    (which finds the config file's overrides in sys.argv)."""
    from absl import flags
    from ml_collections import config_flags

    from bert_jax.finetune import tasks

    argv = ["finetune", "--config=configs/finetune/sst2.py", f"--config.data.labels={override}"]
    monkeypatch.setattr(sys, "argv", argv)
    flag_values = flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, "", flag_values=flag_values)
    flag_values(argv)
    assert tasks.make_task(flag_values.config.data).labels(None) == names


def test_eval_files_are_named_by_stem_and_a_repeated_stem_by_its_path():
    """The eval figures' keys (runs.eval_datasets): each file's stem, in the config's order; a file
    whose stem an earlier one has is named by its path instead."""
    import types

    import ml_collections
    import numpy as np

    from bert_jax.finetune import runs, tasks

    class Task:
        def read(self, path):
            return [path]

        def encode(self, tok, examples, labels, training):
            return tasks.Dataset(examples, {"input_ids": np.zeros((1, 4))})

    files = "a/dev_matched.tsv, b/dev_matched.tsv,,a/test.tsv"
    config = ml_collections.ConfigDict({"data": {"eval_files": files}})
    model = types.SimpleNamespace(config=types.SimpleNamespace(type_vocab_size=2))
    run = types.SimpleNamespace(config=config, task=Task(), tok=None, labels=(), model=model)
    sets = runs.eval_datasets(run)
    assert list(sets) == ["dev_matched", "b/dev_matched.tsv", "test"]
    assert [ds.examples for ds in sets.values()] == [
        ["a/dev_matched.tsv"],
        ["b/dev_matched.tsv"],
        ["a/test.tsv"],
    ]


@pytest.mark.parametrize("layout", ["mnli", "squad"])
def test_two_segments_on_a_model_with_one_token_type_are_refused(tmp_path, layout):
    """A BERT with type_vocab_size=1 (transformers allows it) fine-tuned on sentence pairs or
    SQuAD looked its second segment up past the table's end: NaN logits, a run that trained on
    NaN. Refused before the workdir exists, naming the file (an eval or test file too); single
    sentences still train."""
    from bert_jax.finetune import runs
    from support.finetune_data import TINY, VOCAB, mnli_file, squad_file

    (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    config = encoder.BertConfig(vocab_size=len(VOCAB), **{**TINY, "type_vocab_size": 1})
    model = encoder.BertForPreTraining(config, rngs=nnx.Rngs(0))
    hf_dir = str(tmp_path / "hf")
    bert.save_hf(model, str(tmp_path / "vocab.txt"), hf_dir)
    if layout == "mnli":
        pairs = mnli_file(tmp_path / "pairs.tsv", 8, 0)
        config = make_config(format="glue", layout="mnli", train_file=pairs)
    else:
        pairs = squad_file(tmp_path / "squad.json", 4, 0)
        config = make_config(format="squad", train_file=pairs, doc_stride=8, max_query_length=8)
    config.eval.at_start = False
    refused(config, tmp_path, hf_dir, r"(pairs\.tsv|squad\.json) has examples of 2 segments")
    if layout == "mnli":  # an eval or test file of pairs, met after training: also refused
        run = runs.prepare(
            make_config(format="glue", layout="mnli", train_file=pairs), hf_dir, False
        )
        with pytest.raises(ValueError, match=r"dev\.tsv .*type_vocab_size=1 token-type"):
            runs.encode_file(run, mnli_file(tmp_path / "dev.tsv", 4, 1))
    single = sst2_config(tmp_path, sst2_file(tmp_path / "sst.tsv", 8, 0))
    runs.prepare(single, hf_dir)  # one segment: trains
