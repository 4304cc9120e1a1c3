"""glibc malloc settings that let XLA:CPU reuse its step's memory instead of faulting it in anew.

XLA:CPU allocates each execution's temporaries as one buffer with posix_memalign on a worker
thread, and frees it when the step ends. glibc serves an allocation that large with mmap and
returns it with munmap, so every step the kernel maps, zero-fills and faults in every page again
(~15% of a BERT-Base step's CPU time: docs/performance.md). Raising the mmap threshold does not
help: glibc caps it at 32 MiB, and a thread's own arena (a worker thread's malloc) falls back to
mmap for anything over 64 MiB whatever the settings.

`reuse_freed_memory` makes malloc keep such blocks: one arena for all threads (the main one,
which grows with brk and is not capped), no mmap for large blocks, and no trimming of the heap's
top. After the first steps the temporaries land in memory already mapped: no page faults, no
system time. The cost is that memory freed by the process stays mapped to it (its resident size
stays at its peak), which a process that runs the same step again and again wants anyway.

It must run before the threads that allocate exist, i.e. before JAX's CPU backend starts (the
binaries call it before `import jax`), and only changes the process that calls it and the
children it forks.
"""

import ctypes
import glob
import sys

# mallopt(3) parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8


def accelerator_present() -> bool:
    """Whether this host has a TPU or an NVIDIA GPU (their device files): the step's
    temporaries then live in the accelerator's memory and these settings buy nothing."""
    return any(glob.glob(p) for p in ("/dev/accel*", "/dev/vfio/[0-9]*", "/dev/nvidia[0-9]*"))


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
    """`reuse_freed_memory` on a host without an accelerator; whether it was applied."""
    return not accelerator_present() and reuse_freed_memory()
