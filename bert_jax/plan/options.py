"""What the planner is asked to plan, from the flags' values, checked before anything compiles."""

import dataclasses
import math
import os

from bert_jax import cli, storage
from bert_jax.data.contract import features
from bert_jax.model import sharding
from bert_jax.plan import chips

STEPS = ("train", "eval", "finetune")
DTYPES = ("bfloat16", "float32")
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")
# Fields the planner reads from --config: a pre-training config has them, a fine-tuning one not.
_NEEDED = (
    "model.num_attention_heads model.intermediate_size model.max_position_embeddings "
    "train.global_batch_size train.grad_accum_steps train.num_train_steps data.max_seq_length "
    "mesh.rules"
).split()


@dataclasses.dataclass
class Request:
    topology: chips.Topology | None  # None: fake CPU devices
    num_devices: int  # devices to compile for (the slice's, or fake CPU devices)
    meshes: list[tuple[int, int, int]]
    remats: list[bool]
    batches: list[int]  # global batch sizes, the config's where the flag said 0
    steps: list[str]


def topology(
    name: str, num_slices: int, num_devices: int | None
) -> tuple[chips.Topology | None, int]:
    """(the slice, its devices), or (None, the fake CPU devices) for `cpu`/`cpu:N`; `num_devices`
    is --topology=cpu's count (None: 256)."""
    if num_devices is not None and name.strip().lower() != "cpu":  # it was ignored, silently
        raise cli.UserError(
            f"--num_devices={num_devices} is for --topology=cpu (that many fake CPU "
            f"devices); --topology={name} has its own count: drop it"
        )
    if name.strip().lower().startswith("cpu"):
        _, colon, count = name.partition(":")
        if colon and not (count.isdigit() and int(count) >= 1):
            raise cli.UserError(f"--topology={name}: give cpu:N with N >= 1 fake CPU devices")
        if num_slices != 1:
            raise cli.UserError(f"--num_slices={num_slices} is for TPU topologies; drop it")
        num_devices = 256 if num_devices is None else num_devices
        if not colon and num_devices < 1:
            raise cli.UserError(f"--num_devices={num_devices} must be at least 1")
        return None, int(count) if colon else num_devices
    slice_ = chips.parse(name, num_slices)
    return slice_, slice_.num_devices


def parse_mesh(text: str) -> tuple[int, int, int]:
    try:
        data, fsdp, tensor = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise cli.UserError(
            f"--meshes: {text!r} must look like 32x8x1 (data x fsdp x tensor)"
        ) from None
    if min(data, fsdp, tensor) < 1:
        raise cli.UserError(f"--meshes: {text!r} has an axis below 1")
    return data, fsdp, tensor


def default_meshes(chip_count: int, num_slices: int, heads: int) -> list[tuple[int, int, int]]:
    """Every data x fsdp x tensor with fsdp, tensor powers of two, tensor <= 4 dividing the
    heads, fsdp x tensor within one slice, data a multiple of the slices."""
    per_slice = chip_count // num_slices
    return [
        (chip_count // (fsdp * tensor), fsdp, tensor)
        for tensor in (1, 2, 4)
        for fsdp in (2**i for i in range(12))
        if not (heads % tensor or per_slice % (fsdp * tensor) or fsdp * tensor > per_slice)
    ]


def check_output_file(flag: str, path: str) -> None:
    """Refuses a `path` this process cannot write (storage.check_paths' rules in a bucket), so a
    long compile's figures are not lost at the end."""
    if storage.is_url(storage.parse(path, f"--{flag}")):
        storage.check_paths({f"--{flag}": path}, outputs=[f"--{flag}"])
        return
    if os.path.isdir(path):
        raise cli.UserError(f"--{flag}={path!r} is a directory; pass a file name")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        what = "is a file" if os.path.exists(parent) else "does not exist"
        raise cli.UserError(f"--{flag}={path!r}: its directory {parent} {what}")
    existed = os.path.exists(path)
    with cli.user_path(f"--{flag}", path), open(path, "a"):
        pass
    if not existed:
        os.remove(path)


def request(flags, config, num_slices: int) -> Request:
    """The plans `flags` (the binary's flag values) ask for on the --config ConfigDict."""
    _check_pretraining_config(config)
    unknown = sorted(set(flags.steps) - set(STEPS))
    if unknown or not flags.steps:
        raise cli.UserError(f"--steps={','.join(flags.steps)}: choose from {', '.join(STEPS)}")
    if any(r.lower() not in _TRUE + _FALSE for r in flags.remat):
        raise cli.UserError(f"--remat={','.join(flags.remat)}: give true or false")
    remats = [r.lower() in _TRUE for r in flags.remat]
    if not remats:
        raise cli.UserError("--remat: give true, false or both")
    _scalar_checks(flags, config)
    if flags.json_out:
        check_output_file("json_out", flags.json_out)
    if flags.hlo_dir:
        storage.check_paths({"--hlo_dir": flags.hlo_dir}, outputs=["--hlo_dir"])
        cli.check_writable_dir(flags.hlo_dir, "--hlo_dir")  # nothing to probe in a bucket
        storage.makedirs(flags.hlo_dir)

    slice_, count = topology(flags.topology, num_slices, flags.num_devices)
    heads = config.model.num_attention_heads
    slices = slice_.num_slices if slice_ else 1
    meshes = [parse_mesh(m) for m in flags.meshes] or default_meshes(count, slices, heads)
    for mesh in meshes:
        _check_mesh(mesh, count, slices, config.model)

    batches = []
    try:
        sizes = [int(v) for v in flags.global_batch_sizes]
    except ValueError:
        given = ",".join(flags.global_batch_sizes)
        raise cli.UserError(f"--global_batch_sizes={given}: give whole numbers") from None
    for b in sizes:
        if b < 0:
            raise cli.UserError(
                f"--global_batch_sizes: {b} is negative; give sequences per step (0: the config's)"
            )
        batches.append(b or config.train.global_batch_size)
    if not batches:
        raise cli.UserError("--global_batch_sizes: give at least one (0: the config's)")
    accum = config.train.grad_accum_steps
    for mesh in meshes:
        axes = dict(zip(("data", "fsdp", "tensor"), mesh, strict=True))
        dp = math.prod(sharding.data_parallel_axes(axes, config.mesh.rules).values())
        for b in batches:
            if accum >= 1 and b % (dp * accum):
                raise cli.UserError(
                    f"--global_batch_sizes: {b} does not split over mesh {_name(mesh)}'s "
                    f"{dp} data-parallel devices"
                    + (f" x {accum} accumulation steps" if accum > 1 else "")
                    + f"; give a multiple of {dp * accum}"
                )
    return Request(slice_, count, meshes, remats, batches, list(flags.steps))


def _check_pretraining_config(config) -> None:
    for dotted in _NEEDED:
        node = config
        for key in dotted.split("."):
            if not hasattr(node, "keys") or key not in node:
                raise cli.UserError(
                    f"--config has no {dotted}: not a pre-training config (configs/bert_base.py "
                    "and the like; a fine-tuning config goes to --finetune_config)"
                )
            node = node[key]


def _scalar_checks(flags, config) -> None:
    for name, low in (("seq_len", 0), ("num_layers", 0), ("vocab_size", 1), ("top", 0)):
        value = getattr(flags, name)
        if value is not None and value < low:  # None: the config's
            raise cli.UserError(f"--{name}={value} must be at least {low}")
    if flags.seq_len:
        features.check_seq_length(flags.seq_len, 2, "--seq_len")
        positions = config.model.max_position_embeddings
        if flags.seq_len > positions:
            raise cli.UserError(
                f"--seq_len={flags.seq_len} is past the model's {positions} positions "
                "(model.max_position_embeddings)"
            )
    if flags.dtype not in DTYPES:
        raise cli.UserError(f"--dtype={flags.dtype}: choose {' or '.join(DTYPES)}")
    p = flags.attention_dropout
    if p != -1 and not 0 <= p < 1:  # NaN fails both
        raise cli.UserError(f"--attention_dropout={p} must be in [0, 1) (or -1: the config's)")


def _name(mesh) -> str:
    return "x".join(map(str, mesh))


def _check_mesh(mesh, count: int, slices: int, model) -> None:
    data, fsdp, tensor = mesh
    if data * fsdp * tensor != count:
        raise cli.UserError(
            f"--meshes: {_name(mesh)} has {data * fsdp * tensor} devices; the topology has {count}"
        )
    for field in ("num_attention_heads", "intermediate_size"):
        if getattr(model, field) % tensor:
            raise cli.UserError(
                f"--meshes: {_name(mesh)}'s tensor axis {tensor} must divide the model's "
                f"{field}={getattr(model, field)} (it splits the heads and the MLP width)"
            )
    if data % slices:
        raise cli.UserError(
            f"--meshes: {_name(mesh)}'s data axis must be a multiple of the {slices} slices "
            "(data parallelism spans the slices; fsdp and tensor stay within one)"
        )
