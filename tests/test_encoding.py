"""Encoding, assembler, disassembler and the .sfb format: exact round trips."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import ModuleOp

from snowir.dialects import snowflake_asm as sf
from snowir.machine.encoding import EncodingError, decode, encode
from snowir.machine.image import ImageError, ProgramImage, Segment, assemble, disassemble

REG = st.integers(0, 31)


def _ld(draw, n: int) -> sf.LdOp:
    target = draw(st.sampled_from(list(sf.LoadTarget)))
    select = {sf.LoadTarget.MAPS: st.sampled_from([0, 1, 2, 3, sf.SELECT_ALL]),
              sf.LoadTarget.WEIGHTS: st.sampled_from(list(range(20)) + [sf.SELECT_ALL]),
              sf.LoadTarget.ICACHE: st.integers(0, 1)}[target]
    return sf.LdOp(target, draw(REG), draw(REG), draw(REG), draw(st.integers(0, 7)), draw(select))


def _mac(draw, n: int) -> sf.MacOp:
    wb = draw(st.booleans())
    return sf.MacOp(draw(st.sampled_from(list(sf.VectorMode))), draw(REG), draw(REG), draw(REG),
                    draw(st.integers(1, 1023)), wb=wb, relu=wb and draw(st.booleans()))


def _vmov(draw, n: int) -> sf.VmovOp:
    select = draw(st.sampled_from(list(sf.VmovSelect)))
    word = draw(st.integers(0, 7)) if select == sf.VmovSelect.MASK else 0
    shared = select == sf.VmovSelect.MBIAS and draw(st.booleans())
    return sf.VmovOp(draw(st.sampled_from(list(sf.VectorMode))), select, draw(REG), word, shared=shared)


def _branch(cls):
    return lambda draw, n: cls(draw(REG), draw(REG), f"L{draw(st.integers(0, n))}")


GENERATORS = {
    sf.MoviOp: lambda draw, n: sf.MoviOp(draw(REG), draw(st.integers(-(1 << 22), (1 << 22) - 1))),
    **{cls: (lambda cls: lambda draw, n: cls(draw(REG), draw(REG), draw(st.integers(-(1 << 16), (1 << 16) - 1))))(cls)
       for cls in (sf.AddiOp, sf.MuliOp)},
    sf.MovOp: lambda draw, n: sf.MovOp(draw(REG), draw(REG), draw(st.integers(0, 31))),
    **{cls: (lambda cls: lambda draw, n: cls(draw(REG), draw(REG), draw(REG)))(cls) for cls in (sf.AddOp, sf.MulOp)},
    sf.MacOp: _mac,
    sf.MaxOp: lambda draw, n: sf.MaxOp(draw(REG), draw(REG), draw(REG), draw(st.integers(1, 1023)),
                                       wb=draw(st.booleans())),
    sf.VmovOp: _vmov,
    **{cls: _branch(cls) for cls in (sf.BleOp, sf.BgtOp, sf.BeqOp)},
    sf.LdOp: _ld,
    sf.TmovOp: lambda draw, n: sf.TmovOp(draw(REG), draw(REG), draw(REG), draw(st.integers(0, 7)),
                                         draw(st.integers(0, 3))),
}
"""A generator per instruction class: a class without one is an error (issue 40: a fall-through
to TMOV left a new instruction silently uncovered)."""


def generator(cls: type):
    if cls not in GENERATORS:
        raise KeyError(f"test_encoding has no generator for {cls.__name__}: add one to GENERATORS")
    return GENERATORS[cls]


def _instruction(draw, pc: int, n: int) -> sf.SnowflakeInstruction:
    cls = draw(st.sampled_from(list(sf.INSTRUCTIONS)))
    return generator(cls)(draw, n)


def test_the_generator_draws_every_instruction_class_or_fails_loudly() -> None:
    """Every instruction op of the dialect is in INSTRUCTIONS (what the generator draws from) and
    has a generator; a class without one is a KeyError, not a TMOV."""
    dialect = {op for op in sf.SnowflakeAsm.operations if issubclass(op, sf.SnowflakeInstruction)}
    assert dialect == set(sf.INSTRUCTIONS)
    assert set(GENERATORS) == set(sf.INSTRUCTIONS)

    class NewOp:
        pass

    with pytest.raises(KeyError, match="no generator for NewOp"):
        generator(NewOp)


@pytest.mark.parametrize("cls", sf.INSTRUCTIONS, ids=lambda cls: cls.__name__)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_each_generator_makes_its_class(cls: type, data) -> None:
    op = generator(cls)(data.draw, 3)
    assert type(op) is cls
    assert str(decode(encode(op, 1, {f"L{i}": i for i in range(4)}), 1)) == str(op)


@st.composite
def programs(draw) -> ModuleOp:
    n = draw(st.integers(1, 40))
    ops = [_instruction(draw, pc, n) for pc in range(n)]
    targets = {int(op.target.data[1:]) for op in ops if isinstance(op, sf.BranchOperation)}
    body = []
    for pc, op in enumerate(ops):
        if pc in targets:
            body.append(sf.LabelOp(f"L{pc}"))
        body.append(op)
    if n in targets:
        body.append(sf.LabelOp(f"L{n}"))
    segs = []
    if draw(st.booleans()):
        data = draw(st.lists(st.integers(-32768, 32767), min_size=1, max_size=32))
        from snowir.resources import int16_resource

        segs.append(sf.SegmentOp("w", sf.SegmentKind.DATA, 0, 2 * len(data), int16_resource("w", np.array(data))))
    segs.append(sf.SegmentOp("out", sf.SegmentKind.OUTPUT, 4096, 64))
    return ModuleOp([*segs, sf.ProgramOp("rand", body, draw(st.integers(1, 15)))])


@settings(max_examples=60, deadline=None)
@given(programs())
def test_binary_text_binary_is_byte_exact(module: ModuleOp) -> None:
    module.verify()
    blob = assemble(module).to_bytes()
    image = ProgramImage.from_bytes(blob)
    text_again = disassemble(image)
    text_again.verify()
    assert assemble(text_again).to_bytes() == blob


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_decode_inverts_encode(data) -> None:
    op = _instruction(data.draw, 5, 10)
    labels = {f"L{i}": i for i in range(11)}
    word = encode(op, 5, labels)
    assert 0 <= word < (1 << 32)
    again = decode(word, 5)
    assert str(again) == str(op)
    assert encode(again, 5, labels) == word


def test_field_positions() -> None:
    # op[31:28] mode[27] rd[26:22] rs1[21:17] rs2[16:12] imm[11:0]
    mac = sf.MacOp(sf.VectorMode.INDP, 3, 5, 7, 768, wb=True, relu=True)
    assert encode(mac, 0, {}) == (6 << 28) | (1 << 27) | (3 << 22) | (5 << 17) | (7 << 12) | 768 | (1 << 10) | (1 << 11)
    assert encode(sf.MoviOp(9, -1), 0, {}) == (1 << 28) | (9 << 23) | ((1 << 23) - 1)
    assert encode(sf.AddiOp(1, 2, -2), 0, {}) == (3 << 28) | (1 << 22) | (2 << 17) | ((1 << 17) - 2)
    assert encode(sf.BleOp(1, 2, "back"), 10, {"back": 4}) == (9 << 28) | (1 << 17) | (2 << 12) | (0xFFF & -6)
    # load unit u: imm[1:0] and imm[9], so words of 4-unit programs did not change
    ld = sf.LdOp(sf.LoadTarget.MAPS, 1, 2, 3, 6, sf.SELECT_ALL)
    assert encode(ld, 0, {}) == (12 << 28) | (1 << 22) | (2 << 17) | (3 << 12) | 2 | (31 << 4) | (1 << 9)
    assert encode(sf.TmovOp(1, 2, 3, 3, 2), 0, {}) & 0xFFF == 3 | (2 << 4)


@pytest.mark.parametrize("word, message", [
    (0xE0000000, "illegal opcode 14"),
    (0xF0000000, "illegal opcode 15"),
    ((2 << 28) | 1, "reserved bits"),  # ADD with a non-zero immediate
    ((0 << 28) | (1 << 27), "reserved bits"),  # MOV with mode set
    ((6 << 28) | (1 << 10) | 5, "relu but no write-back"),
    ((12 << 28) | (3 << 2), "unknown target"),
    ((12 << 28) | (1 << 10), "reserved bits"),  # LD imm[10]: a select bit of machines past 31 selects
    ((8 << 28) | (1 << 3), "reserved bits"),  # VMOV bias with a mask word
])
def test_bad_words(word: int, message: str) -> None:
    with pytest.raises(EncodingError, match=message):
        decode(word, 0)


def test_corrupt_images() -> None:
    image = ProgramImage("p", 8, np.array([0x10800001], np.uint32), 4096, [Segment("x", sf.SegmentKind.INPUT, 0, 4)])
    blob = image.to_bytes()
    assert ProgramImage.from_bytes(blob).to_bytes() == blob
    for bad in (b"XXXX" + blob[4:], blob[:-2], blob + b"\0"):
        with pytest.raises(ImageError, match="corrupt"):
            ProgramImage.from_bytes(bad, "bad.sfb")


def test_overlapping_segments_rejected() -> None:
    module = ModuleOp([sf.SegmentOp("a", sf.SegmentKind.INPUT, 0, 64), sf.SegmentOp("b", sf.SegmentKind.OUTPUT, 32, 64),
                       sf.ProgramOp("p", [sf.MoviOp(1, 1)])])
    with pytest.raises(ImageError, match="overlap"):
        assemble(module)


def test_generated_image_round_trips_byte_exact_with_its_machine_record(tmp_path) -> None:
    """A generated image (it records the machine its code is for): .sfb -> text -> .sfb gives the
    same bytes, the record included (it was dropped on disassembly)."""
    from snowir.driver.device_run import images_of
    from snowir.driver.model_run import load_model, lower
    from snowir.tools.snow_opt import main as snow_opt

    module, _ = load_model(Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx")
    lower(module, "snowflake-lower{whole-model=false}")  # one image per layer (whole models: test_whole_model.py)
    image = assemble(images_of(module)["conv2"])
    assert image.built_for
    sfb, text, back = tmp_path / "c.sfb", tmp_path / "c.mlir", tmp_path / "back.sfb"
    sfb.write_bytes(image.to_bytes())
    assert snow_opt([str(sfb), "-o", str(text)]) == 0
    assert snow_opt([str(text), "-t", "snowflake-bin", "-o", str(back)]) == 0
    assert back.read_bytes() == sfb.read_bytes()
    assert ProgramImage.from_bytes(back.read_bytes()).built_for == image.built_for
    assert disassemble(image).attributes  # the record is on the disassembled module
