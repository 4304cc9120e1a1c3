"""The encoder's building blocks: sharding annotations, Dense/LayerNorm/Embed initialized as
BERT's, self-attention, the encoder layer (BERT or ModernBERT) and the MLM head; encoder.py puts
them together (docs/model.md, "The model")."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from flax.core import spmd as flax_spmd
from jax.ad_checkpoint import checkpoint_name

from bert_jax.model import attention, mixed_matmul, rope, sharding
from bert_jax.model.bert_config import BertConfig
from bert_jax.model.dropout import dropout as _dropout

ACT_EMBED = ("batch", "length", "embed")  # [batch, length, hidden]
ACT_HEADS = ("batch", "length", "heads", "kv")  # [batch, length, heads, head_dim]
ACT_MLP = ("batch", "length", "mlp")  # [batch, length, intermediate]


def axis_names(*names: str | None) -> dict[str, Any]:
    """Variable metadata naming the logical axes of a parameter."""
    # Not eagerly: flax would need a mesh even to build a model; sharding.py places parameters.
    return {"out_sharding": names, "eager_sharding": False}


def mesh_spec(names, shape):
    """The PartitionSpec of an activation by logical names, or None without a mesh and rules."""
    mesh = jax.sharding.get_abstract_mesh()
    rules = flax_spmd.get_logical_axis_rules()
    if mesh.empty or not rules:
        return None
    return sharding.logical_to_mesh_spec(names, shape, mesh, rules)


def constrain(x: jax.Array, *names: str | None) -> jax.Array:
    """with_sharding_constraint by logical names; a no-op without a mesh and logical rules."""
    spec = mesh_spec(names, x.shape)
    return x if spec is None else jax.lax.with_sharding_constraint(x, spec)


def truncated_normal(stddev: float):
    # As the original BERT: N(0, stddev) truncated at two standard deviations.
    def init(key, shape, dtype=jnp.float32):
        return (jax.random.truncated_normal(key, -2.0, 2.0, shape, jnp.float32) * stddev).astype(
            dtype
        )

    return init


def dense(
    cfg: BertConfig,
    d_in: int,
    d_out: int,
    axes: tuple,
    rngs: nnx.Rngs,
    *,
    bias: bool = True,
    output: bool = False,
) -> nnx.Linear:
    """A Dense layer; `output`: onto the residual stream (config.scale_init_by_depth applies)."""
    stddev = cfg.initializer_range
    if output and cfg.scale_init_by_depth:
        stddev /= math.sqrt(2.0 * cfg.num_hidden_layers)
    return nnx.Linear(
        d_in,
        d_out,
        use_bias=bias,
        dtype=cfg.compute_dtype,
        param_dtype=jnp.float32,
        kernel_init=truncated_normal(stddev),
        kernel_metadata=axis_names(*axes),
        bias_metadata=axis_names(axes[1]),
        dot_general=mixed_matmul.dot_general,  # bfloat16 at the CPU's bf16 matmul speed
        rngs=rngs,
    )


def layer_norm(cfg: BertConfig, rngs: nnx.Rngs) -> nnx.LayerNorm:
    # Two-pass variance, as HF and the original: E[x^2]-E[x]^2 cancels badly at a large mean.
    return nnx.LayerNorm(
        cfg.hidden_size,
        epsilon=cfg.layer_norm_eps,
        dtype=cfg.compute_dtype,
        param_dtype=jnp.float32,
        use_bias=cfg.norm_bias,
        use_fast_variance=False,
        scale_metadata=axis_names("norm"),
        bias_metadata=axis_names("norm"),
        rngs=rngs,
    )


def embed(cfg: BertConfig, num: int, axes: tuple, rngs: nnx.Rngs) -> nnx.Embed:
    return nnx.Embed(
        num,
        cfg.hidden_size,
        dtype=cfg.compute_dtype,
        param_dtype=jnp.float32,
        embedding_init=truncated_normal(cfg.initializer_range),
        embedding_metadata=axis_names(*axes),
        rngs=rngs,
    )


def gelu(x: jax.Array) -> jax.Array:
    # Exact GELU as HF writes it; jax.nn.gelu's erfc form is slower on XLA:CPU (performance.md).
    return (0.5 * x * (1.0 + jax.lax.erf(x * jnp.asarray(0.5**0.5, x.dtype)))).astype(x.dtype)


# What a scanned layer keeps for its backward pass; the rest is recomputed (docs/scaling.md).
CONTEXT, ATTENTION_OUT, FFN_HIDDEN, FFN_OUT = "context", "attention_out", "ffn_hidden", "ffn_out"
KEPT_FOR_BACKWARD = (attention.PROBS, CONTEXT, ATTENTION_OUT, FFN_HIDDEN, FFN_OUT)


class SelfAttention(nnx.Module):
    def __init__(self, cfg: BertConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        h, b = cfg.hidden_size, cfg.attention_bias
        self.query = dense(cfg, h, h, ("embed", "heads"), rngs, bias=b)
        self.key = dense(cfg, h, h, ("embed", "heads"), rngs, bias=b)
        self.value = dense(cfg, h, h, ("embed", "heads"), rngs, bias=b)
        self.output = dense(cfg, h, h, ("heads", "embed"), rngs, bias=b, output=True)

    def _project_qkv(self, x):
        """The query, key and value projections as one matmul (stacked_dense)."""
        dtype = self.cfg.compute_dtype
        projections = (self.query, self.key, self.value)
        if not all(type(p) is nnx.Linear for p in projections):
            # Wrapped projections (LoRA adapters in fine-tuning) compute their own outputs.
            return tuple(p(x) for p in projections)
        return tuple(stacked_dense(x, projections, dtype))  # 3 x [batch, length, heads*kv]

    @jax.named_scope("attention")
    def __call__(self, x, input_mask, dropout_rng=None, example_ids=None, rotary=None, window=None):
        """`rotary`: RoPE's (cos, sin) or None; `window`: keys read on each side (None: all)."""
        cfg = self.cfg
        batch, length, _ = x.shape

        def heads(t):  # [batch, length, hidden] -> [batch, length, heads, kv]
            t = t.reshape(batch, length, cfg.num_attention_heads, cfg.head_dim)
            return constrain(t, *ACT_HEADS)

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
        rows = {"example_ids": example_ids, "window": window}  # which keys each query reads
        if impl == "splash":
            spec = mesh_spec(ACT_HEADS, q.shape) or (None,) * 4
            ctx = attention.splash_attention(
                q, k, v, input_mask, **rows, batch_axes=spec[0], head_axes=spec[2]
            )
        elif impl == "einsum":
            rate = cfg.attention_probs_dropout_prob
            ctx = attention.einsum_attention(
                q, k, v, input_mask, **rows, dropout_rate=rate, dropout_rng=dropout_rng
            )
        else:
            ctx = attention.fused_attention(q, k, v, input_mask, **rows, implementation=impl)
        ctx = checkpoint_name(constrain(ctx, *ACT_HEADS), CONTEXT)
        out = self.output(ctx.reshape(batch, length, cfg.hidden_size))  # [batch, length, hidden]
        return checkpoint_name(out, ATTENTION_OUT)


class EncoderLayer(nnx.Module):
    """A transformer layer, by config.norm_position:

        post: x = LN(x + Attn(x));  x = LN(x + FFN(x))
        pre:  x = x + Attn(LN(x));  x = x + FFN(LN(x))   (layer 0: no LN before Attn)

    FFN is output(gelu(intermediate(x)) [* gate(x) for geglu]); `window` is static (one graphdef
    for alike layers)."""

    def __init__(self, cfg: BertConfig, index: int = 0, *, rngs: nnx.Rngs):
        self.cfg = cfg
        self.window = cfg.attention_window(index)
        h, m, b = cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias
        self.attention = SelfAttention(cfg, rngs=rngs)
        first_pre_norm = cfg.norm_position == "pre" and index == 0
        self.attention_norm = None if first_pre_norm else layer_norm(cfg, rngs)
        self.intermediate = dense(cfg, h, m, ("embed", "mlp"), rngs, bias=b)
        self.gate = (
            dense(cfg, h, m, ("embed", "mlp"), rngs, bias=b) if cfg.mlp_type == "geglu" else None
        )
        self.output = dense(cfg, m, h, ("mlp", "embed"), rngs, bias=b, output=True)
        self.output_norm = layer_norm(cfg, rngs)

    def _ffn(self, x):
        if self.gate is None:
            h = gelu(checkpoint_name(self.intermediate(x), FFN_HIDDEN))
        elif all(type(d) is nnx.Linear for d in (self.intermediate, self.gate)):
            both = stacked_dense(x, (self.intermediate, self.gate), self.cfg.compute_dtype)
            both = checkpoint_name(both, FFN_HIDDEN)  # [2, batch, length, mlp]
            h = gelu(both[0]) * both[1]
        else:  # wrapped (LoRA) denses
            h = gelu(checkpoint_name(self.intermediate(x), FFN_HIDDEN))
            h = h * checkpoint_name(self.gate(x), FFN_HIDDEN)
        h = constrain(h, *ACT_MLP)
        return checkpoint_name(self.output(h), FFN_OUT)

    def __call__(self, x, input_mask, dropout_rng=None, example_ids=None, rope_tables=None):
        """`rope_tables`: rope.tables per layer kind ('global', 'local'), None: absolute."""
        rate = self.cfg.hidden_dropout_prob
        k_attn, k_attn_out, k_ffn = (
            jax.random.split(dropout_rng, 3) if dropout_rng is not None else (None, None, None)
        )
        rotary = None
        if rope_tables is not None:
            rotary = rope_tables["global" if self.window is None else "local"]
        pre = self.cfg.norm_position == "pre"
        with jax.named_scope("norm_residual"):
            h = self.attention_norm(x) if pre and self.attention_norm is not None else x
        attn = self.attention(h, input_mask, k_attn, example_ids, rotary, self.window)
        with jax.named_scope("norm_residual"):
            x = x + _dropout(attn, rate, k_attn_out)
            x = constrain(x if pre else self.attention_norm(x), *ACT_EMBED)
            h = self.output_norm(x) if pre else x
        with jax.named_scope("ffn"):
            h = _dropout(self._ffn(h), rate, k_ffn)
        with jax.named_scope("norm_residual"):
            x = x + h
            return constrain(x if pre else self.output_norm(x), *ACT_EMBED)


class MaskedLMHead(nnx.Module):
    """Dense + GELU + LayerNorm, then the tied word-embedding matrix plus a bias."""

    def __init__(self, cfg: BertConfig, *, rngs: nnx.Rngs):
        h = cfg.hidden_size
        self.transform = dense(cfg, h, h, ("embed", None), rngs, bias=cfg.head_bias, output=True)
        self.transform_norm = layer_norm(cfg, rngs)
        self.bias = (
            nnx.Param(jnp.zeros((cfg.vocab_size,), jnp.float32), **axis_names("vocab"))
            if cfg.decoder_bias
            else None
        )

    @jax.named_scope("mlm_head")
    def __call__(self, x, word_embeddings: jax.Array):
        x = self.transform_norm(gelu(self.transform(x)))  # [batch, predictions, hidden]
        logits = mixed_matmul.einsum("bph,vh->bpv", x, word_embeddings.astype(x.dtype), jnp.float32)
        # Bias added to the float32 accumulator, rounded once (XLA fuses both into the matmul).
        if self.bias is not None:
            logits = logits + self.bias[...]
        logits = logits.astype(x.dtype)
        return constrain(logits, "batch", None, "vocab")


def stacked_dense(x, denses, dtype):
    """Dense layers of one input as one matmul: [batch, length, in] -> [n, batch, length, out]
    (faster: docs/performance.md). Layers first: one's output is a contiguous slice; stacked,
    not concatenated: each kernel's tensor sharding stays local."""
    kernel = jnp.stack([d.kernel[...] for d in denses], axis=1).astype(dtype)  # [in, n, out]
    y = mixed_matmul.einsum("blm,mtn->tbln", x.astype(dtype), kernel)
    if denses[0].bias is None:
        return y
    return y + jnp.stack([d.bias[...] for d in denses])[:, None, None].astype(dtype)
