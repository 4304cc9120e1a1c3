"""BertConfig: the encoder's hyper-parameters (configs/default.py's `config.model`, whose
comments say what each does), from the 2018 BERT to a ModernBERT block; each modern field
defaults to BERT's value. docs/model.md, "The modern block (ModernBERT)".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np

from bert_jax import cli

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
ATTENTION_IMPLS = ("auto", "xla", "cudnn", "splash", "einsum")
POSITION_EMBEDDING_TYPES = ("absolute", "rope")
NORM_POSITIONS = ("post", "pre")
MLP_TYPES = ("gelu", "geglu")
CLASSIFIER_POOLINGS = ("cls", "mean")

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
    type_vocab_size: int  # 0: no token-type embeddings (ModernBERT)
    initializer_range: float
    layer_norm_eps: float = 1e-12
    dtype: str = "float32"  # computation dtype; parameters are always float32
    remat: bool = False  # jax.checkpoint each encoder layer (nnx.remat)
    scan_layers: bool | None = None  # lax.scan over the layers (layer_stack); None: not on CPU
    attention_impl: str = "auto"  # one of ATTENTION_IMPLS (layers.SelfAttention picks for auto)
    # --- the modern block, field by field (configs/default.py; BERT's values by default) ---
    position_embedding_type: str = "absolute"  # "absolute" (a learned table) or "rope"
    global_rope_theta: float = 160_000.0  # RoPE base of the global layers
    local_rope_theta: float = 10_000.0  # RoPE base of the sliding-window layers
    norm_position: str = "post"  # "post" (BERT) or "pre" (+ a final norm)
    mlp_type: str = "gelu"  # "gelu" or "geglu"
    attention_bias: bool = True  # query/key/value and attention-output biases
    mlp_bias: bool = True  # the feed-forward layer's biases
    norm_bias: bool = True  # every LayerNorm's bias
    head_bias: bool = True  # the MLM head's transform dense (transformers' classifier_bias)
    decoder_bias: bool = True  # the MLM output bias over the vocabulary
    local_attention: int = 0  # sliding window (total, both sides); 0: every layer global
    global_attn_every_n_layers: int = 3  # with local_attention: layer i global iff i % n == 0
    pooler: bool = True  # BERT's tanh(dense) pooler; False: pooled = the first token's state
    nsp_head: bool = True  # the next-sentence head (needs the pooler)
    scale_init_by_depth: bool = False  # output projections' init / sqrt(2 * layers) (ModernBERT)
    # A ModernBERT block's task models (bert_jax.finetune.heads), as transformers' fields.
    classifier_pooling: str = "cls"  # a sentence's state: "cls" (first token) or "mean"
    classifier_dropout: float = 0.0  # before the classifier

    def __post_init__(self):
        problems = []
        for name in SHAPE_FIELDS:
            value = getattr(self, name)
            least = 0 if name == "type_vocab_size" else 1
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < least:
                kind = "a non-negative" if least == 0 else "a positive"
                problems.append(f"{name} must be {kind} integer, got {value!r}")
        if not problems and self.hidden_size % self.num_attention_heads:
            problems.append(
                f"hidden_size ({self.hidden_size}) must be a multiple of "
                f"num_attention_heads ({self.num_attention_heads})"
            )
        # Real numbers: a hand-edited config.json may hold text, null or a bool here.
        real = lambda v: isinstance(v, (int, float, np.number)) and not isinstance(v, bool)
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout"):
            value = getattr(self, name)
            if not real(value) or not 0.0 <= value < 1.0:
                problems.append(f"{name} must be in [0, 1), got {value!r}")
        for name in ("layer_norm_eps", "initializer_range"):
            value = getattr(self, name)
            if not real(value) or not 0.0 < value < float("inf"):
                problems.append(f"{name} must be a positive number, got {value!r}")
        if self.dtype not in DTYPES:
            problems.append(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        for name, choices in (
            ("attention_impl", ATTENTION_IMPLS),
            ("position_embedding_type", POSITION_EMBEDDING_TYPES),
            ("norm_position", NORM_POSITIONS),
            ("mlp_type", MLP_TYPES),
            ("classifier_pooling", CLASSIFIER_POOLINGS),
        ):
            if getattr(self, name) not in choices:
                problems.append(f"{name} must be one of {choices}, got {getattr(self, name)!r}")
        for name in ("local_attention", "global_attn_every_n_layers"):
            value = getattr(self, name)
            least = 0 if name == "local_attention" else 1
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < least:
                problems.append(f"{name} must be an integer >= {least}, got {value!r}")
        for name in ("global_rope_theta", "local_rope_theta"):
            if not getattr(self, name) > 0:
                problems.append(f"{name} must be positive, got {getattr(self, name)!r}")
        if (
            self.position_embedding_type == "rope"
            and self.hidden_size % self.num_attention_heads == 0
            and self.head_dim % 2
        ):
            problems.append(f"RoPE needs an even head size, got {self.head_dim}")
        if self.nsp_head and not self.pooler:
            problems.append("nsp_head needs the pooler (pooler=True), as BERT's NSP reads it")
        if problems:
            raise cli.UserError("invalid model config: " + "; ".join(problems))

    @classmethod
    def from_config_dict(cls, cd: Mapping[str, Any]) -> BertConfig:
        """`config.model` (ConfigDict or dict) -> BertConfig; unknown or missing fields: errors."""
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
        return DTYPES[self.dtype]

    def is_global(self, layer: int) -> bool:
        """Whether layer `layer` attends over the whole row (else: a sliding window)."""
        return self.local_attention == 0 or layer % self.global_attn_every_n_layers == 0

    def attention_window(self, layer: int) -> int | None:
        """How far a query of layer `layer` reads on either side; None: the whole row."""
        return None if self.is_global(layer) else self.local_attention // 2
