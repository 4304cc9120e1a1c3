"""The encoder's layers in order: unrolled, or as one lax.scan over the longest run of repeating
groups of alike layers (equal nnx graphdefs). Layer i's dropout key is fold_in(dropout_rng, i)
either way, so both give the same result. docs/model.md, "The modern block (ModernBERT)".
"""

import jax
import jax.numpy as jnp
from flax import nnx

from bert_jax.model import attention, layers


def _run_layer(layer, x, input_mask, dropout_rng, example_ids, rope):
    return layer(x, input_mask, dropout_rng, example_ids, rope)


# cuDNN's attention forward is kept, splash's recomputed (docs/scaling.md, "The fused kernels'").
_KEPT_KERNELS = frozenset({"dot_product_attention_fwd_wrapper"})
_kept_names = jax.checkpoint_policies.save_only_these_names(*layers.KEPT_FOR_BACKWARD)


def _keep_for_backward(prim, *args, **params) -> bool:
    """A scanned layer's checkpoint policy: keeps layers.KEPT_FOR_BACKWARD and _KEPT_KERNELS."""
    return prim.name in _KEPT_KERNELS or _kept_names(prim, *args, **params)


def scan_plan(graphdefs) -> tuple[int, int, int]:
    """(start, period, blocks) of the repeats leaving fewest layers unrolled (blocks 0: none)."""
    # Each layer's kind: the index of its structure's first layer.
    kinds = [next(i for i, h in enumerate(graphdefs) if h == g) for g in graphdefs]
    n = len(kinds)
    best = (n, 0, 0, 0)  # (unrolled layers, period, start, blocks)
    for period in range(1, n // 2 + 1):
        for start in range(n - 2 * period + 1):
            group, blocks = kinds[start : start + period], 1
            while kinds[start + blocks * period : start + (blocks + 1) * period] == group:
                blocks += 1
            if blocks >= 2 and (n - blocks * period, period, start) < best[:3]:
                best = (n - blocks * period, period, start, blocks)
    _, period, start, blocks = best
    return start, period, blocks


def run_layers(
    layers, x, input_mask, dropout_rng, example_ids, rope=None, *, remat: bool, scan: bool | None
):
    """x through `layers`; scan=True: scan_plan's groups as one lax.scan, stacked in the step."""
    if scan is None:  # config.model.scan_layers' default: scanned where a compile costs most
        scan = attention.platform() != "cpu"
    run = nnx.remat(_run_layer) if remat else _run_layer

    def key_of(i):
        return jax.random.fold_in(dropout_rng, i) if dropout_rng is not None else None

    splits = [nnx.split(layer) for layer in layers]
    start, period, blocks = scan_plan([g for g, _ in splits]) if scan else (0, 0, 0)
    if not blocks:  # nothing repeats: every layer unrolled
        start = len(layers)
    for i in range(start):
        x = run(layers[i], x, input_mask, key_of(i), example_ids, rope)
    if not blocks:
        return x
    stacked = [
        jax.tree.map(
            lambda *leaves: jnp.stack(leaves),
            *(splits[start + b * period + j][1] for b in range(blocks)),
        )
        for j in range(period)
    ]  # per position in the group: its parameters, [blocks, ...]

    # Without a policy a scan would save every intermediate (docs/scaling.md); remat: nothing.
    policy = None if remat else _keep_for_backward

    def layer_fn(graphdef):
        def apply(state, x, key):
            return _run_layer(nnx.merge(graphdef, state), x, input_mask, key, example_ids, rope)

        return jax.checkpoint(apply, policy=policy)

    applies = [layer_fn(splits[start + j][0]) for j in range(period)]

    def body(x, xs):
        states, indices = xs
        for j in range(period):
            x = applies[j](states[j], x, key_of(indices[j]))
        return x, None

    indices = start + jnp.arange(blocks * period).reshape(blocks, period)
    x, _ = jax.lax.scan(body, x, (stacked, indices))
    for i in range(start + blocks * period, len(layers)):
        x = run(layers[i], x, input_mask, key_of(i), example_ids, rope)
    return x
