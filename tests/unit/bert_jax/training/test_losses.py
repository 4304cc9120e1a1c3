"""Weighted MLM / NSP losses and accuracies against hand-computed values."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.training import losses


def _log_softmax(x):
    x = np.asarray(x, np.float64)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_mlm_sums_ignore_zero_weight_positions():
    logits = np.array(
        [[[2.0, 0.0, 0.0], [0.0, 3.0, 0.0], [9.0, 0.0, 0.0]]], np.float32
    )  # [B=1, P=3, V=3]
    labels = np.array([[0, 2, 1]])
    weights = np.array([[1.0, 1.0, 0.0]])  # the third is padding: its huge loss must not count
    sums = losses.mlm_sums(jnp.asarray(logits), jnp.asarray(labels), jnp.asarray(weights))
    lp = _log_softmax(logits[0])
    assert float(sums["mlm_nll_sum"]) == pytest.approx(-(lp[0, 0] + lp[1, 2]), rel=1e-6)
    assert float(sums["mlm_correct_sum"]) == 1.0  # first right, second wrong
    assert float(sums["mlm_weight_sum"]) == 2.0


def test_nsp_sums_with_example_weights():
    logits = jnp.array([[1.0, 0.0], [0.0, 2.0], [5.0, 0.0]])
    labels = jnp.array([[0], [0], [1]])  # [B, 1] as records store it
    sums = losses.nsp_sums(logits, labels, jnp.array([1.0, 1.0, 0.0]))
    lp = _log_softmax(np.asarray(logits))
    assert float(sums["nsp_nll_sum"]) == pytest.approx(-(lp[0, 0] + lp[1, 0]), rel=1e-6)
    assert float(sums["nsp_correct_sum"]) == 1.0
    assert float(sums["nsp_count"]) == 2.0


def test_micro_batch_losses_add_up_to_the_full_batch_loss():
    rng = np.random.default_rng(0)
    logits = jnp.asarray(rng.normal(size=(4, 5, 7)), jnp.float32)
    labels = jnp.asarray(rng.integers(0, 7, (4, 5)))
    weights = jnp.asarray((rng.random((4, 5)) < 0.6).astype(np.float32))
    nsp_logits = jnp.asarray(rng.normal(size=(4, 2)), jnp.float32)
    nsp_labels = jnp.asarray(rng.integers(0, 2, 4))

    def sums(sl):
        return {
            **losses.mlm_sums(logits[sl], labels[sl], weights[sl]),
            **losses.nsp_sums(nsp_logits[sl], nsp_labels[sl]),
        }

    full = losses.pretraining_loss(sums(slice(None)))
    den_mlm, den_nsp = jnp.sum(weights), 4.0
    parts = sum(losses.pretraining_loss(sums(slice(i, i + 2)), den_mlm, den_nsp) for i in (0, 2))
    assert float(parts) == pytest.approx(float(full), rel=1e-6)
    # And the full loss is BERT's: mean MLM NLL over real positions plus mean NSP NLL.
    s = sums(slice(None))
    expected = float(s["mlm_nll_sum"]) / float(s["mlm_weight_sum"]) + float(s["nsp_nll_sum"]) / 4
    assert float(full) == pytest.approx(expected, rel=1e-5)


def test_summarize_ratios_and_empty_batch():
    out = losses.summarize(
        {
            "mlm_nll_sum": 6.0,
            "mlm_correct_sum": 1.0,
            "mlm_weight_sum": 4.0,
            "nsp_nll_sum": 1.0,
            "nsp_correct_sum": 3.0,
            "nsp_count": 4.0,
        }
    )
    # Sums not kept by kind (no [MASK] id known): no headline mlm_accuracy, only the "all" one.
    assert out == {
        "mlm_loss_all": 1.5,
        "mlm_accuracy_all": 0.25,
        "nsp_loss": 0.25,
        "nsp_accuracy": 0.75,
        "loss": 1.75,
    }
    # A batch without masked tokens gives a finite loss (the original's 1e-5 denominator), not NaN.
    zero = {
        "mlm_nll_sum": jnp.float32(0),
        "mlm_weight_sum": jnp.float32(0),
        "nsp_nll_sum": jnp.float32(math.log(2)),
        "nsp_count": jnp.float32(1),
    }
    assert np.isfinite(float(losses.pretraining_loss(zero)))


def _kind_batch(seed: int, batch: int = 6, preds: int = 9, vocab: int = 11, mask_id: int = 3):
    """Random logits and labels, and inputs at the masked positions of every kind: [MASK], the
    label itself (kept, or a random draw that hit the original), another token (random)."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(batch, preds, vocab)).astype(np.float32)
    labels = rng.integers(0, vocab, (batch, preds))
    labels[labels == mask_id] = mask_id + 1  # a label is a real token, never [MASK]
    # Make the argmax right at a third of the positions, so accuracies are not all ~1/vocab.
    hit = rng.random((batch, preds)) < 0.35
    np.put_along_axis(logits, labels[..., None], np.where(hit, 9.0, -9.0)[..., None], -1)
    choice = rng.integers(0, 3, (batch, preds))
    other = (labels + rng.integers(1, vocab - 1, (batch, preds))) % vocab
    other[other == mask_id] = (labels[other == mask_id] + 1) % vocab
    other[other == labels] = (other[other == labels] + 1) % vocab
    other[other == mask_id] = (other[other == mask_id] + 1) % vocab
    inputs = np.select([choice == 0, choice == 1], [np.full_like(labels, mask_id), labels], other)
    weights = (rng.random((batch, preds)) < 0.8).astype(np.float32)  # some padding slots
    return logits, labels, inputs, weights


@pytest.mark.parametrize("seed", range(4))
def test_mlm_sums_by_kind_match_a_numpy_reference(seed):
    mask_id = 3
    logits, labels, inputs, weights = _kind_batch(seed, mask_id=mask_id)
    got = losses.mlm_sums(jnp.asarray(logits), labels, weights, inputs, mask_id)
    nll = -np.take_along_axis(_log_softmax(logits), labels[..., None], -1)[..., 0]
    right = logits.argmax(-1) == labels
    reference_kind = np.where(
        inputs == mask_id, "mask", np.where(inputs == labels, "kept", "random")
    )
    for kind in losses.KINDS:
        w = weights * (reference_kind == kind)
        assert w.sum() > 0  # every kind occurs in the generated batch
        assert float(got[f"mlm_{kind}_weight_sum"]) == w.sum()
        assert float(got[f"mlm_{kind}_correct_sum"]) == (right * w).sum()
        assert float(got[f"mlm_{kind}_nll_sum"]) == pytest.approx((nll * w).sum(), rel=1e-5)
    # The kinds partition the masked positions: their sums are the all-positions sums.
    for s in ("nll", "correct", "weight"):
        parts = sum(float(got[f"mlm_{k}_{s}_sum"]) for k in losses.KINDS)
        assert parts == pytest.approx(float(got[f"mlm_{s}_sum"]), rel=1e-5)
    out = losses.summarize(got | {"nsp_nll_sum": 0.0, "nsp_correct_sum": 0.0, "nsp_count": 0.0})
    mask_w = weights * (reference_kind == "mask")
    assert out["mlm_accuracy"] == pytest.approx((right * mask_w).sum() / mask_w.sum())
    assert out["mlm_accuracy_all"] == pytest.approx((right * weights).sum() / weights.sum())
    assert out["loss"] == pytest.approx(out["mlm_loss_all"])  # no NSP: the MLM objective alone


def test_a_random_draw_equal_to_the_original_counts_as_kept():
    """The input then shows the answer, as a kept position does: a copying model gets it right
    and that must not count towards the random (or [MASK]) figure."""
    mask_id, label = 103, 7
    inputs = np.array([[mask_id, label, 9]])  # [MASK]; random draw == original; another token
    labels = np.full((1, 3), label)
    np.testing.assert_array_equal(losses.position_kinds(inputs, labels, mask_id), [[0, 1, 2]])
    # A model that copies its input: right only where the input is the answer.
    logits = jax.nn.one_hot(inputs, 200) * 10.0
    out = losses.summarize(
        losses.mlm_sums(logits, labels, np.ones((1, 3)), inputs, mask_id)
        | {"nsp_nll_sum": 0.0, "nsp_correct_sum": 0.0, "nsp_count": 0.0}
    )
    assert (out["mlm_accuracy"], out["mlm_accuracy_kept"], out["mlm_accuracy_random"]) == (
        0.0,
        1.0,
        0.0,
    )
    assert out["mlm_accuracy_all"] == pytest.approx(1 / 3)


def test_train_ratios_are_summarize_figures_on_the_device():
    logits, labels, inputs, weights = _kind_batch(7)
    sums = {
        **losses.mlm_sums(jnp.asarray(logits), labels, weights, inputs, 3),
        **losses.nsp_sums(jnp.zeros((6, 2)), np.array([0, 1, 1, 0, 1, 1])),
    }
    host = losses.summarize(sums)
    device = losses.train_ratios(sums)
    assert set(device) == set(host) - {"nsp_loss", "nsp_majority", "loss"}
    for k, v in device.items():
        assert float(v) == pytest.approx(host[k], rel=1e-5), k


@pytest.mark.parametrize(
    "labels, weights, majority",
    [
        ([0, 1, 1, 0, 1, 1], None, 4 / 6),
        ([0, 0, 0, 1], None, 3 / 4),
        ([1, 1, 0, 0], None, 0.5),
        # Weights: eval padding rows and empty packed slots (0) do not count.
        ([[1, 1], [0, 1]], [[1.0, 0.0], [1.0, 1.0]], 2 / 3),
    ],
)
def test_nsp_majority_rate_is_the_commoner_labels_share(labels, weights, majority):
    labels = np.asarray(labels)
    sums = losses.nsp_sums(
        jnp.zeros((*labels.shape, 2)), labels, None if weights is None else np.asarray(weights)
    )
    out = losses.summarize(
        sums | {"mlm_nll_sum": 0.0, "mlm_correct_sum": 0.0, "mlm_weight_sum": 0.0}
    )
    assert out["nsp_majority"] == pytest.approx(majority)
    # A constant answer scores at most the majority rate: argmax of zeros is label 0.
    assert out["nsp_accuracy"] <= out["nsp_majority"] + 1e-9


def _reference_nll(logits, labels):
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return -jnp.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]


@pytest.mark.parametrize("shape", [(3, 5, 97), (2, 20, 30522), (4, 2), (7,)])
@pytest.mark.parametrize("scale", [0.1, 10.0, 300.0])
def test_cross_entropy_is_autodiffs_log_softmax_in_float32(shape, scale):
    """The hand-written VJP (which keeps the logits in their own dtype) against autodiff of the
    plain definition: the same loss and gradient in float32, across widths and logit scales
    (300: exp underflows for all but the largest logit)."""
    keys = jax.random.split(jax.random.PRNGKey(shape[-1]), 3)
    logits = jax.random.normal(keys[0], shape) * scale
    labels = jax.random.randint(keys[1], shape[:-1], 0, shape[-1])
    g = jax.random.uniform(keys[2], shape[:-1])  # per-item weights, as the loss sums them
    ours = jax.value_and_grad(lambda x: jnp.sum(losses.cross_entropy(x, labels) * g))(logits)
    ref = jax.value_and_grad(lambda x: jnp.sum(_reference_nll(x, labels) * g))(logits)
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-6)
    np.testing.assert_allclose(ours[1], ref[1], rtol=1e-5, atol=1e-7)


def test_cross_entropy_of_bfloat16_logits_is_within_bfloat16_of_float32():
    """bfloat16 logits (the MLM head's under mixed precision): the loss is taken in float32 from
    them, the gradient comes back bfloat16 and within bfloat16 rounding of the float32 one."""
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    logits = (jax.random.normal(keys[0], (4, 20, 30522)) * 3).astype(jnp.bfloat16)
    labels = jax.random.randint(keys[1], (4, 20), 0, 30522)
    loss16, grad16 = jax.value_and_grad(lambda x: jnp.sum(losses.cross_entropy(x, labels)))(logits)
    loss32, grad32 = jax.value_and_grad(lambda x: jnp.sum(_reference_nll(x, labels)))(
        logits.astype(jnp.float32)
    )
    assert grad16.dtype == jnp.bfloat16 and loss16.dtype == jnp.float32
    np.testing.assert_allclose(loss16, loss32, rtol=1e-6)  # same inputs, float32 arithmetic
    np.testing.assert_allclose(grad16.astype(jnp.float32), grad32, rtol=2**-7, atol=1e-8)
