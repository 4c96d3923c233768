"""
The `snowflake_asm` dialect: one op per Snowflake instruction.

Registers are typed attributes (`!snowflake_asm.reg<r5>`), the way xDSL's riscv
dialect types its registers, but held as op properties rather than SSA values: a
Snowflake program is a flat instruction stream with explicit labels and branches,
and a researcher edits it as assembly. Every instruction field of the encoding
(docs/isa.md) is a named property, so the text reads like the paper's listings:

    snowflake_asm.program @conv {
      snowflake_asm.movi r1, 0
      snowflake_asm.label @Tloop
      snowflake_asm.mac coop r3, r1, r2 trace 768 wb relu
      snowflake_asm.addi r1, r1, 16
      snowflake_asm.ble r1, r4, @Tloop
      ...
    }

Laid out as xDSL's riscv dialect is: attributes.py (field widths, registers, enums),
abstract_ops.py (the instruction bases), scalar_ops.py, vector_ops.py (vector and memory
instructions), program_ops.py (program, segment, image). Every name is re-exported here, so
`from snowir.dialects import snowflake_asm as sf; sf.LdOp` reads as it always has.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from xdsl.ir import Dialect

from snowir.dialects.snowflake_asm import isa

from snowir.dialects.snowflake_asm.abstract_ops import (
    BranchOperation,
    FieldSpec,
    define_op,
    MemoryOperation,
    ScalarRdRsImm,
    ScalarRdRsRs,
    SnowflakeInstruction,
)
from snowir.dialects.snowflake_asm.attributes import (
    IMM12_BITS,
    IMM17_BITS,
    IMM23_BITS,
    SELECT_ALL,
    SHIFT_MAX,
    TRACE_MAX,
    LoadTarget,
    LoadTargetAttr,
    RegisterType,
    SegmentKind,
    SegmentKindAttr,
    VectorMode,
    VectorModeAttr,
    VmovSelect,
    VmovSelectAttr,
    const,
    reg,
    symbol,
)
from snowir.dialects.snowflake_asm.program_ops import ImageOp, ProgramOp, ProgramRole, SegmentOp, program_role
from snowir.dialects.snowflake_asm.scalar_ops import (
    AddiOp,
    AddOp,
    BeqOp,
    BgtOp,
    BleOp,
    LabelOp,
    MoviOp,
    MovOp,
    MuliOp,
    MulOp,
)
from snowir.dialects.snowflake_asm.vector_ops import LdOp, MacOp, MaxOp, TmovOp, VmovOp

_WRITTEN: tuple[type[SnowflakeInstruction], ...] = (
    MovOp, MoviOp, AddOp, AddiOp, MulOp, MuliOp, MacOp, MaxOp, VmovOp,
    BleOp, BgtOp, BeqOp, LdOp, TmovOp,
)
"""The op classes written out (a Python constructor and docstring); a record of isa.py without
one gets its class from `define_op`."""
INSTRUCTIONS: tuple[type[SnowflakeInstruction], ...] = tuple(sorted(
    [*_WRITTEN, *(define_op(e) for e in isa.ISA if e not in {c.ISA_ENTRY for c in _WRITTEN})],
    key=lambda c: c.OPCODE))
BY_OPCODE: dict[int, type[SnowflakeInstruction]] = {op.OPCODE: op for op in INSTRUCTIONS}


def op_class(mnemonic: str) -> type[SnowflakeInstruction]:
    """The op class of an instruction of the ISA table, e.g. `op_class("add") is AddOp`."""
    return BY_OPCODE[isa.ISA[mnemonic].opcode]

SnowflakeAsm = Dialect(
    "snowflake_asm",
    [*INSTRUCTIONS, LabelOp, ProgramOp, SegmentOp, ImageOp],
    [RegisterType, VectorModeAttr, VmovSelectAttr, LoadTargetAttr, SegmentKindAttr],
)
assert {op.ISA_ENTRY for op in INSTRUCTIONS} == set(isa.ISA), "an op class per ISA record, and a record per class"


def add_instruction(entry: isa.Instruction, op_class: type[SnowflakeInstruction] | None = None
                    ) -> type[SnowflakeInstruction]:
    """Add `entry` to the ISA and its op class to the dialect (made by `define_op` unless
    given): the encoder, decoder, both engines, the asm passes and docs/isa.md's table follow."""
    global INSTRUCTIONS
    isa.register(entry)
    try:
        cls = op_class if op_class is not None else define_op(entry)
    except Exception:
        isa.unregister(entry.mnemonic)
        raise
    if cls.ISA_ENTRY is not entry:
        isa.unregister(entry.mnemonic)
        raise ValueError(f"{cls.__name__} is not the op class of {entry.mnemonic} (its name is {cls.name})")
    INSTRUCTIONS = (*INSTRUCTIONS, cls)
    BY_OPCODE[entry.opcode] = cls
    SnowflakeAsm._operations.append(cls)  # contexts made from now on parse it
    return cls


def remove_instruction(mnemonic: str) -> None:
    """Undo `add_instruction`."""
    global INSTRUCTIONS
    entry = isa.ISA[mnemonic]
    cls = BY_OPCODE.pop(entry.opcode)
    INSTRUCTIONS = tuple(c for c in INSTRUCTIONS if c is not cls)
    SnowflakeAsm._operations.remove(cls)
    isa.unregister(mnemonic)


@contextmanager
def extended(entry: isa.Instruction, op_class: type[SnowflakeInstruction] | None = None
             ) -> Iterator[type[SnowflakeInstruction]]:
    """The ISA with `entry` for the duration of a `with` block (a tutorial, a test): its op class."""
    cls = add_instruction(entry, op_class)
    try:
        yield cls
    finally:
        remove_instruction(entry.mnemonic)



@contextmanager
def vmov_select_extended(name: str) -> Iterator[VmovSelect]:
    """VMOV with the select `name` at its next free code for the duration of a `with` block (a
    write-back unit's word, snowir/writeback.py; a tutorial, a test): the new VmovSelect member.
    The VMOV record is replaced; its op class follows it (encoder, decoder, engines, docs)."""
    VmovOp.ISA_ENTRY = isa.add_vmov_select(name)  # only its fields change: the rest of the class stands
    try:
        yield VmovSelect(name)
    finally:
        VmovOp.ISA_ENTRY = isa.remove_vmov_select(name)


__all__ = [
    "BY_OPCODE", "IMM12_BITS", "IMM17_BITS", "IMM23_BITS", "INSTRUCTIONS", "SELECT_ALL", "SHIFT_MAX", "TRACE_MAX",
    "AddOp", "AddiOp", "BeqOp", "BgtOp", "BleOp", "BranchOperation", "FieldSpec", "ImageOp", "LabelOp", "LdOp",
    "LoadTarget", "LoadTargetAttr", "MacOp", "MaxOp", "MemoryOperation", "MovOp", "MoviOp", "MulOp", "MuliOp",
    "ProgramOp", "ProgramRole", "RegisterType", "ScalarRdRsImm", "ScalarRdRsRs", "SegmentKind", "SegmentKindAttr",
    "SegmentOp", "SnowflakeAsm", "add_instruction", "define_op", "op_class", "extended", "isa", "remove_instruction", "SnowflakeInstruction", "TmovOp", "VectorMode", "VectorModeAttr", "VmovOp",
    "VmovSelect", "VmovSelectAttr", "const", "vmov_select_extended", "program_role", "reg", "symbol",
]
