"""A fine-tuned model out as a transformers task model (the pre-trained one comes in through
bert_jax.hf.pretrained).

`export_hf` writes the fine-tuned model, LoRA adapters merged, as a transformers directory for
the matching task class (BertForSequenceClassification, BertForTokenClassification or
BertForQuestionAnswering): `AutoModelFor...from_pretrained(dir)` loads it with the same outputs.
Tensor names and layouts come from bert_jax.hf.bert; only the head's names are added here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx

from bert_jax import cli
from bert_jax.finetune import lora
from bert_jax.hf import bert, publish
from bert_jax.model import encoder
from bert_jax.text import tokenization

# Hugging Face class and head tensor name per task kind.
_HF_HEADS = {
    "classification": ("BertForSequenceClassification", "classifier"),
    "regression": ("BertForSequenceClassification", "classifier"),
    "tagging": ("BertForTokenClassification", "classifier"),
    "span": ("BertForQuestionAnswering", "qa_outputs"),
}
FLAG = "<workdir>/export"  # how errors name the export directory: fine-tuning has no flag for it


def check_exportable(config: encoder.BertConfig, vocab_file: str | None = None) -> None:
    """Task models export as BERT's transformers classes only: a ModernBERT-block encoder is
    refused (before training, by runs.prepare), as is a SentencePiece `vocab_file`."""
    bert.check_exportable_vocab(vocab_file)
    if bert.architecture(config) != bert.BERT:
        raise cli.UserError(
            "a fine-tuned model of the ModernBERT block cannot be exported to transformers yet "
            "(this export writes BERT's task classes): set --config.export=False"
        )


def hf_tensors(model) -> dict[str, np.ndarray]:
    """{transformers name: float32 array} of `model` (a heads.TaskModel) as the task class of its
    kind names its weights; LoRA adapters are merged into a copy first."""
    model = nnx.clone(model)
    lora.merge_adapters(model)
    _, head_name = _HF_HEADS[model.kind]
    encoder_params = jax.device_get(nnx.to_pure_dict(nnx.state(model.bert, nnx.Param)))
    tensors = bert.encoder_state_dict(encoder_params, model.config)
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
    do_lower_case: bool = tokenization.DO_LOWER_CASE,
) -> dict[str, Any]:
    """Writes `model` (a heads.TaskModel, with or without LoRA adapters) as a transformers task
    model directory; adapters are merged into a copy first. Returns the config.json written."""
    from safetensors.numpy import save_file

    check_exportable(model.config)
    tensors = hf_tensors(model)
    cls_name, _ = _HF_HEADS[model.kind]
    hf_config = bert.hf_config_from_bert(model.config)
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

    def write(scratch: str) -> None:
        save_file(tensors, os.path.join(scratch, "model.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(scratch, "config.json"), "w") as f:
            json.dump(hf_config, f, indent=2, sort_keys=True)
        if vocab_file:
            bert.save_tokenizer(
                vocab_file, scratch, do_lower_case, model.config.max_position_embeddings
            )

    # Whole or not at all, never mixed with an earlier model's files (bert_jax.hf.publish).
    publish.directory(output_dir, write, what="bert_jax.finetune export", flag=FLAG)
    return hf_config
