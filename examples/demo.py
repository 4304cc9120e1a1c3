"""`make demo`: raw text to a Hugging Face model that fills in [MASK], in minutes on a CPU.

    python -m examples.demo --out_dir=demo_out

1. data_prep.vocab trains a WordPiece vocabulary on examples/data/pydocs.txt (3.6 MB of Python
   documentation): VOCAB_SIZE entries instead of bert-base-uncased's 30,522, so a 64-wide
   model spends its steps on the encoder instead of a vocabulary projection it cannot fill;
2. data_prep turns the text into unmasked MLM-only records of 64 tokens, 40% of which the trainer
   masks (anew every epoch), with a held-out split of whole documents;
3. the most-frequent-token baseline: the accuracy, at the [MASK] positions of the held-out set
   the trainer scores, of always predicting the commonest token of the training text;
4. bert_jax.main pre-trains configs/demo.py, evaluating held-out MLM accuracy by kind of masked
   position as it goes ([MASK], kept, random replacement: copying the kept tokens is no
   evidence of learning, so the headline is the [MASK] figure);
5. the last checkpoint is exported to Hugging Face format, reloaded with transformers, and asked
   to fill in the [MASK] of hand-written sentences (pairs whose context decides the answer) and
   of held-out records;
6. demo_out/curves.png plots the losses and held-out accuracies against the baseline.

The demo fails (exit status 1) unless held-out [MASK]-position accuracy ends at BAR_FACTOR times
the baseline or more (`verdict`). Rerunning it resumes: finished stages are skipped, a killed
training run continues.
"""

import collections
import os
import subprocess
import sys
import time

from absl import app, flags, logging

from examples import demo_report

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defined when run as a program only: tests import this module beside the binaries' own
    flags (--config is bert_jax.main's too)."""
    flags.DEFINE_string(
        "out_dir", "demo_out", "Where the records, run, exported model and plot go."
    )
    flags.DEFINE_string("config", "configs/demo.py", "Training config.")
    flags.DEFINE_integer(
        "num_train_steps", None, "Override the config's step count (e.g. for a quick look)."
    )


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(REPO, "examples", "data", "pydocs.txt")
# Measured on this corpus (docs/training.md, "What makes the demo learn"): 8,000 entries train in
# about 2 s, so the demo trains its own rather than shipping one.
VOCAB_SIZE = 8000
SEQ_LENGTH, MASKED_LM_PROB = 64, 0.4  # configs/demo.py's max_position_embeddings is SEQ_LENGTH
# Held-out [MASK]-position accuracy must end at this multiple of the baseline.
BAR_FACTOR = 3.0


def banner(text: str) -> None:
    print(f"\n=== {text} ===", flush=True)


def run(cmd: list[str], env: dict | None = None) -> None:
    """Runs a step of the pipeline as its command-line program, output straight to the user."""
    print("$ " + " ".join(cmd[2:] if cmd[:2] == [sys.executable, "-m"] else cmd), flush=True)
    subprocess.run(cmd, cwd=REPO, env=env, check=True)


def train_vocab(vocab_file: str, corpus: str = CORPUS) -> None:
    if os.path.exists(vocab_file):
        print(f"vocabulary already in {vocab_file}", flush=True)
        return
    run(
        [
            sys.executable,
            "-m",
            "data_prep.vocab",
            f"--input={corpus}",
            f"--output={vocab_file}",
            f"--vocab_size={VOCAB_SIZE}",
        ]
    )


def prepare_data(
    data_dir: str, vocab_file: str, corpus: str = CORPUS, eval_fraction: float = 0.05
) -> None:
    """MLM-only records of SEQ_LENGTH tokens, unmasked, with eval_fraction of the documents held
    out (the eval split is by document: no held-out sentence's neighbours were trained on)."""
    if os.path.exists(os.path.join(data_dir, "manifest.json")):
        print(f"records already in {data_dir}", flush=True)
        return
    run(
        [
            sys.executable,
            "-m",
            "data_prep.main",
            f"--input={corpus}",
            f"--vocab_file={vocab_file}",
            f"--output_dir={data_dir}",
            "--nsp=false",  # MLM only: NSP did not learn in the demo's minutes (docs/training.md)
            "--dynamic_masking",  # new masks every epoch: the run sees the corpus several times
            # Many predictions per step is what gets a small model off the most-frequent-token
            # plateau fast (docs/training.md): 40% of the tokens masked (Wettig et al. 2023, "Should
            # You Mask 15% in Masked Language Modeling?"), of short sequences.
            f"--max_seq_length={SEQ_LENGTH}",
            f"--masked_lm_prob={MASKED_LM_PROB}",
            f"--max_predictions_per_seq={round(MASKED_LM_PROB * SEQ_LENGTH)}",
            "--dupe_factor=1",
            f"--eval_fraction={eval_fraction}",
            "--num_workers=2",
            "--noprogress",
        ]
    )


def resolved_config(data_dir: str, config_file: str):
    """The config file (configs/demo.py) with the data's facts filled in, as the trainer resolves
    it."""
    import importlib.util

    from bert_jax.data.contract import data_facts

    spec = importlib.util.spec_from_file_location("demo_config", os.path.join(REPO, config_file))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config()
    config.data.train_files = config.data.eval_files = data_dir
    return data_facts.resolve(config)


def baseline(config) -> tuple[float, int, float]:
    """(held-out accuracy at [MASK] positions of always predicting the commonest token of the
    training text, that token, the cross-entropy there of the training text's unigram
    distribution). Scored on the very eval set the trainer scores (its records, masks and count),
    so the lines on the plot are the ones its figures must beat: a model on the plateau scores
    the first and its [MASK] loss sits at the last."""
    import numpy as np

    from bert_jax.data.contract import features, record_io, shard_files
    from bert_jax.data.input import pipeline

    d = config.data
    special = {d.cls_token_id, d.sep_token_id, d.mask_token_id, 0}  # 0: [PAD]
    counts = collections.Counter()
    for path in shard_files.find_shards(d.train_files, "train").files:
        for record in record_io.read_records(path):
            ex = features.decode_example(record)
            counts.update(ex[features.INPUT_IDS][ex[features.INPUT_MASK] > 0].tolist())
    top = next(t for t, _ in counts.most_common() if t not in special)
    # Add-one smoothing: a held-out word the training text lacks costs log(V + N), not infinity.
    unigram = np.ones(config.model.vocab_size)
    for t, c in counts.items():
        if t not in special:
            unigram[t] += c
    log_p = np.log(unigram / unigram.sum())
    batches = pipeline.eval_batches(
        d,
        d.eval_files,
        config.model.vocab_size,
        config.eval.batch_size,
        config.eval.num_examples,
        config.train.seed,
    )
    right = total = loss = 0.0
    for b in batches:
        shown = np.take_along_axis(b[features.INPUT_IDS], b[features.MASKED_LM_POSITIONS], 1)
        w = b[features.MASKED_LM_WEIGHTS] * b[pipeline.EXAMPLE_WEIGHT][:, None]
        at_mask = w * (shown == d.mask_token_id)
        answers = b[features.MASKED_LM_IDS]
        right += float((at_mask * (answers == top)).sum())
        loss -= float((at_mask * log_p[answers]).sum())
        total += float(at_mask.sum())
    return right / total, top, loss / total


def train(workdir: str, data_dir: str, config_file: str, num_train_steps: int | None) -> None:
    # The data directory is all the trainer needs to know about the data: its manifest.json
    # gives the lengths, the masking and the vocabulary (and its train and eval splits).
    cmd = [
        sys.executable,
        "-m",
        "bert_jax.main",
        f"--config={config_file}",
        f"--workdir={workdir}",
        f"--config.data.train_files={data_dir}",
        f"--config.data.eval_files={data_dir}",
    ]
    if num_train_steps:
        cmd.append(f"--config.train.num_train_steps={num_train_steps}")
    # One CPU device uses every core; the test suite's fake 8-device split would only add overhead.
    env = {**os.environ, "XLA_FLAGS": "", "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    run(cmd, env)


def verdict(evals: list[dict], base: float, factor: float = BAR_FACTOR) -> str | None:
    """Why the demo failed, or None when it passed: the last eval's held-out [MASK]-position
    accuracy must be at least `factor` x the most-frequent-token baseline. The all-positions
    figure cannot pass it: copying the kept tokens lifts that one with no language learnt."""
    if not evals or "mlm_accuracy" not in evals[-1]:
        return "no held-out [MASK]-position accuracy was logged"
    last = evals[-1]["mlm_accuracy"]
    if last < factor * base:
        return (
            f"held-out [MASK]-position accuracy {last:.3f} is below {factor:g}x the "
            f"most-frequent-token baseline ({factor * base:.3f})"
        )
    return None


def main(argv):
    del argv
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # Orbax logs every restore at INFO
    # A CPU demo: the export in this process would otherwise probe for a TPU (libtpu comes with
    # the test extra) and print screens of warnings about one it cannot find.
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    start = time.time()
    out = os.path.abspath(FLAGS.out_dir)
    data_dir, workdir, hf_dir = (os.path.join(out, d) for d in ("data", "run", "hf_model"))
    vocab_file = os.path.join(out, "vocab.txt")

    banner(f"1/6 vocabulary: {VOCAB_SIZE:,} WordPiece entries trained on pydocs.txt")
    train_vocab(vocab_file)

    banner("2/6 data prep: pydocs.txt -> MLM records (95% train, 5% held-out documents)")
    prepare_data(data_dir, vocab_file)

    banner("3/6 baseline")
    config = resolved_config(data_dir, FLAGS.config)
    base, top, unigram_loss = baseline(config)
    vocab = open(vocab_file, encoding="utf-8").read().split("\n")
    print(
        f"always predicting {vocab[top]!r}, the commonest token of the training text, scores "
        f"{base:.3f} at the held-out [MASK] positions; the demo passes at {BAR_FACTOR:g}x that, "
        f"{BAR_FACTOR * base:.3f}",
        flush=True,
    )

    banner("4/6 pre-training (configs/demo.py); rerun to resume")
    train(workdir, data_dir, FLAGS.config, FLAGS.num_train_steps)

    from bert_jax import export
    from bert_jax.training import metrics_log

    records = metrics_log.read_jsonl(workdir)
    evals = [r for r in records if r["split"] == "eval"]
    demo_report.print_curve(evals, base)

    banner("5/6 export to Hugging Face; transformers fills in [MASK]s")
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.ERROR)  # Orbax warns that a read-only manager saves nothing
    info = export.export(workdir, hf_dir)  # the vocabulary the run's data recorded
    print(f"exported step {info['step']} ({info['num_params']:,} parameters) to {hf_dir}")
    model, tokenizer = demo_report.load_hf(hf_dir)
    demo_report.fill_sentences(model, tokenizer)
    demo_report.fill_held_out(model, tokenizer, config)

    banner("6/6 plot")
    png = os.path.join(out, "curves.png")
    demo_report.plot(
        records,
        base,
        BAR_FACTOR * base,
        png,
        unigram_loss=unigram_loss,
        vocab_size=config.model.vocab_size,
    )
    print(f"wrote {png}")

    first, last = evals[0], evals[-1]
    print(
        f"\nheld-out [MASK]-position accuracy {first['mlm_accuracy']:.3f} (step {first['step']})"
        f" -> {last['mlm_accuracy']:.3f} (step {last['step']}): "
        f"{last['mlm_accuracy'] / base:.1f}x the baseline {base:.3f}. "
        f"Demo took {time.time() - start:.0f} s."
    )
    failed = verdict(evals, base)
    if failed:
        print(f"FAILED: {failed}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    define_flags()
    app.run(main)
