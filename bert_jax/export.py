"""Exports a training checkpoint as a Hugging Face BertForPreTraining directory, or a
ModernBertForMaskedLM one for the modern block (docs/model.md, "Export a training run").

    python -m bert_jax.export --workdir=DIR [--step=N] --output_dir=OUT [--vocab_file=vocab.txt]

OUT must be new, empty or an earlier export of ours (replaced whole: bert_jax.hf.publish).
"""

from absl import flags

from bert_jax import cli, runtime
from bert_jax.hf import publish
from bert_jax.training import checkpoints

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defined when run as a program only, so importing this module defines no flags."""
    flags.DEFINE_string("workdir", None, "The training run's --workdir (holds checkpoints/).")
    flags.DEFINE_integer("step", None, "Checkpoint step to export; default: the latest.")
    flags.DEFINE_string("output_dir", None, "Directory to write the Hugging Face model into.")
    flags.DEFINE_string(
        "vocab_file",
        None,
        "The vocab.txt the training data was tokenized with; copied into --output_dir. "
        "Default: the one the run's data recorded (its manifest's).",
    )
    flags.DEFINE_bool(
        "do_lower_case",
        None,
        "Written to tokenizer_config.json. Default: the run's data's (its manifest's), else True.",
    )
    flags.mark_flags_as_required(["workdir", "output_dir"])


def export(
    workdir: str,
    output_dir: str,
    *,
    step: int | None = None,
    vocab_file: str | None = None,
    do_lower_case: bool | None = None,
) -> dict:
    """Checkpoint -> Hugging Face directory; returns {'step', 'num_params', 'output_dir'}."""
    from bert_jax.hf import bert  # here, not at the top: --help is fast
    from bert_jax.model import encoder
    from bert_jax.training import pretrained

    publish.check_target(output_dir)
    cli.check_writable_dir(output_dir, "--output_dir")
    if not checkpoints.is_workdir(workdir):
        raise cli.UserError(
            f"--workdir={workdir!r} holds no checkpoints/: pass the workdir a training run wrote"
        )
    loaded = pretrained.load(workdir, step=step, vocab_file=vocab_file, do_lower_case=do_lower_case)
    if loaded.vocab_file is None:
        raise cli.UserError(
            "pass --vocab_file=PATH/vocab.txt (the vocabulary the training data was tokenized "
            "with); the run's config does not name one"
        )
    model = loaded.model()
    bert.architecture(model.config)  # a model no transformers class holds: refused before writing
    bert.check_exportable_vocab(loaded.vocab_file)  # as is a vocabulary transformers cannot read
    tok = loaded.tokenizer
    publish.directory(
        output_dir,
        lambda scratch: bert.save_hf(
            model,
            loaded.vocab_file,
            scratch,
            do_lower_case=loaded.do_lower_case,
            special_ids={"pad": tok.pad_id, "cls": tok.cls_id, "sep": tok.sep_id},
        ),
    )
    return {
        "step": loaded.step,
        "num_params": encoder.count_params(model),
        "output_dir": output_dir,
    }


def main(argv):
    del argv  # cli.run refuses arguments after the flags
    from bert_jax import storage

    paths = {f"--{name}": FLAGS[name].value for name in ("workdir", "output_dir", "vocab_file")}
    # Parsed once, before anything is read or written.
    storage.check_paths(paths, outputs=["--output_dir"], checkpoints=["--workdir"])
    runtime.start()
    out = export(
        FLAGS.workdir,
        FLAGS.output_dir,
        step=FLAGS.step,
        vocab_file=FLAGS.vocab_file,
        do_lower_case=FLAGS.do_lower_case,
    )
    print(f"exported step {out['step']} ({out['num_params']:,} parameters) to {out['output_dir']}")


if __name__ == "__main__":
    define_flags()
    cli.run(main)
