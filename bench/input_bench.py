r"""Input pipeline batches/s from record shards, against the train step's steps/s on the same
machine.

  python -m bench.input_bench   # writes pydocs.txt records (static and dynamic masking)
  python -m bench.input_bench --train_files='/data/wiki/train-*.arrayrecord' \
      --models=base --batch_size=32
  python -m bench.input_bench --bucket   # the same records on local disk and in a bucket

The pipeline timed is the trainer's own (bert_jax.data.input.pipeline.train_dataset, then
sharding.host_to_global as the training loop does), over data_prep's ArrayRecord shards: decoding
tf.train.Examples, the global shuffle, batching and, with --dynamic_masking, masking in numpy.
Without --train_files the script first writes shards of examples/data/pydocs.txt with
`python -m data_prep.main` (dupe_factor 1), once per masking mode, into --work_dir.

The train step (bert_jax.training.pretrain.jit_train_step, as bench/train_bench.py times it) runs at
the same batch size in the same process, in rounds interleaved with the pipeline's. Printed:
batches/s of the pipeline alone, steps/s of the step alone, and their ratio (headroom: how many
times faster the pipeline feeds than the step eats; above 1 it never starves the step, as long as it
has a core's slice to run on).
"""

import os
import statistics
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "train_files", "", "Record globs; empty: write pydocs.txt shards into --work_dir."
)
flags.DEFINE_string(
    "work_dir", "/tmp/bert_jax_input_bench", "Where generated shards go (reused if present)."
)
flags.DEFINE_list(
    "models", ["mini", "base"], "Train steps to compare with: tiny, mini, base, large."
)
flags.DEFINE_integer("seq_len", 128, "Sequence length of the records.")
flags.DEFINE_integer("num_predictions", 20, "max_predictions_per_seq of the records.")
flags.DEFINE_integer("batch_size", 32, "Sequences per batch (and per train step).")
flags.DEFINE_integer("batches", 50, "Batches per timed pipeline block.")
flags.DEFINE_integer("rounds", 3, "Interleaved rounds (pipeline, steps).")
flags.DEFINE_list(
    "masking",
    ["static", "dynamic"],
    "static: masks from the records; dynamic: masked at read time.",
)
flags.DEFINE_integer("num_workers", 0, "config.data.num_workers (Grain worker processes).")
flags.DEFINE_integer("read_threads", 4, "config.data.read_threads.")
flags.DEFINE_bool(
    "record_checks",
    False,
    "Instead: the cost of checking every record read (TFRecord's data CRC-32C), the pipeline "
    "over TFRecord shards with the check and with it bypassed, in interleaved rounds.",
)
flags.DEFINE_bool(
    "bucket",
    False,
    "Instead of the train step: the pipeline over the same records on local disk and in a bucket "
    "(fake-gcs-server on localhost), cold and warm cache, and one ranged read per record "
    "(bench/bucket_input.py).",
)
flags.DEFINE_float(
    "mfu", 0.55, "--bucket: the model FLOPs utilisation a TPU v4 host's BERT-Large step runs at."
)


class PipelineRunner:
    """The trainer's input: Grain batches of this process, put on the batch sharding."""

    def __init__(self, data_config, vocab_size: int, setup):
        from bert_jax.data.input import pipeline
        from bert_jax.model import sharding

        self.sharding, self.host_to_global = setup.batch_sharding, sharding.host_to_global
        self.iterator = iter(
            pipeline.train_dataset(data_config, vocab_size, FLAGS.batch_size, seed=0)
        )
        self.run(5)  # start the reader threads and fill the prefetch buffer

    def run(self, batches: int) -> float:
        import jax

        start = time.perf_counter()
        for _ in range(batches):
            batch = self.host_to_global(next(self.iterator), self.sharding)
        jax.block_until_ready(batch)
        return time.perf_counter() - start


def record_checks(config, vocab: int, setup) -> None:
    """Batches/s and records/s over TFRecord shards with every record's data CRC checked (what
    the trainer does) and with that check bypassed (bench only: record_io._check_data replaced by
    a pass-through), side by side in interleaved rounds."""
    from bench.runners import write_shards
    from bert_jax.data.contract import data_facts, record_io, shard_files
    from bert_jax.data.input import sources

    config.data.dynamic_masking, config.data.pack = False, False
    config.data.train_files = write_shards(
        FLAGS.work_dir, FLAGS.seq_len, FLAGS.num_predictions, fmt="tfrecord"
    )
    resolved = data_facts.resolve(config)
    files = shard_files.find_shards(resolved.data.train_files).files
    checked = record_io._check_data

    def unchecked(path, index, offset, data, footer):
        return data

    def read_all() -> tuple[int, float]:
        source = sources.TFRecordSource(files)
        start = time.perf_counter()
        for i in range(len(source)):
            source[i]
        return len(source), time.perf_counter() - start

    rates = {"checked": [], "unchecked": []}
    reads = {"checked": [], "unchecked": []}
    pipelines = {}
    for name, check in (("checked", checked), ("unchecked", unchecked)):
        record_io._check_data = check
        pipelines[name] = PipelineRunner(resolved.data, vocab, setup)
    try:
        for _ in range(FLAGS.rounds):
            for name, check in (("checked", checked), ("unchecked", unchecked)):
                record_io._check_data = check
                rates[name].append(FLAGS.batches / pipelines[name].run(FLAGS.batches))
                n, seconds = read_all()
                reads[name].append(n / seconds)
    finally:
        record_io._check_data = checked
    for name in rates:
        print(
            f"TFRecord, {name:>9} CRC: pipeline {statistics.median(rates[name]):7.1f} batches/s "
            f"| reading every record {statistics.median(reads[name]):9.0f} records/s",
            flush=True,
        )

    def cost(rates):  # the median over rounds of checked / unchecked, measured side by side
        ratios = [c / u for c, u in zip(rates["checked"], rates["unchecked"])]
        return 100 * (1 - statistics.median(ratios))

    print(
        f"the check costs {cost(rates):.1f}% of the pipeline's batches/s and {cost(reads):.1f}% "
        f"of its record reads ({n} records; median of {FLAGS.rounds} rounds' ratios)",
        flush=True,
    )


def main(argv):
    del argv
    from bench.runners import OursRunner, make_config, synthetic_batch, write_shards
    from bert_jax.data.contract import data_facts
    from bert_jax.model.encoder import BertConfig

    if FLAGS.bucket:
        from bench import bucket_input

        shards = FLAGS.train_files or write_shards(
            FLAGS.work_dir, FLAGS.seq_len, FLAGS.num_predictions
        )
        directory = shards if os.path.isdir(shards) else os.path.dirname(shards)
        bucket_input.compare(
            directory, FLAGS.batch_size, FLAGS.batches * 4, FLAGS.mfu, FLAGS.rounds
        )
        return
    cores = len(os.sched_getaffinity(0))
    print(
        f"{cores} cores; batch {FLAGS.batch_size}, L={FLAGS.seq_len}, P={FLAGS.num_predictions}, "
        f"num_workers {FLAGS.num_workers}, read_threads {FLAGS.read_threads}",
        flush=True,
    )
    for model in FLAGS.models:
        config = make_config(model, FLAGS.seq_len, FLAGS.num_predictions, FLAGS.batch_size)
        config.data.num_workers = FLAGS.num_workers
        config.data.read_threads = FLAGS.read_threads
        vocab = BertConfig.from_config_dict(config.model).vocab_size
        step = OursRunner(
            config, synthetic_batch(FLAGS.batch_size, FLAGS.seq_len, FLAGS.num_predictions, vocab)
        )
        if FLAGS.record_checks:
            record_checks(config, vocab, step.setup)
            return
        for masking in FLAGS.masking:
            config.data.dynamic_masking = masking == "dynamic"
            config.data.pack = False  # the step below runs unpacked synthetic batches
            config.data.train_files = FLAGS.train_files or write_shards(
                FLAGS.work_dir, FLAGS.seq_len, FLAGS.num_predictions, config.data.dynamic_masking
            )
            resolved = data_facts.resolve(config)  # the special ids etc. from the manifest
            pipeline = PipelineRunner(resolved.data, vocab, step.setup)
            step.run(1)
            input_rates, step_rates = [], []
            for _ in range(FLAGS.rounds):
                input_rates.append(FLAGS.batches / pipeline.run(FLAGS.batches))
                step_rates.append(1 / step.run(1)[0])
            headroom = statistics.median(i / s for i, s in zip(input_rates, step_rates))
            print(
                f"{model:>5} {masking:>7} masking: "
                f"input {statistics.median(input_rates):8.1f} batches/s "
                f"({statistics.median(input_rates) * FLAGS.batch_size:8.0f} seq/s) | train step "
                f"{statistics.median(step_rates):7.3f} steps/s | headroom {headroom:8.1f}x",
                flush=True,
            )


if __name__ == "__main__":
    app.run(main)
