"""Training instances of the scaled and Beam jobs: NSP pairs or MLM-only segments as [N, L]
arrays (L = max_seq_length, P = max_predictions_per_seq), masked by bert_jax.data.input.masking,
encoded as tf.train.Example bytes. reference.py's semantics, other random streams:
docs/data_prep.md, "Differences from the original generator".
"""

import dataclasses
import functools
import itertools
import random
import struct

import numpy as np

from bert_jax import cli
from bert_jax.data.contract import features as F
from bert_jax.data.contract import manifest
from bert_jax.data.input import masking


@dataclasses.dataclass(frozen=True)
class InstanceOptions:
    """How instances are built; the defaults are the original generator's, and the flags'."""

    max_seq_length: int = 128
    max_predictions_per_seq: int = manifest.MAX_PREDICTIONS_PER_SEQ
    masked_lm_prob: float = manifest.MASKED_LM_PROB
    short_seq_prob: float = 0.1
    whole_word_mask: bool = False  # data_prep's --do_whole_word_mask (the original's flag)
    nsp: bool = True  # False: MLM-only, one segment of contiguous sentences filled to full length
    mask: bool = True  # False: unmasked records; the trainer masks on the fly (dynamic masking)

    def __post_init__(self):
        F.check_seq_length(self.max_seq_length, 2 if self.nsp else 1)
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise cli.UserError(f"short_seq_prob={self.short_seq_prob} must be in [0, 1]")
        if self.mask:
            _ = self.masking  # masking.Options checks masked_lm_prob and max_predictions_per_seq

    @property
    def masking(self) -> masking.Options:
        return masking.Options(
            self.max_predictions_per_seq, self.masked_lm_prob, self.whole_word_mask
        )

    @property
    def schema(self) -> F.Schema:
        """The records' schema: unmasked records have no masked_lm_* features."""
        return F.Schema(self.max_seq_length, self.max_predictions_per_seq if self.mask else 0)

    def contract_fields(self, mode: str, fmt: str, vocab: dict, shards: dict) -> dict:
        return manifest.contract_fields(
            mode,
            fmt,
            self.schema,
            nsp=self.nsp,
            whole_word_mask=self.whole_word_mask,
            vocab=vocab,
            shards=shards,
        )


@dataclasses.dataclass
class Documents:
    """Tokenized documents of one unit and split: all ids in one array, sentences as offsets."""

    ids: np.ndarray  # [tokens] int32
    # Per document, its sentence boundaries [s0, s1, ..., sk] (k >= 1 non-empty sentences).
    bounds: list

    @classmethod
    def from_lines(
        cls, ids: np.ndarray, per_line: np.ndarray, lines_per_doc: list[int]
    ) -> "Documents":
        """From encode_batch output, empty sentences and documents dropped."""
        ends = np.cumsum(per_line).tolist()
        lengths = per_line.tolist()
        bounds, line, doc_start = [], 0, 0
        for count in lines_per_doc:
            doc = [ends[j] for j in range(line, line + count) if lengths[j] > 0]
            if doc:  # empty sentences add no tokens, so the first real one starts at doc_start
                bounds.append([doc_start, *doc])
            line += count
            doc_start = ends[line - 1] if line else 0
        return cls(ids, bounds)


@dataclasses.dataclass
class Batch:
    """Instances as fixed-size arrays, the record features before encoding."""

    tokens: np.ndarray  # [N, L] int32, 0-padded; masked positions already replaced
    length: np.ndarray  # [N] real tokens, [CLS]/[SEP] included
    segment_start: np.ndarray  # [N] first position of segment B (== length when there is none)
    random_next: np.ndarray  # [N] bool
    positions: np.ndarray | None = None  # [N, P] sorted masked positions, 0-padded
    labels: np.ndarray | None = None  # [N, P] original ids there, 0-padded
    num_masked: np.ndarray | None = None  # [N]

    def __len__(self) -> int:
        return len(self.length)


def _truncate(lo_a, hi_a, lo_b, hi_b, max_num_tokens, rng):
    """truncate_seq_pair on spans: the longer segment loses a token until the pair fits."""
    len_a, len_b = hi_a - lo_a, hi_b - lo_b
    excess = len_a + len_b - max_num_tokens
    if excess <= 0:
        return lo_a, hi_a, lo_b, hi_b
    first = min(excess, abs(len_a - len_b))  # from the longer one until both are equal,
    rest = excess - first  # then alternately, B first (ties trim B)
    cut_a = (first if len_a > len_b else 0) + rest // 2
    cut_b = (first if len_a <= len_b else 0) + rest - rest // 2
    front_a = rng.getrandbits(cut_a).bit_count()  # one fair coin per removed token
    front_b = rng.getrandbits(cut_b).bit_count()
    return lo_a + front_a, hi_a - (cut_a - front_a), lo_b + front_b, hi_b - (cut_b - front_b)


def nsp_spans(
    docs: Documents, index: int, opts: InstanceOptions, rng: random.Random, out: list
) -> None:
    """create_instances_from_document on offsets: appends (a_lo, a_hi, b_lo, b_hi, is_random)."""
    bounds, all_bounds = docs.bounds[index], docs.bounds
    n = len(bounds) - 1
    max_num_tokens = opts.max_seq_length - 3
    target = max_num_tokens
    if rng.random() < opts.short_seq_prob:
        target = rng.randint(2, max_num_tokens)
    chunk_start, i = 0, 0
    while i < n:
        if i == n - 1 or bounds[i + 1] - bounds[chunk_start] >= target:
            chunk_len = i - chunk_start + 1
            a_end = rng.randint(1, chunk_len - 1) if chunk_len >= 2 else 1
            a_lo, a_hi = bounds[chunk_start], bounds[chunk_start + a_end]
            if chunk_len == 1 or rng.random() < 0.5:
                is_random = True
                target_b = target - (a_hi - a_lo)
                for _ in range(10):
                    other = rng.randint(0, len(all_bounds) - 1)
                    if other != index:
                        break
                other_bounds = all_bounds[other]
                b_start = rng.randint(0, len(other_bounds) - 2)
                j = b_start + 1
                while (
                    other_bounds[j] - other_bounds[b_start] < target_b and j < len(other_bounds) - 1
                ):
                    j += 1
                b_lo, b_hi = other_bounds[b_start], other_bounds[j]
                i -= chunk_len - a_end  # the unused sentences go back for the next instance
            else:
                is_random = False
                b_lo, b_hi = a_hi, bounds[i + 1]
            a_lo, a_hi, b_lo, b_hi = _truncate(a_lo, a_hi, b_lo, b_hi, max_num_tokens, rng)
            if a_hi > a_lo and b_hi > b_lo:
                out.append((a_lo, a_hi, b_lo, b_hi, is_random))
            chunk_start = i + 1
        i += 1


def mlm_spans(
    docs: Documents, index: int, opts: InstanceOptions, rng: random.Random, out: list
) -> None:
    """reference._mlm_only_instances on offsets: appends (lo, hi, 0, 0, False)."""
    bounds = docs.bounds[index]
    max_num_tokens = opts.max_seq_length - 2
    target = max_num_tokens
    if rng.random() < opts.short_seq_prob:
        # max_seq_length 3 leaves room for one token: randint(2, 1) has no value.
        target = rng.randint(min(2, max_num_tokens), max_num_tokens)
    chunk_start = bounds[0]
    for end in bounds[1:]:
        while end - chunk_start > max_num_tokens:  # a row's worth out, the rest goes on
            out.append((chunk_start, chunk_start + max_num_tokens, 0, 0, False))
            chunk_start += max_num_tokens
        if end > chunk_start and (end - chunk_start >= target or end == bounds[-1]):
            out.append((chunk_start, end, 0, 0, False))
            chunk_start = end


def assemble(docs: Documents, spans: list, opts: InstanceOptions, vocab: masking.Vocab) -> Batch:
    """[CLS] A [SEP] (B [SEP]) rows from spans, without masking."""
    length_cap = opts.max_seq_length
    s = np.asarray(spans, dtype=np.int64).reshape(-1, 5)
    len_a, len_b = s[:, 1] - s[:, 0], s[:, 3] - s[:, 2]
    has_b = len_b > 0
    length = len_a + 2 + np.where(has_b, len_b + 1, 0)
    pos = np.arange(length_cap)[None, :]  # [1, L]
    in_a = (pos >= 1) & (pos <= len_a[:, None])
    b_first = (len_a + 2)[:, None]
    in_b = (pos >= b_first) & (pos < b_first + len_b[:, None])
    source = np.where(in_a, s[:, :1] + pos - 1, np.where(in_b, s[:, 2:3] + pos - b_first, 0))
    tokens = np.where(in_a | in_b, docs.ids[source], 0).astype(np.int32)
    rows = np.arange(len(s))
    tokens[:, 0] = vocab.cls_id
    tokens[rows, len_a + 1] = vocab.sep_id
    tokens[rows[has_b], length[has_b] - 1] = vocab.sep_id
    return Batch(tokens, length, np.where(has_b, len_a + 2, length), s[:, 4].astype(bool))


def mask(
    batch: Batch, opts: InstanceOptions, vocab: masking.Vocab, rng: np.random.Generator
) -> None:
    masked = masking.mask(batch.tokens, batch.length, opts.masking, vocab, rng)
    batch.tokens, batch.positions, batch.labels = masked.tokens, masked.positions, masked.labels
    batch.num_masked = masked.num_masked


# --- Records: Batch -> tf.train.Example bytes, byte-identical to protobuf's deterministic
# serialization but written directly (docs/data_prep.md, "Performance"): most of each record is
# a cached byte string. Wire format (tag = field << 3 | 2, length-delimited): Example.features (1)
# -> Features.feature (1, map entry: key 1, value 2) -> Feature.float_list (2) | int64_list (3)
# -> value (1, packed).

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
    """[N, K] non-negative ints -> (every row's varints, concatenated; N+1 row offsets)."""
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
    return bytes([tag]) + varint(len(payload)) + payload


def entry(name: str, packed: bytes) -> bytes:
    """One map entry of Features: name -> Feature{int64_list or float_list {packed}}."""
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
        """Serialized records, features in sorted order."""
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
