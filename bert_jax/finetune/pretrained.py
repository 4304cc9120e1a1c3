"""Where a fine-tuning run starts and what it exports.

`load_encoder` reads the pre-trained encoder from either kind of `--init` directory:
  * a pre-training workdir of ours (it has `checkpoints/`): bert_jax.checkpointing's latest
    checkpoint (refused if damaged: DamagedCheckpoint) and the config saved with it, which also
    names the vocabulary the run's data was tokenized with and its lower-casing;
  * a Hugging Face BERT directory (config.json + weights; or Google's TF checkpoint) through
    bert_jax.hf, which also supplies vocab.txt and do_lower_case when the directory has them.
Only the encoder (BertModel) is kept: the MLM and NSP heads play no part in fine-tuning.

`export_hf` writes the fine-tuned model, LoRA adapters merged, as a transformers directory for
the matching task class (BertForSequenceClassification, BertForTokenClassification or
BertForQuestionAnswering): `AutoModelFor...from_pretrained(dir)` loads it with the same outputs.
Tensor names and layouts come from bert_jax.hf; only the head's names are added here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx

from bert_jax import checkpointing, hf
from bert_jax import model as model_lib
from bert_jax.finetune import lora

# Config fields a fine-tuning run may set; everything else comes from the checkpoint.
OVERRIDABLE = (
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "dtype",
    "remat",
    "attention_impl",
)

# Hugging Face class and head tensor name per task kind.
_HF_HEADS = {
    "classification": ("BertForSequenceClassification", "classifier"),
    "regression": ("BertForSequenceClassification", "classifier"),
    "tagging": ("BertForTokenClassification", "classifier"),
    "span": ("BertForQuestionAnswering", "qa_outputs"),
}


@dataclasses.dataclass
class Encoder:
    config: model_lib.BertConfig
    params: dict  # pure dict of a BertModel's parameters (nnx.to_pure_dict), host or device arrays
    source: str  # what was read, for the log
    vocab_file: str | None  # the directory's vocab.txt, if it has one
    do_lower_case: bool | None  # from tokenizer_config.json, if present


def is_pretraining_workdir(path: str) -> bool:
    return os.path.isdir(checkpointing.checkpoint_dir(path))


def load_encoder(init: str, overrides: dict[str, Any]) -> Encoder:
    """The pre-trained encoder in `init`; `overrides` (fields of OVERRIDABLE) replace the saved
    config's."""
    unknown = sorted(set(overrides) - set(OVERRIDABLE))
    if unknown:
        raise ValueError(
            f"model fields {unknown} cannot be changed when fine-tuning; only {OVERRIDABLE}"
        )
    if not init:
        raise ValueError(
            "no pre-trained model: pass --init=DIR (a Hugging Face BERT directory or a "
            "pre-training workdir of ours)"
        )
    if not os.path.isdir(init):
        raise FileNotFoundError(f"--init={init!r} is not a directory")
    if is_pretraining_workdir(init):
        params, config = checkpointing.restore_params(init)
        bert_config = model_lib.BertConfig.from_config_dict({**config.model.to_dict(), **overrides})
        data = config.get("data") or {}
        vocab = os.path.join(init, "vocab.txt")
        if not os.path.isfile(vocab):
            vocab = data.get("vocab_file") or ""  # the run's data's (its manifest's)
        return Encoder(
            bert_config,
            params["bert"],
            f"{checkpointing.checkpoint_dir(init)} (latest)",
            vocab if os.path.isfile(vocab) else None,
            data.get("do_lower_case"),
        )
    bert_config = hf.bert_config_from_hf(hf.read_hf_config(init), **overrides)
    model, report = hf.load_hf(init, bert_config)
    params = nnx.to_pure_dict(nnx.state(model.bert, nnx.Param))
    vocab = os.path.join(init, "vocab.txt")
    lower = None
    tok_config = os.path.join(init, "tokenizer_config.json")
    if os.path.isfile(tok_config):
        with open(tok_config) as f:
            lower = json.load(f).get("do_lower_case")
    return Encoder(
        bert_config, params, str(report), vocab if os.path.isfile(vocab) else None, lower
    )


def _encoder_hf_tensors(bert_params: dict, config: model_lib.BertConfig) -> dict[str, np.ndarray]:
    """HF `bert.*` tensors of a BertModel's parameters, named and laid out by bert_jax.hf."""
    # hf.to_hf_state_dict maps a whole BertForPreTraining; give it zero pre-training heads of
    # the right shapes and keep only the encoder's tensors.
    abstract = nnx.eval_shape(lambda: model_lib.BertForPreTraining(config, rngs=nnx.Rngs(0)))
    shapes = nnx.to_pure_dict(nnx.state(abstract, nnx.Param))
    params = {
        name: jax.tree.map(lambda s: np.zeros(s.shape, np.float32), tree)
        for name, tree in shapes.items()
        if name != "bert"
    }
    params["bert"] = jax.device_get(bert_params)
    tensors = hf.to_hf_state_dict(params, config)
    return {k: v for k, v in tensors.items() if k.startswith("bert.")}


def hf_tensors(model) -> dict[str, np.ndarray]:
    """{transformers name: float32 array} of `model` (a heads.TaskModel) as the task class of its
    kind names its weights; LoRA adapters are merged into a copy first."""
    model = nnx.clone(model)
    lora.merge_adapters(model)
    _, head_name = _HF_HEADS[model.kind]
    tensors = _encoder_hf_tensors(nnx.to_pure_dict(nnx.state(model.bert, nnx.Param)), model.config)
    if model.kind in ("tagging", "span"):
        # transformers builds these two without a pooler; a pooler tensor would be "unexpected".
        tensors = {k: v for k, v in tensors.items() if not k.startswith("bert.pooler.")}
    kernel = np.asarray(jax.device_get(model.head.kernel[...]), np.float32)  # [hidden, outputs]
    tensors[f"{head_name}.weight"] = np.ascontiguousarray(kernel.T)  # torch: [outputs, hidden]
    tensors[f"{head_name}.bias"] = np.asarray(jax.device_get(model.head.bias[...]), np.float32)
    return tensors


def export_hf(
    model,
    labels: Sequence[str],
    output_dir: str,
    vocab_file: str | None,
    do_lower_case: bool = True,
) -> dict[str, Any]:
    """Writes `model` (a heads.TaskModel, with or without LoRA adapters) as a transformers task
    model directory; adapters are merged into a copy first. Returns the config.json written."""
    from safetensors.numpy import save_file

    tensors = hf_tensors(model)
    cls_name, _ = _HF_HEADS[model.kind]
    hf_config = hf.hf_config_from_bert(model.config)
    hf_config.pop("tie_word_embeddings", None)  # no MLM decoder to tie
    hf_config["architectures"] = [cls_name]
    if model.kind == "regression":
        hf_config.update(num_labels=1, problem_type="regression")
    elif model.kind == "span":
        hf_config["num_labels"] = 2
    else:
        hf_config["id2label"] = {str(i): name for i, name in enumerate(labels)}
        hf_config["label2id"] = {name: i for i, name in enumerate(labels)}
        if model.kind == "classification":
            hf_config["problem_type"] = "single_label_classification"
    os.makedirs(output_dir, exist_ok=True)
    save_file(tensors, os.path.join(output_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(output_dir, "config.json"), "w") as f:
        json.dump(hf_config, f, indent=2, sort_keys=True)
    if vocab_file:
        shutil.copyfile(vocab_file, os.path.join(output_dir, "vocab.txt"))
        with open(os.path.join(output_dir, "tokenizer_config.json"), "w") as f:
            json.dump(
                {
                    "tokenizer_class": "BertTokenizer",
                    "do_lower_case": do_lower_case,
                    "model_max_length": model.config.max_position_embeddings,
                },
                f,
                indent=2,
            )
    return hf_config
