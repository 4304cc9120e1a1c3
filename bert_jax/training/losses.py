"""Pre-training losses and accuracies as sums, so that micro-batches and eval batches add up to
one big batch's figures exactly. docs/training.md, "Evaluation and early stopping".
"""

from collections.abc import Mapping

import jax
import jax.numpy as jnp

# The original's: a batch without masked tokens gives 0, not NaN.
_MLM_DENOMINATOR_EPS = 1e-5


@jax.custom_vjp
def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """-log_softmax(logits.astype(float32))[label], logits [..., C], labels [...]: autodiff's
    arithmetic, but the backward pass keeps the logits in their own dtype plus two float32
    numbers per item, not a float32 copy of the MLM head's [B, P, V] logits."""
    return _cross_entropy_fwd(logits, labels)[0]


def _cross_entropy_fwd(logits, labels):
    x = logits.astype(jnp.float32)
    m = jnp.max(x, axis=-1, keepdims=True)
    s = jnp.log(jnp.sum(jnp.exp(x - m), axis=-1, keepdims=True))
    picked = jnp.take_along_axis(x, labels[..., None].astype(jnp.int32), axis=-1)
    nll = -((picked - m) - s)[..., 0]  # as log_softmax: (x - max) - log(sum(exp(x - max)))
    return nll, (logits, labels, m, s)


def _cross_entropy_bwd(residuals, g):
    logits, labels, m, s = residuals
    probs = jnp.exp((logits.astype(jnp.float32) - m) - s)  # softmax, as log_softmax's VJP has it
    onehot = labels[..., None] == jnp.arange(logits.shape[-1], dtype=labels.dtype)
    grad = g[..., None] * (probs - onehot.astype(jnp.float32))
    return grad.astype(logits.dtype), None


cross_entropy.defvjp(_cross_entropy_fwd, _cross_entropy_bwd)


# Kinds of masked position, in position_kinds' order -> the suffix of their figures.
KINDS = {"mask": "", "kept": "_kept", "random": "_random"}


def position_kinds(inputs: jax.Array, label_ids: jax.Array, mask_id: int) -> jax.Array:
    """What the model was shown at each masked position: 0 [MASK], 1 the label (a random draw
    of the original token too: it shows the answer), 2 a random token; all [B, P]."""
    return jnp.where(inputs == mask_id, 0, jnp.where(inputs == label_ids, 1, 2))


@jax.named_scope("mlm_loss")
def mlm_sums(
    mlm_logits: jax.Array,
    label_ids: jax.Array,
    label_weights: jax.Array,
    inputs: jax.Array | None = None,
    mask_id: int | None = None,
) -> dict[str, jax.Array]:
    """Sums over masked positions, mlm_logits [B, P, V]; with `inputs` (input_ids at the masked
    positions) and `mask_id` also per kind of position (mlm_<kind>_..._sum)."""
    nll, correct = _per_item(mlm_logits, label_ids)
    weights = label_weights.astype(jnp.float32)
    sums = _sums(nll, correct, weights, ("mlm_nll_sum", "mlm_correct_sum", "mlm_weight_sum"))
    if mask_id is not None:
        kinds = position_kinds(inputs, label_ids, mask_id)
        for code, kind in enumerate(KINDS):
            names = tuple(f"mlm_{kind}_{s}_sum" for s in ("nll", "correct", "weight"))
            sums.update(_sums(nll, correct, weights * (kinds == code), names))
    return sums


@jax.named_scope("nsp_loss")
def nsp_sums(
    nsp_logits: jax.Array, labels: jax.Array, example_weights: jax.Array | None = None
) -> dict[str, jax.Array]:
    """Sums over examples, nsp_logits [B, 2] or [B, E, 2] (packed rows); weights 0 for padding
    and MLM-only records. nsp_label_sum is for `summarize`'s majority-class rate."""
    labels = labels.reshape(nsp_logits.shape[:-1])
    if example_weights is None:
        example_weights = jnp.ones(labels.shape, jnp.float32)
    weights = example_weights.astype(jnp.float32)
    nll, correct = _per_item(nsp_logits, labels)
    sums = _sums(nll, correct, weights, ("nsp_nll_sum", "nsp_correct_sum", "nsp_count"))
    sums["nsp_label_sum"] = jnp.sum(labels.astype(jnp.float32) * weights)
    return sums


def _per_item(logits, labels) -> tuple[jax.Array, jax.Array]:
    """(NLL, 1.0 where the argmax is the label) per item."""
    correct = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)
    return cross_entropy(logits, labels), correct


def _sums(nll, correct, weights, names) -> dict[str, jax.Array]:
    """{names: (sum of weighted NLL, sum of weighted correct argmax, sum of weights)}."""
    return dict(zip(names, (jnp.sum(nll * weights), jnp.sum(correct * weights), jnp.sum(weights))))


def pretraining_loss(
    sums: Mapping[str, jax.Array],
    mlm_denominator: jax.Array | None = None,
    nsp_denominator: jax.Array | None = None,
) -> jax.Array:
    """BERT's loss; with the whole batch's denominators, micro-batch losses add up to its."""
    if mlm_denominator is None:
        mlm_denominator = sums["mlm_weight_sum"]
    if nsp_denominator is None:
        nsp_denominator = sums["nsp_count"]
    mlm = sums["mlm_nll_sum"] / (mlm_denominator + _MLM_DENOMINATOR_EPS)
    nsp = sums["nsp_nll_sum"] / jnp.maximum(nsp_denominator, 1.0)
    return mlm + nsp


def _ratio(num, den, floor):
    return num / jnp.maximum(den, floor)


def train_ratios(sums: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
    """`summarize`'s figures on the device for one train step (0, not absent, for an empty
    kind); no nsp_majority, which describes the eval set."""
    out = {
        "mlm_loss_all": _ratio(sums["mlm_nll_sum"], sums["mlm_weight_sum"], 1e-5),
        "mlm_accuracy_all": _ratio(sums["mlm_correct_sum"], sums["mlm_weight_sum"], 1e-5),
        "nsp_accuracy": _ratio(sums["nsp_correct_sum"], sums["nsp_count"], 1.0),
    }
    for kind, suffix in KINDS.items():
        if f"mlm_{kind}_weight_sum" in sums:
            w = sums[f"mlm_{kind}_weight_sum"]
            out["mlm_loss" + suffix] = _ratio(sums[f"mlm_{kind}_nll_sum"], w, 1e-5)
            out["mlm_accuracy" + suffix] = _ratio(sums[f"mlm_{kind}_correct_sum"], w, 1e-5)
    return out


def summarize(sums: Mapping[str, float]) -> dict[str, float]:
    """The figures a user reads (docs/training.md, "Evaluation and early stopping") from sums
    on the host; one whose denominator is 0 is left out."""
    sums = {k: float(v) for k, v in sums.items()}
    out = {}
    if sums["mlm_weight_sum"] > 0:
        out["mlm_loss_all"] = sums["mlm_nll_sum"] / sums["mlm_weight_sum"]
        out["mlm_accuracy_all"] = sums["mlm_correct_sum"] / sums["mlm_weight_sum"]
    for kind, suffix in KINDS.items():
        w = sums.get(f"mlm_{kind}_weight_sum", 0.0)
        if w > 0:
            out["mlm_loss" + suffix] = sums[f"mlm_{kind}_nll_sum"] / w
            out["mlm_accuracy" + suffix] = sums[f"mlm_{kind}_correct_sum"] / w
    n = sums["nsp_count"]
    if n > 0:
        out["nsp_loss"] = sums["nsp_nll_sum"] / n
        out["nsp_accuracy"] = sums["nsp_correct_sum"] / n
        if "nsp_label_sum" in sums:
            ones = sums["nsp_label_sum"]
            out["nsp_majority"] = max(ones, n - ones) / n
    if "mlm_loss_all" in out:  # records without sentence pairs train no NSP: the MLM loss alone
        out["loss"] = out["mlm_loss_all"] + out.get("nsp_loss", 0.0)
    return out
