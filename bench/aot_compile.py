r"""Compile-only check for meshes larger than this machine: BERT-Large's train step on 256 devices.

  python -m bench.aot_compile   # BERT-Large, 256 devices: 32x8x1, 256x1x1
  python -m bench.aot_compile --meshes=64x4x1,32x4x2 --dtype=bfloat16 --global_batch_size=8192
  python -m bench.aot_compile --num_layers=2 --meshes=32x8x1   # a quick smoke check

Measured figures: docs/scaling.md.

Nothing runs: the real step (bert_jax.train.jit_train_step, state donated) is lowered for abstract
inputs (train.make_setup's abstract state and a jax.ShapeDtypeStruct batch on the batch sharding)
and compiled for a mesh of fake CPU devices (--xla_force_host_platform_device_count), the way it
would be partitioned on a pod slice of that size. For each mesh ('data' x 'fsdp' x 'tensor') it
prints the seconds to lower and to compile it and XLA's memory plan per device:
    state      parameters + optimizer state per device, from the shardings alone (what fsdp and
               tensor split: with fsdp=8 each device holds ~1/8 of the split weights)
    args/out   the step's argument and output buffers per device (the state, the batch, metrics)
    temp       activations, gradients and other temporaries
    peak       args + out - aliased (the donated state is written in place) + temp
The figures are the CPU compiler's plan: a TPU or GPU compile fuses differently, so take those
from the real hardware; what this shows is that the shardings partition at that scale and how
much of the state each device holds.
"""

import os
import re
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "config", "configs/bert_large.py", "A configs/*.py file (its model and optimizer)."
)
flags.DEFINE_integer("num_devices", 256, "Fake CPU devices to compile for.")
flags.DEFINE_list(
    "meshes",
    ["32x8x1", "256x1x1"],
    "Mesh shapes data x fsdp x tensor to compile, each multiplying to --num_devices.",
)
flags.DEFINE_integer(
    "global_batch_size", 4096, "Sequences per step over all devices (16 per device at 256)."
)
flags.DEFINE_integer("seq_len", 128, "Sequence length (512 for phase 2).")
flags.DEFINE_integer("num_layers", 0, "Override the number of encoder layers (0: the config's).")
flags.DEFINE_string(
    "dtype", "", "Computation dtype override: float32 or bfloat16 (default: the config's)."
)
flags.DEFINE_bool("remat", False, "Activation checkpointing per layer.")
flags.DEFINE_enum(
    "cpu_scheduler",
    "memory",
    ["memory", "concurrency"],
    "XLA:CPU's scheduler: memory-minimizing (as bench/memory_bench.py; closer to what GPU and "
    "TPU schedulers plan), or its default, concurrency-optimized.",
)
flags.DEFINE_string("json_out", "", "Also write the figures as JSON to this path.")

GIB = 1024**3


def use_fake_devices(count: int, memory_scheduler: bool) -> None:
    """Must run before JAX is imported: `count` CPU devices, whatever XLA_FLAGS said before."""
    xla_flags = re.sub(
        r"--xla_force_host_platform_device_count=\d+", "", os.environ.get("XLA_FLAGS", "")
    )
    xla_flags += f" --xla_force_host_platform_device_count={count}"
    if memory_scheduler:
        xla_flags += " --xla_cpu_enable_concurrency_optimized_scheduler=false"
    os.environ["XLA_FLAGS"] = xla_flags.strip()
    os.environ["JAX_PLATFORMS"] = (
        "cpu"  # on a GPU/TPU host too: the check is about the mesh, not the chip
    )


def parse_mesh(text: str) -> tuple[int, int, int]:
    try:
        data, fsdp, tensor = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise app.UsageError(
            f"--meshes entry {text!r} must look like 32x8x1 (data x fsdp x tensor)"
        ) from None
    return data, fsdp, tensor


def state_bytes_per_device(abstract_state) -> int:
    """Bytes of the train state one device holds under the state's shardings."""
    import jax
    import numpy as np

    return sum(
        int(np.prod(x.sharding.shard_shape(x.shape))) * x.dtype.itemsize
        for x in jax.tree.leaves(abstract_state)
    )


def compile_step(config) -> dict:
    """Lowers and compiles the train step for `config` (its mesh); returns the figures."""
    import jax

    from bert_jax import data_contract, train

    setup = train.make_setup(config)
    facts = data_contract.DataFacts.from_data(config.data)
    start = time.perf_counter()
    with setup.activate():
        lowered = train.jit_train_step(setup, config.train.grad_accum_steps).lower(
            setup.abstract_state,
            train.abstract_batch(facts, config.train.global_batch_size, setup),
        )
    lowered_at = time.perf_counter()
    mem = lowered.compile().memory_analysis()
    done = time.perf_counter()
    return {
        "mesh": dict(setup.mesh.shape),
        "lower_s": lowered_at - start,
        "compile_s": done - lowered_at,
        "state_bytes": state_bytes_per_device(setup.abstract_state),
        "total_state_bytes": sum(
            x.size * x.dtype.itemsize for x in jax.tree.leaves(setup.abstract_state)
        ),
        "argument_bytes": mem.argument_size_in_bytes,
        "output_bytes": mem.output_size_in_bytes,
        "alias_bytes": mem.alias_size_in_bytes,
        "temp_bytes": mem.temp_size_in_bytes,
        "code_bytes": mem.generated_code_size_in_bytes,  # 0 on CPU
        "peak_bytes": (
            mem.argument_size_in_bytes
            + mem.output_size_in_bytes
            - mem.alias_size_in_bytes
            + mem.temp_size_in_bytes
        ),
    }


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    meshes = [parse_mesh(m) for m in FLAGS.meshes]
    for mesh in meshes:
        if mesh[0] * mesh[1] * mesh[2] != FLAGS.num_devices:
            raise app.UsageError(
                f"mesh {'x'.join(map(str, mesh))} has {mesh[0] * mesh[1] * mesh[2]} "
                f"devices, --num_devices is {FLAGS.num_devices}"
            )
    use_fake_devices(FLAGS.num_devices, FLAGS.cpu_scheduler == "memory")
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("aot_config", FLAGS.config)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    base = module.get_config()
    if FLAGS.num_layers:
        base.model.num_hidden_layers = FLAGS.num_layers
    if FLAGS.dtype:
        base.model.dtype = FLAGS.dtype
    base.model.remat = FLAGS.remat
    base.data.max_seq_length = FLAGS.seq_len
    base.data.max_predictions_per_seq = 20 if FLAGS.seq_len <= 128 else 76
    base.data.dynamic_masking = False
    base.model.vocab_size = base.model.vocab_size or 30522  # no data: bert-base-uncased's
    base.train.global_batch_size = FLAGS.global_batch_size
    m = base.model
    print(
        f"{FLAGS.config}: L={m.num_hidden_layers} H={m.hidden_size} A={m.num_attention_heads}, "
        f"{m.dtype}, remat={m.remat}; batch {FLAGS.global_batch_size} x {FLAGS.seq_len} tokens "
        f"on {FLAGS.num_devices} fake CPU devices; XLA:CPU scheduler: {FLAGS.cpu_scheduler}",
        flush=True,
    )
    print(
        f"{'mesh (data x fsdp x tensor)':>28} {'lower s':>8} {'compile s':>9} {'state GiB':>9} "
        f"{'args GiB':>8} {'out GiB':>8} {'temp GiB':>8} {'peak GiB':>8}",
        flush=True,
    )
    results = []
    for data, fsdp, tensor in meshes:
        config = base.copy_and_resolve_references()
        config.mesh.data, config.mesh.fsdp, config.mesh.tensor, config.mesh.num_devices = (
            data,
            fsdp,
            tensor,
            0,
        )
        r = compile_step(config)
        results.append(r)
        print(
            f"{f'{data} x {fsdp} x {tensor}':>28} {r['lower_s']:8.1f} {r['compile_s']:9.1f} "
            f"{r['state_bytes'] / GIB:9.3f} {r['argument_bytes'] / GIB:8.3f} "
            f"{r['output_bytes'] / GIB:8.3f} {r['temp_bytes'] / GIB:8.3f} "
            f"{r['peak_bytes'] / GIB:8.3f}",
            flush=True,
        )
    print(
        "whole train state (parameters + Adam moments): "
        f"{results[0]['total_state_bytes'] / GIB:.2f} GiB",
        flush=True,
    )
    if FLAGS.json_out:
        with open(FLAGS.json_out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    app.run(main)
