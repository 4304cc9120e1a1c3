"""Exports a training checkpoint as a Hugging Face BertForPreTraining directory.

    python -m bert_jax.export --workdir=DIR [--step=N] --output_dir=OUT [--vocab_file=vocab.txt]

OUT then holds config.json, model.safetensors (float32), vocab.txt and tokenizer_config.json;
`transformers.BertForPreTraining.from_pretrained(OUT)` loads it, and so does `bert_jax.hf.load_hf`.
The vocabulary defaults to the one the run's data was tokenized with (recorded with its md5 in
the checkpoint, from the data's manifest); a --vocab_file that is not that vocabulary is an
error, and so is a damaged checkpoint (bert_jax.checkpointing's checksums).

OUT appears whole or not at all: the files are written to a temporary directory beside it and
moved into place at the end, so a failed export (a full disk, a damaged step) leaves no
half-written directory; an existing OUT (an earlier export) gets the new files only then.
OUT may be a bucket (gs://...): new, empty or an earlier export of ours (listed in its
.bert_jax_export.json; anything else there is refused, never deleted), replaced whole: the
files are written locally and published one by one (bert_jax.storage.publish_dir), config.json
deleted first and uploaded last, so an export cut short is a directory transformers refuses (no
config.json), never a mix of two models' files.
"""

import os
import shutil
import tempfile

from absl import flags

from bert_jax import cli, storage

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
    from bert_jax import hf, pretrained  # here, not at the top: --help is fast

    remote = storage.is_url(output_dir)
    if not remote:
        _check_local_output(output_dir)
    elif storage.isfile(output_dir):
        raise cli.UserError(f"--output_dir={output_dir!r} is a file; pass a directory")
    else:
        storage.published_files(output_dir)  # an earlier export of ours, or refused now
    if not pretrained.is_workdir(workdir):
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
    if remote:  # written locally, then published file by file, config.json last
        with storage.staged_dir(output_dir, last="config.json") as scratch:
            hf.save_hf(model, loaded.vocab_file, scratch, do_lower_case=loaded.do_lower_case)
        return _report(loaded, model, output_dir)
    parent = os.path.dirname(os.path.abspath(output_dir))
    os.makedirs(parent, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=f".{os.path.basename(output_dir)}.tmp-", dir=parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(scratch, 0o777 & ~umask)  # mkdtemp's 0700 would follow the rename
    try:
        hf.save_hf(model, loaded.vocab_file, scratch, do_lower_case=loaded.do_lower_case)
        _move_into_place(scratch, output_dir)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return _report(loaded, model, output_dir)


def _report(loaded, model, output_dir: str) -> dict:
    from bert_jax import model as model_lib

    return {
        "step": loaded.step,
        "num_params": model_lib.count_params(model),
        "output_dir": output_dir,
    }


def _check_local_output(output_dir: str) -> None:
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise cli.UserError(f"--output_dir={output_dir!r} is a file; pass a directory")
    ancestor = os.path.dirname(os.path.abspath(output_dir))
    while not os.path.exists(ancestor):
        ancestor = os.path.dirname(ancestor)
    if not os.path.isdir(ancestor):
        raise cli.UserError(f"--output_dir={output_dir!r}: {ancestor} is a file, not a directory")


def _move_into_place(scratch: str, output_dir: str) -> None:
    """A new OUT: one rename. An existing one: each file replaced by a rename, the rest kept."""
    if not os.path.exists(output_dir):
        os.rename(scratch, output_dir)
        return
    for name in os.listdir(scratch):
        os.replace(os.path.join(scratch, name), os.path.join(output_dir, name))


def main(argv):
    if len(argv) > 1:
        raise cli.UserError(f"unexpected arguments {argv[1:]}")
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
