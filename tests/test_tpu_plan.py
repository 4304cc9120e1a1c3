"""The TPU planner (bench/aot_compile.py): a tiny BERT compiled by the TPU compiler for two small
slices, no TPU needed, and the trainer's mesh on TPU slices (ICI rings, data across slices).

The compiles run in subprocesses: the planner starts libtpu's compiler there and this process stays
on the CPU backend (conftest.py). Skipped where libtpu is not installed (the `tpu` extra).
"""

import importlib.util
import itertools
import json
import subprocess
import sys

import pytest
from conftest import REPO

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("libtpu") is None,
    reason="libtpu is not installed (pip install -e '.[tpu]', which make install does)",
)
GIB = 1024**3


def _plan(tmp_path, name: str, *flags: str) -> list[dict]:
    out = tmp_path / f"{name}.json"
    run = subprocess.run(
        [sys.executable, "-m", "bench.aot_compile", "--config=configs/tiny.py", *flags]
        + [f"--json_out={out}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "compiled by the TPU compiler" in run.stdout
    return json.loads(out.read_text())


def _by(plans, **want):
    (match,) = [
        p
        for p in plans
        if all(
            ("x".join(map(str, p["mesh"].values())) if k == "mesh" else p[k]) == v
            for k, v in want.items()
        )
    ]
    return match


def test_v5e_plans_grow_with_the_batch_and_fsdp_splits_the_state(tmp_path):
    plans = _plan(
        tmp_path,
        "v5e",
        "--topology=v5e:2x2",
        "--meshes=4x1x1,2x2x1",
        "--global_batch_sizes=8,64",
        "--steps=train",
    )
    assert len(plans) == 4
    for p in plans:
        assert p["chips"] == 4 and p["hbm_bytes"] == 16 * GIB  # v5e, from Google's docs
        # The donated state is updated in place, and the state is the bulk of the arguments.
        assert p["alias_bytes"] >= 0.99 * p["state_bytes"]
        assert p["state_bytes"] <= p["argument_bytes"]
        assert p["fits"] and p["peak_bytes"] <= p["hbm_bytes"]
        assert p["step_source"] in ("compiler", "roofline") and p["step_s"] > 0
        assert p["seq_per_s"] == pytest.approx(p["global_batch"] / p["step_s"])
        assert 0 < p["mfu"] < 1
    for mesh in ("4x1x1", "2x2x1"):
        small, large = _by(plans, mesh=mesh, global_batch=8), _by(plans, mesh=mesh, global_batch=64)
        # 8x the rows: more activations and more FLOPs per chip, the same state.
        assert large["temp_bytes"] > small["temp_bytes"]
        assert large["peak_bytes"] > small["peak_bytes"]
        assert 4 < large["cost"]["flops"] / small["cost"]["flops"] <= 8.5
        assert large["state_bytes"] == small["state_bytes"]
    data, fsdp = _by(plans, mesh="4x1x1", global_batch=8), _by(plans, mesh="2x2x1", global_batch=8)
    # fsdp=2 holds half of every split weight and Adam moment; LayerNorm parameters and biases
    # stay whole (a larger share of a tiny model than of BERT-Base).
    assert 1.8 < data["state_bytes"] / fsdp["state_bytes"] <= 2
    assert data["state_bytes"] == data["total_state_bytes"]  # data parallelism replicates
    # The data-parallel step all-reduces the gradients: 2(n-1)/n of them per chip, at least the
    # bf16 size of the split parameters; fsdp gathers weights instead.
    assert data["ici_bytes"]["all-reduce"] > 0.5 * data["total_state_bytes"] / 3 / 2
    assert fsdp["ici_bytes"].get("all-gather", 0) > 0


def test_v4_megacore_slice_compiles_all_three_steps_and_marks_what_does_not_fit(tmp_path):
    plans = _plan(
        tmp_path,
        "v4",
        "--topology=v4:2x2x1",
        "--meshes=4x1x1",
        "--global_batch_sizes=8",
        "--steps=train,eval,finetune",
    )
    assert [p["step"] for p in plans] == ["train", "eval", "finetune"]
    for p in plans:
        assert p["chips"] == 4  # one JAX device per chip (megacore), as a v4 VM shows them
        assert p["hbm_bytes"] == 32 * GIB and p["fits"]
    train, evaluate, finetune = plans
    assert evaluate["cost"]["flops"] < train["cost"]["flops"]  # forward only
    assert evaluate["state_bytes"] < train["state_bytes"] / 2  # parameters, no Adam moments
    assert finetune["global_batch"] == 32  # configs/finetune/sst2.py's batch
    # 40M vocabulary rows of 32: parameters and Adam moments 14.3 GiB replicated on each chip,
    # plus the MLM logits: past a v5e's 16 GiB, marked, and no flags offered for it.
    big = _plan(
        tmp_path,
        "big",
        "--topology=v5e-4",
        "--meshes=4x1x1",
        "--global_batch_sizes=4",
        "--steps=train",
        "--vocab_size=40000000",
    )
    (p,) = big
    assert p["peak_bytes"] > p["hbm_bytes"] and not p["fits"]


def test_trainer_mesh_follows_ici_rings_and_puts_data_across_slices():
    """No compile: the slices' device descriptions from libtpu, in a subprocess."""
    code = """
import json
from bench import tpu_chips
from bert_jax import sharding
out = {}
one = tpu_chips.devices(tpu_chips.parse("v5e:4x4"))
mesh = sharding.make_mesh(4, 4, 1, one)
out["rows"] = [[d.coords[:2] for d in row] for row in mesh.devices[:, :, 0]]
two = tpu_chips.devices(tpu_chips.parse("v5e:2x2", num_slices=2))
mesh = sharding.make_mesh(4, 2, 1, two)
out["slices"] = [[d.slice_index for d in row] for row in mesh.devices[:, :, 0]]
out["num_slices"] = sharding.num_slices(two)
try:
    sharding.make_mesh(1, 8, 1, two)
except ValueError as e:
    out["error"] = str(e)
print(json.dumps(out))
"""
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    # 4 x 4 chips: each fsdp group (a row) is a physical ring of neighbours, one ICI hop apart.
    for row in out["rows"]:
        for a, b in itertools.pairwise(row):
            assert abs(a[0] - b[0]) + abs(a[1] - b[1]) == 1
    # Two slices: every fsdp group lies in one slice; data parallelism crosses them.
    assert out["num_slices"] == 2
    assert all(len(set(row)) == 1 for row in out["slices"])
    assert {row[0] for row in out["slices"]} == {0, 1}
    assert "multiple of the slice count" in out["error"]
