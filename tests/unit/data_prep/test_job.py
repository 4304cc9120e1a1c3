"""Every data_prep mode writes the whole data contract: manifest version 2,
bert_jax/data/contract/manifest.py. (The Beam job writes the local scaled job's manifest:
tests/unit/data_prep/test_beam_pipeline.py.)"""

import json
import os

import pytest

from bert_jax import storage
from bert_jax.data.contract import manifest, record_io
from data_prep import instances, job, readers, reference, scaled

CONTRACT = {
    "manifest_version",
    "mode",
    "format",
    "schema",
    "masked",
    "nsp",
    "whole_word_mask",
    "vocab",
    "vocab_md5",
    "shards",
}


def write(mode, opts, tok, testdata, out):
    inputs = (str(testdata / "sample_text.txt"),)
    if mode == "reference":
        return reference.run(
            list(inputs),
            tok,
            opts,
            dupe_factor=1,
            seed=1,
            output_dir=str(out),
            fmt="tfrecord",
            flags={},
        )
    spec = job.JobSpec(inputs=inputs, opts=opts, dupe_factor=1, fmt="tfrecord")
    return scaled.run(spec, tok, str(out), progress=False)


@pytest.mark.parametrize("mode", ["reference", "scaled"])
@pytest.mark.parametrize("masked, whole_word_mask", [(True, True), (False, False)])
def test_every_mode_writes_the_contract(
    tmp_path, testdata, tok, vocab_file, mode, masked, whole_word_mask
):
    opts = instances.InstanceOptions(
        max_seq_length=64, max_predictions_per_seq=10, whole_word_mask=whole_word_mask, mask=masked
    )
    written = write(mode, opts, tok, testdata, tmp_path)
    assert json.loads((tmp_path / manifest.FILE).read_text()) == written
    assert CONTRACT <= written.keys()
    assert written["manifest_version"] == manifest.VERSION == 2
    assert written["mode"] == ("reference" if mode == "reference" else "scaled")
    assert written["format"] == "tfrecord" and written["nsp"] is True
    assert written["schema"] == {
        "max_seq_length": 64,
        "max_predictions_per_seq": 10 if masked else 0,
    }
    assert written["masked"] is masked and written["whole_word_mask"] is whole_word_mask
    assert written["vocab"] == {
        "file": vocab_file,
        "md5": storage.md5(vocab_file),
        "size": 30522,
        "kind": "wordpiece",
        "do_lower_case": True,
        "special_ids": {"pad": 0, "unk": 100, "cls": 101, "sep": 102, "mask": 103},
    }
    assert written["vocab_md5"] == written["vocab"]["md5"]
    for split in ("train", "eval"):
        for entry in written["shards"][split]:
            path = str(tmp_path / entry["file"])
            assert entry["bytes"] == os.path.getsize(path)
            assert entry["md5"] == storage.md5(path)
            assert entry["instances"] == record_io.count_records(path)
    assert written["shards"]["train"]


@pytest.mark.parametrize(
    "field, value",
    [
        ("block_size_mb", float("inf")),
        ("block_size_mb", float("nan")),
        ("shard_size_mb", float("nan")),
        ("shard_size_mb", float("inf")),
        ("block_size_mb", -1.0),
        ("block_size_mb", 0.0),
        ("tfds_examples_per_unit", 0),
    ],
)
def test_sizes_that_are_no_number_of_bytes_are_user_errors(field, value):
    """--block_size_mb=inf and --shard_size_mb=nan passed the positive check and ended in an
    OverflowError or ValueError traceback."""
    from bert_jax import cli

    with pytest.raises(cli.UserError, match=field):
        job.JobSpec(inputs=("x.txt",), **{field: value})


def test_an_input_that_names_or_matches_the_vocabulary_is_refused(tmp_path, testdata):
    """--input='data/*.txt' with --vocab_file=data/vocab.txt read the vocabulary as text: its
    30,522 entries became a document, most of the records, without a word. So is a
    tokenizer.json (its lines are text) and a SentencePiece model's .vocab beside it."""
    import shutil

    from data_prep import readers

    for name in ("corpus.txt", "vocab.txt", "sp.vocab", "tok.json"):
        shutil.copy(testdata / "sample_text.txt", tmp_path / name)
    cases = {
        "vocab.txt": [str(tmp_path / "*.txt"), str(tmp_path / "vocab.txt")],
        "sp.model": [str(tmp_path / "*.vocab"), str(tmp_path / "sp.vocab")],
        "tok.json": [str(tmp_path / "*"), str(tmp_path / "tok.json")],
    }
    for vocab, specs in cases.items():
        for spec in specs:
            with pytest.raises(readers.InputError, match=r"--input=.*--vocab_file") as error:
                job.check_inputs_are_not_the_vocabulary(
                    [str(tmp_path / "corpus.txt"), spec], str(tmp_path / vocab)
                )
            assert vocab.split(".")[0] in str(error.value)
    # Other inputs, TFDS names and a pattern that misses the vocabulary are fine.
    job.check_inputs_are_not_the_vocabulary(
        [str(tmp_path / "c*.txt"), "tfds:wiki", ""], str(tmp_path / "vocab.txt")
    )


def test_records_written_into_the_corpus_directory(tmp_path, testdata, tok):
    """--input='corpus/*.txt' --output_dir=corpus was refused: "names this job's own output
    (corpus/a.txt)", which it is not. The job's own output is what it writes there (shards,
    manifest, _work, lock, temporaries), not every file under the directory: the corpus is
    read, and a rerun over 'corpus/*' skips the shards and finds the job finished."""
    import shutil

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    shutil.copy(testdata / "sample_text.txt", corpus / "a.txt")
    opts = instances.InstanceOptions(max_seq_length=64, max_predictions_per_seq=10)
    spec = job.JobSpec(inputs=(str(corpus / "*.txt"),), opts=opts, dupe_factor=1)
    written = scaled.run(spec, tok, str(corpus), progress=False)
    files = sorted(os.listdir(corpus))
    assert "a.txt" in files and written["shards"]["train"]
    again = job.JobSpec(inputs=(str(corpus / "*"),), opts=opts, dupe_factor=1)
    assert scaled.run(again, tok, str(corpus), progress=False)["shards"] == written["shards"]
    assert sorted(os.listdir(corpus)) == files
    (corpus / "sub").mkdir()  # a text file in a subdirectory is no output of the job's
    shutil.copy(testdata / "sample_text.txt", corpus / "sub" / "b.txt")
    assert [u.path for u in job.plan(job.JobSpec(inputs=(str(corpus / "*/*.txt"),)), str(corpus))]
    with pytest.raises(readers.InputError, match="names this job's own output"):
        job.plan(job.JobSpec(inputs=(str(corpus / "train-*"),)), str(corpus))


def test_the_language_is_stored_as_a_code():
    """JobSpec takes --language as given (data_prep.main passes the flag's value): the spec, and
    so the fingerprint, hold the code the sentence splitter takes."""
    assert job.JobSpec(inputs=("x.txt",), language=" Simple ").language == "en"
    assert job.JobSpec(inputs=("x.txt",), language="zh_min_nan").language == "zh-min-nan"
