"""The figures of one compiled step: memory per chip, FLOPs, collectives and the step-time
estimates. docs/scaling.md, "Planning a TPU run without a TPU": each column and its source.
"""

import dataclasses
import math
import re

import numpy as np

from bert_jax.plan import hbm, hlo

# Multi-slice programs hand cross-slice collectives to the megascale runtime as sends.
_MEGASCALE = re.compile(r'_xla_megascale_transfer_type="([A-Z_]+)"')


def _logical_bytes(shape: str) -> list[int]:
    """Each array's bytes in a shape text, unpadded: what a collective sends."""
    return [hlo.Array(a.dtype, a.dims, "").nbytes for a in hlo.arrays(shape)]


def replica_groups(attrs: str, num_devices: int) -> list[list[int]] | None:
    """The device groups of one collective's attributes in XLA's spellings ({{0,1},{2,3}},
    [2,2]<=[2,2]T(1,0), mesh['a'=4,'b'=2] {'a'}); None when absent or unreadable."""
    m = re.search(r"replica_groups=\{(\{[\d,]*\}(?:,\{[\d,]*\})*)\}", attrs)
    if m:
        return [[int(x) for x in g.split(",") if x] for g in re.findall(r"\{([\d,]*)\}", m[1])]
    m = re.search(r"replica_groups=\[(\d+),(\d+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", attrs)
    if m:
        dims = [int(d) for d in m[3].split(",")]
        ids = np.arange(math.prod(dims)).reshape(dims)
        if m[4]:
            ids = ids.transpose([int(p) for p in m[4].split(",")])
        return ids.reshape(int(m[1]), int(m[2])).tolist()
    m = re.search(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}", attrs)
    if m:
        axes = re.findall(r"'([^']+)'=(\d+)", m[1])
        names, sizes = [a for a, _ in axes], [int(s) for _, s in axes]
        grouped = [names.index(a) for a in re.findall(r"'([^']+)'", m[2])]
        rest = [i for i in range(len(names)) if i not in grouped]
        ids = np.arange(math.prod(sizes)).reshape(sizes).transpose(rest + grouped)
        return ids.reshape(-1, math.prod(sizes[i] for i in grouped) or 1).tolist()
    if "replica_groups={}" in attrs:  # every device in one group
        return [list(range(num_devices))]
    return None


@dataclasses.dataclass
class Collectives:
    ici_bytes: dict  # op name -> bytes sent per chip over ICI
    dcn_bytes: float  # bytes sent per chip over DCN (multi-slice)
    counts: dict  # op name -> number of ops in the program
    unread: int  # ops whose replica groups could not be read (counted as one-group rings)


def collectives(hlo_text: str, slice_of_device: list[int]) -> Collectives:
    """Bytes each chip sends per step, by collective, as ring algorithms move them;
    `slice_of_device[i]`: the slice of the mesh's i-th device."""
    n_dev = len(slice_of_device)
    ici: dict[str, float] = {}
    counts: dict[str, int] = {}
    dcn, unread = 0.0, 0
    slices = len(set(slice_of_device))
    for run in hbm.runs(hlo.parse_module(hlo_text))[0]:
        ins, times = run.instruction, run.times
        dcn_send = _MEGASCALE.search(ins.attrs) if ins.opcode == "send" else None
        if dcn_send:  # multi-slice: what crosses DCN is a send to the megascale runtime
            kind, size = dcn_send[1], _logical_bytes(ins.shape)[0]
            counts[f"DCN {kind}"] = counts.get(f"DCN {kind}", 0) + times
            ring = 2.0 if kind == "ALL_REDUCE" else 1.0
            dcn += times * ring * (slices - 1) / max(slices, 1) * size
            continue
        op = ins.opcode.removesuffix("-start")
        sizes = _logical_bytes(ins.shape) if op in hlo.COLLECTIVES else []
        if not sizes:
            continue
        # An async start's result holds its operand beside its output: take the buffer once.
        start = ins.opcode.endswith("-start")
        size = max(sizes) if start and op != "all-reduce" else sum(sizes)
        counts[op] = counts.get(op, 0) + times
        if op == "collective-permute":
            ici[op] = ici.get(op, 0.0) + times * size
            continue
        groups = replica_groups(ins.attrs, n_dev)
        if groups is None:
            unread += times
            groups = [list(range(n_dev))]
        group = groups[0]
        n = len(group)
        if n <= 1:
            continue
        s = len({slice_of_device[d] for d in group if d < n_dev}) or 1
        k = n // s  # members within one slice
        ring = {"all-reduce": 2.0, "all-to-all": 1.0}.get(op, 1.0)
        # all-gather's result is the whole buffer; reduce-scatter's is 1/n of it.
        whole = size * n if op == "reduce-scatter" else size
        if k > 1:
            ici[op] = ici.get(op, 0.0) + times * ring * (k - 1) / k * whole
        if s > 1:
            dcn += times * ring * (s - 1) / s * whole / k
    return Collectives(ici, dcn, counts, unread)


@dataclasses.dataclass
class Roofline:
    terms: dict  # "compute", "HBM", "ICI", "DCN" -> seconds
    serial_s: float  # max(compute, HBM) + ICI + DCN
    serial_bound: str  # the largest of the serial sum's terms
    overlapped_s: float  # max(compute, HBM, ICI) + DCN
    overlapped_bound: str


def roofline(cost: dict, coll: Collectives, chip) -> Roofline:
    # One direction of the documented bidirectional ICI bandwidth carries what a chip sends.
    terms = {
        "compute": float(cost.get("flops", 0.0)) / chip.bf16_flops,
        "HBM": float(cost.get("bytes accessed", 0.0)) / chip.hbm_bytes_per_s,
        "ICI": sum(coll.ici_bytes.values()) / (chip.ici_bytes_per_s / 2),
        "DCN": coll.dcn_bytes / chip.dcn_bytes_per_s,
    }
    local = max(("compute", "HBM"), key=terms.get)
    serial = {local: terms[local], "ICI": terms["ICI"], "DCN": terms["DCN"]}
    overlapped = max(("compute", "HBM", "ICI"), key=terms.get)
    return Roofline(
        terms,
        sum(serial.values()),
        max(serial, key=serial.get),
        terms[overlapped] + terms["DCN"],
        overlapped if terms[overlapped] >= terms["DCN"] else "DCN",
    )


def compiler_seconds(cost: dict) -> float | None:
    """The TPU compiler's own step estimate, None where it gives none (a negative number)."""
    optimal = float(cost.get("optimal_seconds", -1.0))
    return optimal if optimal > 0 else None


def memory(compiled) -> dict:
    """memory_analysis() per chip; peak = arguments + outputs - aliased (donated) + temporaries
    + the program's code (which TPU keeps in HBM)."""
    mem = compiled.memory_analysis()
    names = ("argument", "output", "alias", "temp", "code")
    fields = ("argument", "output", "alias", "temp", "generated_code")
    figures = {f"{n}_bytes": getattr(mem, f"{f}_size_in_bytes") for n, f in zip(names, fields)}
    figures["peak_bytes"] = sum(figures.values()) - 2 * figures["alias_bytes"]
    return figures


def cost(compiled) -> dict:
    analysis = compiled.cost_analysis()
    if isinstance(analysis, list):  # older JAX: one dict per program
        analysis = analysis[0]
    keys = ("flops", "bytes accessed", "transcendentals", "optimal_seconds")
    return {k: float(analysis[k]) for k in keys if k in (analysis or {})}


def splash_kernels(hlo_text: str) -> dict[str, int]:
    """{"global": n, "local": n}: the Pallas splash-attention calls in a compiled program. Every
    call reads two int32 arrays (query and key segment ids), a sliding-window layer's a third
    (the positions its mask is computed from); the block tables are int8 below 128 tiles."""
    module = hlo.parse_module(hlo_text)
    shapes = {i.name: i.shape for c in module.values() for i in c.instructions}
    counts = {"global": 0, "local": 0}
    for c in module.values():
        for ins in c.instructions:
            if not ins.name.startswith("splash_mha") or "tpu_custom_call" not in ins.attrs:
                continue
            operands = [a for name in ins.operands for a in hlo.arrays(shapes.get(name, ""))]
            local = sum(a.dtype == "s32" for a in operands) >= 3
            counts["local" if local else "global"] += 1
    return counts
