"""The data_prep binaries end to end: records, messy input, decoding, vocabulary training, a full
disk. Bad input as one `error:` line: the bad-input sweep (tests/e2e/test_bad_input_sweep.py)."""

import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from bert_jax.data.contract import features as F
from bert_jax.data.contract import record_io


def run(module, *args):
    proc = subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=300
    )
    return proc.returncode, proc.stdout + proc.stderr


def assert_one_error_line(proc, message):
    """bert_jax.cli's contract: nothing on stdout, one `error:` line on stderr, exit 2."""
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("error: ") and message in proc.stderr, proc.stderr


@pytest.fixture(scope="module")
def messy_corpus(tmp_path_factory):
    """Real text plus everything that goes wrong in real corpora."""
    d = tmp_path_factory.mktemp("messy")
    real = open("data_prep/testdata/sample_text.txt", encoding="utf-8").read()
    (d / "a.txt").write_bytes(
        real.encode()
        + b"\n\n"
        + b"Only one sentence in this document.\n\n"
        + b"Bytes that are not UTF-8: \xff\xfe\xfd here.\nAnd a normal line after them.\n\n\n\n"
        + (" ".join(["word"] * 3000)).encode()
        + b"\nA short line after a very long one.\n"
    )
    (d / "empty.txt").write_bytes(b"")
    return d


def test_main_writes_parseable_records_and_survives_messy_input(tmp_path, messy_corpus, vocab_file):
    rc, out = run(
        "data_prep.main",
        f"--input={messy_corpus}/*.txt",
        f"--vocab_file={vocab_file}",
        f"--output_dir={tmp_path}",
        "--dupe_factor=2",
        "--format=tfrecord",
    )
    assert rc == 0, out
    assert "bad_utf8_lines': 1" in out and "empty_files': 1" in out
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    shard = tmp_path / manifest["shards"]["train"][0]["file"]
    records = [F.decode_example(r) for r in record_io.read_records(str(shard))]
    assert len(records) == manifest["stats"]["instances"] > 10
    schema = F.Schema(128, 20)
    for r in records:
        F.check_example(r, schema)  # the original schema: names, dtypes, lengths
        assert r["input_ids"].dtype == np.int64 and r["masked_lm_weights"].dtype == np.float32
        assert r["input_mask"].sum() <= 128
    rc, out = run("data_prep.decode", f"--input={shard}", f"--vocab_file={vocab_file}", "--limit=2")
    assert rc == 0, out
    assert out.count("--- record") == 2 and "[CLS]" in out and "next_sentence_label" in out


def test_a_full_disk_is_one_error_line_and_finished_work_is_kept(tmp_path, testdata, vocab_file):
    # The binary as users run it, with a disk that fills up while the second shard is written.
    program = textwrap.dedent("""
        import errno, runpy
        from bert_jax.data.contract import record_io
        write = record_io.RecordWriter.write
        def full_disk(self, record):
            if "train-00001-of-" in self.path:
                raise OSError(errno.ENOSPC, "No space left on device", self.path)
            write(self, record)
        record_io.RecordWriter.write = full_disk
        runpy.run_module("data_prep.main", run_name="__main__")
    """)
    args = [
        f"--input={testdata / 'sample_text.txt'}",
        f"--vocab_file={vocab_file}",
        f"--output_dir={tmp_path / 'out'}",
        "--num_shards=3",
        "--num_workers=1",
        "--dupe_factor=2",
        "--progress=false",
    ]
    proc = subprocess.run(
        [sys.executable, "-c", program, *args], capture_output=True, text=True, cwd=os.getcwd()
    )
    assert_one_error_line(proc, "error: no space left on the device writing ")
    assert "rerun the same command; finished work is kept" in proc.stderr
    names = os.listdir(tmp_path / "out")
    assert "train-00000-of-00003.arrayrecord" in names and "manifest.json" not in names
    assert not [n for n in names if ".tmp-" in n]
    rc, out = run("data_prep.main", *args)
    assert rc == 0 and "shards: train 3 x" in out, out


def test_one_sentence_documents_warn_that_nsp_pairs_are_all_random(tmp_path, vocab_file):
    """Hugging Face's bookcorpus is one sentence per row: every pair is random, and the job says
    so (with what to do) instead of writing useless NSP labels in silence; --nsp=false is quiet."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [f"this is sentence {i} of the book, and it goes on for a while." for i in range(300)]
    pq.write_table(pa.table({"text": rows}), tmp_path / "bookcorpus.parquet")
    args = [f"--input={tmp_path}/bookcorpus.parquet", f"--vocab_file={vocab_file}", "--noprogress"]
    code, out = run("data_prep.main", *args, f"--output_dir={tmp_path}/nsp")
    assert code == 0 and "random next 1.000" in out, out
    assert "warning: 100% of next-sentence pairs are random" in out and "--nsp=false" in out
    code, out = run("data_prep.main", *args, f"--output_dir={tmp_path}/mlm", "--nsp=false")
    assert code == 0 and "warning" not in out, out
    code, out = run(
        "data_prep.main",
        "--input=data_prep/testdata/sample_text.txt",
        f"--vocab_file={vocab_file}",
        "--noprogress",
        f"--output_dir={tmp_path}/text",
    )
    assert code == 0 and "random next" in out and "warning" not in out, out


def test_unmasked_mlm_only_records(tmp_path, vocab_file):
    rc, out = run(
        "data_prep.main",
        "--input=data_prep/testdata/sample_text.txt",
        f"--vocab_file={vocab_file}",
        f"--output_dir={tmp_path}",
        "--dupe_factor=1",
        "--dynamic_masking",
        "--nsp=false",
    )
    assert rc == 0, out
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["masked"] is False
    records = list(record_io.read_records(str(tmp_path / manifest["shards"]["train"][0]["file"])))
    for r in map(F.decode_example, records):
        F.check_example(r, F.Schema(128, 0))
        assert (
            "masked_lm_ids" not in r
            and r["segment_ids"].max() == 0
            and r["next_sentence_labels"][0] == 0
        )


# Pieces a vocabulary of 3000 trained on the sample's raw wikitext holds (markup: citations,
# links, files, infoboxes) and one trained on its prose does not.
MARKUP_PIECES = {
    "http", "https", "www", "cite", "url", "accessdate", "nbsp", "##px", "isbn", "thumb",
    "reflist", "defaultsort", "infobox",
}  # fmt: skip


def test_a_vocabulary_from_a_dump_parquet_or_jsonl_is_trained_on_their_prose(tmp_path):
    """data_prep.vocab reads every input kind as data_prep.main does: the sample dump and the same
    articles as Parquet and as JSONL give the same vocabulary (their sentences are the same), up to
    the pieces tied at the cut, which Hugging Face's trainer picks in hash order (tokenizers issue
    1794: two runs on one file differ there too); before, only plain text files were read."""
    pq = pytest.importorskip("pyarrow.parquet")
    texts = pq.read_table("examples/data/enwiki-sample.parquet").column("text").to_pylist()
    with open(tmp_path / "wiki.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"id": i, "body": t}) + "\n" for i, t in enumerate(texts))
    inputs = {
        "dump": ["--input=examples/data/enwiki-sample-pages-articles-multistream.xml.bz2"],
        "parquet": ["--input=examples/data/enwiki-sample.parquet"],
        "jsonl": [f"--input={tmp_path}/wiki.jsonl", "--text_field=body"],
    }
    vocabs = {}
    for name, args in inputs.items():
        rc, out = run(
            "data_prep.vocab", *args, f"--output={tmp_path}/{name}.txt", "--vocab_size=3000"
        )
        assert rc == 0, out
        vocabs[name] = (tmp_path / f"{name}.txt").read_text(encoding="utf-8").splitlines()
    for name, entries in vocabs.items():
        assert len(entries) == 3000 and entries[:5] == [
            "[PAD]",
            "[UNK]",
            "[CLS]",
            "[SEP]",
            "[MASK]",
        ]
        assert len(set(entries) & set(vocabs["dump"])) > 0.99 * 3000, name
        assert not MARKUP_PIECES & set(entries), name


@pytest.mark.parametrize(
    "model_type, output", [("wordpiece", "vocab.txt"), ("sentencepiece", "sp")]
)
def test_trained_vocabulary_feeds_data_prep(tmp_path, model_type, output):
    rc, out = run(
        "data_prep.vocab",
        "--input=data_prep/testdata/pydocs_small.txt",
        f"--output={tmp_path / output}",
        f"--model_type={model_type}",
        "--vocab_size=1500",
    )
    assert rc == 0, out
    assert "warning" not in out  # pydocs_small fills 1500 entries
    vocab = tmp_path / ("vocab.txt" if model_type == "wordpiece" else "sp.model")
    if model_type == "wordpiece":
        lines = vocab.read_text().splitlines()
        assert lines[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] and len(lines) == 1500
    rc, out = run(
        "data_prep.main",
        "--input=data_prep/testdata/sample_text.txt",
        f"--vocab_file={vocab}",
        f"--output_dir={tmp_path / 'records'}",
        "--dupe_factor=1",
        "--do_whole_word_mask",
    )
    assert rc == 0 and "wrote" in out, out


@pytest.mark.parametrize("model_type, output", [("wordpiece", "v.txt"), ("sentencepiece", "sp")])
def test_a_corpus_too_small_for_the_vocabulary_size_is_warned_of(tmp_path, model_type, output):
    """Both trainers stop when the corpus has no more pieces to learn: sample_text.txt fills a
    few hundred of the 30,522 entries asked for. The vocabulary is written (it is usable), and a
    warning on stderr says how many entries it has and what to do; before, only the "wrote"
    line showed the number."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "data_prep.vocab",
            "--input=data_prep/testdata/sample_text.txt",
            f"--output={tmp_path / output}",
            f"--model_type={model_type}",
            "--vocab_size=30522",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    entries = int(re.search(r": (\d+) entries", proc.stdout)[1])
    assert 100 < entries < 30522
    assert (
        f"warning: the corpus filled only {entries} of the --vocab_size=30522 entries"
        in proc.stderr
    )
