r"""Time to quality, recipe against recipe: the modern pre-training recipe (ModernBERT's) against
the 2018 BERT recipe, two same-size small models trained side by side on the bundled Wikipedia
excerpt for the same time, both scored on one fixed held-out set masked at 15%.

    python -m bench.recipe_bench [--out_dir=recipe_out] [--bert_steps=N] [--quick]

One run: (a) an 8,000-entry WordPiece vocabulary trained on the excerpt and three data_prep
outputs from it, 10% of the articles held out by data_prep's document hash (the same articles in
all three): the BERT recipe's records (sentence pairs with NSP, 15% masked statically, 5 dupes),
the modern recipe's (MLM only, one document's text a record, unmasked: the trainer masks 30% anew
each epoch and packs records into rows) and the eval set (MLM only, 15% masked statically once:
both models are scored on its held-out records, the same batches). (b) The two models, each
bert_jax's jitted train step (train.make_setup + jit_train_step, the real optimizer):
  BERT:   the 2018 block (absolute positions, post-norm, GELU MLP, biases, full attention),
          dropout 0.1, MLM + NSP, BERT's AdamW (b2 0.999, eps 1e-6, weight decay 0.01, no bias
          correction, global-norm clipping at 1), linear warmup then linear decay to 0.
  modern: the ModernBERT block (configs/modernbert_base.py's modern_block: RoPE, pre-norm,
          GeGLU, no biases, a sliding window with a global layer every third), no dropout, MLM
          only at 30% on packed rows, ModernBERT's AdamW (configs/modern.py: b2 0.98, eps 1e-6,
          decoupled decay, no clipping), warmup-stable-decay with a 1-sqrt decay over its last
          DECAY_SHARE of the time, and batch-size warmup (growing accumulation counts).
Same width, depth and heads; the GeGLU is sized to the GELU MLP's parameters. The same peak rate
and initializer range for both (the published recipes' rates are for their base sizes; these are
the rates configs/demo.py measured for this width) and the same warmup steps.

Steps interleave, the side whose clock is behind taking the next, so both sides' steps spread
over the same stretch of the machine's load (shared, varying) and it hits both alike. Each
side's clock is the sum of its own steps' wall times (batch to device, step,
block_until_ready): the issue's "same wall time", the figure a user waits for; per-process CPU
seconds cannot be told apart per side when both run in one process, and per-thread CPU time
misses XLA's worker threads. Each side's CPU seconds over its steps (the process's CPU time
while its step ran, the input pipeline's background threads included) are printed beside it.
Compilation (each program timed apart) and evals are outside both clocks. The budget: the BERT
side runs --bert_steps steps; the modern side runs at its peak rate until its clock reaches
(1 - DECAY_SHARE) of the BERT side's projected total, then decays over the steps that fit in the
rest (its last 50 steps' mean time tells how many), re-planned after each of its steps as the
load moves both sides' step times, so the two end at about the same time.

Both are evaluated every --eval_every of their own steps and at their last: held-out [MASK]
accuracy (losses.position_kinds: the positions shown as [MASK], not the kept or replaced ones)
and loss there. Printed: the curves, the BERT recipe's final [MASK] accuracy and loss, the time
at which the modern recipe first reached each (at an eval; an upper bound) and its ratio to the
BERT side's total. Measured figures: docs/training.md, "The modern recipe against the BERT
recipe".
"""

import dataclasses
import os
import subprocess
import sys
import time

from absl import app, flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(REPO, "examples", "data", "enwiki-excerpt-pages-articles-multistream.xml.bz2")
SEQ_LENGTH = 128
BERT_PREDICTIONS = 20  # 15% of 128, rounded up
EVAL_FRACTION = 0.1  # of the articles: 15 of 97, 517 records of 128 tokens
DECAY_SHARE = 0.2  # of the modern side's time: its WSD decay


@dataclasses.dataclass(frozen=True)
class Size:
    hidden: int
    layers: int
    heads: int
    bert_mlp: int  # GELU MLP width (4H)
    modern_mlp: int  # GeGLU width: 3 x H x width = 2 x H x bert_mlp
    window: int  # the modern block's sliding window (total, both sides)
    batch: int  # rows a step (the modern side's full batch)
    accum: int  # the modern side's micro-batches at full batch (batch warmup from 1)
    eval_examples: int  # 0: all held-out records


FULL = Size(64, 3, 2, 256, 168, 64, 32, 4, 0)
QUICK = Size(32, 2, 2, 64, 40, 64, 8, 1, 64)  # one program a side: compiling is most of it

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", "recipe_out", "Where the vocabulary and records go (reused).")
flags.DEFINE_integer("bert_steps", 0, "The BERT side's steps (the budget); 0: the mode's.")
flags.DEFINE_integer("eval_every", 0, "Steps between evals of each side; 0: bert_steps / 20.")
flags.DEFINE_float("learning_rate", 2e-3, "Peak rate of both sides.")
flags.DEFINE_bool("quick", False, "A tiny model for a few steps: checks the bench runs.")


def prepare(out: str) -> dict[str, str]:
    """The vocabulary and the three record directories (skipped where already written)."""
    os.makedirs(out, exist_ok=True)
    vocab = os.path.join(out, "vocab.txt")
    py = [sys.executable, "-m"]
    if not os.path.exists(vocab):
        cmd = py + ["data_prep.vocab", f"--input={CORPUS}", f"--output={vocab}"]
        subprocess.run(cmd + ["--vocab_size=8000"], check=True, cwd=REPO)
    common = [
        "data_prep.main",
        f"--input={CORPUS}",
        f"--vocab_file={vocab}",
        f"--max_seq_length={SEQ_LENGTH}",
        f"--max_predictions_per_seq={BERT_PREDICTIONS}",
        f"--eval_fraction={EVAL_FRACTION}",
        "--noprogress",
    ]
    kinds = {
        "bert": ["--masked_lm_prob=0.15", "--dupe_factor=5"],  # NSP pairs, static masks
        "modern": ["--nsp=false", "--dynamic_masking", "--short_seq_prob=0", "--dupe_factor=1"],
        "eval": ["--nsp=false", "--short_seq_prob=0", "--masked_lm_prob=0.15", "--dupe_factor=1"],
    }
    dirs = {}
    for kind, extra in kinds.items():
        dirs[kind] = os.path.join(out, kind)
        if not os.path.exists(os.path.join(dirs[kind], "manifest.json")):
            cmd = py + common + [f"--output_dir={dirs[kind]}"] + extra
            subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    return dirs


def _shape(config, size: Size, mlp: int, steps: int, eval_every: int):
    m = config.model
    m.vocab_size = 0  # the data's
    m.hidden_size, m.num_hidden_layers, m.num_attention_heads = size.hidden, size.layers, size.heads
    m.intermediate_size = mlp
    m.initializer_range = 0.1  # configs/demo.py: Xavier's at H=64 (BERT's 0.02 is for H=768)
    config.optim.learning_rate = FLAGS.learning_rate
    config.optim.warmup_steps = max(1, steps // 20)
    config.train.global_batch_size = size.batch
    config.train.num_train_steps = steps
    config.eval.every_steps = eval_every
    config.eval.batch_size = 128 if not size.eval_examples else size.eval_examples
    config.eval.num_examples = size.eval_examples
    config.mesh.num_devices = 1
    config.data.read_threads = 1
    return config


def bert_config(data_dir: str, size: Size, steps: int, eval_every: int):
    from configs import default

    config = _shape(default.get_config(), size, size.bert_mlp, steps, eval_every)
    config.model.max_position_embeddings = SEQ_LENGTH
    config.data.train_files = config.data.eval_files = data_dir
    return config  # the rest is configs/default.py: BERT's optimizer and linear schedule


def modern_config(data_dir: str, size: Size, steps: int, eval_every: int):
    from configs import modern, modernbert_base

    config = modern.get_config()
    modernbert_base.modern_block(config.model)
    config.model.local_attention = size.window
    config.model.global_rope_theta = 10_000.0  # stage 1's
    config = _shape(config, size, size.modern_mlp, steps, eval_every)
    d = config.data
    d.train_files = d.eval_files = data_dir
    d.max_seq_length = SEQ_LENGTH
    d.pack_max_examples = 8
    d.max_predictions_per_seq = modern.predictions_per_row(SEQ_LENGTH, d.pack_max_examples)
    d.pack_window = 256
    config.optim.weight_decay = 1e-5 / FLAGS.learning_rate  # configs/modern.py's rule
    config.optim.decay_fraction = 0.0  # the decay is placed by time (Side.decay_for)
    t = config.train
    t.grad_accum_steps, t.batch_warmup_start_accum = size.accum, 1
    t.batch_warmup_steps = max(1, steps // 10)
    t.num_train_steps = 10**7  # the stable phase lasts until decay_for ends it
    return config


class Side:
    """One recipe: its setup, state, train stream, compiled steps (one per batch size) and clock."""

    def __init__(self, name: str, config):
        import jax

        from bert_jax.data.contract import data_facts
        from bert_jax.data.input import pipeline
        from bert_jax.training import optim, pretrain

        self.name, self.jax = name, jax
        self.config = config = data_facts.resolve(config)
        self.setup = pretrain.make_setup(config)
        t = config.train
        self.data = iter(
            pipeline.train_dataset(
                config.data,
                self.setup.model_config.vocab_size,
                t.global_batch_size,
                t.seed,
                batch_warmup=optim.batch_warmup(t),
            )
        )
        self.lr = dict(self.setup.lr)
        self.last_step = t.num_train_steps
        with self.setup.activate():
            self.state = pretrain.jit_init(self.setup, t.seed)()
        self.steps = {}  # accumulation count -> compiled step
        self.eval_fn = pretrain.jit_eval_step(self.setup)
        self.step = 0
        self.seconds = self.cpu = self.compile_seconds = 0.0
        self.recent = []  # the last 50 steps' seconds
        self.num_params = sum(x.size for x in jax.tree.leaves(self.state["params"]))

    def train_step(self) -> None:
        from bert_jax.data.contract import features
        from bert_jax.data.input import growing_batches
        from bert_jax.model import sharding
        from bert_jax.training import pretrain

        host = next(self.data)
        t = self.config.train
        accum = growing_batches.accumulation(
            host[features.INPUT_IDS].shape[0], t.global_batch_size, t.grad_accum_steps
        )
        with self.setup.activate():
            if accum not in self.steps:  # compiled apart, outside the clock
                start = time.perf_counter()
                batch = sharding.host_to_global(host, self.setup.batch_sharding)
                lowered = pretrain.jit_train_step(self.setup, accum).lower(
                    self.state, batch, self.lr
                )
                self.steps[accum] = lowered.compile()
                self.compile_seconds += time.perf_counter() - start
            cpu, start = time.process_time(), time.perf_counter()
            batch = sharding.host_to_global(host, self.setup.batch_sharding)
            self.state, metrics = self.steps[accum](self.state, batch, self.lr)
            self.jax.block_until_ready((self.state, metrics))
            seconds = time.perf_counter() - start
            self.cpu += time.process_time() - cpu
        self.seconds += seconds
        self.recent = (self.recent + [seconds])[-50:]
        self.step += 1

    def decay_for(self, steps: int) -> None:
        """WSD: a 1-sqrt decay to 0 that ends `steps` steps from now. Called again during the
        decay (the time left, and so the steps, move with the load) it stretches or shrinks the
        rest of the decay from where it is: the rate goes on from its present value."""
        v = {k: float(x) for k, x in self.lr.items()}
        left = max(0.0, min(1.0, (v["total"] - self.step) / v["span"]))  # 1: not yet decaying
        self.last_step = self.step + steps
        v.update(total=self.last_step, span=steps / max(left, 1e-6))
        self.lr = {k: self.jax.numpy.float32(x) for k, x in v.items()}

    def evaluate(self, batches) -> dict:
        from bert_jax.training import pretrain

        start = time.perf_counter()
        figures = pretrain.evaluate(self.setup, self.eval_fn, self.state["params"], batches)
        return {**figures, "eval_seconds": time.perf_counter() - start}


def baseline(data, batches) -> float:
    """Held-out [MASK] accuracy of always predicting the commonest token of the training text
    (`data`: the modern recipe's resolved config.data, its records the excerpt's text once,
    unmasked): the plateau a small model sits on before it predicts from context."""
    import collections

    import numpy as np

    from bert_jax.data.contract import features as F
    from bert_jax.data.contract import record_io, shard_files
    from bert_jax.data.input import pipeline

    counts = collections.Counter()
    for path in shard_files.find_shards(data.train_files, "train").files:
        for record in record_io.read_records(path):
            example = F.decode_example(record)
            counts.update(example[F.INPUT_IDS][example[F.INPUT_MASK] > 0].tolist())
    special = {data.cls_token_id, data.sep_token_id, data.mask_token_id, 0}
    top = next(t for t, _ in counts.most_common() if t not in special)
    right = total = 0.0
    for b in batches:
        shown = np.take_along_axis(b[F.INPUT_IDS], b[F.MASKED_LM_POSITIONS], 1)
        w = b[F.MASKED_LM_WEIGHTS] * b[pipeline.EXAMPLE_WEIGHT][:, None]
        w = w * (shown == data.mask_token_id)
        right += float((w * (b[F.MASKED_LM_IDS] == top)).sum())
        total += float(w.sum())
    return right / total


def first_reaching(curve: list[dict], key: str, target: float, better) -> dict | None:
    return next((p for p in curve if better(p[key], target)), None)


def main(argv):
    del argv
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from bert_jax.data.contract import data_facts
    from bert_jax.data.input import pipeline

    size = QUICK if FLAGS.quick else FULL
    bert_steps = FLAGS.bert_steps or (6 if FLAGS.quick else 1200)
    eval_every = FLAGS.eval_every or max(1, bert_steps // 20)
    dirs = prepare(os.path.abspath(FLAGS.out_dir))
    bert = Side("bert", bert_config(dirs["bert"], size, bert_steps, eval_every))
    modern = Side("modern", modern_config(dirs["modern"], size, bert_steps, eval_every))
    eval_config = bert_config(dirs["eval"], size, bert_steps, eval_every)
    eval_config = data_facts.resolve(eval_config)
    e = eval_config.eval
    batches = pipeline.eval_batches(
        eval_config.data, dirs["eval"], eval_config.model.vocab_size, e.batch_size, e.num_examples
    )
    rows = sum(int(b[pipeline.EXAMPLE_WEIGHT].sum()) for b in batches)
    plateau = baseline(modern.config.data, batches)
    print(
        f"models: H={size.hidden} L={size.layers} A={size.heads}, rows of {SEQ_LENGTH}, "
        f"batch {size.batch}; BERT {bert.num_params:,} parameters (GELU {size.bert_mlp}), "
        f"modern {modern.num_params:,} (GeGLU {size.modern_mlp}, window {size.window}); "
        f"peak rate {FLAGS.learning_rate}; budget: {bert_steps} BERT steps; eval set: {rows} "
        f"held-out records at 15%, always the commonest token scores {plateau:.4f}; "
        f"load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    curves = {"bert": [], "modern": []}
    header = f"{'side':<7} {'step':>6} {'time_s':>8} {'cpu_s':>8} {'mask_acc':>8} {'mask_loss':>9}"
    print(header, flush=True)

    def record(side: Side) -> None:
        f = side.evaluate(batches)
        point = {"step": side.step, "time": side.seconds, "cpu": side.cpu}
        point.update(acc=f["mlm_accuracy"], loss=f["mlm_loss"])
        curves[side.name].append(point)
        print(
            f"{side.name:<7} {side.step:>6} {side.seconds:>8.1f} {side.cpu:>8.1f} "
            f"{point['acc']:>8.4f} {point['loss']:>9.4f}",
            flush=True,
        )

    record(bert)
    record(modern)
    decaying = False
    while bert.step < bert.last_step or modern.step < modern.last_step:
        # The side whose clock is behind steps next: both clocks advance together, so both
        # sides' steps are spread over the same stretch of the machine's (varying) load.
        side = min((s for s in (bert, modern) if s.step < s.last_step), key=lambda s: s.seconds)
        side.train_step()
        if side.step % eval_every == 0 or side.step == side.last_step:
            record(side)
        if bert.step == 0 or modern.step <= modern.config.train.batch_warmup_steps:
            continue
        projected = bert.seconds * bert.last_step / bert.step  # the BERT side's total
        decaying = decaying or modern.seconds >= (1 - DECAY_SHARE) * projected
        decaying = decaying or bert.step >= bert.last_step
        if decaying and side is modern and modern.step < modern.last_step:
            per_step = sum(modern.recent) / len(modern.recent)  # at the full batch
            modern.decay_for(max(1, round((projected - modern.seconds) / per_step)))
    summarize(bert, modern, curves, plateau)


def summarize(bert: Side, modern: Side, curves: dict, plateau: float) -> None:
    print()
    for side in (bert, modern):
        print(
            f"{side.name}: {side.step} steps in {side.seconds:.1f} s of step time "
            f"({side.cpu:.1f} CPU s; {side.seconds / side.step * 1000:.0f} ms a step), "
            f"compiling {side.compile_seconds:.1f} s apart ({len(side.steps)} programs)"
        )
    final = curves["bert"][-1]
    print(
        f"BERT recipe final: [MASK] accuracy {final['acc']:.4f}, loss {final['loss']:.4f} "
        f"at {final['time']:.1f} s (always the commonest token: {plateau:.4f})"
    )
    for key, better, what in (
        ("acc", lambda a, b: a >= b, "accuracy"),
        ("loss", lambda a, b: a <= b, "loss"),
    ):
        hit = first_reaching(curves["modern"], key, final[key], better)
        if hit is None:
            print(f"modern recipe did not reach the BERT recipe's final [MASK] {what}")
        else:
            print(
                f"modern recipe reached the BERT recipe's final [MASK] {what} at "
                f"{hit['time']:.1f} s (step {hit['step']}): {hit['time'] / final['time']:.2f} "
                f"of the BERT recipe's time ({hit['cpu'] / final['cpu']:.2f} by CPU seconds)"
            )
    last = curves["modern"][-1]
    print(
        f"modern recipe final: [MASK] accuracy {last['acc']:.4f}, loss {last['loss']:.4f} at "
        f"{last['time']:.1f} s; load average at the end {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    app.run(main)
