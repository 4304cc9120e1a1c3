"""The loop skeleton's decisions (bert_jax.training.loop), which both trainers follow: when a
periodic action is due, and when to save and stop. The loops themselves run in test_train,
test_faults and finetune/train/test_synthetic."""

import pytest

from bert_jax.training import loop


def test_itstime_every_n_steps_and_always_at_the_last():
    assert [s for s in range(1, 11) if loop.itstime(s, 3)] == [3, 6, 9]
    assert [s for s in range(1, 11) if loop.itstime(s, 3, last_step=10)] == [3, 6, 9, 10]
    assert [s for s in range(1, 11) if loop.itstime(s, 0, last_step=10)] == [10]  # 0: never
    assert not any(loop.itstime(s, 0) for s in range(1, 11))


def decide(step, asked=None, preempted=False, last_step=10, total=10, every=4):
    return loop.decide(
        step,
        last_step=last_step,
        total=total,
        checkpoint_every=every,
        asked=asked,
        preempted=preempted,
    )


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        ({"step": 3}, (None, False)),  # nothing due
        ({"step": 4}, (None, True)),  # a periodic save, and go on
        ({"step": 4, "every": 0}, (None, False)),  # checkpoint.every_steps=0: only at the end
        ({"step": 10}, ("done", True)),  # the schedule's end
        ({"step": 6, "last_step": 6}, ("stop_at_step", True)),  # train.stop_at_step
        ({"step": 3, "preempted": True}, ("preempted", True)),
        ({"step": 3, "asked": "target_reached"}, ("target_reached", True)),
        # A stop asked for by the eval wins over the others at the same step.
        ({"step": 10, "asked": "target_reached", "preempted": True}, ("target_reached", True)),
        ({"step": 6, "last_step": 6, "preempted": True}, ("preempted", True)),
    ],
)
def test_every_stop_saves_and_only_a_stop_ends_the_loop(kwargs, expected):
    assert decide(**kwargs) == expected


def test_step_timer_leaves_out_the_compiling_step_and_evals(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(loop.time, "time", lambda: now[0])
    timer = loop.StepTimer()
    assert timer.lap() is None  # nothing timed yet
    assert timer.stepped(metrics={}) is True  # the first step: it compiled
    now[0] += 1.0
    timer.stepped({}), timer.stepped({})
    assert timer.lap() == pytest.approx(0.5)
    now[0] += 3.0  # an eval...
    timer.pause()  # ...is not step time
    now[0] += 0.2
    timer.stepped({})
    assert timer.lap() == pytest.approx(0.2)
