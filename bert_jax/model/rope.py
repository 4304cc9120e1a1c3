"""Rotary position embeddings as transformers' ModernBERT computes them: feature j pairs with
j + head_dim/2 ("rotate_half"), tables in float32, the rotation in q's dtype; positions are the
model's position_ids (per example in packed rows). docs/model.md, "The modern block (ModernBERT)".
"""

import jax
import jax.numpy as jnp
import numpy as np


def inverse_frequencies(theta: float, head_dim: int) -> np.ndarray:
    """theta^(-2j/head_dim), j < head_dim/2, as torch rounds it: the power once to float32
    (numpy's float32 pow is an ulp off in places: 1e-3 of angle at position 8,191)."""
    exponents = (np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)).astype(
        np.float64
    )
    powers = (np.float64(theta) ** exponents).astype(np.float32)
    return (np.float32(1.0) / powers).astype(np.float32)


def tables(position_ids: jax.Array, theta: float, head_dim: int) -> tuple[jax.Array, jax.Array]:
    """(cos, sin), each [batch or 1, length, head_dim] float32."""
    angles = position_ids[..., None].astype(jnp.float32) * inverse_frequencies(theta, head_dim)
    angles = jnp.concatenate([angles, angles], axis=-1)  # [batch, length, head_dim]
    return jnp.cos(angles), jnp.sin(angles)


def rotate(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """x [batch, length, heads, head_dim] rotated by (cos, sin), in x's dtype."""
    half = x.shape[-1] // 2
    cos, sin = (t[:, :, None, :].astype(x.dtype) for t in (cos, sin))
    rotated_half = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated_half * sin
