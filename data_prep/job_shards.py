"""The scaled job's shards: how many, which records of which units each holds, in what order.

Units are put in a seeded random order and their records cut into equal contiguous ranges
(`plan_shards`); inside a shard the records are shuffled by a seeded permutation (`shard_order`).
Pure functions of the JobSpec and the units' record counts: the local runner and the Beam job
write the same shards.
"""

import math

import numpy as np

from bert_jax import cli
from data_prep import units as units_lib
from data_prep.job import SPLITS, JobSpec, seed


def shard_count(spec: JobSpec, split: str, instances: int, record_bytes: int) -> int:
    """Shards of a split: as asked, or enough that none holds much more than shard_size_mb."""
    if instances == 0:
        return 0
    asked = spec.num_shards if split == "train" else spec.num_eval_shards
    if asked > instances:
        flag = "--num_shards" if split == "train" else "--num_eval_shards"
        raise cli.UserError(
            f"{flag}={asked} but the {split} split has only {instances} instances; "
            f"rerun with {flag} <= {instances} (finished work units are reused)"
        )
    return asked or max(
        1, min(instances, math.ceil(record_bytes / (spec.shard_size_mb * units_lib.MB)))
    )


def plan_shards(
    spec: JobSpec, split: str, counts: list[int], record_bytes: int
) -> list[list[tuple]]:
    """Per shard, its pieces (unit index, first record, end record) in the order they are
    concatenated: shard sizes differ by at most one, each shard reads a few units sequentially,
    and each draws its documents from all over the corpus."""
    total = sum(counts)
    num = shard_count(spec, split, total, record_bytes)
    order = np.random.default_rng(seed(spec, "unit_order", SPLITS.index(split))).permutation(
        len(counts)
    )
    ends = np.cumsum([counts[u] for u in order]).tolist()
    shards, position, k = [], 0, 0
    for shard in range(num):
        stop, pieces = total * (shard + 1) // num, []
        while position < stop:
            unit = int(order[k])
            unit_start = ends[k] - counts[unit]
            take_to = min(stop, ends[k])
            pieces.append((unit, position - unit_start, take_to - unit_start))
            position = take_to
            if position == ends[k]:
                k += 1
        shards.append(pieces)
    return shards


def shard_order(spec: JobSpec, split: str, shard: int, count: int) -> np.ndarray:
    """The seeded shuffle of a shard: output record j is concatenated record order[j]."""
    return np.random.default_rng(seed(spec, "shuffle", SPLITS.index(split), shard)).permutation(
        count
    )
