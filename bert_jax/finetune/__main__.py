"""Fine-tunes a pre-trained BERT, or predicts with a fine-tuned one (docs/finetuning.md).

    python -m bert_jax.finetune --config=configs/finetune/sst2.py --init=DIR --workdir=DIR \\
        --config.data.train_file=SST-2/train.tsv --config.data.eval_files=SST-2/dev.tsv
    python -m bert_jax.finetune --mode=predict --workdir=DIR --test_file=SST-2/test.tsv

--init is a Hugging Face BERT directory or a pre-training workdir of ours; the same command again
resumes. Predict mode uses the config and --init saved with --workdir's checkpoints. A mistake
exits 2 with one `error:` line; a run stopped by a NaN/inf loss exits 1.
"""

import os
import sys

from absl import flags
from ml_collections import config_flags

from bert_jax import cli, runtime

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file(
    "config", None, "A configs/finetune/*.py file (train mode).", lock_config=True
)
flags.DEFINE_enum(
    "mode",
    "train",
    ["train", "predict"],
    "train: fine-tune (and evaluate, predict data.test_file, export); predict: "
    "write predictions for --test_file with the model in --workdir.",
)
flags.DEFINE_string(
    "init",
    None,
    "Pre-trained model directory: Hugging Face BERT or our "
    "pre-training workdir. predict mode: only if it moved since training.",
)
flags.DEFINE_string(
    "workdir", None, "Directory for checkpoints, metrics, predictions and the export."
)
flags.DEFINE_string("test_file", None, "predict mode: the file to predict.")
flags.DEFINE_string(
    "output",
    None,
    "predict mode: the predictions file (default: <workdir>/predictions/<test file name>).",
)
flags.DEFINE_integer("eval_batch_size", None, "predict mode: replaces the saved eval.batch_size.")
runtime.define_flags()
flags.mark_flags_as_required(["workdir"])


# Predict mode's own flags, and what train mode takes instead: refused there, not ignored.
_PREDICT_ONLY = {
    "test_file": "set --config.data.test_file",
    "output": "predictions go to <workdir>/predictions/",
    "eval_batch_size": "set --config.eval.batch_size",
}


def main(argv):
    del argv  # cli.run refuses arguments after the flags
    if FLAGS.mode == "train":
        for name, hint in _PREDICT_ONLY.items():
            if FLAGS[name].present:
                raise cli.UserError(
                    f"--{name} is for --mode=predict and does nothing in train mode; {hint}"
                )
    elif FLAGS["config"].present:
        raise cli.UserError(
            "--config is for --mode=train: predict mode uses the config saved with the "
            "checkpoints in --workdir (--eval_batch_size replaces its eval.batch_size)"
        )
    if FLAGS.eval_batch_size is not None and not 1 <= FLAGS.eval_batch_size < 2**31:
        # Before the model loads; 0 would silently keep the saved size.
        raise cli.UserError(
            f"--eval_batch_size={FLAGS.eval_batch_size} must be 1 or more (and below 2**31)"
        )
    _check_paths()
    runtime.start(FLAGS)
    import jax

    if FLAGS.mode == "predict":
        if not FLAGS.test_file:
            raise cli.UserError("--mode=predict needs --test_file")
        from bert_jax.finetune import predict

        overrides = {"eval.batch_size": FLAGS.eval_batch_size} if FLAGS.eval_batch_size else {}
        output, figures = predict.predict_from_workdir(
            FLAGS.workdir, FLAGS.test_file, FLAGS.output or "", FLAGS.init or "", overrides
        )
        if jax.process_index() == 0:
            print(f"wrote {output}" + (f"; metrics: {figures}" if figures else ""), flush=True)
        return
    if FLAGS.config is None:
        raise cli.UserError("--config=configs/finetune/<task>.py is required to train")
    cli.check_writable_dir(FLAGS.workdir, "--workdir")
    from bert_jax.finetune import train  # its finetune() checks the config first

    result = train.finetune(FLAGS.config, FLAGS.workdir, FLAGS.init)
    runtime.exit_if_signalled(result)
    if result["stopped"] == "nonfinite":
        sys.exit(1)  # train.finetune said why; a script must not take this run for a finished one
    if jax.process_index() == 0:
        print(f"finished at step {result['step']}; eval: {result['eval']}", flush=True)
        for key in ("predictions", "export"):
            if result[key]:
                print(f"{key}: {result[key]}", flush=True)


def _check_paths() -> None:
    """Every path flag and config field parsed once, before anything is read or written."""
    from bert_jax import storage

    paths = {f"--{name}": FLAGS[name].value for name in ("workdir", "init", "test_file", "output")}
    if FLAGS.config is not None:
        data = FLAGS.config.data
        for field in ("train_file", "eval_files", "test_file", "vocab_file"):
            paths[f"config.data.{field}"] = str(data.get(field) or "").split(",")
    written = ["--workdir"] if FLAGS.mode == "train" else ["--output"]
    storage.check_paths(paths, outputs=written, checkpoints=["--workdir"])
    if FLAGS.mode == "predict" and FLAGS.output and not storage.is_url(FLAGS.output):
        if FLAGS.output.rsplit("/", 1)[-1] in ("", ".", ".."):  # "out/"
            raise cli.UserError(
                f"--output={FLAGS.output!r} names no file; pass the predictions file's name"
            )
        if os.path.isdir(FLAGS.output):
            raise cli.UserError(
                f"--output={FLAGS.output!r} is a directory; pass the predictions file's name"
            )
        parent = os.path.dirname(os.path.abspath(FLAGS.output))
        cli.check_writable_dir(parent, f"--output={FLAGS.output!r}: its directory")


if __name__ == "__main__":
    cli.run(main)
