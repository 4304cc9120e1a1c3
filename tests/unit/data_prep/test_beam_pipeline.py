"""The Beam job (DirectRunner) writes exactly the local scaled job's shards."""

import json
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip(
    "apache_beam", reason="the Beam job needs the [beam] extra: pip install -e '.[beam]'"
)

from bert_jax.text import tokenization
from data_prep import beam_pipeline, job, scaled


def _shards(directory):
    return {
        name: (directory / name).read_bytes()
        for name in sorted(os.listdir(directory))
        if name.startswith(("train-", "eval-"))
    }


@pytest.fixture(scope="module")
def wiki_and_parquet(tmp_path_factory):
    """A multistream dump with its index (units seek to stream offsets through FileSystems) and a
    Parquet file of several row groups."""
    pytest.importorskip("pyarrow")
    from support import make_wiki_dump

    d = tmp_path_factory.mktemp("beam_inputs")
    pages, _ = make_wiki_dump.build(12, seed=5)
    dump = d / "b-pages-articles-multistream.xml.bz2"
    make_wiki_dump.write_dump(pages, str(dump), pages_per_stream=3)
    make_wiki_dump.write_parquet(pages, str(d / "b.parquet"), row_group_rows=3)
    return str(dump), str(d / "b.parquet")


@pytest.mark.parametrize("fmt, masked", [("arrayrecord", True), ("tfrecord", False)])
def test_beam_output_equals_the_local_scaled_output(
    tmp_path, testdata, vocab_file, fmt, masked, wiki_and_parquet
):
    spec = job.JobSpec(
        inputs=(str(testdata / "pydocs_small.txt"), str(testdata / "sample_text.txt"))
        + (wiki_and_parquet if masked else ()),
        opts=job.inst.InstanceOptions(mask=masked),
        dupe_factor=2,
        eval_fraction=0.05,
        block_size_mb=0.05,
        num_shards=3,
        fmt=fmt,
    )
    local = scaled.run(
        spec, tokenization.WordPieceTokenizer(vocab_file), str(tmp_path / "local"), progress=False
    )
    beam = beam_pipeline.run(
        spec, vocab_file, True, str(tmp_path / "beam"), pipeline_args=["--runner=DirectRunner"]
    )
    assert (
        _shards(tmp_path / "beam") == _shards(tmp_path / "local")
        and len(_shards(tmp_path / "local")) == 4
    )
    for key in (
        "manifest_version",
        "mode",
        "schema",
        "nsp",
        "whole_word_mask",
        "vocab",
        "shards",
        "stats",
        "eval",
        "read",
        "documents",
        "fingerprint",
        "masked",
        "input_bytes",
    ):
        assert beam[key] == local[key], key
    # The same content hashes (mtimes come from each runner's file system API).
    assert {k: (v["size"], v["blake2b"]) for k, v in beam["inputs"].items()} == {
        k: (v["size"], v["blake2b"]) for k, v in local["inputs"].items()
    }
    assert beam["runner"] == "beam: DirectRunner"
    if masked:  # the dump and the Parquet file were read, in units of their own kinds
        assert {u.kind for u in job.plan(spec)} >= {"wiki", "parquet"}
        assert beam["read"]["pages"] > 12 and beam["documents"] > 24
    assert json.loads((tmp_path / "beam" / "manifest.json").read_text()) == beam
    assert not [name for name in os.listdir(tmp_path / "beam") if ".tmp-" in name]
    # A finished output is recognised; other settings are refused.
    assert beam_pipeline.run(spec, vocab_file, True, str(tmp_path / "beam")) == beam
    with pytest.raises(job.JobMismatch, match="finished job with other settings"):
        beam_pipeline.run(
            job.JobSpec(inputs=spec.inputs, seed=1), vocab_file, True, str(tmp_path / "beam")
        )


def test_a_tokenizer_json_gives_both_runners_one_fingerprint(tmp_path, testdata):
    """A tokenizer.json's own normalizer decides lower-casing, whatever --do_lower_case: Beam's
    fingerprint recorded the flag and scaled mode's the tokenizer's, so with a cased tokenizer.json
    and the default flag the two runners' manifests disagreed about the same records."""
    from support import tokenizer_files

    bpe = tokenizer_files.make("bpe", tmp_path / "bpe.json")
    tok = tokenization.make_tokenizer(bpe, True)
    assert not tok.do_lower_case  # the normalizer keeps case; the flag asks for lower case
    spec = job.JobSpec(inputs=(str(testdata / "sample_text.txt"),), dupe_factor=1)
    local = scaled.run(spec, tok, str(tmp_path / "local"), progress=False)
    beam = beam_pipeline.run(spec, bpe, True, str(tmp_path / "beam"), ["--runner=DirectRunner"])
    assert beam["fingerprint"] == local["fingerprint"]
    assert _shards(tmp_path / "beam") == _shards(tmp_path / "local")


def test_beam_errors_are_clear_before_the_pipeline_starts(tmp_path, testdata, vocab_file):
    spec = job.JobSpec(inputs=(str(testdata / "sample_text.txt"),))
    with pytest.raises(tokenization.VocabError, match="does not exist"):
        beam_pipeline.run(spec, str(tmp_path / "nope.txt"), True, str(tmp_path / "out"))
    with pytest.raises(job.readers.InputError, match="matches no file"):
        beam_pipeline.run(
            job.JobSpec(inputs=(str(tmp_path / "*.txt"),)), vocab_file, True, str(tmp_path / "out")
        )


def test_an_input_with_no_instances_is_one_error_line(tmp_path, vocab_file):
    """The error is raised inside the pipeline: main prints it as one `error:` line, with what the
    reads saw, and the in-process runner logs no traceback of it first."""
    (tmp_path / "k.jsonl").write_text('{"body": "the text is under another name."}\n' * 3)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "data_prep.main",
            "--mode=beam",
            f"--input={tmp_path}/k.jsonl",
            f"--vocab_file={vocab_file}",
            f"--output_dir={tmp_path}/out",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in proc.stderr.splitlines() if not re.match(r"[IW]\d{4} ", line)]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: the input gave no training instances (0 documents")
    assert "3 JSON lines were not objects with a string field 'text'" in lines[0]


@pytest.mark.parametrize(
    "args, said",
    [
        (["--runner=Bogus"], "--runner=Bogus: Unexpected pipeline runner"),
        (["--direct_num_workers=abc"], "--direct_num_workers: invalid int value: 'abc'"),
        (["--runner"], "--runner: expected one argument"),
    ],
)
def test_bad_pipeline_options_are_user_errors(tmp_path, testdata, vocab_file, args, said):
    """An unknown runner was a ValueError shown as a bug's traceback; a bad option value printed
    Beam's whole argparse usage. Both are one error, before anything is written."""
    from bert_jax import cli

    spec = job.JobSpec(inputs=(str(testdata / "sample_text.txt"),), dupe_factor=1)
    with pytest.raises(cli.UserError, match=re.escape(said)):
        beam_pipeline.run(spec, vocab_file, True, str(tmp_path / "out"), pipeline_args=args)
    assert not (tmp_path / "out").exists()


def test_a_failed_pipeline_is_rerun_only_with_its_own_settings(tmp_path, testdata, vocab_file):
    """A pipeline killed after its shards, before its manifest, was rerun with any settings: the
    new shards were written beside the old ones (train-*-of-00003 and -of-00002 in one
    directory). As in the scaled job, other units' settings are now refused, other shard settings
    replace the old shards, and shards that no job's state explains are not overwritten."""
    from bert_jax.data.contract import manifest

    spec = job.JobSpec(inputs=(str(testdata / "sample_text.txt"),), dupe_factor=2, num_shards=3)
    out, beam = tmp_path / "beam", ["--runner=DirectRunner"]
    first = beam_pipeline.run(spec, vocab_file, True, str(out), beam)

    def killed_before_the_manifest():  # the work directory's job.json stays
        (out / manifest.WORK_DIR).mkdir(exist_ok=True)
        (out / manifest.WORK_DIR / "job.json").write_text(json.dumps(first["fingerprint"]))
        (out / manifest.FILE).unlink()

    killed_before_the_manifest()
    with pytest.raises(job.JobMismatch, match="unfinished job with other settings"):
        beam_pipeline.run(
            job.JobSpec(inputs=spec.inputs, dupe_factor=3, num_shards=3), vocab_file, True, str(out)
        )
    fewer = job.JobSpec(inputs=spec.inputs, dupe_factor=2, num_shards=2)
    beam_pipeline.run(fewer, vocab_file, True, str(out), beam)
    scaled.run(
        fewer, tokenization.WordPieceTokenizer(vocab_file), str(tmp_path / "local"), progress=False
    )
    assert _shards(out) == _shards(tmp_path / "local") and len(_shards(out)) == 2
    assert not (out / manifest.WORK_DIR).exists()
    # Killed after the manifest, before the work directory went: the rerun has nothing to do but
    # remove it (the trainer takes a _work directory for an unfinished job).
    (out / manifest.WORK_DIR).mkdir()
    (out / manifest.WORK_DIR / "job.json").write_text("{}")
    beam_pipeline.run(fewer, vocab_file, True, str(out), beam)
    assert not (out / manifest.WORK_DIR).exists()
    # Shards with neither a manifest nor a job's state are not this job's to overwrite.
    (out / manifest.FILE).unlink()
    with pytest.raises(job.JobMismatch, match="holds record shards but no manifest or job state"):
        beam_pipeline.run(spec, vocab_file, True, str(out), beam)


def test_a_full_disk_while_writing_a_shard_is_the_scaled_jobs_one_line(
    tmp_path, testdata, vocab_file, monkeypatch
):
    """DirectRunner re-raised a worker's OSError as a RuntimeError (it cannot rebuild an OSError
    with the stage's name appended): a full disk was a bug's traceback in Beam mode and one
    `error: no space left on the device` line in scaled mode. The OSError now reaches main."""
    import errno

    from bert_jax import cli
    from bert_jax.data.contract import record_io

    def full(self, record):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(record_io.RecordWriter, "write", full)
    spec = job.JobSpec(inputs=(str(testdata / "sample_text.txt"),), dupe_factor=1)
    with pytest.raises(OSError) as raised:
        beam_pipeline.run(spec, vocab_file, True, str(tmp_path / "out"), ["--runner=DirectRunner"])
    assert raised.value.errno == errno.ENOSPC
    assert cli.message(raised.value).startswith("no space left on the device")


@pytest.mark.parametrize("mode", ["scaled", "beam"])
def test_a_job_without_instances_can_be_rerun_with_the_field_it_asks_for(
    tmp_path, vocab_file, mode
):
    """The error says "check --input and --text_field"; the rerun with --text_field fixed was
    refused as an unfinished job with other settings (scaled mode's job.json, which Beam now keeps
    too). A job that failed for want of instances leaves no state: the rerun runs."""
    from bert_jax.data.contract import manifest

    (tmp_path / "k.jsonl").write_text('{"body": "the text is under another name. and more."}\n' * 9)

    def run(text_field):
        spec = job.JobSpec(inputs=(str(tmp_path / "k.jsonl"),), text_field=text_field)
        if mode == "beam":
            return beam_pipeline.run(spec, vocab_file, True, str(tmp_path / "out"))
        tok = tokenization.WordPieceTokenizer(vocab_file)
        return scaled.run(spec, tok, str(tmp_path / "out"), progress=False)

    with pytest.raises(job.NoInstances, match="check --input and --text_field"):
        run("text")
    assert not (tmp_path / "out" / manifest.WORK_DIR).exists()
    assert run("body")["shards"]["train"]
