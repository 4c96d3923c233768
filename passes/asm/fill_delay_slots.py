"""
fill-delay-slots: move independent instructions of a loop into the no-ops of its branch's delay slots.

A Snowflake branch has 4 delay slots that always execute (C17 §4); `tile-to-asm` leaves them
as no-ops, each costing an issue cycle per loop iteration. This pass takes, for every branch
that closes a one-block loop (its block starts at the label it branches back to), instructions
from the end of the block that can run after the branch instead of before it: one that writes
no register the branch compares, and has no register dependency on (and, for vector ops and
loads, no program-order relation with) the instructions it would jump over. Moved instructions
keep their order and go before whatever non-no-op the slots already hold; the slots may hold at
most one true RAW pair (C17 §4). Semantics are unchanged: the slots run exactly once after the
branch, taken or not.

The pass never moves code it does not change. For every instruction moved into the slots a
no-op goes before the loop's label (it runs once per entry into the loop, not per iteration),
so every instruction outside the loop keeps its pc. icache-banking lays the program out in
512-instruction banks after this pass; a shorter program used to move every later bank
boundary, and with it when each bank load is requested against the data loads around it (the
bus serves earlier requests first). On the Table 1 conv5 model lowered as two channel parts
that cost 1,661 more `icache` stall cycles than the slots saved (360,823 cycles with the pass
against 360,001 without). Forward branches are left alone: their no-ops run once, and moving
one instruction would move the code after it.

A loop is filled only as far as it gets no slower under the in-order issue model
(`issue_cycles`): its first pass, the no-ops before the label included, takes no more cycles,
and every later pass no more; among those, the fewest cycles per pass, then the vector ops and
loads dispatched earliest. A loop its traces bound is not filled: with no LD in it and its
vector ops' CU cycles (each record's `cu_cycles`) no fewer than its issue cycles, the issue runs
ahead of the CUs and a filled slot saves nothing, while each no-op before the label costs a
cycle on entry (ZFNet's 7x7/2 stem: 52,681 cycles filled against 52,633). A loop with an LD is
filled: a vector op waiting for the LD's data holds dispatch, and after the wait the pass's
issue, its slots included, is what the CUs wait for (AlexNet's fc6-fc8, their weight LDs in the
loop: fc7 1,275 cycles slower unfilled).

Where a loop is traces-bound on paper, whether its slots pace anything is the machine's state:
a 1x1 conv's pixel loop (Inception v1's n121, 832 -> 128 on 6x6) waits for each kernel tile's
loads before it, and after each wait the pass's issue, its slots' no-ops included, is what the
CUs wait for (20,781 cycles left unfilled, 20,697 filled). So a program with such a loop is also
filled two more ways, every traces-bound loop filled and all but the last, each run alone on the
machine model (fast engine; guard.measured_times: its cycles, and the cycle its last instruction
issued, where the next layer's window starts in a linked program). A variant counts only when it
ends more than a loop's slots sooner (a layer in a linked program starts behind the previous
layer's CU tail, which hides a few cycles at its start: ResNet-18's layer4.0.conv1.part1 was 3
sooner alone, its next layer 3 slower in the model). Over the module's programs in order (the
layers of a linked program), the variants taken save the most cycles with no layer's window
longer than under the static rule: a layer's window changes by its last issue plus the growth of
the previous layer's tail (cycles - last issue), which the next layer waits for (the last
layer's window ends with the program: its cycles); the last traces-bound loop's slots left as no-ops keep a layer's tail as it was. This is `measure`
(snowflake-lower{measure-slots=true}), off by default: it runs each program with a traces-bound
loop two or three times on the fast engine, which takes about 7x the compile time (ResNet-50:
5.9 s -> 43.1 s on a machine whose 10 M-iteration loop took 0.20 s).

A program's rewrite is kept only when the program then runs no slower on the machine model
(passes/asm/guard.py): the static model above does not see every queue of the machine.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass

from snowir.tile.read import refuse_unlowered
from snowir.asm_analysis import (INSTRUCTION_ROLES, LABEL_OR_BRANCH, body_ops, depends, is_machine, is_nop, issue_cycles,
                                  raw_pairs, replace_body, rewritable_programs)
from snowir.dialects import snowflake_asm as sf
from snowir.hw import DEFAULT, SnowflakeConfig
from snowir.passes.asm.guard import guarded, measured_times


def fill_ops(ops: list[Operation], slots: int, latency: int = 3, hw: SnowflakeConfig = DEFAULT) -> tuple[list[Operation], int]:
    """`ops` (a program body) with the delay slots of every one-block loop's branch filled by the
    static rule, the no-ops they held placed before the loop's label."""
    ops, filled, _ = _fill(ops, slots, latency, hw, False)
    return ops, filled


def _fill(ops: list[Operation], slots: int, latency: int, hw: SnowflakeConfig, bound: bool,
          until: int | None = None) -> tuple[list[Operation], int, list[int]]:
    """fill_ops (`bound`: traces-bound loops too, those whose branch is before `until` where
    given), and where the branches of the traces-bound loops that filling would change are (every
    instruction outside a loop keeps its index, a loop's branch too)."""
    ops = list(ops)
    filled = 0
    bounded: list[int] = []
    decided: dict[tuple, tuple[tuple[int, ...], bool]] = {}  # block shape -> _choose's answer
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
        # a one-block loop whose label is no delay slot's neighbour: no-ops placed before the
        # label run before the loop, not as slots of an earlier branch
        if not (start > 0 and type(ops[start - 1]) is sf.LabelOp and ops[start - 1].label.data == op.target.data
                and not _in_slots(ops, start - 1, slots)):
            i += 1 + slots
            continue
        # the choice depends only on registers read and written and on which ops touch the
        # machine: blocks of one shape (unrolled pixels, every tile of a layer) decide once
        key = tuple(map(_shape, ops[start:i + 1 + slots]))
        if key not in decided:
            decided[key] = _choose(ops, start, i, slots, latency, hw)
        take, is_bound = decided[key]
        if is_bound and take:
            bounded.append(i)
            if not bound or until is not None and i >= until:
                take = ()  # a filled slot saves no cycle, a no-op before the label costs one
        if take:
            moved = [ops[start + k] for k in take]
            kept = [o for o in window if not is_nop(o)]
            body = [o for k, o in enumerate(ops[start:i]) if k not in take]
            slot_ops = moved + kept
            ops[start:i + 1 + slots] = body + [op] + slot_ops + _nops(op, slots - len(slot_ops))
            ops[start - 1:start - 1] = _nops(op, len(take))  # before the label: once per entry
            filled += len(take)
        i += 1 + slots  # the branch is where it was: as many no-ops before the label as moved
    return ops, filled, bounded


def _shape(op: Operation) -> tuple:
    """What the choice reads of an op: its kind, its registers, and a vector op's CU cycles
    (`_traces_bound`: its trace and mode)."""
    if sf.program_role(type(op)) not in INSTRUCTION_ROLES:
        return (op.name,)
    return op.name, op.reads(), op.writes(), is_machine(op), op.properties.get("trace"), op.properties.get("mode")


def _choose(ops: list[Operation], start: int, i: int, slots: int, latency: int,
            hw: SnowflakeConfig) -> tuple[tuple[int, ...], bool]:
    """Positions (from `start`) of the loop block's instructions to move into the slots of its
    branch at `i`, and whether the loop is traces-bound (`_traces_bound`: the static rule leaves
    it as it is)."""
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

    def cost(k: int) -> tuple[int, int, int]:
        """(cycles of a later pass, cycles of the first pass from the no-ops before the label,
        dispatch offsets of a later pass's vector ops and loads) with the k instructions nearest
        the branch moved."""
        take = sorted(moved[:k])
        body = [o for idx, o in enumerate(ops[start:i], start) if idx not in take]
        slot_ops = [ops[idx] for idx in take] + kept
        seq = body + [op] + slot_ops + _nops(op, slots - len(slot_ops))
        later, machine = issue_cycles(seq, latency, loop=True)
        first, _ = issue_cycles(_nops(op, k) + seq, latency)
        return later, first, machine

    base = cost(0)
    is_bound = _traces_bound(ops[start:i + 1 + slots], base[0], hw)
    costs = {k: cost(k) for k in range(1, len(moved) + 1)}
    # no slower on any pass: a loop may run once (the no-ops before its label then cost what
    # the slots saved), and a slot that writes what the next pass reads first can stall it
    fits = [k for k, c in costs.items() if c[0] <= base[0] and c[1] <= base[1] and c[:1] + c[2:] < base[:1] + base[2:]]
    if not fits:
        return (), is_bound
    best = min(fits, key=lambda k: (costs[k][0], costs[k][2], costs[k][1], k))
    return tuple(idx - start for idx in sorted(moved[:best])), is_bound


def _traces_bound(block: list[Operation], issue: int, hw: SnowflakeConfig) -> bool:
    """Whether a pass of the loop (`block`: its body, branch and slots; `issue`: its cycles under
    the in-order issue model) takes its traces' time whatever its issue takes. The vector ops run
    in order on the CUs, so a pass takes at least their CU cycles (each instruction record's
    `cu_cycles`); when that is no less than the issue, the issue runs ahead of the CUs by the
    vector queue and a filled slot saves no cycle. Not with an LD in the loop: a vector op whose
    data is still loading holds dispatch until it lands (docs/machine.md, Timing), the CUs then
    wait for the issue to reach the next vector op, and after every such wait the pass's issue is
    on the critical path again, its slots' no-ops included (AlexNet's fc7: its loop's 48 weight
    LDs pace every pass; left unfilled as traces-bound, the layer took 1,275 cycles more)."""
    if any(type(op) is sf.LdOp for op in block):
        return False
    return sum(op.cu_cycles(hw) for op in block if isinstance(op, sf.SnowflakeInstruction)) >= issue


@dataclass(frozen=True)
class _Variant:
    """A program's body with traces-bound loops filled too, and what that changes alone on the
    machine model against the static rule's body: its cycles, the cycle its last instruction
    issued (`end`: where the next layer's window starts) and what it leaves running after that
    (`tail`: cycles - end, which the next layer's window waits for)."""
    ops: list[Operation]
    cycles: int
    end: int
    tail: int


def _variants(program: sf.ProgramOp, rule: list[Operation], bounded: list[int], slots: int, latency: int,
              hw: SnowflakeConfig) -> list[_Variant]:
    """The program with every traces-bound loop filled, and with all but the last (whose slots'
    no-ops, left, run once after the last pass, as the static rule has them: the variant then
    leaves the layer's tail as it was), each where it differs from `rule` and ends sooner alone by
    more than a loop's slots: a layer in a linked program starts behind the previous layer's CU
    tail, which hides a few cycles at its start (ResNet-18's layer4.0.conv1.part1: 3 cycles sooner
    alone, its next layer 3 cycles slower in the model)."""
    body = body_ops(program)
    container = program.parent_op()
    out: list[_Variant] = []
    for until in (None, bounded[-1]):
        ops, _, _ = _fill(body, slots, latency, hw, True, until)
        if [None if is_nop(o) else o for o in ops] == [None if is_nop(o) else o for o in rule]:
            continue
        try:
            replace_body(program, rule)
            before = measured_times(program, hw, container)
            replace_body(program, ops)
            after = measured_times(program, hw, container) if before is not None else None
        finally:
            replace_body(program, body)
        if before is None or after is None:
            # honoured or said: the user asked for a measured choice this program cannot have
            print(f"warning: fill-delay-slots{{measure}}: program {program.sym_name.data} does not run alone on the "
                  "machine model; its loops keep the static rule", file=sys.stderr)
            break
        if after[0] < before[0] - slots:
            out.append(_Variant(ops, after[0] - before[0], after[1] - before[1],
                                (after[0] - after[1]) - (before[0] - before[1])))
            if out[-1].tail <= 0:
                break  # as good as a variant gets for the next layer: no need for the second
    return out


def _choose_variants(variants: list[list[_Variant]]) -> list[_Variant | None]:
    """Which variant each program (consecutive layers of one linked program) takes, None: the
    static rule's. The most cycles saved with no layer's window longer than under the static rule:
    a layer's window changes by its `end` plus the previous layer's `tail` where that grew (a
    shorter tail is not counted on); the last layer's window ends with the program, its cycles."""
    # best[k] = (cycles saved, choices) over the programs so far, the last one's choice k (-1: none)
    best: dict[int, tuple[int, list[int]]] = {-1: (0, [])}
    for n, options in enumerate(variants):
        step: dict[int, tuple[int, list[int]]] = {}
        for prev, (saved, picks) in best.items():
            carry = max(0, variants[n - 1][prev].tail) if prev >= 0 else 0
            for k in range(-1, len(options)):
                # the window's end: the layer's last issue, or the program's end for the last layer
                moved = 0 if k < 0 else options[k].cycles if n == len(variants) - 1 else options[k].end
                if moved + carry > 0:
                    continue
                got = (saved - (options[k].cycles if k >= 0 else 0), picks + [k])
                if k not in step or got[0] > step[k][0]:
                    step[k] = got
        best = step
    picks = max(best.values(), key=lambda sp: sp[0])[1]
    return [options[k] if k >= 0 else None for options, k in zip(variants, picks)]


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
    guard: bool = True
    """Keep a program's rewrite only when it runs no slower on the machine model (guard.py)."""
    measure: bool = False
    """Where a program has a traces-bound loop, run it with such loops filled too on the machine
    model and keep the variant that makes no layer slower and the model faster (_choose_variants;
    about 7x snowflake-lower's compile time, so off by default); false: the static rule alone."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        hw = SnowflakeConfig.load(self.hw or None)
        found = rewritable_programs(op, "fill-delay-slots")
        if not found:
            refuse_unlowered(op, "fill-delay-slots")
        slots, latency = hw.branch_delay_slots, hw.scalar_latency
        rules, variants = [], []
        for program in found:
            ops, _, bounded = _fill(body_ops(program), slots, latency, hw, False)
            rules.append(ops)
            variants.append(_variants(program, ops, bounded, slots, latency, hw) if self.measure and bounded else [])
        for program, ops, v in zip(found, rules, _choose_variants(variants)):
            chosen = ops if v is None else v.ops
            guarded(program, hw, self.guard, lambda: replace_body(program, chosen))


def _nops(branch: Operation, n: int) -> list[Operation]:
    """Slots left empty, located where their branch is (they belong to its loop)."""
    nops = [sf.MovOp(0, 0) for _ in range(n)]
    for nop in nops:
        nop.location = branch.location
    return nops
