"""The default path's record encoder: instances.Batch ([N, L] arrays) -> serialized
tf.train.Example bytes, written directly rather than through protobuf messages
(docs/data_prep.md, "Performance"), byte-identical to protobuf's
SerializeToString(deterministic=True): map entries sorted by key, each value list packed. Every
record has the same fixed-length features (features.Schema), so most of each record is a cached
byte string and only the token ids and masked labels are encoded per record.

Wire format, outermost first (field number << 3 | wire type 2 = length-delimited):
  Example.features (1) -> Features.feature (1, map entry) -> key (1), value (2) -> Feature.
  Feature.float_list (2) | int64_list (3) -> FloatList/Int64List.value (1, packed).
"""

import functools
import itertools
import struct

import numpy as np

from bert_jax.data.contract import features as F
from data_prep.instances import Batch

_ONE_FLOAT = struct.pack("<f", 1.0)
_ZERO_FLOAT = struct.pack("<f", 0.0)


def varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varint_rows(values: np.ndarray) -> tuple[bytes, list[int]]:
    """[N, K] non-negative ints -> (the varints of every row, concatenated; N+1 row offsets into
    them)."""
    top = int(values.max(initial=0))
    values = values.astype(np.uint32 if top < 1 << 32 else np.uint64)  # narrow: less memory traffic
    planes = max(1, -(-top.bit_length() // 7))  # 7 bits per varint byte
    out = np.empty((*values.shape, planes), np.uint8)  # [N, K, byte]
    keep = np.empty((*values.shape, planes), bool)  # [N, K, byte]: the value has this byte
    keep[..., 0] = True
    for k in range(planes):
        more = values >= (1 << (7 * (k + 1))) if k + 1 < planes else np.zeros(values.shape, bool)
        if k + 1 < planes:
            keep[..., k + 1] = more
        high = more.view(np.uint8) << 7  # the high bit: more bytes follow
        out[..., k] = ((values >> (7 * k)) & 0x7F).astype(np.uint8) | high
    data = np.compress(keep.reshape(-1), out.reshape(-1)).tobytes()  # row by row, value by value
    return data, np.concatenate([[0], np.cumsum(keep.sum(axis=(1, 2)))]).tolist()


def _delimited(tag: int, payload: bytes) -> bytes:
    """A length-delimited field: tag byte, varint length, payload."""
    return bytes([tag]) + varint(len(payload)) + payload


def entry(name: str, packed: bytes) -> bytes:
    """One map entry of Features: name -> Feature{int64_list (3) or float_list (2) {value (1):
    packed}}."""
    feature = _delimited(0x12 if name in F.FLOAT_FEATURES else 0x1A, _delimited(0x0A, packed))
    return _delimited(0x0A, _delimited(0x0A, name.encode()) + _delimited(0x12, feature))


class ExampleEncoder:
    """Batch -> serialized tf.train.Example records of one schema."""

    def __init__(self, schema: F.Schema):
        self.schema = schema
        length_cap, predictions = schema.max_seq_length, schema.max_predictions_per_seq
        self._length_cap = length_cap
        # Whole entries of the features with few variants, built once per variant (an int).
        self._mask = functools.cache(
            lambda n: entry(F.INPUT_MASK, b"\x01" * n + b"\x00" * (length_cap - n))
        )
        self._segments = functools.cache(
            lambda key: entry(F.SEGMENT_IDS, _segments(*divmod(key, length_cap + 1), length_cap))
        )
        self._weights = functools.cache(
            lambda m: entry(F.MASKED_LM_WEIGHTS, _ONE_FLOAT * m + _ZERO_FLOAT * (predictions - m))
        )
        self._labels = functools.cache(lambda label: entry(F.NEXT_SENTENCE_LABELS, bytes([label])))
        # For varint features, all of an entry but its packed payload, by the payload's length.
        self._prefix = {
            name: functools.cache(lambda size, name=name: entry(name, b"\x00" * size)[:-size])
            for name in (F.INPUT_IDS, F.MASKED_LM_IDS, F.MASKED_LM_POSITIONS)
        }
        self._lengths = functools.cache(varint)  # the Example's own length field

    def _varint_entries(self, name: str, values: np.ndarray) -> list[bytes]:
        data, offsets = varint_rows(values)
        prefix = self._prefix[name]
        return [prefix(end - start) + data[start:end] for start, end in itertools.pairwise(offsets)]

    def encode(self, batch: Batch) -> list[bytes]:
        """Serialized records, features in sorted order as deterministic serialization writes
        them."""
        segment_keys = (batch.segment_start * (self._length_cap + 1) + batch.length).tolist()
        columns = [
            self._varint_entries(F.INPUT_IDS, batch.tokens),
            list(map(self._mask, batch.length.tolist())),
        ]
        if self.schema.masked:
            columns += [
                self._varint_entries(F.MASKED_LM_IDS, batch.labels),
                self._varint_entries(F.MASKED_LM_POSITIONS, batch.positions),
                list(map(self._weights, batch.num_masked.tolist())),
            ]
        columns += [
            list(map(self._labels, batch.random_next.astype(int).tolist())),
            list(map(self._segments, segment_keys)),
        ]
        return [b"\x0a" + self._lengths(len(f)) + f for f in map(b"".join, zip(*columns))]


def _segments(segment_start: int, n: int, length_cap: int) -> bytes:
    return b"\x00" * segment_start + b"\x01" * (n - segment_start) + b"\x00" * (length_cap - n)
