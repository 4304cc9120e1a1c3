"""Hugging Face directories written and read: our parameters as a BertForPreTraining (also read
from Google's original TensorFlow BERT) or a ModernBertForMaskedLM (names: architectures.py).
Import initializes the weights a file lacks (a BertModel's heads) and names them in its report.
docs/model.md, "Export a training run to Hugging Face" and "Import a public BERT".
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from flax import nnx

from bert_jax import cli
from bert_jax.hf.architectures import (
    BERT,
    MODERNBERT,
    architecture,
    bert_config_from_hf,
    hf_config_from_bert,
    of_hf_config,
)
from bert_jax.hf.files import CheckpointError, read_config, read_hf_weights
from bert_jax.model.encoder import (
    SHAPE_FIELDS,
    BertConfig,
    BertForPreTraining,
    model_from_params,
)
from bert_jax.text import tokenization, tokenizer_json

# Files beside a tokenizer.json that transformers reads with it, copied along when present.
TOKENIZER_JSON_COMPANIONS = ("tokenizer_config.json", "special_tokens_map.json")


@dataclasses.dataclass
class ImportReport:
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
    """Our parameters (model, nnx.State or pure dict) -> {HF name: float32 array} of the class of
    `config` (or the model's; BERT without one), less the tied decoder, as transformers saves."""
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
    arch = BERT if config is None else architecture(config)
    return _tensors(params, arch.rows(config, num_layers))


def encoder_state_dict(bert_params: Mapping, config: BertConfig, head=None) -> dict:
    """A BertModel's parameters alone (a task model's encoder) -> to_hf_state_dict's `bert.*`;
    with `head` (a ModernBERT task model's, the MLM head's layout) its `head.*` too."""
    table = architecture(config).rows(config, config.num_hidden_layers)
    rows = [row for row in table if row[0][0][0] == "bert" or (head and row[1].startswith("head."))]
    return _tensors({"bert": bert_params, "mlm": head}, rows)


def _tensors(params: Mapping, table) -> dict[str, np.ndarray]:
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


def save_hf(
    model: BertForPreTraining,
    vocab_file: str | None,
    output_dir: str,
    *,
    do_lower_case: bool = tokenization.DO_LOWER_CASE,
    special_ids: Mapping[str, int | None] | None = None,
) -> None:
    """Writes a Hugging Face model directory; `special_ids`: the tokenizer's 'pad', 'cls', 'sep'
    ids for config.json."""
    tensors = to_hf_state_dict(model, model.config)
    hf_config = hf_config_from_bert(model.config, special_ids)  # before writing: it may refuse
    write_hf(output_dir, tensors, hf_config, vocab_file, do_lower_case)


def write_hf(output_dir: str, tensors, hf_config: dict, vocab_file, do_lower_case) -> None:
    """model.safetensors, config.json and, with a `vocab_file`, save_tokenizer's files."""
    from safetensors.numpy import save_file

    os.makedirs(output_dir, exist_ok=True)
    save_file(tensors, os.path.join(output_dir, "model.safetensors"), metadata={"format": "pt"})
    _write_json(os.path.join(output_dir, "config.json"), hf_config, sort_keys=True)
    if vocab_file:
        save_tokenizer(vocab_file, output_dir, do_lower_case, hf_config["max_position_embeddings"])
    if vocab_file and of_hf_config(hf_config) == MODERNBERT and not vocab_file.endswith(".json"):
        _save_wordpiece_tokenizer_json(vocab_file, output_dir, do_lower_case)


def _write_json(path: str, value: dict, **kwargs) -> None:
    with open(path, "w") as f:
        json.dump(value, f, indent=2, **kwargs)


def check_exportable_vocab(vocab_file: str | None) -> None:
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
    """The tokenizer's files into `output_dir`: a vocab.txt with a tokenizer_config.json for
    BertTokenizer, or a tokenizer.json with its TOKENIZER_JSON_COMPANIONS (or a config)."""
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
    config = {"tokenizer_class": "BertTokenizer", "do_lower_case": do_lower_case}
    config["model_max_length"] = model_max_length
    _write_json(os.path.join(output_dir, "tokenizer_config.json"), config)


def _save_tokenizer_json(path: str, output_dir: str, model_max_length: int) -> None:
    shutil.copyfile(path, os.path.join(output_dir, "tokenizer.json"))
    source = os.path.dirname(os.path.abspath(path))
    for name in TOKENIZER_JSON_COMPANIONS:
        if os.path.isfile(os.path.join(source, name)):
            shutil.copyfile(os.path.join(source, name), os.path.join(output_dir, name))
    if not os.path.isfile(os.path.join(output_dir, "tokenizer_config.json")):
        # Named, or AutoTokenizer loads a tokenizer with no [MASK] or [PAD] (fill-mask fails).
        roles = tokenizer_json.JsonTokenizer(path).special_tokens
        config = dict(tokenizer_class="PreTrainedTokenizerFast", model_max_length=model_max_length)
        config.update({f"{role}_token": token for role, token in roles.items()})
        _write_json(os.path.join(output_dir, "tokenizer_config.json"), config)


def _save_wordpiece_tokenizer_json(vocab_file: str, output_dir: str, do_lower_case: bool) -> None:
    """A vocab.txt's tokenizer as tokenizer.json too, the special tokens' roles added to the
    tokenizer_config.json: transformers 5 reads a modernbert directory's tokenizer.json alone."""
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
    _write_json(path, config)


def load_hf(
    hf_dir: str, config: BertConfig | None = None, *, overrides: Mapping[str, Any] | None = None
) -> tuple[BertForPreTraining, ImportReport]:
    """A Hugging Face (or original TF) BERT directory -> (BertForPreTraining, ImportReport).
    `config` defaults to the directory's, with `overrides` (BertConfig fields) winning."""
    config, params, report, _ = read_hf(hf_dir, config, overrides)
    return model_from_params(config, params), report


def load_hf_params(
    hf_dir: str, config: BertConfig, *, shardings: Any = None
) -> tuple[dict, ImportReport]:
    """load_hf for a training run with its own `config`: (pure parameter dict, as
    checkpoints.restore_params lays it out, report), placed on `shardings`."""
    _, params, report, hf_config = read_hf(hf_dir, config, None)
    try:
        changed = _other_settings(bert_config_from_hf(hf_config), config)
    except (cli.UserError, ValueError, TypeError):  # the run's config decides (it always did)
        changed = []
    if changed:  # allowed (a longer context's RoPE base), but not silently
        cli.warn(
            f"{hf_dir} was trained with other model settings than this run's config.model, "
            f"which the run uses: {', '.join(changed)}"
        )
    return jax.device_put(params, shardings), report


def _other_settings(theirs: BertConfig, ours: BertConfig) -> list[str]:
    """'field=theirs (this run: ours)' for settings (not shapes) that change what the weights do."""
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


def read_hf(
    hf_dir: str, config: BertConfig | None, overrides: Mapping[str, Any] | None
) -> tuple[BertConfig, dict, ImportReport, dict]:
    """load_hf with no model built: (config, its pure parameters, report, the config file's dict);
    a wrong block is refused before the weights are read."""
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
    try:  # a run's own config too: the directory must hold a model we read (not RoBERTa's)
        theirs = of_hf_config(hf_config).label
    except CheckpointError as e:
        raise CheckpointError(f"{path}: {e}") from None
    arch = architecture(config)
    if arch.label != theirs:  # a run's own config: its block must be the directory's
        raise CheckpointError(
            f"{hf_dir} holds a {theirs} model but the config.model given is {arch.label}'s "
            f"block: use a config of the same block (configs/{theirs.lower()}_base.py, ...)"
        )
    tensors, source = read_hf_weights(hf_dir)
    by_name = {arch.normalize(k): v for k, v in tensors.items()}
    for alias, name in arch.aliases.items():  # a tied weight saved under its other name
        if name not in by_name and alias in by_name:
            by_name[name] = by_name[alias]
    table = list(arch.rows(config, config.num_hidden_layers))
    ours = [name for _, name, _ in table]
    missing = [name for name in ours if name not in by_name]
    initialized = [name for name in missing if not name.startswith(arch.body)]

    build = lambda: BertForPreTraining(config, rngs=nnx.Rngs(0))
    # A random init only for weights the file lacks (fresh heads), else shapes only: on CPU the
    # init's small programs take longer to compile than the whole import.
    params = nnx.to_pure_dict(
        nnx.state(build() if initialized else nnx.eval_shape(build), nnx.Param)
    )
    for paths, name, transpose in table:
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
    absent_body = [name for name in missing if name.startswith(arch.body)]
    if absent_body:
        more = " ..." if len(absent_body) > 4 else ""
        raise CheckpointError(
            f"{source} lacks encoder weights {absent_body[:4]}{more} "
            f"({len(absent_body)} in all): not a {arch.label} "
            "checkpoint, or num_hidden_layers in its config is wrong"
        )
    # The tied decoder repeats the word embeddings (there: the body is) and the MLM bias.
    decoder, words = arch.decoder
    tied = arch.tied
    if decoder in by_name and not np.array_equal(by_name[decoder], by_name[words]):
        cli.warn(
            f"{source}: {decoder} is not the word embeddings (tie_word_embeddings false); this "
            "model's MLM head ties them, so its MLM logits differ from transformers' (the "
            "encoder's outputs and fine-tuning are unaffected): it is not used"
        )
        tied -= {decoder}
    unused = sorted(set(by_name) - set(ours) - tied)
    # Weights, not buffers (old files' bert.embeddings.position_ids).
    dropped = [n for n in unused if n.startswith(arch.body) and n.endswith((".weight", ".bias"))]
    if dropped:  # transformers warns too: a model cut short by its config is easy to miss
        cli.warn(
            f"{source} holds {len(dropped)} encoder weights its config leaves out (e.g. "
            f"{dropped[0]}): the model is built as the config says (num_hidden_layers="
            f"{config.num_hidden_layers}), without them"
        )
    return config, params, ImportReport(source, initialized, unused), hf_config


def _run_config_hint(hf_config: Mapping[str, Any], config: BertConfig, path: str) -> str:
    """What to change when a run's config.model does not fit a directory's weights: the shape
    fields on which it differs from the directory's config.json."""
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
