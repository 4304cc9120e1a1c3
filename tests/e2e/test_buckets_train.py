"""The trainer's side of buckets (issue 21), against a real GCS server (fake-gcs-server, see
tests/support/fake_gcs.py): records and manifest read from gs://, a workdir in gs:// (checkpoints,
data positions, config, metrics.jsonl, TensorBoard), resume, a damaged step moved aside,
export / embed / --init from and to gs://. The runs under faults (the server stopped, 503s and
stalls, kill -9 during a save) are in tests/e2e/test_buckets_faults.py."""

import json
import os

import jax
import numpy as np
import pytest

from bert_jax import cli, storage
from bert_jax.data.contract import data_facts, shard_files
from bert_jax.data.input import pipeline
from bert_jax.training import checkpoints, metrics_log, pretrain
from support.buckets import VOCAB, upload, write_records
from support.checkpoints import saved_steps
from support.golden import small_config


@pytest.fixture(scope="module")
def data(gcs, testdata, tmp_path_factory):
    """(records in a bucket, the same records on local disk): data_prep directories whose
    manifests name the vocabulary in the bucket."""
    url = gcs.create_bucket("records-train") + "/wiki128"
    vocab_url = storage.join(url, "vocab.txt")
    storage.write_bytes(vocab_url, (testdata / VOCAB).read_bytes())
    local = write_records(tmp_path_factory.mktemp("records"), testdata, vocab_url)
    upload(local, url)
    return url, local


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache of local copies for this test (BERT_JAX_CACHE_DIR)."""
    directory = str(tmp_path / "cache")
    monkeypatch.setenv("BERT_JAX_CACHE_DIR", directory)
    return directory


def cached_files(cache_dir: str) -> dict[str, int]:
    out = {}
    for root, _, names in os.walk(cache_dir):
        for name in names:
            out[os.path.join(root, name)] = os.stat(os.path.join(root, name)).st_mtime_ns
    return out


def bucket_config(testdata, data_dir, eval_dir="", **train_overrides):
    config = small_config(testdata, **train_overrides)
    config.data.train_files = data_dir
    config.data.eval_files = eval_dir
    config.data.max_seq_length = config.data.max_predictions_per_seq = 0  # from the manifest
    config.data.vocab_file = ""  # the manifest's: in the bucket
    return config


# --- Records ---------------------------------------------------------------------------------


def test_shards_in_a_bucket_come_from_its_manifest_and_read_as_the_local_ones(data, cache):
    url, local = data
    shards = shard_files.find_shards(url, "train")
    assert shards.files == [
        f"{url}/train-00000-of-00002.arrayrecord",
        f"{url}/train-00001-of-00002.arrayrecord",
    ]
    assert shards.nbytes == [
        os.path.getsize(os.path.join(local, storage.basename(f))) for f in shards.files
    ]
    # A glob in the bucket picks among the listed shards, as on disk.
    assert shard_files.find_shards(f"{url}/train-00001-*", "train").files == shards.files[1:]

    def batches(files):
        cfg = data_facts.resolve(_config(files))
        it = iter(pipeline.train_dataset(cfg.data, 30522, 8, seed=3))
        return [next(it) for _ in range(3)]

    remote, there = batches(url), batches(local)
    for a, b in zip(remote, there):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    copies = cached_files(cache)
    # One local copy per shard (and the vocabulary), fetched once: a second pipeline reuses them.
    assert (
        sum(
            n.endswith(".arrayrecord") and f"{os.sep}{m[:16]}{os.sep}" in n
            for n in copies
            for m in shards.md5
        )
        == 2
    )
    batches(url)
    assert cached_files(cache) == copies


def _config(files, eval_files=""):
    from configs import default

    config = default.get_config()
    config.data.train_files, config.data.eval_files = files, eval_files
    config.data.read_threads = 1
    return config


def test_the_vocabulary_in_a_bucket_is_the_runs_and_is_checked(data, cache):
    url, _ = data
    resolved = data_facts.resolve(_config(url, url))
    assert resolved.data.vocab_file == f"{url}/vocab.txt"  # what the checkpoints will record
    assert resolved.data.vocab_size == 30522
    # An explicit vocabulary in the bucket that is not the records' is refused by md5.
    other = f"{url}-other/vocab.txt"
    storage.write_text(other, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nword\n")
    config = _config(url)
    config.data.vocab_file = other
    with pytest.raises(cli.UserError, match="not the vocabulary the records were tokenized with"):
        data_facts.resolve(config)


def test_a_shard_replaced_after_its_manifest_or_missing_is_refused_by_name(
    gcs, data, cache, testdata
):
    _, local = data
    copy = gcs.create_bucket("records-damaged") + "/wiki128"
    upload(local, copy)
    victim = f"{copy}/train-00001-of-00002.arrayrecord"
    storage.write_bytes(victim, storage.read_bytes(victim)[:-100])  # cut short, then published
    config = data_facts.resolve(_config(copy))
    with pytest.raises(cli.UserError, match=f"{victim} has md5 .* its manifest says"):
        pipeline.train_dataset(config.data, 30522, 8, seed=0)
    assert not any(".part-" in n for n in cached_files(cache))  # nothing half-fetched is kept
    storage.remove(victim)
    with pytest.raises(cli.UserError, match=f"{victim} is listed in .* but missing"):
        shard_files.find_shards(copy, "train")


def test_shards_in_a_bucket_without_a_manifest_are_an_unfinished_job(gcs, data, cache):
    _, local = data
    half = gcs.create_bucket("records-unfinished") + "/wiki128"
    storage.write_bytes(
        f"{half}/train-00000-of-00002.arrayrecord",
        open(os.path.join(local, "train-00000-of-00002.arrayrecord"), "rb").read(),
    )
    with pytest.raises(cli.UserError, match="its data_prep job has not finished"):
        shard_files.find_shards(half, "train")
    with pytest.raises(cli.UserError, match="its data_prep job has not finished"):
        shard_files.find_shards(f"{half}/train-*", "train")


# --- The metrics log -------------------------------------------------------------------------


def test_metrics_in_a_bucket_are_published_whole_and_a_resume_drops_redone_steps(bucket):
    workdir = f"{bucket}/run"
    log = metrics_log.MetricsLog(workdir, publish_every_s=3600)
    for step in (1, 2, 3):
        log.write(step, "train", {"loss": 10.0 - step})
    assert not storage.exists(f"{workdir}/metrics.jsonl")  # not yet due: kept in memory
    log.flush()  # what a checkpoint does
    assert [r["step"] for r in metrics_log.read_jsonl(workdir)] == [1, 2, 3]
    log.write(4, "train", {"loss": 6.0})
    log.close()
    assert [r["step"] for r in metrics_log.read_jsonl(workdir)] == [1, 2, 3, 4]
    events = storage.listdir(f"{workdir}/tensorboard")
    assert len(events) == 1 and events[0].startswith("events.out.tfevents")
    # A run resumed from step 2 drops what it will redo, before it logs anything.
    again = metrics_log.MetricsLog(workdir, resume_step=2, publish_every_s=0)
    assert [r["step"] for r in metrics_log.read_jsonl(workdir)] == [1, 2]
    again.write(3, "train", {"loss": 7.5})  # due at once (publish_every_s=0)
    assert metrics_log.read_jsonl(workdir)[-1] == {"step": 3, "split": "train", "loss": 7.5}
    again.close()
    assert len(storage.listdir(f"{workdir}/tensorboard")) == 2  # the earlier events file stays


# --- A run in a bucket -----------------------------------------------------------------------


def params_of(workdir):
    params, _ = checkpoints.restore_params(workdir)
    return jax.tree.leaves(jax.tree.map(np.asarray, params))


def test_a_run_in_a_bucket_resumes_and_matches_a_local_run(data, bucket, cache, testdata, tmp_path):
    url, local = data
    workdir = f"{bucket}/run"
    config = bucket_config(testdata, url, url, num_train_steps=6, stop_at_step=4)
    config.checkpoint.every_steps = 2
    config.eval.every_steps = 4
    config.eval.num_examples = 16
    out = pretrain.train_and_evaluate(config, workdir)
    assert (out["step"], out["stopped"]) == (4, "stop_at_step")
    assert saved_steps(workdir) == [2, 4]
    config.train.stop_at_step = 0
    assert pretrain.train_and_evaluate(config, workdir)["step"] == 6
    names = storage.listdir(f"{workdir}/checkpoints/6")
    assert {"params", "train", "data_iter", "config", "checksums", "commit_success.txt"} <= set(
        names
    )
    saved, _ = checkpoints.load_config(workdir)
    assert saved.data.vocab_file == f"{url}/vocab.txt"
    logged = [r["step"] for r in metrics_log.read_jsonl(workdir) if r["split"] == "train"]
    assert logged == [2, 4, 6]  # one run's log, though it ran twice
    assert storage.listdir(f"{workdir}/tensorboard")

    # The same records on local disk, a local workdir, never stopped: the same parameters.
    config = bucket_config(testdata, local, local, num_train_steps=6)
    config.checkpoint.every_steps = 2
    config.eval.every_steps = 4
    config.eval.num_examples = 16
    pretrain.train_and_evaluate(config, str(tmp_path / "local"))
    for a, b in zip(params_of(workdir), params_of(str(tmp_path / "local"))):
        np.testing.assert_array_equal(a, b)


@pytest.fixture(scope="module")
def bucket_run(gcs, data, testdata, tmp_path_factory):
    """A finished 4-step run whose data and workdir are in buckets, steps 2 and 4 saved."""
    os.environ.setdefault("BERT_JAX_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    url, _ = data
    workdir = gcs.create_bucket("bucket-run") + "/run"
    config = bucket_config(testdata, url, num_train_steps=4)
    config.checkpoint.every_steps = 2
    assert pretrain.train_and_evaluate(config, workdir)["step"] == 4
    return workdir, config


def test_a_damaged_step_in_a_bucket_is_moved_aside_and_the_run_goes_on(gcs, bucket_run, capsys):
    pristine, config = bucket_run
    workdir = gcs.create_bucket("damaged-step") + "/run"
    storage._fs(pristine).copy(pristine, workdir, recursive=True)
    storage.remove(f"{workdir}/checkpoints/4/params/_METADATA")  # a copy cut short
    config = config.copy_and_resolve_references()
    config.train.num_train_steps = 6
    assert pretrain.train_and_evaluate(config, workdir)["step"] == 6
    out, err = capsys.readouterr()
    assert f"resuming from {workdir}/checkpoints/2\n" in out
    assert "warning: checkpoint " in err and "is damaged and was moved to" in err
    names = storage.listdir(f"{workdir}/checkpoints")
    assert {"2", "4", "6", "4.corrupt"} <= set(names)
    # What was moved aside carries no commit marker: it can never pass for a finished step.
    assert "commit_success.txt" not in storage.listdir(f"{workdir}/checkpoints/4.corrupt")
    assert saved_steps(workdir) == [2, 4, 6]


def test_export_embed_and_init_read_a_bucket_and_export_to_one(bucket_run, tmp_path, monkeypatch):
    import transformers

    from bert_jax import embed, export
    from bert_jax.hf import publish
    from bert_jax.training import pretrained

    workdir, _ = bucket_run
    out = f"{workdir}-export"
    assert export.export(workdir, out)["step"] == 4
    export.export(workdir, str(tmp_path / "local"))
    assert sorted(storage.listdir(out)) == sorted(os.listdir(tmp_path / "local"))
    for name in set(os.listdir(tmp_path / "local")) - {publish.MARKER}:  # its time differs
        assert storage.read_bytes(f"{out}/{name}") == (tmp_path / "local" / name).read_bytes(), name
    # transformers reads the export (from the local copy storage.local_dir makes of it).
    model = transformers.BertForPreTraining.from_pretrained(storage.local_dir(out))
    assert model.config.num_hidden_layers == 2

    # An export over an earlier one of ours replaces it whole: a file only the older one had
    # goes; a file we did not write is refused, never deleted. An export that fails midway
    # leaves no config.json, so nothing loads a mix of two models.
    marker = json.loads(storage.read_text(f"{out}/.bert_jax_export.json"))
    assert marker["complete"] and "model.safetensors" in marker["files"]
    storage.write_bytes(f"{out}/pytorch_model.bin", b"an older export's weights")
    marker["files"].append("pytorch_model.bin")
    storage.write_text(f"{out}/.bert_jax_export.json", json.dumps(marker))
    export.export(workdir, out, step=2)
    assert "pytorch_model.bin" not in storage.listdir(out)
    storage.write_bytes(f"{out}/notes.txt", b"the user's own file")
    with pytest.raises(cli.UserError, match=r"holds files that are not an export of ours \(notes"):
        export.export(workdir, out)
    storage.remove(f"{out}/notes.txt")
    real_open_write = storage.open_write

    def failing(path, mode="wb"):
        if path.endswith("vocab.txt"):
            raise OSError("the upload failed")
        return real_open_write(path, mode)

    monkeypatch.setattr(storage, "open_write", failing)
    with pytest.raises(OSError, match="the upload failed"):
        export.export(workdir, out)
    monkeypatch.undo()
    assert "config.json" not in storage.listdir(out)
    with pytest.raises(ValueError, match=r"has no config.json.* an export to it was cut short"):
        pretrained.load(out)
    export.export(workdir, out)

    # embed and fine-tuning's --init take the workdir or the export in the bucket alike.
    from_workdir, from_export = pretrained.load(workdir), pretrained.load(out)
    assert from_export.vocab_to_record == f"{out}/vocab.txt"
    for a, b in zip(jax.tree.leaves(from_workdir.params), jax.tree.leaves(from_export.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    texts = ["a text in a bucket", "another"]
    for model_dir in (workdir, out):
        bert, tok = embed.load_encoder(model_dir)
        vectors = embed.embed_texts(bert, tok, texts, 16, 2)
        embed._save_npz(f"{out}-embed/vectors.npz", vectors)
        with storage.open_read(f"{out}-embed/vectors.npz") as f:
            np.testing.assert_array_equal(np.load(f)["pooled"], vectors["pooled"])


def test_fine_tuning_from_and_into_buckets(gcs, tmp_path):
    """--init, the data files, the workdir (checkpoints, metrics, predictions, export) all in a
    bucket: the same predictions and exported weights as the same run on local files."""
    from safetensors.numpy import load_file

    from bert_jax.finetune import train as finetune
    from support.finetune_data import make_config, save_tiny_hf, sst2_file

    local_hf = save_tiny_hf(tmp_path)
    files = {
        name: sst2_file(tmp_path / f"{name}.tsv", n, seed)
        for name, n, seed in (("train", 64, 0), ("dev", 32, 1), ("test", 32, 2))
    }
    bucket = gcs.create_bucket("finetune-sst2")
    upload(local_hf, f"{bucket}/hf")
    remote = {}
    for name, path in files.items():
        remote[name] = f"{bucket}/glue/{name}.tsv"
        storage.write_bytes(remote[name], open(path, "rb").read())

    def run(data, init, workdir):
        config = make_config(
            format="glue",
            layout="sst2",
            train_file=data["train"],
            eval_files=data["dev"],
            test_file=data["test"],
        )
        config.train.num_epochs = 1.0
        config.export = True
        return finetune.finetune(config, workdir, init)

    here = run(files, local_hf, str(tmp_path / "work"))
    there = run(remote, f"{bucket}/hf", f"{bucket}/work")
    assert there["eval"] == here["eval"]
    assert there["predictions"] == f"{bucket}/work/predictions/test.tsv"
    assert storage.read_text(there["predictions"]) == open(here["predictions"]).read()
    assert there["export"] == f"{bucket}/work/export"
    exported = load_file(storage.local_dir(there["export"]) + "/model.safetensors")
    for name, value in load_file(here["export"] + "/model.safetensors").items():
        np.testing.assert_array_equal(exported[name], value, err_msg=name)
    assert [r["step"] for r in metrics_log.read_jsonl(f"{bucket}/work")] == [
        r["step"] for r in metrics_log.read_jsonl(str(tmp_path / "work"))
    ]
