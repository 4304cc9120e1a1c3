"""bert_jax.cpu_malloc: with its settings, a large block freed and allocated again is not faulted
in again (what XLA:CPU does with a step's temporaries every step)."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="glibc malloc settings: Linux only"
)

# Allocates, touches and frees a 256 MiB block twice on a worker thread (as XLA:CPU does with its
# temporaries; malloc itself, not numpy, which asks for huge pages), and prints the minor page
# faults of the second round.
_SCRIPT = """
import ctypes, resource, sys, threading
from bert_jax import cpu_malloc
applied = cpu_malloc.reuse_freed_memory() if sys.argv[1] == "reuse" else False
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


def test_a_freed_block_is_reused_without_page_faults():
    applied, faults = _second_round_faults("reuse")
    if not applied:
        pytest.skip("not glibc: mallopt has no effect here")
    pages = (256 << 20) // 4096
    assert faults < pages // 100
    # The defaults map it afresh: every page faults again (the cost the settings remove).
    _, default_faults = _second_round_faults("default")
    assert default_faults > pages // 2
