"""bench/step_profile.py's pieces: events of a real XLA:CPU trace are the compiled module's
instructions, each sorted into its kind; nested events count once. And bench/runners.py's
variant specs (train_bench --variant)."""

import collections
import glob
import os
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import pytest

from bench import runners, step_profile
from bert_jax.model import dropout


def _events(*spans):
    return [SimpleNamespace(start_ns=s, duration_ns=d, name=n) for s, d, n in spans]


def test_self_time_is_duration_less_nested_events():
    totals = collections.defaultdict(float)
    # outer [0, 100) holds a [10, 40) and b [50, 60); c follows; a nested in a nested one.
    step_profile._add_self_times(
        _events((0, 100, "outer"), (10, 30, "a"), (15, 5, "inner"), (50, 10, "b"), (120, 7, "c")),
        totals,
    )
    assert dict(totals) == pytest.approx(
        {"outer": 60e-9, "a": 25e-9, "inner": 5e-9, "b": 10e-9, "c": 7e-9}
    )


def test_trace_events_are_instructions_sorted_into_kinds(tmp_path):
    """A matmul and a dropout traced on the CPU: their events are named as instructions of the
    compiled module, and classify tells the matmul from the dropout mask's hash."""

    def fn(x, w, key):
        return dropout.dropout(x @ w, 0.1, key)

    x = jnp.ones((64, 128))
    compiled = jax.jit(fn).lower(x, x.T, jax.random.PRNGKey(0)).compile()
    hlo = step_profile.Hlo(compiled.as_text())
    compiled(x, x.T, jax.random.PRNGKey(0)).block_until_ready()
    with jax.profiler.trace(str(tmp_path)):
        compiled(x, x.T, jax.random.PRNGKey(0)).block_until_ready()
    (path,) = glob.glob(os.path.join(tmp_path, "**", "*.xplane.pb"), recursive=True)
    totals, threads = step_profile.self_times(path)
    assert threads >= 1
    kinds = {hlo.classify(name) for name in totals if name in hlo.instr}
    assert {"matmul", "dropout mask (hash)"} <= kinds


def test_variant_specs():
    name, overrides, options, patches = runners.parse_variant(
        "v:model.scan_layers=true;xla_cpu_use_onednn=false;patch=gelu_erfc;optim.b1=0.8"
    )
    assert name == "v"
    assert overrides == {"model.scan_layers": True, "optim.b1": 0.8}
    assert options == {"xla_cpu_use_onednn": False}
    assert patches == ["gelu_erfc"]
    for bad in ("no_colon", "v:scan_layers", "v:model.scan_layers"):
        with pytest.raises(ValueError):
            runners.parse_variant(bad)
