"""How every bert_jax binary starts JAX (`start`, after flag parsing so --help stays fast) and
how a run a signal stopped exits. docs/scaling.md, "Multi-host".
"""

import ctypes
import glob
import os
import re
import sys

from absl import flags, logging

from bert_jax import cli

# mallopt(3) parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8


def define_flags() -> None:
    """The trainers' multi-process flags; defined by the binaries that run several processes."""
    flags.DEFINE_bool(
        "distributed",
        False,
        "Call jax.distributed.initialize() first: needed with more than one process (TPU pod "
        "slices, multi-node GPU). TPU, SLURM, Open MPI and Kubernetes set the rest "
        "themselves; elsewhere pass the three flags below.",
    )
    flags.DEFINE_string(
        "coordinator_address", None, "host:port of process 0 (default: $JAX_COORDINATOR_ADDRESS)."
    )
    flags.DEFINE_integer("num_processes", None, "Number of processes in the job.")
    flags.DEFINE_integer("process_id", None, "This process's index, 0 to num_processes - 1.")


def check_flags(flag_values) -> None:
    """define_flags' flags, checked before JAX starts (JAX's errors were tracebacks)."""
    names = ("coordinator_address", "num_processes", "process_id")
    given = [name for name in names if getattr(flag_values, name) is not None]
    if not flag_values.distributed:
        if given:
            raise cli.UserError(
                f"--{given[0]} is for multi-process runs: add --distributed, or drop it"
            )
        return
    count, index = flag_values.num_processes, flag_values.process_id
    address = flag_values.coordinator_address
    if count is not None and not 1 <= count < 2**31:
        raise cli.UserError(f"--num_processes={count} must be 1 or more")
    if index is not None and not 0 <= index < (count if count is not None else 2**31):
        raise cli.UserError(
            f"--process_id={index} must lie in [0, --num_processes"
            + (f"={count})" if count is not None else ")")
        )
    if address is not None:
        host, colon, port = address.rpartition(":")
        if not (colon and host and port.isdigit() and 0 < int(port) < 2**16):
            raise cli.UserError(
                f"--coordinator_address={address!r} must be host:port (process 0's), e.g. "
                "10.0.0.2:1234"
            )


def start(flag_values=None, *, cpu_devices: int = 0) -> None:
    """Starts JAX: `flag_values`, parsed flags with define_flags'; `cpu_devices`, fake ones."""
    if flag_values is not None:
        check_flags(flag_values)
    if cpu_devices:
        _use_cpu_devices(cpu_devices)
    else:  # before JAX's CPU backend starts its threads: XLA:CPU then reuses a step's memory
        configure_for_cpu_training()
    import jax

    from bert_jax.model import sharding

    sharding.use_tpu_compiler_flags()
    if flag_values is None:
        return
    if flag_values.distributed:
        # CPU processes need a collectives backend to talk to each other (GPU/TPU ignore this).
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            flag_values.coordinator_address, flag_values.num_processes, flag_values.process_id
        )
    logging.info(
        "process %d of %d, %d local devices of %d",
        jax.process_index(),
        jax.process_count(),
        jax.local_device_count(),
        jax.device_count(),
    )


def reuse_freed_memory() -> bool:
    """glibc malloc settings that let XLA:CPU reuse a step's memory rather than fault in its
    pages anew (docs/performance.md), before `import jax`; whether glibc took all three."""
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
    """`reuse_freed_memory` on a host without a TPU or NVIDIA GPU; whether it was applied."""
    accelerators = ("/dev/accel*", "/dev/vfio/[0-9]*", "/dev/nvidia[0-9]*")
    return not any(glob.glob(p) for p in accelerators) and reuse_freed_memory()


def _use_cpu_devices(count: int) -> None:
    """`count` fake CPU devices, JAX on its CPU backend even on a TPU or GPU host, no cache."""
    xla_flags = re.sub(
        r"--xla_force_host_platform_device_count=\d+", "", os.environ.get("XLA_FLAGS", "")
    )
    # XLA:CPU's memory-minimizing scheduler (as bench/memory_bench.py): closer to a TPU's plan.
    xla_flags += f" --xla_force_host_platform_device_count={count}"
    xla_flags += " --xla_cpu_enable_concurrency_optimized_scheduler=false"
    os.environ["XLA_FLAGS"] = xla_flags.strip()
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax

    jax.config.update("jax_platforms", "cpu")  # read at import: JAX may be imported already
    # A deviceless compile cannot be served from the cache: a TPU executable read back needs a
    # TPU client, and JAX warns at every hit.
    jax.config.update("jax_enable_compilation_cache", False)


def exit_if_signalled(result: dict) -> None:
    """Exits a run a signal stopped (saved, not finished) as a script must see it: 130 after a
    Ctrl-C, faults.PREEMPTED_STATUS after a SIGTERM or preemption notice."""
    from bert_jax.training import faults

    if result["stopped"] == "interrupted":  # saved, but not finished: a script must know
        cli.fail(faults.interrupted_message(result["step"]), 130)
    if result["stopped"] == "preempted":
        sys.exit(faults.PREEMPTED_STATUS)
