"""bfloat16 matmuls with float32 accumulation, forward and backward, in the bf16 x bf16 -> f32
form XLA:CPU runs on bf16 instructions (a bf16 result runs as a float32 matmul); elsewhere plain
`jnp.einsum`. Dots with batch indices stay with XLA (some such forms fail at run time on CPU).
docs/performance.md, "bfloat16 on a CPU with bf16 instructions".
"""

import functools

import jax
import jax.numpy as jnp

from bert_jax.model import attention


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 3))
def _bf16_einsum(spec: str, a, b, out_dtype):
    return jnp.einsum(spec, a, b, preferred_element_type=jnp.float32).astype(out_dtype)


def _bf16_einsum_fwd(spec, a, b, out_dtype):
    return _bf16_einsum(spec, a, b, out_dtype), (a, b)


def _bf16_einsum_bwd(spec, out_dtype, residuals, g):
    a, b = residuals
    inputs, out = spec.split("->")
    sa, sb = inputs.split(",")
    g = g.astype(jnp.bfloat16)
    grad_a = jnp.einsum(f"{out},{sb}->{sa}", g, b, preferred_element_type=jnp.float32)
    grad_b = jnp.einsum(f"{sa},{out}->{sb}", a, g, preferred_element_type=jnp.float32)
    return grad_a.astype(a.dtype), grad_b.astype(b.dtype)


_bf16_einsum.defvjp(_bf16_einsum_fwd, _bf16_einsum_bwd)


def _on_cpu() -> bool:  # bench/step_variants.py's bf16_dots_xla patches it
    return attention.platform() == "cpu"


def _batch_free(spec: str) -> bool:
    inputs, out = spec.split("->")
    a, b = inputs.split(",")
    return not (set(a) & set(b) & set(out) - {"."})


def einsum(spec: str, a: jax.Array, b: jax.Array, out_dtype=None) -> jax.Array:
    """jnp.einsum(spec, a, b, preferred_element_type=out_dtype); out_dtype None: the operands'."""
    if a.dtype == b.dtype == jnp.bfloat16 and _batch_free(spec) and _on_cpu():
        return _bf16_einsum(spec, a, b, jnp.dtype(out_dtype or jnp.bfloat16))
    return jnp.einsum(spec, a, b, preferred_element_type=out_dtype)


def dot_general(
    lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, out_sharding=None
):
    """jax.lax.dot_general for nnx.Linear, its [..., k] x [k, n] product through `_bf16_einsum`."""
    if (
        lhs.dtype == rhs.dtype == jnp.bfloat16
        and rhs.ndim == 2
        and dimension_numbers == (((lhs.ndim - 1,), (0,)), ((), ()))
        and precision is None
        and out_sharding is None
        and _on_cpu()
    ):
        out_dtype = jnp.dtype(preferred_element_type or jnp.bfloat16)
        return _bf16_einsum("...k,kn->...n", lhs, rhs, out_dtype)
    return jax.lax.dot_general(
        lhs, rhs, dimension_numbers, precision, preferred_element_type, out_sharding=out_sharding
    )
