"""Time to quality: one pre-training recipe through bert_jax and through transformers'
BertForMaskedLM, side by side in one run: steps and wall time to the same held-out
[MASK]-position accuracy.

    python -m bench.quality_bench --data_dir=demo_out/data [--config=configs/demo.py] \
        [--target=0.2] [--num_train_steps=N] [--eval_every=100]

--data_dir is a data_prep output with an eval split (`make demo` writes one: demo_out/data).
Both sides start from the same weights (ours at init, mapped by bert_jax.hf.bert), see the same
batches in the same order (bert_jax's input pipeline: dynamic masks included, drawn once and
fed to both), follow the same learning-rate schedule (the config's, read step by step from
optim.make_optimizer's schedule) and the same AdamW: the config's betas, eps and weight decay
(none on LayerNorm and biases), bias-corrected (set here on both sides: torch.optim.AdamW always
corrects), the global gradient norm clipped. The loss is the MLM loss at the masked positions
(MLM-only records; NSP records are refused). Dropout is the config's on both sides.

The steps alternate, ours then theirs, so a busy machine slows both alike. Train time is the
sum of each side's step times (each waited for: block_until_ready / PyTorch's synchronous CPU
ops); ours includes its first step, which compiles (printed apart). Evals (the same held-out
batches, [MASK]-position accuracy by losses.position_kinds on both sides' logits) are not timed.
Printed: each eval of both sides, then per side the first step and train seconds at which
[MASK]-position accuracy reached --target, and the ratios.
"""

import os
import time

from absl import app, flags

flags.DEFINE_string("data_dir", None, "data_prep output (train and eval splits), MLM-only.")
flags.DEFINE_string("config", "configs/demo.py", "The recipe: model, optimizer, batch, steps.")
flags.DEFINE_float("target", 0.2, "Held-out [MASK]-position accuracy to time the sides to.")
flags.DEFINE_integer("num_train_steps", None, "Override the config's step count.")
flags.DEFINE_integer("eval_every", None, "Steps between evals (default: the config's).")
flags.mark_flag_as_required("data_dir")
FLAGS = flags.FLAGS


def load_config():
    import importlib.util

    from bert_jax import cli
    from bert_jax.data.contract import data_facts

    spec = importlib.util.spec_from_file_location("bench_config", FLAGS.config)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config()
    config.data.train_files = config.data.eval_files = FLAGS.data_dir
    if FLAGS.num_train_steps:
        config.train.num_train_steps = FLAGS.num_train_steps
    config.optim.bias_correction = True  # torch.optim.AdamW always corrects
    config.mesh.num_devices = 1
    config = data_facts.resolve(config)
    if config.data.nsp:
        raise cli.UserError(
            f"{FLAGS.data_dir} holds NSP pairs; the transformers side is BertForMaskedLM: "
            "write MLM-only records (data_prep --nsp=false)"
        )
    return config


class Ours:
    def __init__(self, config):
        import jax

        from bert_jax.training import pretrain

        self.jax = jax
        self.setup = pretrain.make_setup(config)
        self.step_fn = pretrain.jit_train_step(self.setup, config.train.grad_accum_steps)
        self.eval_fn = pretrain.jit_eval_step(self.setup)
        self.state = pretrain.jit_init(self.setup, config.train.seed)()
        self.params_at_init = jax.device_get(self.state["params"])

    def step(self, host_batch) -> float:
        from bert_jax.model import sharding

        start = time.perf_counter()
        with self.setup.activate():
            batch = sharding.host_to_global(host_batch, self.setup.batch_sharding)
            self.state, metrics = self.step_fn(self.state, batch, self.setup.lr)
            self.jax.block_until_ready((self.state, metrics))
        return time.perf_counter() - start

    def accuracy(self, eval_batches) -> float:
        from bert_jax.training import pretrain

        figures = pretrain.evaluate(self.setup, self.eval_fn, self.state["params"], eval_batches)
        return figures["mlm_accuracy"]


class Theirs:
    """transformers.BertForMaskedLM, torch.optim.AdamW, clip_grad_norm_, the schedule's rate."""

    def __init__(self, config, params, schedule):
        import numpy as np
        import torch
        import transformers

        from bert_jax.hf import bert
        from bert_jax.model.encoder import BertConfig

        torch.manual_seed(config.train.seed)  # dropout draws, when the config has dropout
        self.torch, self.schedule, self.step_count = torch, schedule, 0
        model_config = BertConfig.from_config_dict(config.model)
        hf_config = transformers.BertConfig(**bert.hf_config_from_bert(model_config))
        self.model = transformers.BertForMaskedLM(hf_config)
        state = {
            k: torch.from_numpy(np.array(v))
            for k, v in bert.to_hf_state_dict(params, model_config).items()
            if not k.startswith(("bert.pooler", "cls.seq_relationship"))  # no NSP here
        }
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        if unexpected or any(not k.startswith("cls.predictions.decoder") for k in missing):
            raise RuntimeError(f"weights did not map: missing {missing}, unexpected {unexpected}")
        self.model.train()
        named = list(self.model.named_parameters())
        no_decay = [p for n, p in named if n.endswith("bias") or "LayerNorm" in n]
        decay = [p for n, p in named if not (n.endswith("bias") or "LayerNorm" in n)]
        o = config.optim
        self.optimizer = torch.optim.AdamW(
            [
                {"params": decay, "weight_decay": o.weight_decay},
                {"params": no_decay, "weight_decay": 0.0},
            ],
            lr=0.0,
            betas=(o.b1, o.b2),
            eps=o.eps,
        )
        self.max_grad_norm = o.max_grad_norm

    def _mlm_logits(self, batch):
        from bert_jax.data.contract import features as F

        torch = self.torch
        sequence = self.model.bert(
            torch.from_numpy(batch[F.INPUT_IDS].astype("int64")),
            attention_mask=torch.from_numpy(batch[F.INPUT_MASK].astype("int64")),
            token_type_ids=torch.from_numpy(batch[F.SEGMENT_IDS].astype("int64")),
            return_dict=False,
        )[0]
        positions = torch.from_numpy(batch[F.MASKED_LM_POSITIONS].astype("int64"))
        index = positions[..., None].expand(-1, -1, sequence.shape[-1])
        return self.model.cls(torch.gather(sequence, 1, index))  # [batch, predictions, vocab]

    def step(self, batch) -> float:
        from bert_jax.data.contract import features as F

        torch = self.torch
        start = time.perf_counter()
        for group in self.optimizer.param_groups:
            group["lr"] = float(self.schedule(self.step_count))
        logits = self._mlm_logits(batch)
        labels = torch.from_numpy(batch[F.MASKED_LM_IDS].astype("int64"))
        weights = torch.from_numpy(batch[F.MASKED_LM_WEIGHTS])
        nll = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), labels.flatten(), reduction="none"
        )
        loss = (nll * weights.flatten()).sum() / (weights.sum() + 1e-5)  # BERT's MLM loss
        loss.backward()
        if self.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        loss.item()
        self.step_count += 1
        return time.perf_counter() - start

    def accuracy(self, eval_batches, mask_id: int) -> float:
        import numpy as np

        from bert_jax.data.contract import features as F
        from bert_jax.data.input import pipeline
        from bert_jax.training import losses

        self.model.eval()
        right = total = 0.0
        with self.torch.no_grad():
            for b in eval_batches:
                guess = self._mlm_logits(b).argmax(-1).numpy()
                shown = np.take_along_axis(b[F.INPUT_IDS], b[F.MASKED_LM_POSITIONS], 1)
                kinds = np.asarray(losses.position_kinds(shown, b[F.MASKED_LM_IDS], mask_id))
                w = b[F.MASKED_LM_WEIGHTS] * b[pipeline.EXAMPLE_WEIGHT][:, None]
                w = w * (kinds == 0)
                right += float((w * (guess == b[F.MASKED_LM_IDS])).sum())
                total += float(w.sum())
        self.model.train()
        return right / total


def main(argv):
    del argv
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from bert_jax.data.input import pipeline

    config = load_config()
    t = config.train
    eval_every = FLAGS.eval_every or config.eval.every_steps
    ours = Ours(config)
    theirs = Theirs(config, ours.params_at_init, ours.setup.schedule)
    d = config.data
    train_iter = iter(
        pipeline.train_dataset(d, config.model.vocab_size, t.global_batch_size, t.seed)
    )
    eval_batches = pipeline.eval_batches(
        d,
        d.eval_files,
        config.model.vocab_size,
        config.eval.batch_size,
        config.eval.num_examples,
        t.seed,
    )
    print(
        f"{FLAGS.config}: {t.num_train_steps} steps of {t.global_batch_size}, peak rate "
        f"{config.optim.learning_rate}, {config.optim.schedule} after {config.optim.warmup_steps} "
        f"warmup steps; target [MASK]-position accuracy {FLAGS.target}; "
        f"load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    times = {"ours": 0.0, "transformers": 0.0}
    first = {}  # each side's first step: ours compiles in it, PyTorch sets up its kernels
    reached: dict[str, tuple[int, float]] = {}
    print(f"{'step':>6}  {'ours':>6}  {'transformers':>12}  (held-out [MASK]-position accuracy)")
    for step in range(1, t.num_train_steps + 1):
        batch = next(train_iter)
        for side, runner in (("ours", ours), ("transformers", theirs)):
            seconds = runner.step(batch)
            first.setdefault(side, seconds)
            times[side] += seconds
        if step % eval_every and step != t.num_train_steps:
            continue
        acc = {
            "ours": ours.accuracy(eval_batches),
            "transformers": theirs.accuracy(eval_batches, d.mask_token_id),
        }
        print(f"{step:>6}  {acc['ours']:.4f}  {acc['transformers']:>12.4f}", flush=True)
        for side, value in acc.items():
            if value >= FLAGS.target and side not in reached:
                reached[side] = (step, times[side])
        if len(reached) == 2:
            break
    print()
    for side in times:
        rest = times[side] - first[side]
        per_step = rest / max(step - 1, 1)
        print(
            f"{side:>12}: first step {first[side]:.1f} s"
            f"{' (compiling)' if side == 'ours' else ''}, then "
            f"{per_step * 1000:.0f} ms a step"
        )
        if side in reached:
            at, seconds = reached[side]
            print(
                f"{'':>12}  reached {FLAGS.target} at step {at}: {seconds:.0f} s of training, "
                f"{seconds - first[side]:.0f} s without the first step"
            )
        else:
            print(f"{'':>12}  did not reach {FLAGS.target} in {step} steps ({times[side]:.0f} s)")
    if len(reached) == 2:
        (s_o, t_o), (s_t, t_t) = reached["ours"], reached["transformers"]
        print(
            f"to {FLAGS.target}: steps ours/theirs {s_o / s_t:.2f}, train time ours/theirs "
            f"{t_o / t_t:.2f} ({(t_o - first['ours']) / (t_t - first['transformers']):.2f} "
            "without the first steps)"
        )
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    app.run(main)
