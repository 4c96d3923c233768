"""
The fast engine: decode the program once, compile each basic block to one Python
function, run those.

A block is a straight run of instructions in one instruction-cache bank, ending at a
branch's last delay slot or before a branch target. Scalar instructions compile to
straight-line register arithmetic and branches to their condition, both rendered from the
semantics of their ISA records (dialects/snowflake_asm/isa.py); their timing (issue slots
and RAW stalls, the rule of the record's timing class, as `Timing.scalar`) is folded into
closed form: every dispatch time in a
run is max(t + a, ready[r] + b_r, ...) over the few registers the run reads before it
writes them, so a run of any length costs a couple of `max` calls. Vector and memory
instructions call the shared `Machine` methods, exactly as the reference engine does.
Anything irregular (a label inside delay slots, a partly loaded bank, a delay-slot
rule broken) runs instruction by instruction through `_step`, so faults are reported
at the exact instruction.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from types import CodeType

from snowir.dialects import snowflake_asm as sf
from snowir.dialects.snowflake_asm.isa import ISA, BitField, Kind, TimingClass
from snowir.hw import SnowflakeConfig
from snowir.machine.core import Machine, delay_slot_raw_pairs, mark, next_pc
from snowir.machine.encoding import decode
from snowir.machine.state import MachineFault
from snowir.machine.steady import SteadyLoop

_WRAP = "((({x}) + 2147483648) & 4294967295) - 2147483648"


def _is_scalar(op: sf.SnowflakeInstruction) -> bool:
    return op.ISA_ENTRY.kind is Kind.SCALAR  # type: ignore[union-attr]


def _steady_block(ops: list[sf.SnowflakeInstruction]) -> bool:
    """A self-loop steady.py may time in closed form: every instruction's ISA record allows it
    (`Instruction.steady`: vector ops that neither load nor change the write-back layout, linear
    scalar code, branches of a comparison steady.py solves), and a MAC or MAX is in it."""
    written = {op.writes() for op in ops if _is_scalar(op)}
    anchored = False
    for op in ops:
        entry = op.ISA_ENTRY
        assert entry is not None
        if not entry.steady:
            return False
        if entry.steady_if is not None and op.properties[entry.steady_if[0]].data not in entry.steady_if[1]:  # type: ignore[attr-defined]
            return False
        if entry.nonlinear and all(op.reg_index(name) in written for name in entry.reads):
            return False
        if entry.kind is Kind.BRANCH and entry.compare is None:
            return False
        anchored |= entry.steady_anchor
    return anchored


_CODE: dict[str, CodeType] = {}
"""Compiled block functions by source text (position-independent), shared by every program."""


def _operand(op: sf.SnowflakeInstruction, consts: list[int] | None) -> Callable[[BitField], str]:
    """How an operand of `op`'s semantics reads in compiled code: a register `R[i]`, an
    immediate its value or, with `consts`, `K[i]` (appended there)."""
    def text(f: BitField) -> str:
        if f.kind == "reg":
            return f"R[{op.reg_index(f.name)}]"
        value = op._int(f.name)
        if consts is None:
            return f"({value})"
        consts.append(value)
        return f"K[{len(consts) - 1}]"
    return text


def _scalar_expr(op: sf.SnowflakeInstruction, consts: list[int] | None = None) -> str:
    """The value an instruction writes, from its ISA record's semantics; with `consts`,
    immediates become `K[i]` so blocks that differ only in addresses and offsets share one
    compiled code object."""
    entry = op.ISA_ENTRY
    assert entry is not None
    expr = entry.python(_operand(op, consts))
    return _WRAP.format(x=expr) if entry.wraps else expr


def _condition(op: sf.SnowflakeInstruction, steady: bool = False) -> str:
    """The statement setting `taken` for a branch, from its record's semantics; `steady`: its
    operands also in `ba`, `bb` (steady.py's watcher reads them)."""
    entry = op.ISA_ENTRY
    assert entry is not None
    if not steady:
        return f"taken = {entry.python(_operand(op, None))}"
    names = {"rs1": "ba", "rs2": "bb"}
    return (f"ba = R[{op.reg_index('rs1')}]; bb = R[{op.reg_index('rs2')}]; "
            f"taken = {entry.python(lambda f: names[f.name])}")


def _dynamic_call(op: sf.SnowflakeInstruction, pc: str, functional: bool = False) -> str:
    """The Machine call of a data-path instruction; `pc` is an expression of its address.
    `functional`: its arithmetic alone (`Machine.mac_f` and friends, steady.py)."""
    r = op.reg_index
    f = "_f" if functional else ""
    if isinstance(op, sf.MacOp):
        return (f"M.mac{f}({r('rd')}, {r('rs1')}, {r('rs2')}, {op._int('trace')}, "
                f"{op.mode.data == sf.VectorMode.INDP}, {op.wb is not None}, {op.relu is not None})")
    if isinstance(op, sf.MaxOp):
        return f"M.max{f}({r('rd')}, {r('rs1')}, {r('rs2')}, {op._int('trace')}, {op.wb is not None})"
    if isinstance(op, sf.VmovOp):
        return (f"M.vmov{f}({r('rs1')}, {op.mode.data == sf.VectorMode.INDP}, {op.select.data.value!r}, "
                f"{op._int('word')}, {op.shared is not None})")
    if isinstance(op, sf.LdOp):
        return (f"M.ld({pc}, {r('rd')}, {r('rs1')}, {r('rs2')}, {op._int('unit')}, "
                f"{op.target.data.value!r}, {op._int('select')})")
    if isinstance(op, sf.TmovOp):
        return f"M.tmov({r('rd')}, {r('rs1')}, {r('rs2')}, {op._int('unit')}, {op._int('select')})"
    raise AssertionError(op.name)  # pragma: no cover


_DECODED: dict[tuple[int, int], sf.SnowflakeInstruction] = {}
_DECODED_FOR = [ISA.generation]  # the ISA table the cached ops were decoded with


def _decoded(word: int, pc: int, select_bits: int) -> sf.SnowflakeInstruction:
    """`decode`, shared by word for all but branches (whose label names their pc): the engine
    only reads these ops, and a network's programs repeat a few thousand distinct words. An
    instruction or a VMOV select added or removed since (`sf.extended`, `sf.vmov_select_extended`)
    changes what a word means: the cache starts again."""
    if _DECODED_FOR[0] != ISA.generation:
        _DECODED.clear()
        _DECODED_FOR[0] = ISA.generation
    op = _DECODED.get((word, select_bits))
    if op is None:
        op = decode(word, pc, select_bits)
        if not op.IS_BRANCH:
            if len(_DECODED) > 200_000:
                _DECODED.clear()
            _DECODED[(word, select_bits)] = op
    return op


class _Run:
    """Closed-form timing of a run of control-pipeline instructions: the rule of their ISA
    records' timing classes (`TimingClass`, as `Timing.scalar` applies it one by one)."""

    def __init__(self, hw: SnowflakeConfig):
        self.hw = hw
        self.count = 0
        self.issued = 0  # issue cycles of the run before its last instruction
        self.last_issue = 0
        self.last: dict[str, int] = {}  # dispatch time of the last instruction, max-plus form
        self.ready_of: dict[int, dict[str, int]] = {}  # registers written in the run
        self.reads_external: set[int] = set()

    def add(self, reads: tuple[int, ...], write: int | None, timing: TimingClass) -> None:
        if self.count:
            self.issued += self.last_issue
        d = {"t": 0} if self.count == 0 else {k: v + self.last_issue for k, v in self.last.items()}
        for reg in reads:
            if reg == 0:
                continue
            if reg in self.ready_of:
                source = self.ready_of[reg]
            else:
                source = {f"rr[{reg}]": 0}
                self.reads_external.add(reg)
            for k, v in source.items():
                if d.get(k, -1 << 60) < v:
                    d[k] = v
        if write:
            latency = timing.latency(self.hw)
            self.ready_of[write] = {k: v + latency for k, v in d.items()}
        self.last = d
        self.last_issue = timing.issue_cycles
        self.count += 1

    @staticmethod
    def _max(expr: dict[str, int]) -> str:
        terms = [f"{k} + {v}" if v else k for k, v in sorted(expr.items())]
        return terms[0] if len(terms) == 1 else f"max({', '.join(terms)})"

    def emit(self) -> list[str]:
        if not self.count:
            return []
        lines = [f"d = {self._max(self.last)}"]
        lines.append(f"if d > t + {self.issued}: S['raw'] += d - t - {self.issued}")
        # every expression reads the ready times of before the run: compute, then store
        written = sorted(self.ready_of.items())
        for reg, expr in written:
            lines.append(f"n{reg} = {self._max(expr)}")
        for reg, _ in written:
            lines.append(f"rr[{reg}] = n{reg}")
        lines.append(f"t = d + {self.last_issue}")
        return lines


class FastProgram:
    def __init__(self, machine: Machine, ops: list[sf.SnowflakeInstruction] | None = None):
        self.m = machine
        bits = machine.hw.select_bits
        self.ops = ops if ops is not None else [_decoded(w, pc, bits) for pc, w in enumerate(machine.code.tolist())]
        self.n = len(self.ops)
        hw = machine.hw
        self.slots = hw.branch_delay_slots
        self.targets: dict[int, int] = {}
        leaders = {0, self.n}
        bank = hw.icache_bank_instructions
        leaders.update(range(0, self.n, bank))
        leaders.update(m.pc for m in machine.image.markers)  # the machine marks a layer's start between blocks
        for pc, op in enumerate(self.ops):
            if op.IS_BRANCH:
                target = pc + self._offset(op, pc)
                self.targets[pc] = target
                leaders.add(target)
                leaders.add(pc + self.slots + 1)
        self.leaders = sorted(x for x in leaders if 0 <= x <= self.n)
        self.block_end = {s: e for s, e in zip(self.leaders, self.leaders[1:])}
        self.blocks: dict[int, list | None] = {}

    def code_changed(self, first: int, count: int) -> None:
        """`ld icache` brought words that differ from the decoded ones: decode them again and
        drop every block that could hold them (their leaders stay: a changed branch may add
        leaders, so the block map is rebuilt)."""
        bits = self.m.hw.select_bits
        for pc in range(first, first + count):
            self.ops[pc] = _decoded(int(self.m.code[pc]), pc, bits)
        blocks = self.blocks  # the dict the running `_run` holds: emptied, not replaced
        self.__init__(self.m, self.ops)  # type: ignore[misc]
        blocks.clear()
        self.blocks = blocks

    @staticmethod
    def _offset(op: sf.BranchOperation, pc: int) -> int:
        return int(op.target.data[1:]) - pc

    # ------------------------------------------------------------------ compilation
    def _regular(self, s: int, e: int) -> int | None:
        """The branch pc of a compilable block [s, e), -1 if it has none, None if irregular."""
        branches = [pc for pc in range(s, e) if self.ops[pc].IS_BRANCH]
        if not branches:
            return -1
        if len(branches) > 1:
            return None
        b = branches[0]
        if b + self.slots + 1 != e:
            return None
        if delay_slot_raw_pairs(self.ops, b, self.slots) > 1:
            return None
        return b

    def _compile(self, s: int) -> list | None:
        """[function, length, icache generation checked, bank] of the block at `s`, None if irregular."""
        e = self.block_end.get(s)
        if e is None:
            return None
        b = self._regular(s, e)
        if b is None:
            return None
        m = self.m
        self_loop = b >= 0 and self.targets[b] == s
        steady = self_loop and _steady_block(self.ops[s:e])
        body: list[str] = ["t = T.t"]
        consts: list[int] = []
        run = _Run(m.hw)

        def flush() -> None:
            nonlocal run
            body.extend(run.emit())
            body.append("T.t = t")
            run = _Run(m.hw)

        for pc in range(s, e):
            op = self.ops[pc]
            entry = op.ISA_ENTRY
            if entry.kind is Kind.SCALAR:
                rd = op.writes()
                if rd:
                    body.append(f"R[{rd}] = {_scalar_expr(op, consts)}")
                run.add(op.reads(), rd, entry.timing)
            elif entry.kind is Kind.BRANCH:
                body.append(_condition(op, steady))
                run.add(op.reads(), None, entry.timing)
            else:
                flush()
                # addresses relative to the block's start P: blocks of one shape at different
                # places (every layer of a network has a few) share one compiled code object
                body.append(f"M.pc = T.pc = P + {pc - s}")  # T.pc: the part its events name
                body.append(_dynamic_call(op, "M.pc"))
                body.append("t = T.t")
        flush()
        if self_loop and not any(line.startswith("M.") for line in body):
            src = self._scalar_loop_source(body, s, e)
        elif self_loop:
            # a loop that branches to its own start: iterate here (the bank and the
            # branch target were checked when the block was entered and cannot change
            # but by a faulting LD into this very bank); a vector loop is timed in closed
            # form once it is periodic (steady.py)
            watch = "        if n == X.next:\n            n += X.watch(n, budget, ba, bb)\n" if steady else ""
            src = ("def block(budget):\n    n = 0\n    while True:\n        "
                   + "\n        ".join(body)
                   + "\n        n += 1\n        if not taken or n >= budget:\n            break\n" + watch
                   + ("    X.stop()\n" if steady else "") + f"    return (P if taken else P + {e - s}), n\n")
        else:
            ret = f"(P + {self.targets[b] - s} if taken else P + {e - s})" if b >= 0 else f"P + {e - s}"
            src = "def block(budget):\n    " + "\n    ".join(body) + f"\n    return {ret}, 1\n"
        env = {"T": m.timing, "M": m, "R": m.state.regs, "rr": m.timing.reg_ready,
               "S": m.timing.stalls, "max": max, "P": s, "K": tuple(consts)}
        if steady:
            env["X"] = self._steady_loop(s, e)
        code = _CODE.get(src)
        if code is None:
            if len(_CODE) > 50_000:  # a long-lived process (a sweep) does not grow without bound
                _CODE.clear()
            code = _CODE[src] = compile(src, "<block>", "exec")
        exec(code, env)
        return [env["block"], e - s, -1, None, self.targets[b] if b >= 0 else None]

    def _steady_loop(self, s: int, e: int) -> SteadyLoop:
        """The watcher of the vector self-loop [s, e), with its functional twin: the block's
        register arithmetic and data-path effects without their timing."""
        m = self.m
        consts: list[int] = []
        lines: list[str] = []
        cmp = "<="
        for pc in range(s, e):
            op = self.ops[pc]
            entry = op.ISA_ENTRY
            if entry.kind is Kind.SCALAR:
                rd = op.writes()
                if rd:
                    lines.append(f"R[{rd}] = {_scalar_expr(op, consts)}")
            elif entry.kind is Kind.BRANCH:
                cmp = entry.compare
                lines.append(_condition(op))
            else:
                lines.append(f"M.pc = P + {pc - s}")
                call = _dynamic_call(op, "M.pc", functional=True)
                lines.append(f"w = {call}\n        if w is not None: WB(w)" if not isinstance(op, sf.VmovOp) else call)
        src = ("def fblock(k):\n    i = 0\n    taken = True\n    while i < k:\n        " + "\n        ".join(lines)
               + "\n        i += 1\n        if not taken:\n            break\n    return i, taken\n")
        code = _CODE.get(src)
        if code is None:
            code = _CODE[src] = compile(src, "<fblock>", "exec")
        loop = SteadyLoop(m, lambda k: (0, True), cmp, sum(1 for op in self.ops[s:e] if op.IS_VECTOR))
        env = {"M": m, "R": m.state.regs, "P": s, "K": tuple(consts), "WB": loop.ranges.append}
        exec(code, env)
        loop.fblock = env["fblock"]
        return loop

    @staticmethod
    def _scalar_loop_source(body: list[str], s: int, e: int) -> str:
        """A self-loop of scalar instructions with registers and ready times in locals."""
        text = "\n".join(body)
        regs = sorted({int(k) for k in re.findall(r"(?<![r\w])R\[(\d+)\]", text)})
        ready = sorted({int(k) for k in re.findall(r"rr\[(\d+)\]", text)})
        text = re.sub(r"(?<![r\w])R\[(\d+)\]", r"x\1", text)
        text = re.sub(r"rr\[(\d+)\]", r"q\1", text)
        hoisted = sorted({int(k) for k in re.findall(r"K\[(\d+)\]", text)})
        text = re.sub(r"K\[(\d+)\]", r"k\1", text)
        text = text.replace("T.t = t\n", "").removesuffix("T.t = t")
        assert text.startswith("t = T.t\n")
        text = text.removeprefix("t = T.t\n")
        lines = ["def block(budget):", "    n = 0", "    t = T.t"]
        lines += [f"    x{k} = R[{k}]" for k in regs] + [f"    q{k} = rr[{k}]" for k in ready]
        lines += [f"    k{k} = K[{k}]" for k in hoisted]
        lines += ["    while True:"] + ["        " + line for line in text.splitlines() if line.strip()]
        lines += ["        n += 1", "        if not taken or n >= budget:", "            break"]
        lines += [f"    R[{k}] = x{k}" for k in regs] + [f"    rr[{k}] = q{k}" for k in ready]
        lines += ["    T.t = t", f"    return (P if taken else P + {e - s}), n"]
        return "\n".join(lines) + "\n"

    def _resident(self, entry: list, pc: int) -> int | None:
        """The bank a fetch of `pc` uses (`Timing.bank_of`) when it holds the whole block and
        its branch target; None otherwise (the block then runs instruction by instruction)."""
        length, target = entry[1], entry[4]
        try:
            bank = self.m.timing.bank_of(pc)
        except MachineFault:
            return None
        lo, hi, _ = self.m.timing.icache[bank]
        if pc + length > hi or (target is not None and not lo <= target < hi):
            return None
        return bank

    # ------------------------------------------------------------------ execution
    def _step(self, pc: int, slots_left: int, pending: int | None) -> tuple[int, int, int | None]:
        """One instruction, the reference engine's way (irregular code only)."""
        m = self.m
        op = self.ops[pc]
        timing = m.timing
        try:
            timing.fetch(pc)
            taken = None
            entry = op.ISA_ENTRY
            if entry.kind is Kind.SCALAR:
                rd = op.writes()
                timing.scalar(op.reads(), rd, entry.timing)
                if rd:
                    regs = m.state.regs
                    m.state.regs[rd] = eval(_scalar_expr(op), {"R": regs})
            elif entry.kind is Kind.BRANCH:
                if slots_left:
                    raise MachineFault("branch in a branch delay slot")
                if delay_slot_raw_pairs(self.ops, pc, self.slots) > 1:
                    raise MachineFault("more than one RAW-dependent pair in the branch delay slots")
                target = self.targets[pc]
                timing.check_branch(pc, target)
                timing.scalar(op.reads(), None, entry.timing)
                regs = m.state.regs
                if op.taken(regs[op.reg_index("rs1")], regs[op.reg_index("rs2")]):  # the record's condition
                    taken = target
            else:
                m.pc = pc
                eval(_dynamic_call(op, str(pc)), {"M": m})
        except MachineFault as fault:
            raise fault.at(pc, str(op).strip())
        m.dynamic += 1
        return next_pc(pc, slots_left, pending, op.IS_BRANCH, taken, self.slots)

    def _earliest(self, fault: MachineFault) -> MachineFault:
        """The first fault in program order: a deferred MAC's overflow comes before `fault`."""
        try:
            self.m.flush()
        except MachineFault as earlier:
            return earlier
        return fault

    def run(self, max_instructions: int | None = None) -> None:
        m = self.m
        m.defer_macs(lambda pc: str(self.ops[pc]).strip())
        try:
            self._run(max_instructions)
            m.flush()
        except MachineFault as fault:
            raise self._earliest(fault)
        finally:
            m.deferred = None

    def _run(self, max_instructions: int | None = None) -> None:
        m = self.m
        n = self.n
        limit = max_instructions if max_instructions is not None else 1 << 62
        blocks = self.blocks
        timing = m.timing
        icache = timing.icache
        pc, slots_left, pending = 0, 0, None
        while pc != n or slots_left:
            if pc == m.next_mark and not slots_left:
                mark(m)
            if pc >= n:
                raise MachineFault("the program ends inside branch delay slots").at(pc - 1, str(self.ops[pc - 1]).strip())
            if not slots_left:
                entry = blocks.get(pc, False)
                if entry is False:
                    entry = blocks[pc] = self._compile(pc)
                if entry is not None:
                    if entry[2] != timing.icache_generation:
                        entry[3] = self._resident(entry, pc)
                        entry[2] = timing.icache_generation
                    bank = entry[3]
                    if bank is not None:
                        timing.pc = pc  # a compiled loop's events: its entry's part
                        if icache[bank][2] > timing.t:
                            timing.fetch(pc)
                        length = entry[1]
                        budget = min(limit - m.dynamic, m.next_progress - m.dynamic) // length
                        if budget >= 1 or m.dynamic + length <= limit:
                            try:
                                pc, count = entry[0](max(1, budget))
                            except MachineFault as fault:
                                raise fault.at(m.pc, str(self.ops[m.pc]).strip())
                            m.dynamic += length * count
                            if m.dynamic >= m.next_progress:
                                m.report_progress()
                            continue
                        # within a block of the limit: one instruction at a time, so the limit
                        # fault names the instruction the reference engine names
            at = pc
            pc, slots_left, pending = self._step(pc, slots_left, pending)
            if m.dynamic > limit:
                raise MachineFault(f"instruction limit {limit} reached (endless loop?)").at(at, str(self.ops[at]).strip())


def run_fast(machine: Machine, max_instructions: int | None = None) -> None:
    if machine.profile is not None:  # loops run in closed form here: no per-instruction cycles
        raise MachineFault("a per-instruction profile needs the reference engine")
    program = FastProgram(machine)
    machine.code_changed = program.code_changed
    program.run(max_instructions)
