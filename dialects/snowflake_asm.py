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
"""

from __future__ import annotations

import io
from abc import ABC
from collections.abc import Callable, Sequence
from functools import cache, lru_cache
from typing import ClassVar, Self

from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    DenseResourceAttr,
    IntAttr,
    StringAttr,
    SymbolNameConstraint,
    UnitAttr,
)
from xdsl.ir import Attribute, Dialect, Operation, ParametrizedAttribute, TypeAttribute
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    opt_prop_def,
    prop_def,
    region_def,
    traits_def,
)
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import SpacedOpaqueSyntaxAttribute
from xdsl.parser import AttrParser, Parser
from xdsl.utils.mlir_lexer import MLIRLexer
from xdsl.printer import Printer
from xdsl.traits import NoTerminator, SymbolOpInterface, SymbolTable
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum

from snowir.dialects.property_ops import initialise, verified_fast
from snowir.hw import CODE_ALIGN, DEFAULT, ISA_CUS, ISA_LOAD_UNITS, ISA_MASK_WORDS, ISA_SELECT_BITS, ISA_VMACS_PER_CU

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


def _fits_signed(value: int, bits: int) -> bool:
    return -(1 << (bits - 1)) <= value < (1 << (bits - 1))


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
            return (IntAttr(_parse_register_index(parser)),)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<r{self.index.data}>")

    def verify(self) -> None:
        if not 0 <= self.index.data < DEFAULT.registers:
            raise VerifyException(
                f"register r{self.index.data} does not exist (r0..r{DEFAULT.registers - 1})"
            )

    def __str__(self) -> str:
        return f"r{self.index.data}"


def _parse_register_index(parser: AttrParser) -> int:
    pos = parser.pos
    name = parser.parse_identifier("register (r0..r31)")
    if len(name) < 2 or name[0] != "r" or not name[1:].isdigit():
        parser.raise_error(f"expected a register r0..r31, got '{name}'", pos, parser.pos)
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
    _SHARED_REGISTERS[id(attr)] = index  # kept alive by the cache, so the id stays its own
    return attr


_SHARED_REGISTERS: dict[int, int] = {}


class VectorMode(StrEnum):
    """COOP: the 16 MACs of a vMAC share one kernel, a gather adder sums them.
    INDP: the 16 MACs take 16 kernels, map values are broadcast."""

    COOP = "coop"
    INDP = "indp"


@irdl_attr_definition
class VectorModeAttr(EnumAttribute[VectorMode], SpacedOpaqueSyntaxAttribute):
    name = "snowflake_asm.mode"


class VmovSelect(StrEnum):
    """Which CU operand register a VMOV fills."""

    BIAS = "bias"
    BYPASS = "bypass"
    MASK = "mask"
    STRIDE = "stride"
    SHIFT = "shift"


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


# ---------------------------------------------------------------- syntax helper
# A field spec drives both the custom parser and printer of an instruction:
#   "rd"/"rs1"/"rs2"      register property
#   ","                   punctuation
#   ("int", prop)         signed integer property
#   ("kw", word, prop)    `word N` integer property
#   ("okw", word, prop)   optional `word N`, absent = 0
#   ("flag", prop)        optional unit keyword
#   ("enum", prop, cls)   enum attribute printed as a bare keyword
#   ("label", prop)       label name printed as @name
#   ("select", prop)      `all` or an integer
FieldSpec = str | tuple


class SnowflakeInstruction(IRDLOperation, ABC):
    """Base class of all instruction ops; subclasses set `SYNTAX` and `OPCODE`."""

    SYNTAX: ClassVar[tuple[FieldSpec, ...]] = ()
    OPCODE: ClassVar[int] = -1
    IS_VECTOR: ClassVar[bool] = False
    IS_BRANCH: ClassVar[bool] = False

    comment = opt_prop_def(StringAttr)

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        # the field checks irdl_op_definition wraps, taken the same way, for the fast verifier
        _OWN_VERIFY[cls] = getattr(cls, "verify_")

    def verify(self, verify_nested_ops: bool = True) -> None:
        # xDSL's generic verifier spends ~10 us an instruction on operands, results, regions,
        # successors and variadic sizes an instruction cannot have (1.5 s of assembling
        # ResNet-50): the common case is proved cheaply, anything else (and every error) is xDSL's
        if not verified_fast(self, _OWN_VERIFY[type(self)]):
            super().verify(verify_nested_ops)

    def _build(self, properties: dict[str, Attribute | None]) -> None:
        # An instruction has no operands, results, regions or successors, so the IRDL
        # builder's argument normalisation is pure overhead (a third of code-generation
        # time at 10^5 instructions); the verifier still checks every property.
        initialise(self, {k: v for k, v in properties.items() if v is not None}, {})

    def clone(self, value_mapper=None, block_mapper=None, *, clone_name_hints: bool = True,
              clone_operands: bool = True) -> Self:
        # nothing to map: a copy of the properties and attributes (tile-to-asm clones the code of
        # layers with equal plans, 5 * 10^4 instructions for ResNet-50)
        new = type(self).__new__(type(self))
        initialise(new, dict(self.properties), dict(self.attributes))
        return new

    @classmethod
    def parse(cls, parser: Parser) -> SnowflakeInstruction:
        props: dict[str, Attribute] = {}
        for field in cls.SYNTAX:
            if field == ",":
                parser.parse_punctuation(",")
            elif isinstance(field, str):
                props[field] = reg(_parse_register_index(parser))
            elif field[0] == "int":
                props[field[1]] = IntAttr(parser.parse_integer(allow_boolean=False))
            elif field[0] == "kw":
                parser.parse_keyword(field[1])
                props[field[2]] = IntAttr(parser.parse_integer(allow_boolean=False))
            elif field[0] == "okw":
                if parser.parse_optional_keyword(field[1]):
                    props[field[2]] = IntAttr(parser.parse_integer(allow_boolean=False))
                else:
                    props[field[2]] = IntAttr(0)
            elif field[0] == "flag":
                if parser.parse_optional_keyword(field[1]):
                    props[field[1]] = UnitAttr()
            elif field[0] == "enum":
                enum_cls: type[EnumAttribute] = field[2]
                values = [v.value for v in enum_cls.enum_type]
                props[field[1]] = enum_cls(enum_cls.enum_type(parser.parse_keyword_in(values)))
            elif field[0] == "label":
                props[field[1]] = parser.parse_symbol_name()
            elif field[0] == "select":
                parser.parse_keyword(field[1])
                if parser.parse_optional_keyword("all"):
                    props[field[2]] = IntAttr(SELECT_ALL)
                else:
                    props[field[2]] = IntAttr(parser.parse_integer(allow_boolean=False))
            else:  # pragma: no cover - a programming error in a SYNTAX table
                raise AssertionError(field)
        attrs = parser.parse_optional_attr_dict()
        if "comment" in attrs:
            props["comment"] = attrs.pop("comment")
        op = cls.create(properties=props, attributes=attrs)
        return op

    def print(self, printer: Printer) -> None:
        parts: list[str] = []
        for field in self.SYNTAX:
            if field == ",":
                parts[-1] += ","
            elif isinstance(field, str):
                parts.append(str(self.properties[field]))
            elif field[0] == "int":
                parts.append(str(self._int(field[1])))
            elif field[0] == "kw":
                parts.append(f"{field[1]} {self._int(field[2])}")
            elif field[0] == "okw":
                if self._int(field[2]):
                    parts.append(f"{field[1]} {self._int(field[2])}")
            elif field[0] == "flag":
                if field[1] in self.properties:
                    parts.append(field[1])
            elif field[0] == "enum":
                parts.append(str(self.properties[field[1]].data.value))  # type: ignore
            elif field[0] == "label":
                parts.append(symbol(self._label(field[1])))
            elif field[0] == "select":
                value = self._int(field[2])
                parts.append(f"{field[1]} {'all' if value == SELECT_ALL else value}")
        printer.print_string(" " + " ".join(parts))
        attrs = dict(self.attributes)
        if self.comment is not None:
            attrs["comment"] = self.comment
        if attrs:
            printer.print_op_attributes(attrs)

    # field accessors used by the assembler and the machine model
    def _int(self, name: str) -> int:
        attr = self.properties[name]
        assert isinstance(attr, IntAttr)
        return attr.data

    def _label(self, name: str) -> str:
        attr = self.properties[name]
        assert isinstance(attr, StringAttr)
        return attr.data

    def reg_index(self, name: str) -> int:
        attr = self.properties[name]
        index = _SHARED_REGISTERS.get(id(attr))  # passes ask 10^6 times: no type check for reg()'s
        if index is not None:
            return index
        assert isinstance(attr, RegisterType)
        return attr.index.data

    def reads(self) -> tuple[int, ...]:
        """Registers this instruction reads at dispatch (RAW hazard detection)."""
        return ()

    def writes(self) -> int | None:
        """The register this instruction writes, if any."""
        return None

    def _check_signed(self, name: str, bits: int) -> None:
        value = self._int(name)
        if not _fits_signed(value, bits):
            raise VerifyException(
                f"{self.name}: {name} {value} does not fit a signed {bits}-bit immediate"
            )

    def _check_range(self, name: str, lo: int, hi: int) -> None:
        value = self._int(name)
        if not lo <= value <= hi:
            raise VerifyException(f"{self.name}: {name} {value} out of range [{lo}, {hi}]")


_OWN_VERIFY: dict[type[SnowflakeInstruction], Callable[[SnowflakeInstruction], None]] = {}


class ScalarRdRsRs(SnowflakeInstruction, ABC):
    SYNTAX: ClassVar[tuple[FieldSpec, ...]] = ("rd", ",", "rs1", ",", "rs2")
    rd = prop_def(RegisterType)
    rs1 = prop_def(RegisterType)
    rs2 = prop_def(RegisterType)

    def __init__(self, rd: int, rs1: int, rs2: int):
        self._build({"rd": reg(rd), "rs1": reg(rs1), "rs2": reg(rs2)})

    def reads(self) -> tuple[int, ...]:
        return (self.reg_index("rs1"), self.reg_index("rs2"))

    def writes(self) -> int | None:
        return self.reg_index("rd")


class ScalarRdRsImm(SnowflakeInstruction, ABC):
    SYNTAX: ClassVar[tuple[FieldSpec, ...]] = ("rd", ",", "rs1", ",", ("int", "imm"))
    rd = prop_def(RegisterType)
    rs1 = prop_def(RegisterType)
    imm = prop_def(IntAttr)

    def __init__(self, rd: int, rs1: int, imm: int):
        self._build({"rd": reg(rd), "rs1": reg(rs1), "imm": const(imm)})

    def verify_(self) -> None:
        self._check_signed("imm", IMM17_BITS)

    def reads(self) -> tuple[int, ...]:
        return (self.reg_index("rs1"),)

    def writes(self) -> int | None:
        return self.reg_index("rd")


# ---------------------------------------------------------------- data movement
@irdl_op_definition
class MovOp(SnowflakeInstruction):
    """rd = rs1 << shift (shift 0..31)."""

    name = "snowflake_asm.mov"
    OPCODE: ClassVar[int] = 0
    SYNTAX: ClassVar[tuple[FieldSpec, ...]] = ("rd", ",", "rs1", ("okw", "shl", "shift"))
    rd = prop_def(RegisterType)
    rs1 = prop_def(RegisterType)
    shift = prop_def(IntAttr)

    def __init__(self, rd: int, rs1: int, shift: int = 0):
        self._build({"rd": reg(rd), "rs1": reg(rs1), "shift": const(shift)})

    def verify_(self) -> None:
        self._check_range("shift", 0, SHIFT_MAX)

    def reads(self) -> tuple[int, ...]:
        return (self.reg_index("rs1"),)

    def writes(self) -> int | None:
        return self.reg_index("rd")


@irdl_op_definition
class MoviOp(SnowflakeInstruction):
    """rd = sign-extended 23-bit immediate."""

    name = "snowflake_asm.movi"
    OPCODE: ClassVar[int] = 1
    SYNTAX: ClassVar[tuple[FieldSpec, ...]] = ("rd", ",", ("int", "imm"))
    rd = prop_def(RegisterType)
    imm = prop_def(IntAttr)

    def __init__(self, rd: int, imm: int):
        self._build({"rd": reg(rd), "imm": const(imm)})

    def verify_(self) -> None:
        self._check_signed("imm", IMM23_BITS)

    def writes(self) -> int | None:
        return self.reg_index("rd")


# ---------------------------------------------------------------- scalar compute
@irdl_op_definition
class AddOp(ScalarRdRsRs):
    """rd = rs1 + rs2 (32-bit wrap-around)."""

    name = "snowflake_asm.add"
    OPCODE: ClassVar[int] = 2


@irdl_op_definition
class AddiOp(ScalarRdRsImm):
    """rd = rs1 + sign-extended 17-bit immediate."""

    name = "snowflake_asm.addi"
    OPCODE: ClassVar[int] = 3


@irdl_op_definition
class MulOp(ScalarRdRsRs):
    """rd = low 32 bits of rs1 * rs2."""

    name = "snowflake_asm.mul"
    OPCODE: ClassVar[int] = 4


@irdl_op_definition
class MuliOp(ScalarRdRsImm):
    """rd = low 32 bits of rs1 * sign-extended 17-bit immediate."""

    name = "snowflake_asm.muli"
    OPCODE: ClassVar[int] = 5


# ---------------------------------------------------------------- vector compute
@irdl_op_definition
class MacOp(SnowflakeInstruction):
    """
    Multiply-accumulate a trace of `trace` map elements starting at maps-buffer
    address rs1 with weights at weights-buffer address rs2, on every vMAC of every CU.
    With `wb` the accumulators are written back (bias, bypass, rounding, saturation,
    optional `relu`) to DRAM byte address rd and cleared.
    """

    name = "snowflake_asm.mac"
    OPCODE: ClassVar[int] = 6
    IS_VECTOR: ClassVar[bool] = True
    SYNTAX: ClassVar[tuple[FieldSpec, ...]] = (("enum", "mode", VectorModeAttr), "rd", ",", "rs1", ",", "rs2",
              ("kw", "trace", "trace"), ("flag", "wb"), ("flag", "relu"))
    mode = prop_def(VectorModeAttr)
    rd = prop_def(RegisterType)
    rs1 = prop_def(RegisterType)
    rs2 = prop_def(RegisterType)
    trace = prop_def(IntAttr)
    wb = opt_prop_def(UnitAttr)
    relu = opt_prop_def(UnitAttr)

    def __init__(self, mode: VectorMode, rd: int, rs1: int, rs2: int, trace: int,
                 *, wb: bool = False, relu: bool = False):
        props: dict[str, Attribute] = {
            "mode": VectorModeAttr(mode), "rd": reg(rd), "rs1": reg(rs1),
            "rs2": reg(rs2), "trace": const(trace),
        }
        if wb:
            props["wb"] = UnitAttr()
        if relu:
            props["relu"] = UnitAttr()
        self._build(props)

    def verify_(self) -> None:
        self._check_range("trace", 1, TRACE_MAX)
        if self.relu is not None and self.wb is None:
            raise VerifyException(f"{self.name}: relu applies at write-back; it needs wb")

    def reads(self) -> tuple[int, ...]:
        return (self.reg_index("rd"), self.reg_index("rs1"), self.reg_index("rs2"))


@irdl_op_definition
class MaxOp(SnowflakeInstruction):
    """
    Pool unit: compare a trace of `trace` 16-lane vectors, the i-th at maps-buffer
    address rs1 + i*rs2, with the retained vector; with `wb` write it to DRAM
    address rd and reset it.
    """

    name = "snowflake_asm.max"
    OPCODE: ClassVar[int] = 7
    IS_VECTOR: ClassVar[bool] = True
    SYNTAX: ClassVar[tuple[FieldSpec, ...]] = ("rd", ",", "rs1", ",", "rs2", ("kw", "trace", "trace"), ("flag", "wb"))
    rd = prop_def(RegisterType)
    rs1 = prop_def(RegisterType)
    rs2 = prop_def(RegisterType)
    trace = prop_def(IntAttr)
    wb = opt_prop_def(UnitAttr)

    def __init__(self, rd: int, rs1: int, rs2: int, trace: int, *, wb: bool = False):
        props: dict[str, Attribute] = {
            "rd": reg(rd), "rs1": reg(rs1), "rs2": reg(rs2), "trace": const(trace),
        }
        if wb:
            props["wb"] = UnitAttr()
        self._build(props)

    def verify_(self) -> None:
        self._check_range("trace", 1, TRACE_MAX)

    def reads(self) -> tuple[int, ...]:
        return (self.reg_index("rd"), self.reg_index("rs1"), self.reg_index("rs2"))


@irdl_op_definition
class VmovOp(SnowflakeInstruction):
    """
    Fill a CU operand register: `bias` (16 lanes per vMAC from its weights buffer at
    rs1), `bypass` (residual values from each CU's maps buffer at rs1), `mask`
    (write-back enable bits of vMACs 32w..32w+31 = rs1, `word w`, absent = 0), `stride`
    (DRAM bytes between the write-back blocks of consecutive CUs = rs1) or `shift`
    (write-back shift = the weights' fraction bits, rs1).
    """

    name = "snowflake_asm.vmov"
    OPCODE: ClassVar[int] = 8
    IS_VECTOR: ClassVar[bool] = True
    SYNTAX: ClassVar[tuple[FieldSpec, ...]] = (("enum", "mode", VectorModeAttr), ("enum", "select", VmovSelectAttr), "rs1",
                                               ("okw", "word", "word"))
    mode = prop_def(VectorModeAttr)
    select = prop_def(VmovSelectAttr)
    rs1 = prop_def(RegisterType)
    word = prop_def(IntAttr)

    def __init__(self, mode: VectorMode, select: VmovSelect, rs1: int, word: int = 0):
        self._build({
            "mode": VectorModeAttr(mode), "select": VmovSelectAttr(select), "rs1": reg(rs1), "word": const(word),
        })

    def verify_(self) -> None:
        self._check_range("word", 0, ISA_MASK_WORDS - 1 if self.select.data == VmovSelect.MASK else 0)

    def reads(self) -> tuple[int, ...]:
        return (self.reg_index("rs1"),)


# ---------------------------------------------------------------- flow control
class BranchOperation(SnowflakeInstruction, ABC):
    """Compare rs1 with rs2; if true, continue at `target` after the 4 delay slots."""

    IS_BRANCH: ClassVar[bool] = True
    SYNTAX: ClassVar[tuple[FieldSpec, ...]] = ("rs1", ",", "rs2", ",", ("label", "target"))
    rs1 = prop_def(RegisterType)
    rs2 = prop_def(RegisterType)
    target = prop_def(StringAttr)

    def __init__(self, rs1: int, rs2: int, target: str):
        self._build({"rs1": reg(rs1), "rs2": reg(rs2),
                                     "target": StringAttr(target)})

    def reads(self) -> tuple[int, ...]:
        return (self.reg_index("rs1"), self.reg_index("rs2"))

    @staticmethod
    def taken(lhs: int, rhs: int) -> bool:
        raise NotImplementedError


@irdl_op_definition
class BleOp(BranchOperation):
    """Branch if rs1 <= rs2 (signed)."""

    name = "snowflake_asm.ble"
    OPCODE: ClassVar[int] = 9

    @staticmethod
    def taken(lhs: int, rhs: int) -> bool:
        return lhs <= rhs


@irdl_op_definition
class BgtOp(BranchOperation):
    """Branch if rs1 > rs2 (signed)."""

    name = "snowflake_asm.bgt"
    OPCODE: ClassVar[int] = 10

    @staticmethod
    def taken(lhs: int, rhs: int) -> bool:
        return lhs > rhs


@irdl_op_definition
class BeqOp(BranchOperation):
    """Branch if rs1 == rs2."""

    name = "snowflake_asm.beq"
    OPCODE: ClassVar[int] = 11

    @staticmethod
    def taken(lhs: int, rhs: int) -> bool:
        return lhs == rhs


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


# ---------------------------------------------------------------- memory access
class MemoryOperation(SnowflakeInstruction, ABC):
    rd = prop_def(RegisterType)
    rs1 = prop_def(RegisterType)
    rs2 = prop_def(RegisterType)
    unit = prop_def(IntAttr)
    select = prop_def(IntAttr)

    def reads(self) -> tuple[int, ...]:
        return (self.reg_index("rd"), self.reg_index("rs1"), self.reg_index("rs2"))

    def verify_(self) -> None:
        # the encoding's range; a machine with fewer units faults on the others (docs/isa.md)
        self._check_range("unit", 0, ISA_LOAD_UNITS - 1)


@irdl_op_definition
class LdOp(MemoryOperation):
    """
    Load `rs2` elements (instructions for icache) from DRAM byte address rs1 into
    buffer address rd of the selected buffer(s), on load unit `unit`.
    select: maps 0..C-1 = one CU, all = every CU; weights 0..C*V-1 = one vMAC (cu*V+v),
    C*V + v = vMAC v of every CU, all = every vMAC (C CUs of V vMACs: 16..19 on the 4 x 4
    machine); icache 0..1 = bank.
    """

    name = "snowflake_asm.ld"
    OPCODE: ClassVar[int] = 12
    SYNTAX: ClassVar[tuple[FieldSpec, ...]] = (("enum", "target", LoadTargetAttr), "rd", ",", "rs1", ",", "rs2",
              ("kw", "unit", "unit"), ("select", "to", "select"))
    target = prop_def(LoadTargetAttr)

    def __init__(self, target: LoadTarget, rd: int, rs1: int, rs2: int, unit: int,
                 select: int):
        self._build({
            "target": LoadTargetAttr(target), "rd": reg(rd), "rs1": reg(rs1),
            "rs2": reg(rs2), "unit": const(unit), "select": const(select),
        })

    def verify_(self) -> None:
        super().verify_()
        select = self._int("select")
        target = self.target.data
        if target == LoadTarget.MAPS:
            ok = select < ISA_CUS or select == SELECT_ALL
        elif target == LoadTarget.WEIGHTS:
            ok = select < ISA_CUS * ISA_VMACS_PER_CU + ISA_VMACS_PER_CU or select == SELECT_ALL
        else:
            ok = select < DEFAULT.icache_banks
        if not ok:
            raise VerifyException(f"{self.name}: select {select} is not valid for {target.value}")


@irdl_op_definition
class TmovOp(MemoryOperation):
    """Store `rs2` elements of CU `select`'s maps buffer at address rs1 to DRAM address rd."""

    name = "snowflake_asm.tmov"
    OPCODE: ClassVar[int] = 13
    SYNTAX: ClassVar[tuple[FieldSpec, ...]] = ("rd", ",", "rs1", ",", "rs2", ("kw", "unit", "unit"), ("select", "from", "select"))

    def __init__(self, rd: int, rs1: int, rs2: int, unit: int, select: int):
        self._build({
            "rd": reg(rd), "rs1": reg(rs1), "rs2": reg(rs2),
            "unit": const(unit), "select": const(select),
        })

    def verify_(self) -> None:
        super().verify_()
        self._check_range("select", 0, ISA_CUS - 1)


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
    if issubclass(cls, BranchOperation):
        return ProgramRole.BRANCH
    if issubclass(cls, SnowflakeInstruction):
        return ProgramRole.INSTRUCTION
    return None


class SegmentKind(StrEnum):
    INPUT = "input"
    OUTPUT = "output"
    DATA = "data"
    SCRATCH = "scratch"


@irdl_attr_definition
class SegmentKindAttr(EnumAttribute[SegmentKind], SpacedOpaqueSyntaxAttribute):
    name = "snowflake_asm.segment_kind"


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


INSTRUCTIONS: tuple[type[SnowflakeInstruction], ...] = (
    MovOp, MoviOp, AddOp, AddiOp, MulOp, MuliOp, MacOp, MaxOp, VmovOp,
    BleOp, BgtOp, BeqOp, LdOp, TmovOp,
)
BY_OPCODE: dict[int, type[SnowflakeInstruction]] = {op.OPCODE: op for op in INSTRUCTIONS}

@irdl_op_definition
class ImageOp(IRDLOperation):
    """
    One program image among several in a module: its DRAM segments and its program, in a
    symbol table of their own (segment names are local to the image). A lowered model holds
    one image per device layer; `@main`'s nn op names the image it runs as (`image = "..."`).
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


SnowflakeAsm = Dialect(
    "snowflake_asm",
    [*INSTRUCTIONS, LabelOp, ProgramOp, SegmentOp, ImageOp],
    [RegisterType, VectorModeAttr, VmovSelectAttr, LoadTargetAttr, SegmentKindAttr],
)
