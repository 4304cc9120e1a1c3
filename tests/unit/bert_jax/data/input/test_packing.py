"""Packing: the first-fit-decreasing plan, the packed layout, and the model on packed rows giving
every example exactly its unpacked logits, loss and gradients."""

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx

from bert_jax.data.contract import features as F
from bert_jax.data.input import packed_records, packing, pipeline
from bert_jax.model import encoder as M
from bert_jax.training import losses, pretrain
from configs import tiny

L, P, E = 32, 6, 4
VOCAB = tiny.get_config().model.vocab_size


def item_values(packed: packing.Packed, per_item, num_items: int) -> np.ndarray:
    """[R, max_items, ...] (e.g. masked-LM logits) -> [N, num_items, ...], each example's items
    from index 0 as unpacked, zeros after them: what the packed rows' items were."""
    per_item = np.asarray(per_item)
    out = np.zeros((len(packed.row), num_items, *per_item.shape[2:]), per_item.dtype)
    for n, (row, start, count) in enumerate(
        zip(packed.row, packed.item_start, packed.item_counts, strict=True)
    ):
        out[n, :count] = per_item[row, start : start + count]
    return out


def test_first_fit_decreasing_by_hand():
    # Longest first: 6 opens row 0, 5 opens row 1, 4 fills row 0, 3 and 2 go to row 1.
    assert packing.first_fit_decreasing([6, 5, 4, 3, 2], 10, 3) == [[0, 2], [1, 3, 4]]
    assert packing.first_fit_decreasing([6, 5, 4, 3, 2], 10, 2) == [[0, 2], [1, 3], [4]]
    # Items are a budget too: 3 + 3 items do not fit 5.
    assert packing.first_fit_decreasing([2, 2], 10, 3, [3, 3], 5) == [[0], [1]]
    with pytest.raises(ValueError, match="example 1 has 11 tokens"):
        packing.first_fit_decreasing([3, 11], 10, 3)
    with pytest.raises(ValueError, match="more than max_items"):
        packing.first_fit_decreasing([3], 10, 3, [6], 5)


@pytest.mark.parametrize("seed", range(5))
def test_plans_respect_every_budget_and_place_each_example_once(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    lengths = rng.integers(1, 129, n)
    counts = rng.integers(0, 21, n)
    rows = packing.first_fit_decreasing(lengths, 128, 3, counts, 24)
    assert sorted(i for r in rows for i in r) == list(range(n))
    assert all(len(r) <= 3 for r in rows)
    assert all(lengths[r].sum() <= 128 and counts[r].sum() <= 24 for r in rows)
    assert len(rows) >= -(-lengths.sum() // 128)
    assert rows == packing.first_fit_decreasing(lengths, 128, 3, counts, 24)  # deterministic


def random_examples(n, seed=0, vocab=VOCAB):
    """Right-padded examples of 3..L tokens: [CLS] a [SEP] b [SEP] with masked positions."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, L + 1, n)
    lengths[:2] = L, 3
    mask = (np.arange(L) < lengths[:, None]).astype(np.int32)
    ids = rng.integers(1000, vocab, (n, L)).astype(np.int32) * mask
    ids[:, 0] = 101
    ids[np.arange(n), lengths - 1] = 102
    segments = ((np.arange(L) >= lengths[:, None] // 2) * mask).astype(np.int32)
    counts = np.minimum(P, np.maximum(1, np.round(lengths * 0.15).astype(int)))
    positions = np.zeros((n, P), np.int32)
    weights = np.zeros((n, P), np.float32)
    for i in range(n):
        positions[i, : counts[i]] = np.sort(rng.choice(np.arange(1, lengths[i]), counts[i], False))
        weights[i, : counts[i]] = 1.0
    return {
        F.INPUT_IDS: ids,
        F.INPUT_MASK: mask,
        F.SEGMENT_IDS: segments,
        F.MASKED_LM_POSITIONS: positions,
        F.MASKED_LM_IDS: rng.integers(1000, vocab, (n, P)).astype(np.int32) * (weights > 0),
        F.MASKED_LM_WEIGHTS: weights,
        F.NEXT_SENTENCE_LABELS: rng.integers(0, 2, n).astype(np.int32),
        pipeline.NEXT_SENTENCE_WEIGHTS: np.ones(n, np.float32),
    }


def test_packed_layout_maps_back_to_every_example():
    ex = random_examples(40, seed=1)
    packed = packed_records.pack_window(ex, E, seed=7)
    a = packed.arrays
    assert packed.num_rows < 40 and a[F.INPUT_IDS].shape == (packed.num_rows, L)
    lengths = ex[F.INPUT_MASK].sum(1)
    for name in (F.INPUT_IDS, F.INPUT_MASK, F.SEGMENT_IDS):
        np.testing.assert_array_equal(packed.token_values(a[name], L), ex[name], err_msg=name)
    for name in (F.MASKED_LM_IDS, F.MASKED_LM_WEIGHTS):
        np.testing.assert_array_equal(item_values(packed, a[name], P), ex[name], err_msg=name)
    for name in (F.NEXT_SENTENCE_LABELS, pipeline.NEXT_SENTENCE_WEIGHTS):
        np.testing.assert_array_equal(packed.example_values(a[name]), ex[name], err_msg=name)
    # Positions point at the same tokens inside the row; each example's [CLS] is its first token.
    shifted = item_values(packed, a[F.MASKED_LM_POSITIONS], P)
    real = ex[F.MASKED_LM_WEIGHTS] > 0
    np.testing.assert_array_equal(
        (shifted - packed.offset[:, None])[real], ex[F.MASKED_LM_POSITIONS][real]
    )
    rows = np.broadcast_to(packed.row[:, None], shifted.shape)
    np.testing.assert_array_equal(
        a[F.INPUT_IDS][rows, shifted][real],
        ex[F.INPUT_IDS][np.arange(40)[:, None], ex[F.MASKED_LM_POSITIONS]][real],
    )
    cls = packed.example_values(a[packing.CLS_POSITIONS])
    assert (a[F.INPUT_IDS][packed.row, cls] == 101).all()
    # Example ids and positions: slot + 1 and 0.. on each example's tokens, 0 on padding.
    ids = packed.token_values(a[packing.EXAMPLE_IDS], L)
    pos = packed.token_values(a[packing.POSITION_IDS], L)
    mask = ex[F.INPUT_MASK].astype(bool)
    np.testing.assert_array_equal(ids, (packed.slot[:, None] + 1) * mask)
    np.testing.assert_array_equal(pos, np.arange(L) * mask)
    assert (a[packing.EXAMPLE_IDS] > 0).sum() == lengths.sum() == a[F.INPUT_MASK].sum()
    assert a[packing.EXAMPLE_WEIGHTS].sum() == 40
    np.testing.assert_array_equal(
        a[packing.EXAMPLE_WEIGHTS] > 0, a[pipeline.NEXT_SENTENCE_WEIGHTS] > 0
    )


@pytest.fixture(scope="module")
def model():
    """configs/tiny.py's model at L=32, without dropout (its masks follow a row's layout)."""
    config = M.BertConfig.from_config_dict(tiny.get_config().model)
    config = dataclasses.replace(
        config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, max_position_embeddings=L
    )
    return M.BertForPreTraining(config, rngs=nnx.Rngs(0))


def packed_inputs(batch):
    return {k: batch[k] for k in packing.MODEL_INPUTS if k in batch}


@nnx.jit
def outputs(model, b):
    """(MLM logits, NSP logits, sequence output, pooled) of unpacked or packed rows."""
    inputs = (b[F.INPUT_IDS], b[F.INPUT_MASK], b[F.SEGMENT_IDS])
    mlm, nsp = model(*inputs, b[F.MASKED_LM_POSITIONS], **packed_inputs(b))
    return mlm, nsp, *model.bert(*inputs, **packed_inputs(b))


@pytest.mark.parametrize("impl", ["xla", "einsum"])
def test_packed_rows_give_each_example_its_unpacked_logits(model, impl):
    cfg = dataclasses.replace(model.config, attention_impl=impl)
    model = M.model_from_params(cfg, nnx.to_pure_dict(nnx.state(model, nnx.Param)))
    ex = random_examples(24, seed=2)
    packed = packed_records.pack_window(ex, E, seed=0)
    mlm, nsp, seq, pooled = outputs(model, ex)
    packed_mlm, packed_nsp, packed_seq, packed_pooled = outputs(model, packed.arrays)
    assert packed_nsp.shape == (packed.num_rows, E, 2)
    real = ex[F.MASKED_LM_WEIGHTS] > 0
    np.testing.assert_allclose(
        item_values(packed, packed_mlm, P)[real], np.asarray(mlm)[real], atol=1e-5
    )
    np.testing.assert_allclose(packed.example_values(packed_nsp), nsp, atol=1e-5)
    mask = ex[F.INPUT_MASK].astype(bool)
    np.testing.assert_allclose(
        packed.token_values(packed_seq, L)[mask], np.asarray(seq)[mask], atol=1e-5
    )
    np.testing.assert_allclose(packed.example_values(packed_pooled), pooled, atol=1e-5)


def graph_and_params(model):
    graphdef, state = nnx.split(model, nnx.Param)  # as train.make_setup splits it
    return graphdef, nnx.to_pure_dict(state)


@pytest.fixture(scope="module")
def grad_fn(model):
    graphdef, _ = graph_and_params(model)
    return jax.jit(
        lambda p, b: pretrain.loss_and_grads(graphdef, p, b, jax.random.key(0), dropout=False)
    )


@pytest.mark.parametrize("nsp", [True, False])
def test_packed_batches_give_the_unpacked_loss_and_gradients(model, grad_fn, nsp):
    _, params = graph_and_params(model)
    ex = random_examples(24, seed=3)
    ex[pipeline.NEXT_SENTENCE_WEIGHTS][:] = float(nsp)
    packed = packed_records.pack_window(ex, E, seed=0).arrays
    loss, sums, grads = grad_fn(params, ex)
    packed_loss, packed_sums, packed_grads = grad_fn(params, packed)
    np.testing.assert_allclose(packed_loss, loss, rtol=1e-5)
    for k in sums:
        np.testing.assert_allclose(packed_sums[k], sums[k], rtol=1e-5, atol=1e-5, err_msg=k)
    assert float(sums["nsp_count"]) == (24 if nsp else 0)
    if not nsp:  # MLM-only records: the loss is the MLM term alone
        np.testing.assert_allclose(loss, losses.pretraining_loss(sums), rtol=1e-6)
        assert float(sums["nsp_nll_sum"]) == 0.0
    for (path, a), b in zip(
        jax.tree_util.tree_leaves_with_path(grads), jax.tree.leaves(packed_grads)
    ):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6, err_msg=jax.tree_util.keystr(path))


def test_incomplete_packed_inputs_get_clear_errors(model):
    b = packed_records.pack_window(random_examples(8), E).arrays
    inputs = (b[F.INPUT_IDS], b[F.INPUT_MASK], b[F.SEGMENT_IDS])
    with pytest.raises(ValueError, match="both example_ids and position_ids"):
        model.bert(*inputs, example_ids=b[packing.EXAMPLE_IDS])
    with pytest.raises(ValueError, match="need example_ids, position_ids and cls_positions"):
        model(*inputs, b[F.MASKED_LM_POSITIONS], example_ids=b[packing.EXAMPLE_IDS])
    with pytest.raises(ValueError, match=r"cls_positions must be \[batch, examples per row\]"):
        model.bert(*inputs, cls_positions=b[packing.CLS_POSITIONS][0])
    with pytest.raises(ValueError, match="position_ids must all be"):
        model.bert(
            *inputs,
            example_ids=b[packing.EXAMPLE_IDS],
            position_ids=b[packing.POSITION_IDS][:, :-1],
        )
    with pytest.raises(ValueError, match="positions names"):
        packing.pack(
            {F.INPUT_IDS: b[F.INPUT_IDS]}, [3] * len(b[F.INPUT_IDS]), L, E, positions=["x"]
        )
    with pytest.raises(ValueError, match=r"token feature 'input_ids' has shape \(8, 2\)"):
        packing.pack({F.INPUT_IDS: np.zeros((8, 2))}, [3] * 8, L, E)
