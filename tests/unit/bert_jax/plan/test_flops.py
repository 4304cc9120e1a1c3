"""Model FLOPs (bert_jax/plan/flops.py) against what the model itself computes: the matmuls in the
jaxpr of a tiny BERT and a tiny ModernBERT forward pass, and the query-key pairs of the model's
own attention masks for sliding windows, with and without a block-sparse kernel's tiles."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from bert_jax.model import attention, encoder
from bert_jax.model.bert_config import BertConfig
from bert_jax.plan import flops

MODERN = {  # the modern block's fields as configs/modernbert_base.py sets them
    "position_embedding_type": "rope",
    "norm_position": "pre",
    "mlp_type": "geglu",
    "attention_bias": False,
    "mlp_bias": False,
    "norm_bias": False,
    "head_bias": False,
    "pooler": False,
    "nsp_head": False,
    "type_vocab_size": 0,
    "local_attention": 8,  # 4 keys either side
    "global_attn_every_n_layers": 3,
}


def _config(**fields) -> BertConfig:
    base = {
        "vocab_size": 96,
        "hidden_size": 32,
        "num_hidden_layers": 4,
        "num_attention_heads": 2,
        "intermediate_size": 48,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "max_position_embeddings": 64,
        "type_vocab_size": 2,
        "initializer_range": 0.02,
        "dtype": "float32",
        "attention_impl": "einsum",  # every matmul explicit, the [L, L] scores included
        "scan_layers": False,
    }
    return BertConfig(**{**base, **fields})


def _matmul_flops(jaxpr) -> int:
    """2 x the multiply-adds of every dot_general in a jaxpr, its sub-jaxprs included."""
    total = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            (contracting, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval.shape
            out = eqn.outvars[0].aval.shape
            total += 2 * math.prod(out) * math.prod(lhs[d] for d in contracting)
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            total += _matmul_flops(sub)
    return total


def _traced_flops(config: BertConfig, length: int, predictions: int) -> int:
    model = encoder.BertForPreTraining(config, rngs=nnx.Rngs(0))
    ids = jnp.ones((1, length), jnp.int32)
    positions = jnp.zeros((1, predictions), jnp.int32)
    jaxpr = jax.make_jaxpr(lambda: model(ids, jnp.ones_like(ids), jnp.zeros_like(ids), positions))
    return _matmul_flops(jaxpr().jaxpr)


@pytest.mark.parametrize("length,predictions", [(32, 5), (48, 7)])
def test_bert_forward_flops_are_the_matmuls_the_model_traces(length, predictions):
    config = _config()
    traced = _traced_flops(config, length, predictions)
    assert flops.model_forward_flops(config, length, predictions) == traced
    # bench/'s spelling of the same count
    assert flops.forward_flops_per_sequence(32, 4, 48, 96, length, predictions) == traced


@pytest.mark.parametrize("length", [32, 40])
def test_modern_block_counts_geglu_no_pooler_and_only_the_windows_band(length):
    """The einsum path scores every pair and masks the band (what the trace shows); the model
    FLOPs count all of a global layer's pairs and only the band of a sliding-window layer."""
    config = _config(**MODERN)
    predictions = 6
    traced = _traced_flops(config, length, predictions)
    windows = [config.attention_window(i) for i in range(config.num_hidden_layers)]
    assert windows == [None, 4, 4, None]  # a global layer every third, the first one global
    every_pair = flops.forward_flops_per_sequence(
        32, 4, 48, 96, length, predictions, glu=True, pooler=False, nsp=False
    )
    assert every_pair == traced
    band = flops.attention_pairs(length, 4)
    assert traced - flops.model_forward_flops(config, length, predictions) == (
        2 * 2 * (length * length - band) * 32 * 2  # two windowed layers' masked-out pairs
    )
    # GeGLU's input projection is twice as wide: 2 * H * I more per token and layer than GELU.
    gelu = flops.forward_flops_per_sequence(
        32, 4, 48, 96, length, predictions, pooler=False, nsp=False
    )
    assert every_pair - gelu == 4 * length * 2 * 32 * 48


@pytest.mark.parametrize("seed", range(6))
def test_attention_pairs_are_the_true_entries_of_the_models_window_mask(seed):
    rng = np.random.default_rng(seed)
    block = int(rng.choice([4, 8, 16]))
    length = block * int(rng.integers(1, 9))
    window = int(rng.integers(0, length + 2))
    mask = np.asarray(
        attention.attention_mask(jnp.ones((1, length), jnp.int32), window=window)[0, 0]
    )
    assert flops.attention_pairs(length, window) == mask.sum()
    assert flops.attention_pairs(length, None) == length * length
    # A block-sparse kernel: every tile with any pair of the band in it, whole.
    tiles = mask.reshape(length // block, block, length // block, block).any(axis=(1, 3))
    assert flops.attention_pairs(length, window, block) == tiles.sum() * block * block


def test_modernbert_base_windows_at_splash_tiles():
    """ModernBERT's 64 keys either side at splash's 512-token tiles: every tile of a 1,024-token
    row (the kernel does full attention's work), 46 of 256 at 8,192 (docs/scaling.md)."""
    assert flops.attention_pairs(1024, 64, 512) == 1024 * 1024
    assert flops.attention_pairs(8192, 64, 512) == 46 * 512 * 512
    assert flops.attention_pairs(8192, 64) == 8192 * 129 - 64 * 65
    with pytest.raises(ValueError, match="does not divide"):
        flops.attention_pairs(1000, 64, 512)
