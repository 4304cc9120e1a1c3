"""Where training figures go: TensorBoard, `<workdir>/metrics.jsonl` and a progress line; only
process 0 writes. In a bucket (no append) the log is published whole every PUBLISH_EVERY_S at
most and at every checkpoint (`flush`). docs/training.md, "The workdir".
"""

import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping

from bert_jax import cli, storage

JSONL_NAME = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"
PUBLISH_EVERY_S = 30.0  # a workdir in a bucket: the longest the published log lags behind


def read_jsonl(path: str) -> list[dict]:
    """All records of a metrics.jsonl (or a directory's), local or in a bucket."""
    if storage.isdir(path):
        path = storage.join(path, JSONL_NAME)
    lines = [line for line in storage.read_text(path).splitlines() if line.strip()]
    records = []
    for i, line in enumerate(lines):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if i < len(lines) - 1:
                raise cli.UserError(f"{path}, line {i + 1}, is not JSON: {line[:80]!r}") from None
            # A process killed mid-write leaves half a last line; the resumed run rewrites the file.
    return records


# What tensorboardX imports if installed, for features we never use (torch tensors, its own
# s3:// and gs:// writes); each is optional there.
_HIDDEN_FROM_TENSORBOARDX = ("torch", "boto3", "google.cloud.storage")


def _summary_writer_class():
    """SummaryWriter, imported without _HIDDEN_FROM_TENSORBOARDX: seconds off each start."""
    hidden = [name for name in _HIDDEN_FROM_TENSORBOARDX if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # `import name` raises ImportError, which tensorboardX expects
    try:
        from tensorboardX import SummaryWriter
    finally:
        for name in hidden:
            del sys.modules[name]
    return SummaryWriter


class MetricsLog:
    """Appends scalars to metrics.jsonl and TensorBoard; a no-op unless `enabled`."""

    def __init__(
        self,
        workdir: str,
        enabled: bool = True,
        resume_step: int = 0,
        publish_every_s: float = PUBLISH_EVERY_S,
    ):
        self.enabled = enabled
        self._tb = None
        if not enabled:
            return
        storage.makedirs(workdir)
        self.workdir = workdir
        self.path = storage.join(workdir, JSONL_NAME)
        self._remote = storage.is_url(workdir)
        kept, existed = [], storage.exists(self.path)
        if existed:
            # Lines past resume_step come from steps the resumed run will redo.
            kept = [r for r in read_jsonl(self.path) if r.get("step", 0) <= resume_step]
        self._evaluated = {r.get("step") for r in kept if r.get("split") != "train"}
        if self._remote:
            self._lines = [json.dumps(r) + "\n" for r in kept]
            self._every, self._published = publish_every_s, time.monotonic()
            self._staging = tempfile.mkdtemp(prefix="bert_jax-tensorboard-")
            tb_dir = self._staging
            if existed:
                self.flush()  # the dropped lines go now, before any new step is logged
        else:
            if existed:
                with open(self.path, "w") as f:
                    f.writelines(json.dumps(r) + "\n" for r in kept)
            self._file = open(self.path, "a")
            tb_dir = os.path.join(workdir, TENSORBOARD_DIR)
        SummaryWriter = _summary_writer_class()  # imported here: workers that never log skip it
        # In a bucket each run's events file is uploaded whole under its own name: the suffix
        # keeps two writers started within one second (the name's timestamp) apart.
        suffix = f".{uuid.uuid4().hex[:8]}" if self._remote else ""
        self._tb = SummaryWriter(tb_dir, filename_suffix=suffix)

    def evaluated(self, step: int) -> bool:
        """Whether the log kept from before a resume holds an eval at `step`."""
        return self.enabled and step in self._evaluated

    def write(self, step: int, split: str, scalars: Mapping[str, float]) -> None:
        if not self.enabled:
            return
        record = {"step": int(step), "split": split, **{k: float(v) for k, v in scalars.items()}}
        for name, value in scalars.items():
            self._tb.add_scalar(f"{split}/{name}", float(value), int(step))
        if not self._remote:
            with cli.disk_full_is_oserror(self.path):  # a write names no file: this one
                self._file.write(json.dumps(record) + "\n")
                self._file.flush()
            return
        self._lines.append(json.dumps(record) + "\n")
        if time.monotonic() - self._published >= self._every:
            self.flush()

    def flush(self) -> None:
        """Publishes the log to a bucket (local files are written as they go)."""
        if not (self.enabled and self._remote):
            return
        storage.write_text(self.path, "".join(self._lines))
        if self._tb is not None:
            self._tb.flush()
            for name in os.listdir(self._staging):
                with open(os.path.join(self._staging, name), "rb") as f:
                    storage.write_bytes(storage.join(self.workdir, TENSORBOARD_DIR, name), f.read())
        self._published = time.monotonic()

    def close(self) -> None:
        if not self.enabled:
            return
        if self._remote:
            self._tb.close()
            self.flush()
            shutil.rmtree(self._staging, ignore_errors=True)
        else:
            with cli.disk_full_is_oserror(self.path):
                self._file.close()
            self._tb.close()


# The figures shown in brackets after a headline one, so that it is never read alone.
_BESIDE = {
    "mlm_accuracy": (
        ("kept", "mlm_accuracy_kept"),
        ("random", "mlm_accuracy_random"),
        ("all", "mlm_accuracy_all"),
    ),
    "nsp_accuracy": (("majority", "nsp_majority"),),
}


class Progress:
    """One line per logging interval on process 0: step, figures, speed and ETA."""

    def __init__(self, total_steps: int, start_step: int, enabled: bool = True):
        self.total = total_steps
        self.enabled = enabled
        self._start_step = start_step
        self._start_time = None

    def start(self, step: int) -> None:
        """Marks the end of the first (compiling) step: ETA counts from here."""
        self._start_step, self._start_time = step, time.time()

    def line(self, step: int, scalars: Mapping[str, float], eta: bool = True) -> str:
        parts = [f"step {step}/{self.total} ({100 * step / self.total:.0f}%)"]
        for name, fmt in (
            ("loss", ".3f"),
            ("mlm_accuracy", ".3f"),
            ("mlm_accuracy_all", ".3f"),  # alone when the kinds are unknown (no [MASK] id)
            ("nsp_accuracy", ".3f"),
            ("learning_rate", ".2e"),
            ("grad_norm", ".2f"),
        ):
            if name in scalars and not (name == "mlm_accuracy_all" and "mlm_accuracy" in scalars):
                beside = [f"{b} {scalars[k]:.3f}" for b, k in _BESIDE.get(name, ()) if k in scalars]
                beside = f" ({', '.join(beside)})" if beside else ""
                parts.append(f"{name} {scalars[name]:{fmt}}{beside}")
        if "tokens_per_sec" in scalars:
            parts.append(f"{scalars['tokens_per_sec'] / 1000:.1f}k tok/s")
        if "examples_per_sec" in scalars:  # fine-tuning
            parts.append(f"{scalars['examples_per_sec']:.1f} ex/s")
        if eta and self._start_time is not None and step > self._start_step:
            rate = (time.time() - self._start_time) / (step - self._start_step)
            h, s = divmod(int(max(0, rate * (self.total - step))), 3600)
            m, s = divmod(s, 60)
            parts.append(f"ETA {h}h{m:02d}m" if h else f"ETA {m}m{s:02d}s")
        return "  ".join(parts)

    def report(
        self, step: int, scalars: Mapping[str, float], prefix: str = "", eta: bool = True
    ) -> None:
        if self.enabled:
            print(prefix + self.line(step, scalars, eta), flush=True)
