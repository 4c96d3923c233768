"""
What the snowflake_asm passes need to know about instructions: which are no-ops, which touch
the machine (vector ops and loads/stores, kept in program order by every pass), which
register dependencies order two instructions, where basic blocks and delay slots are, and
which register values straight-line code makes known.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from xdsl.ir import Operation
from xdsl.utils.exceptions import PassFailedException

from snowir.dialects import snowflake_asm as sf
from snowir.dialects.snowflake_asm.isa import Instruction, Kind


def _entry(kind: type) -> Instruction | None:
    return getattr(kind, "ISA_ENTRY", None)


def is_scalar(op: Operation) -> bool:
    """A scalar instruction of the control pipeline (its record's kind), decided once a class."""
    kind = type(op)
    scalar = _SCALAR.get(kind)
    if scalar is None:
        entry = _entry(kind)
        scalar = _SCALAR[kind] = entry is not None and entry.kind is Kind.SCALAR
    return scalar


_SCALAR: dict[type, bool] = {}

INSTRUCTION_ROLES = frozenset({sf.ProgramRole.INSTRUCTION, sf.ProgramRole.BRANCH})
"""`sf.program_role(type(op)) in INSTRUCTION_ROLES`: `isinstance(op, sf.SnowflakeInstruction)` as one
look-up a class (the passes ask it of every op of every program)."""
LABEL_OR_BRANCH = frozenset({sf.ProgramRole.LABEL, sf.ProgramRole.BRANCH})


def is_nop(op: Operation) -> bool:
    """A scalar op writing r0 (which reads as zero): it only takes an issue slot."""
    return is_scalar(op) and op.writes() == 0  # type: ignore[attr-defined]


def is_machine(op: Operation) -> bool:
    """Vector ops and loads/stores: what the CUs, buffers and load units see. Passes keep
    these in program order (buffer hazards, the vector queue and load IDs depend on it)."""
    kind = type(op)
    machine = _MACHINE.get(kind)
    if machine is None:
        entry = _entry(kind)
        machine = _MACHINE[kind] = entry is not None and entry.kind in (Kind.VECTOR, Kind.MEMORY)
    return machine


_MACHINE: dict[type, bool] = {}


def _writes(op: sf.SnowflakeInstruction) -> set[int]:
    w = op.writes()
    return {w} if w else set()


def depends(earlier: sf.SnowflakeInstruction, later: sf.SnowflakeInstruction) -> bool:
    """True when `later` must stay after `earlier`: a register read after write, write after
    read or write after write (r0 excluded), or both touch the machine."""
    if is_machine(earlier) and is_machine(later):
        return True
    we, wl = _writes(earlier), _writes(later)
    return bool(we & set(later.reads()) or wl & set(earlier.reads()) or we & wl)


def raw_pairs(window: Sequence[sf.SnowflakeInstruction]) -> int:
    """True read-after-write pairs inside a delay-slot window (C17 §4 allows one)."""
    pairs = 0
    for i, producer in enumerate(window):
        w = producer.writes()
        if not w:
            continue
        for consumer in window[i + 1:]:
            if w in consumer.reads():
                pairs += 1
            if consumer.writes() == w:
                break
    return pairs


def body_ops(program: sf.ProgramOp) -> list[Operation]:
    """The program's instructions and labels in order (`list(block.ops)` walks the block twice:
    once to size the list)."""
    out: list[Operation] = []
    op = program.body.block.first_op
    while op is not None:
        out.append(op)
        op = op.next_op
    return out


def replace_body(program: sf.ProgramOp, ops: Sequence[Operation]) -> None:
    """The program's instructions and labels become `ops`, in that order. Only what moves is
    moved: a pass that reorders a few instructions of 10^4 does not relink the other 10^4."""
    block = program.body.block
    wanted = {id(op) for op in ops}
    for old in body_ops(program):
        if id(old) not in wanted:
            old.detach()
    at = block.first_op
    for op in ops:
        if op is at:
            at = op.next_op
            continue
        if op.parent is not None:
            op.detach()
        if at is None:
            block.add_op(op)
        else:
            block.insert_op_before(op, at)


def programs(module: Operation) -> Iterator[sf.ProgramOp]:
    """Every program of a module: top-level ones and those inside `snowflake_asm.image`s."""
    for op in outside_programs(module):
        if isinstance(op, sf.ProgramOp):
            yield op


def rewritable_programs(module: Operation, pass_name: str) -> list[sf.ProgramOp]:
    """The programs a pass that moves instructions (balance-loads, schedule-asm,
    fill-delay-slots) rewrites: every program of the module. It cannot act on one icache-banking
    laid out, or one that loads its own instruction cache (moving its instructions would move
    loops across bank boundaries), nor on a segment program link-segments joined (its layers'
    code was rewritten before; the pass runs on each layer's program): such a program is refused
    in one line naming it and saying where the pass goes, rather than left as it is in silence."""
    out = []
    for program in programs(module):
        parent = program.parent_op()
        name = f"{parent.sym_name.data}.{program.sym_name.data}" if isinstance(parent, sf.ImageOp) \
            else program.sym_name.data
        if _linked(program):
            raise PassFailedException(f"{pass_name}: program @{name} is a segment link-segments joined; "
                                      f"run {pass_name} before link-segments (as snowflake-lower does)")
        if is_banked(program):
            raise PassFailedException(f"{pass_name}: program @{name} loads its own instruction cache (icache-banking "
                                      f"laid it out, or its author); run {pass_name} before icache-banking")
        out.append(program)
    return out


def finished_programs_only(module: Operation) -> bool:
    """The module holds programs, and every one is linked or banked (snowflake-lower's output):
    nothing is left for the rewriting asm passes."""
    found = list(programs(module))
    return bool(found) and all(_linked(p) or is_banked(p) for p in found)


def _linked(program: sf.ProgramOp) -> bool:
    parent = program.parent_op()
    return isinstance(parent, sf.ImageOp) and "segment" in parent.attributes


def outside_programs(op: Operation) -> Iterator[Operation]:
    """`op` and what it holds, not descending into programs (10^5 instructions a walk)."""
    yield op
    if isinstance(op, sf.ProgramOp):
        return
    for region in op.regions:
        for block in region.blocks:
            for inner in block.ops:
                yield from outside_programs(inner)


def is_banked(program: sf.ProgramOp) -> bool:
    """The program loads its own instruction cache: icache-banking (or its author) laid it out
    (a two-block program loads nothing; icache-banking marks it `banked`)."""
    if "banked" in program.attributes:
        return True
    op = program.body.block.first_op
    while op is not None:
        if type(op) is sf.LdOp and op.target.data == sf.LoadTarget.ICACHE:
            return True
        op = op.next_op
    return False


def blocks(ops: Sequence[Operation], slots: int) -> list[tuple[int, int]]:
    """[start, end) index ranges of straight-line code in `ops` (a program body): between a
    label or the end of a branch's delay slots and the next label or branch. Branches and
    their delay slots belong to no block; the slots are the `slots` instructions after the
    branch (a label among them is no instruction: the one after it is still a slot)."""
    out: list[tuple[int, int]] = []
    start = i = 0
    n = len(ops)
    while i < n:
        op = ops[i]
        if type(op) is sf.LabelOp:
            if start < i:
                out.append((start, i))
            start = i + 1
        elif sf.program_role(type(op)) is sf.ProgramRole.BRANCH:
            if start < i:
                out.append((start, i))
            left = slots
            while left and i + 1 < n:  # past the delay slots
                i += 1
                if type(ops[i]) is not sf.LabelOp:
                    left -= 1
            start = i + 1
        i += 1
    if start < n:
        out.append((start, n))
    return out


def known_registers(ops: Sequence[Operation], slots: int,
                    wanted: Callable[[Operation], bool] | None = None) -> list[dict[int, int] | None]:
    """For each op, the register values known just before it from the straight-line code since
    the last label (every scalar instruction whose operands are known, folded by its ISA
    record's semantics: MOVI, MOV shl, ADDI, MULI, ADD/MUL of known values); r0 is 0. With
    `wanted`, only the ops it accepts get their values (the others None: a copy per op of 10^5
    adds up)."""
    out: list[dict[int, int] | None] = []
    known: dict[int, int] = {0: 0}
    for op in ops:
        out.append(dict(known) if wanted is None or wanted(op) else None)
        kind = type(op)
        if kind is sf.LabelOp:
            known = {0: 0}
            continue
        entry = _entry(kind)
        if entry is None:
            continue
        w = op.writes()  # type: ignore[attr-defined]
        if not w:
            continue
        value = fold(op, known)  # type: ignore[arg-type]
        if value is None or not -(1 << 31) <= value < (1 << 31):
            known.pop(w, None)
        else:
            known[w] = value
    return out


def fold(op: sf.SnowflakeInstruction, known: dict[int, int]) -> int | None:
    """The value a scalar instruction writes when the registers it reads are `known` (its record's
    semantics, unwrapped: the caller decides what a value past 32 bits means); None otherwise."""
    entry = op.ISA_ENTRY
    if entry is None or entry.kind is not Kind.SCALAR:
        return None
    values = []
    for name, is_reg in entry.operand_kinds:
        if is_reg:
            value = known.get(op.reg_index(name))
            if value is None:
                return None
            values.append(value)
        else:
            values.append(op._int(name))
    return entry.function(*values)


def issue_cycles(seq: Sequence[Operation], latency: int, loop: bool = False) -> tuple[int, int]:
    """(cycles, summed dispatch offsets of the vector ops and loads) of `seq` issued in order by
    the rule of each instruction's timing class (ISA record: `issue_cycles` apart, a written
    register readable `latency` cycles after its dispatch: the scalar class's latency on the
    target, `SCALAR_TIMING.latency(hw)`, which callers pass); a loop body is measured on its
    second pass, so a result the next iteration reads early counts."""
    t = start = machine = 0
    ready: dict[int, int] = {}
    for _ in range(2 if loop else 1):
        start, machine = t, 0
        for op in seq:
            if sf.program_role(type(op)) not in INSTRUCTION_ROLES:
                continue
            d = max([t] + [ready.get(r, 0) for r in op.reads() if r])
            if is_machine(op):
                machine += d - start
            t = d + op.ISA_ENTRY.timing.issue_cycles
            w = op.writes()
            if w:
                ready[w] = d + latency
    return t - start, machine
