"""Record files as Grain random-access sources, the first stage of pipeline.py: ArrayRecord
through Grain's own, TFRecord through `TFRecordSource` (record_io's index and checked reads, the
one TFRecord parser), each wrapped in `CheckedSource`, which names a damaged record's shard.
"""

import bisect
import os
import resource
from collections.abc import Sequence

import grain
import numpy as np

from bert_jax import cli, storage
from bert_jax.data.contract import record_io


class TFRecordSource:
    """Random access to TFRecord files' records by an index of their headers (os.pread, checked)."""

    def __init__(self, paths: Sequence[str], names: Sequence[str] | None = None):
        self._fds: dict[int, int] = {}  # per file read so far; first: __del__ reads it
        self._paths = list(paths)
        self._names = list(names or paths)  # what errors call the files: see make_source
        self._offsets = []  # per file: int64 [records] offset of each record's data
        self._lengths = []
        self._starts = [0]  # global index of each file's first record
        for path, name in zip(self._paths, self._names):
            with storage.reported_as(path, name):
                offsets, lengths = record_io.tfrecord_index(path)
            self._offsets.append(offsets)
            self._lengths.append(lengths)
            self._starts.append(self._starts[-1] + len(offsets))

    def __len__(self) -> int:
        return self._starts[-1]

    def __getitem__(self, index) -> bytes:
        index = int(index)
        if not 0 <= index < len(self):
            raise IndexError(f"record {index} out of range [0, {len(self)})")
        file_i = bisect.bisect_right(self._starts, index) - 1
        j = index - self._starts[file_i]
        fd = self._fds.get(file_i)
        if fd is None:  # two reader threads may both open it: one keeps its descriptor
            opened = os.open(self._paths[file_i], os.O_RDONLY)
            if (fd := self._fds.setdefault(file_i, opened)) != opened:
                os.close(opened)
        return record_io.read_tfrecord_at(  # its path is only what its errors call the file
            fd, self._names[file_i], j, int(self._offsets[file_i][j]), int(self._lengths[file_i][j])
        )

    def __getstate__(self):
        # File descriptors do not survive pickling into Grain worker processes; reopen there.
        state = dict(self.__dict__)
        state["_fds"] = {}
        return state

    def close(self) -> None:
        """Closes the files (a later read opens its file again)."""
        while self._fds:
            os.close(self._fds.popitem()[1])

    __del__ = close  # a dropped source (an eval set, read into memory) gives its files back

    def __repr__(self) -> str:
        return f"TFRecordSource({len(self._paths)} files, {len(self)} records)"


class CheckedSource:
    """A source whose damaged records raise record_io.DamagedRecord naming shard and record
    (Riegeli's errors name neither), or with `skip` come out as that error, for ParseRecord."""

    def __init__(
        self,
        source,
        files: Sequence[str],
        counts: Sequence[int],
        skip: bool = False,
        local: Sequence[str] | None = None,
    ):
        self.source, self.files, self.skip = source, list(files), skip
        self.local = list(local or files)  # the files `source` reads: copies of `files`
        self.starts = np.cumsum([0, *counts]).tolist()

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index):
        try:
            return self.source[index]
        except record_io.DamagedRecord as e:
            error = e
        except RuntimeError as e:  # ArrayRecord/Riegeli: a chunk whose hash or framing fails
            index = int(index) % self.starts[-1]
            i = bisect.bisect_right(self.starts, index) - 1
            storage.rename_in_error(e, self.local[i], self.files[i])
            error = record_io.damaged(self.files[i], index - self.starts[i], f"ArrayRecord: {e}")
        if self.skip:
            return error
        raise record_io.DamagedRecord(
            f"{error}; or set config.data.bad_records=skip to train around such records (up to "
            "config.data.max_bad_records)",
            error.path,
            error.index,
        ) from None

    def __repr__(self) -> str:
        return f"CheckedSource({self.source!r})"


# Open files a process keeps beside its shards (Python, JAX, Grain's threads, logs, checkpoints).
_OTHER_FILES = 1024
_shards_kept = 0  # shards of every source this process made (train, eval), which stay open


def _allow_open_files(count: int) -> None:
    """Raises the soft limit on open files to hold `count` more shards (both sources keep every
    shard open, and a shuffle reads them all), or says what to do past the hard limit."""
    global _shards_kept
    _shards_kept += count
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = _shards_kept + _OTHER_FILES
    if soft == resource.RLIM_INFINITY or soft >= want:
        return
    if hard != resource.RLIM_INFINITY and hard < count + 64:  # these alone cannot be open
        raise cli.UserError(
            f"{count} record files are more than this process may keep open ({hard}, "
            "`ulimit -Hn`): raise the limit, or rewrite the records into fewer shards"
        )
    resource.setrlimit(
        resource.RLIMIT_NOFILE, (want if hard == resource.RLIM_INFINITY else min(want, hard), hard)
    )


def make_source(
    files: Sequence[str],
    expected: Sequence[int] | None = None,
    skip_damaged: bool = False,
    names: Sequence[str] | None = None,
):
    """(a CheckedSource over files of one format, each file's record count), the counts checked
    against `expected`; `names`: the user's paths where `files` are local copies."""
    names = list(names or files)
    _allow_open_files(len(files))
    formats = {record_io.format_of(f) for f in files}
    if len(formats) > 1:
        raise cli.UserError(
            f"mixed record formats {sorted(formats)} in one file list; convert them to one"
        )
    if formats == {record_io.ARRAYRECORD}:
        counts = []
        for path, name in zip(files, names):  # each file opened and checked, named as given
            with storage.reported_as(path, name):
                counts.append(record_io.count_records(path))
        source = grain.sources.ArrayRecordDataSource(list(files))
    else:
        source = TFRecordSource(files, names)
        counts = [len(offsets) for offsets in source._offsets]
    for path, got, want in zip(names, counts, expected or []):
        if got != want:
            raise cli.UserError(
                f"{path} holds {got} records, its manifest lists {want}: the shard is "
                "incomplete or was replaced; rerun its data_prep command to rewrite it"
            )
    return CheckedSource(source, names, counts, skip_damaged, files), counts
