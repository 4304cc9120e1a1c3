"""The attention paths against the plain softmax attention: fused (XLA), splash (Pallas, in
interpret mode on CPU), and the einsum path's own backward pass (softmax_dropout)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax import cli
from bert_jax.model import attention, layer_stack
from bert_jax.model.dropout import dropout


def padded_mask(rng, batch, length):
    """Right-padded rows of random lengths, the first full and the last all padding."""
    lengths = rng.integers(1, length + 1, size=batch)
    lengths[0], lengths[-1] = length, 0
    return jnp.asarray((np.arange(length)[None] < lengths[:, None]).astype(np.int32))


def packed_ids(rng, mask):
    """example_ids for packed rows: each row's real tokens cut into 1-3 examples, 0 on padding."""
    ids = []
    for row in np.asarray(mask):
        cuts = np.sort(rng.integers(1, max(int(row.sum()), 2), size=rng.integers(0, 3)))
        ids.append(row * (1 + np.searchsorted(cuts, np.arange(len(row)), side="right")))
    return jnp.asarray(np.stack(ids), jnp.int32)


def reference(q, k, v, mask, example_ids=None, window=None, rate=0.0, rng=None):
    """Attention as autodiff sees it: float32 softmax, dropout, then the computation's dtype."""
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32)
    logits = logits / math.sqrt(q.shape[-1])
    allowed = attention.attention_mask(mask, example_ids, window)
    logits = jnp.where(allowed, logits, jnp.finfo(jnp.float32).min)
    probs = dropout(jax.nn.softmax(logits, axis=-1), rate, rng)
    return jnp.einsum("bhqk,bkhd->bqhd", probs.astype(v.dtype), v)


def case(seed):
    """A generated attention problem: shapes, padding, packing, window and dropout rate."""
    rng = np.random.default_rng(seed)
    batch, length = int(rng.integers(2, 5)), int(rng.choice([8, 16, 33]))
    heads, head_dim = int(rng.integers(1, 4)), int(rng.choice([4, 8, 16]))
    q, k, v = (rng.normal(size=(batch, length, heads, head_dim)) for _ in range(3))
    mask = padded_mask(rng, batch, length)
    kwargs = dict(
        example_ids=packed_ids(rng, mask) if seed % 2 else None,
        window=int(rng.integers(1, 5)) if seed % 3 == 0 else None,
        rate=float(rng.choice([0.0, 0.1, 0.5])),
        rng=jax.random.key(seed),
    )
    weights = jnp.asarray(rng.normal(size=(batch, length, heads, head_dim)), jnp.float32)
    return (q, k, v), mask, kwargs, weights


def value_and_grads(fn, qkv, mask, kwargs, weights, dtype):
    def loss(q, k, v):
        return jnp.sum(weights * fn(q, k, v, mask, **kwargs).astype(jnp.float32))

    args = [jnp.asarray(x, dtype) for x in qkv]
    value, grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))(*args)
    return np.float64(value), [np.asarray(g, np.float64) for g in grads]


def einsum(q, k, v, mask, example_ids=None, window=None, rate=0.0, rng=None):
    return attention.einsum_attention(
        q, k, v, mask, example_ids=example_ids, window=window, dropout_rate=rate, dropout_rng=rng
    )


@pytest.mark.parametrize("seed", range(6))
def test_softmax_dropout_is_autodiff_in_float32(seed):
    """The einsum path's own backward pass (probabilities kept, dropout mask recomputed) gives
    autodiff's loss and gradients in float32: padded and packed rows, windows, dropout 0-0.5
    (seeds 0-5 cover each of packed x windowed)."""
    qkv, mask, kwargs, weights = case(seed)
    ours, ours_grads = value_and_grads(einsum, qkv, mask, kwargs, weights, jnp.float32)
    ref, ref_grads = value_and_grads(reference, qkv, mask, kwargs, weights, jnp.float32)
    np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-5)
    for g, r in zip(ours_grads, ref_grads):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", range(6))
def test_softmax_dropout_in_bfloat16_is_within_autodiffs_rounding(seed):
    """In bfloat16 the kept probabilities are rounded; the loss and gradients stay as close to
    float32's as autodiff's own bfloat16 ones are (at most twice their error, plus 1e-3 of the
    gradient's scale)."""
    qkv, mask, kwargs, weights = case(seed)
    exact, exact_grads = value_and_grads(reference, qkv, mask, kwargs, weights, jnp.float32)
    ours, ours_grads = value_and_grads(einsum, qkv, mask, kwargs, weights, jnp.bfloat16)
    ref, ref_grads = value_and_grads(reference, qkv, mask, kwargs, weights, jnp.bfloat16)
    assert abs(ours - exact) <= 2 * abs(ref - exact) + 1e-3 * np.sum(np.abs(weights))
    for g, r, e in zip(ours_grads, ref_grads, exact_grads):
        scale = np.max(np.abs(e))
        assert np.max(np.abs(g - e)) <= 2 * np.max(np.abs(r - e)) + 1e-3 * scale


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32])
def test_scanned_layers_keep_the_probabilities_not_the_logits(dtype, capsys):
    """Under the scanned layers' checkpoint policy the backward pass keeps the probabilities in
    the computation's dtype and not the float32 logits: in bfloat16, half of the largest array
    a BERT layer saves."""
    qkv, mask, kwargs, weights = case(1)
    q, k, v = (jnp.asarray(x, dtype) for x in qkv)
    kwargs["rate"] = 0.1

    def loss(q, k, v):
        return jnp.sum(weights * einsum(q, k, v, mask, **kwargs).astype(jnp.float32))

    jax.ad_checkpoint.print_saved_residuals(
        jax.checkpoint(loss, policy=layer_stack._keep_for_backward), q, k, v
    )
    saved = capsys.readouterr().out.splitlines()
    b, length, h, _ = q.shape
    square = f"[{b},{h},{length},{length}]"
    kept = [line for line in saved if square in line]
    assert len(kept) == 1 and attention.PROBS in kept[0], saved
    assert kept[0].startswith("bf16[" if dtype == jnp.bfloat16 else "f32["), kept


def test_fused_attention_matches_einsum_attention():
    rng = np.random.default_rng(1)
    q, k, v = (jnp.asarray(rng.normal(size=(3, 16, 4, 8)), jnp.float32) for _ in range(3))
    mask = padded_mask(rng, 3, 16)
    fused = attention.fused_attention(q, k, v, mask, implementation="xla")
    plain = attention.einsum_attention(q, k, v, mask)
    real = mask.astype(bool)
    np.testing.assert_allclose(np.asarray(fused)[real], np.asarray(plain)[real], atol=1e-5)
    # A query never reads a padded key: scrambling padded keys/values changes nothing.
    k2 = jnp.where(mask[..., None, None] == 1, k, 100.0)
    np.testing.assert_allclose(
        attention.fused_attention(q, k2, v, mask, implementation="xla"), fused, atol=1e-5
    )


@pytest.mark.parametrize("length", [64, 200])
def test_splash_attention_refuses_rows_that_are_not_whole_tiles(length):
    """A user error naming the rule where the kernel would raise its ValueError traceback."""
    q = jnp.zeros((1, length, 2, 16))
    with pytest.raises(cli.UserError, match=rf"a multiple of 128, not {length}: choose 'auto'"):
        attention.splash_attention(q, q, q, jnp.ones((1, length), jnp.int32))


@pytest.mark.parametrize("packed", [False, True])
def test_splash_attention_matches_einsum_attention(packed):
    """The Pallas splash kernel (interpret mode on CPU) against the plain attention: outputs at
    real positions and all three input gradients, right-padded rows (one of them all padding)
    and packed rows of several examples."""
    rng = np.random.default_rng(2)
    batch, length, heads, head_dim = 3, 128, 2, 16
    q, k, v = (jnp.asarray(rng.normal(size=(batch, length, heads, head_dim))) for _ in range(3))
    lengths = np.array([128, 70, 0])
    mask = jnp.asarray((np.arange(length)[None] < lengths[:, None]).astype(np.int32))
    example_ids = None
    if packed:  # examples of 40, 50 and 38 tokens in row 0, two in row 1, padding in row 2
        bounds = np.cumsum([0, 40, 50, 38])
        row0 = np.searchsorted(bounds, np.arange(length), side="right")
        row1 = np.where(np.arange(length) < 30, 1, 2) * np.asarray(mask[1])
        example_ids = jnp.asarray(np.stack([row0, row1, np.zeros(length, int)]), jnp.int32)
    real = np.asarray(mask, bool)[..., None, None]

    def run(fn):
        def loss(q, k, v):
            out = fn(q, k, v, mask, example_ids=example_ids)
            return jnp.sum(jnp.where(real, out, 0) ** 2), out

        return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))(q, k, v)

    (_, splash), grads = run(attention.splash_attention)
    (_, plain), ref_grads = run(attention.einsum_attention)
    np.testing.assert_allclose(np.where(real, splash, 0), np.where(real, plain, 0), atol=1e-5)
    for g, r in zip(grads, ref_grads):
        np.testing.assert_allclose(g, r, atol=1e-4)


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="cuDNN's fused attention needs a GPU")
@pytest.mark.parametrize("layout", ["padded", "packed", "window", "packed_window"])
@pytest.mark.parametrize("length", [128, 512])
def test_cudnn_attention_matches_einsum_attention_on_a_gpu(layout, length):
    """cuDNN's kernel as 'auto' runs it on a GPU (bfloat16, BERT's head size), against the
    float32 einsum attention: outputs at real positions and the three input gradients, for
    right-padded rows (per-row lengths), packed rows and ModernBERT's band (a mask), each within
    the error of the bfloat16 einsum path itself (both round to bfloat16; the kernel must not add
    to it)."""
    rng = np.random.default_rng(length)
    batch, heads, head_dim = 4, 12, 64
    qkv = [rng.normal(size=(batch, length, heads, head_dim)) for _ in range(3)]
    mask = padded_mask(rng, batch, length)
    kwargs = {
        "example_ids": packed_ids(rng, mask) if "packed" in layout else None,
        "window": 64 if "window" in layout else None,
    }
    weights = jnp.asarray(rng.normal(size=(batch, length, heads, head_dim)), jnp.float32)
    weights = weights * mask[..., None, None]  # padding queries' outputs are never used

    F32, BF16 = jnp.float32, jnp.bfloat16

    def cudnn(q, k, v, mask, **kw):
        return attention.fused_attention(q, k, v, mask, implementation="cudnn", **kw)

    def outputs(fn, dtype):
        out = jax.jit(fn)(*(jnp.asarray(x, dtype) for x in qkv), mask, **kwargs)
        return np.asarray(out, np.float64)[np.asarray(mask, bool)]  # real queries only

    exact, rounded = (
        value_and_grads(einsum, qkv, mask, kwargs, weights, d)[1] for d in (F32, BF16)
    )
    fused = value_and_grads(cudnn, qkv, mask, kwargs, weights, BF16)[1]
    exact.append(outputs(einsum, F32))
    rounded.append(outputs(einsum, BF16))
    fused.append(outputs(cudnn, BF16))
    for got, ref, bf16 in zip(fused, exact, rounded):  # dq, dk, dv, outputs
        assert np.abs(got - ref).max() <= 2 * np.abs(bf16 - ref).max() + 1e-3 * np.abs(ref).max()
