"""The CPU recipe (docs/training.md, "A CPU recipe"): configs/cpu.py pre-trained on the bundled
Wikipedia excerpt, from the dump to a curve against the baseline, with the training's CPU time.

    python -m examples.cpu_recipe --out_dir=cpu_out

The demo's stages (examples/demo.py) on other text: an 8,000-entry WordPiece vocabulary trained
on the dump's articles; MLM-only records of 64 tokens, unmasked (the trainer masks 40%, anew every
epoch), 10% of the articles held out; the most-frequent-token baseline at the held-out [MASK]
positions the trainer scores; configs/cpu.py; OUT_DIR/cpu_recipe.png. The training process's CPU
seconds (user + system) are printed beside its wall time and the load average: on a shared
machine the CPU time is the figure that carries over. Rerunning resumes, as the demo does.
Exit status 1 unless the last held-out [MASK]-position accuracy is above the baseline.
"""

import os
import resource
import sys
import time

from absl import app, flags, logging

from examples import demo, demo_report

FLAGS = flags.FLAGS

# 206 pages of English Wikipedia (97 articles), examples/data/README.md.
CORPUS = os.path.join(
    demo.REPO, "examples", "data", "enwiki-excerpt-pages-articles-multistream.xml.bz2"
)
EVAL_FRACTION = 0.1  # of the articles: 15 of 97


def define_flags() -> None:
    flags.DEFINE_string("out_dir", "cpu_out", "Where the records, run and plot go.")
    flags.DEFINE_string("config", "configs/cpu.py", "Training config.")
    flags.DEFINE_integer("num_train_steps", None, "Override the config's step count.")


def cpu_seconds() -> float:
    """User + system CPU seconds of the finished child processes (the trainer's)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main(argv):
    del argv
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # as the demo: no probing for a TPU
    out = os.path.abspath(FLAGS.out_dir)
    data_dir, workdir = os.path.join(out, "data"), os.path.join(out, "run")
    vocab_file = os.path.join(out, "vocab.txt")

    demo.banner(f"vocabulary: {demo.VOCAB_SIZE:,} WordPiece entries trained on the excerpt")
    demo.train_vocab(vocab_file, CORPUS)
    demo.banner(f"data prep: MLM records, {EVAL_FRACTION:.0%} of the articles held out")
    demo.prepare_data(data_dir, vocab_file, CORPUS, EVAL_FRACTION)

    config = demo.resolved_config(data_dir, FLAGS.config)
    base, top, unigram_loss = demo.baseline(config)
    vocab = open(vocab_file, encoding="utf-8").read().split("\n")
    demo.banner("baseline")
    print(
        f"always predicting {vocab[top]!r} scores {base:.3f} at the held-out [MASK] positions; "
        f"the training text's unigram distribution has cross-entropy {unigram_loss:.2f} there",
        flush=True,
    )

    demo.banner(f"pre-training ({FLAGS.config}); rerun to resume")
    load_before, cpu_before, start = os.getloadavg()[0], cpu_seconds(), time.time()
    demo.train(workdir, data_dir, FLAGS.config, FLAGS.num_train_steps)
    wall, cpu = time.time() - start, cpu_seconds() - cpu_before
    print(
        f"training took {wall:.0f} s of wall time and {cpu:.0f} CPU seconds (user + system) "
        f"with the 1-minute load average {load_before:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end",
        flush=True,
    )

    from bert_jax.training import metrics_log

    records = metrics_log.read_jsonl(workdir)
    evals = [r for r in records if r["split"] == "eval"]
    demo_report.print_curve(evals, base)
    png = os.path.join(out, "cpu_recipe.png")
    demo_report.plot(
        records,
        base,
        None,
        png,
        title="configs/cpu.py on the Wikipedia excerpt (97 articles): held-out figures",
        unigram_loss=unigram_loss,
        vocab_size=config.model.vocab_size,
    )
    print(f"wrote {png}")
    last = evals[-1]["mlm_accuracy"] if evals else 0.0
    if last <= base:
        print(
            f"FAILED: held-out [MASK]-position accuracy {last:.3f} <= {base:.3f}", file=sys.stderr
        )
        sys.exit(1)


if __name__ == "__main__":
    define_flags()
    app.run(main)
