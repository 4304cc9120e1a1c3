"""BERT in Flax NNX: embeddings, the post-LN encoder, the pooler, and the MLM and NSP heads.

Numerics follow google-research/bert and Hugging Face: exact (erf) GELU, LayerNorm eps 1e-12 with
the two-pass variance, the MLM decoder tied to the word embeddings, masked positions gathered
before the vocabulary projection. Parameters are always float32; `BertConfig.dtype` only sets the
computation dtype ("bfloat16" for mixed precision). NSP logits come back float32; MLM logits in the
computation dtype (a bfloat16 [batch, predictions, vocabulary] is half the HBM traffic of a
float32 one; losses.cross_entropy takes its log-sum-exp in float32).

Dropout is active iff a `dropout_rng` key is passed; the modules hold no RNG state, so a
checkpoint of `nnx.state(model)` is the parameters and nothing else.

Logical axis names; bert_jax.sharding maps them to mesh axes (a name it does not map is not
split; a mesh axis already used by an earlier dimension of the same array is skipped, so the
activations' 'embed' stays whole when 'batch' takes the 'fsdp' axis that weights' 'embed' uses):

    parameters   'vocab'  vocabulary rows of the word embeddings and the MLM output bias
                 'embed'  the hidden size (model width) wherever a weight touches it
                 'heads'  the fused heads*head_dim output of query/key/value, input of the
                          attention output projection (shard it only by a divisor of num_heads)
                 'mlp'    the feed-forward width (intermediate_size)
                 'norm'   LayerNorm scale and bias
    activations  'batch', 'length', 'embed', 'heads', 'kv' (head_dim), 'mlp', 'vocab'

Parameters carry the names as `out_sharding` metadata (read them with `nnx.get_partition_spec`;
variables are never sharded eagerly, the trainer places them). Activations get
`with_sharding_constraint` when the code runs under `jax.set_mesh(mesh)` and
`nnx.logical_axis_rules(rules)`; otherwise the constraints are no-ops.

Weight-decay rule: decay a parameter iff the last element of its path is 'kernel' or
'embedding'; every LayerNorm scale and every bias (path ends in 'scale' or 'bias') is excluded,
as in the original optimizer.

Attention (bert_jax/attention.py): `jax.nn.dot_product_attention` with the padding mask, or with
the block-diagonal mask of packed rows (several examples per row, `example_ids`; see
bert_jax.packing). `attention_impl='auto'` uses the Pallas splash-attention kernel on TPU (the
platform of the mesh's devices: also when compiling for a slice from a CPU host) for lengths of
whole 128-token tiles, cuDNN's fused kernel on GPU when the computation is bfloat16 and the
shapes allow it (it then relies on the padding being on the right, as in every BERT record), XLA
otherwise. The fused kernels have no dropout, so while
attention-probability dropout is active (training with attention_probs_dropout_prob > 0) the
explicit einsum attention with dropout runs instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from flax.core import spmd as flax_spmd

from bert_jax import attention, cli, rope, sharding
from bert_jax.dropout import dropout as _dropout
from bert_jax.layer_stack import run_layers
from bert_jax.model_config import SHAPE_FIELDS, BertConfig

__all__ = ["SHAPE_FIELDS", "BertConfig", "BertForPreTraining", "BertModel", "run_layers"]

LOGICAL_AXIS_NAMES = ("vocab", "embed", "heads", "mlp", "norm", "batch", "length", "kv")
_ACT_EMBED = ("batch", "length", "embed")  # [batch, length, hidden]
_ACT_HEADS = ("batch", "length", "heads", "kv")  # [batch, length, heads, head_dim]
_ACT_MLP = ("batch", "length", "mlp")  # [batch, length, intermediate]

# jax.named_scope names of the model's parts: they reach the compiled HLO's op_name metadata (the
# backward pass keeps them under transpose(jvp(...))), where the planner's byte attribution
# (bert_jax.plan) reads which part of the model an op belongs to.
SCOPES = ("embeddings", "attention", "ffn", "norm_residual", "mlm_head", "nsp_head")


# --- Sharding annotations --------------------------------------------------------------------


def _axes(*names: str | None) -> dict[str, Any]:
    """Variable metadata naming the logical axes of a parameter."""
    # Never shard eagerly: flax would map names with its own rules and need a mesh even to build
    # a model for a test or an import; bert_jax.sharding places the parameters instead.
    return {"out_sharding": names, "eager_sharding": False}


def _mesh_spec(names, shape):
    """The PartitionSpec of an activation by logical names, or None without a mesh and rules."""
    mesh = jax.sharding.get_abstract_mesh()
    rules = flax_spmd.get_logical_axis_rules()
    if mesh.empty or not rules:
        return None
    return sharding.logical_to_mesh_spec(names, shape, mesh, rules)


def constrain(x: jax.Array, *names: str | None) -> jax.Array:
    """with_sharding_constraint by logical names; a no-op without a mesh and logical rules."""
    spec = _mesh_spec(names, x.shape)
    return x if spec is None else jax.lax.with_sharding_constraint(x, spec)


# --- Building blocks -------------------------------------------------------------------------


def _truncated_normal(stddev: float):
    # As the original BERT: N(0, stddev) truncated at two standard deviations.
    def init(key, shape, dtype=jnp.float32):
        return (jax.random.truncated_normal(key, -2.0, 2.0, shape, jnp.float32) * stddev).astype(
            dtype
        )

    return init


def _dense(
    cfg: BertConfig,
    d_in: int,
    d_out: int,
    axes: tuple,
    rngs: nnx.Rngs,
    *,
    bias: bool = True,
    output: bool = False,
) -> nnx.Linear:
    """A Dense layer; `output`: a projection back onto the residual stream (initialized smaller
    with config.scale_init_by_depth)."""
    stddev = cfg.initializer_range
    if output and cfg.scale_init_by_depth:
        stddev /= math.sqrt(2.0 * cfg.num_hidden_layers)
    return nnx.Linear(
        d_in,
        d_out,
        use_bias=bias,
        dtype=cfg.compute_dtype,
        param_dtype=jnp.float32,
        kernel_init=_truncated_normal(stddev),
        kernel_metadata=_axes(*axes),
        bias_metadata=_axes(axes[1]),
        rngs=rngs,
    )


def _layer_norm(cfg: BertConfig, rngs: nnx.Rngs) -> nnx.LayerNorm:
    # Two-pass variance, as HF and the original compute it: E[x^2]-E[x]^2 cancels badly when a
    # feature vector's mean is large next to its spread.
    return nnx.LayerNorm(
        cfg.hidden_size,
        epsilon=cfg.layer_norm_eps,
        dtype=cfg.compute_dtype,
        param_dtype=jnp.float32,
        use_bias=cfg.norm_bias,
        use_fast_variance=False,
        scale_metadata=_axes("norm"),
        bias_metadata=_axes("norm"),
        rngs=rngs,
    )


def _embed(cfg: BertConfig, num: int, axes: tuple, rngs: nnx.Rngs) -> nnx.Embed:
    return nnx.Embed(
        num,
        cfg.hidden_size,
        dtype=cfg.compute_dtype,
        param_dtype=jnp.float32,
        embedding_init=_truncated_normal(cfg.initializer_range),
        embedding_metadata=_axes(*axes),
        rngs=rngs,
    )


def _gelu(x: jax.Array) -> jax.Array:
    return jax.nn.gelu(x, approximate=False)


# --- Modules ---------------------------------------------------------------------------------


class SelfAttention(nnx.Module):
    def __init__(self, cfg: BertConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        h, b = cfg.hidden_size, cfg.attention_bias
        self.query = _dense(cfg, h, h, ("embed", "heads"), rngs, bias=b)
        self.key = _dense(cfg, h, h, ("embed", "heads"), rngs, bias=b)
        self.value = _dense(cfg, h, h, ("embed", "heads"), rngs, bias=b)
        self.output = _dense(cfg, h, h, ("heads", "embed"), rngs, bias=b, output=True)

    def _project_qkv(self, x):
        """The query, key and value projections as one matmul (_stacked_dense): [batch, length,
        hidden] -> 3 x same."""
        dtype = self.cfg.compute_dtype
        projections = (self.query, self.key, self.value)
        if not all(type(p) is nnx.Linear for p in projections):
            # Wrapped projections (LoRA adapters in fine-tuning) compute their own outputs.
            return tuple(p(x) for p in projections)
        qkv = _stacked_dense(x, projections, dtype)  # [batch, length, 3, heads*kv]
        return qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]

    @jax.named_scope("attention")
    def __call__(self, x, input_mask, dropout_rng=None, example_ids=None, rotary=None, window=None):
        """`rotary`: the (cos, sin) tables of this layer's RoPE (bert_jax.rope), None for
        absolute positions; `window`: how far a query reads on either side, None: all keys."""
        cfg = self.cfg
        batch, length, _ = x.shape

        def heads(t):  # [batch, length, hidden] -> [batch, length, heads, kv]
            t = t.reshape(batch, length, cfg.num_attention_heads, cfg.head_dim)
            return constrain(t, *_ACT_HEADS)

        q, k, v = (heads(t) for t in self._project_qkv(x))
        if rotary is not None:
            q, k = rope.rotate(q, *rotary), rope.rotate(k, *rotary)
        impl = cfg.attention_impl
        if dropout_rng is not None and cfg.attention_probs_dropout_prob > 0:
            impl = "einsum"  # the fused kernels have no attention dropout
        elif impl == "auto":
            if attention.splash_usable(length):
                impl = "splash"
            elif attention.cudnn_usable(cfg.compute_dtype, cfg.head_dim, length):
                impl = "cudnn"
            else:
                impl = "xla"
        if impl == "splash":
            spec = _mesh_spec(_ACT_HEADS, q.shape)
            ctx = attention.splash_attention(
                q,
                k,
                v,
                input_mask,
                example_ids=example_ids,
                window=window,
                batch_axes=spec[0] if spec else None,
                head_axes=spec[2] if spec else None,
            )
        elif impl == "einsum":
            ctx = attention.einsum_attention(
                q,
                k,
                v,
                input_mask,
                example_ids=example_ids,
                window=window,
                dropout_rate=cfg.attention_probs_dropout_prob,
                dropout_rng=dropout_rng,
            )
        else:
            ctx = attention.fused_attention(
                q, k, v, input_mask, example_ids=example_ids, window=window, implementation=impl
            )
        ctx = constrain(ctx, *_ACT_HEADS)
        return self.output(ctx.reshape(batch, length, cfg.hidden_size))  # [batch, length, hidden]


class EncoderLayer(nnx.Module):
    """A transformer layer, post-norm (BERT) or pre-norm (ModernBERT) by config.norm_position:

        post: x = LN(x + Attn(x));  x = LN(x + FFN(x))
        pre:  x = x + Attn(LN(x));  x = x + FFN(LN(x))   (layer 0: no LN before Attn; the
                                                          embedding norm precedes it)

    FFN is output(gelu(intermediate(x))), or with mlp_type='geglu' output(gelu(intermediate(x))
    * gate(x)) (ModernBERT's Wi holds intermediate and gate side by side). Hidden dropout is on
    the attention and FFN outputs in both orders. `window` (static: alike layers share one
    graphdef, bert_jax.layer_stack) is None on global layers, else how far a query reads.
    """

    def __init__(self, cfg: BertConfig, index: int = 0, *, rngs: nnx.Rngs):
        self.cfg = cfg
        self.window = cfg.attention_window(index)
        h, m, b = cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias
        self.attention = SelfAttention(cfg, rngs=rngs)
        first_pre_norm = cfg.norm_position == "pre" and index == 0
        self.attention_norm = None if first_pre_norm else _layer_norm(cfg, rngs)
        self.intermediate = _dense(cfg, h, m, ("embed", "mlp"), rngs, bias=b)
        self.gate = (
            _dense(cfg, h, m, ("embed", "mlp"), rngs, bias=b) if cfg.mlp_type == "geglu" else None
        )
        self.output = _dense(cfg, m, h, ("mlp", "embed"), rngs, bias=b, output=True)
        self.output_norm = _layer_norm(cfg, rngs)

    def _ffn(self, x):
        if self.gate is None:
            return _gelu(self.intermediate(x))
        denses = (self.intermediate, self.gate)
        if all(type(d) is nnx.Linear for d in denses):
            both = _stacked_dense(x, denses, self.cfg.compute_dtype)  # [batch, length, 2, mlp]
            return _gelu(both[:, :, 0]) * both[:, :, 1]
        return _gelu(self.intermediate(x)) * self.gate(x)  # wrapped (LoRA) denses

    def __call__(self, x, input_mask, dropout_rng=None, example_ids=None, rope_tables=None):
        """`rope_tables`: {'global': (cos, sin), 'local': (cos, sin)} (bert_jax.rope.tables) for
        RoPE, None for absolute positions."""
        rate = self.cfg.hidden_dropout_prob
        k_attn, k_attn_out, k_ffn = (
            jax.random.split(dropout_rng, 3) if dropout_rng is not None else (None, None, None)
        )
        rotary = None
        if rope_tables is not None:
            rotary = rope_tables["global" if self.window is None else "local"]
        if self.cfg.norm_position == "pre":
            return self._pre_norm(
                x, input_mask, example_ids, rotary, rate, k_attn, k_attn_out, k_ffn
            )
        attn = self.attention(x, input_mask, k_attn, example_ids, rotary, self.window)
        with jax.named_scope("norm_residual"):
            x = self.attention_norm(x + _dropout(attn, rate, k_attn_out))
            x = constrain(x, *_ACT_EMBED)
        with jax.named_scope("ffn"):
            h = constrain(self._ffn(x), *_ACT_MLP)
            h = _dropout(self.output(h), rate, k_ffn)
        with jax.named_scope("norm_residual"):
            x = self.output_norm(x + h)
            return constrain(x, *_ACT_EMBED)

    def _pre_norm(self, x, input_mask, example_ids, rotary, rate, k_attn, k_attn_out, k_ffn):
        with jax.named_scope("norm_residual"):
            h = x if self.attention_norm is None else self.attention_norm(x)
        attn = self.attention(h, input_mask, k_attn, example_ids, rotary, self.window)
        with jax.named_scope("norm_residual"):
            x = constrain(x + _dropout(attn, rate, k_attn_out), *_ACT_EMBED)
            h = self.output_norm(x)
        with jax.named_scope("ffn"):
            h = constrain(self._ffn(h), *_ACT_MLP)
            h = _dropout(self.output(h), rate, k_ffn)
        with jax.named_scope("norm_residual"):
            return constrain(x + h, *_ACT_EMBED)


def _stacked_dense(x, denses, dtype):
    """Several Dense layers of one input as one matmul: [batch, length, in] -> [batch, length,
    len(denses), out].

    One [in, n*out] product uses the matrix units better than n [in, out] ones (measured 1.1x on
    the whole BERT-Base train step on CPU for query/key/value), and its backward pass sums no
    partial input gradients. The kernels are stacked, not concatenated, so a 'heads' or 'mlp'
    (tensor) sharding of each stays local; the parameters keep their own names.
    """
    kernel = jnp.stack([d.kernel[...] for d in denses], axis=1).astype(dtype)  # [in, n, out]
    y = jnp.einsum("blm,mtn->bltn", x.astype(dtype), kernel)
    if denses[0].bias is None:
        return y
    return y + jnp.stack([d.bias[...] for d in denses]).astype(dtype)  # [n, out]


def _lookup(embed: nnx.Embed, ids: jax.Array, rows: str | None = None) -> jax.Array:
    """embed(ids) with the table's 'embed' dimension gathered first (`_whole_rows`)."""
    return jnp.take(_whole_rows(embed, rows), ids, axis=0).astype(embed.dtype)


def _whole_rows(embed: nnx.Embed, rows: str | None) -> jax.Array:
    """The table with its 'embed' dimension gathered (FSDP: weights are gathered where they are
    used). Looked up in an fsdp-split table, the rows come out split along 'embed', and in the
    backward pass XLA then cannot move the batch-split gradient there except by replicating it
    ("involuntary full rematerialization"); from a whole table, the gradient is scattered
    locally and reduce-scattered onto the table's sharding like any other weight's."""
    return constrain(embed.embedding[...], rows, None)


@jax.custom_vjp
def tied_lookup(table: jax.Array, ids: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(table, table[ids]): the word-embedding table as the MLM decoder uses it, and the rows the
    input looks up, with one gradient for both uses.

    Autodiff would give the lookup's gradient as a scatter into a zero table of its own (a
    30,522-row float32 pass to write the zeros, another to scatter, a third to add it to the
    decoder's), each summed over the data-parallel devices by a collective of its own. Here the
    looked-up rows' gradients are added into the decoder's gradient in place: one dense table,
    one reduction. The arithmetic is autodiff's but for the order of the additions."""
    return table, jnp.take(table, ids, axis=0)


def _tied_lookup_fwd(table, ids):
    return tied_lookup(table, ids), ids


def _tied_lookup_bwd(ids, cotangents):
    ct_table, ct_rows = cotangents
    return ct_table.at[ids].add(ct_rows.astype(ct_table.dtype)), None


tied_lookup.defvjp(_tied_lookup_fwd, _tied_lookup_bwd)


class Embeddings(nnx.Module):
    """Word + position (absolute only) + token type (type_vocab_size > 0) embeddings, then
    LayerNorm and dropout; ModernBERT's is the word embeddings and the norm."""

    def __init__(self, cfg: BertConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        self.word_embeddings = _embed(cfg, cfg.vocab_size, ("vocab", "embed"), rngs)
        self.position_embeddings = (
            _embed(cfg, cfg.max_position_embeddings, (None, "embed"), rngs)
            if cfg.position_embedding_type == "absolute"
            else None
        )
        self.token_type_embeddings = (
            _embed(cfg, cfg.type_vocab_size, (None, "embed"), rngs) if cfg.type_vocab_size else None
        )
        self.layer_norm = _layer_norm(cfg, rngs)

    @jax.named_scope("embeddings")
    def __call__(self, input_ids, segment_ids, dropout_rng=None, position_ids=None, word_rows=None):
        """`word_rows`: input_ids' rows of the word-embedding table, already looked up
        (BertForPreTraining's tied_lookup); None: looked up here."""
        if position_ids is None:
            position_ids = jnp.arange(input_ids.shape[1])[None, :]  # [1, length]
        if word_rows is None:
            word_rows = _lookup(self.word_embeddings, input_ids, "vocab")
        x = word_rows.astype(self.word_embeddings.dtype)
        if self.position_embeddings is not None:
            x = x + _lookup(self.position_embeddings, position_ids)
        if self.token_type_embeddings is not None:
            x = x + _lookup(self.token_type_embeddings, segment_ids)
        x = _dropout(self.layer_norm(x), self.cfg.hidden_dropout_prob, dropout_rng)
        return constrain(x, *_ACT_EMBED)


def _check_inputs(
    cfg: BertConfig, input_ids, input_mask, segment_ids, example_ids, position_ids, cls_positions
):
    shapes = {
        "input_ids": np.shape(input_ids),
        "input_mask": np.shape(input_mask),
        "segment_ids": np.shape(segment_ids),
    }
    if (example_ids is None) != (position_ids is None):
        raise ValueError(
            "packed rows need both example_ids and position_ids (bert_jax.packing makes them)"
        )
    if example_ids is not None:
        shapes.update(example_ids=np.shape(example_ids), position_ids=np.shape(position_ids))
    if len(shapes["input_ids"]) != 2 or len(set(shapes.values())) != 1:
        raise ValueError(f"{', '.join(shapes)} must all be [batch, length]; got {shapes}")
    if cls_positions is not None and (
        np.ndim(cls_positions) != 2 or np.shape(cls_positions)[0] != shapes["input_ids"][0]
    ):
        raise ValueError(
            f"cls_positions must be [batch, examples per row], got {np.shape(cls_positions)} "
            f"for input_ids {shapes['input_ids']}"
        )
    if shapes["input_ids"][1] > cfg.max_position_embeddings:
        raise cli.UserError(
            f"sequence length {shapes['input_ids'][1]} exceeds max_position_embeddings "
            f"{cfg.max_position_embeddings}; shorten the inputs (max_seq_length)"
        )


class BertModel(nnx.Module):
    """Embeddings, encoder (pre-norm: and a final norm) and pooler; returns (sequence_output
    [B,L,H], pooled [B,H]). Without the pooler (config.pooler=False, ModernBERT) `pooled` is the
    first token's final state itself."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.embeddings = Embeddings(config, rngs=rngs)
        self.layers = nnx.List(
            [EncoderLayer(config, i, rngs=rngs) for i in range(config.num_hidden_layers)]
        )
        self.final_norm = _layer_norm(config, rngs) if config.norm_position == "pre" else None
        h = config.hidden_size
        self.pooler = _dense(config, h, h, ("embed", None), rngs) if config.pooler else None

    def _rope_tables(self, length: int, position_ids) -> dict | None:
        """RoPE's (cos, sin) per layer kind, computed once for all layers; None: absolute."""
        cfg = self.config
        if cfg.position_embedding_type != "rope":
            return None
        if position_ids is None:
            position_ids = jnp.arange(length)[None, :]  # [1, length]
        tables = {"global": rope.tables(position_ids, cfg.global_rope_theta, cfg.head_dim)}
        if cfg.local_attention:
            tables["local"] = rope.tables(position_ids, cfg.local_rope_theta, cfg.head_dim)
        return tables

    def __call__(
        self,
        input_ids,
        input_mask,
        segment_ids,
        *,
        example_ids=None,
        position_ids=None,
        cls_positions=None,
        dropout_rng=None,
        word_rows=None,
    ):
        """(sequence [B, L, H], pooled [B, H]: the pooler on position 0's state).

        Packed rows (bert_jax.packing) pass `example_ids` [B, L] (1, 2, ... for the examples of
        a row, 0 on padding: attention stays within an example) and `position_ids` [B, L]
        (restarting at 0 for each example), and, where the pooled output is wanted,
        `cls_positions` [B, E] (each example's [CLS] position; empty slots any position < L):
        pooled is then [B, E, H], one per example. Without packing inputs the computation is
        exactly the unpacked one. `word_rows`: the word embeddings of input_ids, already looked
        up (BertForPreTraining ties them to its decoder).
        """
        _check_inputs(
            self.config,
            input_ids,
            input_mask,
            segment_ids,
            example_ids,
            position_ids,
            cls_positions,
        )
        k_embed, k_layers = (
            jax.random.split(dropout_rng) if dropout_rng is not None else (None, None)
        )
        x = self.embeddings(input_ids, segment_ids, k_embed, position_ids, word_rows)
        x = run_layers(
            self.layers,
            x,
            input_mask,
            k_layers,
            example_ids,
            self._rope_tables(input_ids.shape[1], position_ids),
            remat=self.config.remat,
            scan=self.config.scan_layers,
        )
        if self.final_norm is not None:
            with jax.named_scope("norm_residual"):
                x = constrain(self.final_norm(x), *_ACT_EMBED)
        if cls_positions is None:
            first = x[:, 0]  # [batch, hidden]
        else:
            first = gather(x, cls_positions)  # [batch, examples, hidden]
        return x, first if self.pooler is None else jnp.tanh(self.pooler(first))


def gather(sequence: jax.Array, positions: jax.Array) -> jax.Array:
    """sequence [B, L, H] at positions [B, K] -> [B, K, H]. Out-of-range positions are clipped
    (records and packed rows always hold positions < L)."""
    return jnp.take_along_axis(sequence, positions[..., None], axis=1, mode="clip")


class MaskedLMHead(nnx.Module):
    """Dense + GELU + LayerNorm, then the tied word-embedding matrix plus a bias (each bias as
    config.head_bias, norm_bias and decoder_bias say)."""

    def __init__(self, cfg: BertConfig, *, rngs: nnx.Rngs):
        h = cfg.hidden_size
        self.transform = _dense(cfg, h, h, ("embed", None), rngs, bias=cfg.head_bias, output=True)
        self.transform_norm = _layer_norm(cfg, rngs)
        self.bias = (
            nnx.Param(jnp.zeros((cfg.vocab_size,), jnp.float32), **_axes("vocab"))
            if cfg.decoder_bias
            else None
        )

    @jax.named_scope("mlm_head")
    def __call__(self, x, word_embeddings: jax.Array):
        x = self.transform_norm(_gelu(self.transform(x)))  # [batch, predictions, hidden]
        logits = jnp.einsum(
            "bph,vh->bpv", x, word_embeddings.astype(x.dtype), preferred_element_type=jnp.float32
        )
        # The bias is added to the float32 accumulator, then rounded once to the computation
        # dtype (XLA fuses both into the matmul's output).
        if self.bias is not None:
            logits = logits + self.bias[...]
        logits = logits.astype(x.dtype)
        return constrain(logits, "batch", None, "vocab")


class BertForPreTraining(nnx.Module):
    """BertModel (`.bert`) plus the MLM head (`.mlm`) and the NSP head (`.nsp`; None with
    config.nsp_head=False, whose NSP logits are then zeros: MLM-only training weighs them 0)."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.bert = BertModel(config, rngs=rngs)
        self.mlm = MaskedLMHead(config, rngs=rngs)
        self.nsp = (
            _dense(config, config.hidden_size, 2, ("embed", None), rngs)
            if config.nsp_head
            else None
        )

    def __call__(
        self,
        input_ids,
        input_mask,
        segment_ids,
        masked_lm_positions,
        *,
        example_ids=None,
        position_ids=None,
        cls_positions=None,
        dropout_rng=None,
    ):
        """(MLM logits [B, P, vocab], NSP logits [B, 2]), float32.

        Packed rows: `example_ids`, `position_ids` and `cls_positions` as BertModel takes them
        (all three), `masked_lm_positions` index the row (already shifted by each example's
        offset); the NSP logits are then [B, E, 2], one per example slot.
        """
        if (example_ids is None) != (cls_positions is None):
            raise ValueError(
                "packed pre-training rows need example_ids, position_ids and cls_positions "
                "(the NSP head reads each example's [CLS])"
            )
        if (
            np.ndim(masked_lm_positions) != 2
            or np.shape(masked_lm_positions)[0] != np.shape(input_ids)[0]
        ):
            raise ValueError(
                f"masked_lm_positions must be [batch, predictions], got shape "
                f"{np.shape(masked_lm_positions)} for input_ids {np.shape(input_ids)}"
            )
        with jax.named_scope("embeddings"):
            table = _whole_rows(self.bert.embeddings.word_embeddings, "vocab")
            decoder_table, word_rows = tied_lookup(table, input_ids)
        sequence, pooled = self.bert(
            input_ids,
            input_mask,
            segment_ids,
            example_ids=example_ids,
            position_ids=position_ids,
            cls_positions=cls_positions,
            dropout_rng=dropout_rng,
            word_rows=word_rows,
        )
        # Gather before projecting: the vocabulary matmul then costs P, not L, rows per example.
        with jax.named_scope("mlm_head"):
            gathered = gather(sequence, masked_lm_positions)
        mlm_logits = self.mlm(gathered, decoder_table)
        if self.nsp is None:
            return mlm_logits, jnp.zeros((*pooled.shape[:-1], 2), jnp.float32)
        with jax.named_scope("nsp_head"):
            nsp_logits = self.nsp(pooled).astype(jnp.float32)
        return mlm_logits, nsp_logits


def count_params(model: nnx.Module) -> int:
    """Number of parameters (tied weights once); works on abstract models from nnx.eval_shape."""
    params = nnx.state(model, nnx.Param)
    return int(sum(math.prod(x.shape) for x in jax.tree.leaves(params)))


def model_from_params(config: BertConfig, params: Mapping) -> BertForPreTraining:
    """A BertForPreTraining holding `params`, the pure dict of nnx.state(model, nnx.Param).

    What checkpointing.restore_params returns; no random initialization is spent on it.
    """
    graphdef, state = nnx.split(
        nnx.eval_shape(lambda: BertForPreTraining(config, rngs=nnx.Rngs(0)))
    )
    expected = nnx.to_pure_dict(state)  # abstract: shapes only
    want = {
        jax.tree_util.keystr(p): x.shape for p, x in jax.tree_util.tree_leaves_with_path(expected)
    }
    got = {
        jax.tree_util.keystr(p): np.shape(x) for p, x in jax.tree_util.tree_leaves_with_path(params)
    }
    if want != got:
        diff = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
        raise cli.UserError(
            f"the parameters do not fit this config at {diff[:4]} "
            f"({len(diff)} in all): expected {[want.get(k) for k in diff[:4]]}, "
            f"got {[got.get(k) for k in diff[:4]]}"
        )
    nnx.replace_by_pure_dict(state, params)
    return nnx.merge(graphdef, state)
