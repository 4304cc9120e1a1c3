"""data_prep with its inputs, vocabulary and output in a bucket, against a real GCS API server
(fake-gcs-server, tests/support/fake_gcs.py): the same records as from and to a local disk, for
every input kind; the promises of the local output directory kept without rename (nothing
half-written is ever trusted, a rerun finishes only what is missing); and faults: the server stopped
mid-job, 503s and stalls, kill -9, two jobs on one directory."""

import gzip
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time

import pytest

from bert_jax import cli, storage
from bert_jax.data.contract import features as F
from bert_jax.data.contract import manifest, record_io, shard_files
from bert_jax.storage import workdir_lock
from bert_jax.text import tokenization
from data_prep import job, job_units, output, scaled
from support import make_wiki_dump
from support.golden import REPO


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """Local copies of bucket vocabularies go to the test's directory, not ~/.cache."""
    monkeypatch.setenv("BERT_JAX_CACHE_DIR", str(tmp_path / "cache"))


def upload(local_dir, url: str) -> str:
    """Every file of `local_dir` as an object under `url`; returns `url`."""
    for name in sorted(os.listdir(local_dir)):
        with open(os.path.join(local_dir, name), "rb") as f:
            storage.write_bytes(storage.join(url, name), f.read())
    return url


def shards(directory: str) -> dict[str, bytes]:
    """The final-named shard files of a local directory or bucket prefix -> their bytes."""
    return {
        name: storage.read_bytes(storage.join(directory, name))
        for name in storage.sizes(directory)
        if manifest.SHARD_NAME.match(name)
    }


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, testdata):
    """One file of every input kind the scaled job reads: BERT-format text (plain, gzip), JSONL,
    a multistream Wikipedia dump with its index, Parquet."""
    pytest.importorskip("pyarrow")
    d = tmp_path_factory.mktemp("bucket_corpus")
    pages, _ = make_wiki_dump.build(16, seed=7)
    make_wiki_dump.write_dump(pages, str(d / "w-pages-articles-multistream.xml.bz2"), 3)
    make_wiki_dump.write_parquet(pages, str(d / "w.parquet"), row_group_rows=3)
    text = (testdata / "sample_text.txt").read_bytes()
    (d / "a.txt").write_bytes(text)
    (d / "b.txt.gz").write_bytes(
        gzip.compress((testdata / "pydocs_small.txt").read_bytes()[:60000])
    )
    docs = text.decode().split("\n\n")
    (d / "c.jsonl").write_text(
        "".join(json.dumps({"text": " ".join(doc.split("\n"))}) + "\n" for doc in docs)
    )
    return d


def _spec(inputs, **kwargs) -> job.JobSpec:
    settings = dict(
        inputs=tuple(inputs),
        dupe_factor=1,
        eval_fraction=0.1,
        block_size_mb=4000 / 2**20,  # many units: text blocks seek, the dump is cut at streams
        num_shards=3,
    )
    return job.JobSpec(**{**settings, **kwargs})


def test_every_input_kind_and_the_vocabulary_read_from_a_bucket(
    corpus, bucket, tmp_path, vocab_file
):
    """A gs:// glob over every input kind, and a gs:// vocabulary: the records of the local files,
    byte for byte; the manifest names the inputs and the vocabulary as given, with the same
    content hashes and md5."""
    url = upload(corpus, storage.join(bucket, "corpus"))
    storage.write_bytes(storage.join(bucket, "vocab.txt"), open(vocab_file, "rb").read())
    local = scaled.run(
        _spec([str(corpus / "*")]),
        job.load_tokenizer(vocab_file, True),
        str(tmp_path / "l"),
        progress=False,
    )
    remote_vocab = storage.join(bucket, "vocab.txt")
    remote = scaled.run(
        _spec([storage.join(url, "*")]),
        job.load_tokenizer(remote_vocab, True),
        str(tmp_path / "r"),
        progress=False,
        vocab_file=remote_vocab,
    )
    assert shards(str(tmp_path / "r")) == shards(str(tmp_path / "l"))
    assert len(local["inputs"]) == 5 and remote["read"] == local["read"]
    assert remote["read"]["pages"] > 0 and remote["read"]["files"] == 5
    assert {k.rsplit("/", 1)[1]: v["blake2b"] for k, v in remote["inputs"].items()} == {
        k.rsplit("/", 1)[1]: v["blake2b"] for k, v in local["inputs"].items()
    }
    assert all(k.startswith(url) and v["version"] for k, v in remote["inputs"].items())
    assert (
        remote["vocab"]["file"] == remote_vocab and remote["vocab"]["md5"] == local["vocab"]["md5"]
    )
    wiki_units = [u for u in job.plan(_spec([storage.join(url, "w-*.bz2")]))]
    assert len(wiki_units) > 2  # random access by the index's offsets, into the object


def test_books_from_a_bucket(bucket, tmp_path, vocab_file):
    """--document_per_file over a gs:// glob: one document per object."""
    books = tmp_path / "books"
    books.mkdir()
    (books / "one.txt").write_text("The first book opens. Rain falls.\nThe end of book one.\n")
    (books / "two.txt").write_text("A second book. It is short.\nIt ends here.\n")
    url = upload(books, storage.join(bucket, "books"))
    tok = job.load_tokenizer(vocab_file, True)
    spec = dict(document_per_file=True, eval_fraction=0.0, num_shards=1)
    local = scaled.run(
        _spec([str(books / "*.txt")], **spec), tok, str(tmp_path / "l"), progress=False
    )
    remote = scaled.run(_spec([url + "/*.txt"], **spec), tok, str(tmp_path / "r"), progress=False)
    assert remote["documents"] == local["documents"] == 2
    assert shards(str(tmp_path / "r")) == shards(str(tmp_path / "l"))


def test_a_sentencepiece_model_in_a_bucket_keeps_its_kind(bucket, tmp_path):
    """Trained into the bucket (data_prep.vocab); the local copy keeps the object's name, so a
    .model is read as SentencePiece."""
    pytest.importorskip("sentencepiece")
    from data_prep import vocab

    lines = open(os.path.join(REPO, "data_prep/testdata/sample_text.txt")).read().split("\n")
    prefix = storage.join(bucket, "sp")
    url = vocab.train_sentencepiece([line for line in lines if line] * 3, prefix, 200, True)
    assert url == prefix + ".model" and storage.isfile(prefix + ".vocab")
    tok = job.load_tokenizer(url, True)
    assert type(tok).__name__ == "SentencePieceTokenizer"
    with pytest.raises(tokenization.VocabError, match="does not exist"):
        job.load_tokenizer(storage.join(bucket, "nothing.txt"), True)


@pytest.fixture
def small(testdata, tmp_path):
    """A corpus of several units and the spec of a cheap job on it."""
    return _spec([str(testdata / "pydocs_small.txt")], block_size_mb=0.05, eval_fraction=0.05)


def test_the_scaled_job_writes_to_a_bucket(small, bucket, tmp_path, tok):
    """Shards, manifest and nothing else in the bucket, byte-identical to a local run's; a rerun
    does nothing; a shard deleted or replaced is found (rerun, --verify) and rewritten alone."""
    out = storage.join(bucket, "records")
    local = scaled.run(small, tok, str(tmp_path / "l"), progress=False)
    written = scaled.run(small, tok, out, num_workers=2, progress=False)
    assert shards(out) == shards(str(tmp_path / "l")) and len(shards(out)) == 4
    assert written["shards"] == local["shards"]
    assert sorted(storage.listdir(out)) == sorted([*shards(out), manifest.FILE])  # no _work
    assert output.read_manifest(out) == written and output.verify(out) == []

    first = storage.join(out, written["shards"]["train"][0]["file"])
    data = storage.read_bytes(first)
    storage.write_bytes(first, data[:100] + bytes([data[100] ^ 1]) + data[101:])  # same size
    assert output.verify(out) == [
        f"{storage.basename(first)}: md5 differs from the manifest (corrupt or changed)"
    ]
    storage.remove(storage.join(out, written["shards"]["train"][1]["file"]))
    assert scaled.run(small, tok, out, progress=False)["shards"] == written["shards"]
    # The size check of a rerun finds the deleted shard, not the flipped byte: --verify does.
    assert output.verify(out) != []
    storage.write_bytes(first, data)
    assert shards(out) == shards(str(tmp_path / "l")) and output.verify(out) == []


def test_a_bucket_input_rewritten_after_the_job_is_refused(small, bucket, tmp_path, tok, testdata):
    """An object's generation stands for a local file's mtime: a rewrite with the same size is
    rehashed, and refused when its content differs."""
    url = storage.join(bucket, "in.txt")
    text = (testdata / "pydocs_small.txt").read_bytes()
    storage.write_bytes(url, text)
    spec = _spec([url], block_size_mb=0.05)
    out = str(tmp_path / "out")
    scaled.run(spec, tok, out, progress=False)
    storage.write_bytes(url, text)  # the same bytes again: a new generation, trusted by its hash
    scaled.run(spec, tok, out, progress=False)
    storage.write_bytes(url, text.replace(b"the", b"teh", 1))
    with pytest.raises(job.JobMismatch, match="input has changed"):
        scaled.run(spec, tok, out, progress=False)


def test_an_unfinished_job_in_a_bucket_resumes_from_its_units(
    small, bucket, tmp_path, tok, monkeypatch
):
    """Killed between units and shards (an error here): the rerun reuses every finished unit's
    records from the bucket and writes the shards; the trainer refuses the unfinished output."""
    out = storage.join(bucket, "records")
    clean = scaled.run(small, tok, str(tmp_path / "clean"), progress=False)
    shard_task = scaled._shard_task
    written = []

    def die_after_one_shard(task):
        if written:
            raise KeyboardInterrupt
        written.append(task)
        return shard_task(task)

    monkeypatch.setattr(scaled, "_shard_task", die_after_one_shard)
    with pytest.raises(KeyboardInterrupt):
        scaled.run(small, tok, out, progress=False)
    assert not storage.exists(storage.join(out, manifest.FILE))
    assert shard_files._unfinished(storage.listdir(out))
    monkeypatch.setattr(scaled, "_shard_task", shard_task)
    processed = []
    process = job_units.UnitProcessor.process
    monkeypatch.setattr(
        job_units.UnitProcessor, "process", lambda self, u: processed.append(u) or process(self, u)
    )
    assert scaled.run(small, tok, out, progress=False)["shards"] == clean["shards"]
    assert processed == [] and shards(out) == shards(str(tmp_path / "clean"))


def test_the_beam_job_reads_and_writes_a_bucket(small, bucket, tmp_path, tok, testdata, vocab_file):
    """Beam (DirectRunner) with its input, vocabulary and output in the bucket, through
    bert_jax.storage (no apache-beam[gcp]): the scaled job's shards, byte for byte."""
    pytest.importorskip("apache_beam")
    from data_prep import beam_pipeline

    url = storage.join(bucket, "in.txt")
    storage.write_bytes(url, (testdata / "pydocs_small.txt").read_bytes())
    remote_vocab = storage.join(bucket, "vocab.txt")
    storage.write_bytes(remote_vocab, open(vocab_file, "rb").read())
    spec = _spec([url], block_size_mb=0.05, eval_fraction=0.05)
    out = storage.join(bucket, "beam")
    local = scaled.run(small, tok, str(tmp_path / "l"), progress=False)
    written = beam_pipeline.run(spec, remote_vocab, True, out, ["--runner=DirectRunner"])
    assert shards(out) == shards(str(tmp_path / "l")) and len(shards(out)) == 4
    assert written["shards"] == local["shards"] and written["vocab"]["file"] == remote_vocab
    assert output.verify(out) == []
    assert beam_pipeline.run(spec, remote_vocab, True, out, ["--runner=DirectRunner"]) == written


# --- Faults, on the server: the binary as users run it ------------------------------------------


def _cli_args(url: str, vocab_file: str, out: str, workers: int = 2) -> list[str]:
    return [
        f"--input={url}",
        f"--vocab_file={vocab_file}",
        f"--output_dir={out}",
        f"--num_workers={workers}",
        "--dupe_factor=1",
        "--block_size_mb=0.02",
        "--num_shards=3",
        "--eval_fraction=0.05",
        "--progress=false",
    ]


def _start(args: list[str], **env) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "data_prep.main", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        start_new_session=True,  # kill -9 reaches its workers too
        env={**os.environ, **env},
    )


def _wait_for(condition, what: str, proc=None, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the job ended before {what}: {proc.communicate()}")
        assert time.monotonic() < deadline, f"no {what} after {timeout} s"
        time.sleep(0.05)


def _units_done(out: str) -> int:
    return sum(name.endswith(".json") for name in storage.sizes(f"{out}/_work/units"))


def _run(args: list[str], module: str = "data_prep.main") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=REPO
    )


def _assert_one_error_line(proc: subprocess.CompletedProcess, message: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert message in lines[0], proc.stderr


@pytest.fixture
def job_input(bucket, testdata, tmp_path, vocab_file):
    """The input in the bucket, and the shards of a clean run of the same flags (local output)."""
    url = storage.join(bucket, "in.txt")
    storage.write_bytes(url, (testdata / "pydocs_small.txt").read_bytes())
    clean = str(tmp_path / "clean")
    proc = _run(_cli_args(url, vocab_file, clean))
    assert proc.returncode == 0, proc.stderr
    return url, shards(clean)


@pytest.mark.slow
def test_the_server_going_away_mid_job_is_ridden_through(gcs, bucket, job_input, vocab_file):
    """The server stopped for 5 s while units are written, then started again (same objects):
    the clients' retries carry the job through, and the output is a clean run's."""
    url, clean = job_input
    out = storage.join(bucket, "records")
    proc = _start(_cli_args(url, vocab_file, out))
    _wait_for(lambda: _units_done(out) >= 1, "finished unit", proc)
    gcs.stop()
    time.sleep(5)
    gcs.start()
    _stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    assert shards(out) == clean and output.verify(out) == []


@pytest.mark.slow
def test_a_server_that_stays_away_is_one_error_line_and_the_rerun_finishes(
    gcs, bucket, job_input, vocab_file
):
    """The server gone for longer than the retries: one `error:` line, no traceback, no manifest;
    the rerun (server back) finishes only what is missing, and the output is a clean run's."""
    url, clean = job_input
    out = storage.join(bucket, "records")
    # A 1 s retry budget: the default (storage.RETRY_S) waits a minute.
    proc = _start(_cli_args(url, vocab_file, out), BERT_JAX_STORAGE_RETRY_S="1")
    _wait_for(lambda: _units_done(out) >= 2, "finished units", proc)
    gcs.stop()
    try:
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        gcs.start()
    _assert_one_error_line(
        subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr),
        "the storage server did not serve the request after its retries",
    )
    assert not storage.exists(storage.join(out, manifest.FILE))
    done = _units_done(out)
    assert done >= 2
    rerun = _run(_cli_args(url, vocab_file, out))
    assert rerun.returncode == 0, rerun.stderr
    assert shards(out) == clean and output.verify(out) == []


@pytest.mark.slow
def test_an_input_deleted_mid_job_is_one_error_line_naming_it(gcs, bucket, job_input, vocab_file):
    """The input object deleted while its units are read (a traceback before): one `error:` line
    naming the gs:// path the user gave; put back, the rerun finishes as a clean run."""
    url, clean = job_input
    data = storage.read_bytes(url)
    out = storage.join(bucket, "records")
    proc = _start(_cli_args(url, vocab_file, out, workers=1))
    _wait_for(lambda: _units_done(out) >= 1, "finished unit", proc)
    storage.remove(url)
    stdout, stderr = proc.communicate(timeout=300)
    result = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    _assert_one_error_line(result, f"{url} does not exist")
    storage.write_bytes(url, data)
    rerun = _run(_cli_args(url, vocab_file, out))
    assert rerun.returncode == 0, rerun.stderr
    assert shards(out) == clean and output.verify(out) == []


@pytest.mark.slow
def test_kill_9_mid_job_leaves_nothing_the_trainer_reads_and_the_rerun_completes(
    bucket, job_input, vocab_file
):
    """kill -9 of the job while shards are uploaded: its workers end too (they are a
    forkserver's, which outlives the job), no manifest, so the trainer refuses the directory; the
    lock of the dead job is taken over by the rerun, which finishes the job with a clean run's
    output."""
    url, clean = job_input
    out = storage.join(bucket, "records")
    proc = _start(_cli_args(url, vocab_file, out))
    _wait_for(lambda: storage.sizes(f"{out}/_work/shards"), "finished shard", proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()

    def session_ended():
        try:
            os.killpg(proc.pid, 0)  # the job's session: its workers, forkserver, resource tracker
        except ProcessLookupError:
            return True
        return False

    _wait_for(session_ended, "end of the killed job's workers", timeout=15)
    assert not storage.exists(storage.join(out, manifest.FILE))
    assert storage.exists(storage.join(out, workdir_lock.LOCK_NAME))  # the dead job's
    assert shard_files._unfinished(storage.listdir(out))
    with pytest.raises((cli.UserError, FileNotFoundError)):
        shard_files.find_shards(out)
    rerun = _run(_cli_args(url, vocab_file, out))
    assert rerun.returncode == 0, rerun.stderr
    assert "took over the lock" in rerun.stderr and "is not running" in rerun.stderr
    assert shards(out) == clean and output.verify(out) == []


@pytest.mark.slow
def test_a_second_job_on_the_same_bucket_directory_is_refused(bucket, job_input, vocab_file):
    """While a job runs (held still by SIGSTOP, so it cannot finish first), a second one on its
    directory stops with one line naming it; the first then finishes with a clean run's output."""
    url, clean = job_input
    out = storage.join(bucket, "records")
    first = _start(_cli_args(url, vocab_file, out, workers=1))
    _wait_for(lambda: storage.exists(f"{out}/{workdir_lock.LOCK_NAME}"), "lock", first)
    os.kill(first.pid, signal.SIGSTOP)
    try:
        second = _run(_cli_args(url, vocab_file, out))
    finally:
        os.kill(first.pid, signal.SIGCONT)
    _assert_one_error_line(second, f"is in use by data_prep.main --input={url}")
    assert f"(pid {first.pid} on {socket.gethostname()}, since" in second.stderr
    assert first.wait(timeout=300) == 0, first.stderr.read()
    assert shards(out) == clean


@pytest.mark.slow
def test_503s_and_stalls_give_the_clean_output(gcs, bucket, small, tok, tmp_path, monkeypatch):
    """Through a proxy that answers 3% of the requests with 503 and stalls two past the request
    timeout: the retries carry the job through; the output is byte-identical to a clean run's."""
    from support import flaky_proxy

    clean = scaled.run(small, tok, str(tmp_path / "clean"), progress=False)
    with flaky_proxy.proxied(gcs.url, monkeypatch, request_timeout=2, seed=1) as proxy:
        out = storage.join(bucket, "records")
        proxy.fail_rate = 0.03
        proxy.stall_next(2, seconds=4)
        written = scaled.run(small, tok, out, progress=False)
        assert proxy.injected >= 5 and proxy.requests > 100
    assert written["shards"] == clean["shards"]
    assert shards(out) == shards(str(tmp_path / "clean"))


def test_reference_mode_writes_to_a_bucket(bucket, tmp_path, testdata, vocab_file):
    """The original generator's records, uploaded whole; the manifest names the bucket's
    vocabulary. Compared decoded: reference mode serializes with protobuf, whose order of the
    features map varies between processes."""
    remote_vocab = storage.join(bucket, "vocab.txt")
    storage.write_bytes(remote_vocab, open(vocab_file, "rb").read())
    outputs = {}
    for name, out, vocab in (
        ("local", str(tmp_path / "ref"), vocab_file),
        ("bucket", storage.join(bucket, "ref"), remote_vocab),
    ):
        proc = _run(
            [
                "--mode=reference",
                f"--input={testdata / 'sample_text.txt'}",
                f"--vocab_file={vocab}",
                f"--output_dir={out}",
                "--dupe_factor=1",
            ]
        )
        assert proc.returncode == 0, proc.stderr
        outputs[name] = out
    name = "train-00000-of-00001.arrayrecord"
    with storage.open_read(storage.join(outputs["bucket"], name)) as f:
        (tmp_path / name).write_bytes(f.read())
    decoded = [
        [F.decode_example(r) for r in record_io.read_records(path)]
        for path in (str(tmp_path / name), os.path.join(outputs["local"], name))
    ]
    assert len(decoded[0]) == len(decoded[1]) > 5
    for a, b in zip(*decoded):
        assert all((a[k] == b[k]).all() for k in a) and a.keys() == b.keys()
    assert output.read_manifest(outputs["bucket"])["vocab"]["file"] == remote_vocab
    assert output.verify(outputs["bucket"]) == []


def test_the_readme_bucket_example_runs_as_written(bucket):
    """README's "Records in a bucket", with gs://my-bucket this test's bucket and `gcloud storage
    cp` an upload."""
    readme = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    section = readme.split("### Records in a bucket", 1)[1].split("\n### ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)[1].replace("gs://my-bucket", bucket)
    commands, expected = [], []
    for line in block.replace("\\\n", " ").splitlines():
        if line.startswith("# "):
            expected.append(line[2:].removesuffix(" ..."))
        elif line.strip():
            commands.append(shlex.split(line))
    outputs = []
    for args in commands:
        if args[:3] == ["gcloud", "storage", "cp"]:
            storage.write_bytes(args[4], open(os.path.join(REPO, args[3]), "rb").read())
            continue
        proc = subprocess.run(
            [sys.executable, *args[1:]], capture_output=True, text=True, cwd=REPO, timeout=300
        )
        assert proc.returncode == 0, (args, proc.stderr)
        outputs.append(proc.stdout)
    assert len(outputs) == len(expected) == 2
    for stdout, line in zip(outputs, expected):
        assert line in stdout, (line, stdout)


def test_the_vocab_and_decode_binaries_take_bucket_paths(bucket, testdata):
    """data_prep.vocab trains from a gs:// corpus into a gs:// vocab.txt, data_prep.main uses it,
    data_prep.decode prints a shard of the bucket with it."""
    corpus = storage.join(bucket, "corpus.txt")
    storage.write_bytes(corpus, (testdata / "sample_text.txt").read_bytes())
    vocab, out = storage.join(bucket, "v", "vocab.txt"), storage.join(bucket, "records")
    runs = (
        ("data_prep.vocab", f"--input={corpus}", f"--output={vocab}", "--vocab_size=400"),
        (
            "data_prep.main",
            f"--input={corpus}",
            f"--vocab_file={vocab}",
            f"--output_dir={out}",
            "--dupe_factor=1",
        ),
        (
            "data_prep.decode",
            f"--input={out}/train-00000-of-00001.arrayrecord",
            f"--vocab_file={vocab}",
            "--limit=1",
        ),
    )
    printed = []
    for module, *args in runs:
        proc = _run(args, module)
        assert proc.returncode == 0, (module, proc.stderr)
        printed.append(proc.stdout)
    assert "wrote gs://" in printed[0] and "entries" in printed[0]
    assert printed[2].startswith("--- record 0\ntokens:   [CLS]")
