"""Batch-size warmup by a growing gradient-accumulation count: its schedule, the growing batches
(the records of the unwarmed stream, in its order; exact resume), and a training run that steps
each size with its own compiled step, once per size, the right size after a resume."""

import numpy as np
import pytest

from bert_jax.data.contract import features as F
from bert_jax.data.input import growing_batches, pipeline
from bert_jax.training import optim, pretrain
from support.golden import small_config


@pytest.mark.parametrize("start, final", [(1, 2), (1, 4), (2, 6), (3, 3), (1, 9)])
@pytest.mark.parametrize("steps", [1, 2, 5, 12, 100])
def test_each_size_gets_equal_steps_and_the_full_batch_from_the_end_of_warmup(start, final, steps):
    warmup = optim.BatchWarmup(final, start, steps)
    counts = [warmup.count(s) for s in range(steps + 5)]
    assert counts[0] == (start if steps else final)
    assert counts == sorted(counts) and set(counts[steps:]) == {final}
    held = [counts[:steps].count(k) for k in range(start, final)]
    if held and steps >= final - start:  # every size gets its share: equal, to a step
        assert max(held) - min(held) <= 1 and sum(held) == steps, held


def test_batch_warmup_settings_are_checked():
    config = small_config()
    config.train.grad_accum_steps = 4
    assert optim.batch_warmup(config.train) is None  # 0 steps: off
    config.train.batch_warmup_steps, config.train.batch_warmup_start_accum = 10, 5
    with pytest.raises(ValueError, match="batch_warmup_start_accum=5"):
        optim.batch_warmup(config.train)
    config.train.batch_warmup_start_accum = 2
    assert optim.batch_warmup(config.train) == optim.BatchWarmup(4, 2, 10)


def test_growing_batches_hold_the_unwarmed_stream_and_resume_exactly(testdata):
    config = small_config(testdata)
    warmup = optim.BatchWarmup(final=4, start=1, steps=6)
    plain = iter(pipeline.train_dataset(config.data, 30522, 2, seed=3))
    warmed = pipeline.train_dataset(config.data, 30522, 8, seed=3, batch_warmup=warmup)
    it = iter(warmed)
    batches = [next(it) for _ in range(8)]
    assert [len(b[F.INPUT_IDS]) for b in batches] == [2 * warmup.count(s) for s in range(8)]
    stream = np.concatenate([b[F.INPUT_IDS] for b in batches])
    want = np.concatenate([next(plain)[F.INPUT_IDS] for _ in range(len(stream) // 2)])
    np.testing.assert_array_equal(stream, want)
    it = iter(warmed)
    for _ in range(3):
        next(it)
    state = it.get_state()
    again = iter(warmed)
    again.set_state(state)
    for s in range(3, 8):
        np.testing.assert_array_equal(next(again)[F.INPUT_IDS], batches[s][F.INPUT_IDS])
    late = iter(warmed)
    growing_batches.align(late, 6)  # a stage that starts at step 6: the full batch at once
    assert len(next(late)[F.INPUT_IDS]) == 8


def test_a_run_steps_each_size_with_its_own_step_and_resumes_at_the_right_size(
    testdata, tmp_path, monkeypatch, capsys
):
    compiled, stepped = [], []
    jit = pretrain.jit_train_step

    def recording(setup, grad_accum_steps=1):
        compiled.append(grad_accum_steps)
        step = jit(setup, grad_accum_steps)

        def run(state, batch, lr):
            stepped.append((grad_accum_steps, batch[F.INPUT_IDS].shape[0]))
            return step(state, batch, lr)

        return run

    monkeypatch.setattr(pretrain, "jit_train_step", recording)

    def config(**overrides):
        c = small_config(testdata, grad_accum_steps=2, batch_warmup_steps=2, **overrides)
        c.train.batch_warmup_start_accum = 1
        c.train.num_train_steps = 6
        c.data.eval_files = ""  # no eval step to compile
        c.checkpoint.every_steps = 100  # only where the first run stops
        return c

    warmup = optim.batch_warmup(config().train)
    first = pretrain.train_and_evaluate(config(stop_at_step=3), str(tmp_path))
    assert first["stopped"] == "stop_at_step" and first["step"] == 3
    resumed = pretrain.train_and_evaluate(config(), str(tmp_path))
    assert resumed["stopped"] == "done" and resumed["step"] == 6
    sizes = [warmup.count(s) for s in range(6)]
    assert sizes == [1, 1, 2, 2, 2, 2]
    assert stepped == [(k, 4 * k) for k in sizes]  # micro-batches of 8 / 2 rows
    # A step per size, made once per run (2, the full batch's, up front): the resumed run
    # (its data position restored) starts at the full batch.
    assert compiled == [2, 1, 2]
    # Rerun at its end (or with num_train_steps lowered below its step): no step, and it says so.
    capsys.readouterr()
    again = pretrain.train_and_evaluate(config(), str(tmp_path))
    assert again["step"] == 6 and len(stepped) == 6
    assert (
        f"nothing to train: {tmp_path} is at step 6, this run ends at step 6"
        in capsys.readouterr().out
    )
