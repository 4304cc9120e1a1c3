"""Exports a training checkpoint as a Hugging Face BertForPreTraining directory.

    python -m bert_jax.export --workdir=DIR [--step=N] --output_dir=OUT --vocab_file=vocab.txt

OUT then holds config.json, model.safetensors (float32), vocab.txt and tokenizer_config.json;
`transformers.BertForPreTraining.from_pretrained(OUT)` loads it, and so does `bert_jax.hf.load_hf`.
"""

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defined when run as a program only, so importing this module defines no flags."""
    flags.DEFINE_string("workdir", None, "The training run's --workdir (holds checkpoints/).")
    flags.DEFINE_integer("step", None, "Checkpoint step to export; default: the latest.")
    flags.DEFINE_string("output_dir", None, "Directory to write the Hugging Face model into.")
    flags.DEFINE_string(
        "vocab_file",
        None,
        "The vocab.txt the training data was tokenized with; copied into "
        "--output_dir. Default: config.data.vocab_file of the run, when it has one.",
    )
    flags.DEFINE_bool(
        "do_lower_case", True, "Written to tokenizer_config.json: False for cased vocabularies."
    )
    flags.mark_flags_as_required(["workdir", "output_dir"])


def export(
    workdir: str,
    output_dir: str,
    *,
    step: int | None = None,
    vocab_file: str | None = None,
    do_lower_case: bool = True,
) -> dict:
    """Checkpoint -> Hugging Face directory; returns {'step', 'num_params', 'output_dir'}."""
    from bert_jax import checkpointing, hf  # here, not at the top: --help stays fast
    from bert_jax import model as model_lib

    _, step = checkpointing.load_config(workdir, step)  # pins "latest" to one step
    params, config = checkpointing.restore_params(workdir, step)
    vocab_file = vocab_file or config.get("data", {}).get("vocab_file") or None
    if not vocab_file:
        raise ValueError(
            "pass --vocab_file=PATH/vocab.txt (the vocabulary the training data "
            "was tokenized with); the run's config does not name one"
        )
    model = model_lib.model_from_params(model_lib.BertConfig.from_config_dict(config.model), params)
    hf.save_hf(model, vocab_file, output_dir, do_lower_case=do_lower_case)
    return {"step": step, "num_params": model_lib.count_params(model), "output_dir": output_dir}


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    try:
        out = export(
            FLAGS.workdir,
            FLAGS.output_dir,
            step=FLAGS.step,
            vocab_file=FLAGS.vocab_file,
            do_lower_case=FLAGS.do_lower_case,
        )
    except (ValueError, FileNotFoundError) as e:  # bad flags or files: the message says what to fix
        raise app.UsageError(str(e)) from e
    print(f"exported step {out['step']} ({out['num_params']:,} parameters) to {out['output_dir']}")


if __name__ == "__main__":
    define_flags()
    app.run(main)
