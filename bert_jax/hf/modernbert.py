"""Our ModernBERT-block parameters <-> transformers' ModernBertForMaskedLM: configs and names.

bert_jax.hf.bert reads and writes the files and picks this mapping for a config of the modern
block (`is_modernbert`). Torch Linear weights are [out, in], our kernels [in, out]; Wqkv and Wi
are our query/key/value and intermediate/gate kernels concatenated in that order. Layer kinds
come from `layer_types` (transformers 5) or `global_attn_every_n_layers` (transformers 4 and the
Hub's config.json files), RoPE bases from `rope_parameters` or `*_rope_theta`; export writes both.

docs/model.md, "ModernBERT in and out of Hugging Face": every name and config field.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from typing import Any

from bert_jax import cli
from bert_jax.model.bert_config import BertConfig
from bert_jax.text import tokenization

MODEL_TYPE = "modernbert"
EXACT_GELU = ("gelu", "gelu_python")  # transformers' names for the erf GELU
FULL, SLIDING = "full_attention", "sliding_attention"
# ModernBertConfig's defaults, for fields a config.json leaves out.
_DEFAULTS = {
    "max_position_embeddings": 8192,
    "initializer_range": 0.02,
    "norm_eps": 1e-5,
    "norm_bias": False,
    "attention_bias": False,
    "mlp_bias": False,
    "decoder_bias": True,
    "classifier_bias": False,
    "attention_dropout": 0.0,
    "mlp_dropout": 0.0,
    "local_attention": 128,
    "global_attn_every_n_layers": 3,
    "global_rope_theta": 160_000.0,
    "local_rope_theta": 10_000.0,
}
_SHAPES = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
)
# The fields that make our model ModernBertForMaskedLM, and their values.
BLOCK = {
    "position_embedding_type": "rope",
    "norm_position": "pre",
    "mlp_type": "geglu",
    "type_vocab_size": 0,
    "pooler": False,
    "nsp_head": False,
}


class ConfigError(cli.UserError):
    """A ModernBERT config.json this model cannot represent."""


_KINDS = {
    int: (lambda v: isinstance(v, int) and not isinstance(v, bool), "a whole number"),
    float: (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
    bool: (lambda v: isinstance(v, bool), "true or false"),
    dict: (lambda v: v is None or isinstance(v, dict), "an object or null"),
    list: (lambda v: v is None or isinstance(v, list), "a list or null"),
}


def _get(hf: Mapping[str, Any], name: str, kind: type, default: Any = None) -> Any:
    """config.json's `name` (`default` when absent), refused by name unless of `kind`: a null,
    a string or a list where a number or a flag belongs would otherwise surface as a Python
    error naming no field, or (bool("false")) as the opposite setting."""
    value = hf.get(name, default)
    ok, what = _KINDS[kind]
    if not ok(value):
        raise ConfigError(f"{name} is {value!r} in the ModernBERT config.json; it must be {what}")
    return value


def is_modernbert(config: BertConfig) -> bool:
    """Whether `config` is the modern block (transformers' ModernBertForMaskedLM holds it)."""
    return config.position_embedding_type == "rope" or config.norm_position == "pre"


def problems(config: BertConfig) -> list[str]:
    """Why `config`'s model is no ModernBertForMaskedLM ([] if it is)."""
    return [
        f"{name}={getattr(config, name)!r} (ModernBERT: {want!r})"
        for name, want in BLOCK.items()
        if getattr(config, name) != want
    ]


def _layer_pattern(hf: Mapping[str, Any], layers: int) -> tuple[int, int]:
    """(local_attention, global_attn_every_n_layers) of a config.json."""
    window = _get(hf, "local_attention", int, _DEFAULTS["local_attention"])
    if window < 0:
        raise ConfigError(f"local_attention {window} is negative: a window is 1 token or more")
    # transformers' window of 0 is its window of 1 (each token reads only itself); ours of 0
    # means no window at all (global attention in every layer).
    window = max(window, 1)
    types = _get(hf, "layer_types", list)
    if types is None:
        return window, _get(hf, "global_attn_every_n_layers", int, 3)
    if len(types) != layers or set(types) - {FULL, SLIDING}:
        raise ConfigError(
            f"layer_types {types} is not {layers} of {FULL!r} and {SLIDING!r} (num_hidden_layers)"
        )
    if SLIDING not in types:
        return 0, 1
    every = next((i for i in range(1, layers) if types[i] == FULL), layers)
    if types != [FULL if i % every == 0 else SLIDING for i in range(layers)]:
        raise ConfigError(
            f"layer_types {types} is not a global layer every N layers from layer 0, the only "
            "pattern this model has (global_attn_every_n_layers)"
        )
    return window, every


def _thetas(hf: Mapping[str, Any]) -> tuple[float, float]:
    rope = _get(hf, "rope_parameters", dict) or {}
    # transformers 4's spelling of a scaling, which transformers 5 applies to both layer kinds.
    scaling = _get(hf, "rope_scaling", dict) or {}
    thetas = []
    for kind, old_name in ((FULL, "global_rope_theta"), (SLIDING, "local_rope_theta")):
        own = _get(rope, kind, dict)
        # As transformers 5 reads them: a kind's absent entry is {"rope_type": "default"}, and
        # an entry without rope_type takes its older spelling `type`.
        params = {**({"rope_type": "default"} if own is None else own), **scaling}
        rope_type = params.get("rope_type", params.get("type", "default"))
        if rope_type != "default":
            field = (
                "rope_scaling"
                if {"rope_type", "type"} & set(scaling)
                else f"rope_parameters[{kind!r}]"
            )
            raise ConfigError(
                f"{field} has rope_type {rope_type!r}; only 'default' (unscaled) RoPE is supported"
            )
        if "rope_theta" in params:
            theta = _get(params, "rope_theta", float)
        else:
            theta = _get(hf, old_name, float, _DEFAULTS[old_name])
        thetas.append(float(theta))
    return thetas[0], thetas[1]


def bert_config_from_modernbert(hf: Mapping[str, Any], **overrides) -> BertConfig:
    """A ModernBERT config.json dict -> BertConfig of the modern block; `overrides` win."""
    for name in ("hidden_activation", "classifier_activation"):
        if hf.get(name, "gelu") not in EXACT_GELU:
            raise ConfigError(
                f"{name} {hf[name]!r} is not supported: this model uses the exact (erf) GELU, "
                f"transformers' {EXACT_GELU}"
            )
    missing = [f for f in _SHAPES if f not in hf]
    if missing:
        raise ConfigError(f"the ModernBERT config lacks {missing}")
    for name in _SHAPES:
        if _get(hf, name, int) < 1:
            raise ConfigError(
                f"{name} is {hf[name]} in the ModernBERT config.json; it must be 1 or more"
            )
    if hf.get("head_dim") not in (None, hf["hidden_size"] // hf["num_attention_heads"]):
        raise ConfigError(f"head_dim {hf['head_dim']} is not hidden_size / num_attention_heads")
    window, every = _layer_pattern(hf, hf["num_hidden_layers"])
    global_theta, local_theta = _thetas(hf)

    get = lambda name: _get(hf, name, type(_DEFAULTS[name]), _DEFAULTS[name])
    values = {f: hf[f] for f in _SHAPES}
    values.update(
        BLOCK,
        max_position_embeddings=get("max_position_embeddings"),
        initializer_range=get("initializer_range"),
        layer_norm_eps=get("norm_eps"),
        hidden_dropout_prob=float(get("mlp_dropout")),
        attention_probs_dropout_prob=float(get("attention_dropout")),
        norm_bias=get("norm_bias"),
        attention_bias=get("attention_bias"),
        mlp_bias=get("mlp_bias"),
        decoder_bias=get("decoder_bias"),
        head_bias=get("classifier_bias"),
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
    """BertConfig of the modern block -> the config.json of a transformers
    ModernBertForMaskedLM. `special_ids` ('pad', 'cls', 'sep'): the tokenizer's; unknown ones
    are written as null (ModernBertConfig's defaults are ModernBERT's own vocabulary's). The
    config is one bert_jax.hf.bert.architecture accepts (it names what else is wrong)."""
    ids = dict(special_ids or {})
    layers = config.num_hidden_layers
    every = config.global_attn_every_n_layers if config.local_attention else 1
    out = {f: getattr(config, f) for f in _SHAPES}
    out.update(
        architectures=["ModernBertForMaskedLM"],
        model_type=MODEL_TYPE,
        hidden_activation="gelu",
        classifier_activation="gelu",
        max_position_embeddings=config.max_position_embeddings,
        initializer_range=config.initializer_range,
        norm_eps=config.layer_norm_eps,
        norm_bias=config.norm_bias,
        attention_bias=config.attention_bias,
        mlp_bias=config.mlp_bias,
        decoder_bias=config.decoder_bias,
        classifier_bias=config.head_bias,
        attention_dropout=config.attention_probs_dropout_prob,
        embedding_dropout=config.hidden_dropout_prob,
        mlp_dropout=config.hidden_dropout_prob,
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


def param_table(config: BertConfig) -> Iterator[tuple[tuple, str, bool]]:
    """(our parameter paths, Hugging Face name, transpose?) for every ModernBertForMaskedLM
    weight; several paths are concatenated along torch's first axis."""

    def linear(ours, hf, bias):
        yield tuple(p + ("kernel",) for p in ours), hf + ".weight", True
        if bias:
            yield tuple(p + ("bias",) for p in ours), hf + ".bias", False

    def norm(ours, hf):
        yield (ours + ("scale",),), hf + ".weight", False
        if config.norm_bias:
            yield (ours + ("bias",),), hf + ".bias", False

    emb = ("bert", "embeddings")
    yield (emb + ("word_embeddings", "embedding"),), "model.embeddings.tok_embeddings.weight", False
    yield from norm(emb + ("layer_norm",), "model.embeddings.norm")
    for i in range(config.num_hidden_layers):
        ours, hf = ("bert", "layers", i), f"model.layers.{i}"
        attn = ours + ("attention",)
        if i > 0:
            yield from norm(ours + ("attention_norm",), f"{hf}.attn_norm")
        qkv = tuple(attn + (name,) for name in ("query", "key", "value"))
        yield from linear(qkv, f"{hf}.attn.Wqkv", config.attention_bias)
        yield from linear((attn + ("output",),), f"{hf}.attn.Wo", config.attention_bias)
        yield from norm(ours + ("output_norm",), f"{hf}.mlp_norm")
        wi = (ours + ("intermediate",), ours + ("gate",))
        yield from linear(wi, f"{hf}.mlp.Wi", config.mlp_bias)
        yield from linear((ours + ("output",),), f"{hf}.mlp.Wo", config.mlp_bias)
    yield from norm(("bert", "final_norm"), "model.final_norm")
    yield from linear((("mlm", "transform"),), "head.dense", config.head_bias)
    yield from norm(("mlm", "transform_norm"), "head.norm")
    if config.decoder_bias:
        yield (("mlm", "bias"),), "decoder.bias", False


BODY_PREFIXES = ("model.",)  # must come from the file; the heads may not (fresh init)
TIED = frozenset({"decoder.weight"})  # the word embeddings again
WORD_EMBEDDINGS = "model.embeddings.tok_embeddings.weight"


def normalize_name(name: str) -> str:
    """A bare ModernBertModel's names -> ModernBertForMaskedLM's."""
    if name.startswith(("embeddings.", "layers.", "final_norm.")):
        return "model." + name
    return name


def save_wordpiece_tokenizer_json(vocab_file: str, output_dir: str, do_lower_case: bool) -> None:
    """A WordPiece vocab.txt's tokenizer as tokenizer.json in `output_dir`, and the special
    tokens' roles in its tokenizer_config.json (bert.save_tokenizer wrote both files' others).
    transformers 5's AutoTokenizer reads a modernbert directory's tokenizer from tokenizer.json
    alone (it ignores tokenizer_class 'BertTokenizer' for this model type), so without it an
    export with a vocab.txt loads no tokenizer. Built as transformers' BertTokenizer builds its
    own, with our FullTokenizer's word length limit."""
    vocab = tokenization.load_vocab(vocab_file)
    max_chars = tokenization.WordPieceTokenizer.max_chars_per_word
    tok = tokenization.bert_wordpiece(vocab, do_lower_case, max_chars_per_word=max_chars)
    names = ("pad", "unk", "cls", "sep", "mask")  # the roles of tokenization.SPECIAL_TOKENS
    roles = {n: token for n, token in zip(names, tokenization.SPECIAL_TOKENS) if token in vocab}
    tok.save(os.path.join(output_dir, "tokenizer.json"))
    path = os.path.join(output_dir, "tokenizer_config.json")
    with open(path) as f:
        config = json.load(f)
    config.update({f"{role}_token": token for role, token in roles.items()})
    with open(path, "w") as f:
        json.dump(config, f, indent=2)
