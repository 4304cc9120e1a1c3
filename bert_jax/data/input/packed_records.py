"""Packed pre-training batches (config.data.pack): records -> batch(window) -> PackWindow (seeded
by the window's index) -> flat map to rows -> batch. The rows are a pure function of (seed,
position), so a checkpointed iterator resumes exactly. docs/training.md, "Packing".
"""

from __future__ import annotations

import grain
import numpy as np

from bert_jax import cli
from bert_jax.data.contract import features as F
from bert_jax.data.input import packing


def pack_window(
    window: dict[str, np.ndarray], max_examples: int, seed: int | None = None
) -> packing.Packed:
    """Packs a window of parsed records ([W, ...] arrays) into rows of the same length."""
    length = window[F.INPUT_IDS].shape[1]
    token, items, examples = {}, {}, {}
    for name, a in window.items():
        if name in F.MASKED_FEATURES:
            items[name] = a
        elif a.ndim == 1:
            examples[name] = a
        else:
            token[name] = a
    counts, max_items = None, 0
    if items:
        real = window[F.MASKED_LM_WEIGHTS] > 0
        counts = real.sum(axis=1)
        if (real != (np.arange(real.shape[1]) < counts[:, None])).any():
            raise cli.UserError(
                "masked_lm_weights must be 1 on a record's first predictions, then 0"
            )
        max_items = real.shape[1]
    return packing.pack(
        token,
        window[F.INPUT_MASK].sum(axis=1),
        length,
        max_examples,
        example_features=examples,
        item_features=items,
        item_counts=counts,
        max_items=max_items,
        positions=(F.MASKED_LM_POSITIONS,) if items else (),
        seed=seed,
    )


class PackWindow(grain.transforms.RandomMap):
    """A window of records ([W, ...] arrays) -> the list of its packed rows, in a seeded order."""

    def __init__(self, max_examples: int):
        self.max_examples = max_examples

    def random_map(self, window: dict, rng: np.random.Generator) -> list[dict]:
        packed = pack_window(window, self.max_examples, int(rng.integers(1 << 31)))
        return [{k: v[r] for k, v in packed.arrays.items()} for r in range(packed.num_rows)]


class _Rows(grain.experimental.FlatMapTransform):
    """The list PackWindow made -> its rows, one element each."""

    def __init__(self, max_rows: int):
        self.max_fan_out = max_rows

    def flat_map(self, rows: list) -> list:
        return rows


def packed_batches(
    ds: grain.MapDataset,
    rows_per_batch: int,
    window: int,
    max_examples: int,
    seed: int,
    read_options: grain.ReadOptions,
    prepare: grain.transforms.Map | None = None,
    workers: grain.MultiprocessingOptions | None = None,
) -> grain.IterDataset:
    """Batches of packed rows from `ds`; `read_options` counts records, `prepare` maps windows,
    `workers` pack whole windows, taken in turn (rows batched per worker made other batches)."""
    if window < 1 or max_examples < 1:
        raise cli.UserError(
            f"config.data.pack_window ({window}) and pack_max_examples ({max_examples}) must "
            "be positive"
        )
    windows = ds.batch(window, drop_remainder=True)
    if prepare is not None:
        windows = windows.map(prepare)
    windows = windows.random_map(PackWindow(max_examples), seed=seed)
    read = grain.ReadOptions(
        num_threads=read_options.num_threads,
        prefetch_buffer_size=max(1, -(-read_options.prefetch_buffer_size // window)),
    )
    windows = windows.to_iter_dataset(read)
    windows = windows.mp_prefetch(workers) if workers else windows
    rows = grain.experimental.FlatMapIterDataset(windows, _Rows(window))
    return rows.batch(rows_per_batch, drop_remainder=True)
