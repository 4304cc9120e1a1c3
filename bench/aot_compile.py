r"""Does it fit, and how fast will it be: the real steps compiled for a TPU slice, on any machine.

  python -m bench.aot_compile --config=configs/bert_large.py --topology=v5p-64 \
      --meshes=32x1x1,8x4x1 --remat=false,true
  python -m bench.aot_compile --topology=v5e-16 --num_slices=2 --meshes=32x1x1
  python -m bench.aot_compile --topology=cpu:256 --num_layers=2 --meshes=32x8x1  # XLA:CPU's plan

With libtpu installed (the `tpu` extra; `make install` installs it) the TPU compiler itself
compiles the trainer's steps for the slice's devices (jax.experimental.topologies: no TPU
needed): pre-training's train step (bert_jax.train.jit_train_step, state donated), its eval step
(jit_eval_step) and fine-tuning's train step (bert_jax.finetune.train.jit_train_step, a
classification head), each on the trainer's own mesh (bert_jax.sharding.make_mesh: ICI rings in
a slice, data parallelism across slices). For every mesh (data x fsdp x tensor), remat choice and
batch size it prints per chip what bench/tpu_plan.py says and where each figure comes from, marks
plans that do not fit the chip's HBM, and ends with the flags of the fastest plan that fits.

`--topology=cpu:N` (and any topology when libtpu is missing) compiles for N fake CPU devices
instead: the shardings partition the same way, but memory and fusions are XLA:CPU's, not a TPU's,
and there is no chip to judge them against. docs/scaling.md has the table and the commands.
"""

import itertools
import json
import os
import re

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("config", "configs/bert_large.py", "A configs/*.py pre-training config.")
flags.DEFINE_string(
    "topology",
    "v5e-256",
    "Cloud TPU accelerator type (v4-32, v5e-16, v5p-64, v6e-256) or slice shape (v5e:4x4); "
    "cpu:N for N fake CPU devices.",
)
flags.DEFINE_integer("num_slices", 1, "TPU slices joined by DCN (multi-slice).")
flags.DEFINE_integer("num_devices", 256, "Fake CPU devices where libtpu is not installed.")
flags.DEFINE_list(
    "meshes",
    [],
    "data x fsdp x tensor shapes (e.g. 16x1x1,4x4x1); default: every split with fsdp and tensor "
    "powers of two that divides the chips (tensor dividing the heads, at most 4).",
)
flags.DEFINE_list("remat", ["false"], "Activation checkpointing choices to compile: false,true.")
flags.DEFINE_list(
    "global_batch_sizes", ["0"], "Sequences per step over all chips; 0: the config's."
)
flags.DEFINE_list("steps", ["train", "eval", "finetune"], "Which steps to compile.")
flags.DEFINE_string(
    "finetune_config", "configs/finetune/sst2.py", "Fine-tuning config (its batch, optimizer)."
)
flags.DEFINE_integer("seq_len", 0, "Sequence length; 0: the config's (512 for phase 2).")
flags.DEFINE_integer("num_layers", 0, "Override the number of encoder layers (0: the config's).")
flags.DEFINE_integer("vocab_size", 30522, "Word-embedding rows (bert-base-uncased's 30522).")
flags.DEFINE_string("dtype", "bfloat16", "Computation dtype: bfloat16 or float32.")
flags.DEFINE_string(
    "attention_impl",
    "",
    "config.model.attention_impl; '': the config's. 'auto' decides by the backend JAX runs on "
    "(CPU here), so to compile what 'auto' picks on a GPU host pass cudnn.",
)
flags.DEFINE_float(
    "attention_dropout",
    -1.0,
    "config.model.attention_probs_dropout_prob; -1: the config's. 0 (as MLPerf) lets GPU use "
    "cuDNN's fused attention (attention_impl='auto').",
)
flags.DEFINE_string("json_out", "", "Also write every plan's figures as JSON to this path.")
flags.DEFINE_string(
    "hlo_dir",
    "",
    "Also write each plan's compiled HLO here (to see fusions, layouts, collectives).",
)

GIB = 1024**3


def use_cpu_devices(count: int) -> None:
    """Must run before JAX is imported: `count` fake CPU devices whatever XLA_FLAGS said, and
    JAX on its CPU backend also on a TPU or GPU host: the chips are described, never used."""
    xla_flags = re.sub(
        r"--xla_force_host_platform_device_count=\d+", "", os.environ.get("XLA_FLAGS", "")
    )
    # XLA:CPU's memory-minimizing scheduler (as bench/memory_bench.py): closer to a TPU's plan.
    xla_flags += f" --xla_force_host_platform_device_count={count}"
    xla_flags += " --xla_cpu_enable_concurrency_optimized_scheduler=false"
    os.environ["XLA_FLAGS"] = xla_flags.strip()
    os.environ["JAX_PLATFORMS"] = "cpu"


def parse_mesh(text: str) -> tuple[int, int, int]:
    try:
        data, fsdp, tensor = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise app.UsageError(
            f"--meshes entry {text!r} must look like 32x8x1 (data x fsdp x tensor)"
        ) from None
    return data, fsdp, tensor


def default_meshes(chips: int, num_slices: int, heads: int) -> list[tuple[int, int, int]]:
    """Every data x fsdp x tensor with fsdp, tensor powers of two, tensor <= 4 dividing the
    heads, fsdp x tensor within one slice, data a multiple of the slices."""
    out = []
    per_slice = chips // num_slices
    for tensor in (1, 2, 4):
        for fsdp in (2**i for i in range(12)):
            if heads % tensor or per_slice % (fsdp * tensor) or fsdp * tensor > per_slice:
                continue
            out.append((chips // (fsdp * tensor), fsdp, tensor))
    return out


def load_config(path: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location("plan_config", path)
    if spec is None:
        raise app.UsageError(f"--config {path!r} is not a Python config file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()


def pretrain_config(base, mesh, remat: bool, batch: int):
    c = base.copy_and_resolve_references()
    c.mesh.data, c.mesh.fsdp, c.mesh.tensor = mesh
    c.mesh.num_devices = 0
    c.model.remat = remat
    c.train.global_batch_size = batch
    return c


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    unknown = set(FLAGS.steps) - {"train", "eval", "finetune"}
    if unknown:
        raise app.UsageError(f"--steps: unknown {sorted(unknown)}; use train, eval, finetune")
    from bench import tpu_chips

    topology = None
    if FLAGS.topology.startswith("cpu"):
        count = int(FLAGS.topology.partition(":")[2] or FLAGS.num_devices)
        note = "XLA:CPU for fake CPU devices (its plan; no chip figures)"
    elif not tpu_chips.compiler_installed(FLAGS.topology):
        count = FLAGS.num_devices
        extra = "cuda" if FLAGS.topology.lower() == "h100" else "tpu"
        note = (
            f"XLA:CPU for fake CPU devices: {FLAGS.topology}'s compiler is not installed "
            f"(pip install -e '.[{extra}]'); XLA:CPU's plan, no chip figures"
        )
    else:
        try:
            topology = tpu_chips.parse(FLAGS.topology, FLAGS.num_slices)
        except ValueError as e:
            raise app.UsageError(str(e)) from None
        count = topology.num_chips
        gpu = topology.chip.name == "h100"
        note = "the CUDA compiler (XLA:GPU)" if gpu else "the TPU compiler (libtpu)"
        note += ", compile only"
    use_cpu_devices(count if topology is None else 1)
    import jax

    from bench import plan_steps

    devices = jax.devices() if topology is None else tpu_chips.devices(topology)
    base = load_config(FLAGS.config)
    plan_steps.override_model(base, FLAGS.vocab_size, FLAGS.dtype, FLAGS.num_layers, FLAGS.seq_len)
    if FLAGS.attention_impl:
        base.model.attention_impl = FLAGS.attention_impl
    if FLAGS.attention_dropout >= 0:
        base.model.attention_probs_dropout_prob = FLAGS.attention_dropout
    heads = base.model.num_attention_heads
    slices = 1 if topology is None else topology.num_slices
    meshes = [parse_mesh(m) for m in FLAGS.meshes] or default_meshes(len(devices), slices, heads)
    for mesh in meshes:
        if mesh[0] * mesh[1] * mesh[2] != len(devices):
            raise app.UsageError(
                f"mesh {'x'.join(map(str, mesh))} has {mesh[0] * mesh[1] * mesh[2]} devices; "
                f"the topology has {len(devices)}"
            )
    batches = [int(b) or base.train.global_batch_size for b in FLAGS.global_batch_sizes]
    remats = [r.lower() in ("true", "1", "yes") for r in FLAGS.remat]
    ft_base = load_config(FLAGS.finetune_config) if "finetune" in FLAGS.steps else None
    m = base.model
    where = topology.name if topology else f"{len(devices)} devices"
    print(
        f"{FLAGS.config}: L={m.num_hidden_layers} H={m.hidden_size} A={heads} "
        f"V={m.vocab_size}, {m.dtype}, seq {base.data.max_seq_length}; {where}; "
        f"compiled by {note}",
        flush=True,
    )
    chip = topology.chip if topology else None
    print(plan_steps.HEADER, flush=True)
    results = []
    for mesh, remat, batch in itertools.product(meshes, remats, batches):
        config = pretrain_config(base, mesh, remat, batch)
        for step in FLAGS.steps:
            try:
                r = plan_steps.compile_plan(step, config, ft_base, devices, chip, FLAGS.hlo_dir)
            except (ValueError, TypeError) as e:  # a mesh the model cannot take
                print(f"{'x'.join(map(str, mesh))} remat={remat} batch {batch} {step}: {e}")
                continue
            results.append(r)
            print(plan_steps.row(r), flush=True)
            if FLAGS.json_out:  # after every plan: a long run killed midway keeps what it did
                with open(FLAGS.json_out, "w") as f:
                    json.dump(results, f, indent=1)
    if chip is not None:
        print(plan_steps.verdict(results, FLAGS.config, chip), flush=True)
    if results:
        print(
            "whole train state (parameters + Adam moments): "
            f"{results[0]['total_state_bytes'] / GIB:.2f} GiB",
            flush=True,
        )


if __name__ == "__main__":
    app.run(main)
