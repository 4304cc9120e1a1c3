"""Issue 21's end-to-end run, every path in a bucket, each stage its own command as a user types it:
data_prep a corpus from a bucket into a bucket, pre-train tiny from those records into a bucket
workdir, kill -9 it after a checkpoint, rerun the same command (it resumes and ends bit-identical
to an uninterrupted run), export from the bucket workdir to a bucket, load the export with
transformers (same predictions as our model), and fine-tune from the bucket export with the task
files, the workdir and the fine-tuned export in the bucket. Against fake-gcs-server (conftest)."""

import signal

import jax
import numpy as np
import pytest

from bert_jax import storage
from bert_jax.training import checkpoints
from support.checkpoints import saved_steps
from support.processes import finish

STEPS, EVERY = 12, 4

pytestmark = pytest.mark.slow


def command(module: str, *args: str) -> list[str]:
    return [module, *args]


def run(server, cmd: list[str], kill_at: str | None = None) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `python -m cmd...`, a real process forked by the suite's
    fork server (support/forkrun.py); with `kill_at`, SIGKILL as soon as a stdout line starts
    with it."""
    proc = server.start(cmd[0], cmd[1:])

    def on_line(line):
        if kill_at and line.startswith(kill_at):
            proc.send_signal(signal.SIGKILL)

    out, err = finish(proc, on_line)
    return proc.returncode, out, err


def ok(result) -> str:
    status, out, err = result
    assert status == 0, out[-2000:] + err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    return out


def train(workdir: str, records: str, cache: str) -> list[str]:
    return command(
        "bert_jax.main",
        "--config=configs/tiny.py",
        f"--workdir={workdir}",
        f"--config.data.train_files={records}",
        f"--config.data.eval_files={records}",
        f"--config.data.cache_dir={cache}",
        f"--config.train.num_train_steps={STEPS}",
        "--config.train.log_every_steps=1",
        f"--config.checkpoint.every_steps={EVERY}",
        "--config.eval.every_steps=0",
        "--config.mesh.num_devices=1",
        # Synchronous saves: when the kill comes, step EVERY's checkpoint is in the bucket, so the
        # rerun shows a resume (an asynchronous one may still be uploading; test_buckets_faults
        # kills during such an upload).
        "--config.checkpoint.async_save=false",
    )


def test_data_prep_train_kill_resume_export_and_fine_tune_all_in_a_bucket(
    bucket, testdata, tmp_path, forkserver
):
    import transformers

    from bert_jax.training import pretrained

    corpus, vocab = f"{bucket}/corpus/pydocs_small.txt", f"{bucket}/vocab.txt"
    storage.write_bytes(corpus, (testdata / "pydocs_small.txt").read_bytes())
    storage.write_bytes(vocab, (testdata / "bert-base-uncased-vocab.txt").read_bytes())
    records = f"{bucket}/records"
    ok(
        run(
            forkserver,
            command(
                "data_prep.main",
                f"--input={bucket}/corpus/*.txt",
                f"--vocab_file={vocab}",
                f"--output_dir={records}",
                "--dupe_factor=1",
                "--eval_fraction=0.05",
            ),
        )
    )
    assert "verify: OK" in ok(
        run(forkserver, command("data_prep.main", "--verify", f"--output_dir={records}"))
    )

    # The same run uninterrupted (its workdir in the bucket too) and killed after a save.
    cache = str(tmp_path / "cache")
    ok(run(forkserver, train(f"{bucket}/reference", records, cache)))
    workdir = f"{bucket}/run"
    status, out, _ = run(forkserver, train(workdir, records, cache), kill_at=f"step {EVERY + 2}/")
    assert status == -signal.SIGKILL and f"step {STEPS}/" not in out
    assert saved_steps(workdir) == [EVERY]
    out = ok(run(forkserver, train(workdir, records, cache)))
    assert f"resuming from {workdir}/checkpoints/{EVERY}" in out and f"step {STEPS}/{STEPS}" in out
    got, _ = checkpoints.restore_params(workdir)
    want, _ = checkpoints.restore_params(f"{bucket}/reference")
    for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(got)[0], jax.tree.leaves(want)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), jax.tree_util.keystr(path))

    # Export from the bucket workdir to the bucket; transformers loads it and predicts as we do.
    export = f"{bucket}/export"
    ok(
        run(
            forkserver, command("bert_jax.export", f"--workdir={workdir}", f"--output_dir={export}")
        )
    )
    theirs = transformers.BertForPreTraining.from_pretrained(storage.local_dir(export)).eval()
    ours = pretrained.load(workdir)
    ids = np.array([[101, 7592, 2088, 103, 1012, 102]])
    import torch

    with torch.no_grad():
        want_logits = theirs(torch.tensor(ids)).prediction_logits.numpy()
    bert = ours.model()
    got_logits = np.asarray(
        bert(
            ids,
            np.ones_like(ids),
            np.zeros_like(ids),
            masked_lm_positions=np.arange(ids.shape[1])[None],
        )[0]
    )
    np.testing.assert_allclose(got_logits, want_logits, atol=1e-4)

    # Fine-tuning from the bucket export, its files, workdir and export in the bucket.
    lines = ["sentence\tlabel"] + [
        f"{'a good film' if i % 2 else 'a bad film'} number {i}\t{i % 2}" for i in range(64)
    ]
    storage.write_text(f"{bucket}/sst2/train.tsv", "\n".join(lines) + "\n")
    ok(
        run(
            forkserver,
            command(
                "bert_jax.finetune",
                "--config=configs/finetune/sst2.py",
                f"--init={export}",
                f"--workdir={bucket}/sst2-run",
                f"--config.data.train_file={bucket}/sst2/train.tsv",
                f"--config.data.eval_files={bucket}/sst2/train.tsv",
                "--config.data.max_seq_length=16",
                "--config.train.batch_size=16",
                "--config.train.num_epochs=1",
                "--config.mesh.num_devices=1",
            ),
        )
    )
    fine_tuned = f"{bucket}/sst2-run/export"
    assert {"config.json", "model.safetensors", "vocab.txt"} <= set(storage.listdir(fine_tuned))
    transformers.BertForSequenceClassification.from_pretrained(storage.local_dir(fine_tuned))
