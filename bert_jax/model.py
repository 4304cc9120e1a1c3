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

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from flax.core import spmd as flax_spmd

from bert_jax import attention, cli, sharding
from bert_jax.dropout import dropout as _dropout

LOGICAL_AXIS_NAMES = ("vocab", "embed", "heads", "mlp", "norm", "batch", "length", "kv")
_ACT_EMBED = ("batch", "length", "embed")  # [batch, length, hidden]
_ACT_HEADS = ("batch", "length", "heads", "kv")  # [batch, length, heads, head_dim]
_ACT_MLP = ("batch", "length", "mlp")  # [batch, length, intermediate]

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}

# jax.named_scope names of the model's parts: they reach the compiled HLO's op_name metadata (the
# backward pass keeps them under transpose(jvp(...))), where the planner's byte attribution
# (bert_jax.plan) reads which part of the model an op belongs to.
SCOPES = ("embeddings", "attention", "ffn", "norm_residual", "mlm_head", "nsp_head")
_ATTENTION_IMPLS = ("auto", "xla", "cudnn", "splash", "einsum")


# The fields that fix the parameters' shapes (transformers' BertConfig has the same names).
SHAPE_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
)


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """Model hyper-parameters; field names are those of configs/default.py's `config.model`."""

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    hidden_dropout_prob: float
    attention_probs_dropout_prob: float
    max_position_embeddings: int
    type_vocab_size: int
    initializer_range: float
    layer_norm_eps: float = 1e-12
    dtype: str = "float32"  # computation dtype; parameters are always float32
    remat: bool = False  # jax.checkpoint each encoder layer (nnx.remat)
    # Run the encoder layers as one lax.scan over their stacked parameters (`run_layers`): the
    # compiler sees one layer instead of num_hidden_layers. The parameters keep their per-layer
    # layout (checkpoints, exports and fine-tuning see no difference).
    scan_layers: bool = False
    # "auto", "xla", "cudnn", "splash" or "einsum" (see the module docstring)
    attention_impl: str = "auto"

    def __post_init__(self):
        problems = []
        for name in SHAPE_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                problems.append(f"{name} must be a positive integer, got {value!r}")
        if not problems and self.hidden_size % self.num_attention_heads:
            problems.append(
                f"hidden_size ({self.hidden_size}) must be a multiple of "
                f"num_attention_heads ({self.num_attention_heads})"
            )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not 0.0 <= getattr(self, name) < 1.0:
                problems.append(f"{name} must be in [0, 1), got {getattr(self, name)!r}")
        if self.dtype not in _DTYPES:
            problems.append(f"dtype must be one of {sorted(_DTYPES)}, got {self.dtype!r}")
        if self.attention_impl not in _ATTENTION_IMPLS:
            problems.append(
                f"attention_impl must be one of {_ATTENTION_IMPLS}, got {self.attention_impl!r}"
            )
        if problems:
            raise cli.UserError("invalid model config: " + "; ".join(problems))

    @classmethod
    def from_config_dict(cls, cd: Mapping[str, Any]) -> BertConfig:
        """ConfigDict (or dict) `config.model` -> BertConfig; unknown or missing fields are
        errors."""
        values = dict(cd.to_dict() if hasattr(cd, "to_dict") else cd)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(fields))
        if unknown:
            raise cli.UserError(
                f"unknown config.model fields {unknown}; known fields: {sorted(fields)}"
            )
        missing = sorted(
            n for n, f in fields.items() if n not in values and f.default is dataclasses.MISSING
        )
        if missing:
            raise cli.UserError(f"config.model lacks the fields {missing}")
        return cls(**values)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def compute_dtype(self):
        return _DTYPES[self.dtype]


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


def _dense(cfg: BertConfig, d_in: int, d_out: int, axes: tuple, rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(
        d_in,
        d_out,
        dtype=cfg.compute_dtype,
        param_dtype=jnp.float32,
        kernel_init=_truncated_normal(cfg.initializer_range),
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
        h = cfg.hidden_size
        self.query = _dense(cfg, h, h, ("embed", "heads"), rngs)
        self.key = _dense(cfg, h, h, ("embed", "heads"), rngs)
        self.value = _dense(cfg, h, h, ("embed", "heads"), rngs)
        self.output = _dense(cfg, h, h, ("heads", "embed"), rngs)

    def _project_qkv(self, x):
        """The query, key and value projections as one matmul: [batch, length, hidden] -> 3 x same.

        One [hidden, 3*hidden] product uses the matrix units better than three [hidden, hidden]
        ones (measured 1.1x on the whole BERT-Base train step on CPU), and its backward pass sums
        no partial input gradients. The kernels are stacked, not concatenated, so a 'heads'
        (tensor) sharding of each stays local; the parameters keep their own names.
        """
        dtype = self.cfg.compute_dtype
        projections = (self.query, self.key, self.value)
        if not all(type(p) is nnx.Linear for p in projections):
            # Wrapped projections (LoRA adapters in fine-tuning) compute their own outputs.
            return tuple(p(x) for p in projections)
        kernel = jnp.stack([p.kernel[...] for p in projections], axis=1).astype(
            dtype
        )  # [hidden, 3, heads*kv]
        bias = jnp.stack([p.bias[...] for p in projections]).astype(dtype)  # [3, heads*kv]
        qkv = (
            jnp.einsum("blm,mtn->bltn", x.astype(dtype), kernel) + bias
        )  # [batch, length, 3, heads*kv]
        return qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]

    @jax.named_scope("attention")
    def __call__(self, x, input_mask, dropout_rng=None, example_ids=None):
        cfg = self.cfg
        batch, length, _ = x.shape

        def heads(t):  # [batch, length, hidden] -> [batch, length, heads, kv]
            t = t.reshape(batch, length, cfg.num_attention_heads, cfg.head_dim)
            return constrain(t, *_ACT_HEADS)

        q, k, v = (heads(t) for t in self._project_qkv(x))
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
                dropout_rate=cfg.attention_probs_dropout_prob,
                dropout_rng=dropout_rng,
            )
        else:
            ctx = attention.fused_attention(
                q, k, v, input_mask, example_ids=example_ids, implementation=impl
            )
        ctx = constrain(ctx, *_ACT_HEADS)
        return self.output(ctx.reshape(batch, length, cfg.hidden_size))  # [batch, length, hidden]


class EncoderLayer(nnx.Module):
    """Post-LN transformer layer: x = LN(x + Attn(x)); x = LN(x + FFN(x))."""

    def __init__(self, cfg: BertConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        self.attention = SelfAttention(cfg, rngs=rngs)
        self.attention_norm = _layer_norm(cfg, rngs)
        self.intermediate = _dense(
            cfg, cfg.hidden_size, cfg.intermediate_size, ("embed", "mlp"), rngs
        )
        self.output = _dense(cfg, cfg.intermediate_size, cfg.hidden_size, ("mlp", "embed"), rngs)
        self.output_norm = _layer_norm(cfg, rngs)

    def __call__(self, x, input_mask, dropout_rng=None, example_ids=None):
        rate = self.cfg.hidden_dropout_prob
        k_attn, k_attn_out, k_ffn = (
            jax.random.split(dropout_rng, 3) if dropout_rng is not None else (None, None, None)
        )
        attn = self.attention(x, input_mask, k_attn, example_ids)
        with jax.named_scope("norm_residual"):
            x = self.attention_norm(x + _dropout(attn, rate, k_attn_out))
            x = constrain(x, *_ACT_EMBED)
        with jax.named_scope("ffn"):
            h = constrain(_gelu(self.intermediate(x)), *_ACT_MLP)
            h = _dropout(self.output(h), rate, k_ffn)
        with jax.named_scope("norm_residual"):
            x = self.output_norm(x + h)
            return constrain(x, *_ACT_EMBED)


def _run_layer(layer: EncoderLayer, x, input_mask, dropout_rng, example_ids):
    return layer(x, input_mask, dropout_rng, example_ids)


def run_layers(layers, x, input_mask, dropout_rng, example_ids, *, remat: bool, scan: bool):
    """x through `layers` in order; layer i's dropout key is fold_in(dropout_rng, i).

    scan=True: one jax.lax.scan whose body is one layer, over the layers' parameters stacked
    along a new leading axis (MaxText's scan_layers): the compiler sees and optimizes one layer
    instead of num_hidden_layers copies (docs/scaling.md: compile times). The stack is
    built inside the step from the per-layer parameters, so nothing outside sees another layout,
    and the keys are the same fold_in(dropout_rng, i), so the result is the unrolled loop's.
    Layers whose structure differs (none in BERT) run unrolled.
    """
    run = nnx.remat(_run_layer) if remat else _run_layer
    splits = [nnx.split(layer) for layer in layers]
    if not scan or len(layers) < 2 or any(g != splits[0][0] for g, _ in splits[1:]):
        for i, layer in enumerate(layers):
            key = jax.random.fold_in(dropout_rng, i) if dropout_rng is not None else None
            x = run(layer, x, input_mask, key, example_ids)
        return x
    graphdef = splits[0][0]
    stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *(state for _, state in splits))

    def body(x, xs):
        state, i = xs
        key = jax.random.fold_in(dropout_rng, i) if dropout_rng is not None else None
        return _run_layer(nnx.merge(graphdef, state), x, input_mask, key, example_ids), None

    # What the backward pass keeps of each layer: with remat nothing (recomputed), else the
    # matmuls' outputs, the cheap elementwise work (dropout masks from their hash, GELU,
    # softmax, norms) recomputed. Without a policy a scan saves every intermediate of its body
    # into stacked [layers, ...] buffers (dropout masks included), what an unrolled stack lets
    # XLA fuse away (docs/scaling.md has the bytes).
    policy = None if remat else jax.checkpoint_policies.checkpoint_dots
    body = jax.checkpoint(body, policy=policy)
    x, _ = jax.lax.scan(body, x, (stacked, jnp.arange(len(layers))))
    return x


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
    def __init__(self, cfg: BertConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        self.word_embeddings = _embed(cfg, cfg.vocab_size, ("vocab", "embed"), rngs)
        self.position_embeddings = _embed(cfg, cfg.max_position_embeddings, (None, "embed"), rngs)
        self.token_type_embeddings = _embed(cfg, cfg.type_vocab_size, (None, "embed"), rngs)
        self.layer_norm = _layer_norm(cfg, rngs)

    @jax.named_scope("embeddings")
    def __call__(self, input_ids, segment_ids, dropout_rng=None, position_ids=None, word_rows=None):
        """`word_rows`: input_ids' rows of the word-embedding table, already looked up
        (BertForPreTraining's tied_lookup); None: looked up here."""
        if position_ids is None:
            position_ids = jnp.arange(input_ids.shape[1])[None, :]  # [1, length]
        if word_rows is None:
            word_rows = _lookup(self.word_embeddings, input_ids, "vocab")
        x = (
            word_rows.astype(self.word_embeddings.dtype)
            + _lookup(self.position_embeddings, position_ids)
            + _lookup(self.token_type_embeddings, segment_ids)
        )
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
    """Embeddings, encoder and pooler; returns (sequence_output [B,L,H], pooled [B,H])."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.embeddings = Embeddings(config, rngs=rngs)
        self.layers = nnx.List(
            [EncoderLayer(config, rngs=rngs) for _ in range(config.num_hidden_layers)]
        )
        self.pooler = _dense(config, config.hidden_size, config.hidden_size, ("embed", None), rngs)

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
            remat=self.config.remat,
            scan=self.config.scan_layers,
        )
        if cls_positions is None:
            first = x[:, 0]  # [batch, hidden]
        else:
            first = gather(x, cls_positions)  # [batch, examples, hidden]
        return x, jnp.tanh(self.pooler(first))


def gather(sequence: jax.Array, positions: jax.Array) -> jax.Array:
    """sequence [B, L, H] at positions [B, K] -> [B, K, H]. Out-of-range positions are clipped
    (records and packed rows always hold positions < L)."""
    return jnp.take_along_axis(sequence, positions[..., None], axis=1, mode="clip")


class MaskedLMHead(nnx.Module):
    """Dense + GELU + LayerNorm, then the tied word-embedding matrix plus a bias."""

    def __init__(self, cfg: BertConfig, *, rngs: nnx.Rngs):
        self.transform = _dense(cfg, cfg.hidden_size, cfg.hidden_size, ("embed", None), rngs)
        self.transform_norm = _layer_norm(cfg, rngs)
        self.bias = nnx.Param(jnp.zeros((cfg.vocab_size,), jnp.float32), **_axes("vocab"))

    @jax.named_scope("mlm_head")
    def __call__(self, x, word_embeddings: jax.Array):
        x = self.transform_norm(_gelu(self.transform(x)))  # [batch, predictions, hidden]
        logits = jnp.einsum(
            "bph,vh->bpv", x, word_embeddings.astype(x.dtype), preferred_element_type=jnp.float32
        )
        # The bias is added to the float32 accumulator, then rounded once to the computation
        # dtype (XLA fuses both into the matmul's output).
        logits = (logits + self.bias[...]).astype(x.dtype)
        return constrain(logits, "batch", None, "vocab")


class BertForPreTraining(nnx.Module):
    """BertModel (`.bert`) plus the MLM head (`.mlm`) and the NSP head (`.nsp`)."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.bert = BertModel(config, rngs=rngs)
        self.mlm = MaskedLMHead(config, rngs=rngs)
        self.nsp = _dense(config, config.hidden_size, 2, ("embed", None), rngs)

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
