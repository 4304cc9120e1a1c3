r"""What bounding the host's run-ahead costs: loop.run waits, after queuing step k, for step k-1
(so a SIGTERM is saved at the next step, bert_jax/faults.py), instead of queuing steps freely
until the next log line reads a metric.

  python -m bench.dispatch_bench                     # tiny and mini, L=128, 20 steps, 3 rounds
  python -m bench.dispatch_bench --models=base --steps=10

Both policies run the real train step (bench/runners.py's setup: bert_jax.train's
jit_train_step, state donated) on host batches put on the device each step
(sharding.host_to_global, as the loop does), in one process: each round times `free` (queue
every step, one wait at the end) and `bounded` (wait for the step before after queuing each),
alternating which goes first. Figures are medians over rounds; the ratio is the median of
per-round ratios bounded / free (1.00: no cost). "cpu" figures divide by this process's CPU
seconds and move less when other processes share the cores.
"""

import statistics
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_list("models", ["tiny", "mini"], "Model configs: tiny, mini, base, large.")
flags.DEFINE_integer("seq_len", 128, "Sequence length.")
flags.DEFINE_integer("batch_size", 0, "Sequences per step; 0 picks runners.DEFAULT_BATCH.")
flags.DEFINE_integer("steps", 20, "Steps per timed block.")
flags.DEFINE_integer("rounds", 3, "Interleaved rounds per model.")


def timed(setup, step_fn, state, host_batches, steps: int, bounded: bool):
    import jax

    from bert_jax import sharding

    with setup.activate():
        cpu, start = time.process_time(), time.perf_counter()
        previous = None
        for i in range(steps):
            batch = sharding.host_to_global(
                host_batches[i % len(host_batches)], setup.batch_sharding
            )
            state, metrics = step_fn(state, batch, setup.lr)
            if bounded and previous is not None:
                jax.block_until_ready(previous)
            previous = metrics
        jax.block_until_ready((state, metrics))
        return state, time.perf_counter() - start, time.process_time() - cpu


def main(argv):
    del argv
    from bench import runners
    from bert_jax import train

    for model in FLAGS.models:
        batch = FLAGS.batch_size or runners.DEFAULT_BATCH[(model, FLAGS.seq_len)]
        num_predictions = 20 if FLAGS.seq_len <= 128 else 80
        config = runners.make_config(model, FLAGS.seq_len, num_predictions, batch)
        host = [
            runners.synthetic_batch(batch, FLAGS.seq_len, num_predictions, 30522, seed=s)
            for s in range(4)
        ]
        setup = train.make_setup(config)
        step_fn = train.jit_train_step(setup)
        with setup.activate():
            state = train.jit_init(setup, 0)()
        state, _, _ = timed(setup, step_fn, state, host, 2, False)  # compile, warm up
        figures = {"free": [], "bounded": []}
        for r in range(FLAGS.rounds):
            order = ["free", "bounded"] if r % 2 == 0 else ["bounded", "free"]
            for policy in order:
                state, wall, cpu = timed(
                    setup, step_fn, state, host, FLAGS.steps, policy == "bounded"
                )
                figures[policy].append((wall / FLAGS.steps, cpu / FLAGS.steps))
        ratios = [b[0] / f[0] for b, f in zip(figures["bounded"], figures["free"])]
        cpu_ratios = [b[1] / f[1] for b, f in zip(figures["bounded"], figures["free"])]
        for policy, values in figures.items():
            print(
                f"{model:5s} L={FLAGS.seq_len} batch={batch} {policy:8s} "
                f"{statistics.median(v[0] for v in values) * 1e3:8.1f} ms/step  "
                f"cpu {statistics.median(v[1] for v in values) * 1e3:8.1f} ms/step",
                flush=True,
            )
        print(
            f"{model:5s} bounded/free: wall {statistics.median(ratios):.3f} "
            f"(rounds: {', '.join(f'{x:.3f}' for x in ratios)}), "
            f"cpu {statistics.median(cpu_ratios):.3f}",
            flush=True,
        )


if __name__ == "__main__":
    app.run(main)
