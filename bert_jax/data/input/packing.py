"""Sequence packing: several variable-length examples per fixed-length row, no FLOP on padding;
numpy only (the input pipeline and fine-tuning's encoders run it on the host). `pack` packs,
`Packed` maps per-row outputs back to the examples. docs/training.md, "Packing".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

EXAMPLE_IDS = "example_ids"
POSITION_IDS = "position_ids"
CLS_POSITIONS = "cls_positions"
EXAMPLE_WEIGHTS = "example_weights"
MODEL_INPUTS = (EXAMPLE_IDS, POSITION_IDS, CLS_POSITIONS)  # what bert_jax.model.encoder takes


def first_fit_decreasing(
    lengths: Sequence[int] | np.ndarray,
    max_length: int,
    max_examples: int,
    item_counts: Sequence[int] | np.ndarray | None = None,
    max_items: int = 0,
) -> list[list[int]]:
    """Rows of example indices: longest first (ties in input order), each into the first row
    with room for its tokens, its items and one more example; ValueError if none can hold it."""
    lengths = np.asarray(lengths, np.int64)
    counts = np.zeros_like(lengths) if item_counts is None else np.asarray(item_counts, np.int64)
    if lengths.ndim != 1 or counts.shape != lengths.shape:
        raise ValueError(
            f"lengths and item_counts must be [examples]; got {lengths.shape}, {counts.shape}"
        )
    too_long = np.flatnonzero((lengths > max_length) | (lengths < 1))
    if too_long.size:
        n = int(too_long[0])
        raise ValueError(
            f"example {n} has {lengths[n]} tokens; every example needs 1 to max_length={max_length}"
        )
    too_many = np.flatnonzero(counts > max_items) if item_counts is not None else []
    if len(too_many):
        n = int(too_many[0])
        raise ValueError(f"example {n} has {counts[n]} items, more than max_items={max_items}")
    order = np.argsort(-lengths, kind="stable")
    # Room left per row, grown as rows open; a row is found with one vectorised test per example.
    space, items, filled = (np.zeros(len(lengths), np.int64) for _ in range(3))
    rows: list[list[int]] = []
    for n in order:
        fits = np.flatnonzero(
            (space[: len(rows)] >= lengths[n])
            & (items[: len(rows)] >= counts[n])
            & (filled[: len(rows)] < max_examples)
        )
        if fits.size:
            r = int(fits[0])
        else:
            r = len(rows)
            rows.append([])
            space[r], items[r] = max_length, max_items
        rows[r].append(int(n))
        space[r] -= lengths[n]
        items[r] -= counts[n]
        filled[r] += 1
    return rows


@dataclasses.dataclass(frozen=True)
class Packed:
    """Packed arrays (rows first) and where each example went: row, slot, offset, item_start."""

    arrays: dict[str, np.ndarray]
    row: np.ndarray
    slot: np.ndarray
    offset: np.ndarray
    lengths: np.ndarray
    item_start: np.ndarray
    item_counts: np.ndarray

    @property
    def num_rows(self) -> int:
        return len(self.arrays[EXAMPLE_IDS])

    def example_values(self, per_slot: np.ndarray) -> np.ndarray:
        """[R, max_examples, ...] (e.g. a classifier's logits) -> [N, ...] in example order."""
        return np.asarray(per_slot)[self.row, self.slot]

    def token_values(self, per_token: np.ndarray, length: int) -> np.ndarray:
        """[R, max_length, ...] -> [N, length, ...] as unpacked, zeros after each example's end."""
        per_token = np.asarray(per_token)
        ex, t = _spans(self.lengths)
        out = np.zeros((len(self.row), length, *per_token.shape[2:]), per_token.dtype)
        out[ex, t] = per_token[self.row[ex], self.offset[ex] + t]
        return out


def _spans(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(example index, index within the example) of every element of ragged runs of `counts`."""
    ex = np.repeat(np.arange(len(counts)), counts)
    starts = np.cumsum(counts) - counts
    return ex, np.arange(len(ex)) - starts[ex]


def pack(
    token_features: Mapping[str, np.ndarray],
    lengths: Sequence[int] | np.ndarray,
    max_length: int,
    max_examples: int,
    *,
    example_features: Mapping[str, np.ndarray] | None = None,
    item_features: Mapping[str, np.ndarray] | None = None,
    item_counts: Sequence[int] | np.ndarray | None = None,
    max_items: int = 0,
    positions: Sequence[str] = (),
    seed: int | None = None,
    rows: Sequence[Sequence[int]] | None = None,
) -> Packed:
    """Packs N right-padded examples (`lengths`: real tokens) into rows by first_fit_decreasing
    (or the plan `rows`); `seed` shuffles the rows. Features (0 where no example's lands):

        token    [N, L, ...] -> [R, max_length, ...]    input_ids, tagging labels, ...
        example  [N, ...]    -> [R, max_examples, ...]  in its slot: NSP or class labels, ...
        item     [N, K, ...] -> [R, max_items, ...]     the first item_counts[n] of each, one
                                                        example's after another (masked-LM lists)

    `positions` features are shifted to index the row (SQuAD's "no answer" 0: the example's
    [CLS]). Added: EXAMPLE_IDS (slot + 1, 0 on padding), POSITION_IDS (0 at each [CLS]),
    CLS_POSITIONS and EXAMPLE_WEIGHTS (1 an example, 0 an empty slot; not the eval batches'
    pipeline.EXAMPLE_WEIGHT)."""
    example_features = dict(example_features or {})
    item_features = dict(item_features or {})
    lengths = np.asarray(lengths, np.int64)
    n = len(lengths)
    counts = np.zeros(n, np.int64) if item_counts is None else np.asarray(item_counts, np.int64)
    for kind, feats, most in (
        ("token", token_features, lengths.max(initial=0)),
        ("example", example_features, None),
        ("item", item_features, counts.max(initial=0)),
    ):
        for name, a in feats.items():
            shape = np.shape(a)
            if (
                not shape
                or shape[0] != n
                or (most is not None and (len(shape) < 2 or shape[1] < most))
            ):
                need = f"[{n}]" if most is None else f"[{n}, at least {most}]"
                raise ValueError(f"{kind} feature {name!r} has shape {shape}; expected {need}")
    unknown = sorted(set(positions) - set(example_features) - set(item_features))
    if unknown:
        raise ValueError(f"positions names {unknown}, which are not example or item features")
    if rows is None:
        rows = first_fit_decreasing(
            lengths, max_length, max_examples, counts if item_features else None, max_items
        )
    order = np.arange(len(rows))
    if seed is not None:
        order = np.random.default_rng(seed).permutation(len(rows))
    row, slot, offset, item_start = (np.zeros(n, np.int64) for _ in range(4))
    placed = np.zeros(n, bool)
    for r, members in enumerate(rows[i] for i in order):
        members = np.asarray(members, np.int64)
        if len(members) > max_examples or lengths[members].sum() > max_length:
            raise ValueError(f"row {r} of the plan does not fit max_length/max_examples")
        row[members], slot[members] = r, np.arange(len(members))
        offset[members] = np.cumsum(lengths[members]) - lengths[members]
        item_start[members] = np.cumsum(counts[members]) - counts[members]
        placed[members] = True
    if not placed.all():
        raise ValueError(f"the plan leaves out examples {np.flatnonzero(~placed)[:5].tolist()}")
    num_rows = len(rows)

    out: dict[str, np.ndarray] = {}
    ex, t = _spans(lengths)
    for name, a in token_features.items():
        a = np.asarray(a)
        out[name] = np.zeros((num_rows, max_length, *a.shape[2:]), a.dtype)
        out[name][row[ex], offset[ex] + t] = a[ex, t]
    out[EXAMPLE_IDS] = np.zeros((num_rows, max_length), np.int32)
    out[EXAMPLE_IDS][row[ex], offset[ex] + t] = slot[ex] + 1
    out[POSITION_IDS] = np.zeros((num_rows, max_length), np.int32)
    out[POSITION_IDS][row[ex], offset[ex] + t] = t
    out[CLS_POSITIONS] = np.zeros((num_rows, max_examples), np.int32)
    out[CLS_POSITIONS][row, slot] = offset
    out[EXAMPLE_WEIGHTS] = np.zeros((num_rows, max_examples), np.float32)
    out[EXAMPLE_WEIGHTS][row, slot] = 1.0
    for name, a in example_features.items():
        a = np.asarray(a)
        out[name] = np.zeros((num_rows, max_examples, *a.shape[1:]), a.dtype)
        shift = offset.reshape(-1, *[1] * (a.ndim - 1)) if name in positions else 0
        out[name][row, slot] = a + shift
    ex, j = _spans(counts)
    for name, a in item_features.items():
        a = np.asarray(a)
        out[name] = np.zeros((num_rows, max_items, *a.shape[2:]), a.dtype)
        values = a[ex, j] + (offset[ex] if name in positions else 0)
        out[name][row[ex], item_start[ex] + j] = values
    return Packed(out, row, slot, offset, lengths, item_start, counts)
