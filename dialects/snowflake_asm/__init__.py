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

from xdsl.ir import Dialect

from snowir.dialects.snowflake_asm.abstract_ops import (
    BranchOperation,
    FieldSpec,
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

INSTRUCTIONS: tuple[type[SnowflakeInstruction], ...] = (
    MovOp, MoviOp, AddOp, AddiOp, MulOp, MuliOp, MacOp, MaxOp, VmovOp,
    BleOp, BgtOp, BeqOp, LdOp, TmovOp,
)
BY_OPCODE: dict[int, type[SnowflakeInstruction]] = {op.OPCODE: op for op in INSTRUCTIONS}

SnowflakeAsm = Dialect(
    "snowflake_asm",
    [*INSTRUCTIONS, LabelOp, ProgramOp, SegmentOp, ImageOp],
    [RegisterType, VectorModeAttr, VmovSelectAttr, LoadTargetAttr, SegmentKindAttr],
)

__all__ = [
    "BY_OPCODE", "IMM12_BITS", "IMM17_BITS", "IMM23_BITS", "INSTRUCTIONS", "SELECT_ALL", "SHIFT_MAX", "TRACE_MAX",
    "AddOp", "AddiOp", "BeqOp", "BgtOp", "BleOp", "BranchOperation", "FieldSpec", "ImageOp", "LabelOp", "LdOp",
    "LoadTarget", "LoadTargetAttr", "MacOp", "MaxOp", "MemoryOperation", "MovOp", "MoviOp", "MulOp", "MuliOp",
    "ProgramOp", "ProgramRole", "RegisterType", "ScalarRdRsImm", "ScalarRdRsRs", "SegmentKind", "SegmentKindAttr",
    "SegmentOp", "SnowflakeAsm", "SnowflakeInstruction", "TmovOp", "VectorMode", "VectorModeAttr", "VmovOp",
    "VmovSelect", "VmovSelectAttr", "const", "program_role", "reg", "symbol",
]
