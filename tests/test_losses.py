"""Weighted MLM / NSP losses and accuracies against hand-computed values."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax import losses


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
    assert out == {
        "mlm_loss": 1.5,
        "mlm_accuracy": 0.25,
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
