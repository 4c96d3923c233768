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
def _segments(f: BitField, bits: int) -> list[tuple[int, int]]:
    """The (lsb, width) segments of the field's low `bits` value bits."""
    out, left = [], bits
    for lsb, width in f.segments:
        if left <= 0:
            break
        out.append((lsb, min(width, left)))
        left -= width
    return out


def _raw(f: BitField, bits: int) -> str:
    """The expression of the field's `bits` value bits in `word`."""
    parts, at = [], 0
    for lsb, width in _segments(f, bits):
        part = f"((word >> {lsb}) & {(1 << width) - 1})"
        parts.append(f"({part} << {at})" if at else part)
        at += width
    return " | ".join(parts)


def _decoder(entry: Instruction, cls: type[sf.SnowflakeInstruction], select_bits: int
             ) -> Callable[[int, int], sf.SnowflakeInstruction]:
    """The record's decoder for a machine of `select_bits`, as one compiled Python function:
    each field's value from its bits (an unknown enum code is refused), the bits no field has
    must be zero, the record's checks hold; then the op, its properties in syntax order."""
    env: dict[str, Any] = {"E": EncodingError, "reg": sf.reg, "const": sf.const, "label": branch_label,
                           "new": cls.from_properties, "UNIT": UnitAttr(), "CHECKS": entry.checks}
    static = _OPCODE_MASK
    lines = ["def decode_op(word, pc):"]
    for i, f in enumerate(entry.fields):
        bits = select_bits if f.kind == "select" else f.bits
        mask = sum(((1 << w) - 1) << lsb for lsb, w in _segments(f, bits))
        body: list[str] = [f"v{i} = {_raw(f, bits)}"]
        if f.kind == "sint":
            body.append(f"if v{i} >> {bits - 1}: v{i} -= {1 << bits}")
        elif f.kind == "enum":
            env[f"M{i}"], env[f"A{i}"] = f.member_of, f.enum_attr
            body += [f"m{i} = M{i}.get(v{i})", f"if m{i} is None: raise E(f'pc {{pc}}: "
                     f"{entry.mnemonic.upper()} with unknown {f.name} {{v{i}}}')", f"v{i} = m{i}"]
        elif f.kind == "label":
            body += [f"if v{i} >> {bits - 1}: v{i} -= {1 << bits}", f"v{i} = label(pc + v{i})"]
        elif f.kind == "select":
            body.append(f"if v{i} == {(1 << bits) - 1}: v{i} = {sf.SELECT_ALL}")
        if f.when is None:
            static |= mask
            lines += [f"    {line}" for line in body]
        else:
            j = next(k for k, g in enumerate(entry.fields) if g.name == f.when[0])
            env[f"W{i}"] = f.when[1]
            lines += [f"    v{i} = 0", f"    if v{j} in W{i}:", f"        used |= {mask}"]
            lines += [f"        {line}" for line in body]
    lines.insert(1, f"    used = {static}")
    lines += ["    if word & ~used & 4294967295:",
              f"        raise E(f'pc {{pc}}: word {{word:#010x}} ({cls.name}) has reserved bits set')"]
    index = {f.name: i for i, f in enumerate(entry.fields)}
    if entry.checks:
        lines.append("    values = {" + ", ".join(f"{f.name!r}: v{i}" for i, f in enumerate(entry.fields)) + "}")
        lines += ["    for check in CHECKS:", "        if not check.holds(values):",
                  "            raise E(f'pc {pc}: {check.message}')"]
    lines.append("    P = {}")
    for name in entry.properties:
        i, kind = index[name], entry.fields[index[name]].kind
        if kind == "flag":
            lines.append(f"    if v{i}: P[{name!r}] = UNIT")
        else:
            value = {"reg": f"reg(v{i})", "enum": f"A{i}(v{i})", "label": f"SA(v{i})"}.get(kind, f"const(v{i})")
            lines.append(f"    P[{name!r}] = {value}")
    env["SA"] = StringAttr
    lines.append("    return new(P)")
    exec(compile("\n".join(lines) + "\n", f"<decode {entry.mnemonic}>", "exec"), env)
    return env["decode_op"]


_DECODERS: dict[tuple[type, int], tuple[Instruction, Callable[[int, int], sf.SnowflakeInstruction]]] = {}


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
    known = _DECODERS.get((cls, select_bits))
    if known is None or known[0] is not cls.ISA_ENTRY:
        assert cls.ISA_ENTRY is not None
        known = _DECODERS[(cls, select_bits)] = (cls.ISA_ENTRY, _decoder(cls.ISA_ENTRY, cls, select_bits))
    return known[1](word, pc)


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
