"""Reruns of the scaled job trust nothing: deleted or damaged shards and unit files are written
again, edited input is noticed (even at the same size), a full disk keeps finished work."""

import errno
import os
import shutil

import pytest

from bert_jax import cli
from bert_jax.data.contract import manifest, record_io
from data_prep import content, job, job_units, output, scaled

OLD = 1_000_000_000  # an mtime long past (2001): the stat alone is trusted


@pytest.fixture
def corpus(tmp_path, testdata):
    path = tmp_path / "corpus.txt"
    shutil.copy(testdata / "sample_text.txt", path)
    return path


def spec(corpus, **kw):
    defaults = dict(
        inputs=(str(corpus),), dupe_factor=2, eval_fraction=0.1, block_size_mb=0.001, num_shards=3
    )
    return job.JobSpec(**{**defaults, **kw})


def run(corpus, tok, out, **kw):
    return scaled.run(spec(corpus, **kw), tok, str(out), progress=False)


def shards(directory):
    return {
        name: (directory / name).read_bytes()
        for name in sorted(os.listdir(directory))
        if manifest.SHARD_NAME.match(name)
    }


def edit_same_size(path):
    """Another word in place of one (same length), so names and sizes say nothing changed."""
    text = path.read_text()
    assert "random" in text
    path.write_text(text.replace("random", "shovel", 1))


def interrupted_after_units(corpus, tok, out):
    """A job stopped after all of its units (the shard count is refused) and before shards."""
    with pytest.raises(ValueError, match="--num_shards=100000"):
        run(corpus, tok, out, num_shards=100_000)


def test_a_deleted_or_cut_shard_of_a_finished_job_is_written_again(corpus, tok, tmp_path):
    manifest = run(corpus, tok, tmp_path / "out")
    expected = shards(tmp_path / "out")
    names = [e["file"] for e in manifest["shards"]["train"]]
    kept = os.stat(tmp_path / "out" / names[0]).st_mtime_ns
    os.remove(tmp_path / "out" / names[1])
    with open(tmp_path / "out" / names[2], "r+b") as f:
        f.truncate(100)
    assert sorted(output.verify(str(tmp_path / "out"))) == [
        f"{names[1]}: missing",
        f"{names[2]}: 100 bytes, {manifest['shards']['train'][2]['bytes']} expected "
        "(truncated or changed)",
    ]
    again = run(corpus, tok, tmp_path / "out")
    assert shards(tmp_path / "out") == expected and again["shards"] == manifest["shards"]
    assert os.stat(tmp_path / "out" / names[0]).st_mtime_ns == kept  # intact: not rewritten
    assert output.verify(str(tmp_path / "out")) == []


def test_input_edited_between_a_kill_and_the_rerun_is_redone(corpus, tok, tmp_path):
    interrupted_after_units(corpus, tok, tmp_path / "out")
    edit_same_size(corpus)
    run(corpus, tok, tmp_path / "out")
    run(corpus, tok, tmp_path / "fresh")
    assert shards(tmp_path / "out") == shards(tmp_path / "fresh")


def test_input_edited_after_some_shards_were_written_is_redone(corpus, tok, tmp_path, monkeypatch):
    write = record_io.RecordWriter.write
    paths = []

    def full_disk_after_a_while(self, record):
        paths.append(self.path)
        if len(set(paths)) == 2:  # the first shard is finished, the second is not
            raise OSError(errno.ENOSPC, "No space left on device", self.path)
        write(self, record)

    monkeypatch.setattr(record_io.RecordWriter, "write", full_disk_after_a_while)
    with pytest.raises(OSError) as failed:
        run(corpus, tok, tmp_path / "out", num_shards=4)
    monkeypatch.setattr(record_io.RecordWriter, "write", write)
    # One clear line for the user; every finished unit and shard kept, no partial file.
    assert cli.message(failed.value).startswith("no space left on the device writing ")
    assert len(shards(tmp_path / "out")) == 1
    units = os.listdir(tmp_path / "out" / manifest.WORK_DIR / "units")
    assert len(units) >= 10 and not [n for n in units if ".tmp-" in n]
    assert not [n for n in os.listdir(tmp_path / "out") if ".tmp-" in n]

    edit_same_size(corpus)
    run(corpus, tok, tmp_path / "out", num_shards=4)
    run(corpus, tok, tmp_path / "fresh", num_shards=4)
    assert shards(tmp_path / "out") == shards(tmp_path / "fresh")


def test_a_full_disk_keeps_finished_work_and_the_rerun_finishes(corpus, tok, tmp_path, monkeypatch):
    run(corpus, tok, tmp_path / "clean")
    processed = []
    process = job_units.UnitProcessor.process

    def full_disk_on_the_third_unit(self, unit, *args):
        processed.append(unit.index)
        if len(processed) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return process(self, unit, *args)

    monkeypatch.setattr(job_units.UnitProcessor, "process", full_disk_on_the_third_unit)
    with pytest.raises(OSError, match="No space left"):
        run(corpus, tok, tmp_path / "out")
    monkeypatch.setattr(job_units.UnitProcessor, "process", process)
    markers = [
        n for n in os.listdir(tmp_path / "out" / manifest.WORK_DIR / "units") if ".json" in n
    ]
    assert len(markers) == 2  # the two finished units survive
    run(corpus, tok, tmp_path / "out")
    assert shards(tmp_path / "out") == shards(tmp_path / "clean")


def test_a_rerun_writes_only_the_shards_without_a_marker(corpus, tok, tmp_path, monkeypatch):
    clean = run(corpus, tok, tmp_path / "clean", eval_fraction=0.5)
    assert clean["shards"]["eval"]  # both splits' shards: markers are kept by (split, shard)
    shard_task, written = scaled._shard_task, []

    def stop_after_two_shards(task):
        if len(written) == 2:
            raise KeyboardInterrupt
        written.append(task[3:5])  # (split, shard)
        return shard_task(task)

    monkeypatch.setattr(scaled, "_shard_task", stop_after_two_shards)
    with pytest.raises(KeyboardInterrupt):
        run(corpus, tok, tmp_path / "out", eval_fraction=0.5)
    finished = sorted(os.listdir(tmp_path / "out" / manifest.WORK_DIR / "shards"))
    assert finished == sorted(f"{split}-{shard:05d}.json" for split, shard in written)
    rewritten = []
    monkeypatch.setattr(
        scaled, "_shard_task", lambda task: rewritten.append(task[3:5]) or shard_task(task)
    )
    run(corpus, tok, tmp_path / "out", eval_fraction=0.5)
    assert sorted(written + rewritten) == sorted(
        (split, shard)
        for split, entries in clean["shards"].items()
        for shard in range(len(entries))
    )
    assert shards(tmp_path / "out") == shards(tmp_path / "clean")


def test_a_missing_or_cut_unit_file_is_redone(corpus, tok, tmp_path):
    interrupted_after_units(corpus, tok, tmp_path / "out")
    units = tmp_path / "out" / manifest.WORK_DIR / "units"
    os.remove(units / "00001.bin")
    with open(units / "00002.bin", "r+b") as f:
        f.truncate(10)
    run(corpus, tok, tmp_path / "out")
    run(corpus, tok, tmp_path / "fresh")
    assert shards(tmp_path / "out") == shards(tmp_path / "fresh")


def test_a_finished_job_whose_input_changed_is_refused(corpus, tok, tmp_path):
    run(corpus, tok, tmp_path / "out")
    os.utime(corpus, ns=(OLD, OLD))  # the same content under another mtime: still finished
    run(corpus, tok, tmp_path / "out")
    edit_same_size(corpus)
    with pytest.raises(job.JobMismatch, match=rf"input has changed since \({corpus}\)"):
        run(corpus, tok, tmp_path / "out")


def test_unchanged_input_is_trusted_by_its_stat(corpus, tok, tmp_path, monkeypatch):
    # Design for big corpora: a rerun stats each input file and reads none whose size and mtime
    # are those recorded.
    os.utime(corpus, ns=(OLD, OLD))
    interrupted_after_units(corpus, tok, tmp_path / "out")
    run(corpus, tok, tmp_path / "done")
    reads = []
    read = content.read_documents
    monkeypatch.setattr(content, "read_documents", lambda *a: reads.append(a) or read(*a))
    monkeypatch.setattr(job_units.UnitProcessor, "process", lambda *a: pytest.fail("unit redone"))
    run(corpus, tok, tmp_path / "out")  # unfinished: the units are trusted and reused
    run(corpus, tok, tmp_path / "done")  # finished: nothing to do
    assert reads == []


def test_an_input_glob_that_matches_the_jobs_own_output_skips_it(corpus, tok, tmp_path, capsys):
    """The issue's case: --input='data/*/*' with --output_dir=data/out matched the first run's
    shards on the rerun, which were read as input and refused as "UTF-16 text without a
    byte-order mark". The rerun skips them, says so, and finds its finished job; an input that is
    only the job's own output is refused, naming it."""
    data = tmp_path / "data"
    (data / "text").mkdir(parents=True)
    shutil.copy(corpus, data / "text" / "corpus.txt")
    pattern = str(data / "*" / "*")
    first = run(pattern, tok, data / "out")
    expected = shards(data / "out")
    capsys.readouterr()
    assert run(pattern, tok, data / "out") == first  # found finished: nothing redone
    assert shards(data / "out") == expected
    warning = capsys.readouterr().err
    assert f"warning: --input={pattern!r} also matches " in warning
    assert "of this job's own output (--output_dir=" in warning
    with pytest.raises(cli.UserError, match=r"names this job's own output .*: pass the text"):
        run(str(data / "out" / "*.arrayrecord"), tok, data / "out")


def test_a_kill_after_the_manifest_leaves_no_work_directory_behind(
    corpus, tok, tmp_path, monkeypatch
):
    """Killed between writing its manifest and removing its work directory, the job is finished:
    the rerun finds nothing to do and removes the work (units' records, as large as the output)
    instead of leaving it there for good."""
    out = tmp_path / "out"
    with monkeypatch.context() as m:
        m.setattr(scaled.storage, "rmtree", lambda path: None)  # the kill: the work stays
        first = run(corpus, tok, out)
    expected = shards(out)
    assert (out / manifest.WORK_DIR).is_dir()
    assert run(corpus, tok, out) == first
    assert not (out / manifest.WORK_DIR).exists() and shards(out) == expected
    assert output.verify(str(out)) == []
