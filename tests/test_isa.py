"""
The ISA table (dialects/snowflake_asm/isa.py) is the one declaration of the instructions:
docs/isa.md's table is rendered from it, the op classes, the encoder and the engines read it,
and a record added at run time is a working instruction (docs/tutorial.md section 7 shows it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from snowir.asm_analysis import fold, is_machine, is_nop, known_registers
from snowir.dialects import snowflake_asm as sf
from snowir.dialects.snowflake_asm import isa
from snowir.machine.encoding import EncodingError, decode, encode

DOC = Path(__file__).resolve().parent.parent / "docs" / "isa.md"


def test_docs_isa_table_is_generated_from_the_table() -> None:
    doc = DOC.read_text()
    assert doc == isa.with_table(doc), "docs/isa.md drifted from the ISA table: run python tools/gen_isa_docs.py"
    # and the check can fail: a hand edit of the table is a doc that no longer matches
    edited = doc.replace("| `rs1 + rs2`: rd = rs1 + rs2 |", "| `rs1 - rs2`: rd = rs1 - rs2 |")
    assert edited != doc and isa.with_table(edited) == doc != edited


def test_every_op_class_is_its_record() -> None:
    assert [cls.ISA_ENTRY for cls in sf.INSTRUCTIONS] == sorted(isa.ISA, key=lambda e: e.opcode)
    for cls in sf.INSTRUCTIONS:
        entry = cls.ISA_ENTRY
        assert cls.name == entry.name and cls.OPCODE == entry.opcode and cls.SYNTAX == entry.syntax
        assert cls.IS_BRANCH == (entry.kind is isa.Kind.BRANCH)
        assert cls.IS_VECTOR == (entry.kind is isa.Kind.VECTOR)
        assert set(entry.properties) <= set(cls.get_irdl_definition().properties)


def test_semantics_fold_and_branches_come_from_the_records() -> None:
    assert sf.BleOp.taken(3, 3) and not sf.BgtOp.taken(3, 3) and sf.BeqOp.taken(-1, -1)
    known = {0: 0, 2: 7, 3: -5}
    assert fold(sf.MovOp(1, 2, 4), known) == 7 << 4
    assert fold(sf.MulOp(1, 2, 3), known) == -35
    assert fold(sf.AddiOp(1, 4, 1), known) is None  # r4 unknown
    ops = [sf.MoviOp(2, 6), sf.MuliOp(3, 2, 7), sf.AddOp(4, 3, 2), sf.MovOp(5, 9)]
    assert known_registers(ops, 4)[-1] == {0: 0, 2: 6, 3: 42, 4: 48}
    assert is_nop(sf.AddOp(0, 1, 2)) and not is_nop(sf.AddOp(1, 1, 2))
    assert is_machine(sf.VmovOp(sf.VectorMode.COOP, sf.VmovSelect.BIAS, 1)) and not is_machine(sf.AddOp(1, 1, 2))


def test_a_record_is_checked_when_registered() -> None:
    with pytest.raises(ValueError, match="opcode 2 is add's"):
        sf.add_instruction(isa.scalar_rrr("sub", 2, "rs1 - rs2", "rd = rs1 - rs2"))
    with pytest.raises(ValueError, match="overlaps"):
        isa.register(isa.Instruction("bad", 14, isa.Kind.SCALAR, (isa.RD, isa._reg("rs1", 20)), ("rd", ",", "rs1"),
                                     ("rs1",), "rd", isa.SCALAR_TIMING, "", semantics="rs1"))
    with pytest.raises(SyntaxError):
        isa.register(isa.scalar_rrr("sub", 14, "rs1 -", "rd = rs1 - ?"))
    with pytest.raises(ValueError, match="vector instructions .only. have cu_cycles"):
        isa.register(isa.Instruction("vbad", 14, isa.Kind.VECTOR, (isa._reg("rs1", 18),), ("rs1",),
                                     ("rs1",), None, isa.VECTOR_TIMING, ""))
    assert 14 in isa.free_opcodes() and "sub" not in isa.ISA.by_mnemonic


def test_cu_cycles_come_from_the_records() -> None:
    """The machine's Timing and fill-delay-slots' loop cost both read a vector record's
    `cu_cycles` (COOP MAC ceil(L/lanes), INDP MAC L, MAX L, VMOV vmov_cycles)."""
    from snowir.hw import SnowflakeConfig
    hw = SnowflakeConfig(vmov_cycles=3)
    assert sf.MacOp(sf.VectorMode.COOP, 1, 2, 3, 33).cu_cycles(hw) == 3
    assert sf.MacOp(sf.VectorMode.INDP, 1, 2, 3, 33).cu_cycles(hw) == 33
    assert sf.MaxOp(1, 2, 3, 9).cu_cycles(hw) == 9
    assert sf.VmovOp(sf.VectorMode.COOP, sf.VmovSelect.BIAS, 1).cu_cycles(hw) == 3
    assert sf.MacOp(sf.VectorMode.COOP, 1, 2, 3, 33, wb=True).cu_cycles(SnowflakeConfig()) == 3
    assert sf.AddOp(1, 1, 2).cu_cycles(hw) == 0


def test_a_new_record_encodes_decodes_and_leaves_the_isa_as_it_was() -> None:
    before = (isa.ISA.generation, len(sf.INSTRUCTIONS), len(list(sf.SnowflakeAsm.operations)))
    with sf.extended(isa.scalar_rri("andi", 15, "rs1 & imm", "rd = rs1 & sext(imm17)")) as AndiOp:
        op = AndiOp(1, 2, -4)
        word = encode(op, 0, {})
        assert word >> 28 == 15 and str(decode(word, 0)) == str(op)
        with pytest.raises(EncodingError, match="reserved bits"):
            decode(word | (1 << 27), 0)
        assert "| 15 | `andi rd, rs1, <imm>` |" in isa.markdown()
    with pytest.raises(EncodingError, match="illegal opcode 15"):
        decode(word, 0)
    assert (isa.ISA.generation - 2, len(sf.INSTRUCTIONS), len(list(sf.SnowflakeAsm.operations))) == before


def _draw_fields(rng, entry: isa.Instruction) -> dict:
    """Random properties of `entry` from its fields alone (in range for their bits)."""
    from xdsl.dialects.builtin import StringAttr, UnitAttr

    props: dict = {}
    for f in entry.fields:
        if f.when is not None and props[f.when[0]].data not in f.when[1]:
            props[f.name] = sf.const(0)
        elif f.kind == "reg":
            props[f.name] = sf.reg(rng.randrange(32))
        elif f.kind == "uint":
            props[f.name] = sf.const(rng.randrange(1 << f.bits))
        elif f.kind == "sint":
            props[f.name] = sf.const(rng.randrange(-(1 << (f.bits - 1)), 1 << (f.bits - 1)))
        elif f.kind == "flag":
            if rng.random() < 0.5:
                props[f.name] = UnitAttr()
        elif f.kind == "enum":
            props[f.name] = f.enum_attr(rng.choice([member for member, _ in f.codes]))
        elif f.kind == "label":
            props[f.name] = StringAttr(f"L{rng.randrange(8)}")
        elif f.kind == "select":
            props[f.name] = sf.const(rng.choice([0, 1, 3, sf.SELECT_ALL]))
    return props


def test_every_record_round_trips_from_its_fields_alone() -> None:
    """decode(encode(op)) == op for ops drawn from each record's fields, a record added at run
    time included: the encoder and decoder need nothing but the record."""
    import random

    from xdsl.utils.exceptions import VerifyException

    rng = random.Random(7)
    labels = {f"L{i}": i for i in range(8)}
    with sf.extended(isa.scalar_rri("ori", 14, "rs1 | imm", "rd = rs1 | sext(imm17)")):
        for cls in sf.INSTRUCTIONS:
            checked = 0
            for _ in range(60):
                op = cls.from_properties(_draw_fields(rng, cls.ISA_ENTRY))
                try:
                    op.verify()
                except VerifyException:
                    continue  # a combination the op's own checks refuse (a MAC's relu without wb, ...)
                assert str(decode(encode(op, 3, labels), 3)) == str(op)
                checked += 1
            assert checked >= 10, cls.__name__
