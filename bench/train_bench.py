r"""Training throughput and MFU: our jitted train step against transformers' BertForPreTraining.

  python -m bench.train_bench   # mini and base, L=128, fp32 (about 10 min on 2 cores)
  python -m bench.train_bench --models=base --seq_lens=128,512 --dtypes=float32,bfloat16 --rounds=5
  python -m bench.train_bench --models=large --dtypes=bfloat16 --batch_size=64 \
      --torch=false   # on a GPU

Ours is the real step (bench/runners.py: bert_jax.training.pretrain's jit_train_step, state donated,
dropout on). The reference is transformers' BertForPreTraining in PyTorch with the same config,
initial weights, batch, loss, clip_grad_norm_(1.0) and AdamW settings; bf16 is torch.autocast on its
forward pass and config.model.dtype='bfloat16' on ours (parameters stay fp32 in both). It is used
the standard way, so its vocabulary projection covers all L positions; --torch_gather adds a second
PyTorch side that gathers the masked positions first, as NVIDIA's BERT does (the stronger baseline).

Timing: each case runs --rounds rounds; a round times the matmul peak, ours x --steps, PyTorch x
--steps (the two alternate who goes first), then the peak again, all in one process, so load from
other work hits both sides alike. Figures are medians over rounds; ratios are medians of per-round
ratios (PyTorch step time / ours: above 1 means ours is faster). MFU is model FLOPs per step
(bert_jax/plan/flops.py states the formula) over step time, divided by the matmul peak of the same
round.
"cpu-time" figures divide by this process's CPU seconds instead of wall seconds: they move much
less when other processes share the cores. Compilation and two warm steps are excluded.

--variant adds sides of ours computed another way, in the same rounds (runners.parse_variant: a
config override, an XLA option for that step's compilation, or a bench/step_variants.py patch):
an A/B of a change in one process, e.g. --variant=scan:model.scan_layers=true. Process-wide
settings (XLA_FLAGS, --reuse_freed_memory) need two processes instead. Every case prints the
CPU's model and its vector extensions (AVX2, AVX-512, AVX512-BF16, AMX) and the load average.

PyTorch gets torch.set_num_threads(N), N = the cores this process may use, which is also the size
of XLA's CPU thread pool. The batch is synthetic: random ids, no padding, sorted masked positions.
The peak is an --matmul_n cube in --peak_dtype (defaults: 2048 fp32 on CPU, 8192 bf16 on GPU);
--spec_peak_tflops also prints MFU against a datasheet figure (e.g. 989 for H100 SXM bf16 dense).
"""

import json
import os
import statistics

from absl import app, flags

from bench import runners

FLAGS = flags.FLAGS
flags.DEFINE_list("models", ["mini", "base"], "Model configs: tiny, mini, base, large.")
flags.DEFINE_list("seq_lens", ["128"], "Sequence lengths.")
flags.DEFINE_list("dtypes", ["float32"], "Computation dtypes: float32, bfloat16.")
flags.DEFINE_integer(
    "batch_size", 0, "Sequences per step; 0 picks runners.DEFAULT_BATCH (sized for 2 CPU cores)."
)
flags.DEFINE_integer(
    "num_predictions", 0, "Masked positions per sequence; 0: 20 at L=128, 80 at L=512."
)
flags.DEFINE_integer("steps", 1, "Steps per timed block.")
flags.DEFINE_integer("rounds", 3, "Interleaved rounds per case.")
flags.DEFINE_bool("torch", True, "Time transformers' BertForPreTraining too (needs CPU PyTorch).")
flags.DEFINE_bool(
    "torch_gather", False, "Also time PyTorch with the masked positions gathered first."
)
flags.DEFINE_string("attention", "auto", "config.model.attention_impl for ours.")
flags.DEFINE_bool("remat", False, "config.model.remat for ours.")
flags.DEFINE_integer(
    "matmul_n", 0, "Side of the square matmul timed as the peak; 0: 2048 on CPU, 8192 else."
)
flags.DEFINE_string("peak_dtype", "", "dtype of that matmul; empty: float32 on CPU, bfloat16 else.")
flags.DEFINE_float(
    "spec_peak_tflops", 0.0, "A datasheet peak to print MFU against as well (0: none)."
)
flags.DEFINE_string("json_out", "", "Append each case's figures here as a JSON line.")
flags.DEFINE_bool(
    "reuse_freed_memory",
    True,
    "Apply bert_jax.runtime.configure_for_cpu_training() first, as the trainer does "
    "(false: glibc's defaults, for an A/B of that setting in two processes).",
)
flags.DEFINE_multi_string(
    "override",
    [],
    "section.field=VALUE for every side, PyTorch's too (e.g. model.attention_probs_dropout_prob=0, "
    "MLPerf's setting, under which ours uses cuDNN's fused attention on a GPU). Repeatable.",
)
flags.DEFINE_multi_string(
    "variant",
    [],
    "NAME:SETTING[;SETTING...]: one more side of ours, timed in the same rounds (runners."
    "parse_variant: config overrides such as model.scan_layers=true, XLA options such as "
    "xla_cpu_use_onednn=true, patch=NAME of bench/step_variants.py). Repeatable.",
)


def bench_case(model: str, seq_len: int, dtype: str, peak, torch_peak=None, device="cpu") -> dict:
    import jax

    from bench import runners
    from bert_jax.model.encoder import BertConfig
    from bert_jax.plan import flops

    num_predictions = FLAGS.num_predictions or (20 if seq_len <= 128 else 80)
    batch = FLAGS.batch_size or runners.DEFAULT_BATCH[(model, seq_len)]
    config = runners.make_config(
        model, seq_len, num_predictions, batch, dtype, FLAGS.attention, FLAGS.remat
    )
    overrides, options, patches = runners.parse_settings(FLAGS.override, "--override")
    if options or patches:  # they would change our side only: that is a --variant
        raise ValueError(f"--override takes section.field=VALUE only, not {options or patches}")
    config = runners.apply_overrides(config, overrides)
    model_config = BertConfig.from_config_dict(config.model)
    host_batch = runners.synthetic_batch(batch, seq_len, num_predictions, model_config.vocab_size)
    sides = {"ours": runners.OursRunner(config, host_batch)}
    for spec in FLAGS.variant:
        name, overrides, options, patch_names = runners.parse_variant(spec)
        from bench import step_variants

        sides[f"ours[{name}]"] = runners.OursRunner(
            runners.apply_overrides(config, overrides),
            host_batch,
            compiler_options=options,
            patch=step_variants.patches(patch_names),
        )
    params = sides["ours"].params_numpy() if FLAGS.torch else None
    if FLAGS.torch:
        sides["torch"] = runners.TorchRunner(config, host_batch, params, device=device)
    if FLAGS.torch and FLAGS.torch_gather:
        sides["torch_gather"] = runners.TorchRunner(
            config, host_batch, params, gather_masked=True, device=device
        )
    for runner in sides.values():
        runner.run(FLAGS.steps)  # one more warm block each, untimed
    step_flops = flops.train_flops_per_step(model_config, batch, seq_len, num_predictions)

    rounds = []
    order = list(sides)
    for i in range(FLAGS.rounds):
        before = peak.measure()
        torch_before = torch_peak.measure() if torch_peak else None
        r = {}
        for name in order if i % 2 == 0 else order[::-1]:
            r[name], r[name + "_cpu"] = sides[name].run(FLAGS.steps)
        after = peak.measure()
        # The peak is the mean of samples before and after: load changes over a round's seconds.
        r["peak"], r["peak_cpu"] = (before[0] + after[0]) / 2, (before[1] + after[1]) / 2
        if torch_peak:
            torch_after = torch_peak.measure()
            r["torch_peak"] = (torch_before[0] + torch_after[0]) / 2
        rounds.append(r)

    med = statistics.median
    n, tokens = FLAGS.steps, batch * seq_len
    result = {
        "model": model,
        "seq_len": seq_len,
        "dtype": dtype,
        "batch": batch,
        "predictions": num_predictions,
        "device": jax.devices()[0].device_kind,
        "overrides": list(FLAGS.override),
        **runners.cpu_info(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "reuse_freed_memory": FLAGS.reuse_freed_memory,
        "load_average": os.getloadavg()[0],
        "rounds": len(rounds),
        "variants": [n for n in sides if n.startswith("ours[")],
        "variant_specs": list(FLAGS.variant),
        "compile_s": sides["ours"].compile_seconds,
        "step_gflop": step_flops / 1e9,
        "peak_gflops": med([r["peak"] for r in rounds]) / 1e9,
    }
    if torch_peak:
        result["torch_peak_gflops"] = med([r["torch_peak"] for r in rounds]) / 1e9
        result["matmul_ratio"] = med([r["peak"] / r["torch_peak"] for r in rounds])
    for name in sides:
        result.update(
            {
                f"{name}_step_s": med([r[name] / n for r in rounds]),
                f"{name}_cpu_s": med([r[name + "_cpu"] / n for r in rounds]),
                f"{name}_tokens_per_s": med([tokens * n / r[name] for r in rounds]),
                f"{name}_seqs_per_s": med([batch * n / r[name] for r in rounds]),
                f"{name}_mfu": med([step_flops * n / r[name] / r["peak"] for r in rounds]),
                f"{name}_mfu_cpu": med(
                    [step_flops * n / r[name + "_cpu"] / r["peak_cpu"] for r in rounds]
                ),
            }
        )
        if FLAGS.spec_peak_tflops:
            result[f"{name}_mfu_spec"] = (
                result[f"{name}_tokens_per_s"]
                / tokens
                * step_flops
                / (FLAGS.spec_peak_tflops * 1e12)
            )
        if name.startswith("ours["):
            # Against ours as configured: above 1 means the variant is faster.
            result[f"{name}_speedup"] = med([r["ours"] / r[name] for r in rounds])
            result[f"{name}_speedup_rounds"] = [r["ours"] / r[name] for r in rounds]
            result[f"{name}_speedup_cpu"] = med([r["ours_cpu"] / r[name + "_cpu"] for r in rounds])
            for other in ("torch", "torch_gather"):
                if other in sides:
                    result[f"{name}_ratio_{other}"] = med([r[other] / r[name] for r in rounds])
        elif name != "ours":
            # Against its own library's matmul rate: how well each side uses what it has.
            result[f"{name}_mfu_own_peak"] = med(
                [step_flops * n / r[name] / r["torch_peak"] for r in rounds]
            )
            result[f"ratio_{name}"] = med([r[name] / r["ours"] for r in rounds])
            result[f"ratio_{name}_rounds"] = [r[name] / r["ours"] for r in rounds]
            result[f"ratio_{name}_cpu"] = med([r[name + "_cpu"] / r["ours_cpu"] for r in rounds])
    return result


def _print_case(r: dict) -> None:
    print(
        f"{r['model']} L={r['seq_len']} {r['dtype']} batch {r['batch']} (P={r['predictions']}): "
        f"{r['step_gflop']:.0f} GFLOP/step; matmul peak {r['peak_gflops']:.0f} GFLOP/s (median of "
        f"{r['rounds']} rounds)" + "".join(f"; {o}" for o in r["overrides"]),
        flush=True,
    )
    extensions = runners.extensions_text(r["cpu_extensions"])
    print(f"  on {r['cpu']} ({extensions}); load average {r['load_average']:.1f}", flush=True)
    if "torch_peak_gflops" in r:
        print(
            f"  PyTorch's matmul peak {r['torch_peak_gflops']:.0f} GFLOP/s: XLA's matmul runs at "
            f"{r['matmul_ratio']:.2f}x PyTorch's on this machine",
            flush=True,
        )
    names = ["ours", *r.get("variants", []), "torch", "torch_gather"]
    for name in names:
        if f"{name}_step_s" not in r:
            continue
        line = (
            f"  {name:<13} {r[f'{name}_step_s'] * 1e3:9.1f} ms/step "
            f"{r[f'{name}_tokens_per_s']:9.0f} tokens/s "
            f"{r[f'{name}_seqs_per_s']:8.2f} seq/s  MFU {100 * r[f'{name}_mfu']:5.1f}% "
            f"(cpu-time {100 * r[f'{name}_mfu_cpu']:5.1f}%)"
        )
        if f"{name}_mfu_spec" in r:
            line += f"  MFU vs spec {100 * r[f'{name}_mfu_spec']:5.1f}%"
        if name.startswith("ours["):
            rounds = ", ".join(f"{x:.2f}" for x in r[f"{name}_speedup_rounds"])
            line += (
                f"  | {r[f'{name}_speedup']:.2f}x ours' speed (rounds {rounds}; cpu-time "
                f"{r[f'{name}_speedup_cpu']:.2f}x)"
            )
            for other in ("torch", "torch_gather"):
                if f"{name}_ratio_{other}" in r:
                    line += f"; {r[f'{name}_ratio_{other}']:.2f}x {other}"
        elif name != "ours":
            line += f" (MFU vs PyTorch's own matmul peak {100 * r[f'{name}_mfu_own_peak']:4.1f}%)"
            rounds = ", ".join(f"{x:.2f}" for x in r[f"ratio_{name}_rounds"])
            line += (
                f"  | ours is {r[f'ratio_{name}']:.2f}x faster (rounds {rounds}; "
                f"cpu-time {r[f'ratio_{name}_cpu']:.2f}x)"
            )
        print(line, flush=True)


def main(argv):
    del argv
    from bert_jax import runtime

    # Before JAX starts its threads (bert_jax.runtime.reuse_freed_memory says why).
    malloc = FLAGS.reuse_freed_memory and runtime.configure_for_cpu_training()
    import jax
    import jax.numpy as jnp

    from bench import matmul_peak

    cores = len(os.sched_getaffinity(0))
    if FLAGS.torch:
        import torch

        torch.set_num_threads(cores)
    on_cpu = jax.default_backend() == "cpu"
    n = FLAGS.matmul_n or (2048 if on_cpu else 8192)
    peak_dtype = FLAGS.peak_dtype or ("float32" if on_cpu else "bfloat16")
    print(runners.cpu_summary(), flush=True)
    print(
        f"JAX {jax.__version__} on {jax.devices()[0].device_kind} ({jax.default_backend()}), "
        f"{cores} cores, XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}; torch threads "
        f"{cores if FLAGS.torch else '-'}; peak: {n}^3 {peak_dtype} matmul; malloc: "
        f"{'reuse freed memory' if malloc else 'glibc defaults'}",
        flush=True,
    )
    peak = matmul_peak.MatmulPeak(n, jnp.dtype(peak_dtype))
    device = "cpu" if on_cpu else "cuda"
    torch_peak = runners.TorchMatmulPeak(n, peak_dtype, device) if FLAGS.torch else None
    for model in FLAGS.models:
        for seq_len in map(int, FLAGS.seq_lens):
            for dtype in FLAGS.dtypes:
                r = bench_case(model, seq_len, dtype, peak, torch_peak, device)
                _print_case(r)
                if FLAGS.json_out:
                    with open(FLAGS.json_out, "a") as f:
                        f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    app.run(main)
