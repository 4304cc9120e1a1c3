"""Cloud TPU chips (and one H100) with their documented figures, and the slice shapes and
accelerator types (v5p-64, v5e-16, ...) of Google's Cloud TPU pages; the slice's devices from
libtpu. docs/scaling.md, "Planning a TPU run without a TPU": the figures and their sources.
"""

import contextlib
import dataclasses
import math
import os
import re
import signal
import sys
import tempfile
import threading

from bert_jax import cli

GIB = 1024**3


@dataclasses.dataclass(frozen=True)
class Chip:  # figures per JAX device: a chip's, halved on v3 and tpu7x (two devices a chip)
    name: str  # as in topology names and libtpu's get_topology_desc("v5e:4x4"): v4, v5e, ...
    hbm_bytes: int
    bf16_flops: float  # peak FLOP/s
    hbm_bytes_per_s: float
    ici_bytes_per_s: float  # bidirectional
    dcn_bytes_per_s: float
    cores_per_chip: int  # how the accelerator type counts: v4-32 is 16 chips
    dims: int  # 2D or 3D torus
    devices_per_chip: int = 1  # v4 and v5p: one megacore device of two TensorCores


CHIPS = {
    "v3": Chip("v3", 16 * GIB, 123e12 / 2, 900e9 / 2, 340e12 / 1024 / 2, 3.125e9 / 2, 2, 2, 2),
    "v4": Chip("v4", 32 * GIB, 275e12, 1200e9, 1.1e15 / 4096, 3.125e9, 2, 3),
    "v5e": Chip("v5e", 16 * GIB, 197e12, 819e9, 400e9, 3.125e9, 1, 2),
    "v5p": Chip("v5p", 95 * GIB, 459e12, 2765e9, 1200e9, 6.25e9, 2, 3),
    "v6e": Chip("v6e", 32 * GIB, 918e12, 1638e9, 800e9, 3.125e9, 1, 2),
    "tpu7x": Chip("tpu7x", 96 * GIB, 2307e12 / 2, 7380e9 / 2, 1200e9 / 2, 12.5e9 / 2, 2, 3, 2),
    "h100": Chip("h100", 84_929_347_584, 989e12, 3350e9, 900e9, 50e9, 1, 1),
}
H100_TARGET = """
gpu_device_info {
  threads_per_block_limit: 1024 threads_per_warp: 32 shared_memory_per_block: 49152
  shared_memory_per_core: 233472 threads_per_core_limit: 2048 core_count: 132
  fpus_per_core: 128 block_dim_limit_x: 2147483647 block_dim_limit_y: 65535
  block_dim_limit_z: 65535 memory_bandwidth: 3352320000000 l2_cache_size: 52428800
  clock_rate_ghz: 1.98 device_memory_size: 84929347584 shared_memory_per_block_optin: 232448
  cuda_compute_capability { major: 9 } registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}
platform_name: "CUDA"
dnn_version_info { major: 9 minor: 8 }
runtime_version { major: 13 minor: 0 }
device_description_str: "NVIDIA H100 80GB HBM3"
"""


def _chips(shape: str) -> int:
    return math.prod(int(d) for d in shape.split("x"))


# Slice shapes by chip count, from the pages' tables (v4's and v5p's, v5e's and v6e's alike; v3's
# its own); TPU7x's page has none, so it takes v5p's.
_3D, _2D = "2x2x1 2x2x2 2x2x4 2x4x4 4x4x4 4x4x8 4x8x8 8x8x8", "1x1 2x2 2x4 4x4 4x8 8x8 8x16 16x16"
_V3 = "2x2 4x4 4x8 8x8 8x16 16x16 16x32 32x32"
_TABLES = {"v3": _V3, "v4": _3D, "v5e": _2D, "v5p": _3D, "v6e": _2D, "tpu7x": _3D}
SHAPES = {c: {_chips(s): s for s in t.split()} for c, t in _TABLES.items()}
# Every accelerator type the tables above give, as a user names them (v4-32, v5e-16, ...).
DOCUMENTED = tuple(
    f"{c}-{n * CHIPS[c].cores_per_chip}" for c, shapes in SHAPES.items() for n in shapes
)


@dataclasses.dataclass(frozen=True)
class Topology:
    chip: Chip
    shape: str  # chips per slice along each axis: "2x4x4"
    num_slices: int = 1

    @property
    def chips_per_slice(self) -> int:
        return _chips(self.shape)

    @property
    def num_chips(self) -> int:
        return self.chips_per_slice * self.num_slices

    @property
    def num_devices(self) -> int:
        return self.num_chips * self.chip.devices_per_chip

    @property
    def name(self) -> str:
        if self.chip.name == "h100":
            return "one H100 80GB (deviceless CUDA compile)"
        cores = self.chips_per_slice * self.chip.cores_per_chip
        one = f"{self.chip.name}-{cores} ({self.shape})"
        return one if self.num_slices == 1 else f"{self.num_slices} x {one}"


def parse(name: str, num_slices: int = 1) -> Topology:
    """'v5p-64' (an accelerator type) or 'v5p:2x4x4' (a slice shape) -> Topology."""
    text = name.strip().lower().replace("v5litepod", "v5e").replace("v7x", "tpu7x")
    if num_slices < 1:
        raise cli.UserError(f"--num_slices={num_slices}: must be at least 1")
    if text == "h100":
        if num_slices != 1:
            raise cli.UserError(f"--num_slices={num_slices}: h100 is one GPU; pass 1")
        return Topology(CHIPS["h100"], "1")
    m = re.fullmatch(rf"({'|'.join(SHAPES)})" r"(?::(\d+(?:x\d+){1,2})|-(\d+))", text)
    if not m:
        raise cli.UserError(
            f"--topology={name}: unknown topology; give an accelerator type (v3-8, v4-32, v5e-16, "
            "v5p-64, v6e-256, tpu7x-64), a slice shape (v5e:4x4, v5p:2x4x4), h100, or cpu:N for "
            "N fake CPU devices"
        )
    chip = CHIPS[m.group(1)]
    if m.group(2):
        if len(m.group(2).split("x")) != chip.dims:
            raise cli.UserError(
                f"--topology={name}: {chip.name} slices are {chip.dims}D, e.g. {chip.name}:"
                + ("2x2x1" if chip.dims == 3 else "2x2")
            )
        if any(int(d) == 0 for d in m.group(2).split("x")):
            raise cli.UserError(f"--topology={name}: a slice has at least one chip a side")
        return Topology(chip, m.group(2), num_slices)
    count = int(m.group(3))
    shapes = SHAPES[chip.name]
    chips, rest = divmod(count, chip.cores_per_chip)
    if rest or chips not in shapes:
        sizes = ", ".join(f"{chip.name}-{n * chip.cores_per_chip}" for n in shapes)
        raise cli.UserError(
            f"--topology={name}: no such {chip.name} slice; the documented ones: {sizes}"
        )
    return Topology(chip, shapes[chips], num_slices)


def devices(topology: Topology) -> list:
    """The slice's devices for compiling without a TPU (one a chip, megacore on v4 and v5p; two on
    v3 and tpu7x: as a TPU VM shows them), or the H100's; needs compiler_installed()."""
    import jax
    from jax.experimental import topologies

    if topology.chip.name == "h100":
        desc = topologies.get_topology_desc(
            platform="cuda", target_config=H100_TARGET, topology="1x1x1"
        )
        return list(desc.devices)

    # Lift libtpu's one-process lock: a described slice is only compiled for.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

    megacore = topology.chip.cores_per_chip == 2 and topology.chip.devices_per_chip == 1
    kwargs = {"chip_config_name": "megacore"} if megacore else {}
    if topology.num_slices > 1:
        kwargs["num_slices"] = topology.num_slices
    if topology.chips_per_slice == 1:
        # libtpu's default host is 2x2 chips, which a 1x1 slice (v5litepod-1) does not divide.
        kwargs["chips_per_host_bounds"] = [1, 1, 1]
    refused = None
    # libtpu's start puts a crash reporter on SIGTERM and ignores SIGHUP: both are put back.
    kept = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    with _libtpu_notices_kept_back():
        try:
            desc = topologies.get_topology_desc(
                f"{topology.chip.name}:{topology.shape}", platform="tpu", **kwargs
            )
        except jax.errors.JaxRuntimeError as e:  # a shape no slice has (v5e:3x3): the user's
            if "INVALID_ARGUMENT" not in str(e):
                raise
            refused = str(e).splitlines()[0].partition("INVALID_ARGUMENT: ")[2]
    if threading.current_thread() is threading.main_thread():
        for signum, action in kept.items():
            signal.signal(signum, signal.SIG_DFL if action is None else action)
    if refused is not None:
        documented = ", ".join(
            f"{topology.chip.name}:{s}" for s in SHAPES[topology.chip.name].values()
        )
        raise cli.UserError(
            f"--topology={topology.chip.name}:{topology.shape}: libtpu describes no such slice "
            f"({refused}); give a documented shape ({documented}) or an accelerator type"
        )
    return list(desc.devices)


@contextlib.contextmanager
def _libtpu_notices_kept_back():
    """libtpu's start outside a TPU VM writes a screen of harmless warnings to stderr: kept
    back, and written out only if the description fails."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        except BaseException:
            held.seek(0)
            os.write(saved, held.read())
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def compiler_installed(name: str) -> bool:
    import importlib.util

    if name.strip().lower() == "h100":
        try:
            return importlib.util.find_spec("jax_plugins.xla_cuda13") is not None
        except ModuleNotFoundError:
            return False
    return importlib.util.find_spec("libtpu") is not None
