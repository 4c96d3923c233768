"""
The `snowflake_asm` scalar instructions of the control pipeline: register moves, integer
arithmetic on addresses and counters, the three branches, and the labels they target.
Opcode, syntax, registers, semantics and timing are each instruction's record in isa.py; a
class here adds its Python constructor and docstring.
"""

from __future__ import annotations

from xdsl.dialects.builtin import IntAttr, StringAttr
from xdsl.irdl import IRDLOperation, irdl_op_definition, prop_def
from xdsl.parser import Parser
from xdsl.printer import Printer

from snowir.dialects.snowflake_asm.abstract_ops import (
    BranchOperation,
    ScalarRdRsImm,
    ScalarRdRsRs,
    SnowflakeInstruction,
)
from snowir.dialects.snowflake_asm.attributes import RegisterType, const, reg, symbol


# ---------------------------------------------------------------- data movement
@irdl_op_definition
class MovOp(SnowflakeInstruction):
    """rd = rs1 << shift (shift 0..31)."""

    name = "snowflake_asm.mov"
    rd = prop_def(RegisterType)
    rs1 = prop_def(RegisterType)
    shift = prop_def(IntAttr)

    def __init__(self, rd: int, rs1: int, shift: int = 0):
        self._build({"rd": reg(rd), "rs1": reg(rs1), "shift": const(shift)})


@irdl_op_definition
class MoviOp(SnowflakeInstruction):
    """rd = sign-extended 23-bit immediate."""

    name = "snowflake_asm.movi"
    rd = prop_def(RegisterType)
    imm = prop_def(IntAttr)

    def __init__(self, rd: int, imm: int):
        self._build({"rd": reg(rd), "imm": const(imm)})


# ---------------------------------------------------------------- scalar compute
@irdl_op_definition
class AddOp(ScalarRdRsRs):
    """rd = rs1 + rs2 (32-bit wrap-around)."""

    name = "snowflake_asm.add"


@irdl_op_definition
class AddiOp(ScalarRdRsImm):
    """rd = rs1 + sign-extended 17-bit immediate."""

    name = "snowflake_asm.addi"


@irdl_op_definition
class MulOp(ScalarRdRsRs):
    """rd = low 32 bits of rs1 * rs2."""

    name = "snowflake_asm.mul"


@irdl_op_definition
class MuliOp(ScalarRdRsImm):
    """rd = low 32 bits of rs1 * sign-extended 17-bit immediate."""

    name = "snowflake_asm.muli"


# ---------------------------------------------------------------- flow control
@irdl_op_definition
class BleOp(BranchOperation):
    """Branch if rs1 <= rs2 (signed)."""

    name = "snowflake_asm.ble"


@irdl_op_definition
class BgtOp(BranchOperation):
    """Branch if rs1 > rs2 (signed)."""

    name = "snowflake_asm.bgt"


@irdl_op_definition
class BeqOp(BranchOperation):
    """Branch if rs1 == rs2."""

    name = "snowflake_asm.beq"


@irdl_op_definition
class LabelOp(IRDLOperation):
    """A branch target; occupies no instruction slot."""

    name = "snowflake_asm.label"
    label = prop_def(StringAttr)

    def __init__(self, label: str):
        super().__init__(properties={"label": StringAttr(label)})

    @classmethod
    def parse(cls, parser: Parser) -> LabelOp:
        name = parser.parse_symbol_name()
        attrs = parser.parse_optional_attr_dict()
        return cls.create(properties={"label": name}, attributes=attrs)

    def print(self, printer: Printer) -> None:
        printer.print_string(" " + symbol(self.label.data))
        if self.attributes:
            printer.print_op_attributes(self.attributes)
