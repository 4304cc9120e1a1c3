"""Self-attention: fused `jax.nn.dot_product_attention` (XLA, cuDNN), the Pallas splash kernel
(TPU; interpret mode elsewhere) and the einsum path (the one with dropout). q, k, v are [batch,
length, heads, kv]; a query reads the real keys of its row, or in packed rows those of its own
example (`example_ids`; padding queries read the padding, so no mask row is empty), within
`window` on sliding-window layers. docs/model.md, "The model" (`attention_impl`).
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
    """True where a query may read a key: [batch, 1 (heads), 1 or length (query), length (key)]."""
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


# softmax_dropout's probabilities, as the scanned layers' checkpoint policy keeps them.
PROBS = "attention_probs"


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def softmax_dropout(logits, rng, rate: float, dtype):
    """dropout(softmax(logits)) in float32, cast to `dtype`. The backward pass keeps only the
    probabilities in `dtype` (not autodiff's float32 [B, heads, L, L], a layer's largest array)
    and recomputes the dropout mask from its hash (docs/model.md, "The model")."""
    return _softmax_dropout_fwd(logits, rng, rate, dtype)[0]


def _softmax_dropout_fwd(logits, rng, rate, dtype):
    kept = checkpoint_name(jax.nn.softmax(logits, axis=-1).astype(dtype), PROBS)
    # Dropout of the kept probabilities: a recompute from them skips the softmax.
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
    """jax.nn.dot_product_attention ('xla' or 'cudnn') under `attention_mask`."""
    if implementation == "cudnn" and platform() in ("cpu", "tpu"):  # JAX: "cuDNN is not detected"
        raise cli.UserError(
            f"model.attention_impl='cudnn' runs on a GPU only, and this step is compiled for "
            f"{platform()}: use 'auto' (cuDNN on a GPU, XLA's or the splash kernel elsewhere)"
        )
    if implementation == "cudnn" and example_ids is None and window is None:
        # Per-row key lengths (right padding); an all-padding row gets 1, staying finite.
        lengths = jnp.maximum(jnp.sum(input_mask, axis=-1), 1).astype(jnp.int32)
        return jax.nn.dot_product_attention(
            q, k, v, key_value_seq_lengths=lengths, implementation="cudnn"
        )
    mask = attention_mask(input_mask, example_ids, window)
    return jax.nn.dot_product_attention(q, k, v, mask=mask, implementation=implementation)


def platform() -> str:
    """The platform of the mesh in effect (a planner's TPU from a CPU host), else JAX's default."""
    mesh = jax.sharding.get_abstract_mesh()
    device = None if mesh.empty else mesh.abstract_device
    return device.platform if device is not None else jax.default_backend()


def cudnn_usable(dtype, head_dim: int, length: int) -> bool:
    """Whether cuDNN's fused kernel takes these shapes (JAX checks the rest when forced)."""
    return (
        platform() == "gpu"
        and dtype == jnp.bfloat16
        and head_dim % 8 == 0
        and head_dim <= 128
        and length % 2 == 0
    )


_SPLASH_BLOCK = 512  # queries and keys per splash tile, as MaxText's default

# 'auto' takes splash from this length; below, its fixed costs outweigh its gain (docs/scaling.md).
SPLASH_MIN_LENGTH = 512


def splash_usable(length: int) -> bool:
    """Whether 'auto' runs the splash kernel (forced, it runs at any multiple of 128)."""
    return platform() == "tpu" and length % 128 == 0 and length >= SPLASH_MIN_LENGTH


def _splash_kernel(heads: int, length: int, interpret: bool, window: int | None = None):
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    # One tile size for the forward and both backward kernels (*_compute default to block_kv*).
    names = ("block_q", "block_kv", "block_q_dkv", "block_kv_dkv", "block_q_dq", "block_kv_dq")
    sizes = sk.BlockSizes(**dict.fromkeys(names, math.gcd(length, _SPLASH_BLOCK)))
    if window is None:
        one = sm.FullMask((length, length))
    else:  # key blocks outside the window are skipped
        one = sm.LocalMask((length, length), window_size=(window, window), offset=0)
    mask = sm.MultiHeadMask([one] * heads)
    # Made per trace: cached, it would hold another trace's constants; eager, need absent devices.
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
    """Attention by the Pallas splash kernel, per device's share of batch and heads (mesh axes)."""
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
