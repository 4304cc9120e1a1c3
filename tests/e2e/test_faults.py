"""The trainer under faults: kill -9 at random moments, damaged checkpoints, NaN steps, and the
compile-only check for a 256-device mesh."""

import glob
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from bert_jax.data.contract import features as F
from bert_jax.data.contract import record_io
from bert_jax.data.input import pipeline
from bert_jax.training import checkpoints, metrics_log, pretrain
from support import jax_cache
from support.checkpoints import FLIPPED_PARAMS, assert_same_params, saved_steps
from support.golden import GOLDEN_128, GOLDEN_FLAGS, REPO, SAMPLE_128, small_config

# --- kill -9 ---------------------------------------------------------------------------------


def step_dirs(workdir) -> tuple[list[int], list[str]]:
    """(finished steps, names of unfinished saves) under <workdir>/checkpoints, as on disk."""
    directory = os.path.join(workdir, "checkpoints")
    names = os.listdir(directory) if os.path.isdir(directory) else []
    return sorted(int(n) for n in names if n.isdigit()), sorted(
        n for n in names if ".orbax-checkpoint-tmp" in n
    )


KILLS = 3  # each costs a run: ~10 s on 2 busy cores


@pytest.mark.slow
def test_kill_9_at_random_moments_always_resumes_from_a_complete_checkpoint(
    testdata, tmp_path, forkserver
):
    """SIGKILL at seeded-random moments (some right as a periodic async save starts), rerun each
    time: every rerun resumes from the newest finished step on disk, never from an unfinished
    save, and the run ends with the parameters of a run that was never killed. The first stop is
    a SIGTERM instead (a preemption notice, through the real signal handler): the run saves the
    step it is at, though no periodic save falls there, and exits 143."""
    steps, every = 30, 2
    args = [
        "--config=configs/tiny.py",
        f"--config.data.train_files={testdata / GOLDEN_128}",
        f"--config.train.num_train_steps={steps}",
        "--config.train.log_every_steps=1",
        f"--config.checkpoint.every_steps={every}",
        "--config.checkpoint.max_to_keep=2",
        "--config.checkpoint.async_save=true",
        "--config.mesh.num_devices=1",
        "--config.eval.every_steps=0",
        *GOLDEN_FLAGS,
    ]
    # The reruns compile the same step: share one persistent compilation cache between them, their
    # own (a kill can cut an entry), seeded with the suite's finished entries.
    jax_cache.seed(tmp_path / "jax_cache", os.environ["JAX_COMPILATION_CACHE_DIR"])
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "jax_cache")}

    def start(workdir):  # a real process, forked from one that has the imports done
        return forkserver.start(
            "bert_jax.main",
            [*args, f"--workdir={workdir}"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )

    reference = start(tmp_path / "reference")
    out = reference.communicate(timeout=600)[0]
    assert reference.returncode == 0, out[-3000:]

    rng = random.Random(20240611)
    workdir = str(tmp_path / "killed")
    resumed_from, killed_at, unfinished_seen = [], [], 0

    # A SIGTERM after step 3's line: saved where the run stopped (periodic saves: every 2 steps).
    proc = start(workdir)
    for line in proc.stdout:
        if line.startswith("step 3/"):
            proc.send_signal(signal.SIGTERM)
            break
    out = proc.communicate(timeout=600)[0]
    assert proc.returncode == 143 and "preempted: saved step" in out, out[-3000:]  # 128 + 15
    preempted = saved_steps(workdir)[-1]
    assert 3 <= preempted < steps and f"preempted: saved step {preempted};" in out, out[-3000:]

    while True:
        finished, unfinished = step_dirs(workdir)
        unfinished_seen += bool(unfinished)
        proc = start(workdir)
        lines = []
        # Kill a random number of steps past the second save of this run (the first one to
        # come may still be in flight at any moment, so the run moves on); half the time right as
        # the line of a checkpoint step appears (its async save starts next), else after a pause.
        target = (finished[-1] if finished else 0) + rng.randint(2 * every, 3 * every)
        at_save = rng.random() < 0.5
        for line in proc.stdout:
            lines.append(line)
            if len(killed_at) < KILLS and line.startswith("step "):
                step = int(line.split()[1].split("/")[0])
                if step >= target and (not at_save or step % every == 0):
                    if not at_save:
                        time.sleep(rng.uniform(0.0, 0.1))
                    proc.send_signal(signal.SIGKILL)
                    killed_at.append(step)
                    break
        lines.append(proc.communicate(timeout=600)[0] or "")
        text = "".join(lines)
        assert "damaged" not in text, text[-3000:]  # a finished step is always whole
        if finished:
            assert f"resuming from {workdir}/checkpoints/{finished[-1]}\n" in text, (
                finished,
                text[-3000:],
            )
            resumed_from.append(finished[-1])
        else:
            assert "resuming from" not in text
        if proc.returncode == 0:
            break
        assert proc.returncode == -signal.SIGKILL, text[-3000:]
    assert len(killed_at) == KILLS and len(resumed_from) >= KILLS
    print(
        f"killed after the lines of steps {killed_at}, resumed from steps {resumed_from}; "
        f"{unfinished_seen} kill(s) left an unfinished save behind"
    )
    assert step_dirs(workdir)[0][-1] == steps
    assert_same_params(workdir, str(tmp_path / "reference"))
    # The metrics log reads as one run: each step once, in order.
    logged = [r["step"] for r in metrics_log.read_jsonl(workdir) if r["split"] == "train"]
    assert logged == list(range(1, steps + 1))


# --- A damaged latest checkpoint -------------------------------------------------------------


def truncate(path: str) -> None:
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


DAMAGE = {
    # What a disk filling up, a copy cut short, a stray `rm` or a failing disk leaves.
    "truncated array data": lambda d, _: [
        truncate(p) for p in glob.glob(f"{d}/params/ocdbt.process_0/d/*")
    ],
    "missing metadata": lambda d, _: os.remove(f"{d}/params/_METADATA"),
    "truncated data position": lambda d, _: truncate(f"{d}/data_iter/process_0-of-1.json"),
    # Restores without an error in Orbax (NaNs and 3e38s in the word embeddings): the checksums.
    "flipped bytes in an array file": lambda d, flip_bytes: flip_bytes(d),
}


@pytest.fixture(scope="module")
def finished_run(testdata, tmp_path_factory):
    """8 steps saved at 3, 6 and 8, as pristine files to copy and damage."""
    workdir = str(tmp_path_factory.mktemp("finished"))
    config = small_config(testdata)
    config.data.eval_files = ""
    assert pretrain.train_and_evaluate(config, workdir)["step"] == 8
    assert saved_steps(workdir) == [3, 6, 8]
    return workdir, config


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_latest_checkpoint_falls_back_to_the_previous_one(
    finished_run, damage, tmp_path, capsys, flip_bytes
):
    pristine, config = finished_run
    workdir = str(tmp_path / "run")
    shutil.copytree(pristine, workdir)
    DAMAGE[damage](os.path.join(workdir, "checkpoints", "8"), flip_bytes)

    result = pretrain.train_and_evaluate(config, workdir)  # the same command again
    warning = "\n".join(
        line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: ")
    )
    assert "checkpoints/8 is damaged" in warning and "resuming from the older step 6" in warning, (
        warning
    )
    if damage == "flipped bytes in an array file":
        assert re.search(FLIPPED_PARAMS, warning), warning
    # Steps 7 and 8 were redone and step 8 saved again, with what the first run had at step 8;
    # the damaged files are kept aside for a post-mortem.
    assert result["step"] == 8 and saved_steps(workdir) == [3, 6, 8]
    assert os.path.isdir(os.path.join(workdir, "checkpoints", "8" + checkpoints.CORRUPT_SUFFIX))
    assert_same_params(workdir, pristine)


def test_no_readable_checkpoint_is_a_clear_error_and_moves_nothing(finished_run, tmp_path):
    pristine, config = finished_run
    workdir = str(tmp_path / "run")
    shutil.copytree(pristine, workdir)
    for step in (3, 6, 8):
        os.remove(os.path.join(workdir, "checkpoints", str(step), "params", "_METADATA"))
    with pytest.raises(
        ValueError, match=r"(?s)no checkpoint under .* can be restored.*step 8.*step 6.*step 3"
    ):
        pretrain.train_and_evaluate(config, workdir)
    assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["3", "6", "8"]


# --- A full disk ---------------------------------------------------------------------------

# What Orbax raised when a background save filled a 3 MB tmpfs (checked by hand; tests cannot
# mount one): TensorStore's error, reported by the next save.
ORBAX_DISK_FULL = (
    'RESOURCE_EXHAUSTED: Error writing "bert.embeddings.layer_norm.scale/0" in OCDBT database at '
    'local file ".../checkpoints/5.orbax-checkpoint-tmp/params.orbax-checkpoint-tmp/": Failed '
    "to write 116923 bytes to file 5: No space left on device [os_error_code='28']"
)


def test_a_full_disk_during_a_save_is_one_line_and_keeps_the_checkpoints(
    finished_run, tmp_path, monkeypatch
):
    import orbax.checkpoint as ocp

    from bert_jax import cli

    pristine, config = finished_run
    workdir = str(tmp_path / "run")
    shutil.copytree(pristine, workdir)
    shutil.rmtree(os.path.join(workdir, "checkpoints", "8"))  # resumes at 6, saves 8 at the end
    real_save = ocp.CheckpointManager.save

    def disk_full(self, step, *args, **kwargs):
        if step == 8:
            raise ValueError(ORBAX_DISK_FULL)
        return real_save(self, step, *args, **kwargs)

    monkeypatch.setattr(ocp.CheckpointManager, "save", disk_full)
    with pytest.raises(OSError) as failure:
        pretrain.train_and_evaluate(config, workdir)
    assert cli.message(failure.value) == (
        f"no space left on the device writing {workdir}/checkpoints: free some space and rerun "
        "the same command; finished work is kept"
    )
    assert saved_steps(workdir) == [3, 6]  # the earlier checkpoints are kept
    monkeypatch.setattr(ocp.CheckpointManager, "save", real_save)  # space freed: rerun
    assert pretrain.train_and_evaluate(config, workdir)["step"] == 8
    assert_same_params(workdir, pristine)


# --- Non-finite steps ------------------------------------------------------------------------

BAD_STEP = 4


@pytest.fixture(scope="module")
def poisoned_records(testdata, tmp_path_factory):
    """The golden records, one of them with NaN masked-LM weights (a NaN loss): the one that the
    input pipeline (seed 0, batches of 8) puts into step BAD_STEP's batch."""
    config = small_config(testdata)
    clean = iter(pipeline.train_dataset(config.data, 30522, 8, seed=0))
    victim = [next(clean) for _ in range(BAD_STEP)][-1][F.INPUT_IDS][0]
    path = str(tmp_path_factory.mktemp("poisoned") / "train.arrayrecord")
    with record_io.RecordWriter(path) as w:
        for r in record_io.read_records(str(testdata / GOLDEN_128)):
            ex = F.decode_example(r)
            if np.array_equal(ex[F.INPUT_IDS], victim):
                ex[F.MASKED_LM_WEIGHTS] = np.full_like(ex[F.MASKED_LM_WEIGHTS], np.nan)
            w.write(F.encode_example(ex))
    config.data.train_files = path
    poisoned = iter(pipeline.train_dataset(config.data, 30522, 8, seed=0))
    bad = [np.isnan(next(poisoned)[F.MASKED_LM_WEIGHTS]).any() for _ in range(8)]
    assert bad == [i == BAD_STEP - 1 for i in range(8)]  # exactly that step's batch
    return path


def nonfinite_config(testdata, poisoned_records, **overrides):
    config = small_config(testdata, **overrides)
    config.data.train_files = poisoned_records
    config.data.eval_files = ""
    return config


def test_skip_drops_the_bad_update_counts_it_and_goes_on(testdata, poisoned_records, tmp_path):
    workdir = str(tmp_path)
    config = nonfinite_config(testdata, poisoned_records, on_nonfinite="skip", stop_at_step=6)
    config.checkpoint.every_steps, config.checkpoint.max_to_keep = 1, 0  # a state after every step
    assert pretrain.train_and_evaluate(config, workdir)["stopped"] == "stop_at_step"

    manager = checkpoints.make_manager(workdir, read_only=True)
    setup = pretrain.make_setup(config)
    states = {
        s: jax.device_get(checkpoints.restore(manager, s, setup.abstract_state)) for s in (3, 4, 5)
    }
    manager.close()
    # Step 4's update was dropped: parameters and Adam moments as after step 3, the step counted.
    for (path, a), b in zip(
        jax.tree_util.tree_flatten_with_path(states[4]["params"])[0],
        jax.tree.leaves(states[3]["params"]),
    ):
        np.testing.assert_array_equal(a, b, err_msg=jax.tree_util.keystr(path))
    for a, b in zip(
        jax.tree.leaves(states[4]["opt_state"]), jax.tree.leaves(states[3]["opt_state"])
    ):
        np.testing.assert_array_equal(a, b)
    assert [int(states[s]["nonfinite_steps"]) for s in (3, 4, 5)] == [0, 1, 1]
    assert [int(states[s]["step"]) for s in (3, 4, 5)] == [3, 4, 5]
    # Step 5 trained again, from finite parameters.
    assert not any(
        np.array_equal(a, b)
        for a, b in zip(jax.tree.leaves(states[5]["params"]), jax.tree.leaves(states[4]["params"]))
    )
    assert all(np.isfinite(x).all() for x in jax.tree.leaves(states[5]["params"]))

    # The count survives a resume, and is in the metrics.
    config.train.stop_at_step = 0
    assert pretrain.train_and_evaluate(config, workdir)["stopped"] == "done"
    records = [r for r in metrics_log.read_jsonl(workdir) if r["split"] == "train"]
    assert [(r["step"], r["nonfinite_steps"]) for r in records] == [(2, 0), (4, 1), (6, 1), (8, 1)]
    assert np.isnan(records[1]["loss"])  # the window with the bad step says so


def test_stop_keeps_the_last_good_checkpoint_and_exits_nonzero(
    testdata, poisoned_records, tmp_path, capsys, monkeypatch
):
    """Through the binary (in-process): on_nonfinite defaults to 'stop'."""
    from absl import flags

    from bert_jax import main

    argv = [
        "main",
        f"--config={REPO}/configs/tiny.py",
        f"--workdir={tmp_path}",
        f"--config.data.train_files={poisoned_records}",
        "--config.data.read_threads=1",
        "--config.train.num_train_steps=8",
        "--config.train.log_every_steps=2",
        "--config.checkpoint.every_steps=3",
        "--config.mesh.num_devices=1",
        "--config.eval.every_steps=0",
        *GOLDEN_FLAGS,
    ]
    monkeypatch.setattr(sys, "argv", argv)  # config_flags finds the --config.* overrides there
    flags.FLAGS(argv)
    try:
        assert flags.FLAGS.config.train.on_nonfinite == "stop"
        with pytest.raises(SystemExit) as exit_info:
            main.main(argv[:1])
    finally:
        flags.FLAGS.unparse_flags()
    assert exit_info.value.code == 1
    out = capsys.readouterr().out
    assert (
        f"non-finite loss or gradients at step {BAD_STEP}: stopping without saving (the last "
        "checkpoint is step 3)" in out
    ), out
    assert "finished at step 4 (nonfinite)" in out
    assert saved_steps(str(tmp_path)) == [3]  # nothing saved after the bad step
    last = metrics_log.read_jsonl(str(tmp_path))[-1]
    assert last["step"] == BAD_STEP and last["nonfinite_steps"] == 1


# --- Compile-only check for a 256-device mesh ------------------------------------------------


@pytest.mark.slow
def test_bert_large_shapes_compile_for_256_devices_and_fsdp_splits_the_state(tmp_path):
    """BERT-Large's widths with 2 of its 24 layers (the whole model: python -m bert_jax.plan, about
    a minute per mesh), on 256 fake devices: fsdp splits the weights and weight-update sharding
    the rest over the data axis, so each device holds about 1/256 of the state."""
    out = tmp_path / "aot.json"
    # XLA_FLAGS asks for 8 devices here: the script must replace that with its 256.
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "bert_jax.plan",
            "--topology=cpu:256",
            "--steps=train",
            "--dtype=float32",
            "--num_layers=2",
            "--meshes=32x8x1,32x4x2",
            f"--json_out={out}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    fsdp8, tensor2 = json.loads(out.read_text())
    assert fsdp8["mesh"] == {"data": 32, "fsdp": 8, "tensor": 1}
    for r in (fsdp8, tensor2):
        # XLA's own plan agrees with the shardings: the state is the bulk of the arguments, and
        # the donated state is updated in place (aliased), not copied.
        assert r["state_bytes"] <= r["argument_bytes"] < 1.01 * r["state_bytes"]
        assert r["alias_bytes"] >= 0.99 * r["state_bytes"]
        assert r["temp_bytes"] > 0
        # Every array splits 8 ways by fsdp (x tensor) and up to 32 more by data (config.mesh.
        # shard_update), where a dimension divides: over 200 ways in all.
        assert 200 < r["total_state_bytes"] / r["state_bytes"] <= 256


# --- Signals: the save starts at the step after the signal -----------------------------------


def _signal_on_the_device_at(monkeypatch, signum: int, at: int, seconds_per_step: float) -> None:
    """Makes every train step take `seconds_per_step` on the device (a host callback the
    step's metrics depend on) and sends `signum` to this process while the device runs step
    `at`: the host, free to queue steps ahead, is then far ahead of the device, as on a slow
    CPU run or a TPU."""
    from jax.experimental import io_callback

    real = pretrain.jit_train_step

    def callback(step):
        time.sleep(seconds_per_step)
        if int(step) == at:
            os.kill(os.getpid(), signum)
        return np.float32(0)

    def slow_step(setup, grad_accum_steps=1):
        step_fn = real(setup, grad_accum_steps)

        @jax.jit
        def tap(state_step, loss):
            out = io_callback(callback, jax.ShapeDtypeStruct((), np.float32), state_step)
            return loss + 0.0 * out

        def fn(state, batch, lr):
            state, metrics = step_fn(state, batch, lr)
            return state, {**metrics, "loss": tap(state["step"], metrics["loss"])}

        return fn

    monkeypatch.setattr(pretrain, "jit_train_step", slow_step)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_saves_the_step_after_it_whatever_the_periods(
    testdata, tmp_path, monkeypatch, signum
):
    """A SIGTERM at step 355 of a CPU run was saved at step 390 (235 s later): the host had
    queued every step up to the next log line. Now the save is at step N or N+1 for a signal
    while the device runs step N, with log, eval and checkpoint periods far away."""
    at = 4
    before = signal.getsignal(signal.SIGINT)  # Python's, or ignored (a suite started with `&`)
    config = small_config(testdata, num_train_steps=40, log_every_steps=40)
    config.checkpoint.every_steps = 40
    config.eval.every_steps = 40
    _signal_on_the_device_at(monkeypatch, signum, at, seconds_per_step=0.05)
    out = pretrain.train_and_evaluate(config, str(tmp_path))
    assert out["stopped"] == ("interrupted" if signum == signal.SIGINT else "preempted")
    assert saved_steps(str(tmp_path)) == [out["step"]]
    assert out["step"] in (at, at + 1), out["step"]
    assert signal.getsignal(signal.SIGINT) is before  # handlers restored


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_while_the_run_starts_saves_its_first_step(
    testdata, tmp_path, monkeypatch, signum
):
    """A SIGTERM while the run restored and compiled (before the loop) killed it unannounced
    (exit -15). Now one handler covers the run from its checkpoint manager on, as fine-tuning's:
    the first step runs, is saved, and the run says so."""
    real = pretrain.jit_train_step

    def signalled(setup, accum):
        os.kill(os.getpid(), signum)
        return real(setup, accum)

    monkeypatch.setattr(pretrain, "jit_train_step", signalled)
    out = pretrain.train_and_evaluate(small_config(testdata, num_train_steps=8), str(tmp_path))
    assert out["stopped"] == ("interrupted" if signum == signal.SIGINT else "preempted")
    assert out["step"] == 1 and saved_steps(str(tmp_path)) == [1]


# --- Signals during an eval, a data wait and a checkpoint save -------------------------------


def _eval_batches_signal(monkeypatch, signum: int, at: int) -> list[int]:
    """Sends `signum` to this process from inside the `at`-th eval batch (counting from 1) of the
    run; returns the list the eval batches are counted in."""
    real, calls = pretrain.jit_eval_step, []

    def counted(setup):
        step = real(setup)

        def fn(params, batch):
            calls.append(1)
            if len(calls) == at:
                os.kill(os.getpid(), signum)
            return step(params, batch)

        return fn

    monkeypatch.setattr(pretrain, "jit_eval_step", counted)
    return calls


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_during_a_long_eval_saves_that_step_after_one_batch(
    finished_run, testdata, tmp_path, monkeypatch, signum
):
    """The issue's case: a SIGTERM (or a first Ctrl-C) during an eval of a large set was ignored
    until the eval ended (over 300 s), and the step's checkpoint came after the eval. Now the
    eval stops after the batch the signal came in, the step it evaluated is saved, and the
    rerun resumes from it to the parameters of a run never stopped (`finished_run`: the same
    training without eval), its log holding each eval once: step 4's, which the signal dropped,
    is done first (the rerun went on to step 5 without it)."""
    pristine, config = finished_run
    config = config.copy_and_resolve_references()
    config.data.eval_files = str(testdata / SAMPLE_128)  # 60 records
    config.eval.batch_size, config.eval.num_examples = 2, 0  # 30 batches an eval
    config.eval.every_steps = 4
    at = 5  # of the 30 batches of step 4's eval
    calls = _eval_batches_signal(monkeypatch, signum, at)
    workdir = str(tmp_path / "run")
    out = pretrain.train_and_evaluate(config, workdir)
    assert out["stopped"] == ("interrupted" if signum == signal.SIGINT else "preempted")
    assert out["step"] == 4 and saved_steps(workdir) == [3, 4]
    assert len(calls) == at  # not one batch more after the signal's
    assert not [r for r in metrics_log.read_jsonl(workdir) if r["split"] == "eval"]
    monkeypatch.undo()
    assert pretrain.train_and_evaluate(config, workdir)["stopped"] == "done"
    assert_same_params(workdir, pristine)
    logged = [(r["split"], r["step"]) for r in metrics_log.read_jsonl(workdir)]
    assert [step for split, step in logged if split == "eval"] == [4, 8], logged
    assert logged.index(("eval", 4)) < logged.index(("train", 6)), logged


def test_a_signal_during_the_last_steps_eval_is_evaluated_by_the_rerun(
    finished_run, testdata, tmp_path, monkeypatch
):
    """The same at the last step: its eval dropped, the step saved; the rerun, which has nothing
    to train, ended without that eval ("eval: {}", the log short of it). Now it evaluates the
    step first, once."""
    pristine, config = finished_run
    config = config.copy_and_resolve_references()
    config.data.eval_files = str(testdata / SAMPLE_128)  # 60 records
    config.eval.batch_size, config.eval.num_examples = 4, 0  # 15 batches an eval
    config.eval.every_steps = 4
    _eval_batches_signal(monkeypatch, signal.SIGTERM, 15 + 2)  # in step 8's eval
    workdir = str(tmp_path / "run")
    out = pretrain.train_and_evaluate(config, workdir)
    assert out["stopped"] == "preempted" and out["step"] == 8, out
    evals = [r["step"] for r in metrics_log.read_jsonl(workdir) if r["split"] == "eval"]
    assert evals == [4], evals
    monkeypatch.undo()
    again = pretrain.train_and_evaluate(config, workdir)
    assert again["stopped"] == "done" and again["eval"], again
    pretrain.train_and_evaluate(config, workdir)  # the finished run again: logs nothing new
    logged = [(r["split"], r["step"]) for r in metrics_log.read_jsonl(workdir)]
    assert [step for split, step in logged if split == "eval"] == [4, 8], logged
    assert_same_params(workdir, pristine)


def test_a_signal_during_a_data_wait_saves_the_step_the_data_was_for(
    finished_run, tmp_path, monkeypatch
):
    """A slow input (a bucket, a busy disk): the SIGTERM comes while the loop waits for step 5's
    batch; step 5 runs when its batch arrives, is saved, and the run stops."""
    pristine, config = finished_run
    real, served = pipeline.train_dataset, []

    def slow(*args, **kwargs):
        def wait(batch):
            served.append(1)
            if len(served) == 5:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.5)  # the handler runs first, inside this wait
            return batch

        return real(*args, **kwargs).map(wait)

    monkeypatch.setattr(pipeline, "train_dataset", slow)
    workdir = str(tmp_path / "run")
    out = pretrain.train_and_evaluate(config, workdir)
    assert out["stopped"] == "preempted" and out["step"] == 5
    assert saved_steps(workdir) == [3, 5]
    monkeypatch.undo()
    assert pretrain.train_and_evaluate(config, workdir)["stopped"] == "done"
    assert_same_params(workdir, pristine)


def test_a_signal_during_a_checkpoint_save_saves_the_next_step(finished_run, tmp_path, monkeypatch):
    """The SIGTERM arrives while step 3's checkpoint is being written: that save finishes, step
    4 runs and is saved, and the run stops."""
    pristine, config = finished_run
    real = checkpoints.save

    def signalled(manager, step, *args):
        if step == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        real(manager, step, *args)

    monkeypatch.setattr(checkpoints, "save", signalled)
    workdir = str(tmp_path / "run")
    out = pretrain.train_and_evaluate(config, workdir)
    assert out["stopped"] == "preempted" and saved_steps(workdir) == [3, 4]
    monkeypatch.undo()
    assert pretrain.train_and_evaluate(config, workdir)["stopped"] == "done"
    assert_same_params(workdir, pristine)
