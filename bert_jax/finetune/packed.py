"""Packed fine-tuning: several short examples per row, so no step multiplies padding.

With config.train.packing (the default) each step's examples (the same ones, in the same order,
as an unpacked step's: `index_batches`) are packed by bert_jax.data.input.packing into a number
of rows that `plan` fixes for the whole run (the step compiles once). Each example keeps its own
attention, positions and [CLS], and the losses weigh examples as unpacked (finetune.heads.loss),
so a packed run trains on the same per-example loss (tests/unit/bert_jax/finetune/test_packed.py).
Span tasks (SQuAD) are not packed in training, though the model and loss support packed span
rows. docs/finetuning.md, "Packing: no FLOPs on padding".
"""

from __future__ import annotations

import dataclasses
import math

import grain
import numpy as np

from bert_jax.data.contract import features as F
from bert_jax.data.input import packing
from bert_jax.finetune import encode, squad

TOKEN_FEATURES = (*encode.INPUTS, encode.LABEL_IDS, encode.LABEL_WEIGHTS)
EXAMPLE_FEATURES = (encode.LABEL, squad.START_POSITIONS, squad.END_POSITIONS)
POSITIONS = (squad.START_POSITIONS, squad.END_POSITIONS)  # token positions: shifted when packed


def trains_packed(config, kind: str) -> bool:
    """Whether a run packs its training steps (and inference): config.train.packing, for every
    task kind but span (see the module docstring)."""
    return bool(config.train.packing) and kind != "span"


def lengths(arrays: dict) -> np.ndarray:
    """Real tokens per example (inputs are right-padded, [CLS] first)."""
    return np.asarray(arrays[F.INPUT_MASK]).sum(axis=1).astype(np.int64)


def pack_examples(
    arrays: dict,
    indices: np.ndarray,
    max_examples: int,
    num_rows: int | None = None,
    rows: list[list[int]] | None = None,
) -> packing.Packed:
    """Examples `indices` of `arrays` (an encoder's [examples, ...] arrays) packed into rows of
    the same length, with `num_rows` rows if given (empty ones after the packed ones: every
    weight 0). `rows`: a plan over positions in `indices` (packing.first_fit_decreasing's)."""
    indices = np.asarray(indices)
    length = arrays[F.INPUT_IDS].shape[1]
    p = packing.pack(
        {k: arrays[k][indices] for k in TOKEN_FEATURES if k in arrays},
        lengths(arrays)[indices],
        length,
        max_examples,
        example_features={k: arrays[k][indices] for k in EXAMPLE_FEATURES if k in arrays},
        positions=[k for k in POSITIONS if k in arrays],
        rows=rows,
    )
    if num_rows is not None:
        if p.num_rows > num_rows:
            raise ValueError(f"{p.num_rows} rows do not fit the planned {num_rows}")
        extra = num_rows - p.num_rows
        arrays = {k: np.pad(v, [(0, extra)] + [(0, 0)] * (v.ndim - 1)) for k, v in p.arrays.items()}
        p = dataclasses.replace(p, arrays=arrays)
    return p


def unpack_outputs(kind: str, p: packing.Packed, outputs, length: int):
    """A model's outputs on packed rows -> per-example outputs laid out as unpacked rows' (token
    outputs: each example's from position 0, zeros after its last token)."""
    if kind in ("classification", "regression"):
        return p.example_values(outputs)
    if kind == "tagging":
        return p.token_values(outputs, length)
    return tuple(p.token_values(x, length) for x in outputs)


INFERENCE_MAX_EXAMPLES = 32  # examples a packed inference row may hold


def pack_for_inference(arrays: dict) -> packing.Packed:
    """Every example of `arrays`, packed in order of length (first-fit decreasing)."""
    n_tokens = lengths(arrays)
    most = _most_examples(n_tokens, arrays[F.INPUT_IDS].shape[1], INFERENCE_MAX_EXAMPLES)
    return pack_examples(arrays, np.arange(len(n_tokens)), most)


def index_batches(num_examples: int, global_batch: int, seed: int, index: int, count: int):
    """Endless batches of example indices for process `index` of `count` (its share of each
    global batch): a new random order every epoch, batches running across epoch boundaries.
    Both unpacked and packed steps (train_batches) read this order. `count` divides
    `global_batch` (runs.check_finetuning)."""
    ds = grain.MapDataset.range(num_examples).shuffle(seed=seed).repeat(None)
    return ds[index::count].batch(global_batch // count, drop_remainder=True)


def _most_examples(n_tokens: np.ndarray, length: int, cap: int) -> int:
    """Examples a row can hold at most: as many of the shortest as fit, but no more than cap."""
    return min(cap, max(1, length // max(1, int(n_tokens.min(initial=length)))))


@dataclasses.dataclass(frozen=True)
class Plan:
    """The fixed shape of a run's packed steps: `rows` per process and step, each with up to
    `max_examples` examples; `examples_per_row` is the mean over the run (the speed-up)."""

    rows: int
    max_examples: int
    examples_per_row: float


def plan(
    arrays: dict, global_batch: int, seed: int, steps: int, process_count: int, data_parallel: int
) -> Plan:
    """The rows every step of a `steps`-step run needs: first-fit decreasing over each step's
    examples, for every process, and the most any step needs (rounded up so that the global
    rows divide over the data-parallel devices). Computed once up front, on the host, from the
    same deterministic order the steps will read, so no step can ever need more."""
    local = global_batch // process_count
    n_tokens = lengths(arrays)
    length = arrays[F.INPUT_IDS].shape[1]
    most_examples = _most_examples(n_tokens, length, local)
    needed, filled, examples = 1, 1, 0
    for p in range(process_count):
        batches = index_batches(len(n_tokens), global_batch, seed, p, process_count)
        for s in range(steps):
            rows = packing.first_fit_decreasing(n_tokens[batches[s]], length, most_examples)
            needed = max(needed, len(rows))
            filled = max(filled, max(len(r) for r in rows))
            examples += len(rows)
    # Global rows (rows x processes) must split evenly over the data-parallel devices.
    multiple = data_parallel // math.gcd(data_parallel, process_count)
    rows = -(-needed // multiple) * multiple
    return Plan(rows, filled, local * steps * process_count / max(1, examples))


def train_batches(
    arrays: dict, global_batch: int, seed: int, the_plan: Plan | None, index: int, count: int
):
    """index_batches' examples, each step's packed into the_plan.rows rows, or without a plan
    its rows as they are (unpacked)."""

    def batch(indices):
        if the_plan is None:
            return {k: v[indices] for k, v in arrays.items()}
        return pack_examples(arrays, indices, the_plan.max_examples, the_plan.rows).arrays

    return index_batches(len(arrays[F.INPUT_IDS]), global_batch, seed, index, count).map(batch)
