"""A fine-tuning run resolved: config (checked first: `check_finetuning`) + --init -> task,
tokenizer, labels, model, mesh, optimizer. Parameters are two pure dicts: `trainable` (LoRA: the
adapters and the head) and `frozen`, read from --init whenever a run starts.
"""

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
    """Fine-tuning's one validation pass, before any model or file is read: every problem in one
    cli.UserError (a field out of its range alone, first). `init`: --init, else config.init."""
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
    """Loads the encoder from `init` (else config.init), reads and encodes the training file and
    builds the task model; the config has passed check_finetuning, or is a saved run's."""
    config = config.copy_and_resolve_references()
    init = init or config.init
    task = tasks.make_task(config.data)
    # First: a bad training file is named at once, not after the model loads.
    examples = tasks.read_examples(task, config.data.train_file) if with_train else None
    encoder = pretrained.load(
        init,
        overrides=model_overrides(config),
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
        types = encoder.config.type_vocab_size
        train = _encode(task, tok, config.data.train_file, examples, labels, types, training=True)
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
    """What a resumed or predicting run must find again at --init: the vocabulary's md5, and with
    `frozen_weights` (LoRA: the encoder is not in the checkpoints) the weights' digest."""
    out = f"vocab {storage.md5(encoder.vocab_file) if encoder.vocab_file else '-'}"
    if frozen_weights:
        sums, _ = checksums.fingerprint(encoder.params["bert"])
        out += f" weights {hashlib.md5(json.dumps(sums, sort_keys=True).encode()).hexdigest()}"
    return out


def check_same_init(saved_config, found: str, init: str) -> None:
    """Refuses an --init whose fingerprint `found` is not the one `saved_config`'s run was
    fine-tuned from (silently wrong predictions); a run saved without one is not checked."""
    saved = saved_config.get("init_fingerprint")
    if saved and saved != found:
        what = "vocabulary differs" if saved.split()[:2] != found.split()[:2] else "weights differ"
        raise cli.UserError(
            f"--init={init!r} is not the pre-trained model this run was fine-tuned from "
            f"({saved_config.get('init')!r} when it was saved): its {what}; pass that model (a "
            "moved copy of it is fine)"
        )


def model_overrides(config) -> dict:
    return {k: v for k, v in config.model.to_dict().items() if v is not None}  # None: --init's


def build_model(
    kind: str, labels, encoder: pretrained.Pretrained, lora_config, seed: int
) -> heads.TaskModel:
    """The task model with the pre-trained encoder's weights and a fresh head (and adapters); a
    ModernBERT head's dense and norm are the MLM head's where --init has one, as transformers'."""
    model = heads.TaskModel(encoder.config, kind, len(labels), rngs=nnx.Rngs(seed))
    params = {"bert": encoder.params["bert"]}
    if model.modern and not any(name.startswith("head.") for name in encoder.fresh):
        params["head"] = {k: encoder.params["mlm"][k] for k in ("transform", "transform_norm")}
    state = nnx.state(model, nnx.Param)
    nnx.replace_by_pure_dict(state, jax.device_get(params))
    nnx.update(model, state)
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
    t = config.train
    return max(1, math.ceil(t.num_epochs * num_examples / t.batch_size))


def make_setup(config, model: heads.TaskModel, total_steps: int, devices=None, place=True):
    """-> (Setup, trainable params, frozen params), placed on the mesh unless `place` is False
    (an abstract model: the planner, bert_jax/plan/steps.py)."""
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
    """The task model's outputs for a batch, rebuilt from its two parameter trees."""
    model = nnx.merge(graphdef, params, frozen)
    extra = {k: batch[k] for k in packing.MODEL_INPUTS if k in batch}
    return model(*(batch[k] for k in INPUTS), **extra, dropout_rng=dropout_rng)


def encode_file(run: Run, path: str) -> tasks.Dataset:
    """A file to evaluate or predict, read and encoded (inference windows for SQuAD)."""
    examples = tasks.read_examples(run.task, path)
    types = run.model.config.type_vocab_size
    return _encode(run.task, run.tok, path, examples, run.labels, types, training=False)


def _encode(task, tok, path: str, examples, labels, type_vocab_size: int, training: bool):
    """task.encode, with the file named in a data error, refusing segment ids past the
    token-type table (its lookup gives NaN; a model without token types ignores segments)."""
    try:
        ds = task.encode(tok, examples, labels, training=training)
    except encode.FormatError as e:
        raise encode.FormatError(f"{path}: {e}") from None
    segments = ds.arrays.get(features.SEGMENT_IDS)
    if type_vocab_size and segments is not None and segments.size:
        if int(segments.max()) >= type_vocab_size:
            raise cli.UserError(
                f"{path} has examples of {int(segments.max()) + 1} segments (sentence pairs, or "
                f"SQuAD's question and context) but the model has type_vocab_size="
                f"{type_vocab_size} token-type embeddings: fine-tune it on single sentences, or "
                "start from a model with one token type per segment"
            )
    return ds


def eval_datasets(run: Run) -> dict[str, tasks.Dataset]:
    """config.data.eval_files encoded, by file stem (the path where two files share one)."""
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
    """The task model gathered to host memory (for export); a collective: every process calls it."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        params, frozen = multihost_utils.process_allgather((params, frozen), tiled=True)
    else:
        params, frozen = jax.device_get((params, frozen))
    return nnx.merge(setup.graphdef, params, frozen)
