"""LoRA (Hu et al. 2021): rank-r adapters (flax's nnx.LoRA) on a BertModel's encoder denses,
and merging them back into plain nnx.Linear layers for export. docs/finetuning.md, "LoRA".
"""

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from bert_jax import cli

# target name -> attribute path inside an EncoderLayer
TARGETS = {
    "query": ("attention", "query"),
    "key": ("attention", "key"),
    "value": ("attention", "value"),
    "attention_output": ("attention", "output"),
    "intermediate": ("intermediate",),
    "output": ("output",),
}

# What a LoRA run trains: the adapters and the task head (heads.TaskModel.head).
TRAINABLE = nnx.Any(nnx.LoRAParam, nnx.PathContains("head"))


class Adapted(nnx.Module):
    """A frozen nnx.Linear `base` plus a low-rank update `lora` (B starts at 0) times alpha/rank."""

    def __init__(self, base: nnx.Linear, rank: int, alpha: float, *, rngs: nnx.Rngs):
        in_axis, out_axis = base.kernel.get_metadata().get("out_sharding", (None, None))
        self.base = base
        self.scale = alpha / rank
        # The adapter matrices split like the kernel they adapt; the rank dimension stays whole.
        self.lora = nnx.LoRA(
            base.in_features,
            rank,
            base.out_features,
            dtype=base.dtype,
            param_dtype=jnp.float32,
            a_metadata={"out_sharding": (in_axis, None), "eager_sharding": False},
            b_metadata={"out_sharding": (None, out_axis), "eager_sharding": False},
            rngs=rngs,
        )

    def __call__(self, x):
        return self.base(x) + self.lora(x) * jnp.asarray(self.scale, x.dtype)


def target_names(targets) -> tuple[str, ...]:
    """config.lora.targets as names, split at commas: ml_collections reads
    --config.lora.targets=query,value as the one name 'query,value'."""
    if isinstance(targets, str):
        targets = (targets,)
    return tuple(part.strip() for t in targets for part in str(t).split(",") if part.strip())


def problems(targets: Sequence[str], rank: int, alpha: float) -> list[str]:
    """What is wrong with LoRA's settings (runs.check_finetuning asks before the run starts)."""
    out = []
    unknown = [t for t in targets if t not in TARGETS]
    if unknown or not targets:
        out.append(
            f"LoRA targets {list(targets)}: choose from {list(TARGETS)} (config.lora.targets)"
        )
    if rank < 1:
        out.append(f"LoRA rank must be a positive integer, got {rank} (config.lora.rank)")
    if alpha <= 0:
        out.append(f"LoRA alpha must be positive, got {alpha} (config.lora.alpha)")
    return out


def _parent(root, path: tuple):
    """The module holding `path` (attribute names or list indices) in `root`."""
    for key in path[:-1]:
        root = root[key] if isinstance(key, int) else getattr(root, key)
    return root


def add_adapters(bert, targets: Sequence[str], rank: int, alpha: float, *, rngs: nnx.Rngs) -> None:
    """Wraps the `targets` denses of every encoder layer of `bert` (a BertModel) in place."""
    found = problems(targets, rank, alpha)
    if found:
        raise cli.UserError("; ".join(found))
    for layer in bert.layers:
        for target in targets:
            parent, name = _parent(layer, TARGETS[target]), TARGETS[target][-1]
            base = getattr(parent, name)
            if isinstance(base, Adapted):
                raise cli.UserError(f"{target} already has a LoRA adapter")
            setattr(parent, name, Adapted(base, rank, alpha, rngs=rngs))


def merge_adapters(model) -> int:
    """Folds every adapter into its base kernel (W += A @ B * scale) in place -> how many."""
    merged = 0
    for path, module in list(nnx.iter_modules(model)):
        if not isinstance(module, Adapted):
            continue
        base, lora = module.base, module.lora
        delta = (
            jnp.matmul(lora.lora_a[...], lora.lora_b[...], precision=jax.lax.Precision.HIGHEST)
            * module.scale
        )
        # A new array: parameters gathered to the host (runs.host_model) are read-only.
        base.kernel.value = base.kernel[...] + delta.astype(base.kernel[...].dtype)
        setattr(_parent(model, path), path[-1], base)
        merged += 1
    return merged


def count(model, selector=nnx.Param) -> int:
    return int(sum(math.prod(x.shape) for x in jax.tree.leaves(nnx.state(model, selector))))
