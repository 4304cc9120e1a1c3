"""The training loop: accumulation, eval figures, exact resume, early stop, phase 2, the absl
main."""

import functools
import json
import os
import shutil
import subprocess

import jax
import numpy as np
import pytest

from bert_jax.data.contract import features as F
from bert_jax.data.input import pipeline
from bert_jax.training import checkpoints, losses, metrics_log, pretrain
from configs import tiny
from support import gradients
from support.checkpoints import saved_steps
from support.golden import GOLDEN_128, GOLDEN_FLAGS, golden_data, small_config


@pytest.fixture(scope="module")
def unmasked_records(testdata, tmp_path_factory, unmask_records):
    """The golden pydocs records with their masks undone: input for dynamic masking."""
    # Not named like a data_prep shard: a shard without its manifest.json is refused as a
    # half-written job's output (data/contract/test_data_facts).
    path = tmp_path_factory.mktemp("unmasked") / "unmasked.arrayrecord"
    return unmask_records(testdata / "pydocs_small.L128.P20.dupe2.tfrecord", path)


def test_gradient_accumulation_equals_the_large_batch(testdata):
    config = small_config(testdata)
    config.mesh.num_devices, config.mesh.data = 2, 2  # micro-batches split over a sharded batch
    setup = pretrain.make_setup(config)
    params = pretrain.jit_init(setup, seed=0)()["params"]
    batch = next(iter(pipeline.train_dataset(config.data, 30522, 16, seed=0)))
    rng = jax.random.PRNGKey(1)
    full_loss, full = gradients.loss_and_grads(setup, params, batch, rng, 1)
    acc_loss, acc = gradients.loss_and_grads(setup, params, batch, rng, 4)
    assert float(acc_loss) == pytest.approx(float(full_loss), rel=1e-5)
    for g, r in zip(jax.tree.leaves(acc), jax.tree.leaves(full)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-4, atol=1e-6)


def test_bfloat16_compute_keeps_float32_parameters_and_gradients(testdata):
    config = small_config(testdata)
    setup = pretrain.make_setup(config)
    config.model.dtype = "bfloat16"
    bf16 = pretrain.make_setup(config)
    params = pretrain.jit_init(setup, seed=0)()["params"]
    batch = next(iter(pipeline.train_dataset(config.data, 30522, 8, seed=0)))
    rng = jax.random.PRNGKey(0)
    losses_ = {}
    for name, s in (("f32", setup), ("bf16", bf16)):
        loss, grads = gradients.loss_and_grads(s, params, batch, rng)
        assert {g.dtype for g in jax.tree.leaves(grads)} == {np.dtype("float32")}
        losses_[name] = float(loss)
    assert losses_["bf16"] == pytest.approx(losses_["f32"], rel=2e-2)


def test_eval_figures_match_a_direct_computation(testdata):
    config = small_config(testdata)
    setup = pretrain.make_setup(config)
    params = pretrain.jit_init(setup, seed=0)()["params"]
    # 20 examples in batches of 16: the second batch is 4 real rows and 12 padding rows.
    batches = pipeline.eval_batches(config.data, config.data.eval_files, 30522, 16, num_examples=20)
    got = pretrain.evaluate(setup, pretrain.jit_eval_step(setup), params, batches)

    import flax.nnx as nnx

    model = nnx.merge(setup.graphdef, params)
    rows = {k: np.concatenate([b[k] for b in batches])[:20] for k in batches[0]}
    mlm_logits, nsp_logits = model(
        rows[F.INPUT_IDS], rows[F.INPUT_MASK], rows[F.SEGMENT_IDS], rows[F.MASKED_LM_POSITIONS]
    )
    w = rows[F.MASKED_LM_WEIGHTS]
    labels = rows[F.MASKED_LM_IDS]
    lp = jax.nn.log_softmax(np.asarray(mlm_logits, np.float64))
    nll = -np.take_along_axis(np.asarray(lp), labels[..., None], -1)[..., 0]
    right = np.asarray(mlm_logits).argmax(-1) == labels
    # What the model saw at each masked position: [MASK] (103), the answer, or another token.
    shown = np.take_along_axis(rows[F.INPUT_IDS], rows[F.MASKED_LM_POSITIONS], 1)
    kinds = {
        "": shown == 103,
        "_kept": shown == labels,
        "_random": (shown != 103) & (shown != labels),
    }
    kinds["_all"] = np.ones_like(w, bool)
    for suffix, where in kinds.items():
        kw = w * where
        assert kw.sum() > 0, suffix  # the golden records hold every kind
        assert got["mlm_loss" + suffix] == pytest.approx((nll * kw).sum() / kw.sum(), rel=1e-4)
        assert got["mlm_accuracy" + suffix] == pytest.approx(
            (right * kw).sum() / kw.sum(), abs=1e-9
        )
    nsp_labels = rows[F.NEXT_SENTENCE_LABELS].reshape(-1)
    nsp_right = np.asarray(nsp_logits).argmax(-1) == nsp_labels
    assert got["nsp_accuracy"] == pytest.approx(nsp_right.mean(), abs=1e-9)
    assert got["nsp_majority"] == pytest.approx(max(nsp_labels.mean(), 1 - nsp_labels.mean()))
    assert got.keys() == {
        *(f"mlm_{fig}{suffix}" for fig in ("loss", "accuracy") for suffix in kinds),
        "nsp_loss",
        "nsp_accuracy",
        "nsp_majority",
        "loss",
    }
    assert got["loss"] == pytest.approx(got["mlm_loss_all"] + got["nsp_loss"])
    assert losses.summarize  # the figures are losses.summarize's


@pytest.fixture(scope="module")
def uninterrupted(testdata, unmasked_records, tmp_path_factory):
    """8 steps on a 2x2x2 mesh with dropout and dynamic masking, never stopped."""
    workdir = str(tmp_path_factory.mktemp("uninterrupted"))
    config = resume_config(testdata, unmasked_records)
    result = pretrain.train_and_evaluate(config, workdir)
    return workdir, result


def resume_config(testdata, unmasked_records, **train_overrides):
    config = small_config(testdata, **train_overrides)
    config.data.train_files = unmasked_records
    config.data.dynamic_masking = True
    config.data.eval_files = ""
    config.mesh.num_devices = 0
    config.mesh.data, config.mesh.fsdp, config.mesh.tensor = 2, 2, 2
    assert config.model.hidden_dropout_prob > 0  # dropout draws from the saved RNG
    return config


def test_killed_and_resumed_run_ends_bit_identical(
    testdata, unmasked_records, uninterrupted, tmp_path
):
    reference_dir, reference = uninterrupted
    assert reference["stopped"] == "done" and reference["step"] == 8
    workdir = str(tmp_path)
    stopped = pretrain.train_and_evaluate(
        resume_config(testdata, unmasked_records, stop_at_step=5), workdir
    )
    assert stopped["stopped"] == "stop_at_step" and stopped["step"] == 5
    assert saved_steps(workdir) == [3, 5]
    # A kill after step 5 but before its save: the rerun must redo steps 4 and 5 from step 3.
    shutil.rmtree(os.path.join(workdir, "checkpoints", "5"))
    resumed = pretrain.train_and_evaluate(resume_config(testdata, unmasked_records), workdir)
    assert resumed["step"] == 8 and resumed["stopped"] == "done"

    got, _ = checkpoints.restore_params(workdir)
    want, _ = checkpoints.restore_params(reference_dir)
    for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(got)[0], jax.tree.leaves(want)):
        np.testing.assert_array_equal(
            np.asarray(a), np.asarray(b), err_msg=jax.tree_util.keystr(path)
        )
    # The metrics log reads as one run: no step logged twice after the redo of steps 4-5.
    steps = [r["step"] for r in metrics_log.read_jsonl(workdir) if r["split"] == "train"]
    assert steps == [2, 4, 6, 8]


def test_phase_two_starts_from_another_runs_parameters(testdata, uninterrupted, tmp_path):
    source, _ = uninterrupted
    config = small_config(testdata, num_train_steps=1, init_checkpoint=source)
    # Warmup's first step has rate 0 (a rate of 0 itself is a config error): the step leaves the
    # parameters as loaded.
    config.optim.learning_rate, config.optim.warmup_steps = 1e-3, 1
    result = pretrain.train_and_evaluate(config, str(tmp_path))
    assert result["step"] == 1  # a fresh step count, not the source's 8
    got, _ = checkpoints.restore_params(str(tmp_path))
    want, _ = checkpoints.restore_params(source)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_phase_two_continues_phase_ones_step_and_schedule(testdata, tmp_path, capsys):
    """The paper recipe: phase 1 (L=128) stops at step 5 of an 8-step schedule; phase 2 (L=512,
    its own records) takes phase 1's parameters, Adam moments and step, and runs steps 6-8."""
    from bert_jax.training import optim

    def config_for(phase: int, **overrides):
        config = small_config(testdata, log_every_steps=1, **overrides)
        config.model.max_position_embeddings = 512  # both phases: one parameter shape
        config.data.eval_files = ""
        if phase == 2:
            config.data.train_files = str(testdata / "pydocs_small.L512.P76.dupe1.wwm.tfrecord")
            config.data.max_seq_length, config.data.max_predictions_per_seq = 512, 76
            config.train.update(init_checkpoint=phase1, init_optimizer_state=True)
        return config

    phase1, phase2 = str(tmp_path / "phase1"), str(tmp_path / "phase2")
    assert pretrain.train_and_evaluate(config_for(1, stop_at_step=5), phase1)["step"] == 5
    # Preempted in phase 2 after its first step and rerun: it resumes from its own checkpoint.
    assert pretrain.train_and_evaluate(config_for(2, stop_at_step=6), phase2)["step"] == 6
    result = pretrain.train_and_evaluate(config_for(2), phase2)
    assert result["step"] == 8 and result["stopped"] == "done"
    assert f"resuming from {phase2}/checkpoints/6" in capsys.readouterr().out

    # The schedule goes on where phase 1 left it, neither restarted nor one step off: step s's
    # line shows the rate used for that update, schedule(s - 1).
    schedule = functools.partial(optim.rate, optim.schedule_values(config_for(1).optim, 8))
    lines = [
        r
        for r in metrics_log.read_jsonl(phase1) + metrics_log.read_jsonl(phase2)
        if r["split"] == "train"
    ]
    assert [r["step"] for r in lines] == [1, 2, 3, 4, 5, 6, 7, 8]
    for r in lines:
        assert r["learning_rate"] == pytest.approx(float(schedule(r["step"] - 1)), rel=1e-6), r[
            "step"
        ]
    assert (
        lines[5]["learning_rate"] < lines[4]["learning_rate"]
    )  # decaying, not a new warmup from 0
    # Phase 2 read its own records from their start: 3 batches, not phase 1's position + 3.
    with open(os.path.join(phase2, "checkpoints", "8", "data_iter", "process_0-of-1.json")) as f:
        assert json.load(f)["next_index"] == 3

    # A phase 2 schedule shorter than phase 1's step would end before its first step: an error.
    with pytest.raises(
        ValueError, match=r"ends at step 5, but train.num_train_steps=4.*counts both phases"
    ):
        pretrain.train_and_evaluate(config_for(2, num_train_steps=4), str(tmp_path / "short"))


def _tensorboard_tags(workdir) -> set[str]:
    from tensorboardX.proto import event_pb2

    from bert_jax.data.contract import record_io

    tags = set()
    for name in os.listdir(os.path.join(workdir, "tensorboard")):
        path = os.path.join(workdir, "tensorboard", name)
        for data in record_io.read_records(path, record_io.TFRECORD):
            tags.update(v.tag for v in event_pb2.Event.FromString(data).summary.value)
    return tags


def test_stops_when_held_out_accuracy_reaches_the_target(testdata, tmp_path, monkeypatch, capsys):
    """Also: the eval figures by kind of masked position, the NSP majority rate and the collapse
    check reach metrics.jsonl, TensorBoard and the progress line."""
    from bert_jax.training import collapse

    monkeypatch.setattr(collapse, "THRESHOLD", -1.0)  # every eval "collapsed": the warning's path
    config = small_config(testdata, num_train_steps=50)
    config.eval.every_steps = 2
    config.eval.target_mlm_accuracy = 0.01  # "the" alone beats this after a few steps
    config.optim.learning_rate = 5e-3
    result = pretrain.train_and_evaluate(config, str(tmp_path))
    assert result["stopped"] == "target_reached"
    # The target is MLPerf's metric: accuracy over all masked positions.
    assert result["eval"]["mlm_accuracy_all"] >= 0.01 and result["step"] < 50
    assert saved_steps(str(tmp_path))[-1] == result["step"]  # saved on stop
    evals = [r for r in metrics_log.read_jsonl(str(tmp_path)) if r["split"] == "eval"]
    assert evals[-1]["step"] == result["step"]
    assert all(0 <= r["nsp_accuracy"] <= 1 for r in evals)
    by_kind = {
        f"mlm_{f}{k}" for f in ("loss", "accuracy") for k in ("", "_kept", "_random", "_all")
    }
    eval_keys = by_kind | {"nsp_accuracy", "nsp_majority", "hidden_cosine"}
    assert all(eval_keys <= r.keys() for r in evals)
    assert all(0.5 <= r["nsp_majority"] <= 1 and -1 <= r["hidden_cosine"] <= 1 for r in evals)
    train_lines = [r for r in metrics_log.read_jsonl(str(tmp_path)) if r["split"] == "train"]
    assert by_kind <= train_lines[-1].keys()
    tags = _tensorboard_tags(str(tmp_path))
    assert {f"eval/{k}" for k in eval_keys} | {f"train/{k}" for k in by_kind} <= tags
    out, err = capsys.readouterr()
    assert err.count("warning: collapsed representations at step") == len(evals)
    assert "eval  step 2/50" in out and " (kept " in out and "(majority " in out


def test_config_errors_say_what_to_fix(testdata):
    from bert_jax.training import config_check

    config = small_config(testdata, global_batch_size=9)
    config.mesh.num_devices = 2
    with pytest.raises(ValueError, match="global_batch_size=9 must be divisible"):
        config_check.check_pretraining(config, num_devices=8)
    config = small_config(testdata)
    config.mesh.num_devices, config.mesh.tensor = 4, 4  # tiny has 2 heads
    with pytest.raises(ValueError, match="must divide num_attention_heads"):
        pretrain.make_setup(config)


def test_absl_main_runs_with_config_overrides(testdata, tmp_path, forkserver):
    args = [
        "--config=configs/tiny.py",
        f"--workdir={tmp_path}",
        f"--config.data.train_files={testdata / 'sample_text.L128.P20.dupe5.tfrecord'}",
        "--config.train.num_train_steps=3",
        "--config.train.global_batch_size=4",
        "--config.train.log_every_steps=1",
        "--config.mesh.num_devices=1",
        "--config.optim.learning_rate=0.25",
        "--config.optim.warmup_steps=0",
        "--config.optim.schedule=constant",
        *GOLDEN_FLAGS,
    ]
    status, out, err = forkserver.run("bert_jax.main", args, timeout=300)
    assert status == 0, err[-3000:]
    assert "finished at step 3 (done)" in out
    records = metrics_log.read_jsonl(str(tmp_path))
    assert [r["learning_rate"] for r in records] == [0.25, 0.25, 0.25]  # the override took effect
    assert os.listdir(tmp_path / "tensorboard")


@pytest.mark.slow
def test_two_processes_train_like_one(testdata, tmp_path, forkserver):
    """jax.distributed on localhost (gloo): 2 processes x 2 CPU devices == 1 process x 4 devices,
    with a SIGTERM to one process midway: both save the same step, and the rerun resumes."""
    import signal
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    steps = 10
    flags = [
        "--config=configs/tiny.py",
        f"--config.data.train_files={testdata / GOLDEN_128}",
        f"--config.train.num_train_steps={steps}",
        "--config.train.log_every_steps=1",
        "--config.checkpoint.every_steps=100",
        # Dropout masks follow a row's place in the global batch, which differs between the
        # layouts (process p holds rows p, p+2, ...); without dropout the steps are the same.
        "--config.model.hidden_dropout_prob=0",
        "--config.model.attention_probs_dropout_prob=0",
        f"--workdir={tmp_path / 'two'}",
        *GOLDEN_FLAGS,
    ]
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}

    def launch(sigterm_at_line=None):
        procs = [
            forkserver.start(
                "bert_jax.main",
                [
                    "--distributed",
                    f"--coordinator_address=localhost:{port}",
                    "--num_processes=2",
                    f"--process_id={i}",
                    *flags,
                ],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            for i in range(2)
        ]
        head = ""
        if sigterm_at_line:
            for line in procs[0].stdout:
                head += line
                if line.startswith(sigterm_at_line):
                    # To process 1 only: jax.distributed's preemption service tells process 0.
                    procs[1].send_signal(signal.SIGTERM)
                    break
        outs = [p.communicate(timeout=600)[0] for p in procs]
        want = [143, 143] if sigterm_at_line else [0, 0]  # preempted: 128 + SIGTERM
        assert [p.returncode for p in procs] == want, outs[0][-2000:] + outs[1][-2000:]
        return [head + outs[0], outs[1]]

    outs = launch(sigterm_at_line="step 2/")
    assert "preempted: saved step" in outs[0], outs[0][-2000:]
    saved = saved_steps(str(tmp_path / "two"))
    assert len(saved) == 1 and 2 <= saved[0] < steps  # one step, the same for both processes
    outs = launch()
    assert f"resuming from {tmp_path / 'two'}/checkpoints/{saved[0]}" in outs[0]
    assert (
        f"finished at step {steps}" in outs[0] and "finished at step" not in outs[1]
    )  # process 0 reports
    data_iter = tmp_path / "two" / "checkpoints" / str(steps) / "data_iter"
    assert sorted(os.listdir(data_iter)) == [
        "commit_success.txt",
        "process_0-of-2.json",
        "process_1-of-2.json",
    ]
    # Each process read only its own part: a batch per step of its slice of the record stream
    # (positions p, p+2, ... of the one global order: data/input/test_pipeline), half a global batch
    # each; the halves make the single process's batches, or the parameters below would differ.
    for p in range(2):
        assert json.loads((data_iter / f"process_{p}-of-2.json").read_text()) == {
            "next_index": steps
        }

    config = golden_data(tiny.get_config(), testdata)
    config.data.train_files = str(testdata / GOLDEN_128)
    config.train.num_train_steps, config.checkpoint.every_steps = steps, 100
    config.mesh.num_devices = 4
    config.model.hidden_dropout_prob = config.model.attention_probs_dropout_prob = 0.0
    pretrain.train_and_evaluate(config, str(tmp_path / "one"))
    got, _ = checkpoints.restore_params(str(tmp_path / "two"))
    want, _ = checkpoints.restore_params(str(tmp_path / "one"))
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
