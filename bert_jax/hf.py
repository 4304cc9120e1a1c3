"""Our BERT parameters <-> Hugging Face BertForPreTraining (and the original TensorFlow BERT).

Export writes a directory that `transformers.BertForPreTraining.from_pretrained` loads with no
missing or unexpected keys: config.json, model.safetensors (float32, the same tensor names and
set as transformers' own save: the tied decoder is left out), vocab.txt, tokenizer_config.json.

Import reads a Hugging Face BERT directory (BertModel or BertForPreTraining; model.safetensors,
a sharded model.safetensors.index.json, or pytorch_model.bin) or Google's original TensorFlow
checkpoint directory (bert_config.json + bert_model.ckpt.*; needs TensorFlow installed). Weights
the file lacks (the MLM/NSP heads of a BertModel, the pooler) are freshly initialized and named
in the report, so pre-training can continue from any public BERT.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import pickle
import shutil
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
from flax import nnx

from bert_jax import cli, tokenization
from bert_jax.model import BertConfig, BertForPreTraining, model_from_params

# config.json fields that are BertConfig fields under the same name.
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
_EXACT_GELU = ("gelu", "gelu_python")  # transformers' names for the erf GELU
_BODY_PREFIXES = ("bert.embeddings.", "bert.encoder.")  # must come from the file; the rest may not


class CheckpointError(cli.UserError):
    """A checkpoint that cannot be imported; the message says what to fix."""


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


def bert_config_from_hf(hf: Mapping[str, Any], **overrides) -> BertConfig:
    """A config.json (or Google's bert_config.json) dict -> BertConfig; `overrides` win."""
    act = hf.get("hidden_act", "gelu")
    if act not in _EXACT_GELU:
        raise CheckpointError(
            f"hidden_act {act!r} is not supported: this BERT uses the exact (erf) "
            f"GELU, transformers' {_EXACT_GELU}"
        )
    pos_type = hf.get("position_embedding_type", "absolute")
    if pos_type != "absolute":
        raise CheckpointError(
            f"position_embedding_type {pos_type!r} is not supported (only 'absolute')"
        )
    missing = [f for f in _SHARED_FIELDS if f not in hf and f != "layer_norm_eps"]
    if missing:
        raise CheckpointError(f"the BERT config lacks {missing}; is this a BERT config.json?")
    values = {f: hf[f] for f in _SHARED_FIELDS if f in hf}  # bert_config.json has no eps: 1e-12
    return BertConfig(**{**values, **overrides})


def hf_config_from_bert(config: BertConfig) -> dict[str, Any]:
    """BertConfig -> the config.json of a transformers BertForPreTraining."""
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


def _param_table(num_layers: int) -> Iterator[tuple[tuple, str, bool]]:
    """(our parameter path, Hugging Face name, transpose?) for every parameter we have."""

    def linear(ours, hf):  # our kernel is [in, out], torch's weight [out, in]
        yield ours + ("kernel",), hf + ".weight", True
        yield ours + ("bias",), hf + ".bias", False

    def norm(ours, hf):
        yield ours + ("scale",), hf + ".weight", False
        yield ours + ("bias",), hf + ".bias", False

    emb = ("bert", "embeddings")
    for name in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
        yield emb + (name, "embedding"), f"bert.embeddings.{name}.weight", False
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
    yield ("mlm", "bias"), "cls.predictions.bias", False
    yield from linear(("nsp",), "cls.seq_relationship")


def _get(tree: Mapping, path: tuple):
    for key in path:
        tree = tree[key]
    return tree


def _set(tree: dict, path: tuple, value) -> None:
    for key in path[:-1]:
        tree = tree[key]
    tree[path[-1]] = value


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
    array}.

    The tied decoder (cls.predictions.decoder.*) is left out, as transformers' own save does.
    `config`, when given, is checked against the parameters' layer count.
    """
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
    out = {}
    for path, name, transpose in _param_table(num_layers):
        try:
            value = np.asarray(_get(params, path), dtype=np.float32)
        except (KeyError, IndexError, TypeError) as e:
            raise cli.UserError(
                f"the parameters lack {'/'.join(map(str, path))}; are they a BertForPreTraining's?"
            ) from e
        out[name] = np.ascontiguousarray(value.T if transpose else value)
    return out


def _normalize_hf_name(name: str) -> str:
    """Checkpoint name variants -> transformers' current BertForPreTraining names."""
    if name.startswith(("embeddings.", "encoder.", "pooler.")):  # a bare BertModel
        name = "bert." + name
    for old, new in ((".gamma", ".weight"), (".beta", ".bias")):  # pre-2019 transformers
        if name.endswith(old) and "LayerNorm" in name:
            name = name[: -len(old)] + new
    return name


def from_hf_state_dict(
    tensors: Mapping[str, Any], config: BertConfig, *, seed: int = 0, source: str = "a state dict"
) -> tuple[BertForPreTraining, ImportReport]:
    """{HF name: array} -> (BertForPreTraining, report); absent heads/pooler are initialized."""
    by_name = {_normalize_hf_name(k): v for k, v in tensors.items()}
    # Shapes first (no random init: on CPU its small programs take longer to compile than the
    # whole import); a real init only when the file lacks some weights (fresh heads).
    abstract = nnx.eval_shape(lambda: BertForPreTraining(config, rngs=nnx.Rngs(seed)))
    params = nnx.to_pure_dict(nnx.state(abstract, nnx.Param))
    loaded, initialized, absent_body = {}, [], []
    for path, name, transpose in _param_table(config.num_hidden_layers):
        if name not in by_name:
            (absent_body if name.startswith(_BODY_PREFIXES) else initialized).append(name)
            continue
        value = np.asarray(by_name[name], dtype=np.float32)
        ours = tuple(_get(params, path).shape)
        expected = ours[::-1] if transpose else ours
        if value.shape != expected:
            raise CheckpointError(
                f"{source}: {name} has shape {value.shape}, the config needs "
                f"{expected}; does its config.json describe this checkpoint?"
            )
        loaded[name] = (path, value.T if transpose else value)
    if absent_body:
        more = " ..." if len(absent_body) > 4 else ""
        raise CheckpointError(
            f"{source} lacks encoder weights {absent_body[:4]}{more} "
            f"({len(absent_body)} in all): not a BERT checkpoint, or "
            "num_hidden_layers in its config is wrong"
        )
    # The tied decoder is the word embeddings and cls.predictions.bias again; anything else
    # (position_ids buffers, optimizer slots) has no counterpart here.
    tied = {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}
    unused = sorted(k for k in by_name if k not in loaded and k not in tied)
    report = ImportReport(source=source, initialized=initialized, unused=unused)
    if not initialized:
        for path, value in loaded.values():
            _set(params, path, value)
        return model_from_params(config, params), report
    model = BertForPreTraining(config, rngs=nnx.Rngs(seed))
    state = nnx.state(model, nnx.Param)
    params = nnx.to_pure_dict(state)
    for path, value in loaded.values():
        _set(params, path, value)
    nnx.replace_by_pure_dict(state, params)
    nnx.update(model, state)
    return model, report


# --- Files -----------------------------------------------------------------------------------


def save_hf(
    model: BertForPreTraining,
    vocab_file: str | None,
    output_dir: str,
    *,
    do_lower_case: bool = tokenization.DO_LOWER_CASE,
) -> None:
    """Writes a Hugging Face BertForPreTraining directory (float32 safetensors)."""
    from safetensors.numpy import save_file

    os.makedirs(output_dir, exist_ok=True)
    tensors = to_hf_state_dict(model)
    save_file(tensors, os.path.join(output_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(output_dir, "config.json"), "w") as f:
        json.dump(hf_config_from_bert(model.config), f, indent=2, sort_keys=True)
    if vocab_file:
        save_tokenizer(vocab_file, output_dir, do_lower_case, model.config.max_position_embeddings)


def save_tokenizer(
    vocab_file: str, output_dir: str, do_lower_case: bool, model_max_length: int
) -> None:
    """vocab.txt and tokenizer_config.json, what transformers' BertTokenizer loads, into
    `output_dir` (a pre-training export and a fine-tuned task model alike)."""
    if not os.path.isfile(vocab_file):
        raise cli.UserError(
            f"vocab file {vocab_file!r} {cli.not_a_file(vocab_file)}; pass the vocab.txt "
            "the training data was tokenized with"
        )
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


def read_json(path: str) -> dict:
    """A JSON object from a model directory (config.json, an index, tokenizer files); an error
    names the file and what is wrong with it."""
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(
            f"{path} is not valid JSON ({e}): the file is damaged or cut short; copy it again "
            "from the model's source"
        ) from None
    except OSError as e:  # a file the model directory names but lacks, or cannot be read
        raise CheckpointError(cli.message(e)) from e
    if not isinstance(value, dict):
        raise CheckpointError(f"{path} holds a JSON {type(value).__name__}, not an object")
    return value


def read_hf_config(hf_dir: str) -> dict:
    return read_json(_config_path(hf_dir))


# A model directory's config file: Hugging Face's, else Google's original TensorFlow BERT's.
CONFIG_FILES = ("config.json", "bert_config.json")


def _config_path(hf_dir: str) -> str:
    for name in CONFIG_FILES:
        path = os.path.join(hf_dir, name)
        if os.path.isfile(path):
            return path
    raise CheckpointError(
        f"{hf_dir!r} has no config.json (Hugging Face) or bert_config.json "
        "(original TensorFlow BERT); pass the model's directory"
    )


def load_bert_config(hf_dir: str, **overrides) -> BertConfig:
    """The BertConfig of a model directory's config.json; an error names the file."""
    path = _config_path(hf_dir)
    try:
        return bert_config_from_hf(read_json(path), **overrides)
    except (ValueError, TypeError) as e:  # a field of the wrong kind, a missing one
        text = " ".join(str(e).split())
        raise CheckpointError(text if path in text else f"{path}: {text}") from None


def _read_safetensors(paths: list[str]) -> dict[str, np.ndarray]:
    from safetensors import safe_open

    out = {}
    for path in paths:
        try:
            with safe_open(path, framework="numpy") as f:
                for key in f.keys():
                    out[key] = f.get_tensor(key)
        except OSError as e:  # a weight file the index names but the directory lacks
            raise CheckpointError(cli.message(e)) from e
        except ValueError:
            raise  # one of ours
        except Exception as e:  # safetensors' SafetensorError: a cut or damaged header or data
            raise CheckpointError(
                f"{path} is not a readable safetensors file ({' '.join(str(e).split())}): it is "
                "damaged or cut short; copy it again from the model's source"
            ) from None
    return out


def _read_torch_bin(path: str) -> dict[str, np.ndarray]:
    try:
        import torch
    except ImportError as e:
        raise cli.UserError(
            f"reading {path} needs PyTorch: pip install torch (the CPU build is "
            "enough), or convert the checkpoint to model.safetensors"
        ) from e
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, AttributeError) as e:
        # weights_only refuses pickles that would run code (or name unknown classes); a cut or
        # non-zip file fails to open. Neither is a bug of ours.
        raise CheckpointError(
            f"{path} is not a PyTorch state dict that loads safely ({_first_line(e)}): it is "
            "damaged, or pickles objects other than tensors; convert it to model.safetensors "
            "where it was made"
        ) from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} holds a {type(state).__name__}, not a state dict")
    return {k: v.float().numpy() for k, v in state.items() if hasattr(v, "float")}


def _tf_to_hf_name(name: str) -> tuple[str, bool] | None:
    """Original TF BERT variable name -> (HF name, transpose?); None for optimizer slots."""
    parts = name.split("/")
    if (
        parts[-1] in ("adam_m", "adam_v", "AdamWeightDecayOptimizer", "AdamWeightDecayOptimizer_1")
        or name == "global_step"
    ):
        return None
    out, transpose = [], False
    for part in parts:
        if part.startswith("layer_") and part[6:].isdigit():
            out += ["layer", part[6:]]
        elif part in ("kernel", "gamma", "output_weights"):
            out.append("weight")
            transpose = (
                part == "kernel"
            )  # TF dense kernels are [in, out]; output_weights is [out, in]
        elif part in ("beta", "output_bias"):
            out.append("bias")
        else:
            out.append(part)
    hf = ".".join(out)
    if hf.endswith("_embeddings"):
        hf += ".weight"
    return hf, transpose


def _read_tf_checkpoint(prefix: str) -> dict[str, np.ndarray]:
    try:
        import tensorflow as tf
    except ImportError as e:
        raise cli.UserError(
            f"{prefix} is an original TensorFlow BERT checkpoint; reading it needs "
            "TensorFlow: pip install tensorflow-cpu (or convert it to Hugging Face "
            "format where TensorFlow is installed)"
        ) from e
    reader = tf.train.load_checkpoint(prefix)
    out = {}
    for name in reader.get_variable_to_shape_map():
        mapped = _tf_to_hf_name(name)
        if mapped is None:
            continue
        hf_name, transpose = mapped
        value = reader.get_tensor(name)
        out[hf_name] = value.T if transpose else value
    return out


def indexed_files(index: str, hf_dir: str) -> list[str]:
    """The weight files a sharded checkpoint's index (its weight_map) names, each checked to lie
    inside `hf_dir`: an index must not send a reader elsewhere (an absolute path, `..`)."""
    weight_map = read_json(index).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index} has no weight_map object naming the weight files")
    root = os.path.realpath(hf_dir)
    out = []
    for name in sorted(set(weight_map.values())):
        target = os.path.realpath(os.path.join(hf_dir, name)) if isinstance(name, str) else ""
        if (
            not isinstance(name, str)
            or os.path.isabs(name)
            or os.path.commonpath([root, target]) != root
        ):
            raise CheckpointError(
                f"{index} names the weight file {name!r}, outside {hf_dir!r}: an index may only "
                "name files in its own directory"
            )
        out.append(os.path.join(hf_dir, name))
    return out


def _first_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:300]


def read_hf_weights(hf_dir: str) -> tuple[dict[str, np.ndarray], str]:
    """All weight tensors of a model directory, HF-named, and a description of what was read."""

    def path(name):
        return os.path.join(hf_dir, name)

    if os.path.isfile(path("model.safetensors")):
        return _read_safetensors([path("model.safetensors")]), path("model.safetensors")
    if os.path.isfile(path("model.safetensors.index.json")):
        index = path("model.safetensors.index.json")
        return _read_safetensors(indexed_files(index, hf_dir)), index
    if os.path.isfile(path("pytorch_model.bin")):
        return _read_torch_bin(path("pytorch_model.bin")), path("pytorch_model.bin")
    indexes = sorted(glob.glob(path("*.ckpt*.index")))
    if len(indexes) == 1:
        prefix = indexes[0][: -len(".index")]
        return _read_tf_checkpoint(prefix), prefix + " (TensorFlow)"
    if len(indexes) > 1:
        raise CheckpointError(
            f"{hf_dir!r} holds several TensorFlow checkpoints {indexes}; keep one"
        )
    listing = sorted(os.listdir(hf_dir)) if os.path.isdir(hf_dir) else "(not a directory)"
    raise CheckpointError(
        f"no weights in {hf_dir!r}: expected model.safetensors, "
        f"model.safetensors.index.json, pytorch_model.bin or a TensorFlow "
        f"bert_model.ckpt; found {listing}"
    )


def load_hf(
    hf_dir: str, config: BertConfig | None = None, *, seed: int = 0
) -> tuple[BertForPreTraining, ImportReport]:
    """A Hugging Face (or original TF) BERT directory -> (BertForPreTraining, ImportReport).

    `config` defaults to the directory's config.json / bert_config.json; pass one to change what
    the weights do not fix (dtype, dropout, remat). `seed` initializes weights the file lacks.
    """
    if not os.path.isdir(hf_dir):
        raise CheckpointError(f"{hf_dir!r} is not a directory; pass a Hugging Face model directory")
    if config is None:
        config = load_bert_config(hf_dir)
    tensors, source = read_hf_weights(hf_dir)
    return from_hf_state_dict(tensors, config, seed=seed, source=source)


def load_hf_params(
    hf_dir: str, config: BertConfig, *, seed: int = 0, shardings: Any = None
) -> tuple[dict, ImportReport]:
    """load_hf for a training run: (pure parameter dict, report), placed on `shardings`.

    The dict has the layout of checkpointing.restore_params' (nnx.to_pure_dict of the Params), so
    a run can start from a public checkpoint; `config` is the run's (its shapes must match the
    file).
    """
    import jax

    model, report = load_hf(hf_dir, config, seed=seed)
    params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    if shardings is not None:
        params = jax.device_put(params, shardings)
    return params, report
