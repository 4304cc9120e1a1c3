"""Packed fine-tuning (bert_jax/finetune/packed.py): for every task kind, packed rows give each
example its unpacked logits, and a packed batch the unpacked loss and gradients; the step plan
holds every step of a run; a packed run trains like an unpacked one."""

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx

from bert_jax.data.contract import features as F
from bert_jax.data.input import packing
from bert_jax.finetune import encode, heads, packed, runs, squad
from bert_jax.model import encoder as M
from configs import tiny

L, N, VOCAB = 32, 24, 200
NUM_LABELS = {"classification": 3, "regression": 1, "tagging": 5, "span": 2}


def random_examples(kind, n=N, seed=0):
    """Right-padded encoder arrays of 3..L pieces ([CLS] a [SEP] b [SEP]) with `kind`'s labels."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, L + 1, n)
    lengths[:2] = L, 3  # a full row and the shortest example
    mask = (np.arange(L) < lengths[:, None]).astype(np.int32)
    ids = rng.integers(5, VOCAB, (n, L)).astype(np.int32) * mask
    ids[:, 0] = 2
    ids[np.arange(n), lengths - 1] = 3
    arrays = {
        F.INPUT_IDS: ids,
        F.INPUT_MASK: mask,
        F.SEGMENT_IDS: ((np.arange(L) >= lengths[:, None] // 2) * mask).astype(np.int32),
    }
    if kind == "classification":
        arrays[encode.LABEL] = rng.integers(0, NUM_LABELS[kind], n).astype(np.int32)
    elif kind == "regression":
        arrays[encode.LABEL] = rng.normal(size=n).astype(np.float32)
    elif kind == "tagging":
        arrays[encode.LABEL_IDS] = rng.integers(0, NUM_LABELS[kind], (n, L)).astype(np.int32) * mask
        # Labels at the first piece of each word: some real positions, never padding or [CLS].
        weights = (rng.random((n, L)) < 0.6) * mask
        weights[:, 0] = 0
        arrays[encode.LABEL_WEIGHTS] = weights.astype(np.float32)
    else:  # span: an answer inside the example, or none (position 0, its [CLS])
        start = rng.integers(1, np.maximum(2, lengths - 1))
        end = np.minimum(lengths - 2, start + rng.integers(0, 3, n)).clip(min=start)
        none = rng.random(n) < 0.25
        arrays[squad.START_POSITIONS] = np.where(none, 0, start).astype(np.int32)
        arrays[squad.END_POSITIONS] = np.where(none, 0, end).astype(np.int32)
    return arrays


def task_model(kind):
    config = M.BertConfig.from_config_dict(tiny.get_config().model)
    config = dataclasses.replace(
        config,
        vocab_size=VOCAB,
        hidden_dropout_prob=0.0,  # dropout masks follow a row's layout
        attention_probs_dropout_prob=0.0,
        max_position_embeddings=L,
        num_hidden_layers=1,  # the packing is in the embeddings, attention and heads
    )
    return heads.TaskModel(config, kind, NUM_LABELS[kind], rngs=nnx.Rngs(0))


def without_padding(kind, batch, outputs):
    """Span: the unpacked logits with padding positions out of the softmax, as packed rows have
    no padding inside an example (the default span loss includes them: transformers')."""
    if kind != "span":
        return outputs
    real = batch[F.INPUT_MASK] > 0
    return tuple(np.where(real, np.asarray(x), -1e9) for x in outputs)


@pytest.mark.parametrize("kind", heads.KINDS)
def test_packed_rows_give_each_example_its_unpacked_logits_loss_and_gradients(kind):
    model = task_model(kind)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    params = nnx.to_pure_dict(params)
    ex = random_examples(kind, seed=1)
    rows = packed.pack_examples(ex, np.arange(N), max_examples=4).num_rows
    assert rows < N  # something was packed
    # Two empty rows more, as a step's fixed row count adds: they change nothing.
    p = packed.pack_examples(ex, np.arange(N), max_examples=4, num_rows=rows + 2)
    assert p.num_rows == rows + 2 and p.arrays[packing.EXAMPLE_WEIGHTS].sum() == N
    forward = jax.jit(lambda params, b: runs.forward(graphdef, params, rest, b))
    got = packed.unpack_outputs(kind, p, jax.device_get(forward(params, p.arrays)), L)
    want = jax.device_get(forward(params, ex))
    mask = ex[F.INPUT_MASK] > 0
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        if g.ndim >= 2 and g.shape[1] == L:  # token outputs: the example's own tokens
            g, w = g[mask], w[mask]
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)

    def loss_fn(params, b, mask_padding):
        outputs = runs.forward(graphdef, params, rest, b)
        if mask_padding:  # the reference for packed span rows (see without_padding)
            outputs = tuple(jax.numpy.where(b[F.INPUT_MASK] > 0, x, -1e9) for x in outputs)
        return heads.loss(kind, outputs, b)

    grad = jax.jit(jax.value_and_grad(loss_fn), static_argnums=2)
    loss, grads = grad(params, ex, kind == "span")
    packed_loss, packed_grads = grad(params, p.arrays, False)
    np.testing.assert_allclose(packed_loss, loss, rtol=1e-5)
    for (path, a), b in zip(
        jax.tree_util.tree_leaves_with_path(grads), jax.tree.leaves(packed_grads)
    ):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6, err_msg=jax.tree_util.keystr(path))


def test_span_positions_follow_their_example_into_the_row():
    ex = random_examples("span", seed=2)
    p = packed.pack_examples(ex, np.arange(N), max_examples=4)
    starts = p.example_values(p.arrays[squad.START_POSITIONS])
    np.testing.assert_array_equal(starts, ex[squad.START_POSITIONS] + p.offset)
    # "No answer" (0) points at the example's own [CLS].
    cls = p.example_values(p.arrays[packing.CLS_POSITIONS])
    none = ex[squad.START_POSITIONS] == 0
    np.testing.assert_array_equal(starts[none], cls[none])


@pytest.mark.parametrize("procs, dp", [(1, 1), (1, 4), (2, 8), (4, 2)])
def test_the_plan_holds_every_step_and_its_examples_are_the_unpacked_steps(procs, dp):
    ex = random_examples("classification", n=50, seed=3)
    ex[F.INPUT_MASK][10:] = (np.arange(L) < 6).astype(np.int32)  # mostly short: several a row
    batch, steps = 16, 9
    plan = packed.plan(ex, batch, seed=4, steps=steps, process_count=procs, data_parallel=dp)
    assert (plan.rows * procs) % dp == 0 and plan.examples_per_row > 2
    for proc in range(procs):
        order = packed.index_batches(50, batch, 4, proc, procs)
        stream = packed.train_batches(ex, batch, 4, plan, proc, procs)
        for s in range(steps):
            rows = stream[s]
            assert rows[F.INPUT_IDS].shape == (plan.rows, L)
            assert rows[packing.CLS_POSITIONS].shape == (plan.rows, plan.max_examples)
            # The same examples as the unpacked step s (packed.train_batches without a plan).
            labels = rows[encode.LABEL][rows[packing.EXAMPLE_WEIGHTS] > 0]
            assert sorted(labels) == sorted(ex[encode.LABEL][order[s]])
