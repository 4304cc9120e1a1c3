"""The two timed sides of bench/train_bench.py, and what they share with the other benchmarks.

OursRunner is the real train step: bert_jax.training.pretrain.make_setup + jit_init + jit_train_step
(forward, loss, backward, global-norm clip, AdamW; the state donated), dropout on as in
pre-training. TorchRunner is transformers' BertForPreTraining with the same config, weights (via
bert_jax.hf.bert), batch, loss and optimizer settings. Both time blocks of steps with one sync at
the end and report wall and CPU seconds (CPU: this process, all threads).
"""

import importlib
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONFIGS = {"tiny": "tiny", "mini": "mini", "base": "bert_base", "large": "bert_large"}
# (model, seq_len) -> batch: small enough for a 2-core CPU run to finish in minutes.
DEFAULT_BATCH = {
    ("tiny", 128): 32,
    ("mini", 128): 32,
    ("mini", 512): 8,
    ("base", 128): 8,
    ("base", 512): 2,
    ("large", 128): 4,
    ("large", 512): 1,
}


BENCH_VOCAB_SIZE = 30522


def make_config(
    model: str,
    seq_len: int,
    num_predictions: int,
    batch: int,
    dtype: str = "float32",
    attention: str = "auto",
    remat: bool = False,
):
    """configs/<model>.py with the benchmark's shapes, on one device."""
    config = importlib.import_module(f"configs.{CONFIGS[model]}").get_config()
    # The configs take the vocabulary size from the data's manifest; the benchmarks have no data
    # and measure the published models, which use bert-base-uncased's vocabulary.
    config.model.vocab_size = BENCH_VOCAB_SIZE
    config.data.dynamic_masking = False
    config.model.dtype = dtype
    config.model.attention_impl = attention
    config.model.remat = remat
    config.data.max_seq_length = seq_len
    config.data.max_predictions_per_seq = num_predictions
    config.train.global_batch_size = batch
    config.optim.warmup_steps = 10  # a nonzero learning rate from the first timed step
    config.mesh.num_devices = 1  # one device: PyTorch runs on one too
    return config


def write_shards(
    work_dir: str,
    seq_len: int,
    num_predictions: int,
    dynamic: bool = False,
    nsp: bool = True,
    fmt: str = "arrayrecord",
) -> str:
    """examples/data/pydocs.txt -> data_prep's shards (ArrayRecord, or `fmt`) under `work_dir`
    (dupe_factor 1; skipped when already written); their glob. The manifest beside them has the
    padding."""
    kind = ("dynamic" if dynamic else "static") + ("" if nsp else "_mlm_only")
    kind += "" if fmt == "arrayrecord" else f"_{fmt}"
    out = os.path.join(work_dir, f"L{seq_len}_{kind}")
    if not os.path.exists(os.path.join(out, "manifest.json")):
        cmd = [
            sys.executable,
            "-m",
            "data_prep.main",
            f"--input={os.path.join(REPO, 'examples', 'data', 'pydocs.txt')}",
            "--vocab_file="
            + os.path.join(REPO, "data_prep", "testdata", "bert-base-uncased-vocab.txt"),
            f"--output_dir={out}",
            f"--max_seq_length={seq_len}",
            f"--max_predictions_per_seq={num_predictions}",
            "--dupe_factor=1",
            "--eval_fraction=0",
            "--noprogress",
            f"--dynamic_masking={str(dynamic).lower()}",
            f"--nsp={str(nsp).lower()}",
            f"--format={fmt}",
        ]
        print("writing shards:", " ".join(cmd[1:]), flush=True)
        subprocess.run(cmd, check=True, cwd=REPO)
    return os.path.join(out, "train-*")


def synthetic_batch(
    batch: int, seq_len: int, num_predictions: int, vocab: int, seed: int = 0
) -> dict:
    """A pre-training batch of numpy arrays in bert_jax.data.contract.features' names."""
    import numpy as np

    from bert_jax.data.contract import features as F

    rng = np.random.default_rng(seed)
    positions = np.sort(
        np.stack(
            [
                rng.choice(np.arange(1, seq_len), num_predictions, replace=False)
                for _ in range(batch)
            ]
        ),
        axis=1,
    )
    segments = np.zeros((batch, seq_len), np.int32)
    segments[:, seq_len // 2 :] = 1
    return {
        F.INPUT_IDS: rng.integers(1000, vocab, (batch, seq_len), dtype=np.int32),
        F.INPUT_MASK: np.ones((batch, seq_len), np.int32),
        F.SEGMENT_IDS: segments,
        F.MASKED_LM_POSITIONS: positions.astype(np.int32),
        F.MASKED_LM_IDS: rng.integers(1000, vocab, (batch, num_predictions), dtype=np.int32),
        F.MASKED_LM_WEIGHTS: np.ones((batch, num_predictions), np.float32),
        F.NEXT_SENTENCE_LABELS: rng.integers(0, 2, (batch,), dtype=np.int32),
    }


# The vector and matrix extensions that decide a CPU's matmul speed in float32 and bfloat16, as
# /proc/cpuinfo names them: AVX2, AVX-512, AVX-512 with bf16 dot products, AMX tiles.
CPU_EXTENSIONS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16")


def cpu_info() -> dict:
    """{'cpu': model name, 'cpu_extensions': those of CPU_EXTENSIONS it has} from /proc/cpuinfo
    (Linux); the platform's processor string and no extensions elsewhere."""
    import platform

    model, present = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    model = value.strip()
                elif key.strip() == "flags":
                    present = set(value.split())
                    break
    except OSError:
        pass
    return {"cpu": model, "cpu_extensions": [x for x in CPU_EXTENSIONS if x in present]}


def extensions_text(extensions: list[str]) -> str:
    return " ".join(extensions) or "none of " + ", ".join(CPU_EXTENSIONS)


def cpu_summary() -> str:
    """'CPU: <model> (<extensions>)', the line the benchmarks print first."""
    info = cpu_info()
    return f"CPU: {info['cpu']} ({extensions_text(info['cpu_extensions'])})"


def parse_variant(spec: str) -> tuple[str, dict, dict, list[str]]:
    """'NAME:SETTING;SETTING...' -> (NAME, config overrides, XLA compiler options, patch names)
    (parse_settings)."""
    name, sep, settings = spec.partition(":")
    if not sep or not name:
        raise ValueError(f"variant {spec!r}: expected NAME:SETTING[;SETTING...]")
    return (name, *parse_settings(settings.split(";"), f"variant {spec!r}"))


def parse_settings(settings: list[str], where: str) -> tuple[dict, dict, list[str]]:
    """SETTINGs -> (config overrides, XLA compiler options, patch names). A SETTING is
    `section.field=VALUE` (a config override, e.g. model.scan_layers=true), `xla_...=VALUE` (an
    XLA option for this step's compilation, e.g. xla_cpu_use_onednn=true) or `patch=NAME`
    (bench/step_variants.py's PATCHES). VALUEs true/false, integers and floats are parsed as
    such, anything else is a string."""
    overrides, options, patches = {}, {}, []
    for setting in filter(None, settings):
        key, eq, text = setting.partition("=")
        if not eq:
            raise ValueError(f"{where}: setting {setting!r} lacks '='")
        value = {"true": True, "false": False}.get(text.lower(), text)
        for kind in (int, float):
            if isinstance(value, str):
                try:
                    value = kind(text)
                except ValueError:
                    pass
        if key == "patch":
            patches.append(text)
        elif key.startswith("xla_"):
            options[key] = value
        elif "." in key:
            overrides[key] = value
        else:
            raise ValueError(f"{where}: {key!r} is no section.field, xla_ option or patch")
    return overrides, options, patches


def apply_overrides(config, overrides: dict):
    """A copy of `config` with `section.field` overrides set (existing fields only)."""
    config = config.copy_and_resolve_references()
    for path, value in overrides.items():
        section, field = path.rsplit(".", 1)
        node = config
        for part in section.split("."):
            node = node[part]
        # config.model may gain a BertConfig field the config file leaves at its default
        # (BertConfig.from_config_dict rejects any other).
        if field not in node and section != "model":
            raise ValueError(f"config has no field {path}")
        node[field] = value
    return config


class OursRunner:
    """bert_jax.training.pretrain's jitted, donated train step on a fixed device batch (or a few,
    taken in turn: real batches of varying content).

    `compiler_options`: XLA options for this step's compilation only (e.g.
    {"xla_cpu_use_onednn": True}), so steps compiled differently run side by side in one
    process. `patch`: a context manager in effect while the step is traced (bench/step_variants.py:
    the same step with one piece of the model computed another way)."""

    def __init__(self, config, host_batch: dict | list[dict], compiler_options=None, patch=None):
        import contextlib

        import jax

        from bert_jax.model import sharding
        from bert_jax.training import pretrain

        self.jax = jax
        self.setup = pretrain.make_setup(config)
        with self.setup.activate():
            self.state = pretrain.jit_init(self.setup, 0)()
            self.batches = [
                sharding.host_to_global(b, self.setup.batch_sharding)
                for b in (host_batch if isinstance(host_batch, list) else [host_batch])
            ]
            start = time.perf_counter()
            with patch if patch is not None else contextlib.nullcontext():
                lowered = pretrain.jit_train_step(self.setup).lower(
                    self.state, self.batches[0], self.setup.lr
                )
            self.step_fn = lowered.compile(compiler_options or None)
        self.steps_run = 0
        self.compile_seconds = time.perf_counter() - start + self.run(1)[0]

    def params_numpy(self) -> dict:
        return self.jax.device_get(self.state["params"])

    def run(self, steps: int) -> tuple[float, float]:
        """(wall, CPU) seconds for `steps` steps; one sync at the end, none inside the loop."""
        with self.setup.activate():
            cpu, start = time.process_time(), time.perf_counter()
            for _ in range(steps):
                batch = self.batches[self.steps_run % len(self.batches)]
                self.state, metrics = self.step_fn(self.state, batch, self.setup.lr)
                self.steps_run += 1
            self.jax.block_until_ready((self.state, metrics))
            return time.perf_counter() - start, time.process_time() - cpu


def torch_adamw(torch, model, optim, fused: bool = False):
    """torch.optim.AdamW over `model` with config.optim's rate, betas, epsilon and weight decay
    (the PyTorch side of every bench that trains beside ours); `fused`: PyTorch's one-kernel
    CUDA AdamW, its fastest on a GPU."""
    return torch.optim.AdamW(
        model.parameters(),
        lr=optim.learning_rate,
        betas=(optim.b1, optim.b2),
        eps=optim.eps,
        weight_decay=optim.weight_decay,
        fused=fused or None,
    )


def torch_update(torch, model, optimizer, max_grad_norm: float) -> None:
    """Clip the global gradient norm as our step does (0: no clipping), step, clear."""
    if max_grad_norm > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def torch_ids(torch, array, device: str):
    """An integer batch array as the int64 tensor transformers takes, on `device`."""
    import numpy as np

    return torch.from_numpy(array.astype(np.int64)).to(device)


def mlm_labels(host_batch: dict):
    """transformers' MLM labels for a batch: the masked ids at their positions, -100 elsewhere."""
    import numpy as np

    from bert_jax.data.contract import features as F

    labels = np.full(host_batch[F.INPUT_IDS].shape, -100, np.int64)
    np.put_along_axis(
        labels, host_batch[F.MASKED_LM_POSITIONS], host_batch[F.MASKED_LM_IDS], axis=1
    )
    return labels


class TorchRunner:
    """transformers' BertForPreTraining with loss, backward, clip_grad_norm_ and AdamW.

    The standard way (`gather_masked=False`): labels of -100 except at the masked positions, so
    the vocabulary projection runs on all L positions. `gather_masked=True` is the stronger
    baseline NVIDIA's BERT uses: the encoder output is gathered at the masked positions first.
    bf16 (config.model.dtype) is torch.autocast on the forward pass; parameters stay fp32.
    `device`: "cpu", or "cuda" when ours runs on a GPU (then AdamW is PyTorch's fused kernel).
    """

    def __init__(
        self,
        config,
        host_batch: dict,
        params: dict,
        gather_masked: bool = False,
        device: str = "cpu",
    ):
        import torch
        import transformers

        from bert_jax.data.contract import features as F
        from bert_jax.hf import bert
        from bert_jax.model.encoder import BertConfig

        self.torch = torch
        model_config = BertConfig.from_config_dict(config.model)
        hf_config = transformers.BertConfig(
            **bert.hf_config_from_bert(model_config), attn_implementation="sdpa"
        )
        self.model = transformers.BertForPreTraining(hf_config)
        state = {
            k: torch.from_numpy(v) for k, v in bert.to_hf_state_dict(params, model_config).items()
        }
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        if unexpected or any(not k.startswith("cls.predictions.decoder") for k in missing):
            raise RuntimeError(f"weights did not map: missing {missing}, unexpected {unexpected}")
        self.device = device
        self.model.to(device).train()
        self.optimizer = torch_adamw(torch, self.model, config.optim, fused=device == "cuda")
        self.max_grad_norm = config.optim.max_grad_norm
        self.autocast = config.model.dtype == "bfloat16"
        self.gather_masked = gather_masked

        def tensor(array):
            return torch_ids(torch, array, device)

        self.positions = tensor(host_batch[F.MASKED_LM_POSITIONS])
        self.masked_ids = tensor(host_batch[F.MASKED_LM_IDS])
        self.inputs = {
            "input_ids": tensor(host_batch[F.INPUT_IDS]),
            "attention_mask": tensor(host_batch[F.INPUT_MASK]),
            "token_type_ids": tensor(host_batch[F.SEGMENT_IDS]),
            "labels": tensor(mlm_labels(host_batch)),
            "next_sentence_label": tensor(host_batch[F.NEXT_SENTENCE_LABELS]),
        }
        self.run(1)  # oneDNN primitive creation, allocator warm-up, optimizer state

    def _step(self):
        torch = self.torch
        with torch.autocast(self.device, dtype=torch.bfloat16, enabled=self.autocast):
            if self.gather_masked:
                loss = self._gathered_loss()
            else:
                loss = self.model(**self.inputs).loss
        loss.backward()
        torch_update(torch, self.model, self.optimizer, self.max_grad_norm)
        return loss

    def _gathered_loss(self):
        torch, m, x = self.torch, self.model, self.inputs
        sequence, pooled = m.bert(
            x["input_ids"],
            attention_mask=x["attention_mask"],
            token_type_ids=x["token_type_ids"],
            return_dict=False,
        )[:2]
        index = self.positions[..., None].expand(-1, -1, sequence.shape[-1])
        gathered = torch.gather(sequence, 1, index)  # [batch, predictions, hidden]
        mlm_logits, nsp_logits = m.cls(gathered, pooled)
        ce = torch.nn.functional.cross_entropy
        return ce(mlm_logits.flatten(0, 1).float(), self.masked_ids.flatten()) + ce(
            nsp_logits.float(), x["next_sentence_label"]
        )

    def run(self, steps: int) -> tuple[float, float]:
        """(wall, CPU) seconds for `steps` steps; loss.item() waits for a GPU's queue."""
        cpu, start = time.process_time(), time.perf_counter()
        for _ in range(steps):
            loss = self._step()
        loss.item()
        return time.perf_counter() - start, time.process_time() - cpu


class TorchMatmulPeak:
    """matmul_peak.MatmulPeak's n x n x n matmul in PyTorch (torch.mm: MKL or oneDNN on x86,
    cuBLAS on a GPU).

    Timed in the same rounds as XLA's, it shows how fast each side's matrix library is on this
    machine: a train step's speed is bounded by its library's matmul rate.
    """

    def __init__(self, n: int = 2048, dtype: str = "float32", device: str = "cpu"):
        import torch

        self.torch, self.n = torch, n
        generator = torch.Generator().manual_seed(0)
        self.a = torch.randn(n, n, generator=generator).to(device, getattr(torch, dtype))
        self.b = torch.randn(n, n, generator=generator).to(device, getattr(torch, dtype))
        self.sync = torch.cuda.synchronize if device == "cuda" else lambda: None
        torch.mm(self.a, self.b)  # warm-up
        self.sync()

    def measure(self, repeats: int = 3) -> tuple[float, float]:
        """(FLOP/s, FLOP per CPU-second) of the fastest of `repeats` matmuls."""
        best, best_cpu = float("inf"), float("inf")
        for _ in range(repeats):
            cpu, start = time.process_time(), time.perf_counter()
            self.torch.mm(self.a, self.b)
            self.sync()
            wall = time.perf_counter() - start
            if wall < best:
                best, best_cpu = wall, time.process_time() - cpu
        flop = 2 * self.n**3
        return flop / best, flop / max(best_cpu, 1e-9)
