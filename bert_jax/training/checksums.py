"""Fingerprints of a checkpoint's arrays, as Orbax checks none on restore: the sum over elements
i of fmix32((bits(x[i]) ^ i * golden) + seed) mod 2^32, whatever the sharding; on the host.
docs/training.md, "Checkpoints, resume and preemption".
"""

import concurrent.futures
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

ALGORITHM = "fmix32-sum"  # written with the fingerprints, so a future change is detectable

_GOLDEN = np.uint32(0x9E3779B9)
_SEED = np.uint32(0x27D4EB2F)  # fmix32(0) == 0: without it a zero at index 0 would count nothing
_MASK32 = (1 << 32) - 1
_CHUNK = 1 << 20  # elements hashed at a time: the temporaries stay in cache


def _fmix32(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's finalizer, in place on a uint32 array (numpy wraps modulo 2^32)."""
    h ^= h >> np.uint32(16)
    h *= np.uint32(0x85EBCA6B)
    h ^= h >> np.uint32(13)
    h *= np.uint32(0xC2B2AE35)
    h ^= h >> np.uint32(16)
    return h


def _bits(x: np.ndarray) -> np.ndarray:
    """The element bit patterns as uint32 (8-byte elements as two words, a last axis of 2)."""
    x = np.ascontiguousarray(x)
    if x.dtype == np.bool_:
        return x.astype(np.uint32)
    size = x.dtype.itemsize
    if size in (1, 2):
        return x.view(np.uint8 if size == 1 else np.uint16).astype(np.uint32)
    if size == 4:
        return x.view(np.uint32)
    return x.view(np.uint32).reshape(*x.shape, size // 4)


def _block_sum(data: np.ndarray, index: tuple, shape: tuple) -> int:
    """The fingerprint sum of block `data` at `index` (slices) of a global array of `shape`."""
    bits = _bits(data)
    if bits.ndim > data.ndim:  # 8-byte elements: two words each
        shape, index = (*shape, 2), (*index, slice(None))
    if bits.ndim == 0:
        bits, shape, index = bits.reshape(1), (1,), (slice(0, 1),)
    starts = [sl.indices(n)[0] for sl, n in zip(index, shape)]
    strides = [int(np.prod(shape[k + 1 :], dtype=np.int64)) for k in range(len(shape))]
    # Offsets inside one block row (axes 1...), then rows of axis 0 a chunk at a time.
    trailing = np.zeros(bits.shape[1:], np.uint64)
    for axis in range(1, bits.ndim):
        span = np.arange(starts[axis], starts[axis] + bits.shape[axis], dtype=np.uint64)
        view = [1] * (bits.ndim - 1)
        view[axis - 1] = bits.shape[axis]
        trailing = trailing + (span * np.uint64(strides[axis])).reshape(view)
    trailing = (trailing.ravel() & np.uint64(_MASK32)).astype(np.uint32)
    rows = bits.reshape(bits.shape[0], -1)
    step = max(1, _CHUNK // max(1, trailing.size))
    total = 0
    for r in range(0, rows.shape[0], step):
        n = min(step, rows.shape[0] - r)
        base = np.arange(starts[0] + r, starts[0] + r + n, dtype=np.uint64) * np.uint64(strides[0])
        h = (base & np.uint64(_MASK32)).astype(np.uint32)[:, None] + trailing[None, :]
        h *= _GOLDEN
        h ^= rows[r : r + n]
        h += _SEED
        total += int(_fmix32(h).sum(dtype=np.uint64))
    return total & _MASK32


def _blocks(x) -> list[tuple[np.ndarray, tuple]]:
    """(host data, global index) of this process's blocks of `x`, replica 0 of each shard."""
    if isinstance(x, jax.Array):
        return [(np.asarray(s.data), s.index) for s in x.addressable_shards if s.replica_id == 0]
    x = np.asarray(x)
    return [(x, tuple(slice(0, n) for n in x.shape))] if jax.process_index() == 0 else []


def _partial(x) -> tuple[int, int]:
    """(sum, finite) over this process's blocks of one array."""
    total, finite = 0, 1
    inexact = jnp.issubdtype(x.dtype, jnp.inexact)
    for data, index in _blocks(x):
        total += _block_sum(data, index, tuple(x.shape))
        if inexact and finite:
            finite = int(bool(np.isfinite(data).all()))
    return total & _MASK32, finite


def fingerprint(tree: Any) -> tuple[dict[str, str], list[str]]:
    """({leaf path: 8 hex digits}, [leaves holding a NaN or inf]); every process calls it."""
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    leaves = [leaf for _, leaf in flat]
    with concurrent.futures.ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:
        partials = np.array(list(pool.map(_partial, leaves)), np.uint64).reshape(-1, 2)
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        gathered = np.asarray(multihost_utils.process_allgather(partials.astype(np.uint32)))
        sums = gathered[..., 0].astype(np.uint64).sum(0) & np.uint64(_MASK32)
        partials = np.stack([sums, gathered[..., 1].min(0)], axis=-1)
    keys = [jax.tree_util.keystr(path, simple=True, separator="/") for path, _ in flat]
    sums = {key: f"{int(p[0]):08x}" for key, p in zip(keys, partials)}
    nonfinite = [key for key, p in zip(keys, partials) if not p[1]]
    return sums, nonfinite


def record(items: dict[str, Any]) -> dict:
    """The JSON item a checkpoint stores: {'algorithm', 'items': {item: {path: hex}}}."""
    return {
        "algorithm": ALGORITHM,
        "items": {name: fingerprint(tree)[0] for name, tree in items.items()},
    }


def problems(saved: dict | None, name: str, tree: Any) -> list[str]:
    """Item `name`'s fingerprints other than `saved`'s (None: none saved) and NaN/inf leaves."""
    sums, nonfinite = fingerprint(tree)
    out = []
    if saved is not None:
        if saved.get("algorithm") != ALGORITHM:
            return [f"fingerprints written with {saved.get('algorithm')!r}, not {ALGORITHM!r}"]
        recorded = saved.get("items", {}).get(name)
        if recorded is not None:
            differ = [k for k, v in sums.items() if recorded.get(k, v) != v]
            if differ:
                out.append(
                    _naming(name, differ, "differs from the checksum recorded when it was saved")
                )
    if nonfinite:
        out.append(_naming(name, nonfinite, "holds NaN or inf values"))
    return out


def _naming(name: str, paths: list[str], what: str) -> str:
    more = f" (and {len(paths) - 1} more arrays)" if len(paths) > 1 else ""
    return f"{name}/{paths[0]} {what}{more}"
