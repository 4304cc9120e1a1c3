"""The trainer's own steps (pretrain's and fine-tuning's jitted steps on their setups' meshes)
lowered for abstract inputs carrying the trainer's shardings (no array is made, so the devices
may be compile-only descriptions), compiled, and their figures.
"""

import dataclasses
import math
import re
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from bert_jax import storage
from bert_jax.data.contract import data_facts
from bert_jax.data.contract.manifest import MASKED_LM_PROB, MAX_PREDICTIONS_PER_SEQ
from bert_jax.data.input import pipeline
from bert_jax.finetune import encode, heads, runs
from bert_jax.finetune import train as ft_train
from bert_jax.model import attention, encoder
from bert_jax.plan import figures, flops, hbm
from bert_jax.training import pretrain


def override_model(config, vocab_size: int, dtype: str, num_layers: int, seq_len: int) -> None:
    """The planner's model and data overrides, in place (no data: static masks)."""
    config.model.vocab_size = vocab_size
    config.model.dtype = dtype
    if num_layers:
        config.model.num_hidden_layers = num_layers
    if seq_len:
        config.data.max_seq_length = seq_len
    # MLPerf's and the original's masked positions: 20 at 128 tokens, 76 at 512 (0.15 x L).
    length = config.data.max_seq_length or 128
    config.data.max_seq_length = length
    predictions = MAX_PREDICTIONS_PER_SEQ if length <= 128 else round(MASKED_LM_PROB * length)
    d = config.data
    if d.get("masked_lm_prob") is not None:
        # A recipe's own masking rate (configs/modern.py) sizes rows as modern.predictions_per_row.
        extra = (d.get("pack_max_examples") or 0) if d.get("pack") else 0
        predictions = math.ceil(d.masked_lm_prob * length) + extra
    config.data.max_predictions_per_seq = min(predictions, length)
    config.data.dynamic_masking = False


def _state_bytes(abstract_tree) -> int:
    return sum(
        int(np.prod(x.sharding.shard_shape(x.shape))) * x.dtype.itemsize
        for x in jax.tree.leaves(abstract_tree)
    )


def _pretrain(step: str, config, devices):
    """(jitted fn, abstract args, setup, global batch, model FLOPs per step)."""
    setup = pretrain.make_setup(config, devices)
    facts = data_facts.DataFacts.from_data(config.data)
    b = config.train.global_batch_size
    batch = pretrain.abstract_batch(facts, b, setup)
    m, d = setup.model_config, config.data
    model_flops = flops.train_flops_per_step(m, b, d.max_seq_length, d.max_predictions_per_seq)
    if step == "train":
        fn = pretrain.jit_train_step(setup, config.train.grad_accum_steps)
        return fn, (setup.abstract_state, batch, setup.abstract_lr()), setup, b, model_flops
    # Eval batches carry a weight per example (pipeline.eval_batches pads the last one).
    batch[pipeline.EXAMPLE_WEIGHT] = jax.ShapeDtypeStruct(
        (b,), jnp.float32, sharding=setup.batch_sharding
    )
    args = (setup.abstract_state["params"], batch)
    return pretrain.jit_eval_step(setup), args, setup, b, model_flops / 3


def _finetune(config, ft_base, devices):
    """_pretrain's of fine-tuning's train step: a classification head on the pre-training
    config's encoder and mesh, the fine-tuning config's batch (whole rows per data-parallel
    device) and length, unpacked."""
    ftc = ft_base.copy_and_resolve_references()
    ftc.mesh = config.mesh
    ftc.model.dtype, ftc.model.remat = config.model.dtype, config.model.remat
    fields = {**config.model.to_dict(), **runs.model_overrides(ftc)}
    model_config = encoder.BertConfig.from_config_dict(
        {k: v for k, v in fields.items() if k in config.model}
    )
    model = nnx.eval_shape(
        lambda: heads.TaskModel(model_config, "classification", 2, rngs=nnx.Rngs(0))
    )
    setup, _, frozen = runs.make_setup(ftc, model, 1000, devices, place=False)
    dp, length = setup.data_parallel(), ftc.data.max_seq_length
    b = math.ceil(ftc.train.batch_size / dp) * dp
    ints = {k: (b, length) for k in runs.INPUTS} | {encode.LABEL: (b,)}
    batch = {
        k: jax.ShapeDtypeStruct(s, jnp.int32, sharding=setup.batch_sharding)
        for k, s in ints.items()
    }
    frozen = jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
        frozen,
        setup.frozen_shardings,
    )
    per_seq = flops.model_forward_flops(model_config, length, 0)
    args = (setup.abstract_state, frozen, batch, setup.abstract_lr())
    return ft_train.jit_train_step(setup), args, setup, b, 3 * b * per_seq


def compile_plan(
    step: str, config, ft_base, devices, chip, hlo_dir: str = "", top: int = 10
) -> dict:
    """One step compiled on one mesh -> its figures and where its HBM bytes go (the `top`
    instructions); `chip` is None for fake CPU devices."""
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
        # The TPU compiler refuses a program past HBM ("required for HLO temporaries (100.74G)").
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
        "total_state_bytes": sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(args[0])),
        "model_flops_per_chip": model_flops / chips,
    }
    if compiled is None:
        return {**r, **_refused(refusal, chip)}
    r = {**r, **figures.memory(compiled), "cost": figures.cost(compiled)}
    hlo_text = compiled.as_text()
    if hlo_dir:  # made by options.request
        mesh = "x".join(str(v) for v in r["mesh"].values())
        name = f"{step}_{mesh}_b{batch}_remat{int(r['remat'])}.hlo.txt"
        storage.write_text(storage.join(hlo_dir, name), hlo_text)
    traffic = hbm.attribute(hlo_text)
    r["hbm_traffic"] = traffic.to_json(top)
    r["splash_attention_calls"] = figures.splash_kernels(hlo_text)
    # A sliding-window layer's splash kernel scores every tile its band touches (flops.py).
    spent_flops = model_flops
    if r["splash_attention_calls"]["local"] and step != "finetune":
        m, d = setup.model_config, config.data
        block = math.gcd(length, attention._SPLASH_BLOCK)  # the kernel's tile (attention.py)
        spent_flops = flops.train_flops_per_step(
            m, batch, length, d.max_predictions_per_seq, attention_block=block
        ) / (3 if step == "eval" else 1)
        r["kernel_flops_per_chip"] = spent_flops / chips
    if traffic.repeats:
        # The compiler counts a loop body once: bytes from the HLO (per trip, HBM and on-chip),
        # FLOPs from the model (remat: a forward more), no compiler estimate.
        recompute = 4 / 3 if config.model.remat and step != "eval" else 1.0
        r["cost_reported"] = r["cost"]
        r["cost"] = {
            "flops": spent_flops / chips * recompute,
            "bytes accessed": float(traffic.total_bytes + traffic.onchip_bytes),
        }
        r["cost_source"] = (
            "hlo bytes and model FLOPs"
            + (", the windowed layers' at the kernel's tiles" if spent_flops != model_flops else "")
            + " (the compiler counts loop bodies once)"
        )
    else:
        r["cost_source"] = "compiler"
    if chip is None:
        return r
    r["cudnn_attention_calls"] = hlo_text.count('custom_call_target="__cudnn$fmha')
    slices = [getattr(d, "slice_index", 0) or 0 for d in setup.mesh.devices.flat]
    coll = figures.collectives(hlo_text, slices)
    roof = figures.roofline(r["cost"], coll, chip)
    compiler_s = figures.compiler_seconds(r["cost"])
    r.update(
        chip=chip.name,
        hbm_bytes=chip.hbm_bytes,
        fits=r["peak_bytes"] <= chip.hbm_bytes,
        ici_bytes=coll.ici_bytes,
        dcn_bytes=coll.dcn_bytes,
        collective_counts=coll.counts,
        unread_groups=coll.unread,
        compiler_s=compiler_s,
        roofline_terms=roof.terms,
        roofline_s=roof.serial_s,
        roofline_bound=roof.serial_bound,
        overlapped_s=roof.overlapped_s,
        overlapped_bound=roof.overlapped_bound,
    )
    # The estimate seq/s and MFU use: the compiler's, else the serial (cautious) roofline.
    if compiler_s is not None:
        r.update(step_s=compiler_s, step_source="compiler", bound="")
    else:
        r.update(step_s=roof.serial_s, step_source="roofline", bound=roof.serial_bound)
    per_chip = model_flops / chips / chip.bf16_flops
    # The same bounds on hbm.py's HBM-only bytes ("bytes accessed" counts VMEM too).
    hlo_roof = figures.roofline({**r["cost"], "bytes accessed": traffic.total_bytes}, coll, chip)
    r["hlo_roofline"] = {
        **dataclasses.asdict(hlo_roof),
        "mfu": per_chip / hlo_roof.serial_s if hlo_roof.serial_s > 0 else None,
        "mfu_overlapped": per_chip / hlo_roof.overlapped_s if hlo_roof.overlapped_s > 0 else None,
    }
    if r["step_s"] > 0:
        r.update(seq_per_s=batch / r["step_s"], mfu=per_chip / r["step_s"])
        r.update(seq_per_s_overlapped=batch / roof.overlapped_s)
        r.update(mfu_overlapped=per_chip / roof.overlapped_s)
    else:  # no figures to estimate from (XLA:GPU's deviceless compile may report none)
        r.update(step_s=None, step_source="none", seq_per_s=None, mfu=None)
        r.update(seq_per_s_overlapped=None, mfu_overlapped=None)
    return r


def _refused(message: str, chip) -> dict:
    """A plan the TPU compiler refused for lack of HBM: what it said it needed."""
    need = re.search(r"required for (.*?) \(([\d.]+)([KMGT])\)", message)
    units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    return {
        "chip": chip.name,
        "hbm_bytes": chip.hbm_bytes,
        "fits": False,
        "refused": message,
        # The compiler's figure (temporaries alone, or all it names): a lower bound on peak.
        "peak_bytes": int(float(need[2]) * units[need[3]]) if need else None,
        "step_s": None,
        "seq_per_s": None,
        "mfu": None,
    }
