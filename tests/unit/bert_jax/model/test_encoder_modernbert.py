"""The modern block: sizes equal to transformers' ModernBERT-base and -large, each field doing what
it says, the scan over alternating layers, sliding windows on every attention path, and RoPE equal
to transformers' out to 8,192 positions."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from bert_jax import cli
from bert_jax.model import attention, layer_stack, rope
from bert_jax.model import encoder as M
from configs import bert_base, modernbert_base, modernbert_large

# Seven layers: global (no attention norm), then (sliding, sliding, global) twice.
MODERN = M.BertConfig.from_config_dict(
    {
        **modernbert_base.get_config().model.to_dict(),
        "vocab_size": 97,
        "hidden_size": 32,
        "num_hidden_layers": 7,
        "num_attention_heads": 2,
        "intermediate_size": 48,
        "max_position_embeddings": 512,
        "local_attention": 8,
    }
)
B, L, P = 3, 32, 6

# The modern block's fields, which a config written before them lacks (BERT's values are
# their defaults).
MODERN_FIELDS = (
    "position_embedding_type",
    "global_rope_theta",
    "local_rope_theta",
    "norm_position",
    "mlp_type",
    "attention_bias",
    "mlp_bias",
    "norm_bias",
    "head_bias",
    "decoder_bias",
    "local_attention",
    "global_attn_every_n_layers",
    "pooler",
    "nsp_head",
    "scale_init_by_depth",
)


def batch(seed=0, length=L):
    rng = np.random.default_rng(seed)
    lengths = np.array([length, length - 9, 5])
    mask = (np.arange(length)[None] < lengths[:, None]).astype(np.int32)
    ids = (rng.integers(5, MODERN.vocab_size, (B, length)) * mask).astype(np.int32)
    positions = np.sort(rng.integers(0, 5, (B, P)), axis=1).astype(np.int32)
    return ids, mask, np.zeros_like(ids), positions


def packed(length=L):
    """Each row two documents (first half, second half), as bert_jax.data.input.packing lays them
    out."""
    half = length // 2
    example = np.where(np.arange(length) < half, 1, 2)[None].repeat(B, 0).astype(np.int32)
    position = np.where(np.arange(length) < half, np.arange(length), np.arange(length) - half)
    return dict(
        example_ids=example,
        position_ids=np.tile(position, (B, 1)).astype(np.int32),
        cls_positions=np.tile(np.array([[0, half]], np.int32), (B, 1)),
    )


def build(cfg=MODERN, seed=0):
    return M.BertForPreTraining(cfg, rngs=nnx.Rngs(seed))


def same_params(model, cfg):
    other = build(cfg, seed=1)
    nnx.update(other, nnx.state(model, nnx.Param))
    return other


@nnx.jit
def forward(model, ids, mask, seg, pos, extra):
    return model(ids, mask, seg, pos, **extra)


@pytest.mark.parametrize("module", [modernbert_base, modernbert_large])
def test_published_sizes_match_transformers(module):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    cfg = M.BertConfig.from_config_dict(module.get_config().model)
    ours = M.count_params(nnx.eval_shape(lambda: M.BertForPreTraining(cfg, rngs=nnx.Rngs(0))))
    hf_cfg = transformers.ModernBertConfig(
        **{
            k: getattr(cfg, k)
            for k in (
                "vocab_size",
                "hidden_size",
                "intermediate_size",
                "num_hidden_layers",
                "num_attention_heads",
            )
        }
    )
    with torch.device("meta"):
        theirs = sum(p.numel() for p in transformers.ModernBertForMaskedLM(hf_cfg).parameters())
    assert ours == theirs
    approx = {modernbert_base: 149e6, modernbert_large: 395e6}[module]
    assert abs(ours - approx) < 0.02 * approx


def _plan(cfg):
    model = nnx.eval_shape(lambda: M.BertModel(cfg, rngs=nnx.Rngs(0)))
    return layer_stack.scan_plan([nnx.split(layer)[0] for layer in model.layers])


def test_the_scan_runs_groups_of_alternating_layers():
    """(start, period, groups): ModernBERT's first layer alone (no attention norm), then groups
    of (sliding, sliding, global); BERT's layers all in one scan of single layers."""
    for module, plan in ((modernbert_base, (1, 3, 7)), (modernbert_large, (1, 3, 9))):
        assert _plan(M.BertConfig.from_config_dict(module.get_config().model)) == plan
    bert = bert_base.get_config().model
    bert.vocab_size = 30522
    assert _plan(M.BertConfig.from_config_dict(bert)) == (0, 1, 12)
    assert _plan(MODERN) == (1, 3, 2)
    assert _plan(dataclasses.replace(MODERN, num_hidden_layers=5)) == (1, 1, 2)  # s, s only
    assert layer_stack.scan_plan(["a", "b", "c"]) == (0, 0, 0)


@pytest.mark.parametrize("remat, pack", [(False, False), (True, True)])
def test_scanned_modern_layers_give_the_unrolled_loss_and_gradients(remat, pack):
    """Scanned groups of (sliding, sliding, global) layers after the first: the unrolled stack's
    loss and gradients, with dropout (the same keys), remat and packed rows."""
    cfg = dataclasses.replace(MODERN, hidden_dropout_prob=0.1, remat=remat)
    unrolled = build(cfg)
    scanned = same_params(unrolled, dataclasses.replace(cfg, scan_layers=True))
    extra = packed() if pack else {}

    def value_and_grads(m):
        def loss(m):
            mlm, _ = m(*batch(), **extra, dropout_rng=jax.random.key(3))
            return jnp.mean(mlm.astype(jnp.float32) ** 2)

        return nnx.jit(nnx.value_and_grad(loss))(m)

    (l1, g1), (l2, g2) = value_and_grads(unrolled), value_and_grads(scanned)
    np.testing.assert_allclose(l2, l1, rtol=1e-5)
    for (path, a), b in zip(
        jax.tree_util.tree_flatten_with_path(nnx.state(g1, nnx.Param))[0],
        jax.tree.leaves(nnx.state(g2, nnx.Param)),
    ):
        scale = float(np.abs(a).max()) + 1e-6
        np.testing.assert_allclose(b, a, atol=1e-5 * scale, err_msg=jax.tree_util.keystr(path))


@pytest.mark.parametrize("pack", [False, True])
def test_windowed_attention_on_every_path(pack):
    """A window of 16 either side in rows of 384 (three splash blocks of 128: the far ones
    skipped): XLA's and the splash kernel's (interpret mode) outputs and gradients equal the
    einsum attention's; keys outside the window or in another document change nothing."""
    rng = np.random.default_rng(4)
    batch_, length, heads, dim, window = 2, 384, 2, 16, 16
    q, k, v = (jnp.asarray(rng.normal(size=(batch_, length, heads, dim))) for _ in range(3))
    mask = jnp.asarray((np.arange(length)[None] < np.array([[length], [300]])).astype(np.int32))
    example_ids = None
    if pack:
        example_ids = jnp.asarray(
            np.where(np.arange(length) < 200, 1, 2)[None] * np.asarray(mask), jnp.int32
        )
    real = np.asarray(mask, bool)[..., None, None]

    def run(fn, k=k):
        def loss(q, k, v):
            out = fn(q, k, v, mask, example_ids=example_ids, window=window)
            return jnp.sum(jnp.where(real, out, 0) ** 2), out

        return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))(q, k, v)

    (_, ref), ref_grads = run(attention.einsum_attention)
    for fn in (
        lambda *a, **kw: attention.fused_attention(*a, **kw, implementation="xla"),
        attention.splash_attention,
    ):
        (_, out), grads = run(fn)
        np.testing.assert_allclose(np.where(real, out, 0), np.where(real, ref, 0), atol=1e-5)
        for g, r in zip(grads, ref_grads):
            np.testing.assert_allclose(g, r, atol=1e-4)
    # Query 100 reads keys 84..116 only: scrambling the others leaves it as it was.
    far = np.abs(np.arange(length) - 100) > window
    scrambled = jnp.where(far[None, :, None, None], 50.0, k)
    (_, moved), _ = run(attention.einsum_attention, k=scrambled)
    np.testing.assert_allclose(moved[:, 100], ref[:, 100], atol=1e-6)
    assert not np.allclose(moved[:, 300], ref[:, 300])


def test_the_model_attention_paths_agree():
    model = build()
    ids, mask, seg, pos = batch(length=128)
    out = {}
    for impl in ("einsum", "xla", "splash"):
        m = same_params(model, dataclasses.replace(MODERN, attention_impl=impl))
        out[impl] = np.asarray(forward(m, ids, mask, seg, pos, {})[0])
    real = np.take_along_axis(mask, pos, axis=1).astype(bool)
    for impl in ("xla", "splash"):
        np.testing.assert_allclose(out[impl][real], out["einsum"][real], atol=1e-4, err_msg=impl)


def test_each_field_does_what_it_says():
    model = build()
    params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    embeddings = params["bert"]["embeddings"]
    assert set(embeddings) == {"word_embeddings", "layer_norm"}  # rope, no token types
    assert set(embeddings["layer_norm"]) == {"scale"}  # norm_bias=False
    assert "attention_norm" not in params["bert"]["layers"][0]  # pre-norm's first layer
    assert set(params["bert"]["layers"][1]) == {
        "attention",
        "attention_norm",
        "intermediate",
        "gate",
        "output",
        "output_norm",
    }
    assert set(params["bert"]["layers"][1]["intermediate"]) == {"kernel"}  # mlp_bias=False
    assert set(params["mlm"]) == {"transform", "transform_norm", "bias"}  # decoder_bias only
    assert "pooler" not in params["bert"] and "nsp" not in params and "final_norm" in params["bert"]
    ids, mask, seg, pos = batch()
    mlm, nsp = forward(model, ids, mask, seg, pos, {})
    np.testing.assert_array_equal(nsp, np.zeros((B, 2)))  # no NSP head: MLM only
    seq, pooled = nnx.jit(lambda m, *a: m(*a))(model.bert, ids, mask, seg)
    np.testing.assert_array_equal(pooled, seq[:, 0])  # no pooler: the first token's state
    # Token types: none, so segment ids change nothing.
    np.testing.assert_array_equal(forward(model, ids, mask, seg + 1, pos, {})[0], mlm)
    # RoPE is relative: every position shifted by the same amount, the same outputs (an
    # absolute table would move them).
    shifted = {k: v + 37 if k == "position_ids" else v for k, v in packed().items()}
    a = forward(model, ids * 0 + ids[0], mask * 0 + 1, seg, pos, packed())[0]
    b = forward(model, ids * 0 + ids[0], mask * 0 + 1, seg, pos, shifted)[0]
    np.testing.assert_allclose(a, b, atol=2e-5)
    # Packed documents never read each other: the second one's tokens do not move the first's.
    other = ids.copy()
    other[:, L // 2 :] = 7
    first = np.broadcast_to(np.arange(5), (B, 5)).astype(np.int32)
    np.testing.assert_array_equal(
        forward(model, ids, mask * 0 + 1, seg, first, packed())[0],
        forward(model, other, mask * 0 + 1, seg, first, packed())[0],
    )


def test_every_param_has_logical_axes_and_the_decay_rule_holds():
    model = nnx.eval_shape(lambda: build())
    specs = nnx.to_flat_state(nnx.get_partition_spec(nnx.state(model, nnx.Param)))
    values = dict(nnx.to_flat_state(nnx.state(model, nnx.Param)))
    for path, spec in specs:
        value = values[path].get_value()
        names = tuple(spec.get_value())
        assert len(names) == value.ndim, path
        assert set(names) <= set(M.LOGICAL_AXIS_NAMES) | {None}, path
        assert (path[-1] in ("kernel", "embedding")) == (value.ndim == 2), path


def test_sharded_forward_matches_single_device():
    """The modern block on a data x fsdp x tensor mesh (GeGLU's two halves and the heads split
    over 'tensor'), packed rows, windows: the single device's outputs."""
    from bert_jax.model import sharding
    from configs import default

    model = build()
    ids, mask, seg, pos = batch()
    ids, mask, seg, pos = (np.concatenate([x, x[:1]]) for x in (ids, mask, seg, pos))
    extra = {k: np.concatenate([v, v[:1]]) for k, v in packed().items()}
    ref = forward(model, ids, mask, seg, pos, extra)[0]
    mesh = sharding.make_mesh(data=4, fsdp=1, tensor=2)
    rules = sharding.normalize_rules(default.get_config().mesh.rules)
    shardings = sharding.param_shardings(nnx.state(model, nnx.Param), mesh, rules)
    placed = build(seed=1)
    state = nnx.state(placed, nnx.Param)
    params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    nnx.replace_by_pure_dict(state, jax.device_put(params, shardings))
    nnx.update(placed, state)
    with sharding.activate(mesh, rules):
        out = forward(placed, ids, mask, seg, pos, extra)[0]
    np.testing.assert_allclose(out, ref, atol=1e-5)


def test_fields_combine_freely_and_bert_is_the_default():
    """Any mix builds and runs (RoPE with post-norm, GeGLU with absolute positions, ...); the
    defaults are BERT's, so a config written before the fields existed is the same model."""
    for changes in (
        dict(norm_position="post"),
        dict(position_embedding_type="absolute", type_vocab_size=2),
        dict(mlp_type="gelu", local_attention=0, pooler=True, nsp_head=True),
    ):
        cfg = dataclasses.replace(MODERN, **changes)
        mlm, _ = forward(build(cfg), *batch(), {})
        assert np.isfinite(np.asarray(mlm)).all(), changes
    full = {**bert_base.get_config().model.to_dict(), "vocab_size": 30522}
    old = {k: v for k, v in full.items() if k not in MODERN_FIELDS}
    assert M.BertConfig.from_config_dict(old) == M.BertConfig.from_config_dict(full)


def test_config_mistakes_name_the_field():
    for changes, message in (
        (dict(position_embedding_type="alibi"), "position_embedding_type must be one of"),
        (dict(norm_position="sandwich"), "norm_position must be one of"),
        (dict(mlp_type="swiglu"), "mlp_type must be one of"),
        (dict(local_attention=-2), "local_attention must be an integer >= 0"),
        (dict(global_attn_every_n_layers=0), "global_attn_every_n_layers must be"),
        (dict(global_rope_theta=0.0), "global_rope_theta must be positive"),
        (dict(nsp_head=True), "nsp_head needs the pooler"),
        (dict(hidden_size=30, num_attention_heads=2), "RoPE needs an even head size"),
    ):
        with pytest.raises(cli.UserError, match=message):
            dataclasses.replace(MODERN, **changes)


def test_rope_equals_transformers_out_to_8192_positions():
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from transformers.models.modernbert import modeling_modernbert as mb

    head_dim, heads = 64, 2
    config = transformers.ModernBertConfig(
        hidden_size=head_dim * heads, num_attention_heads=heads, max_position_embeddings=8192
    )
    rotary = mb.ModernBertRotaryEmbedding(config)
    positions = np.array([[0, 1, 127, 128, 4095, 8190, 8191]])
    x = np.random.default_rng(5).normal(size=(1, heads, positions.shape[1], head_dim))
    x = x.astype(np.float32)
    for kind, theta in (("full_attention", 160_000.0), ("sliding_attention", 10_000.0)):
        cos, sin = rotary(torch.tensor(x), torch.tensor(positions), kind)
        theirs, _ = mb.apply_rotary_pos_emb(torch.tensor(x), torch.tensor(x), cos, sin)
        ours = rope.rotate(
            jnp.swapaxes(x, 1, 2), *rope.tables(jnp.asarray(positions), theta, head_dim)
        )
        np.testing.assert_allclose(np.swapaxes(ours, 1, 2), theirs.numpy(), atol=1e-5)


def test_rope_in_bfloat16_is_transformers_bfloat16_rotation_and_its_gradient_rotates_back():
    """Under bfloat16 the rotation takes and gives bfloat16 with the tables cast to it, as
    transformers' ModernBERT does (its rotary embedding returns cos and sin in x's dtype), and
    agrees with its rotation within bfloat16's rounding (XLA rounds a fused rotation once, torch
    each product); the gradient is the rotation by the opposite angles."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from transformers.models.modernbert import modeling_modernbert as mb

    head_dim, heads, theta = 64, 2, 160_000.0
    config = transformers.ModernBertConfig(
        hidden_size=head_dim * heads, num_attention_heads=heads, max_position_embeddings=8192
    )
    positions = np.array([[0, 1, 2, 127, 128, 4095, 8191]])
    x = np.random.default_rng(6).normal(size=(1, heads, positions.shape[1], head_dim))
    x_bf16 = torch.tensor(x, dtype=torch.bfloat16)
    cos, sin = mb.ModernBertRotaryEmbedding(config)(
        x_bf16, torch.tensor(positions), "full_attention"
    )
    assert cos.dtype == torch.bfloat16
    theirs, _ = mb.apply_rotary_pos_emb(x_bf16, x_bf16, cos, sin)
    tables = rope.tables(jnp.asarray(positions), theta, head_dim)
    xs = jnp.swapaxes(jnp.asarray(x, jnp.bfloat16), 1, 2)
    ours = rope.rotate(xs, *tables)
    assert ours.dtype == jnp.bfloat16
    np.testing.assert_allclose(
        np.swapaxes(np.asarray(ours, np.float32), 1, 2),
        theirs.float().numpy(),
        rtol=1e-2,
        atol=1e-2,
    )
    g = jnp.asarray(np.random.default_rng(7).normal(size=xs.shape), jnp.float32)
    (grad,) = jax.vjp(lambda t: rope.rotate(t, *tables), xs.astype(jnp.float32))[1](g)
    np.testing.assert_allclose(grad, rope.rotate(g, tables[0], -tables[1]), atol=1e-5)
