"""A fine-tuning run resolved: config + --init -> task, tokenizer, labels, model, mesh, optimizer.

Parameters are two pytrees (pure dicts, as pre-training keeps them): `trainable` (everything in
full fine-tuning; with LoRA the adapters and the head) and `frozen` (the rest). The train state
is the trainer's layout, {'params': trainable, 'opt_state', 'step', 'rng', 'nonfinite_steps'},
which bert_jax.training.checkpoints saves as it is (a LoRA checkpoint: adapters, head and their
moments). Frozen weights come from --init whenever a run starts (training, resuming or
predicting), so the run's config saves the init directory with the vocabulary and label names.
The Setup (mesh, shardings, optimizer, the state's layout) is pre-training's
train_state.build_setup.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
from typing import Any

import jax
import ml_collections
from flax import nnx

from bert_jax import cli
from bert_jax.data.contract import manifest
from bert_jax.data.input import packing
from bert_jax.finetune import encode, heads, hf_export, lora, tasks
from bert_jax.hf import pretrained
from bert_jax.training import checksums, optim, train_state

INPUTS = encode.INPUTS


@dataclasses.dataclass
class Run:
    """What a config and --init resolve to: the task, tokenizer, labels and the host model."""

    config: ml_collections.ConfigDict  # with init, vocab_file, do_lower_case and labels filled in
    task: Any
    tok: Any
    labels: tuple[str, ...]
    model: heads.TaskModel
    train: tasks.Dataset | None
    vocab_file: str  # the vocabulary file tokenizing this run (copied into the export)


def prepare(
    config: ml_collections.ConfigDict, init: str | None = None, with_train: bool = True
) -> Run:
    """Resolves the run: loads the encoder from `init` (else config.init), reads and encodes the
    training file, builds the task model (with LoRA adapters when config.lora.rank > 0). A
    training run's config has passed config_check.check_finetuning (a training file and an init
    are named); a saved run's config names the init it trained from."""
    config = config.copy_and_resolve_references()
    init = init or config.init
    task = tasks.make_task(config.data)
    # First: a bad training file is named at once, not after the model loads.
    examples = tasks.read_examples(task, config.data.train_file) if with_train else None
    encoder = pretrained.load(
        init,
        overrides=config.model.to_dict(),
        vocab_file=config.data.vocab_file or None,
        do_lower_case=config.data.do_lower_case,
    )
    logging.info("encoder from %s", encoder.source)
    if encoder.tokenizer is None:
        raise cli.UserError(
            f"{init} has no vocab.txt: pass --config.data.vocab_file=PATH/vocab.txt"
        )
    tok = encoder.tokenizer
    if config.get("export"):
        hf_export.check_exportable(encoder.config, encoder.vocab_file)
    if config.data.max_seq_length > encoder.config.max_position_embeddings:
        raise cli.UserError(
            f"data.max_seq_length={config.data.max_seq_length} exceeds the model's "
            f"max_position_embeddings={encoder.config.max_position_embeddings}"
        )
    train = None
    labels = task.labels(examples)
    if examples is not None:
        train = _encode(task, tok, config.data.train_file, examples, labels, training=True)
        if not train.has_labels:
            raise cli.UserError(f"{config.data.train_file} has no labels; it cannot be trained on")
    # A saved run's config (predict) records the model it was fine-tuned from: --init must be it.
    fingerprint = init_fingerprint(encoder, frozen_weights=bool(config.lora.rank))
    check_same_init(config.get("init_fingerprint"), fingerprint, config.init, init)
    with config.unlocked():
        config.init_fingerprint = fingerprint
        config.init, config.data.do_lower_case = init, encoder.do_lower_case
        config.data.vocab_file = encoder.vocab_to_record  # "": --init's own, found again on resume
        config.data.labels = labels
    model = build_model(task.kind, labels, encoder, config.lora, config.train.seed)
    return Run(config, task, tok, labels, model, train, encoder.vocab_file)


def init_fingerprint(encoder: pretrained.Pretrained, frozen_weights: bool) -> str:
    """What a resumed or predicting run must find again at --init (a moved copy has the same):
    the vocabulary every run tokenizes with, and with `frozen_weights` (LoRA: the encoder is not
    in the checkpoints) a digest of the pre-trained encoder's weights."""
    out = f"vocab {manifest.file_md5(encoder.vocab_file) if encoder.vocab_file else '-'}"
    if frozen_weights:
        sums, _ = checksums.fingerprint(encoder.params["bert"])
        out += f" weights {hashlib.md5(json.dumps(sums, sort_keys=True).encode()).hexdigest()}"
    return out


def check_same_init(saved: str | None, found: str, saved_init: str, init: str) -> None:
    """Refuses an --init (or vocabulary) other than the one a run was fine-tuned from: adapters
    on another base model, or ids from another vocabulary, were silently wrong predictions. A run
    saved before fingerprints (`saved` None) is not checked."""
    if saved and saved != found:
        what = "vocabulary differs" if saved.split()[:2] != found.split()[:2] else "weights differ"
        raise cli.UserError(
            f"--init={init!r} is not the pre-trained model this run was fine-tuned from "
            f"({saved_init!r} when it was saved): its {what}; pass that model (a moved "
            "copy of it is fine)"
        )


def build_model(
    kind: str, labels, encoder: pretrained.Pretrained, lora_config, seed: int
) -> heads.TaskModel:
    """The task model with the pre-trained encoder's weights and a fresh head (and adapters)."""
    model = heads.TaskModel(encoder.config, kind, len(labels), rngs=nnx.Rngs(seed))
    state = nnx.state(model.bert, nnx.Param)
    nnx.replace_by_pure_dict(state, jax.device_get(encoder.params["bert"]))
    nnx.update(model.bert, state)
    if lora_config.rank:
        lora.add_adapters(
            model.bert,
            lora.target_names(lora_config.targets),
            lora_config.rank,
            lora_config.alpha,
            rngs=nnx.Rngs(seed + 1),
        )
    return model


def trainable_filter(config):
    return lora.TRAINABLE if config.lora.rank else nnx.Param


def _decay_mask(params):
    """bert_jax.training.optim's rule (kernels and embeddings), plus the LoRA matrices."""

    def leaf(path, _):
        names = tuple(getattr(k, "key", getattr(k, "idx", k)) for k in path)
        return optim.decays(names) or (bool(names) and names[-1] in ("lora_a", "lora_b"))

    return jax.tree_util.tree_map_with_path(leaf, params)


def num_train_steps(config, num_examples: int) -> int:
    """Steps of the run (config_check.check_finetuning has seen num_epochs and batch_size)."""
    t = config.train
    return max(1, math.ceil(t.num_epochs * num_examples / t.batch_size))


# The shared Setup: its params and param_shardings are the trainable ones (the whole model, or
# LoRA's adapters and the head); the frozen rest is placed by frozen_shardings and only read.
Setup = train_state.Setup


def make_setup(config, model: heads.TaskModel, total_steps: int, devices=None, place=True):
    """-> (Setup, trainable params, frozen params) (train_state.build_setup), the parameters
    placed on the mesh unless `place` is False: with an abstract model (nnx.eval_shape), what
    compiling the step ahead of time needs (the planner, bert_jax/plan/steps.py)."""
    o = config.optim.copy_and_resolve_references()
    o.warmup_steps = o.warmup_steps or int(o.warmup_proportion * total_steps)
    setup, trainable, frozen = train_state.build_setup(
        config,
        model,
        total_steps,
        trainable=trainable_filter(config),
        optim_config=o,
        mask_fn=_decay_mask,
        devices=devices,
        kind=model.kind,
    )
    if place:
        trainable = jax.device_put(trainable, setup.param_shardings)
        frozen = jax.device_put(frozen, setup.frozen_shardings)
    return setup, trainable, frozen


def initial_state(setup: Setup, trainable, seed: int) -> dict:
    return jax.jit(
        lambda p: train_state.new_state(p, setup.tx, jax.random.PRNGKey(seed + 2)),
        out_shardings=setup.state_shardings,
    )(trainable)


def forward(graphdef, params, frozen, batch, dropout_rng=None):
    """The task model's outputs for a batch (INPUTS, and packing.MODEL_INPUTS when its rows are
    packed), rebuilt from its two parameter trees."""
    model = nnx.merge(graphdef, params, frozen)
    extra = {k: batch[k] for k in packing.MODEL_INPUTS if k in batch}
    return model(*(batch[k] for k in INPUTS), **extra, dropout_rng=dropout_rng)


def encode_file(run: Run, path: str) -> tasks.Dataset:
    """A file to evaluate or predict, read and encoded (inference windows for SQuAD)."""
    examples = tasks.read_examples(run.task, path)
    return _encode(run.task, run.tok, path, examples, run.labels, training=False)


def _encode(task, tok, path: str, examples, labels, training: bool) -> tasks.Dataset:
    """task.encode, with the file named in a data error (an unknown label, say): the example
    ids alone do not say which file to fix."""
    try:
        return task.encode(tok, examples, labels, training=training)
    except encode.FormatError as e:
        raise encode.FormatError(f"{path}: {e}") from None


def eval_datasets(run: Run) -> dict[str, tasks.Dataset]:
    """config.data.eval_files, encoded, by file name."""
    sets = {}
    for name, path in tasks.named_files(tasks.split_files(run.config.data.eval_files)).items():
        ds = encode_file(run, path)
        if not ds.has_labels:
            raise cli.UserError(
                f"eval file {path} has no labels; put it in data.test_file to predict it"
            )
        sets[name] = ds
    return sets


def host_model(setup: Setup, params, frozen) -> heads.TaskModel:
    """The task model with its parameters gathered to host memory (for export). Every process
    must call it when there are several: gathering sharded arrays is a collective."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        params, frozen = multihost_utils.process_allgather((params, frozen), tiled=True)
    else:
        params, frozen = jax.device_get((params, frozen))
    return nnx.merge(setup.graphdef, params, frozen)
