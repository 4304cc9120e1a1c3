"""Rotary position embeddings (Su et al. 2021) as transformers' ModernBERT computes them.

Feature j pairs with feature j + head_dim/2 ("rotate_half", not interleaved pairs), frequencies
theta^(-2j/head_dim); angles, cos and sin are float32, and the rotation runs in q's and k's dtype
with the tables cast to it, as transformers' does. Positions are the model's position_ids (per
example in packed rows, so a packed example is rotated as it would be alone).

docs/model.md, "The modern block (ModernBERT)"; docs/scaling.md has the planner's bytes.
"""

import jax
import jax.numpy as jnp
import numpy as np


def inverse_frequencies(theta: float, head_dim: int) -> np.ndarray:
    """theta^(-2j/head_dim) for j < head_dim/2 in float32, as transformers computes it: the
    power rounded once to float32 (torch's float32 pow is; numpy's float32 pow is off by an ulp
    in a few entries, which at position 8,191 moves an angle by 1e-3), then 1/x in float32."""
    exponents = (np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)).astype(
        np.float64
    )
    powers = (np.float64(theta) ** exponents).astype(np.float32)
    return (np.float32(1.0) / powers).astype(np.float32)


def tables(position_ids: jax.Array, theta: float, head_dim: int) -> tuple[jax.Array, jax.Array]:
    """(cos, sin), each [batch or 1, length, head_dim] float32, for position_ids [batch or 1,
    length]."""
    angles = position_ids[..., None].astype(jnp.float32) * inverse_frequencies(theta, head_dim)
    angles = jnp.concatenate([angles, angles], axis=-1)  # [batch, length, head_dim]
    return jnp.cos(angles), jnp.sin(angles)


def rotate(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """x [batch, length, heads, head_dim] rotated by the angles of (cos, sin) [batch or 1,
    length, head_dim]; in x's dtype."""
    half = x.shape[-1] // 2
    cos, sin = (t[:, :, None, :].astype(x.dtype) for t in (cos, sin))
    rotated_half = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated_half * sin
