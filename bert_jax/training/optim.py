"""Learning-rate schedules, batch-size warmup, and the optimizers as optax chains over pure-dict
parameters: BERT's AdamW (no bias correction by default) and LAMB, and ModernBERT's StableAdamW.
docs/training.md, "Configs" and "The modern recipe"; fine-tuning's: docs/finetuning.md.
"""

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from bert_jax import cli

SCHEDULES = ("linear", "polynomial", "constant", "wsd")
DECAY_SHAPES = ("linear", "1-sqrt")
# Where the decay is measured from: step 0 (BERT, MLPerf) or warmup's end (transformers).
DECAY_FROM = ("start", "warmup_end")
OPTIMIZERS = ("adamw", "lamb", "stable_adamw")


def schedule_values(optim: ml_collections.ConfigDict, num_train_steps: int) -> dict[str, Any]:
    """The float32 numbers that fix the learning rate at every step (`rate`), checked: arguments
    of the train steps, never constants compiled in. Linear warmup from 0, then polynomial decay
    to `end_learning_rate`, measured from `decay_from`; "wsd" decays over its last
    `decay_fraction` only, linearly or as 1 - sqrt (docs/training.md, "The modern recipe")."""
    for name, choices in (
        ("schedule", SCHEDULES),
        ("decay_from", DECAY_FROM),
        ("decay_shape", DECAY_SHAPES),
    ):
        if optim[name] not in choices:
            raise cli.UserError(f"optim.{name}={optim[name]!r}; choose one of {choices}")
    decay_from, shape = optim.decay_from, optim.decay_shape
    fraction = float(optim.decay_fraction)
    if not 0.0 <= fraction <= 1.0:
        raise cli.UserError(f"optim.decay_fraction={fraction} must lie in [0, 1]")
    if num_train_steps <= 0:
        raise cli.UserError(f"train.num_train_steps must be positive, got {num_train_steps}")
    if not 0 <= optim.warmup_steps <= num_train_steps:
        raise cli.UserError(
            f"optim.warmup_steps={optim.warmup_steps} must lie in [0, train.num_train_steps="
            f"{num_train_steps}]"
        )
    warmup = int(optim.warmup_steps)
    constant = optim.schedule == "constant"
    wsd = optim.schedule == "wsd"
    decay_steps = round(fraction * num_train_steps)
    if wsd and warmup + decay_steps > num_train_steps:
        raise cli.UserError(
            f"optim.warmup_steps={warmup} and the decay's {decay_steps} steps "
            f"(optim.decay_fraction={fraction} of {num_train_steps}) overlap: lower either, or "
            "raise train.num_train_steps"
        )
    origin = warmup if decay_from == "warmup_end" else 0
    values = {
        "peak": optim.learning_rate,
        # constant: (peak - 0) * 1 + 0 is the peak exactly in float32
        "end": 0.0 if constant else optim.end_learning_rate,
        "warmup": warmup,
        "total": num_train_steps,
        # warmup == num_train_steps (with "warmup_end"): no decay steps, the rate after warmup
        # is `end` (transformers gives 0 there); max() only keeps the division defined.
        "span": max(decay_steps if wsd else num_train_steps - origin, 1),
        "power": 0.0 if constant else 1.0 if optim.schedule in ("linear", "wsd") else optim.power,
        "sqrt": 1.0 if wsd and shape == "1-sqrt" else 0.0,
    }
    return {k: np.float32(v) for k, v in values.items()}


def rate(values: dict[str, Any], step) -> jax.Array:
    """The learning rate of the `step`-th update (0-based) under `schedule_values`' numbers."""
    v = {k: jnp.asarray(x, jnp.float32) for k, x in values.items()}
    step = jnp.asarray(step, jnp.float32)
    frac = jnp.clip((v["total"] - step) / v["span"], 0, 1)
    # power 1 (linear) as frac itself: a traced exponent goes through pow(), which need not
    # return frac exactly; 0 (constant) gives 1 from pow(0, 0) too.
    scaled = jnp.where(v["power"] == 1, frac, frac ** v["power"])
    if "sqrt" in v:  # values saved before the field: none
        # 1 - sqrt(x), x = 1 - frac, as frac / (1 + sqrt(x)): no cancellation near the end.
        scaled = jnp.where(v["sqrt"] == 1, frac / (1 + jnp.sqrt(1 - frac)), scaled)
    decayed = (v["peak"] - v["end"]) * scaled + v["end"]
    warming = v["peak"] * step / jnp.maximum(v["warmup"], 1)
    return jnp.where(step < v["warmup"], warming, decayed)


@dataclasses.dataclass(frozen=True)
class BatchWarmup:
    """Batch-size warmup: step k's batch is `count(k)` micro-batches, from `start` at step 0 to
    `final` (the full batch) at step `steps`, each count its own compiled step."""

    final: int  # train.grad_accum_steps
    start: int  # train.batch_warmup_start_accum
    steps: int  # train.batch_warmup_steps

    def count(self, step: int) -> int:
        if step >= self.steps:
            return self.final
        return self.start + (max(step, 0) * (self.final - self.start)) // self.steps


def batch_warmup(train: ml_collections.ConfigDict) -> BatchWarmup | None:
    """The run's BatchWarmup, checked; None when train.batch_warmup_steps is 0."""
    steps = int(train.batch_warmup_steps or 0)
    if steps == 0:
        return None
    final, start = int(train.grad_accum_steps), int(train.batch_warmup_start_accum)
    if not 1 <= start <= final:  # range_problems knows no bound relating two fields
        raise cli.UserError(
            f"train.batch_warmup_start_accum={start} must lie in [1, train.grad_accum_steps="
            f"{final}]: the batch grows from that many micro-batches to grad_accum_steps"
        )
    return BatchWarmup(final, start, steps)


def decays(path: tuple) -> bool:
    """Whether weight decay applies at pure-dict `path`: not on LayerNorm scales and biases."""
    return bool(path) and str(path[-1]) in ("kernel", "embedding")


def is_kernel(key_path) -> bool:
    return bool(key_path) and getattr(key_path[-1], "key", None) == "kernel"


def weight_decay_mask(params: Any) -> Any:
    def leaf(key_path, x):
        names = tuple(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k))) for k in key_path)
        return decays(names)

    return jax.tree_util.tree_map_with_path(leaf, params)


class ScaleByAdamState(NamedTuple):
    count: jax.Array
    mu: Any
    nu: Any


def scale_by_adam(
    b1: float, b2: float, eps: float, bias_correction: bool
) -> optax.GradientTransformation:
    """Adam's direction m / (sqrt(v) + eps), optionally without the bias correction that
    optax.scale_by_adam always makes and the original BERT never does."""

    def init_fn(params):
        zeros = lambda p: jnp.zeros_like(p, dtype=jnp.float32)
        return ScaleByAdamState(
            count=jnp.zeros([], jnp.int32),
            mu=jax.tree.map(zeros, params),
            nu=jax.tree.map(zeros, params),
        )

    def update_fn(updates, state, params=None):
        del params
        mu = jax.tree.map(lambda m, g: b1 * m + (1.0 - b1) * g, state.mu, updates)
        nu = jax.tree.map(lambda v, g: b2 * v + (1.0 - b2) * jnp.square(g), state.nu, updates)
        count = optax.safe_increment(state.count)
        if bias_correction:
            c1 = 1.0 - b1 ** count.astype(jnp.float32)
            c2 = 1.0 - b2 ** count.astype(jnp.float32)
            direction = jax.tree.map(lambda m, v: (m / c1) / (jnp.sqrt(v / c2) + eps), mu, nu)
        else:
            direction = jax.tree.map(lambda m, v: m / (jnp.sqrt(v) + eps), mu, nu)
        return direction, ScaleByAdamState(count=count, mu=mu, nu=nu)

    return optax.GradientTransformation(init_fn, update_fn)


def clip_by_global_norm(max_norm: float) -> optax.GradientTransformationExtraArgs:
    """optax.clip_by_global_norm, taking the norm when the caller has it (`grad_norm=`)."""

    def update_fn(updates, state, params=None, *, grad_norm=None, **extra_args):
        del params, extra_args
        norm = optax.global_norm(updates) if grad_norm is None else grad_norm
        keep = norm < max_norm
        updates = jax.tree.map(
            lambda t: jax.lax.select(keep, t, (t / norm.astype(t.dtype)) * max_norm), updates
        )
        return updates, state

    return optax.GradientTransformationExtraArgs(lambda params: optax.EmptyState(), update_fn)


def scale_by_stable_adamw(
    b1: float, b2: float, eps: float, weight_decay: float, mask_fn: Callable[[Any], Any]
) -> optax.GradientTransformation:
    """StableAdamW's update before the learning rate (Wortsman et al. 2023, as ModernBERT):
    optax.adamw's, each tensor's divided by max(1, RMS(g^2 / max(v_hat, eps^2))).
    docs/training.md, "The modern recipe"."""
    parts = [optax.scale_by_adam(b1, b2, eps)]
    if weight_decay > 0:
        parts.append(optax.add_decayed_weights(weight_decay, mask=mask_fn))
    adamw = optax.chain(*parts)

    def update_fn(updates, state, params=None):
        direction, state = adamw.update(updates, state, params)
        moments = state[0]  # scale_by_adam's: count already advanced to this step
        v_hat = optax.tree.bias_correction(moments.nu, b2, moments.count)

        def clip(d, g, v):
            g = g.astype(jnp.float32)
            rms = jnp.sqrt(jnp.mean(jnp.square(g) / jnp.maximum(v, eps * eps)))
            return d / jnp.maximum(1.0, rms).astype(d.dtype)

        return jax.tree.map(clip, direction, updates, v_hat), state

    return optax.GradientTransformation(adamw.init, update_fn)


def make_optimizer(
    optim: ml_collections.ConfigDict,
    lr: dict[str, Any],
    mask_fn: Callable[[Any], Any] = weight_decay_mask,
) -> optax.GradientTransformation:
    """`optim.optimizer` at the rates `lr`, traced or not: its state does not depend on them."""
    if optim.optimizer not in OPTIMIZERS:
        raise cli.UserError(f"optim.optimizer={optim.optimizer!r}; choose one of {OPTIMIZERS}")
    parts = []
    if optim.max_grad_norm > 0:
        parts.append(clip_by_global_norm(optim.max_grad_norm))
    if optim.optimizer == "stable_adamw":
        if not optim.bias_correction:
            raise cli.UserError(
                "optim.optimizer='stable_adamw' corrects its moments for their zero start, as "
                "optimi's StableAdamW; set optim.bias_correction=True"
            )
        decay = optim.weight_decay
        parts.append(scale_by_stable_adamw(optim.b1, optim.b2, optim.eps, decay, mask_fn))
    else:
        parts.append(scale_by_adam(optim.b1, optim.b2, optim.eps, optim.bias_correction))
        if optim.weight_decay > 0:
            parts.append(optax.add_decayed_weights(optim.weight_decay, mask=mask_fn))
        if optim.optimizer == "lamb":
            # LAMB's trust ratio, exempting weight decay's tensors, as MLPerf's reference.
            parts.append(optax.masked(optax.scale_by_trust_ratio(), mask_fn))
    parts.append(optax.scale_by_learning_rate(functools.partial(rate, lr)))
    return optax.chain(*parts)
