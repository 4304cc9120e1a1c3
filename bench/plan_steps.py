"""The trainer's steps lowered for abstract inputs and compiled for a topology (aot_compile.py).

Nothing here re-implements a step: the train and eval steps are bert_jax.train's jit_train_step
(state donated) and jit_eval_step on train.make_setup's mesh and shardings, fine-tuning's is
bert_jax.finetune.train.jit_train_step on finetune.runs.layout's. Inputs are jax.ShapeDtypeStruct
leaves carrying the trainer's shardings, so no array is ever made and the devices may be a TPU
slice's compile-only descriptions.
"""

import math
import os
import re
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from bench import flops, tpu_plan
from bert_jax import data_contract, input_pipeline, masking, train
from bert_jax import model as model_lib
from bert_jax.finetune import encode, heads, runs
from bert_jax.finetune import train as ft_train

GIB, MB = 1024**3, 1e6


def override_model(config, vocab_size: int, dtype: str, num_layers: int, seq_len: int) -> None:
    """The planner's model and data overrides, in place (no data: static masks, a vocabulary)."""
    config.model.vocab_size = vocab_size
    config.model.dtype = dtype
    if num_layers:
        config.model.num_hidden_layers = num_layers
    if seq_len:
        config.data.max_seq_length = seq_len
    # MLPerf's and the original's masked positions: 20 at 128 tokens, 76 at 512 (0.15 x L).
    length = config.data.max_seq_length or 128
    config.data.max_seq_length = length
    config.data.max_predictions_per_seq = (
        masking.MAX_PREDICTIONS_PER_SEQ if length <= 128 else round(masking.MASKED_LM_PROB * length)
    )
    config.data.dynamic_masking = False


def _abstract(tree, shardings):
    return jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings
    )


def _state_bytes(abstract_tree) -> int:
    """Bytes one device holds of `abstract_tree` under its leaves' shardings."""
    return sum(
        int(np.prod(x.sharding.shard_shape(x.shape))) * x.dtype.itemsize
        for x in jax.tree.leaves(abstract_tree)
    )


def _total_bytes(abstract_tree) -> int:
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(abstract_tree))


def _pretrain(step: str, config, devices):
    """(jitted fn, abstract args, setup, global batch, model FLOPs per step) of a pre-training
    step."""
    setup = train.make_setup(config, devices)
    facts = data_contract.DataFacts.from_data(config.data)
    b = config.train.global_batch_size
    batch = train.abstract_batch(facts, b, setup)
    m, d = setup.model_config, config.data
    model_flops = flops.train_flops_per_step(m, b, d.max_seq_length, d.max_predictions_per_seq)
    if step == "train":
        fn = train.jit_train_step(setup, config.train.grad_accum_steps)
        return fn, (setup.abstract_state, batch, setup.abstract_lr()), setup, b, model_flops
    # Eval batches carry a weight per example (input_pipeline.eval_batches pads the last one).
    batch[input_pipeline.EXAMPLE_WEIGHT] = jax.ShapeDtypeStruct(
        (b,), jnp.float32, sharding=setup.batch_sharding
    )
    return (
        train.jit_eval_step(setup),
        (setup.abstract_state["params"], batch),
        setup,
        b,
        model_flops / 3,
    )


def _finetune(config, ft_base, devices):
    """Fine-tuning's train step for a classification head on the pre-training config's encoder
    and mesh, at the fine-tuning config's batch (rounded up to a row per data-parallel device)
    and length, unpacked rows (--config.train.packing=false)."""
    ftc = ft_base.copy_and_resolve_references()
    ftc.mesh = config.mesh
    ftc.model.dtype, ftc.model.remat = config.model.dtype, config.model.remat
    fields = {**config.model.to_dict(), **ftc.model.to_dict()}
    model_config = model_lib.BertConfig.from_config_dict(
        {k: v for k, v in fields.items() if k in config.model}
    )
    model = nnx.eval_shape(
        lambda: heads.TaskModel(model_config, "classification", 2, rngs=nnx.Rngs(0))
    )
    setup, _, frozen = runs.layout(ftc, model, total_steps=1000, devices=devices)
    dp, length = setup.data_parallel(), ftc.data.max_seq_length
    b = math.ceil(ftc.train.batch_size / dp) * dp
    ints = {k: (b, length) for k in runs.INPUTS} | {encode.LABEL: (b,)}
    batch = {
        k: jax.ShapeDtypeStruct(s, jnp.int32, sharding=setup.batch_sharding)
        for k, s in ints.items()
    }
    frozen = _abstract(frozen, setup.frozen_shardings)
    m = model_config
    per_seq = flops.forward_flops_per_sequence(
        m.hidden_size, m.num_hidden_layers, m.intermediate_size, m.vocab_size, length, 0
    )
    args = (setup.abstract_state, frozen, batch, setup.abstract_lr())
    return ft_train.jit_train_step(setup), args, setup, b, 3 * b * per_seq


def compile_plan(step: str, config, ft_base, devices, chip, hlo_dir: str = "") -> dict:
    """Lowers and compiles one step on one mesh; returns its figures (bench/tpu_plan.py says where
    each comes from). `chip` (bench/tpu_chips.Chip) is None for fake CPU devices. With `hlo_dir`
    the compiled HLO is written there too."""
    start = time.perf_counter()
    if step == "finetune":
        fn, args, setup, batch, model_flops = _finetune(config, ft_base, devices)
        length = ft_base.data.max_seq_length
    else:
        fn, args, setup, batch, model_flops = _pretrain(step, config, devices)
        length = config.data.max_seq_length
    with setup.activate():
        lowered = fn.lower(*args)
    lowered_at = time.perf_counter()
    try:
        compiled = lowered.compile()
    except jax.errors.JaxRuntimeError as e:
        # The TPU compiler refuses a program past HBM ("Ran out of memory on HBM, the total
        # memory required for HLO temporaries (100.74G) exceeds available HBM (15.75G)").
        if chip is None or "RESOURCE_EXHAUSTED" not in str(e):
            raise
        compiled, refusal = None, str(e).splitlines()[0]
    done = time.perf_counter()
    state = args[0] if step != "finetune" else (args[0], args[1])
    chips = setup.mesh.devices.size
    r = {
        "step": step,
        "mesh": dict(setup.mesh.shape),
        "remat": bool(config.model.remat),
        "dtype": config.model.dtype,
        "global_batch": batch,
        "seq_len": length,
        "chips": chips,
        "lower_s": lowered_at - start,
        "compile_s": done - lowered_at,
        "state_bytes": _state_bytes(state),
        "total_state_bytes": _total_bytes(args[0]),
        "model_flops_per_chip": model_flops / chips,
    }
    if compiled is None:
        return {**r, **_refused(refusal, chip)}
    r = {
        **r,
        **tpu_plan.memory(compiled),
        "cost": tpu_plan.cost(compiled),
    }
    hlo = compiled.as_text() if hlo_dir or chip is not None else ""
    if hlo_dir:
        os.makedirs(hlo_dir, exist_ok=True)
        mesh = "x".join(str(v) for v in r["mesh"].values())
        name = f"{step}_{mesh}_b{batch}_remat{int(r['remat'])}.hlo.txt"
        with open(os.path.join(hlo_dir, name), "w") as f:
            f.write(hlo)
    if chip is None:
        return r
    # cuDNN's fused attention on GPU (model.attention_impl='auto' picks it where it can).
    r["cudnn_attention_calls"] = hlo.count('custom_call_target="__cudnn$fmha')
    slices = [getattr(d, "slice_index", 0) for d in setup.mesh.devices.flat]
    coll = tpu_plan.collectives(hlo, slices)
    est = tpu_plan.estimate(r["cost"], coll, chip)
    roof = tpu_plan.roofline(r["cost"], coll, chip)
    r["roofline_s"], r["roofline_bound"] = roof.seconds, roof.bound
    r.update(
        chip=chip.name,
        hbm_bytes=chip.hbm_bytes,
        fits=r["peak_bytes"] <= chip.hbm_bytes,
        ici_bytes=coll.ici_bytes,
        dcn_bytes=coll.dcn_bytes,
        collective_counts=coll.counts,
        unread_groups=coll.unread,
        step_s=est.seconds,
        step_source=est.source,
        bound=est.bound,
    )
    if est.seconds > 0:
        r.update(
            seq_per_s=batch / est.seconds,
            mfu=model_flops / chips / est.seconds / chip.bf16_flops,
        )
    else:  # no figures to estimate from (XLA:GPU's deviceless compile may report none)
        r.update(step_s=None, step_source="none", seq_per_s=None, mfu=None)
    return r


def _refused(message: str, chip) -> dict:
    """A plan the TPU compiler would not compile for lack of HBM: what it said it needed."""
    need = re.search(r"required for (.*?) \(([\d.]+)([KMGT])\)", message)
    units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    return {
        "chip": chip.name,
        "hbm_bytes": chip.hbm_bytes,
        "fits": False,
        "refused": message,
        # The compiler's own figure (temporaries alone, or all it names): a lower bound on peak.
        "peak_bytes": int(float(need[2]) * units[need[3]]) if need else None,
        "step_s": None,
        "seq_per_s": None,
        "mfu": None,
    }


HEADER = (
    f"{'step':>8} {'mesh':>9} {'remat':>5} {'batch':>10} {'state':>6} {'args':>6} {'temp':>6} "
    f"{'peak/HBM GiB':>13} {'fits':>4} {'compile':>7} {'TFLOP':>6} {'step ms':>16} "
    f"{'seq/s':>8} {'MFU':>5} {'ICI MB':>7} {'DCN MB':>7}\n"
    f"{'':>8} {'d x f x t':>9} {'':>5} {'(per chip)':>10} {'GiB':>6} {'GiB':>6} {'GiB':>6} "
    f"{'(compiler)':>13} {'':>4} {'s':>7} {'/chip':>6} {'(source, bound)':>16} "
    f"{'(est.)':>8} {'est.':>5} {'(hlo)':>7} {'(hlo)':>7}"
)


def row(r: dict) -> str:
    mesh = "x".join(str(v) for v in r["mesh"].values())
    per_chip = r["global_batch"] / (r["mesh"]["data"] * r["mesh"]["fsdp"])
    batch = f"{r['global_batch']} ({per_chip:g})"
    if r.get("refused"):
        need = f"{r['peak_bytes'] / GIB:.2f}" if r["peak_bytes"] else "?"
        return (
            f"{r['step']:>8} {mesh:>9} {r['remat']!s:>5} {batch:>10} "
            f"{r['state_bytes'] / GIB:6.2f}   NO: the TPU compiler refused it, {need} GiB needed "
            f"past {r['hbm_bytes'] / GIB:.0f} GiB of HBM ({r['compile_s']:.0f} s)"
        )
    line = (
        f"{r['step']:>8} {mesh:>9} {r['remat']!s:>5} {batch:>10} "
        f"{r['state_bytes'] / GIB:6.2f} {r['argument_bytes'] / GIB:6.2f} "
        f"{r['temp_bytes'] / GIB:6.2f} "
    )
    if "hbm_bytes" not in r:
        return line + f"{r['peak_bytes'] / GIB:13.2f} {'':>4} {r['compile_s']:7.0f}"
    if r["step_s"] is None:
        est, speed = "no estimate", f"{'-':>8} {'-':>5}"
    else:
        bound = f", {r['bound']}" if r["bound"] else ""
        est = f"{r['step_s'] * 1e3:.1f} ({r['step_source'][:4]}{bound})"
        speed = f"{r['seq_per_s']:8.0f} {100 * r['mfu']:4.0f}%"
    return line + (
        f"{r['peak_bytes'] / GIB:6.2f}/{r['hbm_bytes'] / GIB:<6.0f} "
        f"{'yes' if r['fits'] else 'NO':>4} "
        f"{r['compile_s']:7.0f} {r['cost'].get('flops', 0) / 1e12:6.2f} {est:>16} "
        f"{speed} "
        f"{sum(r['ici_bytes'].values()) / MB:7.0f} {r['dcn_bytes'] / MB:7.1f}"
        + (f"  cuDNN attention: {r['cudnn_attention_calls']} calls" if r["chip"] == "h100" else "")
    )


def verdict(results: list[dict], config_path: str, chip) -> str:
    """The fastest pre-training plan that fits, as the trainer's flags."""
    fits = [r for r in results if r["step"] == "train" and r["fits"] and r["seq_per_s"]]
    if not fits:
        if any(r["step"] == "train" and r["fits"] for r in results):
            return "train-step plans fit; no step-time estimate to rank them (no cost figures)"
        return "no train-step plan fits the chip's HBM: add fsdp, remat or a smaller batch"
    best = max(fits, key=lambda r: r["seq_per_s"])
    m = best["mesh"]
    return (
        f"best plan that fits ({best['seq_per_s']:.0f} sequences/s, {100 * best['mfu']:.0f}% MFU, "
        f"{best['step_source']} estimate, not a measurement):\n"
        f"  python -m bert_jax.main --distributed --config={config_path} "
        f"--config.mesh.data={m['data']} --config.mesh.fsdp={m['fsdp']} "
        f"--config.mesh.tensor={m['tensor']} --config.model.remat={best['remat']} "
        f"--config.model.dtype={best['dtype']} "
        f"--config.train.global_batch_size={best['global_batch']}"
    )
