r"""Does it fit, and how fast will it be: the trainer's steps compiled for a TPU slice, anywhere.

  python -m bert_jax.plan --config=configs/bert_large.py --topology=v5p-64 \
      --meshes=32x1x1,8x4x1 --remat=false,true

For every mesh, remat choice and batch size it prints per chip the memory, FLOPs, collectives,
step-time estimates and where the HBM bytes go, and ends with the flags of the fastest plan that
fits. docs/scaling.md, "Planning a TPU run without a TPU": the table and what each column means.
"""

import itertools
import json
import os
import sys

from absl import flags
from ml_collections import config_flags

from bert_jax import cli, runtime, storage

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file(
    "config", "configs/bert_large.py", "A configs/*.py pre-training config.", lock_config=False
)
flags.DEFINE_string(
    "topology",
    "v5e-256",
    "Cloud TPU accelerator type (v4-32, v5e-16, v5p-64, v6e-256, tpu7x-64) or slice shape "
    "(v5e:4x4); h100 for one GPU; cpu:N for N fake CPU devices.",
)
flags.DEFINE_integer("num_slices", 1, "TPU slices joined by DCN (multi-slice).")
flags.DEFINE_integer("num_devices", None, "Fake CPU devices for --topology=cpu (256).")
flags.DEFINE_list(
    "meshes",
    [],
    "data x fsdp x tensor shapes (e.g. 16x1x1,4x4x1); default: every split with fsdp and tensor "
    "powers of two that divides the chips (tensor dividing the heads, at most 4).",
)
flags.DEFINE_list("remat", ["false"], "Activation checkpointing choices to compile: false,true.")
flags.DEFINE_list("global_batch_sizes", ["0"], "Global sequences per step; 0: the config's.")
flags.DEFINE_list("steps", ["train", "eval", "finetune"], "Which steps to compile.")
flags.DEFINE_string(
    "finetune_config", "configs/finetune/sst2.py", "Fine-tuning config (its batch, optimizer)."
)
flags.DEFINE_integer("seq_len", 0, "Sequence length; 0: the config's (512 for phase 2).")
flags.DEFINE_integer("num_layers", 0, "Override the number of encoder layers (0: the config's).")
flags.DEFINE_integer(
    "vocab_size",
    None,
    "Word-embedding rows; default: the config's model.vocab_size, bert-base-uncased's 30522 where "
    "that is 0 (read from the data's manifest).",
)
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
flags.DEFINE_string("hlo_dir", "", "Also write each plan's compiled HLO (fusions, layouts) here.")
flags.DEFINE_integer(
    "top", 10, "Instructions to list by HBM bytes per plan (0: none; the groups still in JSON)."
)


def load_config(path: str):
    import importlib.util

    if not os.path.isfile(path):
        raise cli.UserError(f"--finetune_config={path} {cli.not_a_file(path)}")
    spec = importlib.util.spec_from_file_location("plan_finetune_config", path)
    if spec is None:  # no .py name: nothing to load it with
        raise cli.UserError(
            f"--finetune_config={path}: not a Python config file (configs/finetune/*.py)"
        )
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        raise cli.UserError(f"--finetune_config={path}: not a Python config file ({e.msg})") from e
    if not hasattr(module, "get_config"):
        raise cli.UserError(f"--finetune_config={path} defines no get_config()")
    config = module.get_config()
    train = config.get("train") if hasattr(config, "keys") else None
    if "lora" not in config or not hasattr(train, "keys") or "batch_size" not in train:
        raise cli.UserError(
            f"--finetune_config={path} is not a fine-tuning config (configs/finetune/sst2.py and "
            "the like; a pre-training config goes to --config)"
        )
    return config


def pretrain_config(base, mesh, remat: bool, batch: int):
    c = base.copy_and_resolve_references()
    c.mesh.data, c.mesh.fsdp, c.mesh.tensor = mesh
    c.mesh.num_devices = 0
    c.model.remat = remat
    c.train.global_batch_size = batch
    return c


def _take_config_overrides() -> None:
    """A --config.model.dtype or .remat override given without --dtype/--remat is taken as the
    flag's value; both given and different is an error."""
    from bert_jax.plan import options

    given = config_flags.get_override_values(FLAGS["config"])
    for flag, field in (("dtype", "model.dtype"), ("remat", "model.remat")):
        if field not in given:
            continue
        value = str(given[field]).lower()
        if flag == "dtype" and value not in options.DTYPES:  # named as given, not as --dtype
            raise cli.UserError(
                f"--config.{field}={given[field]}: choose {' or '.join(options.DTYPES)}"
            )
        wanted = value if flag == "dtype" else [value]
        mine = FLAGS[flag].value if flag == "dtype" else [v.lower() for v in FLAGS[flag].value]
        if FLAGS[flag].present and mine != wanted:
            shown = ",".join(FLAGS[flag].value) if flag == "remat" else FLAGS[flag].value
            raise cli.UserError(
                f"--{flag}={shown} and --config.{field}={value} disagree; pass one of them"
            )
        FLAGS[flag].value = wanted


def main(argv):
    del argv  # cli.run refuses arguments after the flags
    from bert_jax.plan import chips, options
    from bert_jax.training import config_check

    base = FLAGS.config
    storage.check_paths(  # --json_out=the config file replaced it with the plan's JSON
        {
            "--json_out": FLAGS.json_out,
            "--config": config_flags.get_config_filename(FLAGS["config"]),
            "--finetune_config": FLAGS.finetune_config,
        },
        outputs=["--json_out"],
    )
    _take_config_overrides()
    req = options.request(FLAGS, base, FLAGS.num_slices)
    # Nothing is restored: a phase-2 config's init_checkpoint is not the planner's business.
    base.train.init_checkpoint, base.train.init_optimizer_state = "", False
    ft_base = load_config(FLAGS.finetune_config) if "finetune" in req.steps else None
    topology = req.topology
    if topology is None:
        note = "XLA:CPU for fake CPU devices (its plan; no chip figures)"
    elif not chips.compiler_installed(FLAGS.topology):
        extra = "cuda" if topology.chip.name == "h100" else "tpu"
        cli.warn(
            f"--topology={FLAGS.topology}: its compiler is not installed (pip install -e "
            f"'.[{extra}]'); planning for {req.num_devices} fake CPU devices instead"
        )
        note = f"XLA:CPU for {req.num_devices} fake CPU devices standing in for {topology.name}"
        topology = None
    else:
        gpu = topology.chip.name == "h100"
        note = "the CUDA compiler (XLA:GPU)" if gpu else "the TPU compiler (libtpu)"
        note += ", compile only"
    # JAX on fake CPU devices: the chips are described, never used.
    runtime.start(cpu_devices=req.num_devices if topology is None else 1)

    from bert_jax.model.bert_config import BertConfig
    from bert_jax.plan import report, steps

    vocab = FLAGS.vocab_size or base.model.vocab_size or 30522
    steps.override_model(base, vocab, FLAGS.dtype, FLAGS.num_layers, FLAGS.seq_len)
    if FLAGS.attention_impl:
        base.model.attention_impl = FLAGS.attention_impl
    if FLAGS.attention_dropout >= 0:
        base.model.attention_probs_dropout_prob = FLAGS.attention_dropout
    if base.model.attention_impl == "cudnn" and (topology is None or topology.chip.name != "h100"):
        flag = "--attention_impl" if FLAGS.attention_impl else "--config.model.attention_impl"
        where = topology.name if topology else "fake CPU devices"
        raise cli.UserError(
            f"{flag}=cudnn compiles for a GPU only: pass --topology=h100 (with the cuda extra "
            f"installed), or another attention_impl for {where}"
        )
    dropout = base.model.attention_probs_dropout_prob > 0
    if topology and topology.chip.name == "tpu7x" and ("finetune" in req.steps or dropout):
        raise cli.UserError(
            f"--topology={FLAGS.topology}: the installed libtpu crashes compiling fine-tuning's "
            "step, and the train step with attention dropout, for TPU7x: plan with "
            "--steps=train,eval --attention_dropout=0"
        )
    plans = itertools.product(req.meshes, req.remats, req.batches)
    configs = [pretrain_config(base, *plan) for plan in plans]
    for config in configs:  # the trainer's own checks, before anything compiles
        config_check.check_pretraining(config, req.num_devices)
        BertConfig.from_config_dict(config.model)  # a cli.UserError naming its fields
    import jax

    devices = jax.devices() if topology is None else chips.devices(topology)
    m = base.model
    config_path = config_flags.get_config_filename(FLAGS["config"])
    where = topology.name if topology else f"{len(devices)} devices"
    print(
        f"{config_path}: L={m.num_hidden_layers} H={m.hidden_size} "
        f"A={m.num_attention_heads} V={m.vocab_size}, {m.dtype}, seq "
        f"{base.data.max_seq_length}; {where}; compiled by {note}",
        flush=True,
    )
    chip = topology.chip if topology else None
    print(report.HEADER, flush=True)
    results = []
    for config in configs:
        for step in req.steps:
            r = steps.compile_plan(step, config, ft_base, devices, chip, FLAGS.hlo_dir, FLAGS.top)
            results.append(r)
            print(report.row(r), flush=True)
            if FLAGS.top and (text := report.traffic(r, FLAGS.top)):
                print(text, flush=True)
            if FLAGS.json_out:  # after every plan: a long run killed midway keeps what it did
                with cli.user_path("--json_out", FLAGS.json_out):
                    storage.write_text(FLAGS.json_out, json.dumps(results, indent=1))
    if chip is not None:
        overrides = [a for a in sys.argv[1:] if a.startswith("--config.")]
        print(report.verdict(results, config_path, overrides), flush=True)
    print(
        "whole train state (parameters + Adam moments): "
        f"{results[0]['total_state_bytes'] / report.GIB:.2f} GiB",
        flush=True,
    )


if __name__ == "__main__":
    cli.run(main)
