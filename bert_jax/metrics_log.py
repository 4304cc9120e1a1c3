"""Where training figures go: TensorBoard scalars, a JSONL log, and a progress line on stdout.

`<workdir>/metrics.jsonl` holds one JSON object per line: {"step": int, "split": "train" |
"eval", <name>: float, ...}. It is the file to plot from (examples/demo.py does). A resumed run
first drops the lines past the step it resumes from, so the log reads as one uninterrupted run.
TensorBoard event files go to `<workdir>/tensorboard` (tags `train/loss`, `eval/mlm_accuracy`...).
The names are losses.summarize's: `mlm_accuracy` is held-out accuracy at [MASK] positions,
`mlm_accuracy_kept` / `_random` / `_all` at the other kinds of masked position and over all.
Only process 0 writes; the other processes' writers do nothing.
"""

import json
import os
import sys
import time
from collections.abc import Mapping

JSONL_NAME = "metrics.jsonl"


def read_jsonl(path: str) -> list[dict]:
    """All records of a metrics.jsonl (a directory means its metrics.jsonl)."""
    if os.path.isdir(path):
        path = os.path.join(path, JSONL_NAME)
    with open(path) as f:
        lines = [line for line in f if line.strip()]
    records = []
    for i, line in enumerate(lines):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if i < len(lines) - 1:
                raise ValueError(f"{path}, line {i + 1}, is not JSON: {line[:80]!r}") from None
            # A process killed mid-write leaves half a last line; the resumed run rewrites the file.
    return records


class MetricsLog:
    """Appends scalars to metrics.jsonl and TensorBoard; a no-op unless `enabled`."""

    def __init__(self, workdir: str, enabled: bool = True, resume_step: int = 0):
        self.enabled = enabled
        self._tb = None
        if not enabled:
            return
        os.makedirs(workdir, exist_ok=True)
        self.path = os.path.join(workdir, JSONL_NAME)
        if os.path.exists(self.path):
            # Lines past resume_step come from steps the resumed run will redo.
            kept = [r for r in read_jsonl(self.path) if r.get("step", 0) <= resume_step]
            with open(self.path, "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in kept)
        self._file = open(self.path, "a")
        from tensorboardX import SummaryWriter  # imported here: workers that never log skip it

        self._tb = SummaryWriter(os.path.join(workdir, "tensorboard"))

    def write(self, step: int, split: str, scalars: Mapping[str, float]) -> None:
        if not self.enabled:
            return
        record = {"step": int(step), "split": split, **{k: float(v) for k, v in scalars.items()}}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        for name, value in scalars.items():
            self._tb.add_scalar(f"{split}/{name}", float(value), int(step))

    def close(self) -> None:
        if self.enabled:
            self._file.close()
            self._tb.close()


def format_duration(seconds: float) -> str:
    seconds = int(max(0, seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


# The figures shown in brackets after a headline one, so that it is never read alone: MLM
# accuracy at [MASK] positions beside the kept/random/all ones, NSP accuracy beside its chance line.
_BESIDE = {
    "mlm_accuracy": (
        ("kept", "mlm_accuracy_kept"),
        ("random", "mlm_accuracy_random"),
        ("all", "mlm_accuracy_all"),
    ),
    "nsp_accuracy": (("majority", "nsp_majority"),),
}


def _beside(name: str, scalars: Mapping[str, float]) -> str:
    shown = [
        f"{label} {scalars[key]:.3f}" for label, key in _BESIDE.get(name, ()) if key in scalars
    ]
    return f" ({', '.join(shown)})" if shown else ""


class Progress:
    """One line per logging interval on process 0: step, figures, speed and ETA."""

    def __init__(self, total_steps: int, start_step: int, enabled: bool = True, stream=None):
        self.total = total_steps
        self.enabled = enabled
        self.stream = stream or sys.stdout
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
                parts.append(f"{name} {scalars[name]:{fmt}}{_beside(name, scalars)}")
        if "tokens_per_sec" in scalars:
            parts.append(f"{scalars['tokens_per_sec'] / 1000:.1f}k tok/s")
        if "examples_per_sec" in scalars:  # fine-tuning
            parts.append(f"{scalars['examples_per_sec']:.1f} ex/s")
        if eta and self._start_time is not None and step > self._start_step:
            rate = (time.time() - self._start_time) / (step - self._start_step)
            parts.append(f"ETA {format_duration(rate * (self.total - step))}")
        return "  ".join(parts)

    def report(
        self, step: int, scalars: Mapping[str, float], prefix: str = "", eta: bool = True
    ) -> None:
        if self.enabled:
            print(prefix + self.line(step, scalars, eta), file=self.stream, flush=True)
