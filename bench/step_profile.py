r"""Where the train step's time goes on the CPU: per-HLO-op times from XLA:CPU's profiler, by kind.

  python -m bench.step_profile --model=base                 # BERT-Base, L=128, batch 8, fp32
  python -m bench.step_profile --model=mini --dtype=bfloat16 --top=25

XLA:CPU's thunk runtime (JAX 0.10) emits a profiler event per executed HLO instruction (a fusion,
a YNNPACK/oneDNN library call, a copy, a while loop's body ops), named as the instruction in the
compiled module, on the thread that ran it. The script runs bench/runners.py's real train step
under jax.profiler.trace for --steps steps, reads the trace (jax.profiler.ProfileData), takes
each event's self time (its duration less the events nested inside it on the same thread: a
while or conditional thunk holds its body's), and looks every instruction up in the compiled
HLO to sort it into a kind (`classify`): what it computes (a dot, an erf, a gather, the dropout
hash's multiply constants) and which of the model's named scopes it came from (op_name
metadata: 'optimizer', 'grad_norm', 'attention', ...).

Times are thread time summed over XLA's worker threads (on N cores a step's wall time is at
least their sum / N); "idle" is N x wall less that sum: threads waiting on each other or on
other processes. Profiling adds a little to every op (a few microseconds of event recording);
the shares, not the absolute times, are what to read. Use --xla_flags-style experiments by
setting XLA_FLAGS in the environment; the header prints them.
"""

import collections
import glob
import json
import os
import re
import shutil
import tempfile

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("model", "base", "tiny, mini, base or large.")
flags.DEFINE_integer("seq_len", 128, "Sequence length.")
flags.DEFINE_string("dtype", "float32", "Computation dtype: float32 or bfloat16.")
flags.DEFINE_integer("batch_size", 0, "0: runners.DEFAULT_BATCH.")
flags.DEFINE_integer("steps", 3, "Steps traced (after two warm ones).")
flags.DEFINE_bool("scan_layers", False, "config.model.scan_layers.")
flags.DEFINE_integer("top", 15, "Also list the N non-matmul instructions with the most time.")
flags.DEFINE_string("json_out", "", "Append the figures here as a JSON line.")
flags.DEFINE_string("hlo_out", "", "Write the compiled step's HLO text here.")

# Kinds, in the order `classify` tries them (the first that matches wins) and the table lists them.
KINDS = (
    "matmul",
    "dropout mask (hash)",
    "threefry (key splits)",
    "optimizer (AdamW, clip)",
    "gradient norm",
    "gather / scatter",
    "QKV kernel stack / unstack",
    "MLM / NSP loss",
    "MLM head, not matmul",
    "GELU (FFN)",
    "softmax",
    "attention transposes",
    "layer norm, residual",
    "embeddings, not gather",
    "transpose / copy",
    "other",
    "control flow, runtime",
)
# MurmurHash3's finalizer multipliers (bert_jax/model/dropout.py's _mix32), as HLO prints uint32s.
_HASH_CONSTANTS = ("2246822507", "3266489909")
_INSTR = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = (.*?) ([a-z][a-z0-9\-]*)\((.*)$")
_CALLS = re.compile(r"(?:calls|body|condition|to_apply|branch_computations)=\{?([%\w.,\- ]+)\}?")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_COMP = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$")


class Hlo:
    """The compiled module's instructions: name -> (opcode, op_name, called computations), and per
    computation the opcodes and text it holds, transitively."""

    def __init__(self, text: str):
        self.instr: dict[str, tuple[str, str, list[str]]] = {}
        self.comp_lines: dict[str, list[str]] = collections.defaultdict(list)
        comp = None
        for line in text.splitlines():
            m = _COMP.match(line)
            if m and " = " not in line.split("{")[0]:
                comp = m.group(1)
                continue
            m = _INSTR.match(line)
            if not m or comp is None:
                continue
            name, _, opcode, rest = m.groups()
            calls = []
            for c in _CALLS.findall(rest):
                calls += [x.strip().lstrip("%") for x in c.split(",") if x.strip()]
            op_name = _OP_NAME.search(rest)
            self.instr[name] = (opcode, op_name.group(1) if op_name else "", calls)
            self.comp_lines[comp].append(line)
        self._contents: dict[str, str] = {}

    def contents(self, name: str) -> str:
        """The text of an instruction and of everything it calls, transitively."""
        if name in self._contents:
            return self._contents[name]
        self._contents[name] = ""  # cycles cannot occur; this stops re-entry anyway
        _, _, calls = self.instr[name]
        parts = []
        for comp in calls:
            for line in self.comp_lines.get(comp, ()):
                m = _INSTR.match(line)
                parts.append(line)
                if m and m.group(1) != name and m.group(1) in self.instr:
                    parts.append(self.contents(m.group(1)))
        self._contents[name] = "\n".join(parts)
        return self._contents[name]

    def classify(self, name: str) -> str:
        """The kind (KINDS) of a compiled instruction."""
        if name not in self.instr:
            return "control flow, runtime"
        opcode, op_name, calls = self.instr[name]
        body = self.contents(name) if calls else ""
        ops = set(re.findall(r" ([a-z][a-z0-9\-]*)\(", body)) | {opcode}
        scope = op_name + " " + " ".join(_OP_NAME.findall(body))
        if opcode in ("while", "conditional", "call"):
            # Their own time is the loop's bookkeeping; the body's ops carry theirs.
            return "threefry (key splits)" if "threefry" in scope else "control flow, runtime"
        if ops & {"dot", "convolution"} or ("onednn" in body.lower() and "matmul" in body.lower()):
            return "matmul"
        if any(c in body for c in _HASH_CONSTANTS):
            return "dropout mask (hash)"
        if "threefry" in scope:
            return "threefry (key splits)"
        if "/optimizer/" in scope:
            return "optimizer (AdamW, clip)"
        if "grad_norm/" in scope:
            return "gradient norm"
        if ops & {"gather", "scatter", "dynamic-slice", "dynamic-update-slice"}:
            return "gather / scatter"
        if re.search(r"\(attention\)\)?/(un)?stack", scope):
            return "QKV kernel stack / unstack"
        if "mlm_loss" in scope or "nsp_loss" in scope:
            return "MLM / NSP loss"
        if "mlm_head" in scope or "nsp_head" in scope:
            return "MLM head, not matmul"
        if "erf" in ops or "(ffn)" in scope:
            return "GELU (FFN)"
        if "(attention)" in scope:
            if ops & {"exponential", "reduce"}:
                return "softmax"
            return "attention transposes"
        if "norm_residual" in scope or "rsqrt" in ops:
            return "layer norm, residual"
        if "(embeddings)" in scope:
            return "embeddings, not gather"
        if ops & {"copy", "transpose", "concatenate", "pad", "slice"}:
            return "transpose / copy"
        return "other"


def self_times(profile_path: str) -> tuple[dict[str, float], int]:
    """(instruction name -> summed self time in seconds over XLA's threads, thread count)."""
    from jax.profiler import ProfileData

    data = ProfileData.from_file(profile_path)
    totals: dict[str, float] = collections.defaultdict(float)
    threads = 0
    for plane in data.planes:
        if plane.name != "/host:CPU":
            continue
        for line in plane.lines:
            if line.name.startswith("tf_XLA"):
                threads += 1
                _add_self_times(line.events, totals)
    return totals, threads


def _add_self_times(events, totals: dict[str, float]) -> None:
    """Adds each event's self time (its duration less that of the events nested in it) to
    totals[its name]; events of one thread nest or follow each other."""
    spans = sorted(
        ((e.start_ns, e.duration_ns, e.name) for e in events), key=lambda e: (e[0], -e[1])
    )
    stack: list[list] = []  # open events: [end, name, time of nested events, duration]

    def close(until):
        while stack and stack[-1][0] <= until:
            _, name, nested, duration = stack.pop()
            totals[name] += (duration - nested) / 1e9

    for start, duration, name in spans:
        close(start)
        if stack:
            stack[-1][2] += duration
        stack.append([start + duration, name, 0, duration])
    close(float("inf"))


def profile(
    model: str, seq_len: int, dtype: str, batch: int, steps: int, scan: bool, hlo_out: str = ""
) -> dict:
    import jax

    from bench import runners
    from bert_jax.model.encoder import BertConfig

    num_predictions = 20 if seq_len <= 128 else 80
    batch = batch or runners.DEFAULT_BATCH[(model, seq_len)]
    config = runners.make_config(model, seq_len, num_predictions, batch, dtype)
    config.model.scan_layers = scan
    model_config = BertConfig.from_config_dict(config.model)
    host_batch = runners.synthetic_batch(batch, seq_len, num_predictions, model_config.vocab_size)
    runner = runners.OursRunner(config, host_batch)
    hlo_text = runner.step_fn.as_text()
    if hlo_out:
        with open(hlo_out, "w") as f:
            f.write(hlo_text)
    hlo = Hlo(hlo_text)
    runner.run(2)
    out_dir = tempfile.mkdtemp(prefix="step_profile_")
    try:
        with jax.profiler.trace(out_dir):
            wall, cpu = runner.run(steps)
        (path,) = glob.glob(os.path.join(out_dir, "**", "*.xplane.pb"), recursive=True)
        totals, threads = self_times(path)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    by_kind: dict[str, float] = collections.defaultdict(float)
    waiting = 0.0
    for name, seconds in totals.items():
        if name in hlo.instr:
            by_kind[hlo.classify(name)] += seconds
        elif "wait" in name.lower():  # a thread blocked on others: not work
            waiting += seconds
        else:  # the thunk executor's own events, locks
            by_kind["control flow, runtime"] += seconds
    cores = len(os.sched_getaffinity(0))
    busy = sum(by_kind.values())
    return {
        "model": model,
        "seq_len": seq_len,
        "dtype": dtype,
        "batch": batch,
        "scan_layers": scan,
        "steps": steps,
        "cores": cores,
        "threads": threads,
        "wall_s_per_step": wall / steps,
        "cpu_s_per_step": cpu / steps,
        "busy_s_per_step": busy / steps,
        "waiting_s_per_step": waiting / steps,
        "kinds_s_per_step": {k: by_kind.get(k, 0.0) / steps for k in KINDS},
        "top": [
            (n, s / steps, hlo.classify(n), hlo.instr.get(n, ("", "", []))[1])
            for n, s in sorted(totals.items(), key=lambda kv: -kv[1])
            if n in hlo.instr
        ],
        "load_average": os.getloadavg()[0],
    }


def _print(r: dict, top: int) -> None:
    from bench import runners

    print(runners.cpu_summary(), flush=True)
    print(
        f"{r['model']} L={r['seq_len']} {r['dtype']} batch {r['batch']}"
        f"{' scan_layers' if r['scan_layers'] else ''}: {r['wall_s_per_step'] * 1e3:.0f} ms/step "
        f"wall, {r['cpu_s_per_step'] * 1e3:.0f} ms CPU, {r['busy_s_per_step'] * 1e3:.0f} ms in "
        f"XLA's ops on {r['threads']} threads ({r['cores']} cores, load average "
        f"{r['load_average']:.1f})"
    )
    busy = r["busy_s_per_step"]
    non_matmul = busy - r["kinds_s_per_step"]["matmul"]
    print(f"  {'kind':<26} {'ms/step':>9} {'share':>7} {'of non-matmul':>14}")
    for kind, s in r["kinds_s_per_step"].items():
        share = f"{100 * s / non_matmul:13.1f}%" if kind != "matmul" and non_matmul else ""
        print(f"  {kind:<26} {s * 1e3:9.1f} {100 * s / busy:6.1f}% {share}")
    print(f"  {'all ops':<26} {busy * 1e3:9.1f}")
    if top:
        print(f"  top {top} instructions outside the matmuls (ms/step, kind, op_name):")
        rows = [t for t in r["top"] if t[2] != "matmul"]
        for name, s, kind, op_name in rows[:top]:
            print(f"    {s * 1e3:8.2f}  {name:<34} {kind:<24} {op_name[-70:]}")


def main(argv):
    del argv
    from bert_jax import runtime

    runtime.configure_for_cpu_training()  # as the trainer does, before JAX starts
    r = profile(
        FLAGS.model,
        FLAGS.seq_len,
        FLAGS.dtype,
        FLAGS.batch_size,
        FLAGS.steps,
        FLAGS.scan_layers,
        FLAGS.hlo_out,
    )
    if FLAGS.json_out:
        with open(FLAGS.json_out, "a") as f:
            f.write(json.dumps(r) + "\n")
    _print(r, FLAGS.top)


if __name__ == "__main__":
    app.run(main)
