"""Pre-training: pure train/eval steps jitted over a device mesh, and train_and_evaluate().
Dropout keys are fold_in(rng, step), so a resumed run draws the same masks; gradient
accumulation is a lax.scan inside one step. docs/training.md, "Configs" and "Python API".
"""

import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bert_jax import cli
from bert_jax.data.contract import data_facts
from bert_jax.data.contract import features as F
from bert_jax.data.input import bad_records, growing_batches, packing, pipeline
from bert_jax.model import encoder, sharding
from bert_jax.training import (
    checkpoints,
    collapse,
    config_check,
    faults,
    loop,
    losses,
    optim,
    train_state,
)
from bert_jax.training.train_state import Setup

Batch = dict[str, jax.Array]


def make_setup(config: ml_collections.ConfigDict, devices=None) -> Setup:
    """The mesh, abstract model and optimizer of a resolved config."""
    model_config = encoder.BertConfig.from_config_dict(config.model)
    abstract_model = nnx.eval_shape(
        lambda: encoder.BertForPreTraining(model_config, rngs=nnx.Rngs(0))
    )
    return train_state.build_setup(
        config,
        abstract_model,
        config.train.num_train_steps,
        shard_update=config.mesh.shard_update,
        devices=devices,
        nsp=config.data.get("nsp") is not False,
        mask_id=config.data.get("mask_token_id"),
    )[0]


# --- Pure functions of arrays ----------------------------------------------------------------
def forward_sums(
    graphdef, params, batch: Batch, dropout_rng=None, nsp: bool = True, mask_id: int | None = None
) -> dict[str, jax.Array]:
    """Loss and accuracy sums of one batch (losses.py); nsp=False zeroes the NSP sums."""
    model = nnx.merge(graphdef, params)
    mlm_logits, nsp_logits = model(
        batch[F.INPUT_IDS],
        batch[F.INPUT_MASK],
        batch[F.SEGMENT_IDS],
        batch[F.MASKED_LM_POSITIONS],
        **{k: batch[k] for k in packing.MODEL_INPUTS if k in batch},
        dropout_rng=dropout_rng,
    )
    example_weight = batch.get(pipeline.EXAMPLE_WEIGHT)
    mlm_weights = batch[F.MASKED_LM_WEIGHTS]
    nsp_weights = nsp_weights_of(batch)
    if example_weight is not None:
        mlm_weights = mlm_weights * example_weight[:, None]
        nsp_weights = nsp_weights * example_weight.reshape(-1, *[1] * (nsp_weights.ndim - 1))
    if not nsp:
        nsp_weights = jnp.zeros_like(nsp_weights)
    positions = batch[F.MASKED_LM_POSITIONS]
    inputs = jnp.take_along_axis(batch[F.INPUT_IDS], positions, axis=1, mode="clip")
    return {
        **losses.mlm_sums(mlm_logits, batch[F.MASKED_LM_IDS], mlm_weights, inputs, mask_id),
        **losses.nsp_sums(nsp_logits, batch[F.NEXT_SENTENCE_LABELS], nsp_weights),
    }


def nsp_weights_of(batch: Batch) -> jax.Array:
    """Per-example NSP weights, [B] or [B, E] (packed rows); 0 for MLM-only records."""
    weights = batch.get(pipeline.NEXT_SENTENCE_WEIGHTS)
    if weights is None:  # batches made by hand (benchmarks, tests): every row an NSP pair
        return jnp.ones(batch[F.NEXT_SENTENCE_LABELS].shape[:1], jnp.float32)
    return weights.astype(jnp.float32)


class ParamLayout(NamedTuple):
    """Weight-update sharding's two places of the parameters (Setup.compute_shardings)."""

    stored: Any  # where the state keeps them (and the gradients go): Setup.param_shardings
    compute: Any  # where the model uses them: its logical axes' layout
    dtype: Any  # the computation dtype


def param_layout(setup: Setup) -> ParamLayout | None:
    if setup.compute_shardings is None:
        return None
    return ParamLayout(
        setup.param_shardings, setup.compute_shardings, setup.model_config.compute_dtype
    )


def for_compute(params, layout: ParamLayout | None):
    """The parameters gathered from their stored shards, kernels cast to the compute dtype
    first (as nnx.Linear would): bfloat16 gathers and reduce-scatters half the bytes."""
    if layout is None:
        return params
    params = jax.tree_util.tree_map_with_path(
        lambda path, p: p.astype(layout.dtype) if optim.is_kernel(path) else p, params
    )
    return jax.lax.with_sharding_constraint(params, layout.compute)


def to_stored(grads, layout: ParamLayout | None):
    """`for_compute`'s gradients reduce-scattered onto the stored shards, in float32."""
    if layout is None:
        return grads
    grads = jax.lax.with_sharding_constraint(grads, layout.stored)
    return jax.tree.map(lambda g: g.astype(jnp.float32), grads)


def loss_and_grads(
    graphdef,
    params,
    batch: Batch,
    rng,
    *,
    grad_accum_steps: int = 1,
    dropout: bool = True,
    batch_axes=None,
    nsp: bool = True,
    mask_id: int | None = None,
    layout: ParamLayout | None = None,
):
    """(loss, sums, grads) of the whole batch, in `grad_accum_steps` micro-batches."""
    mlm_denominator = jnp.sum(batch[F.MASKED_LM_WEIGHTS].astype(jnp.float32))
    nsp_denominator = jnp.sum(nsp_weights_of(batch))  # NSP pairs in the batch
    params = for_compute(params, layout)

    def micro_loss(p, micro, key):
        sums = forward_sums(graphdef, p, micro, key if dropout else None, nsp, mask_id)
        return losses.pretraining_loss(sums, mlm_denominator, nsp_denominator), sums

    def grad_fn(p, micro, key):
        (loss, sums), grads = jax.value_and_grad(micro_loss, has_aux=True)(p, micro, key)
        return (loss, sums), to_stored(grads, layout)

    if grad_accum_steps == 1:
        (loss, sums), grads = grad_fn(params, batch, rng)
        return loss, sums, grads

    def split(x):
        # Micro-batch i takes rows i, i+A, i+2A, ...: each device keeps its own rows, no transfer.
        b = x.shape[0]
        x = x.reshape(b // grad_accum_steps, grad_accum_steps, *x.shape[1:]).swapaxes(0, 1)
        # [accum, micro_batch, ...]
        return jax.lax.with_sharding_constraint(x, P(None, batch_axes)) if batch_axes else x

    micro_batches = jax.tree.map(split, batch)

    def body(carry, xs):
        micro, i = xs
        (loss, sums), grads = grad_fn(params, micro, jax.random.fold_in(rng, i))
        return jax.tree.map(jnp.add, carry, (loss, sums, grads)), None

    zero_sums = jax.eval_shape(
        lambda: forward_sums(
            graphdef, params, jax.tree.map(lambda x: x[0], micro_batches), None, nsp, mask_id
        )
    )
    zero_grads = jax.eval_shape(lambda: to_stored(params, layout))
    init = (
        jnp.zeros([], jnp.float32),
        jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), zero_sums),
        jax.tree.map(lambda g: jnp.zeros(g.shape, jnp.float32), zero_grads),
    )
    (loss, sums, grads), _ = jax.lax.scan(body, init, (micro_batches, jnp.arange(grad_accum_steps)))
    return loss, sums, grads


def train_step(
    state: dict,
    batch: Batch,
    lr: dict,
    *,
    graphdef,
    optimizer,
    nsp: bool = True,
    **loss_options,
) -> tuple[dict, dict]:
    """(new state, scalar metrics) of one optimizer step at the rates `lr` (`optimizer(lr)`)."""
    step = state["step"]
    rng = jax.random.fold_in(state["rng"], step)
    loss, sums, grads = loss_and_grads(
        graphdef, state["params"], batch, rng, nsp=nsp, **loss_options
    )
    new_state, grad_norm = train_state.apply_gradients(state, grads, loss, optimizer(lr))
    metrics = {
        "loss": loss,
        **losses.train_ratios(sums),  # mlm_accuracy: at [MASK] positions
        "grad_norm": grad_norm,  # before clipping
        "learning_rate": optim.rate(lr, step),
        "tokens": jnp.sum(batch[F.INPUT_MASK]),
        "nonfinite_steps": new_state["nonfinite_steps"],  # cumulative over the run
    }
    if not nsp:
        del metrics["nsp_accuracy"]
    return new_state, metrics


# --- Jitted, sharded entry points ------------------------------------------------------------
def abstract_batch(
    facts: data_facts.DataFacts, global_batch_size: int, setup: Setup
) -> dict[str, jax.ShapeDtypeStruct]:
    """The global train batch as abstract arrays on the batch sharding, for compiling the step
    ahead of time (bert_jax.plan)."""
    b = global_batch_size
    lengths = facts.batch_schema().lengths()
    shapes = {k: (b,) if k == F.NEXT_SENTENCE_LABELS else (b, n) for k, n in lengths.items()}
    shapes[pipeline.NEXT_SENTENCE_WEIGHTS] = (b,)
    floats = {*F.FLOAT_FEATURES, pipeline.NEXT_SENTENCE_WEIGHTS}
    if facts.pack_max_examples:  # packed_records.py: per-record fields are [rows, examples]
        e, length = facts.pack_max_examples, facts.max_seq_length
        for k in (F.NEXT_SENTENCE_LABELS, pipeline.NEXT_SENTENCE_WEIGHTS):
            shapes[k] = (b, e)
        shapes.update({packing.EXAMPLE_IDS: (b, length), packing.POSITION_IDS: (b, length)})
        shapes.update({packing.CLS_POSITIONS: (b, e), packing.EXAMPLE_WEIGHTS: (b, e)})
        floats.add(packing.EXAMPLE_WEIGHTS)
    return {
        k: jax.ShapeDtypeStruct(
            shape, jnp.float32 if k in floats else jnp.int32, sharding=setup.batch_sharding
        )
        for k, shape in shapes.items()
    }


def jit_init(setup: Setup, seed: int) -> Callable[[], dict]:
    """A function creating the step-0 state directly on its shardings."""
    model_config, tx = setup.model_config, setup.tx

    def init():
        init_key, rng = jax.random.split(jax.random.PRNGKey(seed))
        model = encoder.BertForPreTraining(model_config, rngs=nnx.Rngs(init_key))
        return train_state.new_state(nnx.to_pure_dict(nnx.state(model, nnx.Param)), tx, rng)

    return jax.jit(init, out_shardings=setup.state_shardings)


def jit_train_step(setup: Setup, grad_accum_steps: int = 1):
    """(state, batch, lr) -> (state, metrics), sharded; the state is donated."""
    fn = functools.partial(
        train_step,
        graphdef=setup.graphdef,
        optimizer=setup.optimizer,
        grad_accum_steps=grad_accum_steps,
        batch_axes=sharding.batch_spec(setup.rules)[0],
        nsp=setup.nsp,
        mask_id=setup.mask_id,
        layout=param_layout(setup),
    )
    replicated = NamedSharding(setup.mesh, P())
    return jax.jit(
        fn,
        in_shardings=(setup.state_shardings, setup.batch_sharding, replicated),
        out_shardings=(setup.state_shardings, replicated),
        donate_argnums=(0,),
    )


def jit_eval_step(setup: Setup):
    """(params, batch) -> sums over the batch, replicated."""
    layout = param_layout(setup)

    def fn(params, batch):
        params = for_compute(params, layout)
        return forward_sums(setup.graphdef, params, batch, nsp=setup.nsp, mask_id=setup.mask_id)

    return jax.jit(
        fn,
        in_shardings=(setup.param_shardings, setup.batch_sharding),
        out_shardings=NamedSharding(setup.mesh, P()),
    )


def evaluate(
    setup: Setup,
    eval_step,
    params,
    batches: list[dict[str, np.ndarray]],
    between_batches: Callable[[], None] = lambda: None,
) -> dict[str, float]:
    """losses.summarize over host-local `batches`; `between_batches()` may raise Abandoned."""
    totals: dict[str, float] = {}
    with setup.activate():
        for host_batch in batches:
            sums = jax.device_get(
                eval_step(params, sharding.host_to_global(host_batch, setup.batch_sharding))
            )
            for k, v in sums.items():
                totals[k] = totals.get(k, 0.0) + float(v)
            between_batches()
    return losses.summarize(totals)


# --- The loop --------------------------------------------------------------------------------
@faults.one_run_per_workdir("bert_jax.main")
def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict:
    """Trains (resuming from `workdir`'s checkpoint) and evaluates. Returns {'step', 'train',
    'eval' (the last logged figures), 'stopped' (docs/training.md, "The loop and why it
    stopped")}."""
    config = config_check.pretraining(config, jax.device_count(), jax.process_count())
    setup = make_setup(config)
    t = config.train
    is_primary = jax.process_index() == 0
    say = functools.partial(print, flush=True) if is_primary else lambda *a: None
    total = t.num_train_steps
    last_step = min(total, t.stop_at_step) if t.stop_at_step else total

    train_ds = pipeline.train_dataset(
        config.data,
        setup.model_config.vocab_size,
        t.global_batch_size,
        t.seed,
        jax.process_index(),
        jax.process_count(),
        batch_warmup=optim.batch_warmup(t),  # None unless train.batch_warmup_steps
        type_vocab_size=setup.model_config.type_vocab_size,
    )
    data_iter = iter(train_ds)
    manager = checkpoints.make_manager(
        workdir, config.checkpoint.max_to_keep, config.checkpoint.async_save
    )
    # One signal handler from here on: a signal while restoring or compiling saves after step 1.
    with faults.Preemption(manager) as preemption:
        resumed = checkpoints.restore_latest(
            manager, setup.abstract_state, data_iter, config.model.to_dict()
        )
        if resumed is None:
            state = checkpoints.initial_state(t, setup, jit_init(setup, t.seed))
        else:
            state = resumed[1]
            say(f"resuming from {manager.directory}/{resumed[0]}")
        step = int(jax.device_get(state["step"]))
        growing_batches.align(data_iter, step)  # batch warmup: the size of this step's batch

        eval_batches = []
        if config.data.eval_files:
            eval_batches = pipeline.eval_batches(
                config.data,
                config.data.eval_files,
                setup.model_config.vocab_size,
                config.eval.batch_size,
                config.eval.num_examples,
                t.seed,
                jax.process_index(),
                jax.process_count(),
                setup.model_config.type_vocab_size,
            )
        # One compiled step per accumulation count (batch warmup's smaller ones on first use).
        jitted_steps = {t.grad_accum_steps: jit_train_step(setup, t.grad_accum_steps)}
        lr = setup.lr_on_mesh()

        def p_train_step(state, batch):
            accum = growing_batches.accumulation(
                batch[F.INPUT_IDS].shape[0], t.global_batch_size, t.grad_accum_steps
            )
            if accum not in jitted_steps:
                jitted_steps[accum] = jit_train_step(setup, accum)
            return jitted_steps[accum](state, batch, lr)

        p_eval_step = jit_eval_step(setup) if eval_batches else None
        check_collapse = collapse.make_check(setup) if eval_batches else None

        training = loop.Loop(workdir, config, setup, manager, data_iter, step, total)
        num_params = sum(
            math.prod(x.shape) for x in jax.tree.leaves(setup.abstract_state["params"])
        )
        say(
            f"training {num_params:,} parameters on mesh {dict(setup.mesh.shape)}, "
            f"step {step} -> {last_step}"
        )
        if step >= last_step:  # a finished run rerun, or num_train_steps lowered below its step
            say(
                f"nothing to train: {workdir} is at step {step}, this run ends at step "
                f"{last_step} (train.num_train_steps / train.stop_at_step); raise it to train on"
            )

        def train_figures(means: dict, step_time: float | None) -> dict:
            tokens_per_step = means.pop("tokens")
            skipped = bad_records.count(data_iter)  # config.data.bad_records='skip': so far
            if skipped is not None:
                means["bad_records"] = float(skipped)
            if step_time:
                means.update(step_time=step_time, tokens_per_sec=tokens_per_step / step_time)
            return means

        last_eval: dict[str, float] = {}

        def evaluate_now(step: int, state: dict, between_batches: Callable[[], None]) -> str | None:
            figures = evaluate(setup, p_eval_step, state["params"], eval_batches, between_batches)
            last_eval.clear()  # an eval a signal cut short (faults.Abandoned) leaves the last one
            last_eval.update(figures)
            last_eval["hidden_cosine"] = check_collapse(state["params"], eval_batches[0])
            warning = collapse.warning(last_eval["hidden_cosine"], step)
            if warning and is_primary:
                cli.warn(warning)
            training.log.write(step, "eval", last_eval)
            training.progress.report(step, last_eval, prefix="eval  ", eta=False)
            # MLPerf's target (0.720): over all masked positions of its eval set, as here.
            target = config.eval.target_mlm_accuracy
            if not (target and last_eval.get("mlm_accuracy_all", 0.0) >= target):
                return None
            say(
                f"held-out MLM accuracy (all masked positions) {last_eval['mlm_accuracy_all']:.4f}"
                f" reached the target {target} at step {step}: stopping"
            )
            return "target_reached"

        out = training.run(
            state,
            last_step=last_step,
            train_step=p_train_step,
            train_figures=train_figures,
            evaluate=evaluate_now if eval_batches else None,
            preemption=preemption,
        )
        training.log.close()
        return {"step": out.step, "train": out.train, "eval": last_eval, "stopped": out.stopped}
