"""
balance-loads{metric=cl units=4 split=512}: spread the loads over the load units (C17 §6.3).

Each load unit moves at most one port's bandwidth (2 GB/s) and all share the 4.2 GB/s bus,
so loads queued on one unit leave the bus idle while the CUs wait. `tile-to-asm` puts every
LD on unit 0. This pass, per group of loads issued together (LDs of one basic block not
separated by a vector op: a tile's prefetch, a kernel tile's 16 weight loads; the first LD after
VMOVs that only set a register, a layer's masks, joins the group before them when it is one
piece of at least a unit's fair share of it):

  * splits a large load (at least 2 x `split` elements and half a unit's fair share of the
    group, addresses and length known from straight-line code; not one in a branch's delay
    slots, which hold only so many instructions) into up to `units` parts of at least `split`
    elements, setting the address registers per part and restoring them after, so later code
    sees them unchanged; loads come in the order they are needed, so the first then lands at
    the bus's rate rather than one port's;
  * assigns units largest-first to the least-loaded unit (LPT), minimising the paper's
    imbalance C_L = (L_max / mean L - 1) x 100% over the `units` units of the group.

The bytes-weighted mean C_L over the groups (against all `hw` load units, so `units=2`
reads ~100%) is recorded as `load_imbalance_pct` on the program's image (on the program when
it has none), which the report shows per layer. `units` < the machine's units restricts the loads to the first units (the
C17 Table 3 experiment). Instruction-cache loads are left alone.

A program's rewrite is kept only when the program then runs no slower on the machine model
(passes/asm/guard.py): the static model above does not see every queue of the machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from xdsl.context import Context
from xdsl.dialects.builtin import FloatAttr, IntAttr, ModuleOp, UnitAttr, f64
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from snowir.tile.read import refuse_unlowered
from snowir.asm_analysis import LABEL_OR_BRANCH, body_ops, known_registers, replace_body, rewritable_programs
from snowir.codegen.builder import MOVI_MAX, AsmBuilder
from snowir.dialects import snowflake_asm as sf
from snowir.hw import SnowflakeConfig
from snowir.passes.asm.guard import guarded


def _data_ld(op: Operation) -> bool:
    return _is_ld(type(op)) and op.target.data != sf.LoadTarget.ICACHE  # type: ignore[attr-defined]


_BUFFER_SELECTS = frozenset({sf.VmovSelect.BIAS, sf.VmovSelect.BYPASS, sf.VmovSelect.MBIAS})


def _setting(op: Operation) -> bool:
    """A VMOV that sets a register from rs1 (mask, stride, shift, a write-back unit's word): it
    reads no buffer, so it waits for no load. A layer's start sets its masks between its first
    kernel tile's weights and its first maps rows; as two groups, both start on unit 0 and the
    rows queue behind four weight loads (SqueezeNet's n5: +121 cycles against one group, which
    gives the rows a unit of their own). So the first LD after such VMOVs joins the group before
    them (`_joins`); the LDs after it (the rest of a first strip loaded in pieces) stay a group of their own,
    spread from unit 0 in the order they are needed (joined as well, SqueezeNet's n37 ran +204)."""
    return type(op) is sf.VmovOp and op.select.data not in _BUFFER_SELECTS


def _joins(group: list[tuple[int, dict[int, int], float, int]], ld: tuple[int, dict[int, int], float, int],
           units: int) -> bool:
    """The first LD after setting VMOVs joins the group before them when it is one piece of at
    least a unit's fair share of that group, so the assignment gives it a unit the group's loads
    leave (a smaller one went behind them all the same, and the loads after it, spread from unit 0
    again, met it there: ResNet-18's layer2.0.down +8)."""
    return ld[3] == 1 and ld[2] * units >= sum(size for _, _, size, _ in group)


@cache
def _is_ld(cls: type[Operation]) -> bool:
    return issubclass(cls, sf.LdOp)


def _set(reg: int, value: int, known: int | None) -> list[Operation]:
    b = AsmBuilder()
    b.set_reg(reg, value, known)
    return b.ops


def _split(op: sf.LdOp, regs: dict[int, int], parts: int) -> list[Operation]:
    """The LD as `parts` LDs over consecutive pieces; its registers hold their values again after."""
    rd, rs1, rs2 = op.reg_index("rd"), op.reg_index("rs1"), op.reg_index("rs2")
    dst, src, length = regs[rd], regs[rs1], regs[rs2]
    step = -(-length // parts)
    out: list[Operation] = []
    at = (dst, src, length)
    for lo in range(0, length, step):
        n = min(step, length - lo)
        want = (dst + lo, src + 2 * lo, n)
        for reg, value, now in zip((rd, rs1, rs2), want, at):
            if value != now:
                out += [sf.MoviOp(reg, value)] if reg == rs2 else _set(reg, value, now)
        at = want
        out.append(sf.LdOp(op.target.data, rd, rs1, rs2, 0, op._int("select")))
    for reg, value, now in zip((rd, rs1, rs2), (dst, src, length), at):
        if value != now:
            out += [sf.MoviOp(reg, value)] if reg == rs2 else _set(reg, value, now)
    return out


def _splittable(op: sf.LdOp, regs: dict[int, int]) -> bool:
    rd, rs1, rs2 = op.reg_index("rd"), op.reg_index("rs1"), op.reg_index("rs2")
    return 0 not in (rd, rs1, rs2) and len({rd, rs1, rs2}) == 3 and all(r in regs for r in (rd, rs1, rs2)) \
        and 0 < regs[rs2] <= MOVI_MAX


def balance_program(program: sf.ProgramOp, units: int, split: int, hw: SnowflakeConfig) -> float | None:
    """Split and assign the data loads of one program; returns its bytes-weighted C_L (%)."""
    ops = body_ops(program)
    known = known_registers(ops, hw.branch_delay_slots, _data_ld)
    out: list[list[Operation]] = []  # per original op, what replaces it
    group: list[tuple[int, dict[int, int]]] = []  # (index in `out`, registers known before the LD)
    groups: list[list[tuple[int, dict[int, int]]]] = []
    soft: list[bool] = []  # the group ended at a setting VMOV, with no other boundary before the next LD
    in_slots: set[int] = set()  # indices in `out` of LDs in a branch's delay slots
    stats: list[tuple[float, float]] = []

    def close(hard: bool) -> None:
        if group:
            groups.append(list(group))
            soft.append(not hard)
            group.clear()
        elif hard and soft:
            soft[-1] = False

    def sized(members: list[tuple[int, dict[int, int]]]) -> list[tuple[int, dict[int, int], float, int]]:
        """Each LD of a group with its size and its parts: (index in `out`, registers, size, parts)."""
        lengths = [regs.get(out[i][0].reg_index("rs2")) for i, regs in members]
        mean = sum(n for n in lengths if n) / max(1, sum(1 for n in lengths if n)) or 1.0
        sizes = [n or mean for n in lengths]
        # C17 §6.3: "break a single large load transaction into multiple smaller loads" -- a load
        # of at least half a unit's fair share of the group goes to every unit (loads come in the
        # order they are needed, so the first one then lands at the bus's rate, not one port's);
        # many small loads (a kernel tile's 16) are only spread
        share = sum(sizes) / units
        # an LD in a branch's delay slots stays one instruction: its parts and register updates
        # would run past the slots, on the fall-through path only
        parts = [min(units, n // split)
                 if n and n >= 2 * split and 2 * n > share and i not in in_slots and _splittable(out[i][0], regs)
                 else 1 for (i, regs), n in zip(members, lengths)]
        return [(i, regs, size, p) for (i, regs), size, p in zip(members, sizes, parts)]

    def assign(items: list[tuple[int, dict[int, int], float, int]]) -> None:
        load = [0.0] * units
        where: list[list[int]] = [[] for _ in items]
        pieces = sorted(((size / p, k) for k, (_, _, size, p) in enumerate(items) for _ in range(p)),
                        key=lambda x: (-x[0], x[1]))
        for size, k in pieces:
            u = min(range(units), key=lambda x: (load[x], x))
            load[u] += size
            where[k].append(u)
        for k, (i, regs, _, p) in enumerate(items):
            if p > 1:
                original = out[i][0]
                out[i] = _split(original, regs, p)
                for piece in out[i]:  # the parts come from where the load did
                    piece.location = original.location
            lds = [o for o in out[i] if isinstance(o, sf.LdOp)]
            for ld, u in zip(lds, sorted(where[k])):
                ld.properties["unit"] = IntAttr(u)
        count = sum(1 for i, _, _, _ in items for ld in out[i] if isinstance(ld, sf.LdOp))
        total = sum(load)
        if total and count > 1:
            stats.append(((max(load) / (total / hw.load_units) - 1) * 100, total))

    slot = 0  # delay slots left of the last branch
    for op, regs in zip(ops, known):
        role = sf.program_role(type(op))
        if _data_ld(op):
            if slot:
                in_slots.add(len(out))
            group.append((len(out), regs))
        elif role in LABEL_OR_BRANCH or (role is sf.ProgramRole.INSTRUCTION and op.IS_VECTOR):
            close(not _setting(op))
        if role is sf.ProgramRole.BRANCH:
            slot = hw.branch_delay_slots
        elif slot and type(op) is not sf.LabelOp:
            slot -= 1
        out.append([op])
    close(True)
    # the first LD after a setting VMOV is assigned with the group before it (_setting)
    # (each LD split as in its own group: only where the units go changes)
    items = [sized(g) for g in groups]
    for k in range(len(items) - 1):
        if soft[k] and _joins(items[k], items[k + 1][0], units):
            items[k].append(items[k + 1].pop(0))
    for g in items:
        if g:
            assign(g)
    replace_body(program, [o for seq in out for o in seq])
    if not stats:
        return None
    return sum(c * w for c, w in stats) / sum(w for _, w in stats)


@dataclass(frozen=True)
class BalanceLoadsPass(ModulePass):
    name = "balance-loads"
    metric: str = "cl"
    units: int = 0
    """Load units to use (0: all of the machine's)."""
    split: int = 512
    """Split LDs of at least this many elements."""
    hw: str = ""
    """A hardware description JSON (SnowflakeConfig fields); default: the ZC706 build."""
    guard: bool = True
    """Keep a program's rewrite only when it runs no slower on the machine model (guard.py)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        hw = SnowflakeConfig.load(self.hw or None)
        if self.metric != "cl":
            raise PassFailedException(f"balance-loads: metric must be cl, not '{self.metric}'")
        units = self.units or hw.load_units
        if not 1 <= units <= hw.load_units:
            raise PassFailedException(f"balance-loads: units must be 1..{hw.load_units}, not {self.units}")
        if self.split < 2:
            raise PassFailedException(f"balance-loads: split must be >= 2, not {self.split}")
        found = rewritable_programs(op, "balance-loads")
        if not found:
            refuse_unlowered(op, "balance-loads")
        for program in found:
            if "loads_balanced" in program.attributes:
                continue
            result: list[float | None] = []
            kept = guarded(program, hw, self.guard,
                           lambda: result.append(balance_program(program, units, self.split, hw)))
            program.attributes["loads_balanced"] = UnitAttr()
            cl = result[0] if kept else None
            if cl is not None:
                holder = program.parent_op() if isinstance(program.parent_op(), sf.ImageOp) else program
                holder.attributes["load_imbalance_pct"] = FloatAttr(round(cl, 3), f64)
