"""
The `snowflake_asm` ops that hold a program rather than run: `program` (the instruction
stream), `segment` (a named DRAM region of the image), and `image` (one layer's segments and
program, with a symbol table of their own).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    DenseResourceAttr,
    IntAttr,
    StringAttr,
    SymbolNameConstraint,
)
from xdsl.ir import Attribute, Operation
from xdsl.irdl import IRDLOperation, irdl_op_definition, opt_prop_def, prop_def, region_def, traits_def
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import NoTerminator, SymbolOpInterface, SymbolTable
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum

from snowir.dialects.snowflake_asm.abstract_ops import BranchOperation, SnowflakeInstruction
from snowir.dialects.snowflake_asm.attributes import SegmentKind, SegmentKindAttr, symbol
from snowir.dialects.snowflake_asm.scalar_ops import LabelOp
from snowir.hw import CODE_ALIGN


# ---------------------------------------------------------------- program structure
@irdl_op_definition
class ProgramOp(IRDLOperation):
    """
    The instruction stream, in order. `frac_bits` is the fixed-point fraction width the
    write-back shifter uses (8 for Q8.8).
    """

    name = "snowflake_asm.program"
    sym_name = prop_def(SymbolNameConstraint())
    frac_bits = prop_def(IntAttr)
    code_base = opt_prop_def(IntAttr)
    body = region_def("single_block")
    traits = traits_def(NoTerminator(), SymbolOpInterface())

    def __init__(self, name: str, instructions: Sequence[IRDLOperation], frac_bits: int = 8,
                 code_base: int | None = None):
        from xdsl.ir import Block, Region

        props: dict[str, Attribute] = {"sym_name": StringAttr(name), "frac_bits": IntAttr(frac_bits)}
        if code_base is not None:
            props["code_base"] = IntAttr(code_base)
        super().__init__(properties=props, regions=[Region(Block(instructions))])

    @classmethod
    def parse(cls, parser: Parser) -> ProgramOp:
        name = parser.parse_symbol_name()
        frac = 8
        props: dict[str, Attribute] = {"sym_name": name}
        if parser.parse_optional_keyword("frac_bits"):
            frac = parser.parse_integer(allow_boolean=False)
        if parser.parse_optional_keyword("code_base"):
            props["code_base"] = IntAttr(parser.parse_integer(allow_boolean=False, allow_negative=False))
        props["frac_bits"] = IntAttr(frac)
        attrs = parser.parse_optional_attr_dict_with_keyword()
        region = parser.parse_region()
        if not region.blocks:
            from xdsl.ir import Block

            region.add_block(Block())
        op = cls.create(
            properties=props,
            attributes=attrs.data if attrs else {},
            regions=[region],
        )
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" " + symbol(self.sym_name.data))
        if self.frac_bits.data != 8:
            printer.print_string(f" frac_bits {self.frac_bits.data}")
        if self.code_base is not None:
            printer.print_string(f" code_base {self.code_base.data}")
        if self.attributes:
            printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False)

    @property
    def instructions(self) -> list[SnowflakeInstruction]:
        return [op for op in self.body.block.ops if isinstance(op, SnowflakeInstruction)]

    def verify_(self) -> None:
        if not 1 <= self.frac_bits.data <= 15:
            raise VerifyException(f"{self.name}: frac_bits {self.frac_bits.data} out of range [1, 15]")
        if self.code_base is not None and self.code_base.data % CODE_ALIGN:
            raise VerifyException(f"{self.name}: code_base {self.code_base.data} is not {CODE_ALIGN}-byte aligned")
        # one pass: the program is verified whole on every assemble (10^5 ops for ResNet-50)
        labels: set[str] = set()
        branches: list[BranchOperation] = []
        for op in self.body.block.ops:
            kind = program_role(type(op))
            if kind is ProgramRole.LABEL:
                label = op.label.data  # type: ignore[attr-defined]
                if label in labels:
                    raise VerifyException(f"{self.name}: label @{label} defined twice")
                labels.add(label)
            elif kind is ProgramRole.BRANCH:
                branches.append(op)  # type: ignore[arg-type]
            elif kind is None:
                raise VerifyException(
                    f"{self.name}: '{op.name}' is not a Snowflake instruction or label"
                )
        for op in branches:
            if op.target.data not in labels:
                raise VerifyException(
                    f"{op.name}: branch target @{op.target.data} is not a label of @{self.sym_name.data}"
                )


class ProgramRole(StrEnum):
    LABEL = "label"
    BRANCH = "branch"
    INSTRUCTION = "instruction"


@cache
def program_role(cls: type[Operation]) -> ProgramRole | None:
    """What ops of class `cls` are in a program (None: they do not belong in one), decided once a
    class: isinstance against the ABC bases costs ~0.3 us and passes ask it 10^6 times a model."""
    if issubclass(cls, LabelOp):
        return ProgramRole.LABEL
    if issubclass(cls, SnowflakeInstruction):  # the ISA table's kind (isa.Kind.BRANCH: IS_BRANCH)
        return ProgramRole.BRANCH if cls.IS_BRANCH else ProgramRole.INSTRUCTION
    return None


@irdl_op_definition
class SegmentOp(IRDLOperation):
    """
    A named DRAM region of the program image: `input`/`output` tensors the runner fills
    and reads back, `data` (weights, biases; initialised from `value`), `scratch`.
    """

    name = "snowflake_asm.segment"
    sym_name = prop_def(SymbolNameConstraint())
    kind = prop_def(SegmentKindAttr)
    address = prop_def(IntAttr)
    size = prop_def(IntAttr)
    value = opt_prop_def(DenseIntOrFPElementsAttr | DenseResourceAttr)
    traits = traits_def(SymbolOpInterface())

    @classmethod
    def parse(cls, parser: Parser) -> SegmentOp:
        kinds = [k.value for k in SegmentKind]
        kind = SegmentKindAttr(SegmentKind(parser.parse_keyword_in(kinds)))
        name = parser.parse_symbol_name()
        parser.parse_keyword("at")
        address = parser.parse_integer(allow_boolean=False, allow_negative=False)
        parser.parse_keyword("size")
        size = parser.parse_integer(allow_boolean=False, allow_negative=False)
        props: dict[str, Attribute] = {
            "sym_name": name, "kind": kind, "address": IntAttr(address), "size": IntAttr(size),
        }
        if parser.parse_optional_punctuation("="):
            props["value"] = parser.parse_attribute()
        attrs = parser.parse_optional_attr_dict()
        return cls.create(properties=props, attributes=attrs)

    def print(self, printer: Printer) -> None:
        printer.print_string(
            f" {self.kind.data.value} {symbol(self.sym_name.data)} at {self.address.data} size {self.size.data}"
        )
        if self.value is not None:
            printer.print_string(" = ")
            printer.print_attribute(self.value)
        if self.attributes:
            printer.print_op_attributes(self.attributes)

    def __init__(self, name: str, kind: SegmentKind, address: int, size: int,
                 value: DenseIntOrFPElementsAttr | DenseResourceAttr | None = None):
        super().__init__(properties={
            "sym_name": StringAttr(name), "kind": SegmentKindAttr(kind),
            "address": IntAttr(address), "size": IntAttr(size), "value": value,
        })

    def verify_(self) -> None:
        if self.address.data < 0 or self.size.data <= 0:
            raise VerifyException(f"{self.name} @{self.sym_name.data}: address must be >= 0 and size > 0")
        if self.address.data % 2 or self.size.data % 2:
            raise VerifyException(f"{self.name} @{self.sym_name.data}: address and size must be 16-bit aligned")
        if self.value is not None:
            count = 1
            for d in self.value.get_type().get_shape():
                count *= d
            if count * 2 != self.size.data:
                raise VerifyException(
                    f"{self.name} @{self.sym_name.data}: value has {count} 16-bit elements, size is {self.size.data} bytes"
                )


@irdl_op_definition
class ImageOp(IRDLOperation):
    """
    One program image among several in a module: its DRAM segments and its program, in a
    symbol table of their own (segment names are local to the image). A lowered model holds
    one image per device segment (per device layer with `snowflake-lower{whole-model=false}`);
    `@main`'s nn op names the image it runs as (`image = "..."`).
    Discardable attributes carry the layer's decisions for the report (mode, loop order).
    """

    name = "snowflake_asm.image"
    sym_name = prop_def(SymbolNameConstraint())
    body = region_def("single_block")
    traits = traits_def(NoTerminator(), SymbolOpInterface(), SymbolTable())
    assembly_format = "$sym_name attr-dict-with-keyword $body"

    def __init__(self, name: str, ops: Sequence[Operation], attributes: dict[str, Attribute] | None = None):
        from xdsl.ir import Block, Region

        super().__init__(properties={"sym_name": StringAttr(name)}, regions=[Region(Block(ops))],
                         attributes=attributes or {})

    @property
    def program(self) -> ProgramOp:
        return next(op for op in self.body.block.ops if isinstance(op, ProgramOp))

    def verify_(self) -> None:
        programs = 0
        for op in self.body.block.ops:
            if isinstance(op, ProgramOp):
                programs += 1
            elif not isinstance(op, SegmentOp):
                raise VerifyException(f"{self.name} @{self.sym_name.data}: '{op.name}' is not a segment or program")
        if programs != 1:
            raise VerifyException(f"{self.name} @{self.sym_name.data}: holds {programs} programs, needs exactly one")
