"""Pre-trains BERT: `python -m bert_jax.main --config=configs/bert_base.py --workdir=DIR`.

Any config field can be overridden on the command line, e.g.
    --config.optim.learning_rate=2e-4 --config.data.train_files=/data/wiki128
(a data_prep --output_dir: its manifest.json says everything else about the records).
Running the same command again resumes from the latest checkpoint in --workdir. A mistake is
one `error:` line and exit status 2; --verbosity=0 shows the libraries' INFO logs.
"""

import sys

from absl import flags
from ml_collections import config_flags

from bert_jax import cli, runtime

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "Path to a configs/*.py file.", lock_config=True)
flags.DEFINE_string(
    "workdir", None, "Directory for checkpoints, metrics.jsonl and TensorBoard logs."
)
runtime.define_flags()
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
    del argv  # cli.run refuses arguments after the flags
    from bert_jax import storage

    if "data" not in FLAGS.config or "train_files" not in FLAGS.config.data:
        from bert_jax.training import checkpoints  # the one rule for a fine-tuning config

        hint = "; it is a fine-tuning config: run python -m bert_jax.finetune"
        hint = hint if checkpoints.is_finetuning(FLAGS.config) else ""
        raise cli.UserError(
            f"--config is not a pre-training config (it has no config.data.train_files){hint}"
        )
    data, train_config = FLAGS.config.data, FLAGS.config.train
    storage.check_paths(  # every path parsed once, before anything is read or written
        {
            "--workdir": FLAGS.workdir,
            "config.data.train_files": data.train_files.split(","),
            "config.data.eval_files": data.eval_files.split(","),
            "config.data.vocab_file": data.vocab_file,
            "config.data.cache_dir": data.cache_dir,
            "config.train.init_checkpoint": train_config.init_checkpoint,
        },
        outputs=["--workdir"],
        local=["config.data.cache_dir"],
        checkpoints=["--workdir"],
    )

    runtime.start(FLAGS)
    import jax

    from bert_jax.training import pretrain

    result = pretrain.train_and_evaluate(FLAGS.config, FLAGS.workdir)
    runtime.exit_if_signalled(result)
    if jax.process_index() == 0:
        print(
            f"finished at step {result['step']} ({result['stopped']}); eval: {result['eval']}",
            flush=True,
        )
    if result["stopped"] == "nonfinite":
        sys.exit(1)  # a scheduler or script must not take this run for a finished one


if __name__ == "__main__":
    cli.run(main)
