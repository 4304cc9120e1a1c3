"""Dropout from a counter-based hash: the masks of the model's hidden and attention dropout."""

import jax
import jax.numpy as jnp


def _mix32(h: jax.Array) -> jax.Array:
    """MurmurHash3's 32-bit finalizer: a bijection on uint32 with full avalanche."""
    h = h ^ (h >> 16)
    h = h * jnp.uint32(0x85EBCA6B)
    h = h ^ (h >> 13)
    h = h * jnp.uint32(0xC2B2AE35)
    return h ^ (h >> 16)


def dropout_bits(rng: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """16 random bits (uint32) per element, keyed by `rng`: a counter hash XLA fuses into the
    dropout multiply (docs/performance.md). They depend only on (key, index), so any sharding
    draws the same mask; two avalanche rounds suit dropout, not cryptography or Monte Carlo."""
    k0, k1 = jax.random.bits(rng, (2,), jnp.uint32)
    rows = len(shape) >= 2
    if not rows:
        shape = (1, *shape)
    inner = jnp.zeros(shape[1:], jnp.uint32)
    stride = 1
    for d in range(len(shape) - 1, 0, -1):  # row-major index within a row
        inner = inner + jax.lax.broadcasted_iota(jnp.uint32, shape[1:], d - 1) * jnp.uint32(stride)
        stride *= shape[d]
    row = jax.lax.broadcasted_iota(jnp.uint32, shape, 0)
    bits = _mix32(_mix32(inner[None] ^ k0) ^ (row * jnp.uint32(0x9E3779B9) + k1)) >> 16
    return bits if rows else bits[0]


def dropout(x: jax.Array, rate: float, rng: jax.Array | None) -> jax.Array:
    """Inverted dropout (the rate exact to 1/65536); the identity without `rng` or at rate 0."""
    if rng is None or rate == 0.0:
        return x
    keep, scale = keep_mask(rng, x.shape, rate)
    return jnp.where(keep, x * scale, 0).astype(x.dtype)


def keep_mask(rng: jax.Array, shape: tuple[int, ...], rate: float) -> tuple[jax.Array, float]:
    """(keep, scale): the boolean mask dropout keeps and its factor; the same again from `rng`."""
    threshold = round(rate * 65536)
    return dropout_bits(rng, shape) >= threshold, 65536 / (65536 - threshold)
