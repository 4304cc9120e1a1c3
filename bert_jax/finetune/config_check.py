"""The fine-tuning config's one validation pass (bert_jax/training/config_check.py says what such a
pass does): the shared sections' problems (config_check.check_common, the numeric fields' ranges
first and alone) and fine-tuning's own: its data, its --init, LoRA and the batch on the mesh.
"""

from bert_jax.data.contract import features
from bert_jax.finetune import lora, squad, tasks
from bert_jax.training import config_check


def check_finetuning(
    config, num_devices: int, process_count: int = 1, init: str | None = None
) -> None:
    """bert_jax.finetune's one validation pass (a configs/finetune/base.py config; `init`, else
    config.init, the pre-trained model): every problem found before the model is loaded or a
    file read, in one cli.UserError; a field out of its range alone."""
    config_check.raise_problems(config_check.range_problems(config))
    t, d = config.train, config.data
    problems, split = config_check.check_common(config, num_devices, process_count)
    if not d.train_file:
        problems.append("data.train_file is empty: point it at the training file")
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
    if config.model.get("attention_impl") == "splash" and d.max_seq_length % 128:
        problems.append(  # as pre-training's check: the eval's forward was a ValueError traceback
            f"model.attention_impl='splash' needs data.max_seq_length a multiple of 128, not "
            f"{d.max_seq_length}: choose 'auto' (splash where it fits) or a multiple of 128"
        )
    labels = tasks.label_names(d.labels)
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        problems.append(
            f"data.labels names {', '.join(map(repr, twice))} more than once: each label once "
            "(its place in the list is its id)"
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
