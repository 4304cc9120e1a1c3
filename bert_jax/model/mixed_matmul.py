"""Matrix products of bfloat16 operands with float32 accumulation, forward and backward, in the
form XLA:CPU runs on a CPU's bfloat16 dot-product instructions.

XLA:CPU (JAX 0.10) hands a dot to its matmul library (YNNPACK) in bfloat16 only when the dot's
result is float32: `einsum(bf16, bf16, preferred_element_type=float32)` runs at over twice the
speed of a float32 matmul, while a dot with a bfloat16 result is
rewritten to convert both operands to float32 first and runs as a float32 matmul (plus the
conversions): bfloat16 then costs more than float32 (docs/performance.md). Autodiff has the same
problem in the backward pass, whose dots take the bfloat16 cotangent.

`einsum` computes `jnp.einsum(spec, a, b)` for bfloat16 `a` and `b` on the CPU as
`einsum(..., preferred_element_type=float32)` rounded to `out_dtype`, and its gradients the
same way: the cotangent rounded to bfloat16 (it is bfloat16 already wherever the result is), two
float32-accumulating dots, each rounded to its operand's dtype. That is the arithmetic XLA does
for a bfloat16 dot anyway (products of bfloat16 values are exact in float32, sums are float32),
so values differ from plain autodiff only by the order of the float32 additions. Elsewhere
(float32 operands, or a GPU or TPU, whose compilers already run bfloat16 dots on their matrix
units) it is `jnp.einsum` itself.

Only specs where every index appears in exactly two of the three terms or in all three (batch
indices) have gradients of this form, which is what a matmul is. Dots with batch indices are
left to XLA on the CPU: some of their bfloat16 x bfloat16 -> float32 forms compile but fail at
run time ("Unsupported element type for DotThunk::Execute: BF16 x BF16 = F32").
"""

import functools

import jax
import jax.numpy as jnp


def _operand_grad_specs(spec: str) -> tuple[str, str]:
    inputs, out = spec.split("->")
    a, b = inputs.split(",")
    return f"{out},{b}->{a}", f"{a},{out}->{b}"


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 3))
def _bf16_einsum(spec: str, a, b, out_dtype):
    return jnp.einsum(spec, a, b, preferred_element_type=jnp.float32).astype(out_dtype)


def _bf16_einsum_fwd(spec, a, b, out_dtype):
    return _bf16_einsum(spec, a, b, out_dtype), (a, b)


def _bf16_einsum_bwd(spec, out_dtype, residuals, g):
    a, b = residuals
    spec_a, spec_b = _operand_grad_specs(spec)
    g = g.astype(jnp.bfloat16)
    grad_a = jnp.einsum(spec_a, g, b, preferred_element_type=jnp.float32).astype(a.dtype)
    grad_b = jnp.einsum(spec_b, a, g, preferred_element_type=jnp.float32).astype(b.dtype)
    return grad_a, grad_b


_bf16_einsum.defvjp(_bf16_einsum_fwd, _bf16_einsum_bwd)


def _on_cpu() -> bool:
    from bert_jax.model import attention  # the platform the computation is compiled for

    return attention.platform() == "cpu"


def _batch_free(spec: str) -> bool:
    inputs, out = spec.split("->")
    a, b = inputs.split(",")
    return not (set(a) & set(b) & set(out) - {"."})


def einsum(spec: str, a: jax.Array, b: jax.Array, out_dtype=None) -> jax.Array:
    """jnp.einsum(spec, a, b, preferred_element_type=out_dtype) (module docstring). A two-operand
    matmul spec without batch indices ('...' allowed); out_dtype None: the operands' dtype."""
    if a.dtype == b.dtype == jnp.bfloat16 and _batch_free(spec) and _on_cpu():
        return _bf16_einsum(spec, a, b, jnp.dtype(out_dtype or jnp.bfloat16))
    return jnp.einsum(spec, a, b, preferred_element_type=out_dtype)


def dot_general(
    lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, out_sharding=None
):
    """jax.lax.dot_general for nnx.Linear(dot_general=...): its product (the last dimension of
    `lhs` with the first of a 2-D kernel) through `einsum`; anything else unchanged."""
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
        lhs,
        rhs,
        dimension_numbers,
        precision=precision,
        preferred_element_type=preferred_element_type,
        out_sharding=out_sharding,
    )
