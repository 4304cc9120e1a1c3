"""The encoder's layers in order: unrolled, or as one lax.scan over groups of alike layers.

A layer's kind is static in its module (its window a Python attribute), so alike layers have
equal nnx graphdefs. `scan_plan` finds the longest run of repeating groups of graphdefs; the
scan's body runs one group, the layers outside the run go unrolled. Layer i's dropout key is
fold_in(dropout_rng, i) either way, so scanned and unrolled stacks draw the same masks and give
the same result.

docs/model.md, "The modern block (ModernBERT)" (the groups BERT and ModernBERT scan).
"""

import jax
import jax.numpy as jnp
from flax import nnx

from bert_jax.model import attention, layers


def _run_layer(layer, x, input_mask, dropout_rng, example_ids, rope):
    return layer(x, input_mask, dropout_rng, example_ids, rope)


# cuDNN's fused attention forward (a custom call), kept: its softmax statistics cost fewer HBM
# bytes than a second forward. The splash kernel's lane-wide float32 ones cost more, so it is
# recomputed (docs/scaling.md, "The fused kernels' forward").
_KEPT_KERNELS = frozenset({"dot_product_attention_fwd_wrapper"})


_kept_names = jax.checkpoint_policies.save_only_these_names(*layers.KEPT_FOR_BACKWARD)


def _keep_for_backward(prim, *args, **params) -> bool:
    """A scanned layer's checkpoint policy: what layers.KEPT_FOR_BACKWARD names and cuDNN
    attention's outputs are kept for the backward pass; the rest is recomputed."""
    return prim.name in _KEPT_KERNELS or _kept_names(prim, *args, **params)


def scan_plan(graphdefs) -> tuple[int, int, int]:
    """(start, period, blocks): layers start .. start + period * blocks - 1 form `blocks` groups
    of `period` layers whose structures repeat; blocks == 0: nothing repeats (all unrolled).
    The plan leaves the fewest layers unrolled, then has the shortest period."""
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
    """x through `layers` in order (each called as layer(x, input_mask, key, example_ids,
    rope)); layer i's dropout key is fold_in(dropout_rng, i).

    scan=True: the repeating groups of scan_plan run as one jax.lax.scan over their parameters,
    stacked along a new leading axis inside the step (MaxText's scan_layers), so nothing outside
    sees another layout; the other layers run unrolled. remat: jax.checkpoint per layer.
    """
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

    # With remat a scanned layer keeps nothing for the backward pass, else _keep_for_backward's
    # choice. Without a policy a scan saves every intermediate of its body, dropout masks
    # included, into stacked [layers, ...] buffers (docs/scaling.md, "Where the HBM bytes go").
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
