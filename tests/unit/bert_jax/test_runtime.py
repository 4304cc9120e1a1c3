"""bert_jax.runtime: every binary's JAX start, one function, so the trainers cannot drift."""

import os
import pathlib
import subprocess
import sys
import types

import pytest

from bert_jax import cli, runtime

ROOT = pathlib.Path(__file__).resolve().parents[3]

# Runs a binary with runtime.start replaced by a probe that prints what it was given and exits.
PROBE = """
import runpy, sys
from bert_jax import runtime

def start(flag_values=None, **kw):
    names = ("distributed", "coordinator_address", "num_processes", "process_id")
    print("start", [getattr(flag_values, n) for n in names], kw)
    sys.exit(0)

runtime.start = start
sys.argv = sys.argv[1:]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""

DISTRIBUTED = [
    "--distributed",
    "--coordinator_address=localhost:1234",
    "--num_processes=2",
    "--process_id=1",
]


@pytest.mark.parametrize(
    "binary",
    [
        ["bert_jax.main", "--config=configs/tiny.py"],
        ["bert_jax.finetune", "--config=configs/finetune/sst2.py"],
        ["bert_jax.finetune", "--mode=predict", "--test_file=test.tsv"],
    ],
)
def test_both_trainers_start_jax_through_runtime_with_the_same_flags(binary, tmp_path):
    """Pre-training and fine-tuning (both modes) hand the same four multi-process flags to the
    one start: a binary that defined its own, or started JAX itself, fails here."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *binary, f"--workdir={tmp_path}", *DISTRIBUTED],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "start [True, 'localhost:1234', 2, 1] {}"


def test_the_planner_runs_on_fake_cpu_devices_without_the_cache(tmp_path):
    """cpu_devices: that many CPU devices whatever XLA_FLAGS asked, the TPU compiler flags, and
    no persistent compilation cache (a fresh process: JAX reads its platform once)."""
    code = (
        "from bert_jax import runtime\n"
        "runtime.start(cpu_devices=3)\n"
        "import jax, os\n"
        "print(jax.device_count(), jax.devices()[0].platform, "
        "jax.config.jax_enable_compilation_cache, os.environ['LIBTPU_INIT_ARGS'] != '')"
    )
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["3", "cpu", "False", "True"]


# Allocates, touches and frees a 256 MiB block twice on a worker thread (as XLA:CPU does with its
# temporaries; malloc itself, not numpy, which asks for huge pages), and prints the minor page
# faults of the second round.
_SCRIPT = """
import ctypes, resource, sys, threading
from bert_jax import runtime
applied = runtime.reuse_freed_memory() if sys.argv[1] == "reuse" else False
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
size = 256 << 20
faults = []
def step():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)  # every page touched
    libc.free(block)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
for _ in range(2):
    t = threading.Thread(target=step)
    t.start()
    t.join()
print(applied, faults[1])
"""


def _second_round_faults(mode: str) -> tuple[bool, int]:
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, mode], capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0] == "True", int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc: Linux only")
def test_a_freed_block_is_reused_without_page_faults():
    """With runtime.reuse_freed_memory's settings, a large block freed and allocated again is not
    faulted in again (what XLA:CPU does with a step's temporaries every step)."""
    applied, faults = _second_round_faults("reuse")
    if not applied:
        pytest.skip("not glibc: mallopt has no effect here")
    pages = (256 << 20) // 4096
    assert faults < pages // 100
    # The defaults map it afresh: every page faults again (the cost the settings remove).
    _, default_faults = _second_round_faults("default")
    assert default_faults > pages // 2


@pytest.mark.parametrize(
    "flags, line",
    [
        (dict(num_processes=2), "--num_processes is for multi-process runs: add --distributed"),
        (dict(process_id=1), "--process_id is for multi-process runs"),
        (dict(coordinator_address="h:1"), "--coordinator_address is for multi-process runs"),
        (dict(distributed=True, num_processes=0), "--num_processes=0 must be 1 or more"),
        (dict(distributed=True, num_processes=2**63), "--num_processes=9223372036854775808 must"),
        (dict(distributed=True, num_processes=2, process_id=2), "--process_id=2 must lie in [0,"),
        (dict(distributed=True, process_id=-1), "--process_id=-1 must lie in [0, --num_processes)"),
        (dict(distributed=True, coordinator_address="host"), "--coordinator_address='host' must"),
        (dict(distributed=True, coordinator_address=":80"), "--coordinator_address=':80' must"),
        (dict(distributed=True, coordinator_address="h:99999"), "--coordinator_address='h:99999'"),
    ],
)
def test_the_multi_process_flags_mistakes_are_one_line_before_jax_starts(flags, line):
    """Each was a ValueError, TypeError or IndexError traceback from jax.distributed, or (the
    three without --distributed) did nothing."""
    values = dict(distributed=False, coordinator_address=None, num_processes=None, process_id=None)
    with pytest.raises(cli.UserError) as raised:
        runtime.check_flags(types.SimpleNamespace(**{**values, **flags}))
    assert str(raised.value).startswith(line), raised.value


def test_the_multi_process_flags_that_make_sense_pass():
    for flags in [
        dict(distributed=False, coordinator_address=None, num_processes=None, process_id=None),
        dict(distributed=True, coordinator_address=None, num_processes=None, process_id=None),
        dict(distributed=True, coordinator_address="10.0.0.2:1234", num_processes=4, process_id=3),
        dict(distributed=True, coordinator_address="[::1]:80", num_processes=1, process_id=0),
    ]:
        runtime.check_flags(types.SimpleNamespace(**flags))
