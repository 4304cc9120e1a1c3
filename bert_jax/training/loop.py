"""The training loop both trainers run: after each step the periodic actions, then one decision
on saving and stopping (`decide`); what a trainer logs or scores is its callbacks'.
docs/training.md, "The loop and why it stopped".
"""

import contextlib
import dataclasses
import time
from collections.abc import Callable

import jax
import numpy as np
from jax.experimental import multihost_utils

from bert_jax.model import sharding
from bert_jax.training import checkpoints, faults, metrics_log


def itstime(step: int, every: int, last_step: int | None = None) -> bool:
    """Whether an action every `every` steps (0: never) is due after `step`, or at `last_step`."""
    return (every > 0 and step % every == 0) or step == last_step


def _eval_logged(log: metrics_log.MetricsLog, step: int) -> bool:
    """Whether the log holds the eval at `step`, told by process 0 (which keeps it) to all."""
    logged = log.evaluated(step)
    if jax.process_count() > 1:
        logged = bool(multihost_utils.broadcast_one_to_all(np.int32(logged)))
    return logged


def decide(
    step: int,
    *,
    last_step: int,
    total: int,
    checkpoint_every: int,
    asked: str | None,
    preempted: bool,
) -> tuple[str | None, bool]:
    """(why to stop after `step`, or None; whether to save now: at every stop it reaches)."""
    stopped = asked or ("preempted" if preempted else None)
    if stopped is None and step == last_step:
        stopped = "done" if step == total else "stop_at_step"
    return stopped, stopped is not None or itstime(step, checkpoint_every)


def mean_metrics(history: list[dict]) -> dict[str, float]:
    """The steps' metrics averaged, but for running counts, which take the last step's value."""
    values = jax.device_get(history)
    out = {k: float(np.mean([h[k] for h in values])) for k in values[0]}
    out["nonfinite_steps"] = float(values[-1]["nonfinite_steps"])
    return out


class StepTimer:
    """Seconds per step since the last `lap`, without the run's first step (it compiles) or the
    time from `pause` to the next step (an eval)."""

    def __init__(self):
        self._start: float | None = None
        self._steps = 0

    def stepped(self, metrics) -> bool:
        """Counts a step; True after the run's first, which it waits for."""
        if self._start is None:
            jax.block_until_ready(metrics)
            self._start = time.time()
            return True
        self._steps += 1
        return False

    def lap(self) -> float | None:
        per_step = (time.time() - self._start) / self._steps if self._steps else None
        self.pause()
        return per_step

    def pause(self) -> None:
        if self._start is not None:
            self._start, self._steps = time.time(), 0


@dataclasses.dataclass
class Outcome:
    state: dict
    step: int
    stopped: str
    train: dict[str, float]  # the last log line's figures


class Loop:
    """A trainer's loop; its callbacks write to `log` and `progress`, which the trainer closes."""

    def __init__(self, workdir, config, setup, manager, data_iter, step: int, total: int):
        primary = jax.process_index() == 0
        self.log = metrics_log.MetricsLog(workdir, enabled=primary, resume_step=step)
        self.progress = metrics_log.Progress(total, step, enabled=primary)
        self.config, self.setup, self.manager, self.data_iter = config, setup, manager, data_iter
        self.step, self.total = step, total

    def run(
        self,
        state: dict,
        *,
        last_step: int,
        train_step: Callable[[dict, dict], tuple[dict, dict]],
        train_figures: Callable[[dict, float | None], dict] = lambda means, step_time: means,
        evaluate: Callable[[int, dict, Callable[[], None]], str | None] | None = None,
        eval_at_last_step: bool = True,
        preemption: faults.Preemption | None = None,
    ) -> Outcome:
        """Steps to `last_step`. At log lines the mean metrics go through `train_figures(means,
        seconds per step)` to the log; `evaluate(step, state, between_batches)` may return a
        reason to stop, and `between_batches()` raises faults.Abandoned on a signal (the eval is
        dropped, the step saved). The non-finite check runs where the loop waits anyway (log
        lines, saves). `preemption`: a caller's handler, entered, else the loop's own; the last
        save commits under it, so a signal then is not a kill mid-save."""
        config, setup, manager, data_iter = self.config, self.setup, self.manager, self.data_iter
        log, progress, step = self.log, self.progress, self.step
        log_every, eval_every = config.train.log_every_steps, config.eval.every_steps
        nonfinite = faults.NonfiniteWatch(config.train.on_nonfinite, state)
        history: list[dict] = []  # device metrics of the steps since the last log line
        last_train: dict[str, float] = {}
        stopped = None
        timer = StepTimer()
        last_saved = manager.latest_step()
        previous = None  # the metrics of the step before the one just dispatched
        own = (
            faults.Preemption(manager) if preemption is None else contextlib.nullcontext(preemption)
        )

        def eval_due(step: int) -> bool:
            if eval_at_last_step:
                return itstime(step, eval_every, last_step)
            return step < last_step and itstime(step, eval_every)  # the caller evaluates last

        with own as preemption, setup.activate():
            if evaluate is not None and 0 < step <= last_step and eval_due(step):
                # Resumed at a step whose eval a signal dropped: that eval first, so that the log
                # holds each eval of an uninterrupted run once.
                if not _eval_logged(log, step):
                    try:
                        stopped = evaluate(step, state, preemption.between_batches)
                    except faults.Abandoned:  # a signal again: the step is saved already
                        stopped = "preempted"
                    timer.pause()
            while stopped is None and step < last_step:
                batch = sharding.host_to_global(next(data_iter), setup.batch_sharding)
                state, metrics = train_step(state, batch)
                step += 1
                if previous is not None:
                    # At most this step in flight, so a signal is saved at once (docs/faults.md).
                    jax.block_until_ready(previous)
                previous = metrics
                history.append(metrics)
                if timer.stepped(metrics):
                    progress.start(step)
                if itstime(step, log_every, last_step):
                    bad = nonfinite.stop(state, history, step, last_saved)  # reads `history`
                    last_train = train_figures(mean_metrics(history), timer.lap())
                    log.write(step, "train", last_train)
                    progress.report(step, last_train)
                    history = []
                    if bad:
                        stopped = "nonfinite"
                        break
                asked, preempted = None, preemption.poll()
                if eval_due(step) and not preempted and evaluate is not None:
                    try:
                        asked = evaluate(step, state, preemption.between_batches)
                    except faults.Abandoned:  # a signal during the eval: save this step now
                        preempted = True
                    timer.pause()
                stopped, save_now = decide(
                    step,
                    last_step=last_step,
                    total=self.total,
                    checkpoint_every=config.checkpoint.every_steps,
                    asked=asked,
                    preempted=preempted,
                )
                if save_now:
                    # Nothing is saved after a NaN.
                    if nonfinite.stop(state, history, step, last_saved):
                        stopped = "nonfinite"
                        break
                    # A saved step is never ahead of a bucket's published log.
                    log.flush()
                    checkpoints.save(manager, step, state, data_iter, config)
                    last_saved = step
            checkpoints.finish(manager)
        stopped = stopped or "done"
        if stopped == "preempted":
            stopped = preemption.stopped()  # 'interrupted' after a Ctrl-C
        if stopped in ("preempted", "stop_at_step") and jax.process_index() == 0:
            print(f"{stopped}: saved step {step}; rerun the same command to resume", flush=True)
        return Outcome(state, step, stopped, last_train)
