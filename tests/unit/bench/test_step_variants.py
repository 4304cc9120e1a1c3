"""bench/step_variants.py: every patch replaces a function bert_jax has, is undone on exit, and
computes the train step's loss and gradients as the code it replaces does (up to rounding)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from bench import step_variants
from bert_jax.model import encoder
from configs import tiny


def _loss_and_grads(graphdef, params, batch):
    """Jitted afresh on every call (a new function, so no cached trace): a patch in effect is
    the one traced."""

    def loss(params):
        mlm, nsp = nnx.merge(graphdef, params)(*batch, dropout_rng=jax.random.key(1))
        return jnp.sum(mlm.astype(jnp.float32) ** 2) + jnp.sum(nsp.astype(jnp.float32) ** 2)

    return jax.jit(jax.value_and_grad(loss))(params)


@pytest.mark.parametrize(
    "name, dtype",
    [(name, "float32") for name in sorted(step_variants.PATCHES)]
    + [("bf16_dots_xla", "bfloat16"), ("softmax_autodiff", "bfloat16")],
)
def test_each_patch_keeps_the_loss_and_gradients(name, dtype):
    cfg = encoder.BertConfig.from_config_dict(tiny.get_config().model)
    cfg = dataclasses.replace(cfg, vocab_size=101, max_position_embeddings=32, dtype=dtype)
    graphdef, params = nnx.split(encoder.BertForPreTraining(cfg, rngs=nnx.Rngs(0)))
    rng = np.random.default_rng(0)
    ids = jnp.asarray(rng.integers(5, 101, size=(2, 16)), jnp.int32)
    batch = (ids, jnp.ones_like(ids), jnp.zeros_like(ids), jnp.asarray([[1, 3], [2, 5]]))
    ref_loss, ref_grads = _loss_and_grads(graphdef, params, batch)
    with step_variants.patches([name]):
        loss, grads = _loss_and_grads(graphdef, params, batch)
    again, _ = _loss_and_grads(graphdef, params, batch)  # the patch is undone on exit
    assert float(again) == float(ref_loss)
    tol = 1e-5 if dtype == "float32" else 3e-2
    np.testing.assert_allclose(float(loss), float(ref_loss), rtol=tol)
    scale = max(float(jnp.max(jnp.abs(r))) for r in jax.tree.leaves(ref_grads))
    for g, r in zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), atol=tol * scale, rtol=0)
