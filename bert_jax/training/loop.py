"""The training loop both trainers run (pre-training and fine-tuning): after each step the
periodic actions, then one decision on saving and stopping. What a trainer logs or scores is its
own (callbacks); when each action is due (`itstime`), step speed (`StepTimer`) and when to save
and stop (`decide`) are written once, here. Why a loop ended ('stopped') and what each case
saves: docs/training.md, "The loop and why it stopped".
"""

from __future__ import annotations

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
    """Whether an action done every `every` steps (0: never) is due after `step`; always at
    `last_step` when one is given (a run's last step is always logged and saved)."""
    return (every > 0 and step % every == 0) or step == last_step


def _eval_logged(log: metrics_log.MetricsLog, step: int) -> bool:
    """Whether the log holds the eval at `step`, the same answer on every process (process 0
    alone keeps the log)."""
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
    """(why to stop after `step`, or None to go on; whether to save now). `asked` is a stop the
    eval callback asked for. Every stop but 'nonfinite' (which never gets here) saves first, so
    a rerun of the same command resumes where this one ended."""
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
    """Seconds per training step since the last `lap`, leaving out the run's first step (it
    compiles) and the time between `pause` and the next step (an eval is not step time)."""

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
        """Mean seconds per timed step since the last lap (None if none); starts a new lap."""
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
    """A trainer's loop from `step` of a `total`-step schedule over `setup`'s mesh (a
    train_state.Setup), `manager`'s checkpoints and `data_iter`'s batches (a Grain iterator), as
    `config` (the trainer's ConfigDict) says, with the run's metrics log and progress lines in
    `workdir` (`log`, `progress`: the primary process writes them), which the trainer's callbacks
    write to too and the trainer closes."""

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
        """Steps from the loop's `step` to `last_step` from where the caller restored `state` and
        `data_iter`, with the periodic actions config.train's log_every_steps and on_nonfinite,
        eval.every_steps and checkpoint.every_steps name.

        At log lines (and the last step) the steps' mean metrics go through `train_figures(means,
        seconds per step)` to `log` and `progress`. `evaluate(step, state, between_batches)` runs
        at its steps (and at the last if `eval_at_last_step`) and may return a reason to stop;
        `between_batches()`, called after each of its batches, raises faults.Abandoned once a
        signal asks the run to stop (the eval is dropped, the step saved). Then `decide`. The
        non-finite check (faults.NonfiniteWatch) runs where the loop waits for the device anyway:
        at log lines and before a save, which it then skips. The signals are `preemption`'s (one
        the caller holds entered, so that its handler covers what the caller does around the
        loop), else the loop's.

        The last save is committed (checkpoints.finish) under the signal handler, so that a
        signal then ends the run as it would, not killing the process mid-save.
        """
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
        with own as preemption, setup.activate():
            if eval_at_last_step:
                resumed_eval_due = itstime(step, eval_every, last_step)
            else:
                resumed_eval_due = step < last_step and itstime(step, eval_every)
            if evaluate is not None and 0 < step <= last_step and resumed_eval_due:
                # Resumed at a step whose eval a signal dropped (it saves the step at once,
                # docs/faults.md): that eval first, so that the log holds each eval of an
                # uninterrupted run once (the rerun went on to the next step without it, or, at
                # the last step, ended with no final eval).
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
                    # At most this step in flight: the host waits for the one before it (the
                    # device stays busy with this one), so a signal is saved at once
                    # (docs/faults.md).
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
                if eval_at_last_step:
                    eval_due = itstime(step, eval_every, last_step)
                else:  # the caller evaluates after the last step itself
                    eval_due = step < last_step and itstime(step, eval_every)
                if eval_due and not preempted and evaluate is not None:
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
                    # A bucket's log is published whole: through this step before the step is
                    # saved, so a saved step is never ahead of the published log.
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
