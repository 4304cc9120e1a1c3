"""The planner (python -m bert_jax.plan): a tiny BERT compiled by the TPU compiler for small slices,
no TPU needed; where its HBM bytes go; the trainer's mesh on TPU slices; every documented
topology; the fallback to fake CPU devices where libtpu is missing. (Its usage mistakes, one
`error:` line each: tests/support/sweep_plan.py, in the bad-input sweep.)

The compiles run in subprocesses: the planner starts libtpu's compiler there and this process stays
on the CPU backend (conftest.py). Each compile of the tiny config costs about 10 CPU-s, so one
module fixture's plans serve several tests. Skipped where libtpu is not installed (the `tpu`
extra), but for the fallback test, which hides it.
"""

import importlib.util
import itertools
import json
import os
import signal
import subprocess
import sys

import pytest

from bert_jax.plan import hbm, hlo
from support.golden import REPO

needs_libtpu = pytest.mark.skipif(
    importlib.util.find_spec("libtpu") is None,
    reason="libtpu is not installed (pip install -e '.[tpu]', which make install does)",
)
GIB = 1024**3
# tiny's shape with a width of 128 (its 32 leave every buffer in VMEM, so the HBM groups would be
# empty) and two accumulation steps: the step then holds a loop (lax.scan) to count per trip.
WIDER = (
    "--config.model.hidden_size=128",
    "--config.model.intermediate_size=512",
    "--config.train.grad_accum_steps=2",
)


def _run(
    *args: str, prelude: str = "", timeout=1800, config="configs/tiny.py"
) -> subprocess.CompletedProcess:
    """`python -m bert_jax.plan --config=CONFIG *args`; `prelude` (Python) first."""
    command = [sys.executable, "-m", "bert_jax.plan"]
    if prelude:  # the same, as runpy runs it, after the prelude
        command[1:] = [
            "-c",
            f"import runpy, sys; {prelude}; sys.argv[0] = 'bert_jax.plan'; "
            "runpy.run_module('bert_jax.plan', run_name='__main__', alter_sys=True)",
        ]
    return subprocess.run(
        [*command, f"--config={config}", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,  # minutes on a loaded machine; seconds per plan when idle
    )


def _plan(out_dir, name: str, *flags: str, **run) -> tuple[list[dict], str]:
    out = os.path.join(out_dir, f"{name}.json")
    run = _run(*flags, f"--json_out={out}", **run)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stderr == "", run.stderr[-3000:]  # libtpu's start-up notices kept back
    assert "compiled by the TPU compiler" in run.stdout
    with open(out) as f:
        return json.load(f), run.stdout


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


@pytest.fixture(scope="module")
def v5e(tmp_path_factory):
    """Three train-step plans on v5e:2x2: 8 and 64 sequences data-parallel, 8 with fsdp=2; the
    compiled HLO of each under hlo/."""
    d = tmp_path_factory.mktemp("plan")
    common = ("--topology=v5e:2x2", "--steps=train", f"--hlo_dir={d / 'hlo'}", *WIDER)
    data, out = _plan(d, "d", *common, "--meshes=4x1x1", "--global_batch_sizes=8,64", "--top=5")
    fsdp, _ = _plan(d, "f", *common, "--meshes=2x2x1", "--global_batch_sizes=8")
    return {"plans": data + fsdp, "stdout": out, "hlo": d / "hlo"}


@needs_libtpu
def test_v5e_plans_grow_with_the_batch_and_fsdp_splits_the_state(v5e):
    small = _by(v5e["plans"], mesh="4x1x1", global_batch=8)
    large = _by(v5e["plans"], mesh="4x1x1", global_batch=64)
    fsdp = _by(v5e["plans"], mesh="2x2x1")
    for p in (small, large, fsdp):
        assert p["chips"] == 4 and p["hbm_bytes"] == 16 * GIB  # v5e, from Google's docs
        # The donated state is updated in place, and the state is the bulk of the arguments.
        assert p["alias_bytes"] >= 0.99 * p["state_bytes"]
        assert p["state_bytes"] <= p["argument_bytes"]
        assert p["fits"] and p["peak_bytes"] <= p["hbm_bytes"]
        assert p["step_s"] > 0 and p["seq_per_s"] == pytest.approx(p["global_batch"] / p["step_s"])
        assert 0 < p["mfu"] < 1
    # 8x the rows: more activations and more FLOPs per chip, the same state.
    assert large["temp_bytes"] > small["temp_bytes"]
    assert large["peak_bytes"] > small["peak_bytes"]
    assert 4 < large["cost"]["flops"] / small["cost"]["flops"] <= 8.5
    assert large["state_bytes"] == small["state_bytes"]
    # Weight-update sharding (config.mesh.shard_update): data parallelism too splits the
    # parameters and Adam moments over the 4 chips, as fsdp=2 x data=2 does; only arrays no
    # dimension of which divides stay whole.
    for p in (small, fsdp):
        assert 3.5 < p["total_state_bytes"] / p["state_bytes"] <= 4
    # The step gathers the weights (bf16 kernels: at least a sixth of the float32 state's
    # bytes, 3/4 of it sent per chip) and sums the gradients onto the shards.
    gathered = small["ici_bytes"].get("all-gather", 0)
    assert gathered > small["total_state_bytes"] / 3 / 2 * 3 / 4 / 2
    assert sum(v for k, v in small["ici_bytes"].items() if k != "all-gather") > 0
    assert fsdp["ici_bytes"].get("all-gather", 0) > 0


@needs_libtpu
def test_estimates_are_the_compilers_where_it_gives_one_and_both_rooflines_are_labelled(v5e):
    for p in v5e["plans"]:
        terms = p["roofline_terms"]
        assert set(terms) == {"compute", "HBM", "ICI", "DCN"}
        assert p["roofline_s"] == pytest.approx(
            max(terms["compute"], terms["HBM"]) + terms["ICI"] + terms["DCN"]
        )
        assert p["overlapped_s"] == pytest.approx(
            max(terms["compute"], terms["HBM"], terms["ICI"]) + terms["DCN"]
        )
        assert p["overlapped_s"] <= p["roofline_s"]
        if p["compiler_s"] is not None:
            assert (p["step_source"], p["step_s"]) == ("compiler", p["compiler_s"])
        else:
            assert (p["step_source"], p["step_s"]) == ("roofline", p["roofline_s"])
        assert p["mfu_overlapped"] == pytest.approx(
            p["model_flops_per_chip"] / 197e12 / p["overlapped_s"]
        )
        # The same bounds on the HLO's HBM bytes alone: the compiler's "bytes accessed" also
        # counts what it keeps on chip, so these are the tighter pair.
        hlo = p["hlo_roofline"]
        assert p["hbm_traffic"]["total_bytes"] < p["cost"]["bytes accessed"]
        assert hlo["terms"]["HBM"] == pytest.approx(p["hbm_traffic"]["total_bytes"] / 819e9)
        assert hlo["overlapped_s"] <= hlo["serial_s"] <= p["roofline_s"]
    header = v5e["stdout"].splitlines()[1:3]
    assert "overlap ms" in header[0] and "(roofline)" in header[1] and "ovl." in header[1]
    assert v5e["stdout"].count("the roofline on these HBM bytes") == 2


@needs_libtpu
def test_where_the_hbm_bytes_go_adds_up_and_names_the_parts(v5e):
    for p in v5e["plans"]:
        t = p["hbm_traffic"]
        assert sum(t["groups"].values()) == t["total_bytes"] > 0
        assert sum(t["onchip_groups"].values()) == t["onchip_bytes"]
        # The optimizer updates the whole float32 state, the MLM head projects onto the whole
        # vocabulary, the embedding gradient is a table's worth (in VMEM at this size).
        assert t["groups"]["optimizer update"] > 0.3 * t["total_bytes"]
        assert t["groups"]["MLM head and loss"] > 0
        embedding = t["groups"].get("embedding gradient", 0)
        assert embedding + t["onchip_groups"].get("embedding gradient", 0) > 0
        # "other": mostly copies of unchanged state arrays onto the step's output, which carry
        # no name (4% of this tiny model's bytes; under 1% of BERT-Base's).
        assert t["groups"].get("other", 0) < 0.05 * t["total_bytes"]
        assert any("counted 2 times" in note for note in t["notes"])  # grad accumulation's scan
        assert any(note.startswith("conditional") for note in t["notes"])  # the optimizer's
    # The JSON is the attribution of the HLO the compiler wrote: recomputed, the same.
    small = _by(v5e["plans"], mesh="4x1x1", global_batch=8)
    text = (v5e["hlo"] / "train_4x1x1_b8_remat0.hlo.txt").read_text()
    assert hbm.attribute(text).to_json(top=5) == small["hbm_traffic"]
    assert len(small["hbm_traffic"]["top"]) == 5
    out = v5e["stdout"]
    assert out.count("where the HBM bytes of train 4x1x1") == 2
    assert "optimizer update" in out and "top 5 instructions" in out
    top = small["hbm_traffic"]["top"][0]
    assert f"{top['name'][:30]:<30} {top['bytes'] / 1e9:8.3f}" in out


@needs_libtpu
def test_v4_megacore_slice_compiles_eval_and_finetuning_and_a_plan_past_hbm_is_marked(tmp_path):
    plans, _ = _plan(
        tmp_path,
        "v4",
        "--topology=v4:2x2x1",
        "--meshes=4x1x1",
        "--global_batch_sizes=8",
        "--steps=eval,finetune",
        "--top=0",
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
    (big,), out = _plan(
        tmp_path,
        "big",
        "--topology=v5e-4",
        "--meshes=4x1x1",
        "--global_batch_sizes=4",
        "--steps=train",
        "--vocab_size=40000000",
        "--top=0",
    )
    assert big["peak_bytes"] > big["hbm_bytes"] and not big["fits"]
    assert "no train-step plan fits the chip's HBM" in out


@needs_libtpu
def test_a_modernbert_shaped_step_runs_splash_attention_with_windows_and_no_score_matrix(tmp_path):
    """ModernBERT's block at a tiny width (configs/modernbert_base.py: RoPE, GeGLU, pre-norm,
    packed rows with segment ids, 30% masking) with 4 layers, global, sliding, sliding, global,
    on v5e:2x2: the step calls the splash kernel for both layer kinds, forward and backward, and
    no [L, L] array (scores, probabilities, a mask) is anywhere in the program."""
    length = 512
    plans, out = _plan(
        tmp_path,
        "modern",
        "--topology=v5e:2x2",
        "--steps=train",
        "--meshes=4x1x1",
        "--global_batch_sizes=16",
        "--num_layers=4",
        f"--seq_len={length}",
        "--vocab_size=1024",
        "--config.model.hidden_size=128",
        "--config.model.num_attention_heads=2",
        "--config.model.intermediate_size=256",
        "--config.train.grad_accum_steps=2",
        "--config.train.batch_warmup_steps=0",
        f"--hlo_dir={tmp_path / 'hlo'}",
        "--top=3",
        config="configs/modernbert_base.py",
    )
    (p,) = plans
    assert "L=4 H=128 A=2 V=1024" in out
    # Layers 0 and 3 global, 1 and 2 windowed; each layer calls the kernel forward, again in
    # the backward pass (the scan's saved matmul outputs leave attention to recompute), and for
    # its dq and dkv.
    calls = p["splash_attention_calls"]
    assert calls["global"] >= 6 and calls["local"] >= 4, calls
    assert f"splash attention: {calls['global']} global, {calls['local']} local-window" in out
    (program,) = (tmp_path / "hlo").iterdir()
    module = hlo.parse_module(program.read_text())
    squares = {
        str(a)
        for c in module.values()
        for i in c.instructions
        for a in hlo.arrays(i.shape)
        if list(a.dims).count(length) >= 2
    }
    assert not squares, squares
    # The plan is reported with both MFU figures; the model FLOPs count the windows' bands, the
    # roofline the kernel's whole 512-token tiles (all of a 512-token row).
    assert p["fits"] and 0 < p["mfu"] <= p["mfu_overlapped"] < 1
    assert p["kernel_flops_per_chip"] > p["model_flops_per_chip"]
    assert p["hbm_traffic"]["groups"]["attention"] > 0


@pytest.mark.skipif(
    importlib.util.find_spec("jax_cuda13_plugin") is None,
    reason="jax's CUDA plugin is not installed (pip install -e '.[cuda]'; make install does not)",
)
def test_a_modernbert_shaped_step_compiles_for_an_h100_with_cudnn_attention(tmp_path):
    """The same tiny ModernBERT (global, sliding, sliding, global; packed rows) compiled for one
    H100 with attention_impl='cudnn': every layer's attention, global and windowed, is cuDNN's
    fused kernel, forward and backward, and its forward is not run again in the backward pass
    (layer_stack keeps cuDNN's outputs): layers 0 and 3 unrolled, the two sliding ones scanned,
    a forward and a backward call site each; 7 if the scan's backward ran the forward again."""
    out = tmp_path / "h100.json"
    run = _run(
        "--topology=h100",
        "--steps=train",
        "--meshes=1x1x1",
        "--global_batch_sizes=4",
        "--num_layers=4",
        "--seq_len=512",
        "--vocab_size=1024",
        "--config.model.hidden_size=128",
        "--config.model.num_attention_heads=2",
        "--config.model.intermediate_size=256",
        "--config.train.grad_accum_steps=1",
        "--config.train.batch_warmup_steps=0",
        "--attention_impl=cudnn",
        f"--json_out={out}",
        config="configs/modernbert_base.py",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "compiled by the CUDA compiler" in run.stdout
    ((p,),) = [json.loads(out.read_text())]
    assert p["fits"] and p["cudnn_attention_calls"] == 6, p["cudnn_attention_calls"]
    assert "cuDNN attention: 6 calls" in run.stdout


@needs_libtpu
@pytest.mark.parametrize("length, splash", [(128, False), (512, True)])
def test_without_attention_dropout_auto_takes_splash_for_long_rows_only(tmp_path, length, splash):
    """attention_impl='auto' on TPU: XLA's fused attention for BERT's 128-token rows (one kernel
    tile, where splash's fixed costs lose), the splash kernel from 512 tokens."""
    (p,), out = _plan(
        tmp_path,
        "auto",
        "--topology=v5e:2x2",
        "--steps=train",
        "--meshes=4x1x1",
        "--global_batch_sizes=8",
        "--num_layers=2",
        f"--seq_len={length}",
        f"--config.model.max_position_embeddings={length}",
        "--attention_dropout=0",
    )
    calls = p["splash_attention_calls"]
    assert (calls["global"] > 0) == splash, calls
    assert ("splash attention:" in out) == splash


@needs_libtpu
def test_a_one_chip_v5e_plans():
    """v5litepod-1: libtpu's default host of 2x2 chips does not divide it (chips.devices)."""
    run = _run("--topology=v5e-1", "--steps=eval", "--global_batch_sizes=8", "--top=0")
    assert run.returncode == 0 and run.stderr == "", run.stderr[-3000:]
    assert "v5e-1 (1x1); compiled by the TPU compiler" in run.stdout
    assert "    eval     1x1x1 False      8 (8)" in run.stdout


@needs_libtpu
def test_a_v3_slice_plans_two_devices_a_chip():
    """v3-8, the original BERT's TPU: 4 chips of two TensorCores, each a device of half a chip's
    HBM; its eval step compiles (train and fine-tuning do too: docs/scaling.md)."""
    run = _run("--topology=v3-8", "--steps=eval", "--global_batch_sizes=8", "--top=0")
    assert run.returncode == 0 and run.stderr == "", run.stderr[-3000:]
    assert "v3-8 (2x2); compiled by the TPU compiler" in run.stdout
    assert "    eval     8x1x1 False      8 (1) " in run.stdout and "/16 " in run.stdout, run.stdout


@needs_libtpu
def test_tpu7x_plans_two_devices_a_chip_and_refuses_what_libtpu_crashes_on():
    """TPU7x (Ironwood): each chip is two devices of half its figures. libtpu 0.0.42.1 crashes
    (a segmentation fault) compiling its train step with attention dropout, and fine-tuning's:
    refused by name, before anything compiles."""
    common = ("--topology=tpu7x-8", "--meshes=8x1x1", "--global_batch_sizes=16", "--top=0")
    run = _run(*common, "--steps=train", "--attention_dropout=0")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "tpu7x-8 (2x2x1); compiled by the TPU compiler" in run.stdout
    assert "   train     8x1x1 " in run.stdout and "/96 " in run.stdout, run.stdout
    for steps in ("train", "eval,finetune --attention_dropout=0"):  # the config's: 0.1
        run = _run(*common, *f"--steps={steps}".split())
        line = run.stderr.strip().splitlines()[-1]
        assert run.returncode == 2 and line.startswith("error: --topology=tpu7x-8: the "), line
        assert line.endswith("plan with --steps=train,eval --attention_dropout=0"), line


@needs_libtpu
def test_every_documented_topology_is_described_and_the_trainer_mesh_follows_ici_rings():
    """No compile: the slices' device descriptions from libtpu, in a subprocess."""
    code = """
import json
from bert_jax.model import sharding
from bert_jax.plan import chips
out = {"chips": {}}
for name in chips.DOCUMENTED:
    out["chips"][name] = len(chips.devices(chips.parse(name)))
out["two slices of one"] = len(chips.devices(chips.parse("v5e-1", num_slices=2)))
one = chips.devices(chips.parse("v5e:4x4"))
mesh = sharding.make_mesh(4, 4, 1, one)
out["rows"] = [[d.coords[:2] for d in row] for row in mesh.devices[:, :, 0]]
two = chips.devices(chips.parse("v5e:2x2", num_slices=2))
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
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    from bert_jax.plan import chips

    assert out["chips"] == {n: chips.parse(n).num_devices for n in chips.DOCUMENTED}
    assert out["two slices of one"] == 2
    # 4 x 4 chips: each fsdp group (a row) is a physical ring of neighbours, one ICI hop apart.
    for row in out["rows"]:
        for a, b in itertools.pairwise(row):
            assert abs(a[0] - b[0]) + abs(a[1] - b[1]) == 1
    # Two slices: every fsdp group lies in one slice; data parallelism crosses them.
    assert out["num_slices"] == 2
    assert all(len(set(row)) == 1 for row in out["slices"])
    assert {row[0] for row in out["slices"]} == {0, 1}
    assert "multiple of the slice count" in out["error"]


def test_without_libtpu_it_plans_for_fake_cpu_devices_and_says_so(tmp_path):
    """libtpu hidden from the process (import fails, find_spec finds nothing): the documented
    fallback, one warning line, XLA:CPU's plan for as many devices as the slice has chips."""
    out = tmp_path / "p.json"
    run = _run(
        "--topology=v5e-4",
        "--meshes=4x1x1",
        "--global_batch_sizes=8",
        "--steps=eval",
        f"--json_out={out}",
        prelude="sys.modules['libtpu'] = None",
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stderr.splitlines() == [
        "warning: --topology=v5e-4: its compiler is not installed (pip install -e '.[tpu]'); "
        "planning for 4 fake CPU devices instead"
    ]
    assert "compiled by XLA:CPU for 4 fake CPU devices standing in for v5e-4 (2x2)" in run.stdout
    (plan,) = json.loads(out.read_text())
    assert plan["chips"] == 4 and "hbm_bytes" not in plan  # no chip to judge it against
    assert plan["hbm_traffic"]["total_bytes"] > 0


def test_its_report_files_go_to_a_bucket(bucket):
    """--json_out and --hlo_dir in a bucket (gs://): both were written to a local directory named
    `gs:` (hlo) or refused as "its directory .../gs:/bkt does not exist" (json); a bucket that is
    not there is one line before anything compiles."""
    from bert_jax import storage

    common = ("--topology=cpu:2", "--meshes=2x1x1", "--global_batch_sizes=2", "--steps=eval")
    run = _run(
        *common, "--top=0", f"--json_out={bucket}/plan/p.json", f"--hlo_dir={bucket}/plan/hlo"
    )
    assert run.returncode == 0, run.stderr[-3000:]
    (plan,) = json.loads(storage.read_text(f"{bucket}/plan/p.json"))
    assert plan["step"] == "eval"
    (hlo_file,) = storage.glob(f"{bucket}/plan/hlo/*")
    assert hlo_file.endswith("eval_2x1x1_b2_remat0.hlo.txt")
    assert "HloModule" in storage.read_text(hlo_file)
    assert not os.path.exists(os.path.join(REPO, "gs:"))
    for flag in (
        "--json_out=gs://no-such-bucket-here/p.json",
        "--hlo_dir=gs://no-such-bucket-here/h",
    ):
        run = _run(*common, flag)
        assert run.returncode == 2 and run.stderr.startswith(f"error: {flag.split('=')[0]}="), (
            run.stderr[-3000:]
        )
        assert "there is no bucket 'no-such-bucket-here'" in run.stderr


@needs_libtpu
@pytest.mark.parametrize("shape, chips", [("v5e:3x3", 9), ("v4:3x3x3", 27), ("v6e:1x2", 2)])
def test_a_slice_shape_libtpu_cannot_describe_is_one_line(shape, chips):
    """A slice shape no host layout divides: a JaxRuntimeError traceback and "this is a bug"
    before; now one line naming --topology and the documented shapes, exit 2."""
    run = _run(f"--topology={shape}", f"--meshes={chips}x1x1", f"--global_batch_sizes={chips}")
    assert run.returncode == 2, run.stderr[-3000:]
    (line,) = run.stderr.splitlines()
    assert line.startswith(f"error: --topology={shape}: libtpu describes no such slice"), line
    assert "documented shape" in line


def test_config_overrides_of_dtype_and_remat_are_planned(tmp_path):
    """--config.model.dtype=float32 and --config.model.remat=true, as the trainer takes them:
    the --dtype and --remat defaults replaced both without a word (a bf16, no-remat plan and
    verdict); given with a flag that says otherwise, one line naming both."""
    out = tmp_path / "p.json"
    common = ("--topology=cpu:2", "--meshes=2x1x1", "--global_batch_sizes=2", "--steps=eval")
    run = _run(
        *common,
        "--top=0",
        "--config.model.dtype=float32",
        "--config.model.remat=true",
        f"--json_out={out}",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    (plan,) = json.loads(out.read_text())
    assert (plan["dtype"], plan["remat"]) == ("float32", True)
    for flags, said in (
        (("--dtype=bfloat16", "--config.model.dtype=float32"), "disagree"),
        (("--remat=false,true", "--config.model.remat=true"), "disagree"),
        (("--config.model.dtype=float16",), "choose bfloat16 or float32"),
    ):
        run = _run(*common, *flags)
        assert run.returncode == 2, run.stderr[-3000:]
        assert run.stderr.startswith(f"error: {' and '.join(flags)}"), run.stderr
        assert said in run.stderr, run.stderr


@needs_libtpu
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_after_libtpu_started_ends_the_planner_as_before(signum):
    """libtpu's start put its crash reporter on SIGTERM (`kill` printed a screen of "*** SIGTERM
    received by PID ... stack trace ***" and "Remote crash gathering disabled") and made SIGHUP
    ignored (a planner in a closed terminal compiled on); both are given back their action.
    The child starts with both at their defaults (a test run under nohup inherits SIGHUP
    ignored, which the planner then rightly keeps)."""
    code = (
        "import os, signal; signal.signal(signal.SIGHUP, signal.SIG_DFL); "
        "signal.signal(signal.SIGTERM, signal.SIG_DFL); from bert_jax.plan import chips; "
        "chips.devices(chips.parse('v5e-4')); "
        f"os.kill(os.getpid(), {int(signum)}); print('still running')"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == -signum, (run.returncode, run.stdout, run.stderr[-3000:])
    assert "received" not in run.stderr and "still running" not in run.stdout


def test_json_out_naming_a_config_file_is_refused_and_the_file_kept(tmp_path):
    """--json_out naming the --config or --finetune_config file: the plan's JSON replaced the
    user's config (exit 0). Refused before anything compiles, as every binary's outputs are."""
    import shutil

    cfg, ft = tmp_path / "cfg.py", tmp_path / "ft.py"
    shutil.copy(os.path.join(REPO, "configs", "tiny.py"), cfg)
    shutil.copy(os.path.join(REPO, "configs", "finetune", "sst2.py"), ft)
    common = ("--topology=cpu:2", "--meshes=2x1x1", "--global_batch_sizes=2", "--top=0")
    for flags, read_as in (
        (("--steps=eval", f"--json_out={cfg}"), "--config"),
        (("--steps=finetune", f"--finetune_config={ft}", f"--json_out={ft}"), "--finetune_config"),
    ):
        kept = {p: p.read_text() for p in (cfg, ft)}
        run = _run(*common, *flags, config=str(cfg), timeout=600)
        assert run.returncode == 2, run.stderr[-3000:]
        assert f"is also read, as {read_as}=" in run.stderr, run.stderr
        assert {p: p.read_text() for p in (cfg, ft)} == kept
