"""Python-level construction of ops of the three dialects (the API passes use)."""

import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import Float32Type, ModuleOp, TensorType
from xdsl.dialects.test import TestOp as _TestOp
from xdsl.parser import Parser
from xdsl.utils.exceptions import VerifyException

from snowir.dialects import all_dialects, nn, snowflake_asm as sf, tile


def _ctx() -> Context:
    ctx = Context()
    from xdsl.dialects.builtin import Builtin
    from xdsl.dialects.func import Func

    ctx.load_dialect(Builtin)
    ctx.load_dialect(Func)
    for factory in all_dialects().values():
        ctx.load_dialect(factory())
    return ctx


def _round_trip(module: ModuleOp) -> str:
    text = str(module)
    again = Parser(_ctx(), text).parse_module()
    again.verify()
    assert str(again) == text
    return text


def test_asm_program_built_in_python_round_trips() -> None:
    prog = sf.ProgramOp("p", [
        sf.MoviOp(1, 10),
        sf.LabelOp("loop"),
        sf.MacOp(sf.VectorMode.COOP, 2, 3, 4, 48, wb=True, relu=True),
        sf.AddiOp(1, 1, -1),
        sf.BgtOp(1, 0, "loop"),
        sf.LdOp(sf.LoadTarget.MAPS, 5, 6, 7, unit=3, select=sf.SELECT_ALL),
    ])
    module = ModuleOp([prog])
    module.verify()
    text = _round_trip(module)
    assert "snowflake_asm.mac coop r2, r3, r4 trace 48 wb relu" in text
    assert [op.OPCODE for op in prog.instructions] == [1, 6, 3, 10, 12]


def test_asm_register_accessors() -> None:
    op = sf.AddOp(3, 4, 5)
    assert op.reads() == (4, 5) and op.writes() == 3
    mac = sf.MacOp(sf.VectorMode.INDP, 1, 2, 3, 10, wb=True)
    assert mac.writes() is None and set(mac.reads()) == {1, 2, 3}


def test_asm_verifier_rejects_bad_immediate() -> None:
    with pytest.raises(VerifyException, match="17-bit"):
        sf.AddiOp(1, 1, 1 << 16).verify()


def test_nn_conv_shape_is_checked() -> None:
    f32 = Float32Type()
    x = _TestOp(result_types=[TensorType(f32, [1, 3, 8, 8])]).res[0]
    w = _TestOp(result_types=[TensorType(f32, [4, 3, 3, 3])]).res[0]
    b = _TestOp(result_types=[TensorType(f32, [4])]).res[0]
    good = nn.Conv2dOp(x, w, b, TensorType(f32, [1, 4, 8, 8]), pads=(1, 1, 1, 1), relu=True)
    good.verify()
    bad = nn.Conv2dOp(x, w, b, TensorType(f32, [1, 4, 6, 6]), pads=(1, 1, 1, 1))
    with pytest.raises(VerifyException, match="computed 1x4x8x8"):
        bad.verify()


@pytest.mark.parametrize("h, k, s, p, ceil, expected", [
    (224, 7, 2, 3, False, 112), (112, 3, 2, 1, False, 56), (55, 3, 2, 0, False, 27),
    (112, 3, 2, 0, True, 56), (13, 3, 2, 0, True, 6), (6, 3, 2, 0, True, 3),
])
def test_window_arithmetic(h, k, s, p, ceil, expected) -> None:
    assert nn.window_out(h, k, s, p, p, 1, ceil) == expected


def test_tile_layer_built_in_python_round_trips() -> None:
    window = tile.WindowOp(320, 5, 27, 4, 64, 1984, 0, 0)
    load = tile.LoadOp(tile.BufferKind.MAPS, 1000, 0, 0, 0, 31)
    layer = tile.LayerOp("conv2", tile.LayerKind.CONV, [
        tile.DramRegionOp("conv2.in", 0, 2000, "maps"),
        tile.KernelTileOp(0, 16, 12),
        tile.MapsTileOp((0, 4), (0, 8), 4, -1, [load, window]),
    ], mode=tile.ComputeMode.COOP, loop_order=tile.LoopOrder.KLOOP)
    module = ModuleOp([layer])
    module.verify()
    text = _round_trip(module)
    assert "#tile<mode COOP>" in text and "#tile<loop_order Kloop>" in text


def test_every_tile_attribute_says_what_it_means_for_the_code() -> None:
    """Each property of each tile op has its meaning in tile.FIELD_DOCS, and docs/dialects.md
    (generated from it by tools/gen_dialect_docs.py) is up to date."""
    from pathlib import Path

    from snowir.dialects.tile import FIELD_DOCS, Tile

    keys = {f"{op.name}.{name}" for op in Tile.operations for name in op.get_irdl_definition().properties}
    assert keys == set(FIELD_DOCS)
    doc = (Path(__file__).resolve().parent.parent / "docs" / "dialects.md").read_text()
    for key, text in FIELD_DOCS.items():
        assert f"| `{key}` | {text} |" in doc, f"{key}: run python tools/gen_dialect_docs.py"


def _outcome(verify, op) -> str:
    try:
        verify(op)
    except Exception as e:  # noqa: BLE001 - the exception's type and text are what is compared
        return f"{type(e).__name__}: {e}"
    return "ok"


def _cases():
    from xdsl.dialects.builtin import IntAttr, StringAttr, UnitAttr

    def in_program(op, last: bool = False):
        ops = [op] if last else [op, sf.MoviOp(0, 0)]
        sf.ProgramOp("p", ops)
        return op

    good = sf.MacOp(sf.VectorMode.COOP, 1, 2, 3, 16, wb=True)
    yield in_program(good)
    yield in_program(sf.LdOp(sf.LoadTarget.WEIGHTS, 1, 2, 3, unit=1, select=sf.SELECT_ALL), last=True)
    yield in_program(sf.AddiOp(1, 1, 1 << 16))  # a field check of the op's own
    yield in_program(sf.MacOp(sf.VectorMode.COOP, 1, 2, 3, 16, relu=True))
    yield in_program(sf.MovOp.create(properties={"rd": sf.reg(1), "rs1": sf.reg(2)}))  # missing
    yield in_program(sf.MovOp.create(properties={"rd": sf.reg(1), "rs1": sf.reg(2), "shift": IntAttr(0),
                                                 "imm": IntAttr(3)}))  # undeclared
    yield in_program(sf.MovOp.create(properties={"rd": sf.reg(1), "rs1": IntAttr(2), "shift": IntAttr(0)}))
    yield in_program(sf.MacOp.create(properties={**good.properties, "wb": StringAttr("x")}))
    yield in_program(sf.AddOp.create(properties={**sf.AddOp(1, 2, 3).properties, "comment": StringAttr("c")},
                                     attributes={"note": UnitAttr()}))
    yield sf.AddOp(1, 2, 3)  # outside any block
    x = _TestOp(result_types=[Float32Type()]).res[0]
    yield in_program(sf.AddOp.create(operands=[x], properties=dict(sf.AddOp(1, 2, 3).properties)))


def test_instruction_verifier_agrees_with_xdsl_generic_verifier() -> None:
    """The instructions' fast verifier (dialects/property_ops.py) accepts exactly what xDSL's
    generic Operation.verify accepts, and refuses with the same error."""
    from xdsl.ir import Operation

    outcomes = [(_outcome(lambda op: op.verify(), op), _outcome(Operation.verify, op)) for op in _cases()]
    for fast, generic in outcomes:
        assert fast == generic
    assert sum(fast == "ok" for fast, _ in outcomes) == 4 and len(outcomes) == 11


def test_program_verifier_one_pass_errors() -> None:
    with pytest.raises(VerifyException, match="label @a defined twice"):
        sf.ProgramOp("p", [sf.LabelOp("a"), sf.MoviOp(1, 0), sf.LabelOp("a")]).verify_()
    with pytest.raises(VerifyException, match="branch target @b is not a label of @p"):
        sf.ProgramOp("p", [sf.BleOp(1, 2, "a"), sf.BleOp(1, 2, "b"), sf.LabelOp("a")]).verify_()
    with pytest.raises(VerifyException, match="'test.op' is not a Snowflake instruction"):
        sf.ProgramOp("p", [sf.BleOp(1, 2, "b"), _TestOp()]).verify_()
