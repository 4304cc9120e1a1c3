"""The device mesh ('data', 'fsdp', 'tensor') and every sharding decision: logical axis names ->
mesh axes by `config.mesh.rules`, applied only here. docs/training.md, "Mesh and sharding"."""

import contextlib
import logging
import math
import os
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx
from jax.experimental import mesh_utils
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from bert_jax import cli

MESH_AXES = ("data", "fsdp", "tensor")
# The logical axes the model's layers name (model/layers.py), which config.mesh.rules maps.
LOGICAL_AXIS_NAMES = ("vocab", "embed", "heads", "mlp", "norm", "batch", "length", "kv")

# The TPU's "windowed einsum" made BERT-Large's step slower (docs/scaling.md): off by default.
TPU_COMPILER_FLAGS = (
    "--xla_tpu_enable_windowed_einsum_for_reduce_scatter=false",
    "--xla_tpu_enable_windowed_einsum_for_all_gather=false",
)


def use_tpu_compiler_flags(environ=os.environ) -> None:
    """Adds TPU_COMPILER_FLAGS the variable lacks; call before JAX first uses a TPU."""
    current = environ.get("LIBTPU_INIT_ARGS", "")
    extra = [f for f in TPU_COMPILER_FLAGS if f.split("=")[0] not in current]
    if extra:
        environ["LIBTPU_INIT_ARGS"] = " ".join([current, *extra]).strip()


def mesh_shape(data: int, fsdp: int, tensor: int, num_devices: int) -> tuple[int, int, int]:
    """Resolves one -1 axis to use all devices; checks that the product equals `num_devices`."""
    sizes = [data, fsdp, tensor]
    if sizes.count(-1) > 1:
        raise cli.UserError(
            f"at most one mesh axis may be -1, got data={data} fsdp={fsdp} tensor={tensor}"
        )
    if any(s == 0 or s < -1 for s in sizes):
        raise cli.UserError(f"mesh axis sizes must be positive or -1, got {sizes}")
    known = math.prod(s for s in sizes if s != -1)
    if -1 in sizes:
        if num_devices % known:
            raise cli.UserError(
                f"mesh {dict(zip(MESH_AXES, sizes))}: {num_devices} devices are not divisible "
                f"by {known}"
            )
        sizes[sizes.index(-1)] = num_devices // known
    if math.prod(sizes) != num_devices:
        raise cli.UserError(
            f"mesh {dict(zip(MESH_AXES, sizes))} needs {math.prod(sizes)} devices, there are "
            f"{num_devices}; set config.mesh.data=-1 to use them all"
        )
    return tuple(sizes)


def num_slices(devices: Sequence[jax.Device]) -> int:
    """How many TPU slices `devices` span; 1 for devices without a slice_index (CPU, GPU)."""
    return len({getattr(d, "slice_index", 0) for d in devices})


def make_mesh(
    data: int = -1, fsdp: int = 1, tensor: int = 1, devices: Sequence[jax.Device] | None = None
) -> Mesh:
    """A ('data', 'fsdp', 'tensor') mesh over `devices` (default: all of all processes). Across
    TPU slices only 'data' spans them, keeping fsdp and tensor traffic off the slower DCN
    (docs/scaling.md, "Which mesh")."""
    devices = list(jax.devices() if devices is None else devices)
    shape = mesh_shape(data, fsdp, tensor, len(devices))
    slices = num_slices(devices)
    if slices == 1:
        # Splits a physical axis rather than failing (data=8 on a 4x4x4 v5p).
        grid = mesh_utils.create_device_mesh(shape, devices, allow_split_physical_axes=True)
    elif shape[0] % slices:
        raise cli.UserError(
            f"mesh {dict(zip(MESH_AXES, shape))} on {slices} TPU slices: 'data' must be a "
            f"multiple of the slice count (data parallelism spans the slices; fsdp and tensor "
            f"stay within one)"
        )
    else:
        within = (shape[0] // slices, shape[1], shape[2])
        grid = mesh_utils.create_hybrid_device_mesh(
            within, (slices, 1, 1), devices, allow_split_physical_axes=True
        )
    # Auto axes: JAX >= 0.9 defaults to Explicit, which changes how jit treats unannotated values.
    return Mesh(grid, MESH_AXES, axis_types=(AxisType.Auto,) * 3)


def mesh_from_config(
    mesh_config, num_attention_heads: int, devices: Sequence[jax.Device] | None = None
) -> tuple[Mesh, tuple]:
    """(mesh, normalized rules) of a `config.mesh` block, checked against the model's heads."""
    if devices is None:
        devices = jax.devices()
        if mesh_config.num_devices:
            if jax.process_count() > 1:
                raise cli.UserError(
                    "config.mesh.num_devices is for single-process runs; set it to 0"
                )
            devices = devices[: mesh_config.num_devices]
    mesh = make_mesh(mesh_config.data, mesh_config.fsdp, mesh_config.tensor, devices)
    if num_attention_heads % mesh.shape["tensor"]:
        raise cli.UserError(
            f"config.mesh.tensor={mesh.shape['tensor']} must divide "
            f"num_attention_heads={num_attention_heads} (the model's)"
        )
    rules = normalize_rules(mesh_config.rules)
    check_batch_split(mesh, rules, jax.process_count())
    return mesh, rules


def check_batch_split(mesh: Mesh, rules, process_count: int, process_of=None) -> None:
    """Refuses a mesh whose batch axes do not give each process rows of its own (each feeds its
    own: docs/training.md, "Mesh and sharding"); `process_of(device)`: its process."""
    if process_count == 1:
        return
    process_of = process_of or (lambda d: d.process_index)
    ways = data_parallel_size(mesh, rules)
    rows: dict[int, set[int]] = {}
    for device, index in batch_sharding(mesh, rules).devices_indices_map((ways,)).items():
        rows.setdefault(process_of(device), set()).add(index[0].start or 0)
    if sum(map(len, rows.values())) != ways or any(
        len(r) * process_count != ways for r in rows.values()
    ):
        axes = data_parallel_axes(dict(mesh.shape), rules)
        raise cli.UserError(
            f"mesh {dict(mesh.shape)} splits the batch {ways} way(s) ({axes}), which does not "
            f"give each of the {process_count} processes rows of its own (each reads its own "
            f"part of the data); make the batch's axes (data x fsdp) a multiple of "
            f"{process_count}, e.g. config.mesh.data={process_count}"
        )


@contextlib.contextmanager
def activate(mesh: Mesh, rules):
    """The mesh and logical rules under which the model adds activation sharding constraints."""
    with jax.set_mesh(mesh), nnx.logical_axis_rules(rules):
        yield


def normalize_rules(rules) -> tuple[tuple[str, tuple[str, ...] | None], ...]:
    """config.mesh.rules (lists after a JSON round trip) -> checked, hashable rules for
    nnx.logical_axis_rules. Unknown or repeated names would be ignored silently: refused."""
    if not isinstance(rules, (list, tuple)):  # --config.mesh.rules=None, =3
        raise cli.UserError(
            f"mesh.rules={rules!r} must be a list of (logical_name, mesh_axes) pairs"
        )
    out = []
    for rule in rules:
        if not isinstance(rule, (list, tuple)) or len(rule) != 2 or not isinstance(rule[0], str):
            raise cli.UserError(f"mesh rule {rule!r} must be a pair (logical_name, mesh_axes)")
        logical, mesh_axes = rule
        axes = (mesh_axes,) if isinstance(mesh_axes, str) else mesh_axes
        if axes is not None:
            if not isinstance(axes, (list, tuple)) or not all(isinstance(a, str) for a in axes):
                raise cli.UserError(
                    f"mesh rule {logical!r} -> {mesh_axes!r}: mesh_axes must be a mesh axis "
                    f"name, a tuple of them or None (the mesh axes: {MESH_AXES})"
                )
            axes = tuple(axes)
            if unknown := [a for a in axes if a not in MESH_AXES]:
                raise cli.UserError(
                    f"mesh rule {logical!r} -> {axes} names unknown mesh axes {unknown}; "
                    f"use {MESH_AXES}"
                )
        out.append((logical, axes))
    names = [logical for logical, _ in out]
    unknown = [n for n in names if n not in LOGICAL_AXIS_NAMES]
    twice = sorted({n for n in names if names.count(n) > 1})
    problems = []
    if unknown:
        problems.append(
            f"mesh.rules names logical axes the model does not have: {unknown}; the model's "
            f"are {LOGICAL_AXIS_NAMES}"
        )
    if twice:
        problems.append(f"mesh.rules has more than one rule for {twice}: one rule per name")
    if problems:
        raise cli.UserError("; ".join(problems))
    return tuple(out)


def _rules_dict(rules) -> dict[str, tuple[str, ...]]:
    return {logical: axes or () for logical, axes in normalize_rules(rules)}


def logical_to_mesh_spec(
    logical: Sequence[str | None], shape: Sequence[int], mesh: Mesh, rules
) -> P:
    """Logical axis names -> a PartitionSpec; a dimension its mesh axes do not divide is unsplit."""
    table = _rules_dict(rules)
    used: set[str] = set()
    spec = []
    for name, size in zip(logical, shape):
        axes = tuple(
            a
            for a in table.get(name, ())
            if name is not None and mesh.shape[a] > 1 and a not in used
        )
        if axes and size % math.prod(mesh.shape[a] for a in axes):
            logging.info("not splitting dim %r of size %d over %s: not divisible", name, size, axes)
            axes = ()
        used.update(axes)
        spec.append(axes[0] if len(axes) == 1 else (axes or None))
    return P(*spec)


def param_shardings(abstract_state: nnx.State, mesh: Mesh, rules) -> dict:
    """Pure-dict tree of NamedShardings for the parameters of an abstract nnx.State."""
    logical = nnx.to_pure_dict(nnx.get_partition_spec(abstract_state))
    shapes = nnx.to_pure_dict(abstract_state)
    return jax.tree.map(
        lambda spec, x: NamedSharding(
            mesh, logical_to_mesh_spec(tuple(spec), x.shape, mesh, rules)
        ),
        logical,
        shapes,
        is_leaf=lambda s: isinstance(s, P),
    )


def _dict_path(key_path) -> tuple:
    return tuple(k.key for k in key_path if isinstance(k, jax.tree_util.DictKey))


def tree_shardings_like_params(tree: Any, params_shardings: dict, mesh: Mesh) -> Any:
    """Shardings of an optax state: a parameter's for a leaf at its path's end, else replicated."""
    by_path = {
        _dict_path(path): s for path, s in jax.tree_util.tree_flatten_with_path(params_shardings)[0]
    }
    replicated = NamedSharding(mesh, P())

    def leaf(path, x):
        keys = _dict_path(path)
        for start in range(len(keys)):
            s = by_path.get(keys[start:])
            if s is not None and len(s.spec) <= len(x.shape):
                return s
        return replicated

    return jax.tree_util.tree_map_with_path(leaf, tree)


def update_sharding(param: NamedSharding, shape: Sequence[int], rules) -> NamedSharding:
    """A chip's share of a parameter's optimizer update: its sharding split further over the
    batch's free mesh axes along the first dimension they divide (docs/training.md, "Mesh and
    sharding"), else unchanged."""
    mesh = param.mesh
    spec = list(param.spec) + [None] * (len(shape) - len(param.spec))
    used = {a for entry in spec for a in ((entry,) if isinstance(entry, str) else entry or ())}
    free = [a for a in _rules_dict(rules).get("batch", ()) if a not in used and mesh.shape[a] > 1]
    # All the free batch axes if some dimension takes them, else the largest single one.
    for axes in [tuple(free)] + sorted(((a,) for a in free), key=lambda a: -mesh.shape[a[0]]):
        if not axes:
            break
        ways = math.prod(mesh.shape[a] for a in axes)
        for d, size in enumerate(shape):
            entry = spec[d]
            have = (entry,) if isinstance(entry, str) else tuple(entry or ())
            share = size // math.prod(mesh.shape[a] for a in have)
            if share % ways == 0 and share >= ways:
                new = have + axes
                spec[d] = new[0] if len(new) == 1 else new
                return NamedSharding(mesh, P(*spec))
    return param


def update_shardings(param_shardings: Any, abstract_params: Any, rules) -> Any:
    return jax.tree.map(
        lambda s, x: update_sharding(s, x.shape, rules), param_shardings, abstract_params
    )


def batch_spec(rules) -> P:
    return P(_rules_dict(rules).get("batch", ()) or None)


def batch_sharding(mesh: Mesh, rules) -> NamedSharding:
    return NamedSharding(mesh, batch_spec(rules))


def data_parallel_size(mesh: Mesh, rules) -> int:
    return math.prod(data_parallel_axes(dict(mesh.shape), rules).values())


def data_parallel_axes(shape: dict[str, int], rules) -> dict[str, int]:
    """{mesh axis: size} the batch is split over, from a mesh's shape (usable before a mesh)."""
    return {a: shape[a] for a in _rules_dict(rules).get("batch", ())}


def host_to_global(batch: dict[str, np.ndarray], sharding: NamedSharding) -> dict[str, jax.Array]:
    return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in batch.items()}
