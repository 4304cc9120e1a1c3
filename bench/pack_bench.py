r"""What packing saves on pre-training records: rows per record, and real tokens/s of the train
step packed vs unpacked.

  python -m bench.pack_bench                  # pydocs.txt records (NSP pairs, MLM-only), mini
  python -m bench.pack_bench --models=mini,base --rounds=5

Records are data_prep's from examples/data/pydocs.txt at L=128 (written once into --work_dir,
dupe_factor 1): NSP pairs (google-research/bert's recipe: 10% short on purpose) and MLM-only
segments (--nsp=false). For each kind the script prints the padding (the manifest's
padding_fraction), the records per row the trainer's packed pipeline gives
(bert_jax.data.input.pipeline.train_dataset with config.data.pack) against one record per row, and
the token bound (real tokens / L).

Then the train step (bench/runners.py's OursRunner: jit_train_step, dropout on) runs on real
batches of --batch_size rows from each pipeline, --batches distinct ones in turn, in interleaved
rounds; printed: real (non-padding) tokens/s and records/s of each, and their ratio per round
(packed / unpacked: above 1, packing is faster). Rows cost the same either way, so the ratio is
the real tokens per row packed over unpacked, less what the packed inputs cost.
"""

import json
import os
import statistics

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_list("models", ["mini"], "Train steps to time: tiny, mini, base, large.")
flags.DEFINE_list("kinds", ["nsp", "mlm_only"], "Records: nsp (NSP pairs), mlm_only.")
flags.DEFINE_string("work_dir", "/tmp/bert_jax_pack_bench", "Where the records go (reused).")
flags.DEFINE_integer("seq_len", 128, "Sequence length of the records.")
flags.DEFINE_integer("num_predictions", 20, "max_predictions_per_seq of the records.")
flags.DEFINE_integer("batch_size", 32, "Rows per train step (both sides).")
flags.DEFINE_integer("batches", 4, "Distinct real batches each side's step cycles through.")
flags.DEFINE_integer("count_batches", 100, "Batches read to count records per row.")
flags.DEFINE_integer("rounds", 3, "Interleaved timing rounds.")
flags.DEFINE_integer("steps", 2, "Steps per timed block.")


def take(data, vocab: int, n: int) -> list[dict]:
    from bert_jax.data.input import pipeline

    it = iter(pipeline.train_dataset(data, vocab, FLAGS.batch_size, seed=0))
    return [next(it) for _ in range(n)]


def records_in(batch: dict) -> int:
    from bert_jax.data.input import packing

    weights = batch.get(packing.EXAMPLE_WEIGHTS)
    return len(batch["input_ids"]) if weights is None else int(weights.sum())


def main(argv):
    del argv
    from bench.runners import OursRunner, make_config, write_shards
    from bert_jax.model.encoder import BertConfig

    print(
        f"{len(os.sched_getaffinity(0))} cores; L={FLAGS.seq_len}, P={FLAGS.num_predictions}, "
        f"{FLAGS.batch_size} rows per step",
        flush=True,
    )
    med = statistics.median
    for kind in FLAGS.kinds:
        files = write_shards(
            FLAGS.work_dir, FLAGS.seq_len, FLAGS.num_predictions, nsp=kind == "nsp"
        )
        with open(os.path.join(os.path.dirname(files), "manifest.json")) as f:
            padding = json.load(f)["stats"]["padding_fraction"]
        for model in FLAGS.models:
            config = make_config(model, FLAGS.seq_len, FLAGS.num_predictions, FLAGS.batch_size)
            config.data.train_files, config.data.read_threads = files, 1
            config.data.nsp = kind == "nsp"
            vocab = BertConfig.from_config_dict(config.model).vocab_size
            sides, real = {}, {}
            for packed in (False, True):
                config.data.pack = packed
                name = "packed" if packed else "unpacked"
                counted = take(config.data, vocab, FLAGS.count_batches)
                real[name] = {
                    "records": sum(map(records_in, counted)) / len(counted),
                    "tokens": sum(float(b["input_mask"].sum()) for b in counted) / len(counted),
                }
                sides[name] = OursRunner(config, counted[: FLAGS.batches])
            rows = FLAGS.batch_size
            bound = real["unpacked"]["tokens"] / (rows * FLAGS.seq_len)
            print(
                f"{kind} records (padding {padding:.3f}): rows per record unpacked 1.000, packed "
                f"{rows / real['packed']['records']:.3f} (token bound {bound:.3f}); "
                f"real tokens per row {real['unpacked']['tokens'] / rows:.1f} -> "
                f"{real['packed']['tokens'] / rows:.1f}",
                flush=True,
            )
            for side in sides.values():
                side.run(FLAGS.steps)  # one more warm block each, untimed
            rounds = []
            for i in range(FLAGS.rounds):
                order = list(sides) if i % 2 == 0 else list(sides)[::-1]
                rounds.append(
                    {name: sides[name].run(FLAGS.steps)[0] / FLAGS.steps for name in order}
                )
            for name in sides:
                step = med(r[name] for r in rounds)
                print(
                    f"  {model:>5} {name:<8} {step * 1e3:8.1f} ms/step "
                    f"{real[name]['tokens'] / step:9.0f} real tokens/s "
                    f"{real[name]['records'] / step:8.2f} records/s",
                    flush=True,
                )
            ratios = [
                (real["packed"]["tokens"] / r["packed"])
                / (real["unpacked"]["tokens"] / r["unpacked"])
                for r in rounds
            ]
            print(
                f"  {model:>5} packed / unpacked real tokens/s: {med(ratios):.2f}x "
                f"(rounds {', '.join(f'{x:.2f}' for x in ratios)})",
                flush=True,
            )


if __name__ == "__main__":
    app.run(main)
