"""
schedule-asm: list scheduling inside basic blocks, so RAW latencies are hidden and the
vector ops and loads dispatch as early as their operands allow.

A scalar result is readable 3 cycles after its dispatch (docs/machine.md); an instruction
that reads it sooner stalls decode, and with it every vector op behind it. Within each basic
block (between labels, branches and delay slots, which stay as they are; a block's closing
branch stays last and its register reads count) this pass builds the dependency graph
(register RAW with the scalar latency, WAR and WAW; vector ops and loads in their program
order, which the buffer-region hazards and the vector queue depend on), drops no-ops (but one
when they end the program: a label before them is a branch target, which must stay an
instruction of the program, not the pc past its end), and reissues the block cycle by cycle:
a ready vector op or load first, else the ready scalar with the longest latency path to the
block's end, else a stall until the earliest is ready (tried with vector ops and loads first,
and by latency path alone). A new order is kept only when it beats the original under the
in-order issue model, evaluated after fill-delay-slots would fill the branch's slots and, for
a loop, on its second iteration (so a result the next iteration reads counts): fewer cycles,
or as many with the vector ops and loads dispatched earlier in total.

The pass never moves code it does not change (as fill-delay-slots): the no-ops a one-block
loop drops go before its label (they run once per entry), and a block that is no such loop
keeps its no-ops, at its start. Every instruction outside the block then keeps its pc, so
icache-banking lays the rest of the program out as it would have (a shorter program moved every
later bank boundary and with it when each bank load is requested against the data loads
around it: fill-delay-slots' docstring has the case). A loop's new order must also be no
slower on its first pass, the no-ops before the label included.

A program's rewrite is kept only when the program then runs no slower on the machine model
(passes/asm/guard.py): the static model above does not see every queue of the machine.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass

from snowir.tile.read import refuse_unlowered
from snowir.asm_analysis import (INSTRUCTION_ROLES, blocks, body_ops, is_machine, is_nop, issue_cycles, replace_body,
                                  rewritable_programs)
from snowir.dialects import snowflake_asm as sf
from snowir.hw import DEFAULT, SnowflakeConfig
from snowir.passes.asm.fill_delay_slots import fill_ops
from snowir.passes.asm.guard import guarded


def _graph(body: list[sf.SnowflakeInstruction], latency: int) -> list[list[tuple[int, int]]]:
    """preds[j] = [(i, cycles from i's dispatch until j may dispatch)]."""
    preds: list[list[tuple[int, int]]] = [[] for _ in body]
    writer: dict[int, int] = {}
    readers: dict[int, list[int]] = {}
    last_machine = -1
    for j, op in enumerate(body):
        edges: dict[int, int] = {}
        for r in op.reads():
            if r and r in writer:
                i = writer[r]
                edges[i] = max(edges.get(i, 0), latency)
        w = op.writes()
        if w:
            for i in readers.get(w, []):
                edges[i] = max(edges.get(i, 0), 1)
            if w in writer:
                edges[writer[w]] = max(edges.get(writer[w], 0), 1)
        if is_machine(op):
            if last_machine >= 0:
                edges[last_machine] = max(edges.get(last_machine, 0), 1)
            last_machine = j
        preds[j] = list(edges.items())
        for r in op.reads():
            if r:
                readers.setdefault(r, []).append(j)
        if w:
            writer[w] = j
            readers[w] = []
    return preds


def _list_schedule(ops: list[sf.SnowflakeInstruction], preds: list[list[tuple[int, int]]], last: int,
                   machine_first: bool) -> list[int]:
    """Cycle-by-cycle list scheduling; `last` (the closing branch, or -1) is issued last."""
    n = len(ops)
    succs: list[list[tuple[int, int]]] = [[] for _ in ops]
    for j, ps in enumerate(preds):
        for i, lat in ps:
            succs[i].append((j, lat))
    height = [1] * n
    for i in range(n - 1, -1, -1):
        for j, lat in succs[i]:
            height[i] = max(height[i], lat + height[j])
    waiting = [len(ps) for ps in preds]
    ready_at = [0] * n
    free = [j for j in range(n) if not waiting[j]]
    order: list[int] = []
    t = 0
    while free:
        pool = [j for j in free if j != last] or free
        now = [j for j in pool if ready_at[j] <= t]
        if now:
            pick = min(now, key=lambda j: (machine_first and not is_machine(ops[j]), -height[j], j))
        else:
            pick = min(pool, key=lambda j: (ready_at[j], -height[j], j))
            t = ready_at[pick]
        free.remove(pick)
        order.append(pick)
        for j, lat in succs[pick]:
            ready_at[j] = max(ready_at[j], t + lat)
            waiting[j] -= 1
            if not waiting[j]:
                free.append(j)
        t += 1
    return order


def _cost(seq: list[Operation], branch: Operation | None, window: list[Operation], loop: bool,
          slots: int, latency: int, hw: SnowflakeConfig) -> tuple[int, int]:
    """The block under the in-order issue model after fill-delay-slots would fill the branch's
    slots (`issue_cycles`; a loop measured on its second iteration)."""
    if branch is not None:
        seq, _ = _filled(seq, branch, window, loop, slots, latency, hw)
    return issue_cycles(seq, latency, loop)


def _filled(seq: list[Operation], branch: Operation, window: list[Operation], loop: bool, slots: int,
            latency: int, hw: SnowflakeConfig) -> tuple[list[Operation], int]:
    """`seq`, `branch` and its slots as fill-delay-slots leaves them (it fills a loop's slots
    only: the block is given its label for it). No-ops the fill places before the label are
    left out: they run once, before the loop."""
    if not loop:
        return [*seq, branch, *window], 0
    label = sf.LabelOp(branch.target.data)
    ops, filled = fill_ops([label, *seq, branch, *window], slots, latency, hw)
    return ops[ops.index(label) + 1:], filled


def _shape(op: Operation) -> tuple:
    """What scheduling and slot filling read of an op: its kind, its registers, and a vector op's
    trace and mode (fill-delay-slots leaves a loop its traces bound unfilled)."""
    if sf.program_role(type(op)) not in INSTRUCTION_ROLES:
        return (type(op).__name__,)
    return (type(op).__name__, tuple(op.reads()), op.writes(), is_nop(op), op.properties.get("trace"),
            op.properties.get("mode"))


_DECISIONS: dict[tuple, tuple[int, ...] | None] = {}
"""schedule_block's answers by block shape: a network repeats the same loops layer after layer
with other addresses, and the decision depends only on kinds and registers (ResNet-50: 5031
blocks, a few hundred shapes)."""


def schedule_block(body: list[sf.SnowflakeInstruction], latency: int, branch: sf.SnowflakeInstruction | None = None,
                   window: list[Operation] = (), loop: bool = False, slots: int = 4,
                   tail: bool = False, hw: SnowflakeConfig = DEFAULT) -> list[sf.SnowflakeInstruction] | None:
    """The block reordered, or None when the original order is as good. `branch` (the block's
    closing branch, kept last) with its delay-slot `window`; `loop`: it branches back to the block;
    `tail`: it holds the program's last instruction (then it keeps an instruction even when all
    are no-ops: a label before it -- a branch target -- must name an instruction of the program,
    not the pc past its end, which is outside the instruction-cache bank)."""
    key = (tuple(map(_shape, body)), _shape(branch) if branch is not None else None, tuple(map(_shape, window)),
           loop, slots, latency, tail, hw)
    if key not in _DECISIONS:
        best = _schedule_block(body, latency, branch, window, loop, slots, tail, hw)
        index = {id(op): i for i, op in enumerate(body)}
        _DECISIONS[key] = None if best is None else tuple(index[id(op)] for op in best)
    order = _DECISIONS[key]
    return None if order is None else [body[i] for i in order]


def _schedule_block(body: list[sf.SnowflakeInstruction], latency: int, branch: sf.SnowflakeInstruction | None,
                    window: list[Operation], loop: bool, slots: int,
                    tail: bool, hw: SnowflakeConfig) -> list[sf.SnowflakeInstruction] | None:
    nops = [op for op in body if is_nop(op)]
    ops = [op for op in body if not is_nop(op)]
    if not loop:  # no-ops outside a loop stay in their block (at its start): no pc moves
        ops, nops = nops + ops, []
    elif not ops and tail:
        ops = body[-1:]
    with_branch = ops + ([branch] if branch is not None else [])
    last = len(ops) if branch is not None else -1
    preds = _graph(with_branch, latency)
    if branch is not None:
        # fill-delay-slots may move up to `slots` instructions from before the branch to after
        # it: keep what the branch compares that much further ahead
        preds[last] = [(i, lat + slots) for i, lat in preds[last]]
    base = _cost(list(body), branch, list(window), loop, slots, latency, hw)
    first = _first_pass(list(body), branch, list(window), loop, slots, latency, hw)
    best, best_cost = None, base
    for machine_first in (True, False):
        order = [j for j in _list_schedule(with_branch, preds, last, machine_first) if j != last]
        candidate = [ops[j] for j in order]
        cost = _cost(candidate, branch, list(window), loop, slots, latency, hw)
        if cost < best_cost and (not loop or _first_pass(
                _nops(len(body) - len(candidate)) + candidate, branch, list(window), loop, slots, latency, hw) <= first):
            best, best_cost = candidate, cost
    return best


def _first_pass(seq: list[Operation], branch: Operation | None, window: list[Operation], loop: bool,
                slots: int, latency: int, hw: SnowflakeConfig) -> int:
    """Cycles of a loop's first pass (`seq` may start with no-ops placed before its label)."""
    if branch is not None:
        seq, _ = _filled(seq, branch, window, loop, slots, latency, hw)
    return issue_cycles(seq, latency)[0]


def _nops(n: int) -> list[Operation]:
    return [sf.MovOp(0, 0) for _ in range(n)]


def schedule_program(program: sf.ProgramOp, hw: SnowflakeConfig) -> int:
    """Reschedule every block of a program; returns the blocks changed."""
    ops: list[Operation] = body_ops(program)
    slots = hw.branch_delay_slots
    # past the program's last instruction: the block holding it is scheduled first (blocks go
    # last to first), so no earlier change moves it
    tail_end = next((k + 1 for k in range(len(ops) - 1, -1, -1) if type(ops[k]) is not sf.LabelOp), 0)
    changed = 0
    for start, end in reversed(blocks(ops, slots)):
        branch = ops[end] if end < len(ops) and isinstance(ops[end], sf.BranchOperation) else None
        window = ops[end + 1:end + 1 + slots] if branch is not None else []
        loop = branch is not None and start > 0 and type(ops[start - 1]) is sf.LabelOp \
            and ops[start - 1].label.data == branch.target.data
        new = schedule_block(ops[start:end], hw.scalar_latency, branch, window, loop, slots, end >= tail_end,
                             hw)
        if new is not None:
            dropped = (end - start) - len(new)  # a loop's no-ops: before its label, run once per entry
            ops[start:end] = new
            if dropped:
                nops = _nops(dropped)
                for nop in nops:
                    nop.location = ops[start - 1].location
                ops[start - 1:start - 1] = nops
            changed += 1
    if changed:
        replace_body(program, ops)
    return changed


@dataclass(frozen=True)
class ScheduleAsmPass(ModulePass):
    name = "schedule-asm"
    hw: str = ""
    """A hardware description JSON (SnowflakeConfig fields); default: the ZC706 build."""
    guard: bool = True
    """Keep a program's rewrite only when it runs no slower on the machine model (guard.py)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        hw = SnowflakeConfig.load(self.hw or None)
        found = rewritable_programs(op, "schedule-asm")
        if not found:
            refuse_unlowered(op, "schedule-asm")
        for program in found:
            guarded(program, hw, self.guard, lambda: schedule_program(program, hw))
