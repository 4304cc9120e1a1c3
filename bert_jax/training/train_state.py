"""The train state both trainers share: Setup and its builder, the state at step 0 and one
optimizer step that never lets a NaN into the parameters. The state is a plain pytree:
    {'params': pure dict (fine-tuning's: its trainable ones), 'opt_state': optax's,
     'step': int32, 'rng': uint32[2], 'nonfinite_steps': int32, updates dropped for a NaN/inf}
The schedule's numbers (Setup.lr) are a separate argument of the steps: not in checkpoints, not
compiled in (runs that differ only in their schedule share one compiled step).
"""

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from bert_jax.model import encoder, sharding
from bert_jax.training import optim


@dataclasses.dataclass(frozen=True)
class Setup:
    """Everything the steps need that is not an array."""

    model_config: encoder.BertConfig
    graphdef: Any
    mesh: Mesh
    rules: tuple
    param_shardings: Any  # pure dict of NamedSharding, like params
    state_shardings: dict  # like the train state
    abstract_state: dict  # jax.ShapeDtypeStruct leaves carrying state_shardings
    batch_sharding: NamedSharding
    # lr -> the optimizer at those rates; a train step calls it on the `lr` it is given
    optimizer: Callable[[dict], optax.GradientTransformation]
    lr: dict  # the learning-rate schedule's numbers (optim.schedule_values says why)
    nsp: bool = True  # next-sentence prediction in the loss
    # [MASK]'s id: with it the MLM figures are kept by kind of position (losses.position_kinds).
    mask_id: int | None = None
    # Where the model uses the parameters, when weight-update sharding stores them split over
    # the batch's axes (None: param_shardings).
    compute_shardings: Any = None
    # Fine-tuning's: the task family, and where its untrained (frozen) parameters are placed.
    kind: str = ""
    frozen_shardings: Any = None

    @property
    def tx(self) -> optax.GradientTransformation:
        return self.optimizer(self.lr)

    def lr_on_mesh(self) -> dict:
        """`lr` replicated on the mesh once, not copied from the host at each step."""
        return jax.device_put(self.lr, NamedSharding(self.mesh, P()))

    def abstract_lr(self) -> dict:
        replicated = NamedSharding(self.mesh, P())
        return {k: jax.ShapeDtypeStruct((), jnp.float32, sharding=replicated) for k in self.lr}

    @property
    def schedule(self) -> optax.Schedule:
        return functools.partial(optim.rate, self.lr)

    def activate(self):
        return sharding.activate(self.mesh, self.rules)

    def data_parallel(self) -> int:
        return sharding.data_parallel_size(self.mesh, self.rules)


def build_setup(
    config,
    model,
    total_steps: int,
    *,
    trainable=nnx.Param,
    optim_config=None,
    mask_fn=optim.weight_decay_mask,
    shard_update: bool = False,
    devices=None,
    **fields,
) -> tuple[Setup, dict, dict]:
    """(Setup, trainable parameters, the rest: pure dicts placed nowhere), as MaxText's
    get_abstract_state; `fields`: the Setup's task fields."""
    o = optim_config or config.optim
    optimizer = functools.partial(optim.make_optimizer, o, mask_fn=mask_fn)
    lr = optim.schedule_values(o, total_steps)
    graphdef, trained, rest = nnx.split(model, trainable, ...)
    params = nnx.to_pure_dict(trained)
    abstract = {
        "params": params,
        "opt_state": jax.eval_shape(optimizer(lr).init, params),
        "step": jax.ShapeDtypeStruct((), jnp.int32),
        "rng": jax.ShapeDtypeStruct((2,), jnp.uint32),
        "nonfinite_steps": jax.ShapeDtypeStruct((), jnp.int32),
    }

    mesh, rules = sharding.mesh_from_config(config.mesh, model.config.num_attention_heads, devices)
    compute_shardings = sharding.param_shardings(trained, mesh, rules)
    param_shardings = compute_shardings
    if shard_update:
        param_shardings = sharding.update_shardings(compute_shardings, params, rules)
    state_shardings = {
        "params": param_shardings,
        "opt_state": sharding.tree_shardings_like_params(
            abstract["opt_state"], param_shardings, mesh
        ),
        **dict.fromkeys(("step", "rng", "nonfinite_steps"), NamedSharding(mesh, P())),
    }
    setup = Setup(
        model.config,
        graphdef,
        mesh,
        rules,
        param_shardings,
        state_shardings,
        jax.tree.map(
            lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
            abstract,
            state_shardings,
        ),
        sharding.batch_sharding(mesh, rules),
        optimizer,
        lr,
        compute_shardings=compute_shardings,
        frozen_shardings=sharding.param_shardings(rest, mesh, rules),
        **fields,
    )
    return setup, params, nnx.to_pure_dict(rest)


def new_state(params, tx: optax.GradientTransformation, rng: jax.Array) -> dict:
    """The train state at step 0; jit it with Setup.state_shardings to build it on the mesh."""
    return {
        "params": params,
        "opt_state": tx.init(params),
        "step": jnp.zeros([], jnp.int32),
        "rng": rng,
        "nonfinite_steps": jnp.zeros([], jnp.int32),
    }


def apply_gradients(
    state: dict, grads, loss: jax.Array, tx: optax.GradientTransformation
) -> tuple[dict, jax.Array]:
    """(state, gradient norm before clipping) after one step; a non-finite loss or norm leaves
    params and opt_state as they were and counts in 'nonfinite_steps'; 'step' counts batches, so
    it advances either way. Decided on the device, without a host sync."""
    with jax.named_scope("grad_norm"):
        # inf/NaN iff some gradient is (or their squares overflow)
        grad_norm = optax.global_norm(grads)
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)

    @jax.named_scope("optimizer")
    def update(params, opt_state):
        # The clipping takes the norm rather than summing every gradient a second time.
        updates, opt_state = optax.with_extra_args_support(tx).update(
            grads, opt_state, params, grad_norm=grad_norm
        )
        return optax.apply_updates(params, updates), opt_state

    # A conditional, not a jnp.where(finite, new, old): XLA keeps the update in place, where the
    # select keeps both versions alive (docs/performance.md, "Memory per device").
    params, opt_state = jax.lax.cond(
        finite, update, lambda p, o: (p, o), state["params"], state["opt_state"]
    )
    return {
        "params": params,
        "opt_state": opt_state,
        "step": state["step"] + 1,
        "rng": state["rng"],
        "nonfinite_steps": state["nonfinite_steps"] + jnp.where(finite, 0, 1).astype(jnp.int32),
    }, grad_norm
