"""Our BERT parameters <-> Hugging Face BertForPreTraining (and Google's original TensorFlow
BERT), or ModernBertForMaskedLM for a model of the modern block (modernbert.py's names; the
config decides which: `architecture`). Export writes a directory transformers loads with no
missing or unexpected keys; import initializes the weights a file lacks (a BertModel's heads, a
missing pooler) and names them in its report.

docs/model.md, "Export a training run to Hugging Face" and "Import a public BERT".
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jax
import numpy as np
from flax import nnx

from bert_jax import cli
from bert_jax.hf import modernbert
from bert_jax.hf.files import CheckpointError, read_config, read_hf_weights
from bert_jax.model.encoder import (
    SHAPE_FIELDS,
    BertConfig,
    BertForPreTraining,
    model_from_params,
)
from bert_jax.text import tokenization, tokenizer_json

# config.json fields that are BertConfig fields under the same name; the first five required.
_SHARED_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "max_position_embeddings",
    "type_vocab_size",
    "initializer_range",
    "layer_norm_eps",
)


# transformers' BertConfig defaults, for the fields after the sizes a config.json leaves out.
_HF_DEFAULTS = {
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-12,
}


@dataclasses.dataclass
class ImportReport:
    """What `load_hf` did: the source, weights it initialized, and file entries it did not use."""

    source: str
    initialized: list[str]  # Hugging Face names of weights absent from the file (fresh init)
    unused: list[str]  # names in the file that map to nothing of ours (buffers, optimizer slots)

    def __str__(self) -> str:
        lines = [f"imported {self.source}"]
        if self.initialized:
            lines.append(f"  initialized (absent from the file): {', '.join(self.initialized)}")
        if self.unused:
            lines.append(f"  not used from the file: {', '.join(self.unused)}")
        return "\n".join(lines)


# --- Configs ---------------------------------------------------------------------------------


BERT, MODERNBERT = "bert", "modernbert"


def architecture(config: BertConfig) -> str:
    """BERT or MODERNBERT: the transformers model `config`'s model is (its weights' names); a mix
    of the two blocks' fields that neither class has is an error naming them."""
    modern = modernbert.is_modernbert(config)
    if modern:
        wrong = modernbert.problems(config)
        what = "ModernBertForMaskedLM"
    else:
        wrong = [
            f"{name}={getattr(config, name)!r}"
            for name, bert in _BERT_BLOCK.items()
            if getattr(config, name) != bert
        ]
        wrong += ["type_vocab_size=0"] if config.type_vocab_size == 0 else []
        what = "BertForPreTraining"
    if wrong:
        raise cli.UserError(
            f"this model has no Hugging Face class: as a {what} it has {', '.join(wrong)}"
        )
    return MODERNBERT if modern else BERT


# The modern block's fields where BertForPreTraining has no choice.
_BERT_BLOCK = {
    "mlp_type": "gelu",
    "attention_bias": True,
    "mlp_bias": True,
    "norm_bias": True,
    "head_bias": True,
    "decoder_bias": True,
    "local_attention": 0,
    "pooler": True,
    "nsp_head": True,
}


def bert_config_from_hf(hf: Mapping[str, Any], **overrides) -> BertConfig:
    """A config.json (or Google's bert_config.json) dict -> BertConfig; `overrides` win. A
    ModernBERT config.json (model_type 'modernbert') gives the modern block."""
    if hf.get("model_type") == modernbert.MODEL_TYPE:
        return modernbert.bert_config_from_modernbert(hf, **overrides)
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
    # The sizes every BERT config.json states: without them it is another model's config.
    missing = [f for f in _SHARED_FIELDS[:5] if f not in hf]
    if missing:
        kind = f" (model_type {hf['model_type']!r})" if "model_type" in hf else ""
        raise CheckpointError(f"the config{kind} lacks {missing}; is this a BERT config.json?")
    # Any other field left out takes transformers' default, as from_pretrained gives it (a
    # max_position_embeddings or type_vocab_size the weights do not have is refused by name).
    values = {f: hf[f] if f in hf else _HF_DEFAULTS[f] for f in _SHARED_FIELDS}
    return BertConfig(**{**values, **overrides})


def hf_config_from_bert(
    config: BertConfig, special_ids: Mapping[str, int | None] | None = None
) -> dict[str, Any]:
    """BertConfig -> the config.json of a transformers BertForPreTraining, or of a
    ModernBertForMaskedLM (`special_ids`: its tokenizer's 'pad', 'cls', 'sep' ids)."""
    if architecture(config) == MODERNBERT:
        return modernbert.modernbert_config(config, special_ids)
    out = {f: getattr(config, f) for f in _SHARED_FIELDS}
    out.update(
        architectures=["BertForPreTraining"],
        model_type="bert",
        hidden_act="gelu",
        position_embedding_type="absolute",
        pad_token_id=0,
        tie_word_embeddings=True,
        torch_dtype="float32",
    )
    return out


# --- Name and layout mapping ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Names:
    """How one transformers class names our parameters, decided once per config by `_names`."""

    label: str  # "BERT" or "ModernBERT"
    # (our parameter paths, its name, transpose?); a name with several paths holds them
    # concatenated along torch's first axis.
    table: tuple[tuple[tuple[tuple, ...], str, bool], ...]
    normalize: Callable[[str], str]  # a checkpoint's name variants -> the table's names
    body: tuple[str, ...]  # prefixes of the names a file must hold; the heads may be absent
    tied: frozenset[str]  # names a file may hold that repeat another weight (the decoder)


def _names(config: BertConfig) -> _Names:
    if architecture(config) == MODERNBERT:
        return _Names(
            "ModernBERT",
            tuple(modernbert.param_table(config)),
            modernbert.normalize_name,
            modernbert.BODY_PREFIXES,
            modernbert.TIED,
        )
    return _Names(
        "BERT",
        tuple(_bert_table(config.num_hidden_layers)),
        _normalize_hf_name,
        ("bert.embeddings.", "bert.encoder."),
        frozenset({"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}),
    )


def _bert_table(num_layers: int) -> Iterator[tuple[tuple[tuple, ...], str, bool]]:
    """BertForPreTraining's rows of the table (one path each)."""

    def linear(ours, hf):  # our kernel is [in, out], torch's weight [out, in]
        yield (ours + ("kernel",),), hf + ".weight", True
        yield (ours + ("bias",),), hf + ".bias", False

    def norm(ours, hf):
        yield (ours + ("scale",),), hf + ".weight", False
        yield (ours + ("bias",),), hf + ".bias", False

    emb = ("bert", "embeddings")
    for name in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
        yield (emb + (name, "embedding"),), f"bert.embeddings.{name}.weight", False
    yield from norm(emb + ("layer_norm",), "bert.embeddings.LayerNorm")
    for i in range(num_layers):
        ours, hf = ("bert", "layers", i), f"bert.encoder.layer.{i}"
        for name in ("query", "key", "value"):
            yield from linear(ours + ("attention", name), f"{hf}.attention.self.{name}")
        yield from linear(ours + ("attention", "output"), f"{hf}.attention.output.dense")
        yield from norm(ours + ("attention_norm",), f"{hf}.attention.output.LayerNorm")
        yield from linear(ours + ("intermediate",), f"{hf}.intermediate.dense")
        yield from linear(ours + ("output",), f"{hf}.output.dense")
        yield from norm(ours + ("output_norm",), f"{hf}.output.LayerNorm")
    yield from linear(("bert", "pooler"), "bert.pooler.dense")
    yield from linear(("mlm", "transform"), "cls.predictions.transform.dense")
    yield from norm(("mlm", "transform_norm"), "cls.predictions.transform.LayerNorm")
    yield (("mlm", "bias"),), "cls.predictions.bias", False
    yield from linear(("nsp",), "cls.seq_relationship")


def _get(tree: Mapping, path: tuple):
    for key in path:
        tree = tree[key]
    return tree


def _pure_params(model_or_state) -> dict:
    if isinstance(model_or_state, BertForPreTraining):
        return nnx.to_pure_dict(nnx.state(model_or_state, nnx.Param))
    if isinstance(model_or_state, nnx.State):
        return nnx.to_pure_dict(model_or_state)
    if isinstance(model_or_state, Mapping):
        return dict(model_or_state)
    raise TypeError(
        f"expected a BertForPreTraining, an nnx.State or a dict of its parameters, "
        f"got {type(model_or_state).__name__}"
    )


def to_hf_state_dict(model_or_state, config: BertConfig | None = None) -> dict[str, np.ndarray]:
    """Our parameters (model, nnx.State or pure dict) -> {HF BertForPreTraining name: float32
    array}, or ModernBertForMaskedLM's for a config of the modern block (a model's own config
    counts; a state or dict without `config` is taken for BERT). The tied decoder
    (cls.predictions.decoder.*, decoder.weight) is left out, as transformers' own save does.
    `config`, when given, is checked against the parameters' layer count."""
    if config is None and isinstance(model_or_state, BertForPreTraining):
        config = model_or_state.config
    params = _pure_params(model_or_state)
    try:
        num_layers = len(params["bert"]["layers"])
    except (KeyError, TypeError) as e:
        raise cli.UserError(
            "the parameters have no bert/layers; are they a BertForPreTraining's?"
        ) from e
    if config is not None and config.num_hidden_layers != num_layers:
        raise cli.UserError(
            f"the parameters have {num_layers} layers, the config {config.num_hidden_layers}"
        )
    return _tensors(params, _bert_table(num_layers) if config is None else _names(config).table)


def encoder_state_dict(bert_params: Mapping, config: BertConfig) -> dict[str, np.ndarray]:
    """A BertModel's parameters alone (a task model's encoder) -> {HF name: float32 array}, the
    `bert.*` tensors to_hf_state_dict gives for the whole pre-training model."""
    rows = [row for row in _names(config).table if row[0][0][0] == "bert"]
    return _tensors({"bert": bert_params}, rows)


def _tensors(params: Mapping, table) -> dict[str, np.ndarray]:
    """{HF name: float32 array} of `params` for the rows of a names table."""
    out = {}
    for paths, name, transpose in table:
        parts = []
        for path in paths:
            try:
                value = np.asarray(_get(params, path), dtype=np.float32)
            except (KeyError, IndexError, TypeError) as e:
                raise cli.UserError(
                    f"the parameters lack {'/'.join(map(str, path))}; are they a "
                    "BertForPreTraining's of this config?"
                ) from e
            parts.append(value.T if transpose else value)
        out[name] = np.ascontiguousarray(parts[0] if len(parts) == 1 else np.concatenate(parts))
    return out


def _normalize_hf_name(name: str) -> str:
    """Checkpoint name variants -> transformers' current BertForPreTraining names."""
    if name.startswith(("embeddings.", "encoder.", "pooler.")):  # a bare BertModel
        name = "bert." + name
    for old, new in ((".gamma", ".weight"), (".beta", ".bias")):  # pre-2019 transformers
        if name.endswith(old) and "LayerNorm" in name:
            name = name[: -len(old)] + new
    return name


# --- Files -----------------------------------------------------------------------------------


def save_hf(
    model: BertForPreTraining,
    vocab_file: str | None,
    output_dir: str,
    *,
    do_lower_case: bool = tokenization.DO_LOWER_CASE,
    special_ids: Mapping[str, int | None] | None = None,
) -> None:
    """Writes a Hugging Face BertForPreTraining (or ModernBertForMaskedLM) directory, float32
    safetensors; `special_ids`: the tokenizer's 'pad', 'cls', 'sep' ids for a ModernBERT
    config.json (BERT's says pad 0, its vocabularies' [PAD])."""
    from safetensors.numpy import save_file

    os.makedirs(output_dir, exist_ok=True)
    tensors = to_hf_state_dict(model, model.config)
    hf_config = hf_config_from_bert(model.config, special_ids)  # before writing: it may refuse
    save_file(tensors, os.path.join(output_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(output_dir, "config.json"), "w") as f:
        json.dump(hf_config, f, indent=2, sort_keys=True)
    if vocab_file:
        save_tokenizer(vocab_file, output_dir, do_lower_case, model.config.max_position_embeddings)
        if architecture(model.config) == MODERNBERT and not vocab_file.endswith(".json"):
            modernbert.save_wordpiece_tokenizer_json(vocab_file, output_dir, do_lower_case)


# Files beside a tokenizer.json that transformers reads with it, copied along when present.
TOKENIZER_JSON_COMPANIONS = ("tokenizer_config.json", "special_tokens_map.json")


def check_exportable_vocab(vocab_file: str | None) -> None:
    """Refuses a SentencePiece vocabulary (tokenization.make_tokenizer's .model): transformers'
    BERT and ModernBERT classes have no tokenizer that reads one, and save_tokenizer writes a
    vocab.txt or a tokenizer.json only."""
    if vocab_file and vocab_file.endswith(".model"):
        raise cli.UserError(
            f"the vocabulary {vocab_file!r} is a SentencePiece model: a Hugging Face export "
            "holds a WordPiece vocab.txt or a tokenizer.json, and transformers' BERT and "
            "ModernBERT classes have no tokenizer that reads a SentencePiece model; a model "
            "trained on SentencePiece ids cannot be exported"
        )


def save_tokenizer(
    vocab_file: str, output_dir: str, do_lower_case: bool, model_max_length: int
) -> None:
    """The tokenizer's files into `output_dir` (a pre-training export and a fine-tuned task model
    alike): a vocab.txt with the tokenizer_config.json transformers' BertTokenizer loads it by,
    or a Hugging Face tokenizer.json passed through as it is, with its directory's
    TOKENIZER_JSON_COMPANIONS (else a tokenizer_config.json naming PreTrainedTokenizerFast).
    A SentencePiece model is refused (check_exportable_vocab): it was copied as a vocab.txt
    that transformers cannot read."""
    check_exportable_vocab(vocab_file)
    if not os.path.isfile(vocab_file):
        raise cli.UserError(
            f"vocab file {vocab_file!r} {cli.not_a_file(vocab_file)}; pass the vocab.txt "
            "the training data was tokenized with"
        )
    if vocab_file.endswith(".json"):
        _save_tokenizer_json(vocab_file, output_dir, model_max_length)
        return
    shutil.copyfile(vocab_file, os.path.join(output_dir, "vocab.txt"))
    with open(os.path.join(output_dir, "tokenizer_config.json"), "w") as f:
        json.dump(
            {
                "tokenizer_class": "BertTokenizer",
                "do_lower_case": do_lower_case,
                "model_max_length": model_max_length,
            },
            f,
            indent=2,
        )


def _save_tokenizer_json(path: str, output_dir: str, model_max_length: int) -> None:
    shutil.copyfile(path, os.path.join(output_dir, "tokenizer.json"))
    source = os.path.dirname(os.path.abspath(path))
    for name in TOKENIZER_JSON_COMPANIONS:
        if os.path.isfile(os.path.join(source, name)):
            shutil.copyfile(os.path.join(source, name), os.path.join(output_dir, name))
    if not os.path.isfile(os.path.join(output_dir, "tokenizer_config.json")):
        # Named, or AutoTokenizer loads a tokenizer with no [MASK] or [PAD] (fill-mask fails).
        roles = tokenizer_json.JsonTokenizer(path).special_tokens
        with open(os.path.join(output_dir, "tokenizer_config.json"), "w") as f:
            json.dump(
                {
                    "tokenizer_class": "PreTrainedTokenizerFast",
                    "model_max_length": model_max_length,
                    **{f"{role}_token": token for role, token in roles.items()},
                },
                f,
                indent=2,
            )


def load_hf(
    hf_dir: str, config: BertConfig | None = None, *, overrides: Mapping[str, Any] | None = None
) -> tuple[BertForPreTraining, ImportReport]:
    """A Hugging Face (or original TF) BERT directory -> (BertForPreTraining, ImportReport).
    `config` defaults to the directory's config.json / bert_config.json, with `overrides`
    (BertConfig fields) winning; pass one to change what the weights do not fix (dtype, dropout,
    remat). Weights the file lacks (the heads, the pooler) are freshly initialized."""
    config, params, report = _load(hf_dir, config, overrides)
    return model_from_params(config, params), report


def load_hf_params(
    hf_dir: str, config: BertConfig, *, shardings: Any = None
) -> tuple[dict, ImportReport]:
    """load_hf for a training run: (pure parameter dict, report), placed on `shardings`. The
    dict has the layout of checkpoints.restore_params' (nnx.to_pure_dict of the Params), so a run
    can start from a public checkpoint; `config` is the run's (its shapes must match the file)."""
    _, params, report = _load(hf_dir, config, None)
    try:
        changed = _other_settings(bert_config_from_hf(read_config(hf_dir)[1]), config)
    except (cli.UserError, ValueError, TypeError):  # the run's config decides (it always did)
        changed = []
    if changed:  # allowed (a longer context's RoPE base), but not silently
        cli.warn(
            f"{hf_dir} was trained with other model settings than this run's config.model, "
            f"which the run uses: {', '.join(changed)}"
        )
    return jax.device_put(params, shardings), report


def _other_settings(theirs: BertConfig, ours: BertConfig) -> list[str]:
    """The settings that change what the same weights compute (not their shapes) on which a
    directory's config and a run's differ, as 'field=theirs (this run: ours)'."""
    fields = ["layer_norm_eps"]
    if ours.position_embedding_type == "rope":
        fields += ["global_rope_theta", "local_rope_theta"]
    windows = lambda c: [c.attention_window(i) for i in range(c.num_hidden_layers)]
    out = [
        f"{f}={getattr(theirs, f)!r} (this run: {getattr(ours, f)!r})"
        for f in fields
        if getattr(theirs, f) != getattr(ours, f)
    ]
    if windows(theirs) != windows(ours):  # each layer's reach either side (None: global)
        out.append(f"attention windows {windows(theirs)} (this run: {windows(ours)})")
    return out


def _load(
    hf_dir: str, config: BertConfig | None, overrides: Mapping[str, Any] | None
) -> tuple[BertConfig, dict, ImportReport]:
    """(config, parameters, report): the config file read once, the names decided once (a
    wrong block is refused before the weights are read), then the weights mapped."""
    if not os.path.isdir(hf_dir):
        raise CheckpointError(f"{hf_dir!r} is not a directory; pass a Hugging Face model directory")
    path, hf_config = read_config(hf_dir)
    run_config = config is not None  # a training run's own config.model, not the directory's
    if config is None:
        try:
            config = bert_config_from_hf(hf_config, **(overrides or {}))
        except (ValueError, TypeError) as e:  # a field of the wrong kind, a missing one
            text = " ".join(str(e).split())
            raise CheckpointError(text if path in text else f"{path}: {text}") from None
    names = _names(config)
    theirs = "ModernBERT" if hf_config.get("model_type") == modernbert.MODEL_TYPE else "BERT"
    if names.label != theirs:  # a run's own config: its block must be the directory's
        raise CheckpointError(
            f"{hf_dir} holds a {theirs} model but the config.model given is {names.label}'s "
            f"block: use a config of the same block (configs/{theirs.lower()}_base.py, ...)"
        )
    tensors, source = read_hf_weights(hf_dir)
    # The weights mapped; heads or a pooler the file lacks are freshly initialized.
    by_name = {names.normalize(k): v for k, v in tensors.items()}
    ours = [name for _, name, _ in names.table]
    missing = [name for name in ours if name not in by_name]
    initialized = [name for name in missing if not name.startswith(names.body)]

    build = lambda: BertForPreTraining(config, rngs=nnx.Rngs(0))
    # A random init only for weights the file lacks (fresh heads), else shapes only: on CPU the
    # init's small programs take longer to compile than the whole import.
    params = nnx.to_pure_dict(
        nnx.state(build() if initialized else nnx.eval_shape(build), nnx.Param)
    )
    for paths, name, transpose in names.table:
        if name not in by_name:
            continue
        value = np.asarray(by_name[name], dtype=np.float32)
        shapes = [tuple(_get(params, path).shape) for path in paths]
        expected = [s[::-1] if transpose else s for s in shapes]  # torch's layout, each part
        whole = (sum(s[0] for s in expected), *expected[0][1:])
        if value.shape != whole:
            hint = "does its config.json describe this checkpoint?"
            if run_config:
                hint = _run_config_hint(hf_config, config, path)
            raise CheckpointError(
                f"{source}: {name} has shape {value.shape}, the config needs {whole}; {hint}"
            )
        parts = np.split(value, np.cumsum([s[0] for s in expected])[:-1])  # one per path
        for path, part in zip(paths, parts):
            _get(params, path[:-1])[path[-1]] = part.T if transpose else part
    absent_body = [name for name in missing if name.startswith(names.body)]
    if absent_body:
        more = " ..." if len(absent_body) > 4 else ""
        raise CheckpointError(
            f"{source} lacks encoder weights {absent_body[:4]}{more} "
            f"({len(absent_body)} in all): not a {names.label} "
            "checkpoint, or num_hidden_layers in its config is wrong"
        )
    # The tied decoder is the word embeddings and the MLM bias again; anything else
    # (position_ids buffers, optimizer slots) has no counterpart here.
    untied = _untied_decoder(by_name)
    if untied:  # tie_word_embeddings false: our MLM head always uses the word embeddings
        cli.warn(
            f"{source}: {untied} is not the word embeddings (tie_word_embeddings false); this "
            "model's MLM head ties them, so its MLM logits differ from transformers' (the "
            "encoder's outputs and fine-tuning are unaffected): it is not used"
        )
    unused = sorted(set(by_name) - set(ours) - (names.tied - {untied}))
    # Weights, not buffers (old files' bert.embeddings.position_ids).
    dropped = [
        name
        for name in unused
        if name.startswith(names.body) and name.endswith((".weight", ".bias"))
    ]
    if dropped:  # transformers warns too: a model cut short by its config is easy to miss
        cli.warn(
            f"{source} holds {len(dropped)} encoder weights its config leaves out (e.g. "
            f"{dropped[0]}): the model is built as the config says (num_hidden_layers="
            f"{config.num_hidden_layers}), without them"
        )
    return config, params, ImportReport(source=source, initialized=initialized, unused=unused)


def _run_config_hint(hf_config: Mapping[str, Any], config: BertConfig, path: str) -> str:
    """What to change when a run's config.model does not fit a directory's weights: the shape
    fields on which it differs from the directory's config.json (the file is not at fault)."""
    try:
        theirs = bert_config_from_hf(hf_config)
    except (cli.UserError, ValueError, TypeError):
        theirs = None
    shaping = [f for f in SHAPE_FIELDS if f != "max_position_embeddings"]  # RoPE: no table
    if config.position_embedding_type == "absolute":
        shaping.append("max_position_embeddings")
    fields = [
        f"{f}={getattr(config, f)} ({path}: {getattr(theirs, f)})"
        for f in shaping
        if theirs is not None and getattr(config, f) != getattr(theirs, f)
    ]
    if not fields:
        return "this run's config.model does not describe the directory's model"
    vocab = (
        "; with config.model.vocab_size=0 it is the data's vocabulary's: tokenize the data "
        "with the model's tokenizer"
        if any(f.startswith("vocab_size=") for f in fields)
        else ""
    )
    return f"this run's config.model has {', '.join(fields)}{vocab}"


# A tied decoder's name -> the word embeddings it repeats (BERT's, ModernBERT's).
_DECODER_OF = {
    "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
    "decoder.weight": "model.embeddings.tok_embeddings.weight",
}


def _untied_decoder(by_name: Mapping[str, np.ndarray]) -> str | None:
    """The name of a decoder weight the file holds apart from its word embeddings, else None."""
    for decoder, embeddings in _DECODER_OF.items():
        if decoder in by_name and embeddings in by_name:
            if not np.array_equal(by_name[decoder], by_name[embeddings]):
                return decoder
    return None
