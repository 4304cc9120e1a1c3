"""Record files without TensorFlow: TFRecord (the interchange format with google-research/bert
and MLPerf) and ArrayRecord (the default: random access for Grain's global shuffle), both holding
serialized tf.train.Examples. Writers rename `<path>.tmp-<pid>` on close, so a killed job never
leaves a half-written file under its final name. No JAX import.
"""

import os
import struct
from collections.abc import Iterator

import google_crc32c
import numpy as np

from bert_jax import cli

TFRECORD = "tfrecord"
ARRAYRECORD = "arrayrecord"
FORMATS = (TFRECORD, ARRAYRECORD)
_SUFFIX = {TFRECORD: ".tfrecord", ARRAYRECORD: ".arrayrecord"}
_MASK_DELTA = 0xA282EAD8


def suffix(fmt: str) -> str:
    if fmt not in _SUFFIX:
        raise cli.UserError(f"unknown record format {fmt!r}; choose one of {FORMATS}")
    return _SUFFIX[fmt]


def format_of(path: str) -> str:
    """The format by the file name (.arrayrecord or .array_record: ArrayRecord)."""
    name = os.path.basename(path)
    if ".arrayrecord" in name or ".array_record" in name:
        return ARRAYRECORD
    return TFRECORD


def _masked_crc(data: bytes) -> int:
    # TFRecord stores a rotated, offset CRC32C ("masked") so that CRCs of CRCs stay well spread.
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


class RecordWriter:
    """Writes serialized records to one TFRecord or ArrayRecord file, atomically on close."""

    def __init__(self, path: str, fmt: str | None = None):
        self.path = path
        self.fmt = fmt or format_of(path)
        suffix(self.fmt)  # validates
        self._tmp = f"{path}.tmp-{os.getpid()}"
        self.count = 0
        if self.fmt == TFRECORD:
            self._file = open(self._tmp, "wb")
        else:
            from array_record.python import array_record_module

            # group_size:1: every record addressable for random access; snappy: cheaper than
            # brotli per record (docs/training.md, "Input pipeline").
            self._file = array_record_module.ArrayRecordWriter(self._tmp, "group_size:1,snappy")

    def write(self, record: bytes) -> None:
        if self.fmt == TFRECORD:
            header = struct.pack("<Q", len(record))
            self._file.write(header)
            self._file.write(struct.pack("<I", _masked_crc(header)))
            self._file.write(record)
            self._file.write(struct.pack("<I", _masked_crc(record)))
        else:
            self._file.write(record)
        self.count += 1

    def close(self) -> None:
        if self.fmt == TFRECORD:
            self._file.flush()
            os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        """Drops the partial file; the final name is never touched."""
        try:
            self._file.close()
        finally:
            if os.path.exists(self._tmp):
                os.remove(self._tmp)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()


class DamagedRecord(cli.UserError):
    """A damaged record at `path`, `index`; picklable with them, for Grain worker processes."""

    def __init__(self, message: str, path: str = "", index: int = -1):
        super().__init__(message)
        self.path, self.index = path, index


def damaged(path: str, index: int, problem: str) -> DamagedRecord:
    return DamagedRecord(
        f"{path}: record {index} is damaged ({problem}); restore the file from a good copy or "
        "rerun the data_prep command that wrote it",
        path,
        index,
    )


def _frame(path: str, header: bytes, index: int, offset: int, size: int, verify: bool) -> int:
    """The data length of the record whose 12-byte header starts at `offset`, checked."""
    problem = None
    length = struct.unpack("<Q", header[:8])[0] if len(header) >= 8 else 0
    if len(header) < 12:
        problem = f"truncated TFRecord header at byte {offset}"
    elif verify and struct.unpack("<I", header[8:])[0] != _masked_crc(header[:8]):
        problem = f"the length's CRC-32C differs at byte {offset}"
    elif offset + 16 + length > size:
        problem = f"it claims {length} bytes at byte {offset}, past the end of the file"
    if problem is None:
        return length
    if index == 0:  # not even the first header holds: no TFRecord file at all
        raise DamagedRecord(f"{path}: {problem}; is it a TFRecord file?", path, index)
    raise damaged(path, index, problem)


def _check_data(path: str, index: int, offset: int, data: bytes, footer: bytes) -> bytes:
    if struct.unpack("<I", footer)[0] != _masked_crc(data):
        raise damaged(path, index, f"the data's CRC-32C differs at byte {offset}")
    return data


def _check_file(path: str) -> None:
    """Refuses anything but a regular file: a named pipe would block the open."""
    if not os.path.isfile(path):
        raise cli.UserError(f"{path} {cli.not_a_file(path)}")


def tfrecord_index(path: str, verify: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(offset of each record's data, its length) in a TFRecord file, from its headers alone."""
    _check_file(path)
    offsets, lengths = [], []
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        pos = 0
        while pos < size:
            length = _frame(path, f.read(12), len(offsets), pos, size, verify)
            offsets.append(pos + 12)
            lengths.append(length)
            pos += 16 + length
            f.seek(pos)
    return np.asarray(offsets, np.int64), np.asarray(lengths, np.int64)


def read_tfrecord_at(fd: int, path: str, index: int, offset: int, length: int) -> bytes:
    """Record `index` of TFRecord file `fd`, its CRC checked; os.pread is thread-safe."""
    chunk = os.pread(fd, length + 4, offset)
    if len(chunk) < length + 4:
        raise damaged(path, index, f"the file ends inside it, at byte {offset + len(chunk)}")
    return _check_data(path, index, offset - 12, chunk[:length], chunk[length:])


def read_records(path: str, verify: bool = True) -> Iterator[bytes]:
    """Yields one file's records in order (ArrayRecord's hashes are always checked by Riegeli)."""
    if format_of(path) == ARRAYRECORD:
        reader = open_arrayrecord(path)
        try:
            for start in range(0, reader.num_records(), 1024):
                stop = min(start + 1024, reader.num_records())
                try:
                    yield from reader.read(list(range(start, stop)))
                except RuntimeError as e:  # Riegeli: a chunk hash or framing that does not hold
                    raise _arrayrecord_damage(path, reader, start, stop, e) from None
        finally:
            reader.close()
        return
    _check_file(path)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        offset, index = 0, 0
        while offset < size:
            length = _frame(path, f.read(12), index, offset, size, verify)
            data, footer = f.read(length), f.read(4)
            if verify:
                _check_data(path, index, offset, data, footer)
            offset += 16 + length
            index += 1
            yield data


def open_arrayrecord(path: str):
    """An ArrayRecordReader on `path`, or an error naming the file."""
    from array_record.python import array_record_module

    _check_file(path)
    reader = array_record_module.ArrayRecordReader(path)
    if not reader.ok():  # the reason comes from close()
        try:
            reader.close()
        except RuntimeError as e:
            raise cli.UserError(f"{path}: not a readable ArrayRecord file ({e})") from None
        raise cli.UserError(f"{path}: not a readable ArrayRecord file")
    return reader


def _arrayrecord_damage(path, reader, start: int, stop: int, error) -> DamagedRecord:
    """Riegeli's error for records [start, stop), narrowed to the first that does not read."""
    for index in range(start, stop):
        try:
            reader.read([index])
        except RuntimeError as e:
            error = e
            break
    else:
        index = start
    return damaged(path, index, f"ArrayRecord: {' '.join(str(error).split())[:300]}")


def count_records(path: str) -> int:
    """The records a file holds (ArrayRecord's index; TFRecord's headers, checked)."""
    if format_of(path) == ARRAYRECORD:
        reader = open_arrayrecord(path)
        try:
            return reader.num_records()
        finally:
            reader.close()
    return len(tfrecord_index(path)[0])
