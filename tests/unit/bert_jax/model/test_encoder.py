"""The Flax BERT: shapes, masking, attention paths, dropout, precision, remat, sharding, sizes."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from bert_jax.model import encoder as M
from configs import bert_base, bert_large, default, mini, tiny

# configs/tiny.py's model with a 101-word vocabulary and 64 positions.
TINY = dataclasses.replace(
    M.BertConfig.from_config_dict(tiny.get_config().model),
    vocab_size=101,
    max_position_embeddings=64,
)
B, L, P = 3, 16, 5


def make_batch(seed=0, batch=B, length=L, predictions=P, vocab=TINY.vocab_size):
    """Right-padded random batch; the last row is all padding, as an eval batch's filler is."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(4, length + 1, size=batch)
    lengths[0], lengths[-1] = length, 0
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.int32)
    ids = rng.integers(5, vocab, size=(batch, length)).astype(np.int32) * mask
    segments = ((np.arange(length)[None, :] >= lengths[:, None] // 2) * mask).astype(np.int32)
    positions = np.sort(rng.integers(1, max(lengths.max(), 2), size=(batch, predictions)), axis=1)
    return ids, mask, segments, positions.astype(np.int32)


@pytest.fixture(scope="module")
def model():
    return M.BertForPreTraining(TINY, rngs=nnx.Rngs(0))


@pytest.fixture(scope="module")
def forward():
    """One jitted forward shared by the tests: (model, batch, dropout key) -> logits."""

    @nnx.jit
    def f(m, ids, mask, seg, pos, key=None):
        return m(ids, mask, seg, pos, dropout_rng=key)

    return f


def with_config(model, **changes):
    """The same parameters under another config (dtype, attention path, remat)."""
    other = M.BertForPreTraining(dataclasses.replace(TINY, **changes), rngs=nnx.Rngs(1))
    nnx.update(other, nnx.state(model, nnx.Param))
    return other


@pytest.mark.parametrize("module", [tiny, mini, bert_base, bert_large, default])
def test_every_config_file_builds_a_bert_config(module):
    model = module.get_config().model
    model.vocab_size = model.vocab_size or 30522  # 0: the data's (data_facts.resolve)
    cfg = M.BertConfig.from_config_dict(model)
    assert cfg.layer_norm_eps == 1e-12 and cfg.dtype == "float32"
    assert cfg.hidden_size % cfg.num_attention_heads == 0


def test_config_errors_name_the_field():
    cd = tiny.get_config().model.to_dict()
    with pytest.raises(ValueError, match=r"unknown config.model fields.*hidden_sise"):
        M.BertConfig.from_config_dict({**cd, "hidden_sise": 3})
    with pytest.raises(ValueError, match=r"lacks the fields.*vocab_size"):
        M.BertConfig.from_config_dict({k: v for k, v in cd.items() if k != "vocab_size"})
    with pytest.raises(ValueError, match="multiple of num_attention_heads"):
        dataclasses.replace(TINY, num_attention_heads=3)
    with pytest.raises(ValueError, match="dtype must be one of"):
        dataclasses.replace(TINY, dtype="float16")


def test_output_shapes_and_dtypes(model, forward):
    ids, mask, seg, pos = make_batch()
    mlm, nsp = forward(model, ids, mask, seg, pos)
    assert mlm.shape == (B, P, TINY.vocab_size) and mlm.dtype == jnp.float32
    assert nsp.shape == (B, 2) and nsp.dtype == jnp.float32
    assert np.isfinite(mlm).all() and np.isfinite(nsp).all()  # including the all-padding row
    seq, pooled = nnx.jit(lambda m, *a: m(*a))(model.bert, ids, mask, seg)
    assert seq.shape == (B, L, TINY.hidden_size) and pooled.shape == (B, TINY.hidden_size)


def test_padding_tokens_do_not_change_real_outputs(model, forward):
    ids, mask, seg, pos = make_batch()
    other_ids = np.where(mask == 1, ids, 7)  # different ids under the padding only
    a, _ = forward(model, ids, mask, seg, pos)
    b, _ = forward(model, other_ids, mask, seg, pos)
    real = np.take_along_axis(mask, pos, axis=1).astype(bool)
    np.testing.assert_allclose(np.asarray(a)[real], np.asarray(b)[real], atol=1e-6)


def test_mlm_logits_are_the_gathered_positions(model, forward):
    ids, mask, seg, _ = make_batch()
    every = np.broadcast_to(np.arange(L, dtype=np.int32), (B, L))
    full, _ = forward(model, ids, mask, seg, every)
    pos = np.array([[3, 0, 9, 9, 15]] * B, np.int32)
    some, _ = forward(model, ids, mask, seg, pos)
    np.testing.assert_allclose(some, np.asarray(full)[np.arange(B)[:, None], pos], atol=1e-5)


def test_splash_attention_in_the_model_on_a_mesh():
    """attention_impl='splash' inside the model on a data x tensor mesh (the kernel under
    shard_map on each device's rows and heads): the forward equals the XLA path's at every real
    position."""
    from bert_jax.model import sharding

    cfg = dataclasses.replace(TINY, max_position_embeddings=128, num_attention_heads=2)
    model = M.BertForPreTraining(cfg, rngs=nnx.Rngs(0))
    ids, mask, seg, pos = make_batch(batch=4, length=128, vocab=cfg.vocab_size)
    mesh = sharding.make_mesh(4, 1, 2)
    rules = sharding.normalize_rules(default.get_config().mesh.rules)
    out = {}
    for impl in ("xla", "splash"):
        m = M.BertForPreTraining(dataclasses.replace(cfg, attention_impl=impl), rngs=nnx.Rngs(1))
        nnx.update(m, nnx.state(model, nnx.Param))
        with sharding.activate(mesh, rules):
            out[impl] = nnx.jit(lambda m, *b: m(*b))(m, ids, mask, seg, pos)
    # Padding queries read the padding keys in the kernel (segment 0) and the real ones in XLA's:
    # compare the predictions at real positions (the only ones a loss weighs).
    real = np.take_along_axis(mask, pos, axis=1).astype(bool)
    np.testing.assert_allclose(out["splash"][0][real], out["xla"][0][real], atol=1e-4)
    np.testing.assert_allclose(out["splash"][1], out["xla"][1], atol=1e-4)


def test_model_attention_paths_agree(model, forward):
    batch = make_batch()
    base, _ = forward(model, *batch)
    for impl in ("xla", "einsum"):
        out, _ = forward(with_config(model, attention_impl=impl), *batch)
        np.testing.assert_allclose(out, base, atol=1e-5, err_msg=impl)


def test_dropout_only_with_a_key(model, forward):
    batch = make_batch()
    a, _ = forward(model, *batch)
    b, _ = forward(model, *batch)
    np.testing.assert_array_equal(a, b)
    d1, _ = forward(model, *batch, jax.random.key(1))
    d2, _ = forward(model, *batch, jax.random.key(2))
    d1_again, _ = forward(model, *batch, jax.random.key(1))
    assert not np.allclose(d1, a) and not np.allclose(d1, d2)
    np.testing.assert_array_equal(d1, d1_again)
    no_rates = with_config(model, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    z, _ = forward(no_rates, *batch, jax.random.key(1))
    np.testing.assert_allclose(z, a, atol=1e-5)


def test_bfloat16_compute_keeps_float32_params(model, forward):
    batch = make_batch()
    ref, ref_nsp = forward(model, *batch)
    half = with_config(model, dtype="bfloat16")
    dtypes = {x.dtype for x in jax.tree.leaves(nnx.state(half, nnx.Param))}
    assert dtypes == {jnp.dtype(jnp.float32)}
    out, nsp = forward(half, *batch)
    # MLM logits in the computation dtype (losses.cross_entropy takes them to float32), NSP's
    # two per example in float32.
    assert out.dtype == jnp.bfloat16 and nsp.dtype == jnp.float32
    out = out.astype(jnp.float32)
    scale = float(np.abs(ref).max())
    assert float(np.abs(out - ref).max()) < 0.05 * scale
    np.testing.assert_allclose(nsp, ref_nsp, atol=0.05 * float(np.abs(ref_nsp).max()) + 1e-3)


def test_remat_gives_the_same_gradients(model):
    batch = make_batch()

    def grads(m):
        def loss(m):
            mlm, nsp = m(*batch, dropout_rng=jax.random.key(3))
            return jnp.mean(mlm**2) + jnp.mean(nsp**2)

        return nnx.jit(nnx.grad(loss))(m)

    g1 = jax.tree.leaves(grads(model))
    g2 = jax.tree.leaves(grads(with_config(model, remat=True)))
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(a, b, atol=1e-6)


def _packed_inputs(batch):
    """The batch's rows as packed rows of two examples each (first and second half)."""
    mask = batch[1]
    half = L // 2
    example = np.where(np.arange(L) < half, 1, 2)[None, :] * mask
    position = np.where(np.arange(L) < half, np.arange(L), np.arange(L) - half)[None, :]
    cls = np.tile(np.array([[0, half]], np.int32), (B, 1))
    return dict(
        example_ids=jnp.asarray(example, jnp.int32),
        position_ids=jnp.asarray(np.tile(position, (B, 1)), jnp.int32),
        cls_positions=jnp.asarray(cls),
    )


# Every pair of (dtype, remat, packed) values in 4 runs (an orthogonal array), not all 8: each
# run is two compiles.
@pytest.mark.parametrize(
    "dtype, remat, packed",
    [
        ("float32", False, False),
        ("float32", True, True),
        ("bfloat16", False, True),
        ("bfloat16", True, False),
    ],
)
def test_scanned_layers_give_the_unrolled_loss_and_gradients(model, remat, packed, dtype):
    """scan_layers runs the same layers with the same dropout keys: loss and gradients equal to
    the unrolled stack (to float rounding), with dropout, remat, packed rows and bfloat16."""
    batch = make_batch()
    extra = _packed_inputs(batch) if packed else {}
    layers = dataclasses.replace(TINY, num_hidden_layers=3, dtype=dtype, remat=remat)
    unrolled = M.BertForPreTraining(layers, rngs=nnx.Rngs(0))

    def value_and_grads(m):
        def loss(m):
            mlm, nsp = m(*batch, **extra, dropout_rng=jax.random.key(3))
            return jnp.mean(mlm.astype(jnp.float32) ** 2) + jnp.mean(nsp**2)

        return nnx.jit(nnx.value_and_grad(loss))(m)

    scanned = M.BertForPreTraining(dataclasses.replace(layers, scan_layers=True), rngs=nnx.Rngs(1))
    nnx.update(scanned, nnx.state(unrolled, nnx.Param))
    (l1, g1), (l2, g2) = value_and_grads(unrolled), value_and_grads(scanned)
    tol = 1e-5 if dtype == "float32" else 2e-2
    np.testing.assert_allclose(l2, l1, rtol=tol)
    for (path, a), b in zip(
        jax.tree_util.tree_flatten_with_path(nnx.state(g1, nnx.Param))[0],
        jax.tree.leaves(nnx.state(g2, nnx.Param)),
    ):
        scale = float(np.abs(a).max()) + 1e-6
        np.testing.assert_allclose(b, a, atol=tol * scale, err_msg=jax.tree_util.keystr(path))


def test_bad_inputs_get_clear_errors(model):
    ids, mask, seg, pos = make_batch()
    with pytest.raises(ValueError, match="must all be \\[batch, length\\]"):
        model(ids, mask[:, :-1], seg, pos)
    with pytest.raises(ValueError, match="masked_lm_positions must be \\[batch, predictions\\]"):
        model(ids, mask, seg, pos[0])
    long = np.ones((1, TINY.max_position_embeddings + 1), np.int32)
    with pytest.raises(ValueError, match="exceeds max_position_embeddings"):
        model(long, long, long * 0, pos[:1])


def test_every_param_has_logical_axes_and_the_decay_rule_holds(model):
    specs = nnx.to_flat_state(nnx.get_partition_spec(nnx.state(model, nnx.Param)))
    values = dict(nnx.to_flat_state(nnx.state(model, nnx.Param)))
    assert len(specs) == 5 + TINY.num_hidden_layers * 16 + 2 + 5 + 2
    for path, spec in specs:
        value = values[path].get_value()
        names = tuple(spec.get_value())
        assert len(names) == value.ndim, path
        assert set(names) <= set(M.LOGICAL_AXIS_NAMES) | {None}, path
        # The weight-decay rule: matrices end in kernel/embedding, vectors in bias/scale.
        assert (path[-1] in ("kernel", "embedding")) == (value.ndim == 2), path
        assert path[-1] in ("kernel", "embedding", "bias", "scale"), path


def test_sharded_forward_matches_single_device(model, forward):
    from bert_jax.model import sharding

    batch = make_batch(batch=8)
    ref, ref_nsp = forward(model, *batch)
    mesh = sharding.make_mesh(data=2, fsdp=2, tensor=2)
    rules = tuple(default.get_config().mesh.rules)  # the shipped rules
    shardings = sharding.param_shardings(nnx.state(model, nnx.Param), mesh, rules)
    placed = M.BertForPreTraining(TINY, rngs=nnx.Rngs(1))
    state = nnx.state(placed, nnx.Param)
    nnx.replace_by_pure_dict(
        state, jax.device_put(nnx.to_pure_dict(nnx.state(model, nnx.Param)), shardings)
    )
    nnx.update(placed, state)
    with jax.set_mesh(mesh), nnx.logical_axis_rules(rules):
        f = nnx.jit(lambda m, *a: m(*a))
        assert "sharding_constraint" in f.lower(placed, *batch).as_text()
        out, nsp = f(placed, *batch)
    assert out.sharding.spec[0] == ("data", "fsdp")
    np.testing.assert_allclose(out, ref, atol=1e-5)
    np.testing.assert_allclose(nsp, ref_nsp, atol=1e-5)


@pytest.mark.parametrize("module,approx", [(bert_base, 110e6), (bert_large, 340e6)])
def test_published_sizes_match_transformers(module, approx):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    model = module.get_config().model
    model.vocab_size = 30522  # the published models': bert-base-uncased's vocabulary
    cfg = M.BertConfig.from_config_dict(model)
    ours = M.count_params(nnx.eval_shape(lambda: M.BertForPreTraining(cfg, rngs=nnx.Rngs(0))))
    hf_cfg = transformers.BertConfig(**{k: getattr(cfg, k) for k in M.SHAPE_FIELDS})
    with torch.device("meta"):
        theirs = sum(p.numel() for p in transformers.BertForPreTraining(hf_cfg).parameters())
    assert ours == theirs
    assert abs(ours - approx) < 0.05 * approx


def test_tied_lookup_gradient_is_autodiffs():
    """One table used twice (decoder and lookup, ids repeating as words do): the hand-written
    gradient, the decoder's with the looked-up rows' added in place, equals autodiff's."""
    rng = np.random.default_rng(3)
    table = jnp.asarray(rng.normal(size=(50, 8)), jnp.float32)
    ids = jnp.asarray(
        rng.integers(0, 50, size=(4, 30)), jnp.int32
    )  # repeats within and across rows
    x = jnp.asarray(rng.normal(size=(4, 30, 8)), jnp.float32)

    def loss(table, tied):
        decoder, rows = M.tied_lookup(table, ids) if tied else (table, jnp.take(table, ids, 0))
        logits = jnp.einsum("blh,vh->blv", jnp.tanh(rows + x), decoder)
        return jnp.sum(jax.nn.log_softmax(logits) ** 2)

    ours, ref = (jax.grad(loss)(table, tied) for tied in (True, False))
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)


def _pallas_kernels(jaxpr, found):
    """The names of the Pallas kernels `jaxpr` calls, nested jaxprs (scan, remat, shard_map,
    custom VJPs) included."""
    from jax.extend import core as jcore

    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            found.append(str(eqn.params["name"]))
        for value in eqn.params.values():
            for sub in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(sub, jcore.ClosedJaxpr):
                    _pallas_kernels(sub.jaxpr, found)
                elif isinstance(sub, jcore.Jaxpr):
                    _pallas_kernels(sub, found)
    return found


def test_scanned_layers_keep_cudnn_attention_and_recompute_splash():
    """The scanned layers' checkpoint policy: the gradient of a splash stack calls the kernel's
    forward twice (recomputed in the backward pass: its statistics cost more to keep), and
    cuDNN's forward primitive, which a CPU cannot trace, is the one the policy keeps (a JAX
    that renames it fails here rather than silently recomputing)."""
    from jax._src.cudnn import fused_attention_stablehlo as cudnn_attention

    from bert_jax.model import layer_stack

    kept = cudnn_attention._dot_product_attention_fwd_p_wrapper
    assert layer_stack._keep_for_backward(kept)
    cfg = dataclasses.replace(
        TINY,
        max_position_embeddings=128,
        attention_impl="splash",
        scan_layers=True,
        num_hidden_layers=3,
        attention_probs_dropout_prob=0.0,
    )
    graphdef, params = nnx.split(M.BertForPreTraining(cfg, rngs=nnx.Rngs(0)))
    ids, mask, seg, pos = make_batch(batch=2, length=128, vocab=cfg.vocab_size)

    def loss(params):
        mlm, _ = nnx.merge(graphdef, params)(ids, mask, seg, pos, dropout_rng=jax.random.key(0))
        return jnp.mean(mlm.astype(jnp.float32) ** 2)

    kernels = _pallas_kernels(jax.make_jaxpr(jax.grad(loss))(params).jaxpr, [])
    forward = [k for k in kernels if "_fwd" in k]
    assert len(forward) == 2 and len(kernels) == 4, kernels


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("shape", ["bert", "modernbert"])
def test_a_scanned_layer_keeps_the_named_activations_and_recomputes_the_rest(shape, dtype, capsys):
    """The scanned layers' checkpoint policy keeps what layers.KEPT_FOR_BACKWARD names (the
    attention probabilities in the computation's dtype, the context, the attention and
    feed-forward outputs, the feed-forward's hidden activation) and no other matmul's output:
    the query/key/value projection and the float32 attention logits are recomputed
    (docs/scaling.md has the bytes). float32 runs the matmuls as XLA's dot_general, as a TPU
    does (bfloat16 on a CPU takes mixed_matmul's own product)."""
    from bert_jax.model import layer_stack, layers

    changes = dict(dtype=dtype, attention_probs_dropout_prob=0.1)
    if shape == "modernbert":
        changes.update(mlp_type="geglu", norm_position="pre")
    cfg = dataclasses.replace(TINY, **changes)
    graphdef, state = nnx.split(layers.EncoderLayer(cfg, 1, rngs=nnx.Rngs(0)))
    _, mask, _, _ = make_batch()
    x = np.random.default_rng(0).normal(size=(B, L, cfg.hidden_size))
    x = jnp.asarray(x, cfg.compute_dtype)

    def loss(state, x):
        out = nnx.merge(graphdef, state)(x, mask, jax.random.key(0))
        return jnp.sum(out.astype(jnp.float32) ** 2)

    jax.ad_checkpoint.print_saved_residuals(
        jax.checkpoint(loss, policy=layer_stack._keep_for_backward), state, x
    )
    saved = [s for s in capsys.readouterr().out.splitlines() if "from the argument" not in s]
    named = {n for n in layers.KEPT_FOR_BACKWARD for s in saved if f"named '{n}'" in s}
    assert named == set(layers.KEPT_FOR_BACKWARD), saved
    assert not [s for s in saved if "dot_general" in s], saved
    square = f"[{B},{cfg.num_attention_heads},{L},{L}]"
    short = {"float32": "f32", "bfloat16": "bf16"}[dtype]
    assert [s[: s.index("[")] for s in saved if square in s] == [short], saved
