"""Training instances for the scaled job: the original's algorithm, vectorized, with its own random
streams.

The semantics are those of instances.py (google-research/bert): NSP pairs with a random next segment
half the time (ten tries for another document, unused sentences put back), short sequences with
probability short_seq_prob, the longer segment trimmed from a random end, masked_lm_prob of the
tokens masked (at most max_predictions_per_seq, at least one) with 80% [MASK] / 10% kept / 10% a
random vocab entry, [CLS]/[SEP] never masked, whole-word masking as an option, and MLM-only packing.
The random streams differ: instance structure draws from a random.Random (cheap scalar draws) and
masking is one numpy pass over all instances of a unit, which is what makes it ~50x faster than
per-token Python.

Truncation draws how many tokens leave the front of a segment as one Binomial(removed, 1/2), the
same distribution as the original's one coin per removed token.

Shapes: N instances, L = max_seq_length, P = max_predictions_per_seq.
"""

import dataclasses
import random

import numpy as np

from data_prep.instances import InstanceOptions, Vocab

_MASK_CHUNK = 4096  # instances masked at once: bounds the [chunk, L] float temporaries


@dataclasses.dataclass
class Documents:
    """Tokenized documents of one unit and split: all ids in one array, sentences as offsets into
    it."""

    ids: np.ndarray  # [tokens] int32
    bounds: (
        list  # per document, its sentence boundaries [s0, s1, ..., sk] (k >= 1 non-empty sentences)
    )

    @classmethod
    def from_lines(
        cls, ids: np.ndarray, per_line: np.ndarray, lines_per_doc: list[int]
    ) -> "Documents":
        """From encode_batch output; sentences without tokens and documents without sentences are
        dropped."""
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
    """create_instances_from_document on offsets: appends (a_lo, a_hi, b_lo, b_hi,
    is_random_next)."""
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
    """MLM-only packing (instances._mlm_only_instances) on offsets: appends (lo, hi, 0, 0,
    False)."""
    bounds = docs.bounds[index]
    max_num_tokens = opts.max_seq_length - 2
    target = max_num_tokens
    if rng.random() < opts.short_seq_prob:
        target = rng.randint(2, max_num_tokens)
    chunk_start = bounds[0]
    for end in bounds[1:]:
        if end - chunk_start >= target or end == bounds[-1]:
            out.append((chunk_start, min(end, chunk_start + max_num_tokens), 0, 0, False))
            chunk_start = end


def assemble(docs: Documents, spans: list, opts: InstanceOptions, vocab: Vocab) -> Batch:
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


def _num_to_predict(
    length: np.ndarray, candidates: np.ndarray, opts: InstanceOptions
) -> np.ndarray:
    # Python's round() and np.rint both round half to even on the same double: the original's count.
    wanted = np.maximum(1, np.rint(length * opts.masked_lm_prob).astype(np.int64))
    return np.minimum(np.minimum(wanted, opts.max_predictions_per_seq), candidates)


def _choose_tokens(keys, candidate, k, p):
    """[n, p] sorted positions of the k candidates with the smallest keys (a uniformly random
    subset), then padding positions L."""
    length_cap = candidate.shape[1]
    keys = np.where(candidate, keys, 2.0)
    smallest = np.argpartition(keys, p - 1, axis=1)[:, :p]  # the p smallest keys, in no order
    by_key = np.argsort(np.take_along_axis(keys, smallest, axis=1), axis=1, kind="stable")
    order = np.take_along_axis(smallest, by_key, axis=1)
    return np.sort(np.where(np.arange(p)[None, :] < k[:, None], order, length_cap), axis=1)


def _choose_words(keys, candidate, continuation, k):
    """Whole-word masking: words in random order, each taken whole if it fits the budget, until
    full."""
    # A continuation piece joins the previous candidate (across [SEP], as in the original).
    earlier = (np.cumsum(candidate, axis=1) - candidate) > 0
    starts = candidate & ~(continuation & earlier)
    word = np.where(candidate, np.cumsum(starts, axis=1) - 1, -1)  # word number per position
    size = np.zeros(candidate.shape, np.int64)  # size[row, w]: pieces of word w
    rows, cols = np.nonzero(candidate)
    np.add.at(size, (rows, word[rows, cols]), 1)
    order = np.argsort(np.where(starts, keys, 2.0), axis=1, kind="stable")
    taken = np.zeros(candidate.shape, bool)  # taken[row, w]
    words_per_row = starts.sum(axis=1).tolist()
    for row, (budget, n_words) in enumerate(zip(k.tolist(), words_per_row)):
        count = 0
        row_word, row_size = word[row], size[row]
        for position in order[row, :n_words].tolist():
            if count >= budget:
                break
            w = row_word[position]
            if count + row_size[w] <= budget:  # a word that would overshoot is skipped, not split
                taken[row, w] = True
                count += row_size[w]
    return candidate & np.take_along_axis(taken, np.maximum(word, 0), axis=1)


def mask(batch: Batch, opts: InstanceOptions, vocab: Vocab, rng: np.random.Generator) -> None:
    """create_masked_lm_predictions for every row of `batch`, in place."""
    n, length_cap = batch.tokens.shape
    batch.positions = np.zeros((n, opts.max_predictions_per_seq), np.int32)
    batch.labels = np.zeros((n, opts.max_predictions_per_seq), np.int32)
    p = min(opts.max_predictions_per_seq, length_cap)  # no more masks than positions
    batch.num_masked = np.zeros(n, np.int64)
    random_ids = np.asarray(vocab.random_ids, np.int32)
    continuation = None
    if opts.do_whole_word_mask:
        continuation = np.zeros(
            max(max(vocab.random_ids), vocab.mask_id, vocab.cls_id, vocab.sep_id) + 1, bool
        )
        continuation[list(vocab.continuation)] = True
    for lo in range(0, n, _MASK_CHUNK):
        hi = min(lo + _MASK_CHUNK, n)
        tokens, length = batch.tokens[lo:hi], batch.length[lo:hi]
        candidate = (
            (np.arange(length_cap)[None, :] < length[:, None])
            & (tokens != vocab.cls_id)
            & (tokens != vocab.sep_id)
        )
        k = _num_to_predict(length, candidate.sum(axis=1), opts)
        keys = rng.random(tokens.shape)
        if continuation is None:
            positions = _choose_tokens(keys, candidate, k, p)
        else:
            chosen = _choose_words(keys, candidate, continuation[tokens], k)
            positions = np.sort(
                np.where(chosen, np.arange(length_cap)[None, :], length_cap), axis=1
            )[:, :p]
        valid = positions < length_cap  # chosen positions ascending, then padding
        count = valid.sum(axis=1)
        positions = np.where(valid, positions, 0)
        labels = np.take_along_axis(tokens, positions, axis=1)
        draw = rng.random((2, hi - lo, p))
        random_words = random_ids[rng.integers(0, len(random_ids), (hi - lo, p))]
        replacement = np.where(
            draw[0] < 0.8, vocab.mask_id, np.where(draw[1] < 0.5, labels, random_words)
        )
        rows = np.broadcast_to(np.arange(hi - lo)[:, None], positions.shape)
        tokens[rows[valid], positions[valid]] = replacement[valid]
        batch.positions[lo:hi, :p] = positions
        batch.labels[lo:hi, :p] = np.where(valid, labels, 0)
        batch.num_masked[lo:hi] = count
