"""A Hugging Face (or original TensorFlow BERT) model directory's JSON files and weights read
back, each damaged or missing file one CheckpointError naming it.
"""

from __future__ import annotations

import glob
import importlib
import json
import os
import pickle

import numpy as np

from bert_jax import cli

# A model directory's config file: Hugging Face's, else Google's original TensorFlow BERT's.
CONFIG_FILES = ("config.json", "bert_config.json")


class CheckpointError(cli.UserError):
    """A checkpoint that cannot be imported; the message says what to fix."""


def read_json(path: str) -> dict:
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


def read_config(hf_dir: str) -> tuple[str, dict]:
    """(path, contents) of a model directory's config file, the first of CONFIG_FILES it has."""
    for name in CONFIG_FILES:
        path = os.path.join(hf_dir, name)
        if os.path.isfile(path):
            return path, read_json(path)
    raise CheckpointError(
        f"{hf_dir!r} has no config.json (Hugging Face) or bert_config.json "
        "(original TensorFlow BERT); pass the model's directory"
    )


def _read_safetensors(paths: list[str]) -> dict[str, np.ndarray]:
    from safetensors import safe_open

    out = {}
    for path in paths:
        try:
            with safe_open(path, framework="numpy") as f:
                for key in f.keys():
                    out[key] = f.get_tensor(key)
        except OSError as e:  # unreadable (permissions, a vanished file)
            raise CheckpointError(cli.message(e)) from e
        except ValueError:
            raise  # one of ours
        except Exception as e:  # safetensors' SafetensorError: a cut or damaged header or data
            raise CheckpointError(
                f"{path} is not a readable safetensors file ({' '.join(str(e).split())}): it is "
                "damaged or cut short; copy it again from the model's source"
            ) from None
    return out


def _import(module: str, missing: str):
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise cli.UserError(missing) from e


def _read_torch_bin(paths: list[str]) -> dict[str, np.ndarray]:
    out = {}
    for path in paths:
        torch = _import(
            "torch",
            f"reading {path} needs PyTorch: pip install torch (the CPU build is enough), or "
            "convert the checkpoint to model.safetensors",
        )
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError, AttributeError) as e:
            # weights_only refuses pickles that would run code; a cut file fails to open.
            why = " ".join(str(e).split())[:300]
            raise CheckpointError(
                f"{path} is not a PyTorch state dict that loads safely ({why}): it is "
                "damaged, or pickles objects other than tensors; convert it to model.safetensors "
                "where it was made"
            ) from None
        if not isinstance(state, dict):
            raise CheckpointError(f"{path} holds a {type(state).__name__}, not a state dict")
        out.update({k: v.float().numpy() for k, v in state.items() if hasattr(v, "float")})
    return out


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
            transpose = part == "kernel"  # TF kernels are [in, out]; output_weights [out, in]
        elif part in ("beta", "output_bias"):
            out.append("bias")
        else:
            out.append(part)
    hf = ".".join(out)
    if hf.endswith("_embeddings"):
        hf += ".weight"
    return hf, transpose


def _read_tf_checkpoint(prefix: str) -> dict[str, np.ndarray]:
    tf = _import(
        "tensorflow",
        f"{prefix} is an original TensorFlow BERT checkpoint; reading it needs TensorFlow: pip "
        "install tensorflow-cpu (or convert it to Hugging Face format where TensorFlow is "
        "installed)",
    )
    reader = tf.train.load_checkpoint(prefix)
    out = {}
    for name in reader.get_variable_to_shape_map():
        mapped = _tf_to_hf_name(name)
        if mapped is not None:
            hf_name, transpose = mapped
            value = reader.get_tensor(name)
            out[hf_name] = value.T if transpose else value
    return out


def indexed_files(index: str, hf_dir: str) -> list[str]:
    """The weight files a sharded checkpoint's index names, each checked to be there, inside
    `hf_dir` (an index must not send a reader elsewhere)."""
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
        shard = os.path.join(hf_dir, name)
        if not os.path.isfile(shard):
            raise CheckpointError(f"{index} names {shard}, which is not in the directory")
        out.append(shard)
    return out


def read_hf_weights(hf_dir: str) -> tuple[dict[str, np.ndarray], str]:
    """(All weight tensors of a model directory, HF-named; what was read): the first of these
    files it holds, else Google's TensorFlow checkpoint."""
    for name, read in (
        ("model.safetensors", _read_safetensors),
        ("model.safetensors.index.json", _read_safetensors),
        ("pytorch_model.bin", _read_torch_bin),
        ("pytorch_model.bin.index.json", _read_torch_bin),  # transformers 4's sharded save
    ):
        path = os.path.join(hf_dir, name)
        if os.path.isfile(path):
            return read(indexed_files(path, hf_dir) if name.endswith(".json") else [path]), path
    indexes = sorted(glob.glob(os.path.join(hf_dir, "*.ckpt*.index")))
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
        "model.safetensors.index.json, pytorch_model.bin, pytorch_model.bin.index.json or a "
        f"TensorFlow bert_model.ckpt; found {listing}"
    )
