r"""Peak memory per device of the train step, with and without activation checkpointing (remat).

  python -m bench.memory_bench   # base and large, L=128, batch 32 per device
  python -m bench.memory_bench --models=large --batch_size=64 --seq_len=512 --dtype=bfloat16
  python -m bench.memory_bench --num_devices=8 --fsdp=8   # ZeRO-3 style: parameters split 8 ways

Nothing is run: the real step (bert_jax.training.pretrain.jit_train_step, state donated) is lowered
and compiled for abstract inputs, and XLA's buffer assignment gives, per device,
    peak = arguments + outputs - aliased (the donated state written in place) + temporaries.
On CPU, --num_devices > 1 makes that many host devices (--xla_force_host_platform_device_count), so
a mesh can be compiled for without the hardware. The figure is the compiler's plan for this backend:
a GPU build fuses differently and adds library workspaces, so take GPU figures on the GPU itself
(--run there also executes one step and reads the allocator's peak_bytes_in_use).

On CPU the script compiles with XLA's memory-minimizing scheduler
(--xla_cpu_enable_concurrency_optimized_scheduler=false, --cpu_scheduler=concurrency to turn that
off): the CPU default orders work for thread concurrency and keeps the recomputed activations of
remat alive as long as the stored ones (measured: remat then saves 4% on BERT-Base instead of 26%);
GPU and TPU schedulers are memory-aware, so the memory-minimizing CPU plan is the closer picture of
what a training run gets there.
"""

import os

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_list("models", ["base", "large"], "Model configs: tiny, mini, base, large.")
flags.DEFINE_integer("seq_len", 128, "Sequence length.")
flags.DEFINE_integer(
    "num_predictions", 0, "Masked positions per sequence; 0: 20 at L=128, 80 at L=512."
)
flags.DEFINE_integer("batch_size", 32, "Sequences per device.")
flags.DEFINE_string("dtype", "float32", "Computation dtype: float32 or bfloat16.")
flags.DEFINE_integer("num_devices", 1, "Devices in the mesh (on CPU: fake host devices).")
flags.DEFINE_integer("fsdp", 1, "Size of the mesh's fsdp axis (the rest is data parallel).")
flags.DEFINE_integer("grad_accum_steps", 1, "Micro-batches per step (train.grad_accum_steps).")
flags.DEFINE_enum(
    "cpu_scheduler",
    "memory",
    ["memory", "concurrency"],
    "XLA:CPU's scheduler: memory-minimizing, or its default (concurrency-optimized).",
)
flags.DEFINE_bool("run", False, "Also run one step and read the device allocator's peak (GPU/TPU).")

GIB = 1024**3


def compiled_memory(config, grad_accum_steps: int):
    """(memory_analysis, train setup) of the compiled train step for `config`'s shapes."""
    from bert_jax.data.contract import data_facts
    from bert_jax.training import pretrain

    setup = pretrain.make_setup(config)
    facts = data_facts.DataFacts.from_data(config.data)
    batch = pretrain.abstract_batch(facts, config.train.global_batch_size, setup)
    with setup.activate():
        compiled = (
            pretrain.jit_train_step(setup, grad_accum_steps)
            .lower(setup.abstract_state, batch, setup.abstract_lr())
            .compile()
        )
    return compiled.memory_analysis(), setup


def measured_peak(setup, config, grad_accum_steps: int) -> float | None:
    """Runs one step on real (synthetic) data; the allocator's peak in bytes, where it reports
    one."""
    import jax

    from bench.runners import synthetic_batch
    from bert_jax.model import sharding
    from bert_jax.training import pretrain

    host = synthetic_batch(
        config.train.global_batch_size,
        config.data.max_seq_length,
        config.data.max_predictions_per_seq,
        config.model.vocab_size,
    )
    with setup.activate():
        state = pretrain.jit_init(setup, 0)()
        batch = sharding.host_to_global(host, setup.batch_sharding)
        state, metrics = pretrain.jit_train_step(setup, grad_accum_steps)(state, batch, setup.lr)
        jax.block_until_ready((state, metrics))
    stats = jax.devices()[0].memory_stats()
    return stats.get("peak_bytes_in_use") if stats else None


def main(argv):
    del argv
    extra = []
    if FLAGS.num_devices > 1:
        extra.append(f"--xla_force_host_platform_device_count={FLAGS.num_devices}")
    if FLAGS.cpu_scheduler == "memory":  # ignored by GPU and TPU backends
        extra.append("--xla_cpu_enable_concurrency_optimized_scheduler=false")
    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *extra])
    import jax

    from bench import runners

    num_predictions = FLAGS.num_predictions or (20 if FLAGS.seq_len <= 128 else 80)
    print(
        f"{jax.devices()[0].device_kind} ({jax.default_backend()}); "
        f"L={FLAGS.seq_len}, P={num_predictions}, "
        f"{FLAGS.batch_size} sequences per device, {FLAGS.dtype}, mesh of {FLAGS.num_devices} "
        f"(fsdp {FLAGS.fsdp}), grad_accum_steps {FLAGS.grad_accum_steps}; XLA:CPU scheduler: "
        f"{FLAGS.cpu_scheduler}",
        flush=True,
    )
    print(
        f"{'model':>6} {'remat':>5} {'state GiB':>9} {'temp GiB':>9} {'peak GiB':>9}  measured GiB",
        flush=True,
    )
    for model in FLAGS.models:
        peaks = {}
        for remat in (False, True):
            config = runners.make_config(
                model,
                FLAGS.seq_len,
                num_predictions,
                FLAGS.batch_size * FLAGS.num_devices,
                FLAGS.dtype,
                remat=remat,
            )
            config.mesh.num_devices = FLAGS.num_devices
            config.mesh.fsdp = FLAGS.fsdp
            mem, setup = compiled_memory(config, FLAGS.grad_accum_steps)
            state = mem.argument_size_in_bytes  # the donated state (and the batch) per device
            peak = (
                mem.argument_size_in_bytes
                + mem.output_size_in_bytes
                - mem.alias_size_in_bytes
                + mem.temp_size_in_bytes
            )
            peaks[remat] = peak
            measured = measured_peak(setup, config, FLAGS.grad_accum_steps) if FLAGS.run else None
            measured = f"{measured / GIB:12.2f}" if measured else f"{'-':>12}"
            print(
                f"{model:>6} {remat!s:>5} {state / GIB:9.2f} {mem.temp_size_in_bytes / GIB:9.2f} "
                f"{peak / GIB:9.2f}  {measured}",
                flush=True,
            )
        print(
            f"{model:>6} remat saves {(peaks[False] - peaks[True]) / GIB:.2f} GiB per device "
            f"({peaks[False] / peaks[True]:.2f}x less)",
            flush=True,
        )


if __name__ == "__main__":
    app.run(main)
