"""
The reference engine: xDSL's `Interpreter` with one `@impl` per snowflake_asm op.

Obviously correct and slow. The `@impl`s of scalar and branch instructions are made from their
ISA records (dialects/snowflake_asm/isa.py: the semantics function, the written register, the
timing class); those of vector and memory instructions call the shared `Machine` methods. The program counter loop lives here rather than in the
interpreter's block walker: a Snowflake program is a flat instruction stream with
delay-slot branches, so each instruction is one `run_op` and no scope is pushed per
branch (the stock per-block scope push makes long branch loops quadratic).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from xdsl.dialects.builtin import ModuleOp
from xdsl.interpreter import Interpreter, InterpreterFunctions, impl, register_impls

from snowir.dialects import snowflake_asm as sf
from snowir.dialects.snowflake_asm.isa import ISA, Instruction, Kind
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
                          op._int("word"), op.shared is not None)
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


_OpImpl = Callable[[SnowflakeFunctions, Interpreter, Any, _Args], _Args]


def _operand_reader(entry: Instruction) -> Callable[[list[int], sf.SnowflakeInstruction], list[int]]:
    """The values of the operands `entry.semantics` names: a register field reads its register."""
    reads = entry.operand_kinds
    return lambda regs, op: [regs[op.reg_index(n)] if is_reg else op._int(n) for n, is_reg in reads]


def _scalar_impl(entry: Instruction) -> _OpImpl:
    operands, function, written, timing = _operand_reader(entry), entry.function, entry.writes, entry.timing
    assert written is not None

    def run(self: SnowflakeFunctions, interpreter: Interpreter, op: Any, args: _Args) -> _Args:
        m = self.machine
        rd = op.reg_index(written)
        m.timing.scalar(op.reads(), rd, timing)
        if rd:
            regs = m.state.regs
            regs[rd] = wrap32(function(*operands(regs, op)))
        return ()
    return run


def _branch_impl(entry: Instruction) -> _OpImpl:
    operands, condition, timing = _operand_reader(entry), entry.function, entry.timing

    def run(self: SnowflakeFunctions, interpreter: Interpreter, op: Any, args: _Args) -> _Args:
        m = self.machine
        target = self.labels[op.target.data]
        m.timing.check_branch(self.pc, target)
        m.timing.scalar(op.reads(), None, timing)
        self.taken = target if condition(*operands(m.state.regs, op)) else None
        return ()
    return run


_FUNCTIONS: dict[int, type[SnowflakeFunctions]] = {}


def functions_class() -> type[SnowflakeFunctions]:
    """`SnowflakeFunctions` with an `@impl` made from the ISA record of every scalar and branch
    instruction of the table as it is now (an instruction added at run time included)."""
    cls = _FUNCTIONS.get(ISA.generation)
    if cls is None:
        methods: dict[str, Any] = {}
        for entry in ISA:
            make = {Kind.SCALAR: _scalar_impl, Kind.BRANCH: _branch_impl}.get(entry.kind)
            if make is not None:
                methods[f"run_{entry.mnemonic}"] = impl(sf.BY_OPCODE[entry.opcode])(make(entry))
        cls = _FUNCTIONS[ISA.generation] = register_impls(type("IsaFunctions", (SnowflakeFunctions,), methods))
    return cls


def run_reference(machine: Machine, module: ModuleOp | sf.ImageOp, max_instructions: int | None = None) -> None:
    """Execute the program of the module (or image) on `machine` until the PC leaves the program."""
    program = next(op for op in module.body.block.ops if isinstance(op, sf.ProgramOp))
    ops, labels = layout(program)
    if len(ops) != machine.n:
        raise MachineFault(f"module has {len(ops)} instructions, the image {machine.n}")
    funcs = functions_class()(machine, labels)
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
