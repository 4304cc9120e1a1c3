"""`make demo`: raw text to a Hugging Face model that fills in [MASK], in a few minutes on a CPU.

    python -m examples.demo --out_dir=demo_out

1. data_prep turns examples/data/pydocs.txt (3.6 MB of Python documentation) into masked
   MLM/NSP records with a held-out split of whole documents;
2. the most-frequent-token baseline: the held-out accuracy of always predicting the masked
   token that is most common in the training records;
3. bert_jax.main pre-trains configs/demo.py (2 layers, 64 wide: 2.1M parameters), evaluating
   held-out MLM and NSP accuracy as it goes;
4. the last checkpoint is exported to Hugging Face format, reloaded with transformers and asked
   to fill in a [MASK];
5. demo_out/curves.png plots the training loss and the held-out accuracy against the baseline.

The demo fails (exit status 1) if held-out MLM accuracy does not end clearly above the baseline.
Rerunning it resumes: finished stages are skipped, a killed training run continues.
"""

import collections
import os
import subprocess
import sys
import time

from absl import app, flags, logging

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", "demo_out", "Where the records, run, exported model and plot go.")
flags.DEFINE_string("config", "configs/demo.py", "Training config.")
flags.DEFINE_integer(
    "num_train_steps", None, "Override the config's step count (e.g. for a quick look)."
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(REPO, "examples", "data", "pydocs.txt")
VOCAB = os.path.join(REPO, "data_prep", "testdata", "bert-base-uncased-vocab.txt")


def banner(text: str) -> None:
    print(f"\n=== {text} ===", flush=True)


def run(cmd: list[str], env: dict | None = None) -> None:
    """Runs a step of the pipeline as its command-line program, output straight to the user."""
    print("$ " + " ".join(cmd[2:] if cmd[:2] == [sys.executable, "-m"] else cmd), flush=True)
    subprocess.run(cmd, cwd=REPO, env=env, check=True)


def prepare_data(data_dir: str) -> None:
    if os.path.exists(os.path.join(data_dir, "manifest.json")):
        print(f"records already in {data_dir}", flush=True)
        return
    run(
        [
            sys.executable,
            "-m",
            "data_prep.main",
            f"--input={CORPUS}",
            f"--vocab_file={VOCAB}",
            f"--output_dir={data_dir}",
            "--dupe_factor=5",
            "--eval_fraction=0.05",
            "--num_workers=2",
            "--noprogress",
        ]
    )


def masked_labels(data_dir: str, split: str) -> collections.Counter:
    from bert_jax import features, manifest, record_io

    counts = collections.Counter()
    for path in manifest.find_shards(data_dir, split).files:
        for record in record_io.read_records(path):
            ex = features.decode_example(record)
            counts.update(ex[features.MASKED_LM_IDS][ex[features.MASKED_LM_WEIGHTS] > 0].tolist())
    return counts


def baseline(data_dir: str) -> tuple[float, int]:
    """Held-out accuracy of always predicting the commonest masked training token, and that
    token."""
    top, _ = masked_labels(data_dir, "train").most_common(1)[0]
    held_out = masked_labels(data_dir, "eval")
    return held_out[top] / sum(held_out.values()), top


def train(workdir: str, data_dir: str) -> None:
    # The data directory is all the trainer needs to know about the data: its manifest.json
    # gives the lengths, the masking and the vocabulary (and its train and eval splits).
    cmd = [
        sys.executable,
        "-m",
        "bert_jax.main",
        f"--config={FLAGS.config}",
        f"--workdir={workdir}",
        f"--config.data.train_files={data_dir}",
        f"--config.data.eval_files={data_dir}",
    ]
    if FLAGS.num_train_steps:
        cmd.append(f"--config.train.num_train_steps={FLAGS.num_train_steps}")
    # One CPU device uses every core; the test suite's fake 8-device split would only add overhead.
    env = {**os.environ, "XLA_FLAGS": "", "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    run(cmd, env)


def fill_mask(hf_dir: str, data_dir: str, num_records: int = 2) -> None:
    """Reloads the export with transformers and fills the [MASK]s of held-out records.

    The records are shaped as in training (two segments, ~15% of the tokens masked): a model
    this small and this briefly trained has learnt little beyond frequent words and where
    punctuation goes, and shows it best on inputs like the ones it saw.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local directory: never touch the network
    import numpy as np
    import torch
    import transformers

    from bert_jax import features, manifest, record_io

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    model = transformers.BertForMaskedLM.from_pretrained(hf_dir, local_files_only=True).eval()
    tokenizer = transformers.BertTokenizer.from_pretrained(hf_dir, local_files_only=True)
    path = manifest.find_shards(data_dir, "eval").files[0]
    right = total = 0
    for n, record in enumerate(record_io.read_records(path)):
        if n == num_records:
            break
        ex = features.decode_example(record)
        length = int(ex[features.INPUT_MASK].sum())
        ids = ex[features.INPUT_IDS][:length]
        with torch.no_grad():
            logits = model(
                input_ids=torch.tensor(ids[None]).long(),
                token_type_ids=torch.tensor(ex[features.SEGMENT_IDS][None, :length]).long(),
            ).logits[0]
        guesses = logits.argmax(-1).numpy()
        truth = dict(
            zip(ex[features.MASKED_LM_POSITIONS].tolist(), ex[features.MASKED_LM_IDS].tolist())
        )
        tokens = tokenizer.convert_ids_to_tokens(ids.tolist())
        for p in np.flatnonzero(ids == tokenizer.mask_token_id):
            guess, want = tokenizer.convert_ids_to_tokens([int(guesses[p]), truth[int(p)]])
            right += guess == want
            total += 1
            tokens[p] = f"[{guess}{'' if guess == want else ' (' + want + ')'}]"
        print(
            "  "
            + tokenizer.convert_tokens_to_string(tokens[1:])
            .replace(" [SEP]", "\n  ", 1)
            .replace(" [SEP]", "")
        )
    print(
        f"[guess (answer)]: {right} of {total} [MASK]s filled right by transformers.BertForMaskedLM"
    )


def plot(records: list[dict], base: float, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train_recs = [r for r in records if r["split"] == "train"]
    eval_recs = [r for r in records if r["split"] == "eval"]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    ax_loss.plot(
        [r["step"] for r in train_recs],
        [r["loss"] for r in train_recs],
        label="train loss (MLM + NSP)",
    )
    ax_loss.plot(
        [r["step"] for r in eval_recs], [r["loss"] for r in eval_recs], "o-", label="held-out loss"
    )
    ax_loss.set_xlabel("step")
    ax_loss.set_ylabel("loss")
    ax_loss.legend()
    ax_acc.plot(
        [r["step"] for r in eval_recs],
        [r["mlm_accuracy"] for r in eval_recs],
        "o-",
        label="held-out MLM accuracy",
    )
    ax_acc.plot(
        [r["step"] for r in eval_recs],
        [r["nsp_accuracy"] for r in eval_recs],
        "s--",
        label="held-out NSP accuracy",
    )
    ax_acc.axhline(
        base, color="gray", linestyle=":", label=f"most-frequent-token baseline ({base:.3f})"
    )
    ax_acc.set_xlabel("step")
    ax_acc.set_ylabel("accuracy")
    ax_acc.set_ylim(0, 1)
    ax_acc.legend()
    fig.suptitle("bert-jax demo: a 2-layer BERT (H=64) pre-trained on Python docs")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv):
    del argv
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # Orbax logs every restore at INFO
    start = time.time()
    out = os.path.abspath(FLAGS.out_dir)
    data_dir, workdir, hf_dir = (os.path.join(out, d) for d in ("data", "run", "hf_model"))

    banner("1/5 data prep: pydocs.txt -> masked MLM/NSP records (95% train, 5% held-out documents)")
    prepare_data(data_dir)

    banner("2/5 baseline")
    base, top = baseline(data_dir)
    vocab = open(VOCAB, encoding="utf-8").read().split("\n")
    print(
        f"always predicting {vocab[top]!r}, the commonest masked token in training, scores "
        f"{base:.3f} held-out MLM accuracy",
        flush=True,
    )

    banner("3/5 pre-training (configs/demo.py); rerun to resume")
    train(workdir, data_dir)

    from bert_jax import export, metrics_log

    records = metrics_log.read_jsonl(workdir)
    evals = [r for r in records if r["split"] == "eval"]
    print(f"\nheld-out MLM accuracy by step (baseline {base:.3f}):")
    for r in evals:
        print(
            f"  step {r['step']:>5}  {r['mlm_accuracy']:.3f}  "
            f"{'#' * round(100 * r['mlm_accuracy'])}"
        )

    banner("4/5 export to Hugging Face; transformers fills in the [MASK]s of held-out records")
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.ERROR)  # Orbax warns that a read-only manager saves nothing
    info = export.export(workdir, hf_dir)  # the vocabulary the run's data recorded
    print(f"exported step {info['step']} ({info['num_params']:,} parameters) to {hf_dir}")
    fill_mask(hf_dir, data_dir)

    banner("5/5 plot")
    png = os.path.join(out, "curves.png")
    plot(records, base, png)
    print(f"wrote {png}")

    first, last = evals[0]["mlm_accuracy"], evals[-1]["mlm_accuracy"]
    print(
        f"\nheld-out MLM accuracy {first:.3f} (step {evals[0]['step']}) -> {last:.3f} "
        f"(step {evals[-1]['step']}); baseline {base:.3f}. Demo took {time.time() - start:.0f} s."
    )
    if last < 1.5 * base or last <= first:
        print(
            "FAILED: held-out MLM accuracy did not end clearly above the baseline and rising",
            file=sys.stderr,
        )
        sys.exit(1)


if __name__ == "__main__":
    app.run(main)
