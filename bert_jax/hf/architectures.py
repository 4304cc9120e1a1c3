"""The two transformers classes our model can be, as data: BertForPreTraining (also Google's
TensorFlow BERT; BertForMaskedLM without NSP) and ModernBertForMaskedLM: the config fields each
fixes, its config.json both ways, and our parameters' names in its files (a name with several of
our paths holds them concatenated along torch's first axis: ModernBERT's Wqkv, Wi).
docs/model.md, "Import a public BERT" and "ModernBERT in and out of Hugging Face".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from bert_jax import cli
from bert_jax.hf import modernbert
from bert_jax.hf.files import CheckpointError
from bert_jax.model.bert_config import BertConfig

# (our parameter paths, its name in the file, transpose?)
Row = tuple[tuple[tuple, ...], str, bool]


@dataclasses.dataclass(frozen=True)
class Architecture:
    label: str  # "BERT" or "ModernBERT", in messages
    hf_class: str
    block: Mapping[str, Any]  # BertConfig fields the class fixes, and their values
    from_hf: Callable[..., BertConfig]  # (config.json dict, **overrides) -> BertConfig
    to_hf: Callable[..., dict]  # (BertConfig, special_ids) -> config.json dict
    rows: Callable[[BertConfig | None, int], Iterator[Row]]  # (config, layer count) -> all
    bare: tuple[str, ...]  # how a bare encoder's names start: `prefix` is put before them
    prefix: str
    body: tuple[str, ...]  # prefixes of the names a file must hold; the heads may be absent
    tied: frozenset[str]  # names a file may hold that repeat another weight (the decoder)
    decoder: tuple[str, str]  # the tied decoder weight, and the word embeddings it repeats
    # {a tied alias: the name it repeats}, read where a file holds the alias alone
    aliases: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def normalize(self, name: str) -> str:
        """A bare encoder's names, and old LayerNorm gamma and beta, as this class's."""
        if name.startswith(self.bare):
            name = self.prefix + name
        for old, new in ((".gamma", ".weight"), (".beta", ".bias")):
            if name.endswith(old) and "LayerNorm" in name:
                name = name[: -len(old)] + new
        return name


def _linear(hf: str, *ours: tuple, bias: bool = True) -> Iterator[Row]:
    yield tuple(p + ("kernel",) for p in ours), hf + ".weight", True
    if bias:
        yield tuple(p + ("bias",) for p in ours), hf + ".bias", False


def _norm(hf: str, ours: tuple, bias: bool = True) -> Iterator[Row]:
    yield (ours + ("scale",),), hf + ".weight", False
    if bias:
        yield (ours + ("bias",),), hf + ".bias", False


BERT_MODEL_TYPE = "bert"  # config.json's model_type of every transformers Bert* class

# config.json fields that are BertConfig's too, with transformers' defaults (None: required).
_SHARED_FIELDS = {
    "vocab_size": None,
    "hidden_size": None,
    "num_hidden_layers": None,
    "num_attention_heads": None,
    "intermediate_size": None,
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-12,
}


def _bert_config(hf: Mapping[str, Any], **overrides) -> BertConfig:
    act = hf.get("hidden_act", "gelu")
    if act not in modernbert.EXACT_GELU:
        raise CheckpointError(
            f"hidden_act {act!r} is not supported: this BERT uses the exact (erf) "
            f"GELU, transformers' {modernbert.EXACT_GELU}"
        )
    pos_type = hf.get("position_embedding_type", "absolute")
    if pos_type != "absolute":
        raise CheckpointError(
            f"position_embedding_type {pos_type!r} is not supported (only 'absolute')"
        )
    if hf.get("is_decoder") or hf.get("add_cross_attention"):
        raise CheckpointError(
            f"is_decoder {hf.get('is_decoder')!r}, add_cross_attention "
            f"{hf.get('add_cross_attention')!r} is not supported: a decoder BERT "
            "(BertLMHeadModel, an encoder-decoder's) attends causally; this one attends both ways"
        )
    missing = [f for f, default in _SHARED_FIELDS.items() if default is None and f not in hf]
    if missing:
        kind = f" (model_type {hf['model_type']!r})" if "model_type" in hf else ""
        raise CheckpointError(f"the config{kind} lacks {missing}; is this a BERT config.json?")
    values = {f: hf.get(f, default) for f, default in _SHARED_FIELDS.items()}
    return BertConfig(**{**values, **overrides})


def _bert_hf_config(config: BertConfig, special_ids=None) -> dict[str, Any]:
    out = {f: getattr(config, f) for f in _SHARED_FIELDS}
    pad = (special_ids or {}).get("pad")
    out.update(
        # Without the NSP head (MLM-only pre-training, RoBERTa's recipe) the MLM class holds it all.
        architectures=["BertForPreTraining" if config.nsp_head else "BertForMaskedLM"],
        model_type=BERT_MODEL_TYPE,
        hidden_act="gelu",
        position_embedding_type="absolute",
        pad_token_id=0 if pad is None else pad,
        tie_word_embeddings=True,
        torch_dtype="float32",
    )
    return out


def _bert_rows(config: BertConfig | None, layers: int) -> Iterator[Row]:
    emb = ("bert", "embeddings")
    for name in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
        yield (emb + (name, "embedding"),), f"bert.embeddings.{name}.weight", False
    yield from _norm("bert.embeddings.LayerNorm", emb + ("layer_norm",))
    for i in range(layers):
        ours, hf = ("bert", "layers", i), f"bert.encoder.layer.{i}"
        for name in ("query", "key", "value"):
            yield from _linear(f"{hf}.attention.self.{name}", ours + ("attention", name))
        yield from _linear(f"{hf}.attention.output.dense", ours + ("attention", "output"))
        yield from _norm(f"{hf}.attention.output.LayerNorm", ours + ("attention_norm",))
        yield from _linear(f"{hf}.intermediate.dense", ours + ("intermediate",))
        yield from _linear(f"{hf}.output.dense", ours + ("output",))
        yield from _norm(f"{hf}.output.LayerNorm", ours + ("output_norm",))
    if config is None or config.pooler:
        yield from _linear("bert.pooler.dense", ("bert", "pooler"))
    yield from _linear("cls.predictions.transform.dense", ("mlm", "transform"))
    yield from _norm("cls.predictions.transform.LayerNorm", ("mlm", "transform_norm"))
    yield (("mlm", "bias"),), "cls.predictions.bias", False
    if config is None or config.nsp_head:
        yield from _linear("cls.seq_relationship", ("nsp",))


BERT = Architecture(
    label="BERT",
    hf_class="BertForPreTraining",
    block={  # the modern block's fields, where BertForPreTraining has no choice
        "mlp_type": "gelu",
        "attention_bias": True,
        "mlp_bias": True,
        "norm_bias": True,
        "head_bias": True,
        "decoder_bias": True,
        "local_attention": 0,
        "classifier_pooling": "cls",  # BertForSequenceClassification reads the pooler
    },
    from_hf=_bert_config,
    to_hf=_bert_hf_config,
    rows=_bert_rows,
    bare=("embeddings.", "encoder.", "pooler."),
    prefix="bert.",
    body=("bert.embeddings.", "bert.encoder."),
    tied=frozenset({"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}),
    decoder=("cls.predictions.decoder.weight", "bert.embeddings.word_embeddings.weight"),
    # transformers ties the decoder's bias to the MLM bias and loads a file holding only it
    aliases={"cls.predictions.decoder.bias": "cls.predictions.bias"},
)


def _modernbert_rows(config: BertConfig, layers: int) -> Iterator[Row]:
    norm = lambda hf, ours: _norm(hf, ours, config.norm_bias)
    emb = ("bert", "embeddings")
    yield (emb + ("word_embeddings", "embedding"),), "model.embeddings.tok_embeddings.weight", False
    yield from norm("model.embeddings.norm", emb + ("layer_norm",))
    for i in range(layers):
        ours, hf = ("bert", "layers", i), f"model.layers.{i}"
        attn = ours + ("attention",)
        if i > 0:
            yield from norm(f"{hf}.attn_norm", ours + ("attention_norm",))
        qkv = (attn + ("query",), attn + ("key",), attn + ("value",))
        yield from _linear(f"{hf}.attn.Wqkv", *qkv, bias=config.attention_bias)
        yield from _linear(f"{hf}.attn.Wo", attn + ("output",), bias=config.attention_bias)
        yield from norm(f"{hf}.mlp_norm", ours + ("output_norm",))
        wi = (ours + ("intermediate",), ours + ("gate",))
        yield from _linear(f"{hf}.mlp.Wi", *wi, bias=config.mlp_bias)
        yield from _linear(f"{hf}.mlp.Wo", ours + ("output",), bias=config.mlp_bias)
    yield from norm("model.final_norm", ("bert", "final_norm"))
    yield from _linear("head.dense", ("mlm", "transform"), bias=config.head_bias)
    yield from norm("head.norm", ("mlm", "transform_norm"))
    if config.decoder_bias:
        yield (("mlm", "bias"),), "decoder.bias", False


MODERNBERT = Architecture(
    label="ModernBERT",
    hf_class="ModernBertForMaskedLM",
    block=modernbert.BLOCK,
    from_hf=modernbert.bert_config_from_modernbert,
    to_hf=modernbert.modernbert_config,
    rows=_modernbert_rows,
    bare=("embeddings.", "layers.", "final_norm."),
    prefix="model.",
    body=("model.",),
    tied=frozenset({"decoder.weight"}),
    decoder=("decoder.weight", "model.embeddings.tok_embeddings.weight"),
)


def is_modern(config: BertConfig) -> bool:
    """Whether `config` is of the modern block (ModernBERT's, or a mix architecture() refuses)."""
    return config.position_embedding_type == "rope" or config.norm_position == "pre"


def architecture(config: BertConfig) -> Architecture:
    """BERT or MODERNBERT, the class of `config`'s model; a mix of the two blocks is refused."""
    modern = is_modern(config)
    arch = MODERNBERT if modern else BERT
    wrong = [
        f"{name}={getattr(config, name)!r}" + (f" (ModernBERT: {want!r})" if modern else "")
        for name, want in arch.block.items()
        if getattr(config, name) != want
    ]
    wrong += ["type_vocab_size=0"] if not modern and config.type_vocab_size == 0 else []
    if wrong:
        raise cli.UserError(
            f"this model has no Hugging Face class: as a {arch.hf_class} it has {', '.join(wrong)}"
        )
    return arch


def of_hf_config(hf: Mapping[str, Any]) -> Architecture:
    """The class a config.json (or Google's bert_config.json) describes by its model_type."""
    model_type = hf.get("model_type", BERT_MODEL_TYPE)  # Google's bert_config.json has none
    if model_type == modernbert.MODEL_TYPE:
        return MODERNBERT
    if model_type != BERT_MODEL_TYPE:
        # RoBERTa and the like have BERT's sizes and names but compute something else.
        raise CheckpointError(
            f"model_type {model_type!r} is not supported: only BERT ({BERT_MODEL_TYPE!r}, or "
            f"Google's bert_config.json) and ModernBERT ({modernbert.MODEL_TYPE!r}) directories "
            "import; its weights may carry BERT's names, but the model computes something else"
        )
    return BERT


def bert_config_from_hf(hf: Mapping[str, Any], **overrides) -> BertConfig:
    """A config.json (or Google's bert_config.json) dict -> BertConfig; `overrides` win."""
    return of_hf_config(hf).from_hf(hf, **overrides)


def hf_config_from_bert(
    config: BertConfig, special_ids: Mapping[str, int | None] | None = None
) -> dict[str, Any]:
    """BertConfig -> its class's config.json (`special_ids`: the tokenizer's pad, cls, sep)."""
    return architecture(config).to_hf(config, special_ids)
