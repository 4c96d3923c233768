"""
The `snowflake_asm` dialect's attributes: the encoding's field widths, the register type
(`!snowflake_asm.reg<r7>`) and the enums an instruction spells as a bare keyword
(`coop`, `bias`, `maps`, `input`), as xDSL's riscv dialect keeps its registers and
immediates apart from its ops.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from functools import cache, lru_cache

from xdsl.dialects.builtin import IntAttr
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import Attribute, ParametrizedAttribute, SpacedOpaqueSyntaxAttribute, TypeAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.mlir_lexer import MLIRLexer
from xdsl.utils.str_enum import StrEnum

from snowir.hw import DEFAULT, ISA_SELECT_BITS

# ---------------------------------------------------------------- field widths
# The encoding's field widths (docs/isa.md); verifiers and the assembler share them.
IMM12_BITS = 12
IMM17_BITS = 17
IMM23_BITS = 23
TRACE_MAX = (1 << 10) - 1
SHIFT_MAX = 31
SELECT_ALL = (1 << ISA_SELECT_BITS) - 1
"""`all` in an LD select: the widest select field's all-ones value. A machine decodes its own
width (hw.select_bits: 5 bits, 31, on the 4 x 4 machine), the assembler encodes for it."""


@lru_cache(maxsize=1 << 16)
def symbol(name: str) -> str:
    """`@name`, or `@"name"` where the name is not a bare identifier (an exporter's node name
    such as `/backbone/Conv_0`), as MLIR prints symbols: what it prints, it parses back."""
    if MLIRLexer.bare_identifier_regex.fullmatch(name) is not None:
        return "@" + name
    out = io.StringIO()
    Printer(stream=out).print_symbol_name(name)
    return out.getvalue()


# ---------------------------------------------------------------- attributes
@irdl_attr_definition
class RegisterType(ParametrizedAttribute, TypeAttribute):
    """A scalar register of the control pipeline: `!snowflake_asm.reg<r7>`. r0 reads 0."""

    name = "snowflake_asm.reg"
    index: IntAttr

    def __init__(self, index: int | IntAttr):
        super().__init__(IntAttr(index) if isinstance(index, int) else index)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            return (IntAttr(parse_register_index(parser)),)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<r{self.index.data}>")

    def verify(self) -> None:
        if not 0 <= self.index.data < DEFAULT.registers:
            raise VerifyException(
                f"register r{self.index.data} does not exist (r0..r{DEFAULT.registers - 1})"
            )

    def __str__(self) -> str:
        return f"r{self.index.data}"


def parse_register_index(parser: AttrParser) -> int:
    pos = parser.pos
    name = parser.parse_identifier("register (r0..r31)")
    if len(name) < 2 or name[0] != "r" or not name[1:].isdigit():
        parser.raise_error(f"expected a register r0..r31, got '{name}'", pos, parser.pos)
    if int(name[1:]) >= DEFAULT.registers:  # here, where the text has a line; the verifier has none
        parser.raise_error(f"register {name} does not exist (r0..r{DEFAULT.registers - 1})", pos, parser.pos)
    return int(name[1:])


@lru_cache(maxsize=1 << 16)
def const(value: int) -> IntAttr:
    """A shared `IntAttr` (immediates, traces, units: few distinct values over 10^5 instructions)."""
    return IntAttr(value)


@cache
def reg(index: int) -> RegisterType:
    # attributes are immutable values: code generators build hundreds of thousands of
    # instructions over 32 registers, so share one attribute per register
    attr = RegisterType(index)
    SHARED_REGISTERS[id(attr)] = index  # kept alive by the cache, so the id stays its own
    return attr


SHARED_REGISTERS: dict[int, int] = {}
"""id of a register attribute `reg` made -> its index: `SnowflakeInstruction.reg_index` reads
it instead of type-checking the attribute (passes ask 10^6 times a model)."""


class VectorMode(StrEnum):
    """COOP: the 16 MACs of a vMAC share one kernel, a gather adder sums them.
    INDP: the 16 MACs take 16 kernels, map values are broadcast."""

    COOP = "coop"
    INDP = "indp"


@irdl_attr_definition
class VectorModeAttr(EnumAttribute[VectorMode], SpacedOpaqueSyntaxAttribute):
    name = "snowflake_asm.mode"


class VmovSelect(StrEnum):
    """Which CU operand register a VMOV fills; a member's place is its code in the word (isa.py).
    `act` sets a write-back unit's word, the select named by the unit (snowir/writeback.py: the
    activation unit's), as does a select added at run time (`add_vmov_select_member`); `mbias`
    fills the bias operand from the maps buffer (docs/isa.md, VMOV)."""

    BIAS = "bias"
    BYPASS = "bypass"
    MASK = "mask"
    STRIDE = "stride"
    SHIFT = "shift"
    ACT = "act"
    MBIAS = "mbias"


def add_vmov_select_member(name: str) -> VmovSelect:
    """A member `name` appended to VmovSelect (`isa.add_vmov_select`: a select added at run time,
    as a tutorial or a test adds an instruction for a `with` block). Python's enums are closed
    to new members, so this writes the three maps `Enum` keeps; `remove_vmov_select_member` undoes it."""
    if name in VmovSelect._value2member_map_:
        raise ValueError(f"VMOV select '{name}' exists")
    member = str.__new__(VmovSelect, name)
    member._name_, member._value_ = name.upper(), name
    VmovSelect._member_map_[member._name_] = member
    VmovSelect._value2member_map_[name] = member
    VmovSelect._member_names_.append(member._name_)
    return member


def remove_vmov_select_member(name: str) -> None:
    member = VmovSelect(name)
    if member._name_ != VmovSelect._member_names_[-1]:
        raise ValueError(f"VMOV select '{name}' is not the last one added")
    VmovSelect._member_names_.pop()
    del VmovSelect._member_map_[member._name_], VmovSelect._value2member_map_[name]


@irdl_attr_definition
class VmovSelectAttr(EnumAttribute[VmovSelect], SpacedOpaqueSyntaxAttribute):
    name = "snowflake_asm.vmov_select"


class LoadTarget(StrEnum):
    MAPS = "maps"
    WEIGHTS = "weights"
    ICACHE = "icache"


@irdl_attr_definition
class LoadTargetAttr(EnumAttribute[LoadTarget], SpacedOpaqueSyntaxAttribute):
    name = "snowflake_asm.load_target"


class SegmentKind(StrEnum):
    INPUT = "input"
    OUTPUT = "output"
    DATA = "data"
    SCRATCH = "scratch"


@irdl_attr_definition
class SegmentKindAttr(EnumAttribute[SegmentKind], SpacedOpaqueSyntaxAttribute):
    name = "snowflake_asm.segment_kind"

