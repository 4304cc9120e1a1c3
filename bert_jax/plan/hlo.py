"""A compiled program's HLO text (`compiled.as_text()`) read into computations and instructions,
as much as hbm.py needs, and each array's bytes as the chip lays it out. No JAX here. A line:
    [ROOT ]%name = SHAPE opcode(%a, %b), attr=..., metadata={op_name="jit(f)/scope/op" ...}
SHAPE is an array `bf16[16,128,768]{2,1,0:T(8,128)(2,1)S(1)}` or a tuple of them: T(...) the
first tiling (whole tiles), S(n) the memory space (none or S(0) is HBM; docs/scaling.md).
"""

import dataclasses
import functools
import math
import re

# The collective opcodes (an async one's `-start` half adds the suffix).
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all")
_ARRAY = re.compile(r"\b(pred|token|bf16|[fsuc]\d+\w*)\[([0-9,]*)\](?:\{([^}]*)\})?")
_COMPUTATION = re.compile(r"^(ENTRY )?%?([\w.\-]+) \(.*\{\s*$")
_NAME = re.compile(r"%([\w.\-]+)")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_BITS = {"pred": 8, "token": 0, "bf16": 16}
# Instructions that move no bytes.
FREE = set(
    "parameter constant tuple get-tuple-element bitcast after-all add-dependency opt-barrier "
    "partition-id replica-id domain".split()
)


@dataclasses.dataclass(frozen=True)
class Array:
    dtype: str
    dims: tuple[int, ...]
    layout: str  # what the braces held: "1,0:T(8,128)S(1)", or ""

    @property
    def memory_space(self) -> int:
        m = re.search(r"S\((\d+)\)", self.layout)
        return int(m[1]) if m else 0

    @property
    def nbytes(self) -> int:
        """Bytes as stored: padded to whole tiles of the first tiling."""
        bits = _BITS.get(self.dtype)
        if bits is None:
            digits = re.match(r"[fsuc](\d+)", self.dtype)
            bits = int(digits[1]) if digits else 8
        dims = list(self.dims)
        order, _, tiling = self.layout.partition(":")
        tile = re.match(r"T\(([\d,]+)\)", tiling)
        if tile and dims:
            minor_to_major = [int(d) for d in order.split(",") if d] or list(range(len(dims)))[::-1]
            sizes = [int(t) for t in tile[1].split(",")]
            # The tile's last entry covers the most minor dimension, and so on outwards.
            for size, dim in zip(reversed(sizes), minor_to_major, strict=False):
                dims[dim] = math.ceil(dims[dim] / size) * size
            # A tile of more dimensions than the array pads its missing (size 1) ones too.
            dims += sizes[: max(len(sizes) - len(dims), 0)]
        elif tile:  # a scalar is stored in one tile of its own
            dims = [int(t) for t in tile[1].split(",")]
        return math.ceil(math.prod(dims) * bits / 8)

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.dims))}]"


def arrays(shape: str) -> list[Array]:
    """The arrays of a shape text, a tuple's flattened in order."""
    return [
        Array(dtype, tuple(int(d) for d in dims.split(",") if d), layout or "")
        for dtype, dims, layout in _ARRAY.findall(shape)
    ]


@dataclasses.dataclass
class Instruction:
    name: str
    shape: str  # the result's shape text
    opcode: str
    operands: list[str]  # names of the instructions it reads
    attrs: str  # everything after the operand list
    root: bool = False
    args: str = ""  # the operand list as written (a parameter's number, a constant's value)

    @functools.cached_property
    def op_name(self) -> str:
        m = _OP_NAME.search(self.attrs)
        return m[1] if m else ""

    def called(self, attr: str) -> list[str]:
        """Computations named by `attr` (calls, to_apply, body, branch_computations, ...)."""
        m = re.search(rf"\b{attr}=(\{{[^}}]*\}}|%?[\w.\-]+)", self.attrs)
        return _NAME.findall(m[1]) or [m[1].strip("{}%")] if m else []


@dataclasses.dataclass
class Computation:
    name: str
    entry: bool
    instructions: list[Instruction]

    def __post_init__(self):
        self.by_name = {i.name: i for i in self.instructions}
        self.shapes = {i.name: i.shape for i in self.instructions}
        self.parameters = {  # number -> parameter (a fused computation's operands, in order)
            int(i.args): i
            for i in self.instructions
            if i.opcode == "parameter" and i.args.strip().isdigit()
        }

    @property
    def root(self) -> Instruction:
        return next((i for i in self.instructions if i.root), self.instructions[-1])


def _closing(text: str, start: int) -> int:
    """Index just past the bracket that closes the one at text[start]."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    depth, opener, closer = 0, text[start], pairs[text[start]]
    for i in range(start, len(text)):
        if text[i] == opener:
            depth += 1
        elif text[i] == closer:
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


def parse_instruction(line: str) -> Instruction | None:
    """One instruction line, or None for anything else (a comment, a computation's brace)."""
    text = line.strip()
    root = text.startswith("ROOT ")
    text = text.removeprefix("ROOT ")
    name, eq, rest = text.partition(" = ")
    if not eq or (not name.startswith("%") and not re.fullmatch(r"[\w.\-]+", name)):
        return None
    shape_end = _closing(rest, 0) if rest.startswith("(") else rest.find(" ")
    if shape_end <= 0:
        return None
    shape, rest = rest[:shape_end], rest[shape_end:].lstrip()
    m = re.match(r"([\w\-]+)\(", rest)
    if not m:
        return None
    args_end = _closing(rest, m.end() - 1)
    args = rest[m.end() : args_end - 1]
    return Instruction(
        name.lstrip("%"), shape, m[1], _NAME.findall(args), rest[args_end:], root, args
    )


def _statements(text: str):
    """The module's lines, an instruction written over several lines (a Pallas kernel's
    kernel_metadata JSON holds newlines) joined into one."""
    pending = ""
    for line in text.splitlines():
        pending = f"{pending}\n{line}" if pending else line
        if " = " in pending and _unclosed(pending):
            continue
        yield pending
        pending = ""
    if pending:
        yield pending


def _unclosed(text: str) -> bool:
    """Whether brackets outside quoted strings stay open at the end of `text`."""
    if text.count("{") + text.count("(") <= text.count("}") + text.count(")"):
        return False  # the common case, decided without walking the characters
    depth, quoted, escaped = 0, False, False
    for ch in text:
        if quoted:
            quoted, escaped = (ch != '"' or escaped), (ch == "\\" and not escaped)
        elif ch == '"':
            quoted = True
        elif ch in "{(":
            depth += 1
        elif ch in "})":
            depth -= 1
    return depth > 0


def parse_module(text: str) -> dict[str, Computation]:
    out: dict[str, Computation] = {}
    current: tuple[str, bool, list] | None = None
    for line in _statements(text):
        if current is None:
            m = _COMPUTATION.match(line)
            if m:
                current = (m[2], bool(m[1]), [])
            continue
        if line.startswith("}"):
            out[current[0]] = Computation(*current)
            current = None
            continue
        instruction = parse_instruction(line)
        if instruction is not None:
            current[2].append(instruction)
    return out


@dataclasses.dataclass
class Run:
    instruction: Instruction
    times: int
    computation: Computation


def runs(module: dict[str, Computation], cost) -> tuple[list[Run], list[str]]:
    """(every instruction that does work, with its runs per step; notes on how loops and
    conditionals were counted): a `while` body trip-count times, a `conditional`'s costliest
    branch by `cost(run)`, a `call` inline; FREE ones and async pairs' `-done` halves left out."""
    notes: list[str] = []
    entry = next(c for c in module.values() if c.entry)
    return _runs(module, entry, 1, cost, notes), notes


def _runs(module, computation: Computation, times: int, cost, notes: list) -> list[Run]:
    out = []
    for ins in computation.instructions:
        op = ins.opcode
        # A custom call that only reserves a buffer (a loop's stacked outputs) moves no bytes.
        allocation = op == "custom-call" and 'custom_call_target="AllocateBuffer"' in ins.attrs
        if op in FREE or op.endswith("-done") or allocation:
            continue
        if op == "while":
            (body,) = ins.called("body")
            trips, how = trip_count(ins, module)
            notes.append(f"while {ins.name}: its body {body} counted {trips} times ({how})")
            out += _runs(module, module[body], times * trips, cost, notes)
        elif op == "conditional":
            names = ins.called("branch_computations") or (
                ins.called("true_computation") + ins.called("false_computation")
            )
            branches = [(name, _runs(module, module[name], times, cost, notes)) for name in names]
            name, chosen = max(branches, key=lambda b: sum(cost(r) for r in b[1]))
            notes.append(
                f"conditional {ins.name}: its costliest branch {name} counted, "
                f"the other{'s' if len(branches) > 2 else ''} not"
            )
            out += chosen
        elif op == "call":
            out += _runs(module, module[ins.called("to_apply")[0]], times, cost, notes)
        else:
            out.append(Run(ins, times, computation))
    return out


def trip_count(ins: Instruction, module: dict[str, Computation]) -> tuple[int, str]:
    """(runs of a while's body, how that was found): the compiler's known_trip_count, else the one
    integer constant of its condition (a loop from 0 by 1, as lax.scan's), else 1."""
    m = re.search(r'"known_trip_count":\{"n":"(\d+)"', ins.attrs)
    if m:
        return int(m[1]), "known_trip_count"
    condition = module[ins.called("condition")[0]]
    inside = [condition] + [module[c] for i in condition.instructions for c in i.called("calls")]
    bounds = {
        int(i.args)
        for c in inside
        for i in c.instructions
        if i.opcode == "constant" and re.fullmatch(r"[su]\d+", i.shape.split("[")[0])
        if re.fullmatch(r"-?\d+", i.args.strip())
    }
    if len(bounds) == 1 and (bound := bounds.pop()) > 0:
        return bound, "its condition's bound"
    return 1, "trip count unknown: counted once"
