"""
The reference engine: xDSL's `Interpreter` with one `@impl` per snowflake_asm op.

Obviously correct and slow. The program counter loop lives here rather than in the
interpreter's block walker: a Snowflake program is a flat instruction stream with
delay-slot branches, so each instruction is one `run_op` and no scope is pushed per
branch (the stock per-block scope push makes long branch loops quadratic).
"""

from __future__ import annotations

from typing import Any

from xdsl.dialects.builtin import ModuleOp
from xdsl.interpreter import Interpreter, InterpreterFunctions, impl, register_impls

from snowir.dialects import snowflake_asm as sf
from snowir.fixedpoint import wrap32
from snowir.machine.core import Machine, delay_slot_raw_pairs, mark, next_pc
from snowir.machine.encoding import branch_label, decode, layout
from snowir.machine.state import MachineFault

_Args = tuple[Any, ...]


@register_impls
class SnowflakeFunctions(InterpreterFunctions):
    def __init__(self, machine: Machine, labels: dict[str, int]):
        self.machine = machine
        self.labels = labels
        self.taken: int | None = None
        self.pc = 0

    # ---------------------------------------------------------------- helpers
    def _scalar(self, op: sf.SnowflakeInstruction, value: int) -> _Args:
        m = self.machine
        rd = op.reg_index("rd")
        m.timing.scalar(op.reads(), rd)
        if rd:
            m.state.regs[rd] = wrap32(value)
        return ()

    def _r(self, op: sf.SnowflakeInstruction, name: str) -> int:
        return self.machine.state.regs[op.reg_index(name)]

    # ---------------------------------------------------------------- scalar
    @impl(sf.MovOp)
    def run_mov(self, interpreter: Interpreter, op: sf.MovOp, args: _Args) -> _Args:
        return self._scalar(op, self._r(op, "rs1") << op._int("shift"))

    @impl(sf.MoviOp)
    def run_movi(self, interpreter: Interpreter, op: sf.MoviOp, args: _Args) -> _Args:
        return self._scalar(op, op._int("imm"))

    @impl(sf.AddOp)
    def run_add(self, interpreter: Interpreter, op: sf.AddOp, args: _Args) -> _Args:
        return self._scalar(op, self._r(op, "rs1") + self._r(op, "rs2"))

    @impl(sf.AddiOp)
    def run_addi(self, interpreter: Interpreter, op: sf.AddiOp, args: _Args) -> _Args:
        return self._scalar(op, self._r(op, "rs1") + op._int("imm"))

    @impl(sf.MulOp)
    def run_mul(self, interpreter: Interpreter, op: sf.MulOp, args: _Args) -> _Args:
        return self._scalar(op, self._r(op, "rs1") * self._r(op, "rs2"))

    @impl(sf.MuliOp)
    def run_muli(self, interpreter: Interpreter, op: sf.MuliOp, args: _Args) -> _Args:
        return self._scalar(op, self._r(op, "rs1") * op._int("imm"))

    # ---------------------------------------------------------------- branches
    def _branch(self, op: sf.BranchOperation) -> _Args:
        m = self.machine
        target = self.labels[op.target.data]
        m.timing.check_branch(self.pc, target)
        m.timing.scalar(op.reads(), None)
        taken = op.taken(self._r(op, "rs1"), self._r(op, "rs2"))
        self.taken = target if taken else None
        return ()

    @impl(sf.BleOp)
    def run_ble(self, interpreter: Interpreter, op: sf.BleOp, args: _Args) -> _Args:
        return self._branch(op)

    @impl(sf.BgtOp)
    def run_bgt(self, interpreter: Interpreter, op: sf.BgtOp, args: _Args) -> _Args:
        return self._branch(op)

    @impl(sf.BeqOp)
    def run_beq(self, interpreter: Interpreter, op: sf.BeqOp, args: _Args) -> _Args:
        return self._branch(op)

    # ---------------------------------------------------------------- vector
    @impl(sf.MacOp)
    def run_mac(self, interpreter: Interpreter, op: sf.MacOp, args: _Args) -> _Args:
        self.machine.mac(op.reg_index("rd"), op.reg_index("rs1"), op.reg_index("rs2"), op._int("trace"),
                         op.mode.data == sf.VectorMode.INDP, op.wb is not None, op.relu is not None)
        return ()

    @impl(sf.MaxOp)
    def run_max(self, interpreter: Interpreter, op: sf.MaxOp, args: _Args) -> _Args:
        self.machine.max(op.reg_index("rd"), op.reg_index("rs1"), op.reg_index("rs2"), op._int("trace"),
                         op.wb is not None)
        return ()

    @impl(sf.VmovOp)
    def run_vmov(self, interpreter: Interpreter, op: sf.VmovOp, args: _Args) -> _Args:
        self.machine.vmov(op.reg_index("rs1"), op.mode.data == sf.VectorMode.INDP, op.select.data.value,
                          op._int("word"))
        return ()

    # ---------------------------------------------------------------- memory
    @impl(sf.LdOp)
    def run_ld(self, interpreter: Interpreter, op: sf.LdOp, args: _Args) -> _Args:
        self.machine.ld(self.pc, op.reg_index("rd"), op.reg_index("rs1"), op.reg_index("rs2"),
                        op._int("unit"), op.target.data.value, op._int("select"))
        return ()

    @impl(sf.TmovOp)
    def run_tmov(self, interpreter: Interpreter, op: sf.TmovOp, args: _Args) -> _Args:
        self.machine.tmov(op.reg_index("rd"), op.reg_index("rs1"), op.reg_index("rs2"),
                          op._int("unit"), op._int("select"))
        return ()


def run_reference(machine: Machine, module: ModuleOp | sf.ImageOp, max_instructions: int | None = None) -> None:
    """Execute the program of the module (or image) on `machine` until the PC leaves the program."""
    program = next(op for op in module.body.block.ops if isinstance(op, sf.ProgramOp))
    ops, labels = layout(program)
    if len(ops) != machine.n:
        raise MachineFault(f"module has {len(ops)} instructions, the image {machine.n}")
    funcs = SnowflakeFunctions(machine, labels)
    interpreter = Interpreter(module)
    interpreter.register_implementations(funcs)
    timing = machine.timing
    slots = machine.hw.branch_delay_slots
    n = len(ops)
    pc, slots_left, pending = 0, 0, None
    limit = max_instructions if max_instructions is not None else 1 << 62

    def code_changed(first: int, count: int) -> None:  # `ld icache` of words the host or program rewrote
        for at in range(first, first + count):
            ops[at] = decode(int(machine.code[at]), at, machine.hw.select_bits)
            if isinstance(ops[at], sf.BranchOperation):
                target = int(ops[at].target.data[1:])
                labels[branch_label(target)] = target

    machine.code_changed = code_changed
    profile = machine.profile
    while pc != n or slots_left:
        if pc == machine.next_mark and not slots_left:
            mark(machine)
        if pc >= n:
            raise MachineFault("the program ends inside branch delay slots").at(pc - 1, str(ops[pc - 1]))
        op = ops[pc]
        before = timing.t
        try:
            timing.fetch(pc)
            if op.IS_BRANCH:
                if slots_left:
                    raise MachineFault("branch in a branch delay slot")
                if delay_slot_raw_pairs(ops, pc, slots) > 1:
                    raise MachineFault("more than one RAW-dependent pair in the branch delay slots")
            funcs.pc = pc
            interpreter.run_op(op, ())
        except MachineFault as fault:
            raise fault.at(pc, str(op).strip())
        machine.dynamic += 1
        if profile is not None:
            profile.counts[pc] += 1
            profile.cycles[pc] += timing.t - before
        if machine.dynamic >= machine.next_progress:
            machine.report_progress()
        if machine.dynamic > limit:
            raise MachineFault(f"instruction limit {limit} reached (endless loop?)").at(pc, str(op).strip())
        pc, slots_left, pending = next_pc(pc, slots_left, pending, op.IS_BRANCH,
                                          funcs.taken if op.IS_BRANCH else None, slots)
