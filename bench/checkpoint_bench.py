"""What checkpoint checksums cost: fingerprinting a train state next to Orbax saving it.

  python -m bench.checkpoint_bench                   # mini (11M parameters), then base (110M)
  python -m bench.checkpoint_bench --models=large    # BERT-Large: 4 GB of state

For each model a real train state (parameters and AdamW moments, float32, on one device) is
fingerprinted (bert_jax.checksums: what every save and every restore adds), saved by Orbax
synchronously (what an asynchronous save costs the background thread; the train step waits only
for the device-to-host copy) and restored with the check, --rounds times; the figures are medians
in one process, so the ratio holds on a busy machine.
"""

import os
import shutil
import statistics
import tempfile
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_list("models", ["mini", "base"], "Model configs: tiny, mini, base, large.")
flags.DEFINE_integer("rounds", 3, "Timed rounds per model.")


def main(argv):
    del argv
    import grain
    import jax

    from bench import runners
    from bert_jax import checkpointing, checksums, train

    print(f"{len(os.sched_getaffinity(0))} cores; medians of {FLAGS.rounds} rounds", flush=True)
    print(
        f"{'model':>6} {'state MB':>9} {'checksum s':>10} {'MB/s':>7} {'save s':>7} "
        f"{'restore+check s':>15} {'checksum/save':>13}",
        flush=True,
    )
    for model in FLAGS.models:
        config = runners.make_config(model, 128, 20, 8)
        setup = train.make_setup(config)
        state = jax.block_until_ready(train.jit_init(setup, 0)())
        mb = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state)) / 1e6
        data_iter = iter(grain.MapDataset.range(8).to_iter_dataset())
        times = {"checksum": [], "save": [], "restore": []}
        for r in range(FLAGS.rounds):
            workdir = tempfile.mkdtemp(prefix="checkpoint_bench-")
            try:
                start = time.perf_counter()
                checksums.fingerprint(state)
                times["checksum"].append(time.perf_counter() - start)
                manager = checkpointing.make_manager(workdir, async_save=False)
                start = time.perf_counter()
                checkpointing.save(manager, r + 1, state, data_iter, config)
                manager.wait_until_finished()
                # save() fingerprints too: the save's own share is the rest.
                times["save"].append(time.perf_counter() - start - times["checksum"][-1])
                start = time.perf_counter()
                checkpointing.restore(manager, r + 1, setup.abstract_state)
                times["restore"].append(time.perf_counter() - start)
                manager.close()
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(
            f"{model:>6} {mb:9.0f} {med['checksum']:10.2f} {mb / med['checksum']:7.0f} "
            f"{med['save']:7.2f} {med['restore']:15.2f} {med['checksum'] / med['save']:13.2f}",
            flush=True,
        )


if __name__ == "__main__":
    app.run(main)
