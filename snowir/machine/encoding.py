"""
32-bit instruction encoding of Snowflake, derived from the ISA table
(dialects/snowflake_asm/isa.py: each instruction's bit fields; docs/isa.md renders them).

    register form   op[31:28] mode[27] rd[26:22] rs1[21:17] rs2[16:12] imm[11:0]
    ADDI / MULI     op[31:28] 0[27]    rd[26:22] rs1[21:17] imm17[16:0]
    MOVI            op[31:28] rd[27:23] imm23[22:0]

Fields an instruction does not use are reserved and must be zero, checked here for every
instruction alike: a word has exactly one meaning and `decode(encode(op)) == op`, which is what
makes `.sfb` -> text -> `.sfb` byte-exact.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from xdsl.dialects.builtin import StringAttr, UnitAttr

from snowir.dialects import snowflake_asm as sf
from snowir.dialects.snowflake_asm.isa import OPCODE_BITS, OPCODE_LSB, BitField, Instruction
from snowir.errors import SnowError
from snowir.hw import DEFAULT


class EncodingError(SnowError):
    pass


DEFAULT_SELECT_BITS = DEFAULT.select_bits
_OPCODE_MASK = ((1 << OPCODE_BITS) - 1) << OPCODE_LSB


def _sext(value: int, bits: int) -> int:
    return value - (1 << bits) if value >> (bits - 1) & 1 else value


def branch_label(target_pc: int) -> str:
    return f"L{target_pc}"


# ------------------------------------------------------------------------------ encode
_Value = Callable[[sf.SnowflakeInstruction, int, dict[str, int], int], int]


def _value_of(entry: Instruction, f: BitField) -> _Value:
    """How the encoder reads field `f` of an op: (op, pc, labels, select width) -> field value."""
    name = f.name
    if f.kind == "reg":
        return lambda op, pc, labels, width: op.reg_index(name)
    if f.kind in ("uint", "sint"):
        return lambda op, pc, labels, width: op._int(name)
    if f.kind == "flag":
        return lambda op, pc, labels, width: int(name in op.properties)
    if f.kind == "enum":
        codes = f.code_of
        return lambda op, pc, labels, width: codes[op.properties[name].data]  # type: ignore[attr-defined]
    if f.kind == "label":
        return _label_value(name, f.bits)
    if f.kind == "select":
        return _select_value(entry.mnemonic, name)
    raise AssertionError(f.kind)  # pragma: no cover - a kind isa.BitField does not have


def _label_value(name: str, bits: int) -> _Value:
    def value(op: sf.SnowflakeInstruction, pc: int, labels: dict[str, int], _width: int) -> int:
        target = op._label(name)
        if target not in labels:
            raise EncodingError(f"{op.name} at pc {pc}: unknown label @{target}")
        offset = labels[target] - pc
        if not -(1 << (bits - 1)) <= offset < (1 << (bits - 1)):
            raise EncodingError(f"{op.name} at pc {pc}: branch offset {offset} does not fit {bits} bits")
        return offset
    return value


def _select_value(mnemonic: str, name: str) -> _Value:
    """An LD select: `all` is the all-ones value of the machine's select `width`."""
    def value(op: sf.SnowflakeInstruction, pc: int, _labels: dict[str, int], width: int) -> int:
        select = op._int(name)
        if select == sf.SELECT_ALL:
            return (1 << width) - 1
        if select >= (1 << width) - 1:
            raise EncodingError(f"{mnemonic} at pc {pc}: select {select} does not fit this machine's "
                                f"{width}-bit select field")
        return select
    return value


def _encoder(entry: Instruction) -> Callable[[sf.SnowflakeInstruction, int, dict[str, int], int], int]:
    """The record's encoder as one compiled Python function (as TableGen emits an encoder): the
    opcode, then each field's value packed into its bit segments."""
    env: dict[str, Any] = {}
    lines = ["def encode_op(op, pc, labels, width):", "    r = op.reg_index", "    P = op.properties",
             f"    w = {entry.opcode << OPCODE_LSB}"]
    for i, f in enumerate(entry.fields):
        if f.kind == "reg":
            value = f"r({f.name!r})"
        elif f.kind in ("uint", "sint"):
            value = f"op._int({f.name!r})"
        elif f.kind == "flag":
            value = f"({f.name!r} in P)"
        elif f.kind == "enum":
            env[f"C{i}"] = f.code_of
            value = f"C{i}[P[{f.name!r}].data]"
        else:
            env[f"V{i}"] = _value_of(entry, f)
            value = f"V{i}(op, pc, labels, width)"
        lines.append(f"    v = {value}")
        at = 0
        for lsb, width in f.segments:
            lines.append(f"    w |= ((v >> {at}) & {(1 << width) - 1}) << {lsb}")
            at += width
    lines.append("    return w")
    exec(compile("\n".join(lines) + "\n", f"<encode {entry.mnemonic}>", "exec"), env)
    return env["encode_op"]


_ENCODERS: dict[type, tuple[Instruction, Callable[..., int]]] = {}
"""The encoder of each op class met, made from its ISA record (keyed by the record too: a class
of an instruction removed and added again gets the new record's)."""


def encode(op: sf.SnowflakeInstruction, pc: int, labels: dict[str, int],
           select_bits: int = DEFAULT_SELECT_BITS) -> int:
    """The 32-bit word of `op` placed at instruction index `pc`, for a machine whose LD select
    field is `select_bits` wide (`SnowflakeConfig.select_bits`: where `all` is)."""
    cls = type(op)
    known = _ENCODERS.get(cls)
    if known is None or known[0] is not cls.ISA_ENTRY:
        if cls.ISA_ENTRY is None:  # pragma: no cover - every instruction class has a record
            raise EncodingError(f"{op.name}: no encoding")
        known = _ENCODERS[cls] = (cls.ISA_ENTRY, _encoder(cls.ISA_ENTRY))
    return known[1](op, pc, labels, select_bits)


# ------------------------------------------------------------------------------ decode
def _field_value(entry: Instruction, f: BitField, raw: int, pc: int, width: int) -> Any:
    """The op's value of field `f` from its bits `raw` (None: a flag that is off)."""
    if f.kind == "sint":
        return _sext(raw, f.bits)
    if f.kind == "flag":
        return bool(raw)
    if f.kind == "enum":
        member = f.member_of.get(raw)
        if member is not None:
            return member
        raise EncodingError(f"pc {pc}: {entry.mnemonic.upper()} with unknown {f.name} {raw}")
    if f.kind == "label":
        return branch_label(pc + _sext(raw, f.bits))
    if f.kind == "select":
        return sf.SELECT_ALL if raw == (1 << width) - 1 else raw
    return raw


def _attribute(f: BitField, value: Any) -> Any:
    kind = f.kind
    if kind == "reg":
        return sf.reg(value)
    if kind == "uint" or kind == "sint" or kind == "select":
        return sf.const(value)
    if f.kind == "flag":
        return UnitAttr() if value else None
    if f.kind == "enum":
        assert f.enum_attr is not None
        return f.enum_attr(value)
    if f.kind == "label":
        return StringAttr(value)
    return sf.const(value)


def decode(word: int, pc: int, select_bits: int = DEFAULT_SELECT_BITS) -> sf.SnowflakeInstruction:
    """The instruction of `word` at `pc` on a machine whose LD select field is `select_bits`
    wide; branch targets become labels `L<pc>`. The fields are read as the instruction's ISA
    record lays them out; any other bit set is an illegal (reserved-bit) word."""
    if not 0 <= word < (1 << 32):
        raise EncodingError(f"pc {pc}: {word:#x} is not a 32-bit word")
    code = word >> OPCODE_LSB
    cls = sf.BY_OPCODE.get(code)
    if cls is None:
        raise EncodingError(f"pc {pc}: word {word:#010x} has illegal opcode {code}")
    entry = cls.ISA_ENTRY
    assert entry is not None
    used = _OPCODE_MASK
    values: dict[str, Any] = {}
    for f in entry.fields:
        if f.when is not None and values[f.when[0]] not in f.when[1]:
            values[f.name] = 0  # absent: its bits are reserved
            continue
        kind = f.kind
        if kind == "select":
            used |= f.mask(select_bits)
            values[f.name] = _field_value(entry, f, f.unpack(word) & ((1 << select_bits) - 1), pc, select_bits)
        else:
            used |= f.full_mask
            raw = f.unpack(word)
            values[f.name] = raw if kind == "reg" or kind == "uint" else _field_value(entry, f, raw, pc, f.bits)
    if word & ~used & 0xFFFFFFFF:
        raise EncodingError(f"pc {pc}: word {word:#010x} ({cls.name}) has reserved bits set")
    for check in entry.checks:
        if not check.holds(values):
            raise EncodingError(f"pc {pc}: {check.message}")
    by_name = entry.field
    props = {}
    for name in entry.properties:
        attr = _attribute(by_name[name], values[name])
        if attr is not None:
            props[name] = attr
    return cls.from_properties(props)


def layout(program: sf.ProgramOp) -> tuple[list[sf.SnowflakeInstruction], dict[str, int]]:
    """Instructions in order and the pc of every label."""
    instructions: list[sf.SnowflakeInstruction] = []
    labels: dict[str, int] = {}
    label_role = sf.ProgramRole.LABEL
    for op in program.body.block.ops:
        role = sf.program_role(type(op))
        if role is label_role:
            labels[op.label.data] = len(instructions)  # type: ignore[attr-defined]
        else:
            assert role is not None
            instructions.append(op)  # type: ignore[arg-type]
    return instructions, labels
