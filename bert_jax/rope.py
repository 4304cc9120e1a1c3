"""Rotary position embeddings (Su et al. 2021) as transformers' ModernBERT computes them.

The rotation pairs feature j with feature j + head_dim/2 ("rotate_half", not interleaved
pairs), with frequencies theta^(-2j/head_dim); angles, cos, sin and the rotation itself are
float32 whatever the computation dtype, the result cast back (transformers' order, so float32
logits agree to rounding). Positions are the model's position_ids: 0, 1, ... per row, or per
example in packed rows, so a packed example is rotated as it would be alone.
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
    xf = x.astype(jnp.float32)
    rotated_half = jnp.concatenate([-xf[..., half:], xf[..., :half]], axis=-1)
    out = xf * cos[:, :, None, :] + rotated_half * sin[:, :, None, :]
    return out.astype(x.dtype)
