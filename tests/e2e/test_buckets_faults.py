"""Training with its data and workdir in a bucket while the bucket misbehaves, on a real GCS
server (fake-gcs-server): the server stopped for a few seconds, stopped for good, answering 503s
and stalling (tests/support/flaky_proxy.py), and the trainer killed with SIGKILL during a save.
Every run must end with the parameters of a run that saw none of it, or stop with one `error:` line
and resume from the last finished checkpoint when rerun.

Each test starts the trainer as a binary (the faults hit a process that does not know about
them), sharing the session's compilation cache; 9 steps of configs/tiny.py, saved every 3.

fake-gcs-server forgets its resumable-upload sessions when it is restarted (GCS keeps them for a
week), so a server stop that falls inside an upload fails that upload on this server only. The
stop-and-start test therefore saves synchronously and stops the server between saves, and the
save that starts during the outage is retried from its first request; a stall or 503s in the
middle of uploads are the proxy test's.
"""

import os
import signal
import time

import pytest

from bert_jax import storage
from bert_jax.training import metrics_log
from support.buckets import upload, write_records
from support.checkpoints import assert_same_params, saved_steps
from support.flaky_proxy import FlakyProxy
from support.processes import finish

pytestmark = pytest.mark.slow

STEPS, EVERY = 9, 3


@pytest.fixture(scope="module")
def data_url(gcs, testdata, tmp_path_factory):
    url = gcs.create_bucket("faults-data") + "/wiki128"
    vocab_url = storage.join(url, "vocab.txt")
    storage.write_bytes(vocab_url, (testdata / "bert-base-uncased-vocab.txt").read_bytes())
    return upload(write_records(tmp_path_factory.mktemp("records"), testdata, vocab_url), url)


@pytest.fixture(scope="module")
def trainer(forkserver):
    """start(workdir, data_url, cache_dir, *flags, env=None) -> the running trainer (a Child of
    the suite's fork server, support/forkrun.py: a real process without the imports' start)."""

    def trainer(workdir, data_url, cache_dir, *flags, env=None):
        args = [
            "--config=configs/tiny.py",
            f"--config.data.train_files={data_url}",
            f"--config.data.cache_dir={cache_dir}",
            f"--config.train.num_train_steps={STEPS}",
            "--config.train.global_batch_size=8",
            "--config.train.log_every_steps=1",
            f"--config.checkpoint.every_steps={EVERY}",
            "--config.mesh.num_devices=1",
            "--config.eval.every_steps=0",
            f"--workdir={workdir}",
            *flags,
        ]
        # The retry budget (storage.RETRY_S, a minute) is what a lasting outage waits out before
        # its error line: 5 s here, which a short outage (4 s) still rides through.
        env = {**os.environ, "BERT_JAX_STORAGE_RETRY_S": "5", **(env or {})}
        return forkserver.start("bert_jax.main", args, env=env)

    return trainer


def at_step(n: int, action):
    """An on_line callback running `action` once, when the line of step `n` appears."""
    done = []

    def on_line(line):
        if not done and line.startswith(f"step {n}/"):
            done.append(True)
            action()

    return on_line


@pytest.fixture(scope="module")
def reference(gcs, data_url, tmp_path_factory, trainer):
    """A run that saw no fault (data and workdir in the bucket)."""
    workdir = gcs.create_bucket("faults-reference") + "/run"
    out, err = finish(trainer(workdir, data_url, tmp_path_factory.mktemp("cache")))
    assert f"step {STEPS}/{STEPS}" in out, err[-3000:]
    return workdir


def assert_one_run_logged(workdir):
    logged = [r["step"] for r in metrics_log.read_jsonl(workdir) if r["split"] == "train"]
    assert logged == list(range(1, STEPS + 1))


def test_an_outage_is_waited_out_and_a_lasting_one_is_one_error_line_then_a_rerun_resumes(
    gcs, bucket, data_url, reference, tmp_path, trainer
):
    workdir = f"{bucket}/run"
    cache = tmp_path / "cache"

    def outage():
        gcs.stop()
        time.sleep(4)  # the step-6 save starts meanwhile: gcsfs and TensorStore retry it
        gcs.start()

    def on_line(line):
        if line.startswith("step 5/"):
            outage()
        elif line.startswith("step 8/"):
            gcs.stop()  # and not started again: retries spent, the run must stop cleanly

    proc = trainer(workdir, data_url, cache, "--config.checkpoint.async_save=false")
    try:
        out, err = finish(proc, on_line)
    finally:
        gcs.stop()
        gcs.start()
    assert proc.returncode != 0, out[-2000:]
    assert "step 8/" in out and "finished at step" not in out
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "did not serve the request after its retries" in errors[0], err
    assert "Traceback" not in err, err[-3000:]
    # The rerun goes on from the last finished save (6: it was made during the first outage).
    assert saved_steps(workdir) == [3, 6]
    out, err = finish(trainer(workdir, data_url, cache))
    assert f"resuming from {workdir}/checkpoints/6\n" in out, err[-3000:]
    assert f"step {STEPS}/{STEPS}" in out
    assert_same_params(workdir, reference)
    assert_one_run_logged(workdir)


def test_503s_and_stalls_are_retried_through_and_change_nothing(
    gcs, bucket, data_url, reference, tmp_path, trainer
):
    proxy = FlakyProxy(gcs.url, seed=7)
    proxy.fail_rate = 0.05  # every request: the shard fetches, uploads, Orbax's and ours
    workdir = f"{bucket}/run"
    env = {"STORAGE_EMULATOR_HOST": proxy.url, "TENSORSTORE_GCS_HTTP_URL": proxy.url}
    try:
        proc = trainer(workdir, data_url, tmp_path / "cache", env=env)
        _, err = finish(proc, at_step(4, lambda: proxy.stall_next(3, seconds=3)))
    finally:
        proxy.close()
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err and "error:" not in err, err[-3000:]
    print(f"{proxy.injected} faults injected into {proxy.requests} requests")
    assert proxy.injected >= 10
    assert_same_params(workdir, reference)
    assert_one_run_logged(workdir)


def test_kill_9_during_a_save_to_a_bucket_resumes_from_the_last_finished_step(
    bucket, data_url, reference, tmp_path, trainer
):
    workdir = f"{bucket}/run"
    cache = tmp_path / "cache"
    proc = trainer(workdir, data_url, cache, "--config.checkpoint.async_save=true")
    # A save here takes seconds, a step a fraction of one: save(6) first waits for step 3's
    # save to finish, then starts its own in the background, and step 7 runs while it writes.
    out, _ = finish(proc, at_step(7, lambda: proc.send_signal(signal.SIGKILL)))
    assert proc.returncode == -signal.SIGKILL
    finished = saved_steps(workdir)
    assert finished in ([3], [3, 6])
    print(
        f"killed with steps {finished} finished; under checkpoints/: "
        f"{storage.listdir(workdir + '/checkpoints')}"
    )
    out, err = finish(trainer(workdir, data_url, cache))
    assert f"resuming from {workdir}/checkpoints/{finished[-1]}\n" in out, err[-3000:]
    assert "damaged" not in out + err
    assert f"step {STEPS}/{STEPS}" in out
    assert_same_params(workdir, reference)
    assert_one_run_logged(workdir)


def test_a_lasting_outage_during_asynchronous_saves_is_one_error_line(
    gcs, bucket, data_url, tmp_path, trainer
):
    """Every request answered 503 from step 7 on, while step 6 is being saved in the background
    (the default): Orbax's writer threads log each failure with its traceback, which must not
    reach the user; the save's error does, as one line."""
    proxy = FlakyProxy(gcs.url)
    workdir = f"{bucket}/run"
    env = {"STORAGE_EMULATOR_HOST": proxy.url, "TENSORSTORE_GCS_HTTP_URL": proxy.url}
    try:
        proc = trainer(workdir, data_url, tmp_path / "cache", env=env)
        out, err = finish(proc, at_step(7, lambda: setattr(proxy, "fail_rate", 1.0)))
    finally:
        proxy.close()
    assert proc.returncode == 2, out[-2000:] + err[-3000:]
    assert "finished at step" not in out
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "after its retries" in errors[0], err[-3000:]
    assert "Traceback" not in err, err[-5000:]
    assert saved_steps(workdir) == [3]
