"""config.data.bad_records='skip': damaged records counted, named and bounded. ParseRecord marks
a blank stand-in by BAD_RECORD (source index + 1); CountBadRecords, after any Grain workers (one
count), takes it out, warns, and saves the count with the iterator. docs/training.md, "The data
contract".
"""

from collections.abc import Callable

import grain
import numpy as np

from bert_jax import cli

BAD_RECORD = "bad_record"
STATE_KEY = "bad_records"  # beside the parent iterator's own state


class TooManyBadRecords(cli.UserError):
    """More damaged records than config.data.max_bad_records."""


class _Iterator(grain.DatasetIterator):
    def __init__(self, parent, name: Callable[[int], str], limit: int):
        super().__init__(parent)
        self._name, self._limit = name, limit
        self.bad_records = 0

    def __next__(self) -> dict:
        batch = dict(next(self._parent))
        marks = np.asarray(batch.pop(BAD_RECORD)).ravel()
        for mark in marks[marks > 0]:
            self.bad_records += 1
            where = self._name(int(mark) - 1)
            if self.bad_records > self._limit:
                raise TooManyBadRecords(
                    f"{self.bad_records} damaged records skipped, more than "
                    f"config.data.max_bad_records={self._limit} (the last: {where}): restore "
                    "the damaged shards from a good copy or rerun the data_prep command that "
                    "wrote them; checkpoints so far are kept"
                )
            cli.warn(f"skipped damaged record {where} ({self.bad_records} so far)")
        return batch

    def get_state(self) -> dict:
        return {**self._parent.get_state(), STATE_KEY: self.bad_records}

    def set_state(self, state: dict) -> None:
        state = dict(state)
        self.bad_records = int(state.pop(STATE_KEY, 0))  # 0: saved by a run without 'skip'
        self._parent.set_state(state)


class CountBadRecords(grain.IterDataset):
    """`parent`'s batches without BAD_RECORD, counted; `name(source_index)` names the record."""

    def __init__(self, parent: grain.IterDataset, name: Callable[[int], str], limit: int):
        super().__init__(parent)
        self._name, self._limit = name, limit

    def __iter__(self) -> _Iterator:
        return _Iterator(self._parent.__iter__(), self._name, self._limit)

    def __str__(self) -> str:
        return f"CountBadRecords(max_bad_records={self._limit})"


def count(data_iter) -> int | None:
    """The damaged records a train iterator has skipped so far; None when it does not skip."""
    return getattr(data_iter, "bad_records", None)


def check_eval(skipped: list[str], limit: int) -> None:
    """Warns of the eval set's damaged records (weighed 0); an error past `limit`."""
    if len(skipped) <= limit:
        cli.warn(
            f"the eval set holds {len(skipped)} damaged records, left out of its figures: "
            + ", ".join(skipped[:5])
            + (", ..." if len(skipped) > 5 else "")
        )
        return
    raise TooManyBadRecords(
        f"the eval set holds {len(skipped)} damaged records, more than "
        f"config.data.max_bad_records={limit} (the first: {skipped[0]}): restore its "
        "shards from a good copy or rerun the data_prep command that wrote them"
    )
