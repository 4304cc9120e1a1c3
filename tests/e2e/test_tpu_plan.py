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

import numpy as np
import pytest

from bench import tpu_chips, tpu_plan
from support.golden import REPO

needs_libtpu = pytest.mark.skipif(
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
        timeout=1800,  # minutes on a loaded machine; seconds per plan when idle
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


@needs_libtpu
def test_v5e_plans_grow_with_the_batch_and_fsdp_splits_the_state(tmp_path):
    data = "--topology=v5e:2x2", "--steps=train"
    small, large = _plan(tmp_path, "d", *data, "--meshes=4x1x1", "--global_batch_sizes=8,64")
    (fsdp,) = _plan(tmp_path, "f", *data, "--meshes=2x2x1", "--global_batch_sizes=8")
    for p in (small, large, fsdp):
        assert p["chips"] == 4 and p["hbm_bytes"] == 16 * GIB  # v5e, from Google's docs
        # The donated state is updated in place, and the state is the bulk of the arguments.
        assert p["alias_bytes"] >= 0.99 * p["state_bytes"]
        assert p["state_bytes"] <= p["argument_bytes"]
        assert p["fits"] and p["peak_bytes"] <= p["hbm_bytes"]
        assert p["step_source"] in ("compiler", "roofline") and p["step_s"] > 0
        assert p["seq_per_s"] == pytest.approx(p["global_batch"] / p["step_s"])
        assert 0 < p["mfu"] < 1
    # 8x the rows: more activations and more FLOPs per chip, the same state.
    assert large["temp_bytes"] > small["temp_bytes"]
    assert large["peak_bytes"] > small["peak_bytes"]
    assert 4 < large["cost"]["flops"] / small["cost"]["flops"] <= 8.5
    assert large["state_bytes"] == small["state_bytes"]
    # fsdp=2 holds half of every split weight and Adam moment; LayerNorm parameters and biases
    # stay whole (a larger share of a tiny model than of BERT-Base).
    assert 1.8 < small["state_bytes"] / fsdp["state_bytes"] <= 2
    assert small["state_bytes"] == small["total_state_bytes"]  # data parallelism replicates
    # The data-parallel step all-reduces the gradients: 2(n-1)/n of them per chip, at least the
    # bf16 size of the parameters (a third of the state, in float32); fsdp gathers weights.
    assert small["ici_bytes"]["all-reduce"] > small["total_state_bytes"] / 3 / 2
    assert fsdp["ici_bytes"].get("all-gather", 0) > 0


@needs_libtpu
def test_v4_megacore_slice_compiles_eval_and_finetuning_and_a_plan_past_hbm_is_marked(tmp_path):
    plans = _plan(
        tmp_path,
        "v4",
        "--topology=v4:2x2x1",
        "--meshes=4x1x1",
        "--global_batch_sizes=8",
        "--steps=eval,finetune",
    )
    assert [p["step"] for p in plans] == ["eval", "finetune"]
    for p in plans:
        assert p["chips"] == 4  # one JAX device per chip (megacore), as a v4 VM shows them
        assert p["hbm_bytes"] == 32 * GIB and p["fits"]
    evaluate, finetune = plans
    assert evaluate["alias_bytes"] == 0  # eval donates nothing
    # Parameters only, no Adam moments; fine-tuning trains them all, with moments.
    assert evaluate["state_bytes"] < finetune["state_bytes"] / 2
    assert finetune["global_batch"] == 32  # configs/finetune/sst2.py's batch
    assert finetune["alias_bytes"] >= 0.99 * finetune["state_bytes"]  # the state, donated
    # 40M vocabulary rows of 32: parameters and Adam moments 14.3 GiB replicated on each chip,
    # plus the MLM logits: past a v5e's 16 GiB, marked, and no flags offered for it.
    (big,) = _plan(
        tmp_path,
        "big",
        "--topology=v5e-4",
        "--meshes=4x1x1",
        "--global_batch_sizes=4",
        "--steps=train",
        "--vocab_size=40000000",
    )
    assert big["peak_bytes"] > big["hbm_bytes"] and not big["fits"]


@needs_libtpu
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


def test_replica_groups_read_the_same_in_all_three_spellings():
    """XLA writes a collective's groups as lists, as an iota (optionally transposed) or over a
    named mesh; each spelling of one grouping reads back as the same groups."""
    ids = np.arange(8).reshape(2, 4)  # a 2 x 4 mesh, devices in order
    along_rows = [[0, 1, 2, 3], [4, 5, 6, 7]]  # groups over the second axis
    along_cols = [[0, 4], [1, 5], [2, 6], [3, 7]]  # groups over the first
    read = tpu_plan.replica_groups
    assert read("replica_groups={{0,1,2,3},{4,5,6,7}}, x", 8) == along_rows
    assert read("replica_groups=[2,4]<=[8], x", 8) == along_rows
    assert read("replica_groups=mesh['a'=2,'b'=4] {'b'}, x", 8) == along_rows
    assert read("replica_groups={{0,4},{1,5},{2,6},{3,7}}", 8) == along_cols
    assert read("replica_groups=[4,2]<=[2,4]T(1,0), x", 8) == along_cols
    assert read("replica_groups=mesh['a'=2,'b'=4] {'a'}, x", 8) == along_cols
    assert read("replica_groups=mesh['a'=2,'b'=4] {'a','b'}", 8) == [ids.ravel().tolist()]
    assert read("replica_groups={}, to_apply=%add", 8) == [list(range(8))]
    assert read("channel_id=1, to_apply=%add", 8) is None


def test_collective_bytes_follow_ring_algorithms_and_split_ici_from_dcn():
    hlo = "\n".join(
        [
            # 4 MB of bf16 gradients all-reduced over 4 devices: 2 x 3/4 of it per device.
            "  %ar = bf16[1024,2048]{1,0} all-reduce(%g), replica_groups={{0,1,2,3}}, x",
            # A tuple (two buffers, one op) counts both.
            "  %ar2 = (f32[256]{0}, f32[256]{0}) all-reduce(%a, %b), replica_groups=[1,4]<=[4]",
            # all-gather's result is the whole buffer: 3/4 of it arrives from the others.
            "  %ag = f32[4,1024]{1,0} all-gather(%p), replica_groups=mesh['x'=4] {'x'}, x",
            # An async start holds operand and result: the larger buffer, once.
            "  %ags = (f32[1,1024]{1,0}, f32[4,1024]{1,0}) all-gather-start(%p), "
            "replica_groups={{0,1,2,3}}",
            "  %agd = f32[4,1024]{1,0} all-gather-done(%ags)",
            # reduce-scatter's result is 1/4 of the buffer.
            "  %rs = f32[256]{0} reduce-scatter(%q), replica_groups={{0,1,2,3}}, dimensions={0}",
            "  %cp = f32[100]{0} collective-permute(%r), source_target_pairs={{0,1},{1,0}}",
        ]
    )
    one_slice = tpu_plan.collectives(hlo, [0, 0, 0, 0])
    mb = 1024 * 2048 * 2
    assert one_slice.ici_bytes["all-reduce"] == pytest.approx(1.5 * (mb + 2 * 256 * 4))
    assert one_slice.ici_bytes["all-gather"] == pytest.approx(2 * 0.75 * 4 * 1024 * 4)
    assert one_slice.ici_bytes["reduce-scatter"] == pytest.approx(0.75 * 1024 * 4)
    assert one_slice.ici_bytes["collective-permute"] == 400
    assert one_slice.counts == {
        "all-reduce": 2,
        "all-gather": 2,
        "reduce-scatter": 1,
        "collective-permute": 1,
    }
    assert one_slice.dcn_bytes == 0 and one_slice.unread == 0
    # Devices 0, 1 on one slice and 2, 3 on another: each all-reduce runs within a slice (a ring
    # of 2) and across the 2 slices over DCN with half the buffer per chip.
    two = tpu_plan.collectives(hlo.splitlines()[0], [0, 0, 1, 1])
    assert two.ici_bytes["all-reduce"] == pytest.approx(2 * 0.5 * mb)
    assert two.dcn_bytes == pytest.approx(2 * 0.5 * mb / 2)
    # What libtpu writes for two slices: the all-reduce stays within the slice and its result
    # goes to the megascale runtime, which all-reduces it across slices over DCN.
    megascale = (
        "  %send = (f32[1,1,128]{2,1,0:T(1,128)}, u32[], token[]) send(%all-reduce.69, "
        "%after-all), channel_id=3, is_host_transfer=true, frontend_attributes={_xla_host_"
        'transfer_handler_name="xla_megascale_runtime",_xla_megascale_reduce_operation="SUM",'
        '_xla_megascale_transfer_type="ALL_REDUCE"}'
    )
    dcn = tpu_plan.collectives(megascale, [0, 0, 1, 1])
    assert dcn.dcn_bytes == pytest.approx(2 * 0.5 * 128 * 4) and dcn.ici_bytes == {}
    assert dcn.counts == {"DCN ALL_REDUCE": 1}


def test_roofline_is_used_only_where_the_compiler_gives_no_estimate():
    chip = tpu_chips.CHIPS["v5e"]
    none = tpu_plan.Collectives({"all-reduce": 0.0}, 0.0, {}, 0)
    cost = {"flops": 197e12, "bytes accessed": 819e9 / 2, "optimal_seconds": -3.0}
    est = tpu_plan.estimate(cost, none, chip)
    assert (est.source, est.bound, est.seconds) == ("roofline", "compute", pytest.approx(1.0))
    ici = tpu_plan.Collectives({"all-reduce": 400e9}, 3.125e9, {}, 0)
    est = tpu_plan.estimate(cost, ici, chip)
    # One direction of 400 GB/s bidirectional ICI: 2 s; DCN 3.125 GB/s per chip: 1 s.
    assert est.seconds == pytest.approx(1.0 + 2.0 + 1.0) and est.bound == "ICI"
    assert tpu_plan.estimate({**cost, "optimal_seconds": 0.25}, ici, chip).source == "compiler"


def test_topology_names_map_to_documented_slices():
    assert tpu_chips.parse("v5p-64").shape == "2x4x4"  # TensorCores: 32 chips
    assert tpu_chips.parse("v4-32").num_chips == 16
    assert tpu_chips.parse("v5e-256").shape == "16x16"  # chips
    assert tpu_chips.parse("v5litepod-16").shape == "4x4"
    assert tpu_chips.parse("v5e:2x4").num_chips == 8
    assert tpu_chips.parse("v5e-16", num_slices=2).num_chips == 32
    for bad in ("v5p-63", "v3-8", "v5e:2x2x2", "tpu"):
        with pytest.raises(ValueError, match=r"v5p|v5e|slice|topology"):
            tpu_chips.parse(bad)
