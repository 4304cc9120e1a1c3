"""A ModernBertForMaskedLM's config.json <-> a BertConfig of the modern block, read in
transformers 5's spelling or 4's (export writes both). docs/model.md, "ModernBERT in and out of
Hugging Face": every config field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bert_jax.hf.files import CheckpointError
from bert_jax.model.bert_config import BertConfig

MODEL_TYPE = "modernbert"
EXACT_GELU = ("gelu", "gelu_python")  # transformers' names for the erf GELU
FULL, SLIDING = "full_attention", "sliding_attention"
# ModernBertConfig's defaults, for fields a config.json leaves out.
_DEFAULTS = {"local_attention": 128, "global_rope_theta": 160_000.0, "local_rope_theta": 10_000.0}
# config.json field -> (BertConfig field, ModernBertConfig's default, conversion on import).
_FIELDS = {
    "max_position_embeddings": ("max_position_embeddings", 8192, None),
    "initializer_range": ("initializer_range", 0.02, None),
    "norm_eps": ("layer_norm_eps", 1e-5, None),
    "mlp_dropout": ("hidden_dropout_prob", 0.0, float),
    "attention_dropout": ("attention_probs_dropout_prob", 0.0, float),
    "norm_bias": ("norm_bias", False, bool),
    "attention_bias": ("attention_bias", False, bool),
    "mlp_bias": ("mlp_bias", False, bool),
    "decoder_bias": ("decoder_bias", True, bool),
    "classifier_bias": ("head_bias", False, bool),
    "classifier_pooling": ("classifier_pooling", "cls", str),
    "classifier_dropout": ("classifier_dropout", 0.0, float),
}
_SHAPES = "vocab_size hidden_size intermediate_size num_hidden_layers num_attention_heads".split()
BLOCK = {
    "position_embedding_type": "rope",
    "norm_position": "pre",
    "mlp_type": "geglu",
    "type_vocab_size": 0,
    "pooler": False,
    "nsp_head": False,
}
_KINDS = {
    int: (lambda v: isinstance(v, int) and not isinstance(v, bool), "a whole number"),
    float: (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
    bool: (lambda v: isinstance(v, bool), "true or false"),
    dict: (lambda v: v is None or isinstance(v, dict), "an object or null"),
    list: (lambda v: v is None or isinstance(v, list), "a list or null"),
    str: (lambda v: isinstance(v, str), "a string"),
}


def _get(hf: Mapping[str, Any], name: str, kind: type, default: Any = None) -> Any:
    """config.json's `name` (`default` when absent), refused by name unless of `kind` (a string
    would surface as an error naming no field, or, bool("false"), the opposite setting)."""
    value = hf.get(name, default)
    ok, what = _KINDS[kind]
    if not ok(value):
        raise CheckpointError(
            f"{name} is {value!r} in the ModernBERT config.json; it must be {what}"
        )
    return value


def _layer_pattern(hf: Mapping[str, Any], layers: int) -> tuple[int, int]:
    """(local_attention, global_attn_every_n_layers) of a config.json."""
    name, window = "local_attention", _get(hf, "local_attention", int, _DEFAULTS["local_attention"])
    if "sliding_window" in hf:  # transformers sets local_attention to twice this, after the rest
        name, window = "sliding_window", 2 * _get(hf, "sliding_window", int)
    if window < 0:
        raise CheckpointError(f"{name} {hf[name]} is negative: a window is 1 token or more")
    # transformers' window of 0 is its window of 1; ours of 0 means no window at all.
    window = max(window, 1)
    types = _get(hf, "layer_types", list)
    if types is None:  # ModernBertConfig's default pattern: every third layer
        return window, _get(hf, "global_attn_every_n_layers", int, 3)
    if len(types) != layers or set(types) - {FULL, SLIDING}:
        raise CheckpointError(
            f"layer_types {types} is not {layers} of {FULL!r} and {SLIDING!r} (num_hidden_layers)"
        )
    if SLIDING not in types:
        return 0, 1
    every = next((i for i in range(1, layers) if types[i] == FULL), layers)
    if types != [FULL if i % every == 0 else SLIDING for i in range(layers)]:
        raise CheckpointError(
            f"layer_types {types} is not a global layer every N layers from layer 0, the only "
            "pattern this model has (global_attn_every_n_layers)"
        )
    return window, every


def _thetas(hf: Mapping[str, Any]) -> tuple[float, float]:
    rope = _get(hf, "rope_parameters", dict) or {}
    # transformers 4's spelling of a scaling, which transformers 5 applies to both layer kinds.
    scaling = _get(hf, "rope_scaling", dict) or {}
    scaled = {"rope_type", "type"} & set(scaling)
    thetas = []
    for kind, old_name in ((FULL, "global_rope_theta"), (SLIDING, "local_rope_theta")):
        own = _get(rope, kind, dict)
        # As transformers 5 reads them (an absent entry is the default; `type` is old rope_type).
        params = {**({"rope_type": "default"} if own is None else own), **scaling}
        rope_type = params.get("rope_type", params.get("type", "default"))
        if rope_type != "default":
            field = "rope_scaling" if scaled else f"rope_parameters[{kind!r}]"
            raise CheckpointError(
                f"{field} has rope_type {rope_type!r}; only 'default' (unscaled) RoPE is supported"
            )
        if "rope_theta" in params:
            theta = _get(params, "rope_theta", float)
        else:
            theta = _get(hf, old_name, float, _DEFAULTS[old_name])
        thetas.append(float(theta))
    return thetas[0], thetas[1]


def bert_config_from_modernbert(hf: Mapping[str, Any], **overrides) -> BertConfig:
    for name in ("hidden_activation", "classifier_activation"):
        if hf.get(name, "gelu") not in EXACT_GELU:
            raise CheckpointError(
                f"{name} {hf[name]!r} is not supported: this model uses the exact (erf) GELU, "
                f"transformers' {EXACT_GELU}"
            )
    missing = [f for f in _SHAPES if f not in hf]
    if missing:
        raise CheckpointError(f"the ModernBERT config lacks {missing}")
    for name in _SHAPES:
        if _get(hf, name, int) < 1:
            raise CheckpointError(
                f"{name} is {hf[name]} in the ModernBERT config.json; it must be 1 or more"
            )
    if hf.get("head_dim") not in (None, hf["hidden_size"] // hf["num_attention_heads"]):
        raise CheckpointError(f"head_dim {hf['head_dim']} is not hidden_size / num_attention_heads")
    window, every = _layer_pattern(hf, hf["num_hidden_layers"])
    global_theta, local_theta = _thetas(hf)
    values = {f: hf[f] for f in _SHAPES}
    for theirs, (ours, default, convert) in _FIELDS.items():
        value = _get(hf, theirs, type(default), default)
        values[ours] = convert(value) if convert else value
    values.update(
        BLOCK,
        local_attention=window,
        global_attn_every_n_layers=every,
        global_rope_theta=global_theta,
        local_rope_theta=local_theta,
        scale_init_by_depth=True,
    )
    return BertConfig(**{**values, **overrides})


def modernbert_config(
    config: BertConfig, special_ids: Mapping[str, int | None] | None = None
) -> dict[str, Any]:
    """BertConfig of the modern block -> a ModernBertForMaskedLM's config.json; unknown
    `special_ids` null (ModernBertConfig's defaults are ModernBERT's own vocabulary's)."""
    ids = dict(special_ids or {})
    layers = config.num_hidden_layers
    every = config.global_attn_every_n_layers if config.local_attention else 1
    out = {f: getattr(config, f) for f in _SHAPES}
    out.update({theirs: getattr(config, ours) for theirs, (ours, _, _) in _FIELDS.items()})
    out.update(
        architectures=["ModernBertForMaskedLM"],
        model_type=MODEL_TYPE,
        hidden_activation="gelu",
        classifier_activation="gelu",
        embedding_dropout=config.hidden_dropout_prob,
        local_attention=config.local_attention or _DEFAULTS["local_attention"],
        layer_types=[FULL if config.is_global(i) else SLIDING for i in range(layers)],
        rope_parameters={
            FULL: {"rope_type": "default", "rope_theta": config.global_rope_theta},
            SLIDING: {"rope_type": "default", "rope_theta": config.local_rope_theta},
        },
        # transformers 4's spellings of the same (5 reads layer_types and rope_parameters).
        global_attn_every_n_layers=every,
        global_rope_theta=config.global_rope_theta,
        local_rope_theta=config.local_rope_theta,
        pad_token_id=ids.get("pad"),
        cls_token_id=ids.get("cls"),
        bos_token_id=ids.get("cls"),
        sep_token_id=ids.get("sep"),
        eos_token_id=ids.get("sep"),
        tie_word_embeddings=True,
        torch_dtype="float32",
    )
    return out
