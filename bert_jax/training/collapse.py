"""The collapse check: a run whose encoder gives every token the same final hidden state, so it
predicts the same words everywhere. `hidden_cosine` over one eval batch at each eval; above
THRESHOLD the trainer warns. docs/training.md, "Evaluation and early stopping".
"""

import functools

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bert_jax.data.contract import features as F
from bert_jax.data.input import packing, pipeline
from bert_jax.model import sharding

THRESHOLD = 0.999


def cross_row_cosine(sequence: jax.Array, weights: jax.Array) -> jax.Array:
    """Mean cosine of weighted vectors in different rows of [B, L, H] (zero vectors read 0),
    without the [N, N] matrix: |sum of all units|^2 - sum over rows of |the row's sum|^2."""
    x = sequence.astype(jnp.float32)
    w = weights.astype(jnp.float32)
    u = x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12) * w[..., None]
    rows = u.sum(axis=1)  # [B, H]
    total = rows.sum(axis=0)  # [H]
    counts = w.sum(axis=1)  # [B]
    pair_sum = total @ total - jnp.sum(rows * rows)
    pairs = jnp.sum(counts) ** 2 - jnp.sum(counts**2)
    return pair_sum / jnp.maximum(pairs, 1.0)


def hidden_cosine(graphdef, params, batch: dict[str, jax.Array]) -> jax.Array:
    """`cross_row_cosine` of the final hidden states of real tokens but [CLS] and padding rows."""
    model = nnx.merge(graphdef, params)
    sequence, _ = model.bert(
        batch[F.INPUT_IDS],
        batch[F.INPUT_MASK],
        batch[F.SEGMENT_IDS],
        **{k: batch[k] for k in packing.MODEL_INPUTS if k in batch},
    )
    weights = batch[F.INPUT_MASK].astype(jnp.float32).at[:, 0].set(0.0)
    example_weight = batch.get(pipeline.EXAMPLE_WEIGHT)
    if example_weight is not None:
        weights = weights * example_weight[:, None]
    return cross_row_cosine(sequence, weights)


def make_check(setup):
    """(params, host-local batch) -> hidden_cosine as a float, jitted on `setup`'s mesh."""
    fn = jax.jit(
        functools.partial(hidden_cosine, setup.graphdef),
        in_shardings=(setup.param_shardings, setup.batch_sharding),
        out_shardings=NamedSharding(setup.mesh, P()),
    )

    def check(params, host_batch) -> float:
        with setup.activate():
            return float(fn(params, sharding.host_to_global(host_batch, setup.batch_sharding)))

    return check


def warning(cosine: float, step: int) -> str | None:
    if not cosine > THRESHOLD:
        return None
    return (
        f"collapsed representations at step {step}: the final hidden states of different "
        f"tokens in different sequences are nearly the same vector (mean cosine {cosine:.6f} > "
        f"{THRESHOLD}), so the model predicts the same words at every position and held-out "
        "accuracy stays at the most-frequent-token rate. If it stays so for several evals the "
        "run is dead: try a lower learning rate or a longer warmup if the loss jumped or stalled "
        "early, a higher rate if it has crept down from the start; check that the records' text "
        "is varied (not mostly [UNK]: the vocabulary fits the text)."
    )
