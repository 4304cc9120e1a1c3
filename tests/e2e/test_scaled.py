"""The scaled job end to end: worker-count independence, balance, eval split, manifest, resume,
memory."""

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from bert_jax import storage
from bert_jax.data.contract import features as F
from bert_jax.data.contract import manifest, record_io
from bert_jax.storage import workdir_lock
from bert_jax.text import tokenization
from data_prep import job, job_units, scaled
from support.golden import REPO


def cli(*args, timeout=600):
    proc = subprocess.run(
        [sys.executable, "-m", "data_prep.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
    return proc.returncode, proc.stdout, proc.stderr


def shard_files(directory):
    """Final-named shard files (not the temporary files of writers) -> their bytes."""
    return {
        name: (directory / name).read_bytes()
        for name in sorted(os.listdir(directory))
        if manifest.SHARD_NAME.match(name)
    }


@pytest.fixture(scope="module")
def marked(tmp_path_factory):
    """A corpus whose every sentence starts with its document's marker word dN, and a vocabulary of
    exactly those words: a record's tokens tell which documents it came from. Document 7 appears
    twice."""
    d = tmp_path_factory.mktemp("marked")
    rng = random.Random(0)
    words = [f"w{i}" for i in range(40)]
    docs = [
        [
            f"d{i} " + " ".join(rng.choices(words, k=rng.randint(4, 14)))
            for _ in range(rng.randint(2, 8))
        ]
        for i in range(300)
    ]
    docs.append(docs[7])
    (d / "corpus.txt").write_text("\n\n".join("\n".join(doc) for doc in docs) + "\n")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"d{i}" for i in range(300)] + words
    (d / "vocab.txt").write_text("\n".join(vocab) + "\n")
    return d


def _spec(corpus, **kwargs):
    defaults = dict(
        inputs=(str(corpus),), dupe_factor=2, eval_fraction=0.2, block_size_mb=4096 / 2**20
    )
    defaults.update(kwargs)
    return job.JobSpec(**defaults)


def _documents_of(record, vocab_words):
    names = [vocab_words[i] for i in record[F.INPUT_IDS][: int(record[F.INPUT_MASK].sum())]]
    return {name for name in names if name.startswith("d")}


def test_eval_documents_never_appear_in_training_and_records_can_be_unmasked(tmp_path, marked):
    tok = tokenization.WordPieceTokenizer(str(marked / "vocab.txt"))
    opts = job.inst.InstanceOptions(mask=False)
    written = scaled.run(
        _spec(marked / "corpus.txt", opts=opts, num_shards=3), tok, str(tmp_path), progress=False
    )
    assert written["masked"] is False and written["schema"]["max_predictions_per_seq"] == 0
    seen = {}
    for split, entries in written["shards"].items():
        seen[split] = set()
        for entry in entries:
            for raw in record_io.read_records(str(tmp_path / entry["file"])):
                record = F.decode_example(raw)
                F.check_example(record, F.Schema(128, 0))
                assert F.MASKED_LM_IDS not in record and tok.mask_id not in record[F.INPUT_IDS]
                seen[split] |= _documents_of(record, tok.vocab_words)
    assert seen["eval"] and seen["train"] and not seen["eval"] & seen["train"]
    expected_eval = {f"d{i}" for i in range(300) if job_units.is_eval(_doc_text(marked, i), 0.2)}
    assert seen["eval"] == expected_eval and 30 < len(expected_eval) < 90
    assert written["eval"]["documents"] == len(expected_eval) + (
        "d7" in expected_eval
    )  # d7's copy too


def _doc_text(marked, index):
    docs = (marked / "corpus.txt").read_text().split("\n\n")
    return docs[index].strip().split("\n")


def test_any_worker_count_gives_identical_output_and_balanced_shards(tmp_path, marked):
    base = [
        f"--input={marked / 'corpus.txt'}",
        f"--vocab_file={marked / 'vocab.txt'}",
        "--dupe_factor=3",
        "--block_size_mb=0.004",
        "--num_shards=7",
        "--eval_fraction=0.2",
        "--format=tfrecord",
    ]
    outputs = {}
    for workers in (1, 2, 3):
        rc, out, err = cli(
            *base, f"--output_dir={tmp_path / str(workers)}", f"--num_workers={workers}"
        )
        assert rc == 0, err
        outputs[workers] = shard_files(tmp_path / str(workers))
    assert outputs[1] == outputs[2] == outputs[3] and len(outputs[1]) == 7 + 1
    written = json.loads((tmp_path / "2" / "manifest.json").read_text())
    counts = [entry["instances"] for entry in written["shards"]["train"]]
    assert max(counts) - min(counts) <= 1 and sum(counts) == written["stats"]["instances"]
    assert (
        "docs/s" in err
        and "MB/s of text" in out
        and "shards: train 7 x" in out
        and ", eval 1 x" in out
    )


def test_manifest_describes_the_shards(tmp_path, testdata, vocab_file):
    tok = tokenization.WordPieceTokenizer(vocab_file)
    spec = _spec(
        testdata / "pydocs_small.txt",
        dupe_factor=1,
        eval_fraction=0.05,
        block_size_mb=0.05,
        num_shards=2,
        fmt=record_io.ARRAYRECORD,
    )
    written = scaled.run(spec, tok, str(tmp_path), flags={"note": "kept"}, progress=False)
    assert (
        written["mode"] == "scaled"
        and written["masked"] is True
        and written["flags"] == {"note": "kept"}
    )
    assert written["vocab_md5"] == hashlib.md5(open(vocab_file, "rb").read()).hexdigest()
    assert written["schema"] == {"max_seq_length": 128, "max_predictions_per_seq": 20}
    tokens = masked = random_next = 0
    for split in ("train", "eval"):
        for entry in written["shards"][split]:
            path = str(tmp_path / entry["file"])
            assert entry["md5"] == storage.md5(path) and entry[
                "instances"
            ] == record_io.count_records(path)
            for raw in record_io.read_records(path):
                record = F.decode_example(raw)
                if split == "train":
                    tokens += record[F.INPUT_MASK].sum()
                    masked += record[F.MASKED_LM_WEIGHTS].sum()
                    random_next += record[F.NEXT_SENTENCE_LABELS][0]
    stats, n = written["stats"], written["stats"]["instances"]
    assert stats["tokens"] == tokens and abs(stats["mask_rate"] - masked / tokens) < 1e-9
    assert (
        abs(stats["random_next_fraction"] - random_next / n) < 1e-9
        and 0.4 < stats["random_next_fraction"] < 0.65
    )
    assert (
        abs(stats["padding_fraction"] - (1 - tokens / (n * 128))) < 1e-9
        and 0.14 < stats["mask_rate"] < 0.16
    )
    assert (
        written["read"]["documents"] == written["documents"] == 65
        and written["eval"]["documents"] > 0
    )
    assert not os.path.exists(tmp_path / manifest.WORK_DIR)  # removed once the manifest is written


def test_reruns_reuse_finished_work_and_refuse_other_settings(
    tmp_path, testdata, vocab_file, monkeypatch
):
    tok = tokenization.WordPieceTokenizer(vocab_file)
    spec = _spec(testdata / "sample_text.txt", block_size_mb=0.001)
    with pytest.raises(ValueError, match="--num_shards=100000 but the train split has only"):
        scaled.run(
            _spec(testdata / "sample_text.txt", block_size_mb=0.001, num_shards=100_000),
            tok,
            str(tmp_path),
            progress=False,
        )
    units_done = len(os.listdir(tmp_path / manifest.WORK_DIR / "units"))
    assert units_done >= 8  # five units' records and markers, kept
    with pytest.raises(
        job.JobMismatch, match=r"unfinished job with other settings \(dupe_factor: 2 -> 3\)"
    ):
        scaled.run(
            _spec(testdata / "sample_text.txt", block_size_mb=0.001, dupe_factor=3),
            tok,
            str(tmp_path),
            progress=False,
        )

    def fail(*args):
        raise AssertionError("a finished unit was processed again")

    monkeypatch.setattr(job_units.UnitProcessor, "process", fail)
    written = scaled.run(
        spec, tok, str(tmp_path), progress=False
    )  # the shard count may change: no shard yet
    assert scaled.run(spec, tok, str(tmp_path), progress=False) == written
    with pytest.raises(job.JobMismatch, match="finished job with other settings"):
        scaled.run(
            _spec(testdata / "sample_text.txt", block_size_mb=0.001, seed=1),
            tok,
            str(tmp_path),
            progress=False,
        )
    # Another language splits running text otherwise: a changed setting, not a reuse.
    with pytest.raises(job.JobMismatch, match=r"other settings \(language: 'en' -> 'de'\)"):
        scaled.run(
            _spec(testdata / "sample_text.txt", block_size_mb=0.001, language="de"),
            tok,
            str(tmp_path),
            progress=False,
        )


def test_a_second_job_on_the_same_directory_is_refused(tmp_path, testdata, vocab_file):
    tok = tokenization.WordPieceTokenizer(vocab_file)
    with workdir_lock.hold(str(tmp_path), "data_prep.main --input=first", flag="--output_dir"):
        with pytest.raises(
            workdir_lock.Busy, match=r"--output_dir=.* is in use by data_prep.main --input=first"
        ):
            scaled.run(_spec(testdata / "sample_text.txt"), tok, str(tmp_path), progress=False)
    assert not (tmp_path / manifest.WORK_DIR).exists()  # the refused job wrote nothing
    scaled.run(_spec(testdata / "sample_text.txt"), tok, str(tmp_path), progress=False)
    names = os.listdir(tmp_path)  # and the lock went with the job that held it
    assert "manifest.json" in names and workdir_lock.LOCK_NAME not in names, names


def test_verify_detects_a_corrupted_shard(tmp_path, testdata, vocab_file):
    out = tmp_path / "out"
    rc, _, err = cli(
        f"--input={testdata / 'sample_text.txt'}",
        f"--vocab_file={vocab_file}",
        f"--output_dir={out}",
        "--num_workers=1",
        "--dupe_factor=1",
    )
    assert rc == 0, err
    rc, stdout, _ = cli("--verify", f"--output_dir={out}")
    assert rc == 0 and "verify: OK" in stdout
    shard = out / "train-00000-of-00001.arrayrecord"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    rc, _, err = cli("--verify", f"--output_dir={out}")
    assert rc == 2 and "train-00000-of-00001.arrayrecord: md5 differs" in err and "FAILED" in err
    assert err.count("\n") == 1, err  # one `error:` line
    # docs/data_prep.md says so (it said 1 before).
    doc = open(os.path.join(REPO, "docs", "data_prep.md")).read()
    said = " ".join(doc.split("`--verify` recomputes each shard's size")[1].split()[:90])
    assert "exits with status 0 when all match" in said and "exits with status 2" in said


def test_tfds_splits_are_cut_into_example_ranges(tmp_path, vocab_file):
    tfds = pytest.importorskip("tensorflow_datasets")

    class TinyArticles(
        tfds.core.GeneratorBasedBuilder
    ):  # a name of its own: tfds keeps a global registry
        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            features = tfds.features.FeaturesDict({"text": tfds.features.Text()})
            return tfds.core.DatasetInfo(builder=self, features=features)

        def _split_generators(self, dl_manager):
            return {"train": self._generate_examples()}

        def _generate_examples(self):
            for i in range(7):
                yield (
                    i,
                    {
                        "text": (
                            f"Article {i} begins here. It goes on for a while.\n"
                            f"A second paragraph {i}!"
                        )
                    },
                )

    TinyArticles(data_dir=str(tmp_path / "tfds"), file_format="array_record").download_and_prepare(
        download_config=tfds.download.DownloadConfig(try_download_gcs=False)
    )
    tok = tokenization.WordPieceTokenizer(vocab_file)
    spec = job.JobSpec(
        inputs=("tfds:tiny_articles:train",),
        tfds_examples_per_unit=2,
        tfds_data_dir=str(tmp_path / "tfds"),
        eval_fraction=0.0,
        dupe_factor=1,
    )
    assert [(u.start, u.stop) for u in job.plan(spec)] == [(0, 2), (2, 4), (4, 6), (6, 7)]
    written = scaled.run(spec, tok, str(tmp_path / "out"), progress=False)
    assert (
        written["documents"] == 7
        and written["read"]["files"] == 1
        and written["stats"]["instances"] >= 7
    )
    assert written["shards"]["eval"] == []


@pytest.mark.slow
def test_resume_after_kill_gives_the_uninterrupted_output(tmp_path, testdata, vocab_file):
    args = [
        f"--input={testdata / 'pydocs_small.txt'}",
        f"--vocab_file={vocab_file}",
        "--dupe_factor=2",
        "--block_size_mb=0.02",
        "--num_shards=40",
        "--num_workers=2",
        "--progress=false",
    ]
    rc, _, err = cli(*args, f"--output_dir={tmp_path / 'whole'}")
    assert rc == 0, err
    expected = shard_files(tmp_path / "whole")
    out = tmp_path / "killed"

    def run_until(condition):
        proc = subprocess.Popen(
            [sys.executable, "-m", "data_prep.main", *args, f"--output_dir={out}"],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        while proc.poll() is None and not condition():
            time.sleep(0.001)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL, "the job finished before the kill point"
        for name, data in shard_files(out).items():  # no final name ever holds a partial file
            assert data == expected[name], name
        assert not (out / "manifest.json").exists()

    units_dir = out / manifest.WORK_DIR / "units"
    run_until(
        lambda: units_dir.is_dir() and sum(n.endswith(".json") for n in os.listdir(units_dir)) >= 3
    )
    # Mid-way through writing a shard: its temporary file exists.
    run_until(
        lambda: (
            out.is_dir() and any(".tmp-" in n and n.startswith("train") for n in os.listdir(out))
        )
    )
    rc, _, err = cli(*args, f"--output_dir={out}")
    assert rc == 0, err
    assert shard_files(out) == expected and len(expected) == 41
    ours, theirs = (
        json.loads((d / "manifest.json").read_text()) for d in (out, tmp_path / "whole")
    )
    assert ours["shards"] == theirs["shards"] and ours["stats"] == theirs["stats"]


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_the_corpus(tmp_path, testdata, vocab_file):
    corpus = os.path.join(REPO, "examples", "data", "pydocs.txt")
    big = tmp_path / "pydocs10x.txt"
    big.write_bytes(open(corpus, "rb").read() * 10)
    peaks = {}
    for name, path in (("1x", corpus), ("10x", str(big))):
        # A fresh parent per run, so that its children's peak is this job's alone.
        probe = (
            "import resource, subprocess, sys; "
            "subprocess.run([sys.executable, '-m', 'data_prep.main', "
            f"'--input={path}', '--vocab_file={vocab_file}', '--output_dir={tmp_path / name}', "
            "'--dupe_factor=1', '--num_workers=1', '--progress=false'], check=True, "
            "stdout=subprocess.DEVNULL); "
            f"print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
        )
        out = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True
        )
        peaks[name] = int(out.stdout.strip())
    manifests = [json.loads((tmp_path / n / "manifest.json").read_text()) for n in ("1x", "10x")]
    assert manifests[1]["documents"] == 10 * manifests[0]["documents"]
    assert manifests[1]["stats"]["instances"] > 8 * manifests[0]["stats"]["instances"]
    print(f"peak RSS in KB: {peaks}")
    assert peaks["10x"] < 1.5 * peaks["1x"], peaks
