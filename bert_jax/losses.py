"""Pre-training losses and accuracies: weighted masked-LM and next-sentence prediction.

Everything here returns *sums* (numerator and denominator kept apart) as well as ratios, so that
micro-batches of a gradient-accumulation step and batches of an eval pass add up to exactly the
figure one big batch would give. The loss is google-research/bert's: the MLM term is the mean
cross-entropy over real (weight 1) masked positions of the whole global batch, the NSP term the
mean over examples, and the total is their sum.
"""

from collections.abc import Mapping

import jax
import jax.numpy as jnp

# The original adds 1e-5 to the MLM denominator so that a batch without masked tokens gives 0,
# not NaN.
_MLM_DENOMINATOR_EPS = 1e-5


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Per-item negative log-likelihood, computed in float32. logits [..., C], labels [...]."""
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return -jnp.take_along_axis(log_probs, labels[..., None].astype(jnp.int32), axis=-1)[..., 0]


def mlm_sums(
    mlm_logits: jax.Array, label_ids: jax.Array, label_weights: jax.Array
) -> dict[str, jax.Array]:
    """Sums over masked positions. mlm_logits [B, P, V]; label_ids, label_weights [B, P]."""
    return _weighted_sums(
        mlm_logits, label_ids, label_weights, ("mlm_nll_sum", "mlm_correct_sum", "mlm_weight_sum")
    )


def nsp_sums(
    nsp_logits: jax.Array, labels: jax.Array, example_weights: jax.Array | None = None
) -> dict[str, jax.Array]:
    """Sums over examples. nsp_logits [B, 2] (or [B, E, 2]: packed rows of E record slots);
    labels [B] or [B, 1] (or [B, E]; 1 = B is a random sentence).

    example_weights [B] (or [B, E]): 1 for an example that counts, 0 for eval padding rows,
    empty slots of packed rows and MLM-only records.
    """
    labels = labels.reshape(nsp_logits.shape[:-1])
    if example_weights is None:
        example_weights = jnp.ones(labels.shape, jnp.float32)
    return _weighted_sums(
        nsp_logits, labels, example_weights, ("nsp_nll_sum", "nsp_correct_sum", "nsp_count")
    )


def _weighted_sums(logits, labels, weights, names) -> dict[str, jax.Array]:
    """{names: (sum of weighted NLL, sum of weighted correct argmax, sum of weights)}."""
    weights = weights.astype(jnp.float32)
    correct = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)
    sums = (
        jnp.sum(cross_entropy(logits, labels) * weights),
        jnp.sum(correct * weights),
        jnp.sum(weights),
    )
    return dict(zip(names, sums))


def pretraining_loss(
    sums: Mapping[str, jax.Array],
    mlm_denominator: jax.Array | None = None,
    nsp_denominator: jax.Array | None = None,
) -> jax.Array:
    """BERT's loss from `mlm_sums` | `nsp_sums`.

    Pass the denominators of the *whole* global batch when `sums` covers one micro-batch: the
    micro-batch losses then add up to the full-batch loss, and so do their gradients.
    """
    if mlm_denominator is None:
        mlm_denominator = sums["mlm_weight_sum"]
    if nsp_denominator is None:
        nsp_denominator = sums["nsp_count"]
    mlm = sums["mlm_nll_sum"] / (mlm_denominator + _MLM_DENOMINATOR_EPS)
    nsp = sums["nsp_nll_sum"] / jnp.maximum(nsp_denominator, 1.0)
    return mlm + nsp


def summarize(sums: Mapping[str, float]) -> dict[str, float]:
    """Ratios a user reads from accumulated sums (plain floats, host side)."""
    mlm_w = float(sums["mlm_weight_sum"])
    nsp_n = float(sums["nsp_count"])
    out = {}
    if mlm_w > 0:
        out["mlm_loss"] = float(sums["mlm_nll_sum"]) / mlm_w
        out["mlm_accuracy"] = float(sums["mlm_correct_sum"]) / mlm_w
    if nsp_n > 0:
        out["nsp_loss"] = float(sums["nsp_nll_sum"]) / nsp_n
        out["nsp_accuracy"] = float(sums["nsp_correct_sum"]) / nsp_n
    if "mlm_loss" in out:  # records without sentence pairs train no NSP: the MLM loss alone
        out["loss"] = out["mlm_loss"] + out.get("nsp_loss", 0.0)
    return out
