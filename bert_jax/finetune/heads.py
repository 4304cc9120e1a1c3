"""Task models (a BertModel plus a `head`, the name LoRA selects it by), their losses, and their
export as transformers' (Modern)BertFor{Sequence,Token}Classification or ...ForQuestionAnswering."""

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from bert_jax import cli
from bert_jax.data.contract import features as F
from bert_jax.data.input import packing
from bert_jax.finetune import encode, lora, squad
from bert_jax.hf import architectures, bert, publish
from bert_jax.model import layers as L
from bert_jax.model.encoder import BertConfig, BertModel
from bert_jax.text import tokenization

KINDS = ("classification", "regression", "tagging", "span")


class TaskModel(nnx.Module):
    """`bert` (a BertModel) and `head` (a dense layer; the modern block's: ModernHead), a KIND."""

    def __init__(self, config: BertConfig, kind: str, num_labels: int, *, rngs: nnx.Rngs):
        self.config = config
        self.kind = kind
        self.bert = BertModel(config, rngs=rngs)
        if kind in ("classification", "tagging") and num_labels < 2:
            raise cli.UserError(f"a {kind} task needs at least 2 labels, got {num_labels}")
        self.modern = architectures.is_modern(config)
        if not self.modern and config.classifier_pooling != "cls":
            raise cli.UserError(
                f"model.classifier_pooling={config.classifier_pooling!r} is for a ModernBERT "
                "block: BERT's task models read the pooler; leave it unset"
            )
        outputs = {"classification": num_labels, "regression": 1, "tagging": num_labels, "span": 2}
        if self.modern:
            self.head = ModernHead(config, outputs[kind], rngs=rngs)
            return
        # Initialized as BERT's own dense layers; logical axes as model.py names them.
        self.head = nnx.Linear(
            config.hidden_size,
            outputs[kind],
            dtype=config.compute_dtype,
            param_dtype=jnp.float32,
            kernel_init=jax.nn.initializers.truncated_normal(config.initializer_range),
            kernel_metadata={"out_sharding": ("embed", None), "eager_sharding": False},
            bias_metadata={"out_sharding": (None,), "eager_sharding": False},
            rngs=rngs,
        )

    def __call__(self, input_ids, input_mask, segment_ids, *, dropout_rng=None, **packed):
        """float32 logits: classification [batch, classes] and regression [batch] from the pooled
        [CLS] output, tagging [batch, length, tags], span (start, end) [batch, length] each.
        Packed rows (packed.py) pass packing.MODEL_INPUTS: sentence outputs are then per slot."""
        sentence = self.kind in ("classification", "regression")
        if not sentence:
            packed.pop(packing.CLS_POSITIONS, None)  # no pooled output wanted
        k_bert, k_head = jax.random.split(dropout_rng) if dropout_rng is not None else (None, None)
        sequence, pooled = self.bert(
            input_ids, input_mask, segment_ids, dropout_rng=k_bert, **packed
        )
        if self.modern:
            mean = sentence and self.config.classifier_pooling == "mean"
            x = _mean(sequence, input_mask, packed) if mean else pooled if sentence else sequence
            logits = self.head(x, k_head)
        elif self.kind == "span":  # Hugging Face's BERT QA head has no dropout
            logits = self.head(sequence).astype(jnp.float32)  # [batch, length, 2]
        else:
            x = _dropout(pooled if sentence else sequence, self.config.hidden_dropout_prob, k_head)
            logits = self.head(x).astype(jnp.float32)
        if self.kind == "span":
            return logits[..., 0], logits[..., 1]
        return logits[..., 0] if self.kind == "regression" else logits


class ModernHead(nnx.Module):
    """transformers' ModernBertPredictionHead (dense, GELU, LayerNorm: the MLM head's transform,
    named as ours), dropout at classifier_dropout, then the `classifier`."""

    def __init__(self, c: BertConfig, outputs: int, *, rngs: nnx.Rngs):
        h, self.rate = c.hidden_size, c.classifier_dropout
        self.transform = L.dense(c, h, h, ("embed", None), rngs, bias=c.head_bias, output=True)
        self.transform_norm = L.layer_norm(c, rngs)
        self.classifier = L.dense(c, h, outputs, ("embed", None), rngs)

    def __call__(self, x, dropout_rng=None):
        x = _dropout(self.transform_norm(L.gelu(self.transform(x))), self.rate, dropout_rng)
        return self.classifier(x).astype(jnp.float32)


def _dropout(x, rate: float, key):
    if key is None or rate == 0:
        return x
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0).astype(x.dtype)


def _mean(sequence, input_mask, packed):
    """transformers' mean pooling over a row's tokens (packed rows: over each slot's)."""
    ids = packed.get(packing.EXAMPLE_IDS)  # slot e holds the tokens of id e + 1
    slots = jnp.arange(1, 2 if ids is None else packed[packing.CLS_POSITIONS].shape[1] + 1)
    weights = ((input_mask if ids is None else ids)[:, None, :] == slots[:, None]).astype(float)
    total = jnp.einsum("bsl,blh->bsh", weights, sequence.astype(jnp.float32))
    mean = (total / jnp.maximum(weights.sum(-1)[..., None], 1.0)).astype(sequence.dtype)
    return mean[:, 0] if ids is None else mean


# BERT vocabularies put [PAD] at id 0 (transformers' pad_token_id, which our export writes).
PAD_ID = 0


def without_pad_gradient(grads, pad_id: int = PAD_ID):
    """`grads` with the [PAD] word embedding's row zeroed, as transformers' embeddings (with
    padding_idx) train it: never. Only the span loss (a softmax over padding) would move it."""

    def leaf(path, g):
        names = tuple(getattr(k, "key", k) for k in path)
        return g.at[pad_id].set(0) if names[-2:] == ("word_embeddings", "embedding") else g

    return jax.tree_util.tree_map_with_path(leaf, grads)


def _cross_entropy(logits, labels):
    return -jnp.take_along_axis(jax.nn.log_softmax(logits), labels[..., None], axis=-1)[..., 0]


def loss(kind: str, outputs, batch: dict) -> jax.Array:
    """Mean loss of a batch as transformers' task models compute it (squared error for
    regression, else cross-entropy); packed rows weigh each example as unpacked."""
    if kind == "tagging":  # per labelled piece, packed or not (padding weighs 0)
        return _weighted_mean(
            _cross_entropy(outputs, batch[encode.LABEL_IDS]), batch[encode.LABEL_WEIGHTS]
        )
    packed = packing.EXAMPLE_WEIGHTS in batch  # 1 per example: [rows, slots], unpacked [batch]
    weights = batch[packing.EXAMPLE_WEIGHTS] if packed else jnp.ones(batch[F.INPUT_IDS].shape[:1])
    if kind == "classification":
        return _weighted_mean(_cross_entropy(outputs, batch[encode.LABEL]), weights)
    if kind == "regression":
        return _weighted_mean(jnp.square(outputs - batch[encode.LABEL]), weights)
    if kind == "span":
        start, end = outputs
        if packed:  # one softmax per example, over its own tokens: [rows, slots, length]
            slots = weights.shape[1]
            own = batch[packing.EXAMPLE_IDS][:, None, :] == jnp.arange(1, slots + 1)[:, None]
            start, end = (jnp.where(own, x[:, None, :], _NEG) for x in (start, end))
        # Unpacked, the softmax runs over padding too, as in run_squad.py and transformers.
        nll = _cross_entropy(start, batch[squad.START_POSITIONS]) + _cross_entropy(
            end, batch[squad.END_POSITIONS]
        )
        return 0.5 * _weighted_mean(nll, weights)
    raise ValueError(f"unknown task kind {kind!r}; choose one of {KINDS}")


_NEG = -1e9  # a logit no softmax picks, finite so that an empty slot's loss is 0 x finite


def _weighted_mean(values, weights):
    return jnp.sum(values * weights) / jnp.maximum(jnp.sum(weights), 1.0)


# Hugging Face class and head tensor name per task kind (ModernBERT's: ModernBertFor*, classifier).
_HF_HEADS = {
    "classification": ("BertForSequenceClassification", "classifier"),
    "regression": ("BertForSequenceClassification", "classifier"),
    "tagging": ("BertForTokenClassification", "classifier"),
    "span": ("BertForQuestionAnswering", "qa_outputs"),
}
# How errors name the export directory: fine-tuning has no flag for it.
EXPORT_FLAG = "<workdir>/export"


def check_exportable(config: BertConfig, kind: str, vocab_file: str | None = None) -> None:
    """Refuses what transformers' task classes cannot hold (runs.prepare asks before training):
    a mix of the two blocks, a SentencePiece `vocab_file`, a BERT sentence head without pooler."""
    bert.check_exportable_vocab(vocab_file)
    arch = bert.architecture(config)
    if arch == bert.BERT and kind in ("classification", "regression") and not config.pooler:
        raise cli.UserError(
            f"a {kind} model without BERT's pooler (model.pooler=False) cannot be exported: "
            "transformers' BertForSequenceClassification reads the pooler; set "
            "--config.export=False"
        )


def hf_tensors(model) -> dict[str, np.ndarray]:
    """{transformers name: float32 array} of a TaskModel, LoRA merged into a copy."""
    model = nnx.clone(model)
    lora.merge_adapters(model)
    head_name = "classifier" if model.modern else _HF_HEADS[model.kind][1]
    params = jax.device_get(nnx.to_pure_dict(nnx.state(model, nnx.Param)))
    head = params["head"] if model.modern else None
    tensors = bert.encoder_state_dict(params["bert"], model.config, head)
    if model.kind in ("tagging", "span"):
        # transformers builds these two without a pooler; a pooler tensor would be "unexpected".
        tensors = {k: v for k, v in tensors.items() if not k.startswith("bert.pooler.")}
    classifier = head["classifier"] if model.modern else params["head"]
    kernel = np.asarray(classifier["kernel"], np.float32)  # [hidden, outputs]
    tensors[f"{head_name}.weight"] = np.ascontiguousarray(kernel.T)  # torch: [outputs, hidden]
    tensors[f"{head_name}.bias"] = np.asarray(classifier["bias"], np.float32)
    return tensors


def export_hf(
    model,
    labels: Sequence[str],
    output_dir: str,
    vocab_file: str | None,
    do_lower_case: bool = tokenization.DO_LOWER_CASE,
    pad_id: int = PAD_ID,
    special_ids: dict[str, int | None] | None = None,
) -> dict[str, Any]:
    """Writes a TaskModel as a transformers task model directory -> the config.json written;
    `special_ids`: the tokenizer's 'cls' and 'sep' ids, which a ModernBERT config.json names."""
    check_exportable(model.config, model.kind)
    tensors = hf_tensors(model)
    cls_name = ("Modern" if model.modern else "") + _HF_HEADS[model.kind][0]
    hf_config = bert.hf_config_from_bert(model.config, {"pad": pad_id, **(special_ids or {})})
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
        bert.write_hf(scratch, tensors, hf_config, vocab_file, do_lower_case)

    # Whole or not at all, never mixed with an earlier model's files (bert_jax.hf.publish).
    publish.directory(output_dir, write, what="bert_jax.finetune export", flag=EXPORT_FLAG)
    return hf_config
