"""Record files without TensorFlow: TFRecord (framing + CRC32C) and ArrayRecord.

TFRecord is the interchange format with google-research/bert and MLPerf; ArrayRecord is our
default because it supports random access, which Grain needs for a global shuffle. Both hold the
same serialized tf.train.Example bytes (see features.py). No JAX import: data_prep uses this.

A writer writes to `<path>.tmp-<pid>` and renames on close, so a killed job never leaves a
half-written file under its final name.
"""

import os
import struct
from collections.abc import Iterator

import google_crc32c

TFRECORD = "tfrecord"
ARRAYRECORD = "arrayrecord"
FORMATS = (TFRECORD, ARRAYRECORD)
_SUFFIX = {TFRECORD: ".tfrecord", ARRAYRECORD: ".arrayrecord"}
_MASK_DELTA = 0xA282EAD8


def suffix(fmt: str) -> str:
    if fmt not in _SUFFIX:
        raise ValueError(f"unknown record format {fmt!r}; choose one of {FORMATS}")
    return _SUFFIX[fmt]


def format_of(path: str) -> str:
    """Infers the format from the file name (ArrayRecord files end in .arrayrecord or
    .array_record)."""
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

            # group_size:1 keeps every record individually addressable for random access;
            # snappy costs a third of the default brotli per record for ~2% larger files.
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
        """Flushes and moves the file to its final name."""
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


def read_records(path: str, fmt: str | None = None, verify: bool = True) -> Iterator[bytes]:
    """Yields the serialized records of one file, in order."""
    fmt = fmt or format_of(path)
    if fmt == ARRAYRECORD:
        from array_record.python import array_record_module

        if not os.path.isfile(path):
            raise FileNotFoundError(2, "No such file or directory", path)
        reader = array_record_module.ArrayRecordReader(path)
        if not reader.ok():  # the reason comes from close()
            try:
                reader.close()
            except RuntimeError as e:
                raise ValueError(f"{path}: not a readable ArrayRecord file ({e})") from None
            raise ValueError(f"{path}: not a readable ArrayRecord file")
        try:
            for start in range(0, reader.num_records(), 1024):
                stop = min(start + 1024, reader.num_records())
                yield from reader.read(list(range(start, stop)))
        finally:
            reader.close()
        return
    with open(path, "rb") as f:
        offset = 0
        while True:
            header = f.read(12)
            if not header:
                return
            if len(header) < 12:
                raise ValueError(f"{path}: truncated TFRecord header at byte {offset}")
            (length,) = struct.unpack("<Q", header[:8])
            if verify and struct.unpack("<I", header[8:])[0] != _masked_crc(header[:8]):
                raise ValueError(f"{path}: corrupt TFRecord length at byte {offset}")
            data = f.read(length)
            footer = f.read(4)
            if len(data) < length or len(footer) < 4:
                raise ValueError(f"{path}: truncated TFRecord at byte {offset}")
            if verify and struct.unpack("<I", footer)[0] != _masked_crc(data):
                raise ValueError(f"{path}: corrupt TFRecord data at byte {offset}")
            offset += 16 + length
            yield data


def count_records(path: str) -> int:
    if format_of(path) == ARRAYRECORD:
        from array_record.python import array_record_module

        reader = array_record_module.ArrayRecordReader(path)
        try:
            return reader.num_records()
        finally:
            reader.close()
    return sum(1 for _ in read_records(path, TFRECORD, verify=False))
