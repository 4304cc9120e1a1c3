"""bert_jax.model.mixed_matmul: bfloat16 matmuls on the CPU give what autodiff of the plain einsum
gives (values and gradients, to float32 summation order), and float32 ones are jnp.einsum."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from bert_jax.model import mixed_matmul

# The model's matmul specs (nnx.Linear's, the stacked query/key/value projection, the MLM head's
# vocabulary projection) and the sizes of their indices.
SPECS = ["...k,kn->...n", "blm,mtn->bltn", "bph,vh->bpv"]
SIZES = {"b": 3, "l": 7, "m": 48, "t": 3, "n": 40, "p": 5, "h": 64, "v": 96, "k": 56}


def _shape(term: str) -> tuple[int, ...]:
    return tuple(SIZES[c] for c in term.replace("...", "bl"))


def _operands(spec: str, seed: int):
    a_term, rest = spec.split(",")
    b_term, out_term = rest.split("->")
    keys = jax.random.split(jax.random.PRNGKey(seed), 3)
    a, b, g = (
        jax.random.normal(k, _shape(t)).astype(jnp.bfloat16)
        for k, t in zip(keys, (a_term, b_term, out_term))
    )
    return a, b, g


def _within_bfloat16_rounding(x, y):
    # Two roundings to bfloat16 of float32 sums that differ only in order: at most one bfloat16
    # step apart (relative 2^-7), plus float32 noise around zero.
    x, y = np.asarray(x, np.float32), np.asarray(y, np.float32)
    np.testing.assert_allclose(x, y, rtol=2**-7, atol=1e-3 * np.abs(y).max())


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("out_dtype", [None, jnp.float32])
def test_bfloat16_values_and_gradients_are_the_plain_einsums(spec, out_dtype):
    a, b, g = _operands(spec, seed=len(spec))
    if out_dtype is not None:
        g = g.astype(out_dtype)

    def plain(a, b):
        return jnp.einsum(spec, a, b, preferred_element_type=out_dtype)

    def mixed(a, b):
        return mixed_matmul.einsum(spec, a, b, out_dtype)

    # What makes it fast on the CPU: the product reaches XLA with a float32 result.
    assert "preferred_element_type=float32" in str(jax.make_jaxpr(mixed)(a, b))
    ours, ours_vjp = jax.vjp(mixed, a, b)
    ref, ref_vjp = jax.vjp(plain, a, b)
    assert ours.dtype == ref.dtype == (out_dtype or jnp.bfloat16)
    _within_bfloat16_rounding(ours, ref)
    for got, want in zip(ours_vjp(g), ref_vjp(g)):
        assert got.dtype == want.dtype == jnp.bfloat16
        _within_bfloat16_rounding(got, want)


@pytest.mark.parametrize("spec", SPECS)
def test_float32_is_jnp_einsum_exactly(spec):
    a, b, g = (x.astype(jnp.float32) for x in _operands(spec, seed=1))
    ours, ours_vjp = jax.vjp(lambda a, b: mixed_matmul.einsum(spec, a, b), a, b)
    ref, ref_vjp = jax.vjp(lambda a, b: jnp.einsum(spec, a, b), a, b)
    np.testing.assert_array_equal(ours, ref)
    for got, want in zip(ours_vjp(g), ref_vjp(g)):
        np.testing.assert_array_equal(got, want)


def test_batched_specs_are_left_to_xla():
    """Attention's dots (batch indices b, h): jnp.einsum itself, which XLA:CPU runs."""
    keys = jax.random.split(jax.random.PRNGKey(2))
    q, k = (jax.random.normal(key, (2, 8, 3, 16)).astype(jnp.bfloat16) for key in keys)
    spec = "bqhd,bkhd->bhqk"
    np.testing.assert_array_equal(
        mixed_matmul.einsum(spec, q, k, jnp.float32),
        jnp.einsum(spec, q, k, preferred_element_type=jnp.float32),
    )


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_linear_with_mixed_dot_general_is_nnx_linear(dtype):
    """model.py's dense layers pass mixed_matmul.dot_general to nnx.Linear."""
    plain = nnx.Linear(48, 40, dtype=dtype, rngs=nnx.Rngs(0))
    mixed = nnx.Linear(48, 40, dtype=dtype, dot_general=mixed_matmul.dot_general, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.PRNGKey(3), (4, 6, 48))

    def loss(model, x):
        return jnp.sum(jnp.sin(model(x).astype(jnp.float32)))

    (l_plain, g_plain), (l_mixed, g_mixed) = (
        nnx.value_and_grad(loss)(m, x) for m in (plain, mixed)
    )
    pairs = [(l_mixed, l_plain)] + list(
        zip(jax.tree.leaves(nnx.state(g_mixed)), jax.tree.leaves(nnx.state(g_plain)))
    )
    for got, want in pairs:
        if dtype == jnp.float32:
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)
