"""Batch-size warmup on the input side: each step's batch is `count(step)` micro-batches. The step
is saved with the iterator's position and set by `align` (a run continuing another's schedule).
docs/training.md, "The modern recipe" (batch-size warmup).
"""

from collections.abc import Callable

import grain
import numpy as np

STATE_KEY = "batch_warmup_step"  # beside the parent iterator's own state


class _Iterator(grain.DatasetIterator):
    def __init__(self, parent, count: Callable[[int], int]):
        super().__init__(parent)
        self._count = count
        self.step = 0  # the step whose batch comes next

    def __next__(self) -> dict:
        parts = [next(self._parent) for _ in range(self._count(self.step))]
        self.step += 1
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

    @property
    def bad_records(self):  # bad_records.count reads the outermost iterator
        return getattr(self._parent, "bad_records", None)

    def get_state(self) -> dict:
        return {**self._parent.get_state(), STATE_KEY: self.step}

    def set_state(self, state: dict) -> None:
        state = dict(state)
        self.step = int(state.pop(STATE_KEY, 0))
        self._parent.set_state(state)


class GrowingBatches(grain.IterDataset):
    def __init__(self, parent: grain.IterDataset, count: Callable[[int], int]):
        super().__init__(parent)
        self._count = count

    def __iter__(self) -> _Iterator:
        return _Iterator(self._parent.__iter__(), self._count)

    def __str__(self) -> str:
        return f"GrowingBatches({self._count})"


def align(data_iter, step: int) -> None:
    """Tells a train iterator the step its next batch is for (no-op without batch warmup)."""
    if isinstance(data_iter, _Iterator):
        data_iter.step = step


def accumulation(rows: int, global_batch_size: int, grad_accum_steps: int) -> int:
    """The gradient-accumulation count of a global batch of `rows` rows (its micro-batches)."""
    return rows * grad_accum_steps // global_batch_size
