"""A pre-training batch's loss and gradients on a Setup's mesh, through train.loss_and_grads as
train_step calls it (no dropout): for tests that compare meshes or accumulation counts."""

import functools

import jax

from bert_jax.model import sharding
from bert_jax.training import pretrain


def loss_and_grads(setup, params, batch, rng, grad_accum_steps: int = 1):
    """(loss, gradients on the state's parameter shards) of the host batch `batch`."""
    fn = functools.partial(
        pretrain.loss_and_grads,
        setup.graphdef,
        grad_accum_steps=grad_accum_steps,
        dropout=False,
        batch_axes=sharding.batch_spec(setup.rules)[0],
        nsp=setup.nsp,
        mask_id=setup.mask_id,
        layout=pretrain.param_layout(setup),
    )
    with setup.activate():
        batch = sharding.host_to_global(batch, setup.batch_sharding)
        loss, _, grads = jax.jit(fn)(params, batch, rng)
    return loss, grads
