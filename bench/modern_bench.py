r"""Training throughput of the ModernBERT block: our jitted train step against transformers'
ModernBertForMaskedLM, same config, weights, batch, loss and AdamW, on this machine's CPU.

  python -m bench.modern_bench                      # mini and base at L=512 (minutes on 2 cores)
  python -m bench.modern_bench --models=base --seq_lens=1024 --batch_size=1 --rounds=5

Ours is the real pre-training step (bench/runners.py's OursRunner: bert_jax.training.pretrain's
jit_train_step over configs/modernbert_base.py's block, layers scanned in groups, MLM only, masked
positions gathered before the vocabulary projection). Theirs is ModernBertForMaskedLM with SDPA
attention and `sparse_prediction=True` (ModernBERT's own training setting: the decoder runs on
the masked positions only; --sparse=false gives the default dense decoder over all positions),
loss, backward, clip_grad_norm_(1.0) and torch AdamW. Neither side has dropout (ModernBERT's
recipe). 30% of each row's tokens are predicted.

Timing: --rounds rounds of ours x --steps and theirs x --steps (alternating who goes first), in
one process; figures are medians over rounds, the ratio the median of per-round ratios (their
step time / ours: above 1 means ours is faster). "cpu" figures divide by this process's CPU
seconds instead of wall seconds: they move less when other processes share the cores.
Compilation and one warm block per side are excluded. PyTorch gets as many threads as this
process has cores (XLA's CPU pool size), or --torch_threads. On a machine whose cores other work
keeps busy, PyTorch's OpenMP threads stall each other: measured on 2 shared cores (load ~7),
ModernBERT-base L=512 took 33.4 s a step with 2 threads and 7.0 s with 1 (mini 7.0 s and 2.5 s),
while XLA's pool did not suffer. Run --torch_threads=1 too and compare against the faster.
"""

import json
import math
import os
import statistics
import time

from absl import app, flags

from bench import runners

FLAGS = flags.FLAGS
flags.DEFINE_list("models", ["mini", "base"], "tiny, mini, base or large (ModernBERT's shapes).")
flags.DEFINE_list("seq_lens", ["512"], "Sequence lengths (the sliding window is 128).")
flags.DEFINE_integer("batch_size", 0, "Rows per step; 0: DEFAULT_BATCH's (sized for 2 cores).")
flags.DEFINE_integer("steps", 1, "Steps per timed block.")
flags.DEFINE_integer("rounds", 3, "Interleaved rounds per case.")
flags.DEFINE_bool("sparse", True, "transformers' sparse_prediction (decoder on masked positions).")
flags.DEFINE_integer("torch_threads", 0, "PyTorch's threads; 0: this process's cores.")
flags.DEFINE_float(
    "spec_peak_tflops", 0.0, "A datasheet peak to print MFU against (e.g. 989: H100 bf16 dense)."
)
flags.DEFINE_enum(
    "dtype",
    "float32",
    ["float32", "bfloat16"],
    "Computation dtype: config.model.dtype for ours, torch.autocast for transformers (parameters "
    "stay float32 in both).",
)
flags.DEFINE_string("json_out", "", "Append each case's figures here as a JSON line.")

# Shapes of the small cases; base and large are configs/modernbert_{base,large}.py's.
SHAPES = {
    "tiny": dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=2, intermediate_size=96),
    "mini": dict(
        hidden_size=256, num_hidden_layers=7, num_attention_heads=4, intermediate_size=384
    ),
}
DEFAULT_BATCH = {"tiny": 8, "mini": 4, "base": 1, "large": 1}
VOCAB = 50_368
MASKED_LM_PROB = 0.30


def make_config(model: str, seq_len: int, batch: int, predictions: int, dtype: str = "float32"):
    from configs import modernbert_base, modernbert_large

    module = modernbert_large if model == "large" else modernbert_base
    config = module.get_config()
    config.model.update(SHAPES.get(model, {}))
    config.model.vocab_size = VOCAB
    config.model.dtype = dtype
    config.data.update(
        max_seq_length=seq_len, max_predictions_per_seq=predictions, dynamic_masking=False
    )
    config.train.global_batch_size = batch
    config.optim.warmup_steps = 10  # a nonzero learning rate from the first timed step
    config.optim.optimizer = "adamw"  # the config's StableAdamW; transformers' side runs AdamW
    config.mesh.num_devices = 1  # one device: PyTorch runs on one too
    return config


class TorchModernRunner:
    """transformers' ModernBertForMaskedLM with loss, backward, clip_grad_norm_ and AdamW, on
    `device` ("cpu" or "cuda"; there AdamW is PyTorch's fused kernel)."""

    def __init__(self, config, host_batch: dict, params: dict, sparse: bool, device: str = "cpu"):
        import torch
        import transformers

        from bert_jax.data.contract import features as F
        from bert_jax.hf import bert
        from bert_jax.model.encoder import BertConfig

        self.torch = torch
        model_config = BertConfig.from_config_dict(config.model)
        hf_config = transformers.ModernBertConfig(
            **bert.hf_config_from_bert(model_config),
            attn_implementation="sdpa",
            sparse_prediction=sparse,
        )
        self.model = transformers.ModernBertForMaskedLM(hf_config)
        state = bert.to_hf_state_dict(params, model_config)
        missing, unexpected = self.model.load_state_dict(
            {k: torch.tensor(v) for k, v in state.items()}, strict=False
        )
        if unexpected or missing != ["decoder.weight"]:  # the tied decoder
            raise RuntimeError(f"weights did not map: missing {missing}, unexpected {unexpected}")
        self.device = device
        self.model.to(device).train()
        self.optimizer = runners.torch_adamw(torch, self.model, config.optim, device == "cuda")
        self.max_grad_norm = config.optim.max_grad_norm
        self.autocast = config.model.dtype == "bfloat16"
        arrays = {
            "input_ids": host_batch[F.INPUT_IDS],
            "attention_mask": host_batch[F.INPUT_MASK],
            "labels": runners.mlm_labels(host_batch),
        }
        self.inputs = {k: runners.torch_ids(torch, v, device) for k, v in arrays.items()}
        self.run(1)  # oneDNN primitive creation, allocator warm-up, optimizer state

    def run(self, steps: int) -> tuple[float, float]:
        """(wall, CPU) seconds for `steps` steps; loss.item() waits for a GPU's queue."""
        torch = self.torch
        cpu, start = time.process_time(), time.perf_counter()
        for _ in range(steps):
            with torch.autocast(self.device, dtype=torch.bfloat16, enabled=self.autocast):
                loss = self.model(**self.inputs).loss
            loss.backward()
            runners.torch_update(torch, self.model, self.optimizer, self.max_grad_norm)
        loss.item()
        return time.perf_counter() - start, time.process_time() - cpu


def bench_case(model: str, seq_len: int, device: str = "cpu") -> dict:
    import jax

    from bert_jax.model.encoder import BertConfig
    from bert_jax.plan import flops

    batch = FLAGS.batch_size or DEFAULT_BATCH[model]
    predictions = math.ceil(MASKED_LM_PROB * seq_len)
    config = make_config(model, seq_len, batch, predictions, FLAGS.dtype)
    host_batch = runners.synthetic_batch(batch, seq_len, predictions, VOCAB)
    ours = runners.OursRunner(config, host_batch)
    sides = {
        "ours": ours,
        "torch": TorchModernRunner(config, host_batch, ours.params_numpy(), FLAGS.sparse, device),
    }
    for runner in sides.values():
        runner.run(FLAGS.steps)  # one more warm block each, untimed
    rounds = []
    order = list(sides)
    for i in range(FLAGS.rounds):
        r = {}
        for name in order if i % 2 == 0 else order[::-1]:
            r[name], r[name + "_cpu"] = sides[name].run(FLAGS.steps)
        rounds.append(r)
    med, tokens = statistics.median, batch * seq_len * FLAGS.steps
    result = {
        "model": model,
        "seq_len": seq_len,
        "batch": batch,
        "predictions": predictions,
        "sparse_prediction": FLAGS.sparse,
        "dtype": FLAGS.dtype,
        "device": jax.devices()[0].device_kind,
        "rounds": len(rounds),
        "compile_s": ours.compile_seconds,
    }
    step_flops = flops.train_flops_per_step(
        BertConfig.from_config_dict(config.model), batch, seq_len, predictions
    )
    for name in sides:
        result[f"{name}_step_s"] = med([r[name] / FLAGS.steps for r in rounds])
        if FLAGS.spec_peak_tflops:
            result[f"{name}_mfu_spec"] = (
                step_flops / result[f"{name}_step_s"] / (FLAGS.spec_peak_tflops * 1e12)
            )
        result[f"{name}_tokens_per_s"] = med([tokens / r[name] for r in rounds])
        result[f"{name}_tokens_per_cpu_s"] = med([tokens / r[name + "_cpu"] for r in rounds])
    result["ratio"] = med([r["torch"] / r["ours"] for r in rounds])
    result["ratio_rounds"] = [r["torch"] / r["ours"] for r in rounds]
    result["ratio_cpu"] = med([r["torch_cpu"] / r["ours_cpu"] for r in rounds])
    return result


def _print_case(r: dict) -> None:
    print(
        f"ModernBERT-{r['model']} L={r['seq_len']} {r['dtype']} batch {r['batch']} "
        f"({r['predictions']} predictions a row; transformers sparse_prediction="
        f"{r['sparse_prediction']}), "
        f"median of {r['rounds']} rounds; our compile {r['compile_s']:.1f} s",
        flush=True,
    )
    for name, label in (("ours", "ours"), ("torch", "transformers")):
        print(
            f"  {label:<13} {r[f'{name}_step_s'] * 1e3:9.1f} ms/step "
            f"{r[f'{name}_tokens_per_s']:9.0f} tokens/s "
            f"({r[f'{name}_tokens_per_cpu_s']:7.0f} tokens per CPU-second)"
            + (
                f"  MFU vs spec {100 * r[f'{name}_mfu_spec']:5.1f}%"
                if f"{name}_mfu_spec" in r
                else ""
            ),
            flush=True,
        )
    rounds = ", ".join(f"{x:.2f}" for x in r["ratio_rounds"])
    print(
        f"  ours is {r['ratio']:.2f}x transformers' speed (rounds {rounds}; "
        f"cpu-time {r['ratio_cpu']:.2f}x)",
        flush=True,
    )


def main(argv):
    del argv
    import jax
    import torch

    cores = len(os.sched_getaffinity(0))
    torch.set_num_threads(FLAGS.torch_threads or cores)
    print(
        f"JAX {jax.__version__} on {jax.devices()[0].device_kind} ({jax.default_backend()}), "
        f"{cores} cores; torch {torch.__version__} with {torch.get_num_threads()} threads",
        flush=True,
    )
    for model in FLAGS.models:
        for seq_len in FLAGS.seq_lens:
            result = bench_case(
                model, int(seq_len), "cpu" if jax.default_backend() == "cpu" else "cuda"
            )
            _print_case(result)
            if FLAGS.json_out:
                with open(FLAGS.json_out, "a") as f:
                    f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    app.run(main)
