"""
32-bit instruction encoding of Snowflake (bit layout in docs/isa.md).

    register form   op[31:28] mode[27] rd[26:22] rs1[21:17] rs2[16:12] imm[11:0]
    ADDI / MULI     op[31:28] 0[27]    rd[26:22] rs1[21:17] imm17[16:0]
    MOVI            op[31:28] rd[27:23] imm23[22:0]

Fields an instruction does not use must be zero: a word has exactly one meaning and
`decode(encode(op)) == op`, which is what makes `.sfb` -> text -> `.sfb` byte-exact.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from snowir.dialects import snowflake_asm as sf
from snowir.errors import SnowError
from snowir.hw import DEFAULT


class EncodingError(SnowError):
    pass


def _u(value: int, bits: int) -> int:
    return value & ((1 << bits) - 1)


def _s(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def _r(op: sf.SnowflakeInstruction, name: str) -> int:
    return op.reg_index(name)


_TARGET_CODE = {sf.LoadTarget.MAPS: 0, sf.LoadTarget.WEIGHTS: 1, sf.LoadTarget.ICACHE: 2}
_TARGET_OF = {v: k for k, v in _TARGET_CODE.items()}
_VMOV_CODE = {sf.VmovSelect.BIAS: 0, sf.VmovSelect.BYPASS: 1, sf.VmovSelect.MASK: 2,
              sf.VmovSelect.STRIDE: 3, sf.VmovSelect.SHIFT: 4, sf.VmovSelect.ACT: 5}
_VMOV_OF = {v: k for k, v in _VMOV_CODE.items()}


def _reg_form(opcode: int, mode: int, rd: int, rs1: int, rs2: int, imm: int) -> int:
    return (opcode << 28) | (mode << 27) | (rd << 22) | (rs1 << 17) | (rs2 << 12) | _u(imm, 12)


DEFAULT_SELECT_BITS = DEFAULT.select_bits


def encode(op: sf.SnowflakeInstruction, pc: int, labels: dict[str, int],
           select_bits: int = DEFAULT_SELECT_BITS) -> int:
    """The 32-bit word of `op` placed at instruction index `pc`, for a machine whose LD select
    field is `select_bits` wide (`SnowflakeConfig.select_bits`: where `all` is)."""
    encoder = _ENCODERS.get(type(op)) or _encoder_of(type(op))
    if encoder is None:  # pragma: no cover
        raise EncodingError(f"{op.name}: no encoding")
    return encoder(op, pc, labels, select_bits)


def _movi(op: sf.SnowflakeInstruction, _pc: int, _labels: dict[str, int], _width: int) -> int:
    return (op.OPCODE << 28) | (_r(op, "rd") << 23) | _u(op._int("imm"), 23)


def _scalar_imm(op: sf.SnowflakeInstruction, _pc: int, _labels: dict[str, int], _width: int) -> int:
    return (op.OPCODE << 28) | (_r(op, "rd") << 22) | (_r(op, "rs1") << 17) | _u(op._int("imm"), 17)


def _mov(op: sf.SnowflakeInstruction, _pc: int, _labels: dict[str, int], _width: int) -> int:
    return _reg_form(op.OPCODE, 0, _r(op, "rd"), _r(op, "rs1"), 0, op._int("shift"))


def _scalar(op: sf.SnowflakeInstruction, _pc: int, _labels: dict[str, int], _width: int) -> int:
    return _reg_form(op.OPCODE, 0, _r(op, "rd"), _r(op, "rs1"), _r(op, "rs2"), 0)


def _mac(op: sf.MacOp, _pc: int, _labels: dict[str, int], _width: int) -> int:
    imm = op._int("trace") | (int(op.relu is not None) << 10) | (int(op.wb is not None) << 11)
    mode = int(op.mode.data == sf.VectorMode.INDP)
    return _reg_form(op.OPCODE, mode, _r(op, "rd"), _r(op, "rs1"), _r(op, "rs2"), imm)


def _max(op: sf.MaxOp, _pc: int, _labels: dict[str, int], _width: int) -> int:
    imm = op._int("trace") | (int(op.wb is not None) << 11)
    return _reg_form(op.OPCODE, 0, _r(op, "rd"), _r(op, "rs1"), _r(op, "rs2"), imm)


def _vmov(op: sf.VmovOp, _pc: int, _labels: dict[str, int], _width: int) -> int:
    mode = int(op.mode.data == sf.VectorMode.INDP)
    return _reg_form(op.OPCODE, mode, 0, _r(op, "rs1"), 0, _VMOV_CODE[op.select.data] | (op._int("word") << 3))


def _branch(op: sf.BranchOperation, pc: int, labels: dict[str, int], _width: int) -> int:
    target = op.target.data
    if target not in labels:
        raise EncodingError(f"{op.name} at pc {pc}: unknown label @{target}")
    offset = labels[target] - pc
    if not -(1 << 11) <= offset < (1 << 11):
        raise EncodingError(f"{op.name} at pc {pc}: branch offset {offset} does not fit 12 bits")
    return _reg_form(op.OPCODE, 0, 0, _r(op, "rs1"), _r(op, "rs2"), offset)


def _ld(op: sf.LdOp, pc: int, _labels: dict[str, int], width: int) -> int:
    imm = _unit_bits(op._int("unit")) | (_TARGET_CODE[op.target.data] << 2) \
        | _select_bits_of(op._int("select"), width, pc)
    return _reg_form(op.OPCODE, 0, _r(op, "rd"), _r(op, "rs1"), _r(op, "rs2"), imm)


def _tmov(op: sf.TmovOp, _pc: int, _labels: dict[str, int], _width: int) -> int:
    imm = _unit_bits(op._int("unit")) | (op._int("select") << 4)
    return _reg_form(op.OPCODE, 0, _r(op, "rd"), _r(op, "rs1"), _r(op, "rs2"), imm)


_Encoder = Callable[[Any, int, dict[str, int], int], int]
_ENCODER_OF_BASE: tuple[tuple[type[sf.SnowflakeInstruction], _Encoder], ...] = (
    (sf.MoviOp, _movi), (sf.AddiOp, _scalar_imm), (sf.MuliOp, _scalar_imm), (sf.MovOp, _mov),
    (sf.AddOp, _scalar), (sf.MulOp, _scalar), (sf.MacOp, _mac), (sf.MaxOp, _max), (sf.VmovOp, _vmov),
    (sf.BranchOperation, _branch), (sf.LdOp, _ld), (sf.TmovOp, _tmov),
)
_ENCODERS: dict[type, _Encoder] = {}
"""The encoder of each instruction class met, by the first base in _ENCODER_OF_BASE it is a
subclass of: a dictionary look-up an instruction rather than up to 12 isinstance tests."""


def _encoder_of(cls: type) -> _Encoder | None:
    for base, encoder in _ENCODER_OF_BASE:
        if issubclass(cls, base):
            _ENCODERS[cls] = encoder
            return encoder
    return None


def _unit_bits(unit: int) -> int:
    """Load unit u in imm[1:0] and imm[9] (the high bit came later, for up to 8 units: words of
    4-unit programs are unchanged)."""
    return (unit & 3) | ((unit >> 2) << 9)


def _unit_of(imm: int) -> int:
    return (imm & 3) | ((imm >> 9 & 1) << 2)


def _select_bits_of(select: int, width: int, pc: int) -> int:
    """An LD select in imm[8:4] (low 5 bits) and imm[11:10] (the 2 bits machines with more
    than 31 selects use); `all` is the all-ones value of the machine's `width`."""
    field = (1 << width) - 1 if select == sf.SELECT_ALL else select
    if select != sf.SELECT_ALL and select >= (1 << width) - 1:
        raise EncodingError(f"ld at pc {pc}: select {select} does not fit this machine's {width}-bit select field")
    return ((field & 31) << 4) | ((field >> 5) << 10)


def _select_of(imm: int, width: int) -> int:
    field = ((imm >> 4) & 31) | ((imm >> 10 & 3) << 5)
    return sf.SELECT_ALL if field == (1 << width) - 1 else field


def branch_label(target_pc: int) -> str:
    return f"L{target_pc}"


def decode(word: int, pc: int, select_bits: int = DEFAULT_SELECT_BITS) -> sf.SnowflakeInstruction:
    """The instruction of `word` at `pc` on a machine whose LD select field is `select_bits`
    wide; branch targets become labels `L<pc>`."""
    if not 0 <= word < (1 << 32):
        raise EncodingError(f"pc {pc}: {word:#x} is not a 32-bit word")
    code = word >> 28
    mode = (word >> 27) & 1
    rd, rs1, rs2 = (word >> 22) & 31, (word >> 17) & 31, (word >> 12) & 31
    imm = word & 0xFFF

    def reserved(mask_ok: int) -> None:
        if word & ~mask_ok & 0xFFFFFFFF:
            raise EncodingError(f"pc {pc}: word {word:#010x} ({sf.BY_OPCODE[code].name}) has reserved bits set")

    F_OP, F_MODE, F_RD, F_RS1, F_RS2 = 0xF << 28, 1 << 27, 31 << 22, 31 << 17, 31 << 12
    if code not in sf.BY_OPCODE:
        raise EncodingError(f"pc {pc}: word {word:#010x} has illegal opcode {code}")
    cls = sf.BY_OPCODE[code]
    if cls is sf.MoviOp:
        return sf.MoviOp((word >> 23) & 31, _s(word, 23))
    if cls in (sf.AddiOp, sf.MuliOp):
        reserved(F_OP | F_RD | F_RS1 | 0x1FFFF)
        return cls(rd, rs1, _s(word, 17))
    if cls is sf.MovOp:
        reserved(F_OP | F_RD | F_RS1 | 0x1F)
        return sf.MovOp(rd, rs1, imm & 31)
    if cls in (sf.AddOp, sf.MulOp):
        reserved(F_OP | F_RD | F_RS1 | F_RS2)
        return cls(rd, rs1, rs2)
    if cls is sf.MacOp:
        trace = imm & 0x3FF
        if trace == 0:
            raise EncodingError(f"pc {pc}: MAC with trace length 0")
        if imm >> 10 & 1 and not imm >> 11 & 1:
            raise EncodingError(f"pc {pc}: MAC with relu but no write-back")
        return sf.MacOp(sf.VectorMode.INDP if mode else sf.VectorMode.COOP, rd, rs1, rs2, trace,
                        wb=bool(imm >> 11 & 1), relu=bool(imm >> 10 & 1))
    if cls is sf.MaxOp:
        reserved(F_OP | F_RD | F_RS1 | F_RS2 | 0xBFF)
        if imm & 0x3FF == 0:
            raise EncodingError(f"pc {pc}: MAX with trace length 0")
        return sf.MaxOp(rd, rs1, rs2, imm & 0x3FF, wb=bool(imm >> 11 & 1))
    if cls is sf.VmovOp:
        if imm & 7 not in _VMOV_OF:
            raise EncodingError(f"pc {pc}: VMOV with unknown select {imm & 7}")
        select = _VMOV_OF[imm & 7]
        reserved(F_OP | F_MODE | F_RS1 | (0x3F if select == sf.VmovSelect.MASK else 0x7))
        return sf.VmovOp(sf.VectorMode.INDP if mode else sf.VectorMode.COOP, select, rs1, imm >> 3 & 7)
    if issubclass(cls, sf.BranchOperation):
        reserved(F_OP | F_RS1 | F_RS2 | 0xFFF)
        return cls(rs1, rs2, branch_label(pc + _s(imm, 12)))
    if cls is sf.LdOp:
        reserved(F_OP | F_RD | F_RS1 | F_RS2 | 0x3FF | (((1 << select_bits) - 1) >> 5 << 10))
        target = (imm >> 2) & 3
        if target not in _TARGET_OF:
            raise EncodingError(f"pc {pc}: LD with unknown target {target}")
        return sf.LdOp(_TARGET_OF[target], rd, rs1, rs2, _unit_of(imm), _select_of(imm, select_bits))
    if cls is sf.TmovOp:
        reserved(F_OP | F_RD | F_RS1 | F_RS2 | 0x3F3)
        return sf.TmovOp(rd, rs1, rs2, _unit_of(imm), (imm >> 4) & 31)
    raise EncodingError(f"pc {pc}: opcode {code} has no decoder")  # pragma: no cover


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
