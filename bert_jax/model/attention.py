"""Self-attention kernels and masks: the fused `jax.nn.dot_product_attention` paths (XLA,
cuDNN), the Pallas splash kernel on TPU, and the explicit einsum path (the one with dropout).

q, k, v are [batch, length, heads, kv]. A query reads every real key of its row (unpacked rows,
right-padded: `input_mask` [batch, length], 1 on real tokens) or, in packed rows, only the keys
of its own example (`example_ids`: 1, 2, ... per example, 0 on padding; a block-diagonal mask).
Padding queries read the padding keys, so no mask row is empty; their outputs are never used. A
sliding-window layer (`window`: how far a query reads on either side) adds the band
|query - key| <= window. cuDNN gets unpacked, unwindowed rows as per-row lengths and any other
as a boolean mask; splash gets segment ids and runs under jax.shard_map over the mesh's batch
(and heads) axes, in Pallas' interpret mode off TPU.

docs/model.md, "The model" (`attention_impl`, why packed rows reach cuDNN as a mask).
"""

import functools
import math

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import PartitionSpec as P

from bert_jax import cli
from bert_jax.model.dropout import dropout, keep_mask


def attention_mask(
    input_mask: jax.Array, example_ids: jax.Array | None = None, window: int | None = None
) -> jax.Array:
    """Boolean mask, True where a query may read a key: [batch, 1 (heads), 1 or length (query),
    length (key)]. The key padding from `input_mask`, or the block diagonal of `example_ids`;
    with a `window`, only keys at most that many positions away (then [batch, 1, length,
    length])."""
    if example_ids is None:
        mask = input_mask[:, None, None, :].astype(bool)
    else:
        mask = (example_ids[:, :, None] == example_ids[:, None, :])[:, None]
    if window is None:
        return mask
    positions = jnp.arange(input_mask.shape[-1])
    band = jnp.abs(positions[:, None] - positions[None, :]) <= window  # [query, key]
    return mask & band[None, None]


def einsum_attention(
    q,
    k,
    v,
    input_mask,
    *,
    example_ids=None,
    window=None,
    dropout_rate: float = 0.0,
    dropout_rng=None,
):
    """Plain softmax(QK^T/sqrt(d)) V under `attention_mask`, with dropout on the probabilities."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32) * scale
    mask = attention_mask(input_mask, example_ids, window)
    logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
    probs = softmax_dropout(logits, dropout_rng, dropout_rate, v.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", probs, v)


# The name under which softmax_dropout's probabilities are kept for the backward pass (the
# scanned layers' checkpoint policy keeps it, bert_jax.model.layer_stack).
PROBS = "attention_probs"


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def softmax_dropout(logits, rng, rate: float, dtype):
    """dropout(softmax(logits)) over the last axis, in float32, cast to `dtype` (the
    computation's) for the product with the values. The backward pass keeps only the
    probabilities in `dtype`, not autodiff's float32 [batch, heads, length, length] (the largest
    array a layer saves), and recomputes the dropout mask from its hash. Exact in float32; in
    bfloat16 the probabilities are rounded before the dropout's scaling (the product with the
    values reads them rounded anyway), and the softmax's backward reads them so.
    `rng` None or `rate` 0: no dropout."""
    return _softmax_dropout_fwd(logits, rng, rate, dtype)[0]


def _softmax_dropout_fwd(logits, rng, rate, dtype):
    kept = checkpoint_name(jax.nn.softmax(logits, axis=-1).astype(dtype), PROBS)
    # Dropped out from the kept probabilities, so that a backward pass that keeps only them
    # recomputes this output from them, not the softmax from the logits.
    return dropout(kept.astype(jnp.float32), rate, rng).astype(dtype), (kept, rng)


def _softmax_dropout_bwd(rate, dtype, residuals, g):
    probs, rng = residuals
    g = g.astype(jnp.float32)
    if rng is not None and rate > 0:
        keep, scale = keep_mask(rng, g.shape, rate)
        g = jnp.where(keep, g * scale, 0)
    probs = probs.astype(jnp.float32)
    return probs * (g - jnp.sum(g * probs, axis=-1, keepdims=True)), None


softmax_dropout.defvjp(_softmax_dropout_fwd, _softmax_dropout_bwd)


def fused_attention(
    q, k, v, input_mask, *, example_ids=None, window=None, implementation: str = "xla"
):
    """jax.nn.dot_product_attention under `attention_mask` ('xla' or 'cudnn'; see the module
    docstring for what the cuDNN path is given)."""
    if implementation == "cudnn" and platform() in ("cpu", "tpu"):  # JAX: "cuDNN is not detected"
        raise cli.UserError(
            f"model.attention_impl='cudnn' runs on a GPU only, and this step is compiled for "
            f"{platform()}: use 'auto' (cuDNN on a GPU, XLA's or the splash kernel elsewhere)"
        )
    if implementation == "cudnn" and example_ids is None and window is None:
        # cuDNN takes the padding as per-row key lengths (right padding). An all-padding row gets
        # length 1 rather than 0 so it stays finite (its loss weight is zero anyway).
        lengths = jnp.maximum(jnp.sum(input_mask, axis=-1), 1).astype(jnp.int32)
        return jax.nn.dot_product_attention(
            q, k, v, key_value_seq_lengths=lengths, implementation="cudnn"
        )
    mask = attention_mask(input_mask, example_ids, window)
    return jax.nn.dot_product_attention(q, k, v, mask=mask, implementation=implementation)


def platform() -> str:
    """The platform the computation is for: the mesh in effect's devices ('tpu' when compiling
    for a TPU slice from a CPU host, as the planner does), else JAX's default backend."""
    mesh = jax.sharding.get_abstract_mesh()
    device = None if mesh.empty else mesh.abstract_device
    return device.platform if device is not None else jax.default_backend()


def cudnn_usable(dtype, head_dim: int, length: int) -> bool:
    """Whether cuDNN's fused kernel takes these shapes (bfloat16 on a GPU; JAX checks the rest
    and raises when forced with attention_impl='cudnn')."""
    return (
        platform() == "gpu"
        and dtype == jnp.bfloat16
        and head_dim % 8 == 0
        and head_dim <= 128
        and length % 2 == 0
    )


# Splash attention's tiles: the sequence is cut into blocks of this many queries and keys
# (MaxText's default is 512; BERT's 128-token rows are one block).
_SPLASH_BLOCK = 512


# 'auto' takes the splash kernel for rows at least this long. A 128-token row is one tile, and
# the kernel's fixed costs (float32 residuals per query row, layout copies) outweigh the [L, L]
# probabilities it keeps out of HBM; at 512 tokens it is far ahead (docs/scaling.md).
SPLASH_MIN_LENGTH = 512


def splash_usable(length: int) -> bool:
    """Whether 'auto' runs the splash kernel: on a TPU, for whole 128-row tiles, in rows of at
    least SPLASH_MIN_LENGTH tokens (attention_impl='splash' forces it at any multiple of 128)."""
    return platform() == "tpu" and length % 128 == 0 and length >= SPLASH_MIN_LENGTH


def _splash_kernel(heads: int, length: int, interpret: bool, window: int | None = None):
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    # One tile size for the queries and keys of the forward pass and of the backward's dkv and
    # dq kernels (the *_compute sizes default to their block_kv*).
    names = ("block_q", "block_kv", "block_q_dkv", "block_kv_dkv", "block_q_dq", "block_kv_dq")
    sizes = sk.BlockSizes(**dict.fromkeys(names, math.gcd(length, _SPLASH_BLOCK)))
    if window is None:
        one = sm.FullMask((length, length))
    else:  # the keys at most `window` away on either side; key blocks outside are skipped
        one = sm.LocalMask((length, length), window_size=(window, window), offset=0)
    mask = sm.MultiHeadMask([one] * heads)
    # Made inside the trace that uses it (its mask's block tables become constants of that
    # program): not cached across traces, where it would hold another trace's values, nor made
    # eagerly, which would place them on the mesh's devices (a planner's TPU chips, described
    # but not present).
    return sk.make_splash_mha(
        mask, block_sizes=sizes, head_shards=1, q_seq_shards=1, interpret=interpret
    )


def splash_length_problem(length: int) -> str | None:
    """The splash kernel's tiles are whole 128-row blocks (its ValueError traceback otherwise)."""
    if length % 128:
        return (
            f"model.attention_impl='splash' needs data.max_seq_length a multiple of 128, not "
            f"{length}: choose 'auto' (splash where it fits) or a multiple of 128"
        )
    return None


def splash_attention(
    q, k, v, input_mask, *, example_ids=None, window=None, batch_axes=None, head_axes=None
):
    """softmax(QK^T/sqrt(d)) V by the Pallas splash kernel, the keys a query may read given as
    segment ids (module docstring) and, with a `window`, a local mask. q, k, v [batch, length,
    heads, kv]; `batch_axes`/`head_axes`: the mesh axes the batch and the heads are split over
    (the kernel runs on each device's share; None: not split)."""
    length, head_dim = q.shape[1], q.shape[3]
    if problem := splash_length_problem(length):  # e.g. a manifest's length, known only here
        raise cli.UserError(problem)
    segments = (input_mask if example_ids is None else example_ids).astype(jnp.int32)
    scale = 1.0 / math.sqrt(head_dim)
    interpret = platform() != "tpu"

    def local(q, k, v, segments):
        from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk

        kernel = _splash_kernel(q.shape[2], length, interpret, window)
        t = lambda x: jnp.swapaxes(x, 1, 2)  # [batch, length, heads, kv] <-> [batch, heads, ...]
        ids = sk.SegmentIds(q=segments, kv=segments)
        out = jax.vmap(kernel)(t(q * jnp.asarray(scale, q.dtype)), t(k), t(v), segment_ids=ids)
        return t(out)

    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        return local(q, k, v, segments)
    qkv = P(batch_axes, None, head_axes, None)
    return jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(qkv, qkv, qkv, P(batch_axes, None)),
        out_specs=qkv,
        check_vma=False,
    )(q, k, v, segments)
