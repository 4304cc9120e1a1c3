"""Packed fine-tuning: several short examples per row, so no step multiplies padding. Each step
packs an unpacked step's examples (`index_batches`) into a row count `plan` fixes for the run (one
compile). docs/finetuning.md, "Packing: no FLOPs on padding".
"""

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
    """config.train.packing, for every task kind but span (docs/finetuning.md says why)."""
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
    """Examples `indices` of an encoder's `arrays` packed into rows, `num_rows` if given (empty
    rows weigh 0); `rows`: packing.first_fit_decreasing's plan over positions in `indices`."""
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
    """A model's outputs on packed rows -> per-example outputs laid out as unpacked rows'."""
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
    """Endless batches of example indices, process `index` of `count`'s share of each global
    batch: a new random order every epoch, batches running across epoch boundaries."""
    ds = grain.MapDataset.range(num_examples).shuffle(seed=seed).repeat(None)
    return ds[index::count].batch(global_batch // count, drop_remainder=True)


def _most_examples(n_tokens: np.ndarray, length: int, cap: int) -> int:
    """Examples a row can hold at most: as many of the shortest as fit, but no more than cap."""
    return min(cap, max(1, length // max(1, int(n_tokens.min(initial=length)))))


@dataclasses.dataclass(frozen=True)
class Plan:
    """A run's packed steps: `rows` per process and step, up to `max_examples` examples each."""

    rows: int
    max_examples: int
    examples_per_row: float


def plan(
    arrays: dict, global_batch: int, seed: int, steps: int, process_count: int, data_parallel: int
) -> Plan:
    """The most rows any step of the run needs (first-fit decreasing over every process's steps,
    in the order they will read), rounded up to divide over the data-parallel devices."""
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
    """index_batches' examples, each step packed into the_plan.rows rows (no plan: unpacked)."""

    def batch(indices):
        if the_plan is None:
            return {k: v[indices] for k, v in arrays.items()}
        return pack_examples(arrays, indices, the_plan.max_examples, the_plan.rows).arrays

    return index_batches(len(arrays[F.INPUT_IDS]), global_batch, seed, index, count).map(batch)
