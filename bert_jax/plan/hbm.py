"""Where a compiled step's HBM bytes go, per chip, read from its HLO: every top-level instruction
reads its operands and writes its result, counted as stored and only where they live in HBM,
grouped by the jax.named_scope names in their op_name (GROUPS).
docs/scaling.md, "Where the HBM bytes go": every rule in full.
"""

import collections
import dataclasses
import functools
import re

from bert_jax.plan import hlo

_COLLECTIVES = (*hlo.COLLECTIVES, "send", "recv")
_CALLS = ("branch_computations", "true_computation", "false_computation", "body", "to_apply")
_SLICES = ("slice", "dynamic-slice", "slice-start", "gather")
_UPDATES = ("dynamic-update-slice", "scatter")


def _scope(*names: str) -> re.Pattern:
    """An op_name path component that is one of `names`, bare or inside jvp(...) and the like."""
    return re.compile(r"(?:^|[/(])(?:" + "|".join(names) + r")(?:[)/]|$)")


# (group, op_name pattern), first match wins: the backward pass keeps the forward's scope names
# under transpose(jvp(...)), so the embedding gradient is told from the forward lookup by it.
GROUPS = (
    ("optimizer update", _scope("optimizer")),
    ("gradient norm", _scope("grad_norm")),
    ("dropout bits (RNG)", re.compile(r"threefry|random_bits|rng_bit_generator")),
    ("embedding gradient", re.compile(r"transpose\(jvp\(embeddings\)\)")),
    # Outside the model, a parameter's cast or copy is named by its path in the train state.
    ("parameter casts and copies", re.compile(r"^(state|params)\[")),
    ("embedding forward", _scope("embeddings")),
    ("MLM head and loss", _scope("mlm_head", "mlm_loss")),
    ("NSP head and loss", _scope("nsp_head", "nsp_loss")),
    ("attention", _scope("attention")),
    ("feed-forward", _scope("ffn")),
    ("layer norms and residuals", _scope("norm_residual")),
    # A scanned layer's unnamed loop plumbing: the activations saved for the backward pass.
    (
        "scanned layers: saved activations",
        re.compile(r"/while/.*(?:dynamic_slice|dynamic_update_slice|squeeze)[^/]*$"),
    ),
)
OTHER = "other"


def group_of(instruction: hlo.Instruction) -> str:
    return _group(instruction.opcode, instruction.op_name)


@functools.lru_cache(maxsize=65536)
def _group(opcode: str, op_name: str) -> str:
    base = opcode.removesuffix("-start")
    if base in _COLLECTIVES:
        return f"collectives: {base}"
    if opcode == "rng-bit-generator":
        return "dropout bits (RNG)"
    return next((group for group, pattern in GROUPS if pattern.search(op_name)), OTHER)


@dataclasses.dataclass
class OpBytes:
    name: str
    opcode: str  # "fusion (kLoop)" for a fusion
    result: str  # its result's arrays, "bf16[16,128,768]"
    operands: str
    bytes: int  # HBM bytes read + written, over all its runs
    onchip: int  # the same in on-chip memory (VMEM, v4's CMEM): not in `bytes`
    times: int  # runs per step (a loop body's trip count)
    group: str


@dataclasses.dataclass
class Attribution:
    total_bytes: int
    onchip_bytes: int  # operand and result bytes in on-chip memory: not in total_bytes
    groups: dict[str, int]  # group -> HBM bytes, largest first
    onchip_groups: dict[str, int]  # group -> on-chip bytes
    ops: list[OpBytes]  # every counted instruction, most bytes first
    notes: list[str]  # loops and conditionals: how they were counted

    @property
    def repeats(self) -> bool:
        """Whether some instruction runs more than once a step (a loop body's)."""
        return any(op.times > 1 for op in self.ops)

    def to_json(self, top: int) -> dict:
        return {
            "total_bytes": self.total_bytes,
            "onchip_bytes": self.onchip_bytes,
            "groups": self.groups,
            "onchip_groups": self.onchip_groups,
            "top": [dataclasses.asdict(op) for op in self.ops[:top]],
            "notes": self.notes,
        }


def runs(module: dict[str, hlo.Computation]) -> tuple[list[hlo.Run], list[str]]:
    """hlo.runs, a conditional's branch chosen by HBM bytes."""
    return hlo.runs(module, lambda run: _traffic(run, module)[0] * run.times)


def attribute(hlo_text: str) -> Attribution:
    module = hlo.parse_module(hlo_text)
    runs_, notes = runs(module)
    groups_of = {}  # computation name -> its instructions' groups
    ops: list[OpBytes] = []
    onchip = 0
    for run in runs_:
        ins, computation = run.instruction, run.computation
        if computation.name not in groups_of:
            groups_of[computation.name] = _groups(computation, module)
        hbm, on = _traffic(run, module)
        onchip += on * run.times
        kind = re.search(r"\bkind=(\w+)", ins.attrs) if ins.opcode == "fusion" else None
        operands = [computation.by_name[n].shape for n in ins.operands if n in computation.by_name]
        ops.append(
            OpBytes(
                name=ins.name,
                opcode=f"fusion ({kind[1]})" if kind else ins.opcode,
                result=_summary(hlo.arrays(ins.shape)),
                operands=_summary([a for shape in operands for a in hlo.arrays(shape)]),
                bytes=hbm * run.times,
                onchip=on * run.times,
                times=run.times,
                group=groups_of[computation.name][ins.name],
            )
        )
    ops.sort(key=lambda op: -op.bytes)
    groups, onchip_groups = collections.Counter(), collections.Counter()
    for op in ops:
        groups[op.group] += op.bytes
        onchip_groups[op.group] += op.onchip
    groups = dict(groups.most_common())
    return Attribution(sum(groups.values()), onchip, groups, dict(onchip_groups), ops, notes)


def _groups(computation, module) -> dict[str, str]:
    """instruction name -> group: its own op_name's; for one the compiler added without one
    (prefetches, layout copies), the nearest named instruction's that uses its result (breadth
    first), else of the nearest that made its operands, else OTHER."""
    users: dict[str, list] = {}
    for i in computation.instructions:
        for name in i.operands:
            users.setdefault(name, []).append(i)
    by_name = computation.by_name
    called: dict[str, str] = {}  # a conditional's, while's or call's group (_called_group)

    def nearest(start: hlo.Instruction, step) -> str:
        queue, seen = list(step(start)), set()
        while queue:
            ins = queue.pop(0)
            if ins.name in seen:
                continue
            seen.add(ins.name)
            group = group_of(ins)
            if group == OTHER and ins.opcode in ("conditional", "while", "call"):
                if ins.name not in called:
                    called[ins.name] = _called_group(ins, module)
                group = called[ins.name]
            if group != OTHER:
                return group
            if not ins.op_name:
                queue.extend(step(ins))
        return OTHER

    out = {}
    for ins in computation.instructions:
        group = group_of(ins)
        if group == OTHER and not ins.op_name:
            group = nearest(ins, lambda i: users.get(i.name, []))  # its consumers
            if group == OTHER:  # its producers
                group = nearest(ins, lambda i: [by_name[n] for n in i.operands if n in by_name])
        out[ins.name] = group
    return out


def _called_group(ins: hlo.Instruction, module) -> str:
    """The group most instructions of what a conditional, while or call runs belong to."""
    names = [n for attr in _CALLS for n in ins.called(attr)]
    count = collections.Counter(
        group_of(i) for name in names for i in module[name].instructions if i.op_name
    )
    count.pop(OTHER, None)
    return max(count, key=count.get) if count else OTHER


def _traffic(run: hlo.Run, module) -> tuple[int, int]:
    """(HBM bytes, on-chip bytes) one run of an instruction reads and writes."""
    ins = run.instruction
    shapes = run.computation.shapes
    operands = [hlo.arrays(shapes.get(name, "")) for name in ins.operands]
    results: list = hlo.arrays(ins.shape)
    if ins.opcode.endswith("-start"):  # its result tuple repeats its operands: drop them
        for a in (a for arrays in operands for a in arrays):
            if a in results:
                results.remove(a)
    part: dict[int, int] = _partial_reads(ins, results, module)  # operand -> bytes it reads
    written = 0  # in place: what an update writes into its operand's buffer
    for operand, result, update_bytes in _in_place(ins, shapes, module):
        if operand < len(operands) and result < len(results) and results[result] is not None:
            written += update_bytes if results[result].memory_space == 0 else 0
            part[operand], results[result] = 0, None
    hbm = onchip = 0
    for k, a in [(k, a) for k, arrays in enumerate(operands) for a in arrays] + [
        (-1, a) for a in results if a is not None
    ]:
        size = min(a.nbytes, part.get(k, a.nbytes))
        if a.memory_space == 0:
            hbm += size
        else:
            onchip += size
    return hbm + written, onchip


def _partial_reads(ins: hlo.Instruction, results: list, module) -> dict[int, int]:
    """operand index -> bytes read, for operands read only in part: a slice's or gather's
    operand 0, a fusion's parameters that only slices and gathers use (nested fusions too: a
    scanned layer's stacked weights are sliced one layer deep inside)."""
    if ins.opcode in _SLICES and results:
        return {0: results[0].nbytes}
    if ins.opcode != "fusion" or not ins.called("calls"):
        return {}
    fused = module[ins.called("calls")[0]]
    reads = {k: _sliced_bytes(param, fused, module) for k, param in fused.parameters.items()}
    return {k: read for k, read in reads.items() if read}


def _sliced_bytes(param: hlo.Instruction, fused: hlo.Computation, module) -> int | None:
    """Bytes a fused computation reads of its parameter `param` when every use slices it
    (through bitcasts and nested fusions), else None (read whole)."""
    users: dict[str, list] = {}
    for i in fused.instructions:
        for k, name in enumerate(i.operands):
            users.setdefault(name, []).append((k, i))
    read, pending = 0, [param.name]
    while pending:
        for k, user in users.get(pending.pop(), []):
            if user.opcode == "bitcast":
                pending.append(user.name)
            elif user.opcode in _SLICES and k == 0:
                read += sum(a.nbytes for a in hlo.arrays(user.shape))
            elif user.opcode == "fusion" and user.called("calls"):
                nested = module[user.called("calls")[0]]
                inner = nested.parameters.get(k)
                part = _sliced_bytes(inner, nested, module) if inner is not None else None
                if not part:
                    return None
                read += part
            else:
                return None
    return read or None


def _update_bytes(update: hlo.Instruction, shapes: dict) -> int:
    """A dynamic-update-slice writes its update; a scatter reads and writes the rows it touches."""
    if update.opcode == "dynamic-update-slice":
        return sum(a.nbytes for a in hlo.arrays(shapes.get(update.operands[1], "")))
    return 2 * sum(a.nbytes for a in hlo.arrays(shapes.get(update.operands[-1], "")))


def _in_place(ins: hlo.Instruction, shapes: dict, module) -> list[tuple[int, int, int]]:
    """(operand index, result index, bytes written) of each in-place update `ins` makes."""
    if ins.opcode in _UPDATES and len(ins.operands) >= 2:
        return [(0, 0, _update_bytes(ins, shapes))]
    if ins.opcode != "fusion" or not ins.called("calls"):
        return []
    fused = module[ins.called("calls")[0]]
    root = fused.root
    elements = root.operands if root.opcode == "tuple" else [root.name]
    out = []
    for k, name in enumerate(elements):
        update = fused.by_name[name]
        while update.opcode == "bitcast" and update.operands:  # a scan's stacked buffer
            update = fused.by_name[update.operands[0]]
        if update.opcode not in _UPDATES or len(update.operands) < 2:
            continue
        buffer = fused.by_name[update.operands[0]]
        while buffer.opcode == "bitcast" and buffer.operands:
            buffer = fused.by_name[buffer.operands[0]]
        if buffer.opcode == "parameter" and buffer.args.strip().isdigit():
            out.append((int(buffer.args), k, _update_bytes(update, fused.shapes)))
    return out


def _summary(arrays: list, limit: int = 3) -> str:
    text = ", ".join(map(str, arrays[:limit]))
    return text + (f", ... ({len(arrays)} arrays)" if len(arrays) > limit else "")
