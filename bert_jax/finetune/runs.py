"""A fine-tuning run resolved: config (checked first: `check_finetuning`) + --init -> task,
tokenizer, labels, model, mesh, optimizer.

Parameters are two pytrees (pure dicts, as pre-training keeps them): `trainable` (everything in
full fine-tuning; with LoRA the adapters and the head) and `frozen` (the rest). The train state
is the trainer's layout, {'params': trainable, 'opt_state', 'step', 'rng', 'nonfinite_steps'},
which bert_jax.training.checkpoints saves as it is (a LoRA checkpoint: adapters, head and their
moments). Frozen weights come from --init whenever a run starts (training, resuming or
predicting), so the run's config saves the init directory with the vocabulary and label names.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
from typing import Any

import jax
import ml_collections
from flax import nnx

from bert_jax import cli, storage
from bert_jax.data.contract import features
from bert_jax.data.input import packing
from bert_jax.finetune import encode, heads, lora, squad, tasks
from bert_jax.training import checksums, config_check, optim, pretrained, train_state

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


def check_finetuning(
    config, num_devices: int, process_count: int = 1, init: str | None = None
) -> None:
    """bert_jax.finetune's one validation pass of a configs/finetune/base.py config (`init`, else
    config.init, the pre-trained model): the shared sections' problems (config_check.check_common)
    and its own, all found before the model is loaded or a file read, in one cli.UserError; a
    field out of its range alone, first."""
    config_check.raise_problems(config_check.range_problems(config))
    t, d = config.train, config.data
    problems, split = config_check.check_common(config, num_devices, process_count)
    if not d.train_file:
        problems.append("data.train_file is empty: point it at the training file")
    if init and config.init and init != config.init:  # the flag won, silently, before
        problems.append(
            f"--init={init!r} and config.init={config.init!r} name two pre-trained models; "
            "pass one of them"
        )
    if not (init or config.init):
        problems.append(
            "no pre-trained model: pass --init=DIR (a Hugging Face BERT directory or a "
            "pre-training workdir of ours)"
        )
    if d.format not in tasks.FORMATS:
        problems.append(f"data.format={d.format!r}; choose one of {sorted(tasks.FORMATS)}")
    elif d.format == "squad":
        problems += squad.length_problems(d.max_seq_length, d.doc_stride, d.max_query_length)
    else:  # glue: sentence pairs or single texts (a pair's room); conll: one sentence
        segments = 2 if d.format == "glue" else 1
        config_check.ask(
            problems, features.check_seq_length, d.max_seq_length, segments, "data.max_seq_length"
        )
    problems += config_check.splash_problems(config.model.get("attention_impl"), d.max_seq_length)
    labels = tasks.label_names(d.labels)
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        problems.append(
            f"data.labels names {', '.join(map(repr, twice))} more than once: each label once "
            "(its place in the list is its id)"
        )
    figures = tasks.metric_names(d) if d.metric and not twice else None
    if figures is not None and d.metric not in figures:  # the eval line would show nothing
        problems.append(
            f"data.metric={d.metric!r} is not a figure of this task's evaluation; choose one of "
            f"{list(figures)} (or leave it empty for the benchmark's own)"
        )
    if config.lora.rank:
        problems += lora.problems(
            lora.target_names(config.lora.targets), config.lora.rank, config.lora.alpha
        )
    if split is not None and not problems:
        dp, axes = split
        if t.batch_size % dp:
            problems.append(
                f"train.batch_size={t.batch_size} must be divisible by the {dp} data-parallel "
                f"devices ({axes})"
            )
        if t.batch_size % process_count:
            problems.append(
                f"train.batch_size={t.batch_size} must be divisible by the {process_count} "
                "processes"
            )
        # Asked now: found by the first eval, it stopped the run after all its training.
        eval_batch = config.eval.batch_size
        if eval_batch % (dp * process_count):
            problems.append(
                f"eval.batch_size={eval_batch} must be divisible by the {dp} data-parallel "
                f"devices ({axes}) and the {process_count} processes"
            )
    config_check.raise_problems(problems)


def prepare(
    config: ml_collections.ConfigDict, init: str | None = None, with_train: bool = True
) -> Run:
    """Resolves the run: loads the encoder from `init` (else config.init), reads and encodes the
    training file, builds the task model (with LoRA adapters when config.lora.rank > 0). A
    training run's config has passed check_finetuning (a training file and an init
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
        heads.check_exportable(encoder.config, task.kind, encoder.vocab_file)
    if config.data.max_seq_length > encoder.config.max_position_embeddings:
        raise cli.UserError(
            f"data.max_seq_length={config.data.max_seq_length} exceeds the model's "
            f"max_position_embeddings={encoder.config.max_position_embeddings}"
        )
    train = None
    labels = task.labels(examples)
    if examples is not None:
        train = _encode(task, tok, config.data.train_file, examples, labels, training=True)
        _check_segments(train, encoder.config.type_vocab_size, config.data.train_file)
        if not train.has_labels:
            raise cli.UserError(f"{config.data.train_file} has no labels; it cannot be trained on")
    # A saved run's config (predict) records the model it was fine-tuned from: --init must be it.
    fingerprint = init_fingerprint(encoder, frozen_weights=bool(config.lora.rank))
    check_same_init(config, fingerprint, init)
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
    out = f"vocab {storage.md5(encoder.vocab_file) if encoder.vocab_file else '-'}"
    if frozen_weights:
        sums, _ = checksums.fingerprint(encoder.params["bert"])
        out += f" weights {hashlib.md5(json.dumps(sums, sort_keys=True).encode()).hexdigest()}"
    return out


def check_same_init(saved_config, found: str, init: str) -> None:
    """Refuses an --init (or vocabulary) of fingerprint `found` other than the one the run whose
    config is `saved_config` was fine-tuned from: adapters on another base model, or ids from
    another vocabulary, were silently wrong predictions. A run saved before fingerprints is not
    checked."""
    saved = saved_config.get("init_fingerprint")
    if saved and saved != found:
        what = "vocabulary differs" if saved.split()[:2] != found.split()[:2] else "weights differ"
        raise cli.UserError(
            f"--init={init!r} is not the pre-trained model this run was fine-tuned from "
            f"({saved_config.get('init')!r} when it was saved): its {what}; pass that model (a "
            "moved copy of it is fine)"
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
    """Steps of the run (check_finetuning has seen num_epochs and batch_size)."""
    t = config.train
    return max(1, math.ceil(t.num_epochs * num_examples / t.batch_size))


def make_setup(config, model: heads.TaskModel, total_steps: int, devices=None, place=True):
    """-> (Setup, trainable params, frozen params) (train_state.build_setup: the Setup's params
    are the trainable ones, its frozen_shardings place the rest, which is only read), placed on
    the mesh unless `place` is False: with an abstract model (nnx.eval_shape), what compiling
    the step ahead of time needs (the planner, bert_jax/plan/steps.py)."""
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


def initial_state(setup: train_state.Setup, trainable, seed: int) -> dict:
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
    ds = _encode(run.task, run.tok, path, examples, run.labels, training=False)
    _check_segments(ds, run.model.config.type_vocab_size, path)
    return ds


def _check_segments(ds: tasks.Dataset, type_vocab_size: int, path: str) -> None:
    """A second segment (a sentence pair's, SQuAD's context) needs a second token-type
    embedding: past the table's end the lookup gives NaN (transformers: an IndexError), and the
    run trained on NaN logits. Without token types (0, ModernBERT) segments are ignored."""
    segments = ds.arrays.get(features.SEGMENT_IDS)
    if not type_vocab_size or segments is None or not segments.size:
        return
    if int(segments.max()) >= type_vocab_size:
        raise cli.UserError(
            f"{path} has examples of {int(segments.max()) + 1} segments (sentence pairs, or "
            f"SQuAD's question and context) but the model has type_vocab_size={type_vocab_size} "
            "token-type embeddings: fine-tune it on single sentences, or start from a model "
            "with one token type per segment"
        )


def _encode(task, tok, path: str, examples, labels, training: bool) -> tasks.Dataset:
    """task.encode, with the file named in a data error (an unknown label, say): the example
    ids alone do not say which file to fix."""
    try:
        return task.encode(tok, examples, labels, training=training)
    except encode.FormatError as e:
        raise encode.FormatError(f"{path}: {e}") from None


def eval_datasets(run: Run) -> dict[str, tasks.Dataset]:
    """config.data.eval_files, encoded, by file name: the file stem ("dev_matched") for per-file
    eval figures, or the path where an earlier file has that stem."""
    sets = {}
    for path in tasks.split_files(run.config.data.eval_files):
        ds = encode_file(run, path)
        if not ds.has_labels:
            raise cli.UserError(
                f"eval file {path} has no labels; put it in data.test_file to predict it"
            )
        name = os.path.splitext(os.path.basename(path))[0]
        sets[name if name not in sets else path] = ds
    return sets


def host_model(setup: train_state.Setup, params, frozen) -> heads.TaskModel:
    """The task model with its parameters gathered to host memory (for export). Every process
    must call it when there are several: gathering sharded arrays is a collective."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        params, frozen = multihost_utils.process_allgather((params, frozen), tiled=True)
    else:
        params, frozen = jax.device_get((params, frozen))
    return nnx.merge(setup.graphdef, params, frozen)
