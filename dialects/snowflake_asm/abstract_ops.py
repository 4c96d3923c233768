"""
The bases of the `snowflake_asm` instruction ops, one per encoding shape, as xDSL's riscv
dialect keeps `RdRsRsOperation` and friends in abstract_ops.py: `SnowflakeInstruction` (the
`SYNTAX` table that drives parse and print, the fast build and verify paths, the register
accessors the assembler and machine model read) and the shapes several instructions share
(`ScalarRdRsRs`, `ScalarRdRsImm`, `BranchOperation`, `MemoryOperation`).

An op class names its instruction (`name`); its OPCODE, SYNTAX, IS_VECTOR / IS_BRANCH flags,
`reads()` / `writes()`, a branch's `taken()` and the range checks of its integer fields come
from that instruction's record in the ISA table (isa.py) when the class is defined.
`define_op` makes the class of a new instruction of one of the shapes here from its record.
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar, Self

from xdsl.dialects.builtin import IntAttr, StringAttr, UnitAttr
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import Attribute
from xdsl.irdl import IRDLOperation, opt_prop_def, prop_def
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from snowir.dialects.property_ops import initialise, verified_fast
from snowir.dialects.snowflake_asm import isa
from snowir.dialects.snowflake_asm.attributes import (
    SELECT_ALL,
    SHARED_REGISTERS,
    RegisterType,
    const,
    parse_register_index,
    reg,
    symbol,
)
from snowir.hw import ISA_LOAD_UNITS


def _fits_signed(value: int, bits: int) -> bool:
    return -(1 << (bits - 1)) <= value < (1 << (bits - 1))


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
    """Base class of all instruction ops; `ISA_ENTRY` (its record in isa.py) sets the rest."""

    ISA_ENTRY: ClassVar[isa.Instruction | None] = None
    SYNTAX: ClassVar[tuple[FieldSpec, ...]] = ()
    OPCODE: ClassVar[int] = -1
    IS_VECTOR: ClassVar[bool] = False
    IS_BRANCH: ClassVar[bool] = False

    comment = opt_prop_def(StringAttr)

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        entry = isa.ISA.by_mnemonic.get(str(getattr(cls, "name", "")).removeprefix("snowflake_asm."))
        if entry is not None:
            _from_table(cls, entry)
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

    @classmethod
    def from_properties(cls, properties: dict[str, Attribute]) -> Self:
        """An instruction of these properties, already checked (the decoder's: `_build` without
        an `__init__` signature to go through)."""
        new = cls.__new__(cls)
        initialise(new, properties, {})
        return new

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
                props[field] = reg(parse_register_index(parser))
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
        index = SHARED_REGISTERS.get(id(attr))  # passes ask 10^6 times: no type check for reg()'s
        if index is not None:
            return index
        assert isinstance(attr, RegisterType)
        return attr.index.data

    def cu_cycles(self, hw: Any) -> int:
        """CU cycles of a vector instruction on machine `hw` (its record's `cu_cycles`); 0 else."""
        entry = self.ISA_ENTRY
        if entry is None or entry.cu_cycles is None:
            return 0
        return entry.cu_cycles(_FieldValues(self), hw)

    def reads(self) -> tuple[int, ...]:
        """Registers this instruction reads at dispatch (RAW hazard detection): the table's."""
        return ()

    def writes(self) -> int | None:
        """The register this instruction writes, if any: the table's."""
        return None

    def verify_(self) -> None:
        """The integer fields fit their bits (a class with checks of its own replaces this)."""
        _check_int_fields(self)

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
    """`rd = f(rs1, rs2)` (isa.scalar_rrr)."""

    SHAPE: ClassVar[tuple[FieldSpec, ...]] = isa.RRR_SYNTAX
    rd = prop_def(RegisterType)
    rs1 = prop_def(RegisterType)
    rs2 = prop_def(RegisterType)

    def __init__(self, rd: int, rs1: int, rs2: int):
        self._build({"rd": reg(rd), "rs1": reg(rs1), "rs2": reg(rs2)})


class ScalarRdRsImm(SnowflakeInstruction, ABC):
    """`rd = f(rs1, imm)` (isa.scalar_rri)."""

    SHAPE: ClassVar[tuple[FieldSpec, ...]] = isa.RRI_SYNTAX
    rd = prop_def(RegisterType)
    rs1 = prop_def(RegisterType)
    imm = prop_def(IntAttr)

    def __init__(self, rd: int, rs1: int, imm: int):
        self._build({"rd": reg(rd), "rs1": reg(rs1), "imm": const(imm)})



# ---------------------------------------------------------------- flow control
class BranchOperation(SnowflakeInstruction, ABC):
    """Compare rs1 with rs2; if true, continue at `target` after the 4 delay slots."""

    IS_BRANCH: ClassVar[bool] = True
    SHAPE: ClassVar[tuple[FieldSpec, ...]] = isa.BRANCH_SYNTAX
    rs1 = prop_def(RegisterType)
    rs2 = prop_def(RegisterType)
    target = prop_def(StringAttr)

    def __init__(self, rs1: int, rs2: int, target: str):
        self._build({"rs1": reg(rs1), "rs2": reg(rs2),
                                     "target": StringAttr(target)})

    @staticmethod
    def taken(lhs: int, rhs: int) -> bool:
        """The branch condition on (rs1, rs2): the table's semantics."""
        raise NotImplementedError



# ---------------------------------------------------------------- memory access
class MemoryOperation(SnowflakeInstruction, ABC):
    rd = prop_def(RegisterType)
    rs1 = prop_def(RegisterType)
    rs2 = prop_def(RegisterType)
    unit = prop_def(IntAttr)
    select = prop_def(IntAttr)

    def verify_(self) -> None:
        # the encoding's range; a machine with fewer units faults on the others (docs/isa.md)
        self._check_range("unit", 0, ISA_LOAD_UNITS - 1)



# ---------------------------------------------------------------- from the ISA table
class _FieldValues(Mapping[str, Any]):
    """An instruction's field values by name, as its record's functions take them: a flag is
    whether it is set, an enum its member, an integer its value."""

    def __init__(self, op: SnowflakeInstruction):
        self._op = op

    def __getitem__(self, name: str) -> Any:
        attr = self._op.properties.get(name)
        if self._op.ISA_ENTRY.field[name].kind == "flag":
            return attr is not None
        if attr is None:
            raise KeyError(name)
        return attr.index.data if isinstance(attr, RegisterType) else attr.data

    def __iter__(self) -> Iterator[str]:
        return iter(f.name for f in self._op.ISA_ENTRY.fields)

    def __len__(self) -> int:
        return len(self._op.ISA_ENTRY.fields)


def _reader(names: tuple[str, ...]) -> Callable[[SnowflakeInstruction], tuple[int, ...]]:
    """`reads()` of an instruction reading register fields `names` (passes ask 10^6 times: no loop)."""
    if not names:
        return lambda self: ()
    if len(names) == 1:
        (a,) = names
        return lambda self: (self.reg_index(a),)
    if len(names) == 2:
        a, b = names
        return lambda self: (self.reg_index(a), self.reg_index(b))
    return lambda self: tuple(self.reg_index(n) for n in names)


def _from_table(cls: type[SnowflakeInstruction], entry: isa.Instruction) -> None:
    """Set what the ISA record says about the instruction on its op class (its constants
    annotated as ClassVars, as IRDL requires of a class's upper-case fields)."""
    own = dict(cls.__dict__.get("__annotations__", {}))
    for constant in ("ISA_ENTRY", "OPCODE", "SYNTAX", "IS_VECTOR", "IS_BRANCH"):
        own[constant] = "ClassVar[object]"
    cls.__annotations__ = own
    cls.ISA_ENTRY = entry
    cls.OPCODE = entry.opcode
    cls.SYNTAX = entry.syntax
    cls.IS_VECTOR = entry.kind is isa.Kind.VECTOR
    cls.IS_BRANCH = entry.kind is isa.Kind.BRANCH
    cls.reads = _reader(entry.reads)  # type: ignore[method-assign]
    if entry.writes is not None:
        written = entry.writes
        cls.writes = lambda self: self.reg_index(written)  # type: ignore[method-assign]
    if entry.kind is isa.Kind.BRANCH:
        cls.taken = staticmethod(entry.function)  # type: ignore[method-assign]


def _check_int_fields(op: SnowflakeInstruction) -> None:
    entry = op.ISA_ENTRY
    if entry is None:
        return
    for f in entry.fields:
        if f.kind == "sint":
            op._check_signed(f.name, f.bits)
        elif f.kind == "uint" and f.when is None:
            op._check_range(f.name, 0, (1 << f.bits) - 1)


def define_op(entry: isa.Instruction, doc: str | None = None) -> type[SnowflakeInstruction]:
    """The op class of a new instruction whose syntax is one of the shapes above (a scalar
    `rd, rs1, rs2` or `rd, rs1, imm`, or a branch): what a table entry needs to be an op."""
    from xdsl.irdl import irdl_op_definition

    bases = {isa.RRR_SYNTAX: ScalarRdRsRs, isa.RRI_SYNTAX: ScalarRdRsImm, isa.BRANCH_SYNTAX: BranchOperation}
    base = bases.get(entry.syntax)
    if base is None:
        raise ValueError(f"{entry.mnemonic}: no op shape has syntax {entry.syntax}; write its op class")
    cls = irdl_op_definition(type(f"{entry.mnemonic.capitalize()}Op", (base,),
                                  {"name": entry.name, "__doc__": doc or entry.summary, "__module__": __name__}))
    globals()[cls.__name__] = cls  # importable by name, as pickle finds a class
    return cls
