"""What the training loops do about faults they can see: SIGTERM, Ctrl-C, a second run on the same
workdir, and non-finite steps (crashes and damaged files: checkpoints.py)."""

import contextlib
import functools
import os
import signal
import sys
import threading

import jax
import numpy as np

from bert_jax import cli
from bert_jax.storage import workdir_lock

NONFINITE_MODES = ("stop", "skip")


class Interrupted(KeyboardInterrupt):
    """A second Ctrl-C: stop at once, without a save (cli.run prints one line, exit 130)."""


class Abandoned(Exception):
    """A signal during an eval: the loop drops the eval and saves the step."""


class Preemption:
    """SIGTERM or Ctrl-C -> save and stop at the loop's next poll; a second Ctrl-C stops at once.
    With several processes the preemption service owns SIGTERM and its sync point counts polls
    (Orbax's save would set it back, so its question answers False meanwhile). docs/faults.md.
    """

    def __init__(self, manager=None):
        self.requested = False
        self.signal_name: str | None = None
        self._manager = manager
        self._sync_point = None  # the preemption service's question, with several processes
        self._polls = 0
        self._stop = False
        self._previous: dict = {}

    def __enter__(self):
        if jax.process_count() > 1 and self._manager is not None:
            self._sync_point = self._manager.reached_preemption
            self._manager.reached_preemption = lambda step: False
        if threading.current_thread() is not threading.main_thread():
            return self
        if jax.process_count() == 1:
            self._previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._handle)
        self._previous[signal.SIGINT] = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame):
        name = signal.Signals(signum).name
        if self.requested or self.signal_name is not None:
            if signum == signal.SIGINT:
                raise Interrupted(f"{name} again: stopped at once, without saving this step")
            return  # a repeated SIGTERM changes nothing
        self.signal_name = name
        print(
            f"{name}: saving a checkpoint after this step (or eval batch) and stopping"
            + (" (Ctrl-C again stops at once, without it)" if signum == signal.SIGINT else ""),
            file=sys.stderr,
            flush=True,
        )
        if signum == signal.SIGINT and jax.process_count() > 1:
            os.kill(os.getpid(), signal.SIGTERM)  # the preemption service tells every process
            return
        self.requested = True

    def poll(self) -> bool:
        """Whether to save and stop now; stays true once true."""
        self._polls += 1
        if not self._stop:
            self._stop = bool(self.requested) or (
                self._sync_point is not None and self._sync_point(self._polls)
            )
        return self._stop

    def between_batches(self) -> None:
        if self.poll():
            raise Abandoned()

    def stopped(self) -> str:
        return "interrupted" if self.signal_name == "SIGINT" else "preempted"

    def __exit__(self, *exc):
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}
        if self._sync_point is not None:
            del self._manager.reached_preemption  # the class's method again
            self._sync_point = None


def interrupted_message(step: int | None) -> str:
    """The binaries' last line (exit 130) after a Ctrl-C that saved `step` (None: nothing)."""
    if step is None:
        return "interrupted (Ctrl-C) before the first step, nothing saved: rerun the same command"
    return f"interrupted (Ctrl-C) after saving step {step}: rerun the same command to resume"


# A run SIGTERM stopped after saving exits 128 + SIGTERM, as a shell reports it: not 0, so a
# scheduler that restarts failed jobs restarts it, and it resumes (docs/faults.md).
PREEMPTED_STATUS = 128 + signal.SIGTERM


def one_run_per_workdir(what: str):
    """Decorates a trainer, fn(config, workdir, ...), to run holding the workdir's lock."""

    def decorate(fn):
        @functools.wraps(fn)
        def wrapped(config, workdir: str, *args, **kwargs):
            with hold_workdir(workdir, what):
                return fn(config, workdir, *args, **kwargs)

        return wrapped

    return decorate


@contextlib.contextmanager
def hold_workdir(directory: str, what: str):
    """workdir_lock.hold on process 0 for the job; all processes of a refused one stop alike."""
    with contextlib.ExitStack() as stack:
        refused = None
        if jax.process_index() == 0:
            try:
                stack.enter_context(workdir_lock.hold(directory, what))
            except workdir_lock.Busy as e:
                refused = e
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            got = multihost_utils.broadcast_one_to_all(np.int32(refused is None))
            if not int(got) and refused is None:
                refused = workdir_lock.Busy(
                    f"--workdir={directory!r} is in use by another run (process 0 found its lock)"
                )
        if refused is not None:
            raise refused
        yield


class NonfiniteWatch:
    """The host side of config.train.on_nonfinite: reading 'nonfinite_steps' waits for the step,
    so the loop asks only where it waits anyway; 'stop' ends without a save."""

    def __init__(self, mode: str, state: dict):
        self.mode = mode
        self.seen = int(jax.device_get(state["nonfinite_steps"]))

    def stop(self, state: dict, history: list[dict], step: int, last_saved: int | None) -> bool:
        """Whether to end now without saving; `history`: the metrics since the last log line."""
        count = int(jax.device_get(state["nonfinite_steps"]))
        if count == self.seen:
            return False
        counts = jax.device_get([h["nonfinite_steps"] for h in history])
        first = next(
            (step - len(history) + 1 + i for i, c in enumerate(counts) if c > self.seen), step
        )
        new, self.seen = count - self.seen, count
        if self.mode == "skip":
            cli.warn(
                f"skipped {new} update(s) with a non-finite loss or gradients since step {first} "
                f"({count} in this run's history)"
            )
            return False
        if jax.process_index() == 0:
            where = "no checkpoint yet"
            if last_saved is not None:
                where = f"the last checkpoint is step {last_saved}"
            print(
                f"non-finite loss or gradients at step {first}: stopping without saving ({where}). "
                "A rerun resumes from that checkpoint and meets the same batches: lower "
                "optim.learning_rate, check the data, or set --config.train.on_nonfinite=skip to "
                "drop such updates",
                flush=True,
            )
        return True
