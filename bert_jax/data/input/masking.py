"""Masked-LM masking, the one implementation: data_prep's static masks (`mask`) and the trainer's
dynamic masking (`draw`, then `apply`); numpy only. The rule is google-research/bert's, whole-word
masking included (data_prep/reference.py specifies it; docs/training.md, "Input pipeline").
Shapes: N rows, L = max_seq_length, P = max_predictions_per_seq.
"""

import dataclasses
import functools
from collections.abc import Sequence

import numpy as np

from bert_jax import cli, storage
from bert_jax.data.contract import manifest
from bert_jax.text import tokenizer_json

_CHUNK = 4096  # rows masked at once: bounds the [chunk, L] float temporaries...
_CHUNK_TOKENS = _CHUNK * 512  # ...to this many tokens (fewer rows past L=512: 256 at L=8192)


def chunk_rows(length: int) -> int:
    """Rows masked (and data_prep's rows assembled) at once: _CHUNK up to L=512 (keeping shorter
    records' random streams), fewer beyond (no gigabytes of temporaries at L=8,192)."""
    return max(1, min(_CHUNK, _CHUNK_TOKENS // max(length, 1)))


@dataclasses.dataclass(frozen=True)
class Options:
    max_predictions_per_seq: int = manifest.MAX_PREDICTIONS_PER_SEQ
    masked_lm_prob: float = manifest.MASKED_LM_PROB
    whole_word_mask: bool = False

    def __post_init__(self):
        if not 0.0 < self.masked_lm_prob <= 1.0:
            raise cli.UserError(f"masked_lm_prob={self.masked_lm_prob} must be in (0, 1]")
        if self.max_predictions_per_seq < 1:
            raise cli.UserError("max_predictions_per_seq must be at least 1 for masked records")


@dataclasses.dataclass(frozen=True)
class Vocab:
    cls_id: int
    sep_id: int
    mask_id: int
    random_ids: Sequence[int]  # the original draws random replacements from every vocab entry
    continuation: frozenset  # ids of pieces that continue a word ("##ing"), for whole-word masking
    # Byte-level BPE: per id, its first and last character's kind (`continues`); None: ignored.
    first_kind: bytes | None = None
    last_kind: bytes | None = None
    # False: the vocabulary marks no word boundaries, and whole-word masking is refused.
    word_marks: bool = True

    @classmethod
    def from_tokenizer(cls, tokenizer) -> "Vocab":
        words = tokenizer.vocab_words
        kinds = getattr(tokenizer, "character_kinds", lambda: None)() or (None, None)
        return cls(
            cls_id=tokenizer.cls_id,
            sep_id=tokenizer.sep_id,
            mask_id=tokenizer.mask_id,
            random_ids=[tokenizer.vocab[w] for w in words],
            continuation=frozenset(
                tokenizer.vocab[w] for w in words if tokenizer.is_continuation(w)
            ),
            first_kind=kinds[0],
            last_kind=kinds[1],
            word_marks=getattr(tokenizer, "word_marks", True) is not None,
        )

    def check_whole_word(self, whole_word_mask: bool, what: str = "the vocabulary") -> None:
        """Refuses whole-word masking of a vocabulary that cannot tell where words start."""
        if whole_word_mask and not self.word_marks:
            raise cli.UserError(
                f"whole-word masking needs word boundaries, but {what} marks none in its pieces "
                "(no ## prefix, no Ġ or ▁ space marks): mask pieces one by one (no "
                "--do_whole_word_mask / config.data.whole_word_mask=False), or use a tokenizer "
                "whose pieces mark words"
            )

    @classmethod
    def from_file(cls, vocab_file: str, do_lower_case: bool | None = None) -> "Vocab":
        """From a vocabulary file, read once a process while the file stays the same."""
        try:
            stamp = storage.version(vocab_file)
        except (OSError, storage.StorageError):  # unreadable: the tokenizer's load says why
            stamp = None
        return _vocab_from_file(vocab_file, do_lower_case, stamp)

    @functools.cached_property
    def _random_ids(self) -> np.ndarray:
        return np.asarray(self.random_ids, np.int32)

    @functools.cached_property
    def _continuation_table(self) -> np.ndarray:
        """[max id + 2] bool; the last entry False: ids past the vocabulary start words."""
        top = max(max(self.random_ids), self.mask_id, self.cls_id, self.sep_id)
        table = np.zeros(top + 2, bool)
        table[list(self.continuation)] = True
        return table

    @functools.cached_property
    def _kind_tables(self) -> tuple[np.ndarray, np.ndarray] | None:
        """[max id + 2] uint8 first and last kinds (0 past the vocabulary: joins nothing)."""
        if self.first_kind is None or self.last_kind is None:
            return None
        tables = np.zeros((2, len(self._continuation_table)), np.uint8)
        for table, kinds in zip(tables, (self.first_kind, self.last_kind)):
            known = np.frombuffer(kinds, np.uint8)[: len(table) - 1]
            table[: len(known)] = known
        return tables[0], tables[1]

    def continues(self, tokens: np.ndarray) -> np.ndarray:
        """[n, L] bool: whether each piece continues the word of the piece before it. With
        character kinds, only when its first kind is the previous last kind, or either is JOIN."""
        continuation = np.take(self._continuation_table, tokens, mode="clip")
        kinds = self._kind_tables
        if kinds is None:
            return continuation
        first = np.take(kinds[0], tokens, mode="clip")
        last = np.take(kinds[1], tokens, mode="clip")
        before = np.zeros_like(last)
        before[:, 1:] = last[:, :-1]
        # A piece ending a character begun up to 3 pieces back takes the lead byte's kind.
        for back in (2, 3, 4):
            inherited = np.zeros_like(last)
            inherited[:, back:] = last[:, :-back]
            before = np.where(before == tokenizer_json.INHERIT, inherited, before)
        join = tokenizer_json.JOIN
        same = (first == before) & (first != 0)
        return continuation & (same | (first == join) | (before == join))


@dataclasses.dataclass
class Draws:
    """Masking's random numbers for n rows, drawn before any token is seen; p = min(P, L)."""

    keys: np.ndarray  # [n, L] float64 in [0, 1): candidates (or words) are taken by smallest key
    choice: np.ndarray  # [n, 2, p] float64: [:, 0] < 0.8 -> [MASK]; else [:, 1] < 0.5 -> kept
    random: np.ndarray  # [n, p] int64: index into vocab.random_ids, for the remaining 10%


@dataclasses.dataclass
class Masked:
    tokens: np.ndarray  # [N, L] int32: chosen positions replaced ([MASK], kept or random)
    positions: np.ndarray  # [N, P] int32: chosen positions, ascending, then 0-padded
    labels: np.ndarray  # [N, P] int32: the original ids there, 0-padded
    num_masked: np.ndarray  # [N] int64: how many of the P slots are real

    def weights(self) -> np.ndarray:
        """[N, P] float32: 1.0 for a real prediction, 0.0 for padding (masked_lm_weights)."""
        p = self.positions.shape[1]
        return (np.arange(p)[None, :] < self.num_masked[:, None]).astype(np.float32)


def mask(
    tokens: np.ndarray, lengths: np.ndarray, opts: Options, vocab: Vocab, rng: np.random.Generator
) -> Masked:
    """Masks a copy of `tokens` ([N, L], `lengths` real), drawing from `rng` chunk by chunk."""
    tokens, lengths = np.asarray(tokens), np.asarray(lengths)
    n, length_cap = tokens.shape
    rows = chunk_rows(length_cap)
    parts = [
        apply(
            tokens[lo:hi], lengths[lo:hi], opts, vocab, draw(rng, hi - lo, length_cap, opts, vocab)
        )
        for lo, hi in ((lo, min(lo + rows, n)) for lo in range(0, max(n, 1), rows))
    ]
    fields = [f.name for f in dataclasses.fields(Masked)]
    return Masked(*(np.concatenate([getattr(part, f) for part in parts]) for f in fields))


def draw(rng: np.random.Generator, n: int, length_cap: int, opts: Options, vocab: Vocab) -> Draws:
    """The random numbers for n rows of length_cap tokens, in mask()'s order."""
    p = min(opts.max_predictions_per_seq, length_cap)  # no more masks than positions
    keys = rng.random((n, length_cap))
    choice = rng.random((2, n, p)).transpose(1, 0, 2)
    return Draws(keys, choice, rng.integers(0, len(vocab.random_ids), (n, p)))


def apply(
    tokens: np.ndarray, lengths: np.ndarray, opts: Options, vocab: Vocab, draws: Draws
) -> Masked:
    tokens = np.array(tokens, np.int32)  # a copy: the masked rows
    lengths = np.asarray(lengths)
    n, length_cap = tokens.shape
    p = draws.random.shape[1]
    candidate = (
        (np.arange(length_cap)[None, :] < lengths[:, None])
        & (tokens != vocab.cls_id)
        & (tokens != vocab.sep_id)
    )
    k = _num_to_predict(lengths, candidate.sum(axis=1), opts)
    if opts.whole_word_mask:
        vocab.check_whole_word(True)
        chosen = _choose_words(draws.keys, candidate, vocab.continues(tokens), k)
        positions = np.sort(np.where(chosen, np.arange(length_cap)[None, :], length_cap), axis=1)
        positions = positions[:, :p]
    else:
        positions = _choose_tokens(draws.keys, candidate, k, p)
    valid = positions < length_cap  # chosen positions ascending, then padding
    positions = np.where(valid, positions, 0)
    labels = np.take_along_axis(tokens, positions, axis=1)
    random_words = vocab._random_ids[draws.random]
    replacement = np.where(
        draws.choice[:, 0] < 0.8,
        vocab.mask_id,
        np.where(draws.choice[:, 1] < 0.5, labels, random_words),
    )
    rows = np.broadcast_to(np.arange(n)[:, None], positions.shape)
    tokens[rows[valid], positions[valid]] = replacement[valid]
    pad = ((0, 0), (0, opts.max_predictions_per_seq - p))  # to P slots (p <= P)
    out_positions = np.pad(positions, pad).astype(np.int32)
    out_labels = np.pad(np.where(valid, labels, 0), pad).astype(np.int32)
    return Masked(tokens, out_positions, out_labels, valid.sum(axis=1).astype(np.int64))


def _num_to_predict(length: np.ndarray, candidates: np.ndarray, opts: Options) -> np.ndarray:
    # Python's round() and np.rint both round half to even on the same double: the original's count.
    wanted = np.maximum(1, np.rint(length * opts.masked_lm_prob).astype(np.int64))
    return np.minimum(np.minimum(wanted, opts.max_predictions_per_seq), candidates)


def _choose_tokens(keys, candidate, k, p):
    """[n, p] sorted positions of the k candidates with the smallest keys, then L (padding)."""
    length_cap = candidate.shape[1]
    keys = np.where(candidate, keys, 2.0)
    smallest = np.argpartition(keys, p - 1, axis=1)[:, :p]  # the p smallest keys, in no order
    by_key = np.argsort(np.take_along_axis(keys, smallest, axis=1), axis=1, kind="stable")
    order = np.take_along_axis(smallest, by_key, axis=1)
    return np.sort(np.where(np.arange(p)[None, :] < k[:, None], order, length_cap), axis=1)


def _choose_words(keys, candidate, continuation, k):
    """Words in random order, each taken whole if it fits the budget."""
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


@functools.lru_cache(maxsize=8)
def _vocab_from_file(vocab_file: str, do_lower_case: bool | None, stamp: tuple | None) -> Vocab:
    from bert_jax.text import tokenization  # no JAX either; loaded only when a file is named

    lower = tokenization.lower_case(do_lower_case)
    return Vocab.from_tokenizer(tokenization.make_tokenizer(vocab_file, lower))
