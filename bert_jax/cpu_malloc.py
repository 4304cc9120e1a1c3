"""glibc malloc settings that let XLA:CPU reuse its step's memory instead of faulting it in anew.

XLA:CPU allocates each step's temporaries as one buffer (posix_memalign on a worker thread) and
frees it when the step ends; glibc serves that with mmap and returns it with munmap, so every
step the kernel maps, zero-fills and faults in every page again (the cost: docs/performance.md).
A higher mmap threshold does not help (glibc caps it at 32 MiB, and a thread's own arena uses
mmap for anything over 64 MiB). `reuse_freed_memory` sets one arena for all threads (the main
one, which grows with brk), no mmap for large blocks and no trimming: the process keeps its peak
resident size, which a process running the same step again and again wants anyway. It must run
before the threads that allocate exist (the binaries call it before `import jax`), and changes
only the calling process and the children it forks.
"""

import ctypes
import glob
import sys

# mallopt(3) parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8


def reuse_freed_memory() -> bool:
    """Applies the settings (module docstring) to this process; whether glibc took all three
    (False on other C libraries and platforms, where nothing changes)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018 (glibc only: musl has mallopt without effect)
    except (OSError, AttributeError):
        return False
    # -1 disables trimming altogether (mallopt(3)); 0 large-block mmaps; 1 arena.
    results = (
        libc.mallopt(_M_ARENA_MAX, 1),
        libc.mallopt(_M_MMAP_MAX, 0),
        libc.mallopt(_M_TRIM_THRESHOLD, -1),
    )
    return all(r == 1 for r in results)


def configure_for_cpu_training() -> bool:
    """`reuse_freed_memory` on a host without a TPU or an NVIDIA GPU (their device files: the
    step's temporaries then live in the accelerator's memory and these settings buy nothing);
    whether it was applied."""
    accelerators = ("/dev/accel*", "/dev/vfio/[0-9]*", "/dev/nvidia[0-9]*")
    return not any(glob.glob(p) for p in accelerators) and reuse_freed_memory()
