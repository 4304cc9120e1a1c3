"""What the training loops do about faults they can see: SIGTERM and non-finite steps.

(What the checkpoints do about crashes and damaged files is bert_jax/checkpointing.py's.)
"""

import logging
import signal
import threading

import jax

NONFINITE_MODES = ("stop", "skip")


class Preemption:
    """SIGTERM -> save and exit at the next step boundary, in a single process.

    Used as a context manager around a training loop, which polls `requested` after each step.
    With several processes it stays out of the way: jax.distributed's preemption service owns
    SIGTERM there (a Python handler would replace its handler, and the signal would be lost); it
    tells every process, and Orbax's `reached_preemption(step)` turns true on all of them at the
    same step, which the loops poll too.
    """

    def __init__(self):
        self.requested = False
        self._previous = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread() and jax.process_count() == 1:
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def _handle(self, signum, frame):
        logging.warning("SIGTERM: saving a checkpoint and stopping after this step")
        self.requested = True

    def due(self, manager, step: int) -> bool:
        """Whether to save and stop after `step`: SIGTERM here (one process), or Orbax's
        `manager.reached_preemption(step)`, true on every process of a multi-host job at once."""
        return manager.reached_preemption(step) or self.requested

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)


class NonfiniteWatch:
    """The host side of config.train.on_nonfinite.

    The train step itself drops a non-finite update and counts it in the state's
    'nonfinite_steps' (train.apply_gradients). Reading that count waits for the step, so the loop
    asks `stop` only where it waits anyway (a log line, a save), never per step: the host keeps
    running ahead of the device. In 'stop' mode the steps between a bad one and the check have
    trained on, but the loop then ends without saving, so none of them reaches a checkpoint.
    """

    def __init__(self, mode: str, state: dict, is_primary: bool):
        self.mode = mode
        self.is_primary = is_primary
        self.seen = int(jax.device_get(state["nonfinite_steps"]))

    def stop(self, state: dict, history: list[dict], step: int, last_saved: int | None) -> bool:
        """Whether the loop should end now without saving. `history` holds the metrics of the
        steps up to `step` since the last log line (each with the running 'nonfinite_steps')."""
        count = int(jax.device_get(state["nonfinite_steps"]))
        if count == self.seen:
            return False
        counts = jax.device_get([h["nonfinite_steps"] for h in history])
        first = next(
            (step - len(history) + 1 + i for i, c in enumerate(counts) if c > self.seen), step
        )
        new, self.seen = count - self.seen, count
        if self.mode == "skip":
            logging.warning(
                "skipped %d update(s) with a non-finite loss or gradients since step %d "
                "(%d in this run's history)",
                new,
                first,
                count,
            )
            return False
        if self.is_primary:
            where = (
                f"the last checkpoint is step {last_saved}"
                if last_saved is not None
                else "no checkpoint yet"
            )
            print(
                f"non-finite loss or gradients at step {first}: stopping without saving ({where}). "
                "A rerun resumes from that checkpoint and meets the same batches: lower "
                "optim.learning_rate, check the data, or set --config.train.on_nonfinite=skip to "
                "drop such updates",
                flush=True,
            )
        return True
