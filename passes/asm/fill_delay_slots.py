"""
fill-delay-slots: move independent instructions into the no-ops of branch delay slots.

A Snowflake branch has 4 delay slots that always execute (C17 §4); `tile-to-asm` leaves them
as no-ops, each costing an issue cycle per loop iteration. This pass takes, for every branch,
instructions from the end of its basic block (scanning back to the block's label) that can
run after the branch instead of before it: one that writes no register the branch compares,
and has no register dependency on (and, for vector ops and loads, no program-order relation
with) the instructions it would jump over. Moved instructions keep their order and go
before whatever non-no-op the slots already hold; the slots may hold at most one true RAW
pair (C17 §4). In a loop, only as many are moved as make an iteration faster under the
in-order issue model (a slot writing what the next iteration reads first can stall it), or
as fast with its vector ops and loads dispatched earlier. The branch then dispatches earlier and the loop body is shorter by the slots
filled. Semantics are unchanged: the slots run exactly once after the branch, taken or not.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass

from snowir.asm_analysis import INSTRUCTION_ROLES, LABEL_OR_BRANCH, body_ops, depends, is_machine, is_nop, issue_cycles, programs, raw_pairs, replace_body
from snowir.dialects import snowflake_asm as sf
from snowir.hw import SnowflakeConfig


def fill_ops(ops: list[Operation], slots: int, latency: int = 3) -> tuple[list[Operation], int]:
    """`ops` (a program body) with the delay slots of every branch filled; the no-ops replaced."""
    ops = list(ops)
    filled = 0
    decided: dict[tuple, tuple[int, ...]] = {}  # block shape -> positions moved into the slots
    i = 0
    while i < len(ops):
        op = ops[i]
        if sf.program_role(type(op)) is not sf.ProgramRole.BRANCH:
            i += 1
            continue
        window = ops[i + 1:i + 1 + slots]
        free = sum(1 for o in window if is_nop(o))
        if free == 0 or len(window) < slots or any(type(o) is sf.LabelOp for o in window):
            i += 1 + slots
            continue
        start = i
        while start > 0 and sf.program_role(type(ops[start - 1])) not in LABEL_OR_BRANCH \
                and not _in_slots(ops, start - 1, slots):
            start -= 1
        loop = start > 0 and type(ops[start - 1]) is sf.LabelOp and ops[start - 1].label.data == op.target.data
        # the choice depends only on registers read and written and on which ops touch the
        # machine: blocks of one shape (unrolled pixels, every tile of a layer) decide once
        key = (loop, *map(_shape, ops[start:i + 1 + slots]))
        take = decided.get(key)
        if take is None:
            take = decided[key] = _choose(ops, start, i, slots, latency, loop)
        if take:
            moved = [ops[start + k] for k in take]
            kept = [o for o in window if not is_nop(o)]
            body = [o for k, o in enumerate(ops[start:i]) if k not in take]
            slot_ops = moved + kept
            ops[start:i + 1 + slots] = body + [op] + slot_ops + _nops(op, slots - len(slot_ops))
            filled += len(take)
        i = start + (i - start - len(take)) + 1 + slots
    return ops, filled


def _shape(op: Operation) -> tuple:
    if sf.program_role(type(op)) not in INSTRUCTION_ROLES:
        return (op.name,)
    return op.name, op.reads(), op.writes(), is_machine(op)


def _choose(ops: list[Operation], start: int, i: int, slots: int, latency: int, loop: bool) -> tuple[int, ...]:
    """Positions (from `start`) of the block's instructions to move into the slots of the branch at `i`."""
    op = ops[i]
    window = ops[i + 1:i + 1 + slots]
    free = sum(1 for o in window if is_nop(o))
    kept = [o for o in window if not is_nop(o)]
    reads = set(op.reads())
    moved: list[int] = []  # indices in `ops`, nearest the branch first
    staying: list[sf.SnowflakeInstruction] = []
    j = i - 1
    while j >= start and len(moved) < free:
        cand = ops[j]
        ok = (not is_nop(cand) and not (cand.writes() and cand.writes() in reads)
              and not any(depends(cand, s) for s in staying)
              and raw_pairs([ops[k] for k in [j, *reversed(moved)]] + kept) <= 1)
        if ok:
            moved.append(j)
        else:
            staying.append(cand)
        j -= 1

    def variant(k: int) -> list[Operation]:
        """The block, branch and slots with the k instructions nearest the branch moved."""
        take = sorted(moved[:k])
        body = [o for idx, o in enumerate(ops[start:i], start) if idx not in take]
        slot_ops = [ops[idx] for idx in take] + kept
        return body + [op] + slot_ops + _nops(op, slots - len(slot_ops))

    # a loop is filled only as far as it gets faster: a slot that writes what the next
    # iteration's first instructions read can cost more than the no-op it replaces
    best = min(range(len(moved) + 1), key=lambda k: (*issue_cycles(variant(k), latency, loop), k))
    return tuple(idx - start for idx in sorted(moved[:best]))


def fill_program(program: sf.ProgramOp, slots: int, latency: int) -> int:
    """Fill the delay slots of one program; returns the no-ops replaced."""
    ops, filled = fill_ops(body_ops(program), slots, latency)
    if filled:
        replace_body(program, ops)
    return filled


def _in_slots(ops: list, j: int, slots: int) -> bool:
    """Whether ops[j] sits in the delay slots of an earlier branch: the `slots` instructions
    after it, labels among them not counted (a label is no instruction)."""
    seen = 0  # instructions between ops[k] and ops[j]
    for k in range(j - 1, -1, -1):
        if sf.program_role(type(ops[k])) is sf.ProgramRole.BRANCH:
            return True
        if type(ops[k]) is not sf.LabelOp:
            seen += 1
            if seen == slots:
                return False
    return False


@dataclass(frozen=True)
class FillDelaySlotsPass(ModulePass):
    name = "fill-delay-slots"
    hw: str = ""
    """A hardware description JSON (SnowflakeConfig fields); default: the ZC706 build."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        hw = SnowflakeConfig.load(self.hw or None)
        for program in programs(op, banked=False):
            fill_program(program, hw.branch_delay_slots, hw.scalar_latency)


def _nops(branch: Operation, n: int) -> list[Operation]:
    """Slots left empty, located where their branch is (they belong to its loop)."""
    nops = [sf.MovOp(0, 0) for _ in range(n)]
    for nop in nops:
        nop.location = branch.location
    return nops
