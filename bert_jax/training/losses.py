"""Pre-training losses and accuracies: weighted masked-LM and next-sentence prediction.

Everything here returns *sums* (numerator and denominator kept apart) as well as ratios, so that
micro-batches of a gradient-accumulation step and batches of an eval pass add up to exactly the
figure one big batch would give. The loss is google-research/bert's: the mean cross-entropy over
real (weight 1) masked positions of the whole global batch, plus the mean NSP loss over examples.
The MLM sums are also kept by kind of masked position ([MASK], kept, random: `position_kinds`),
since copying at kept positions fools the accuracy over all of them; why and what each figure
means: docs/training.md, "Evaluation and early stopping".
"""

from collections.abc import Mapping

import jax
import jax.numpy as jnp

# The original adds 1e-5 to the MLM denominator so that a batch without masked tokens gives 0,
# not NaN.
_MLM_DENOMINATOR_EPS = 1e-5


@jax.custom_vjp
def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Per-item negative log-likelihood, computed in float32. logits [..., C] (any float dtype),
    labels [...].

    The arithmetic of -log_softmax(logits.astype(float32))[label], forward and backward, with one
    difference in what is kept: autodiff of log_softmax keeps a float32 copy of the logits for
    the backward pass (the MLM head's [batch, predictions, vocabulary], read again by several
    fusions); this keeps the logits as they came (bfloat16 under mixed precision) and two float32
    numbers per item (max and log-sum-exp), and the backward pass writes the logits' gradient in
    their own dtype in one pass. In float32 it is exactly autodiff's computation.
    """
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


# Kinds of masked position, in the order of position_kinds' codes -> the suffix of their figures
# (the [MASK] positions' are the unsuffixed headline ones).
KINDS = {"mask": "", "kept": "_kept", "random": "_random"}


def position_kinds(inputs: jax.Array, label_ids: jax.Array, mask_id: int) -> jax.Array:
    """What the model was shown at each masked position: 0 [MASK] (inputs == mask_id), 1 kept
    (inputs == the label), 2 a random replacement. inputs are input_ids gathered at the masked
    positions; all [B, P].

    A random draw that happens to equal the original token counts as kept: the input then shows
    the model the answer, exactly as at a kept position (masking.py draws replacements from the
    whole vocabulary, so this is about 1 in vocab_size of the random ones).
    """
    return jnp.where(inputs == mask_id, 0, jnp.where(inputs == label_ids, 1, 2))


@jax.named_scope("mlm_loss")
def mlm_sums(
    mlm_logits: jax.Array,
    label_ids: jax.Array,
    label_weights: jax.Array,
    inputs: jax.Array | None = None,
    mask_id: int | None = None,
) -> dict[str, jax.Array]:
    """Sums over masked positions. mlm_logits [B, P, V]; label_ids, label_weights [B, P].

    With `inputs` (input_ids at the masked positions, [B, P]) and the vocabulary's `mask_id`,
    also the sums of each kind of position (`position_kinds`): mlm_<kind>_nll_sum,
    mlm_<kind>_correct_sum and mlm_<kind>_weight_sum for kind in KINDS.
    """
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
    """Sums over examples. nsp_logits [B, 2] (or [B, E, 2]: packed rows of E record slots);
    labels [B] or [B, 1] (or [B, E]; 1 = B is a random sentence); example_weights [B] (or
    [B, E]): 0 for eval padding rows, empty slots of packed rows and MLM-only records. Also
    nsp_label_sum, the weighted count of label 1, for `summarize`'s majority-class rate.
    """
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
    """BERT's loss from `mlm_sums` | `nsp_sums`. Pass the denominators of the *whole* global
    batch when `sums` covers one micro-batch: the micro-batch losses (and gradients) then add up
    to the full batch's."""
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
    """The same figures as `summarize`, on the device, for one train step (a step whose batch has
    none of a kind reports 0 for it, instead of leaving it out). No nsp_majority: it describes
    the eval set."""
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
    """Ratios a user reads from accumulated sums (plain floats, host side).

    mlm_loss, mlm_accuracy: at [MASK] positions (present when the sums were kept by kind);
    mlm_loss_kept, mlm_accuracy_kept, mlm_loss_random, mlm_accuracy_random: at the kept and the
    randomly replaced positions; mlm_loss_all, mlm_accuracy_all: over all masked positions;
    nsp_loss, nsp_accuracy and nsp_majority (the accuracy of always answering the commoner
    label: the chance line NSP accuracy must beat); loss: mlm_loss_all + nsp_loss, the
    objective. A figure whose denominator is 0 is left out.
    """
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
