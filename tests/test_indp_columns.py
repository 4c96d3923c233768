"""
Residual 1x1 convs in INDP with the CUs splitting the output columns (`cu_split = cols`,
snowir/plan/indp_columns.py): bit-exact on the machine against golden (stride 1 and 2, kernel
tiles resident, double-buffered, staggered, a partial last tile, several row groups), chosen by
cost where it pays and not where it does not, refused in one line where the columns do not
split, and its tile IR attribute followed or refused when edited.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from snowir.hw import SnowflakeConfig
from snowir.plan.conv import plan_conv
from snowir.plan.indp_columns import columns_refusal, max_group_rows
from snowir.plan.residual_mode import conv_mode
from snowir.plan.shapes import ConvShape, LoweringError
from snowir.tools.snow_opt import main as snow_opt
from snowir.tools.snow_run import main as snow_run
from test_lowering import conv_case

HW = SnowflakeConfig()


@pytest.mark.parametrize("c, h, w, k, s, holds, biases", [
    (64, 8, 8, 256, 1, "slot", None),        # ResNet-50's 64 -> 256 residual 1x1 (four tiles, double-buffered)
    (64, 24, 128, 128, 2, "resident", None),  # ResNet-18's strided down conv: two groups, two tiles resident
    (128, 8, 32, 512, 1, "stagger", "kernel"),  # 128 -> 512: a tile is 2064 words, staggered at 2032; two groups
    (128, 8, 32, 512, 1, "slot", None),      # the same without its biases: 2048 words, double-buffered
    (32, 6, 12, 80, 1, "slot", None),        # 80 kernels: the last tile 16 of 64, vMACs masked
    (16, 8, 4, 64, 1, "one tile", None),     # one kernel tile, one column a CU
])
def test_column_split_bit_exact(c, h, w, k, s, holds, biases) -> None:
    engine = "reference" if holds == "one tile" else "fast"  # the reference engine too, on the smallest
    run, got, want, plan, _ = conv_case(c, h, w, k, 1, 1, s, 0, bypass=True, mode="INDP", shift=12, engine=engine,
                                        biases=biases)
    assert plan.indp and plan.cu_split == "cols" and plan.bypass_addr is not None
    assert {"slot": plan.double_buffer_weights, "resident": plan.resident_weights and len(plan.strips) > 1,
            "stagger": plan.stagger > 0 and len(plan.strips) > 1, "one tile": plan.tiles == 1}[holds]
    assert np.array_equal(got, want)


def test_several_row_groups_bit_exact() -> None:
    """56 columns of 256 channels (28 rows): four rows a group fit two groups' segments; 7 groups
    in two slots, the next group's rows loading a part per kernel tile; exact, and faster than
    COOP (123.1 k cycles against 153.1 k)."""
    s = ConvShape(64, 28, 56, 256, 1, 1, 1, 1, 0, 0, 0, 0, True, 12)
    assert max_group_rows(s, HW) == 4
    run, got, want, plan, _ = conv_case(64, 28, 56, 256, 1, 1, 1, 0, bypass=True, shift=12)
    assert plan.cu_split == "cols" and len(plan.strips) == 7 and np.array_equal(got, want)
    coop = conv_case(64, 28, 56, 256, 1, 1, 1, 0, bypass=True, mode="COOP", shift=12)[0]
    assert run.cycles < 0.85 * coop.cycles


@pytest.mark.parametrize("shape", [(240, 8, 8, 64, 1), (64, 16, 16, 16, 2)])
def test_cost_keeps_coop_where_columns_do_not_pay(shape) -> None:
    """Long traces over few kernels, or one strided tile: the COOP estimate wins and the layer
    stays COOP; measured, the column split is indeed no faster there."""
    c, h, w, k, s = shape
    assert conv_mode(ConvShape(c, h, w, k, 1, 1, s, s, 0, 0, 0, 0, True, 12), HW, True) == "COOP"
    chosen, got, want, plan, _ = conv_case(c, h, w, k, 1, 1, s, 0, bypass=True, shift=12)
    assert not plan.indp and np.array_equal(got, want)
    columns, got, want, _, _ = conv_case(c, h, w, k, 1, 1, s, 0, bypass=True, mode="INDP", shift=12)
    assert np.array_equal(got, want) and columns.cycles >= chosen.cycles


def test_columns_that_do_not_split_are_refused() -> None:
    s = ConvShape(64, 6, 6, 64, 1, 1, 1, 1, 0, 0, 0, 0, True, 12)
    assert columns_refusal(s, HW) == "INDP with a residual bypass needs output columns a multiple of the 4 CUs (not 6)"
    assert conv_mode(s, HW, True) == "COOP"
    with pytest.raises(LoweringError, match="multiple of the 4 CUs"):
        plan_conv(s, HW, 0, 0, 0, None, 0, "INDP")
    three = ConvShape(64, 8, 8, 64, 3, 3, 1, 1, 1, 1, 1, 1, True, 12)
    assert "a 1x1 conv without padding" in columns_refusal(three, HW)


def _bottleneck(path: Path, width: int) -> Path:
    """An exporter-style bottleneck end: reduce (1x1, 64 -> 32, ReLU), expand (1x1, 32 -> 64),
    the block's add of its input and a ReLU: fuse-residual-add puts the add into expand."""
    rng = np.random.default_rng(0)
    w = lambda *s, fan: (rng.standard_normal(s) * np.sqrt(2.0 / fan)).astype(np.float32)  # noqa: E731
    inits = [numpy_helper.from_array(a, n) for a, n in (
        (w(32, 64, 1, 1, fan=64), "w0"), (np.full(32, 0.05, np.float32), "b0"),
        (w(64, 32, 1, 1, fan=32) * 0.5, "w1"), (np.full(64, -0.05, np.float32), "b1"))]
    n = helper.make_node
    nodes = [n("Conv", ["x", "w0", "b0"], ["c0"], name="reduce"), n("Relu", ["c0"], ["r0"]),
             n("Conv", ["r0", "w1", "b1"], ["c1"], name="expand"), n("Add", ["c1", "x"], ["s"], name="residual"),
             n("Relu", ["s"], ["y"])]
    io = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 64, 8, width]) for name in ("x", "y")]
    g = helper.make_graph(nodes, "bottleneck", io[:1], io[1:], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


@pytest.mark.parametrize("width, mode", [(16, "INDP"), (6, "COOP")])
def test_exporter_bottleneck_on_the_machine(tmp_path: Path, width: int, mode: str) -> None:
    """The residual 1x1 runs column-split where its 16 columns split over the 4 CUs, COOP where
    its 6 do not; the model bit-exact against golden either way."""
    rep = tmp_path / "r.json"
    assert snow_run([str(_bottleneck(tmp_path / "m.onnx", width)), "--check", "--quiet", "--report", str(rep)]) == 0
    r = json.loads(rep.read_text())
    assert r["check"]["golden_bit_exact"] is True
    assert {layer["name"]: layer["mode"] for layer in r["layers"] if layer["cycles"]} == {"reduce": "COOP",
                                                                                         "expand": mode}


@pytest.fixture(scope="module")
def tiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    d = tmp_path_factory.mktemp("cols")
    out = d / "t.mlir"
    assert snow_opt([str(_bottleneck(d / "m.onnx", 16)), "-p", "nn-prepare,nn-to-tile,tile-loop-order", "-o",
                     str(out)]) == 0
    return d, out.read_text()


def _expand(text: str, edit) -> str:
    start = text.index("tile.layer @expand ")
    end = text.find("\n  tile.layer @", start + 1)
    end = len(text) if end < 0 else end
    return text[:start] + edit(text[start:end]) + text[end:]


def _run(d: Path, text: str, capsys) -> tuple[int, str, dict]:
    src, rep = d / "edited.mlir", d / "r.json"
    src.write_text(text)
    rc = snow_run([str(src), "--check", "--quiet", "--report", str(rep)])
    err = capsys.readouterr().err
    return rc, err, json.loads(rep.read_text()) if rc == 0 else {}


def test_tile_ir_records_the_split_and_an_edit_of_the_groups_is_followed(tiled, capsys) -> None:
    """`cu_split = cols` is on the layer; splitting its one row group in two (bodies empty) is
    derived and followed: the code computes two groups, still bit-exact."""
    d, text = tiled
    assert "cu_split = #tile<cu_split cols>" in text[text.index("tile.layer @expand "):]
    rc, _, r = _run(d, text, capsys)
    assert rc == 0 and r["check"]["golden_bit_exact"] is True

    def split(body: str) -> str:
        m = re.search(r"tile\.maps_tile attributes \{([^}]*)\} \{.*?\n    \}", body, flags=re.S)
        header = m.group(1)
        assert "out_rows = array<i64: 0, 8>" in header
        halves = [f"tile.maps_tile attributes {{{header.replace('0, 8', f'{a}, {b}', 1)}}} {{}}"
                  for a, b in ((0, 4), (4, 8))]
        return body[:m.start()] + "\n    ".join(halves) + body[m.end():]

    edited = _expand(text, split)
    rc, err, r = _run(d, edited, capsys)
    assert rc == 0, err
    assert r["check"]["golden_bit_exact"] is True
    asm = d / "asm.mlir"
    for source, groups in ((text, 1), (edited, 2)):
        (d / "in.mlir").write_text(source)
        assert snow_opt([str(d / "in.mlir"), "-p", "tile-to-asm", "--print-debuginfo", "-o", str(asm)]) == 0
        code = asm.read_text()
        assert "expand.group0.ktile0" in code and ("expand.group1.ktile0" in code) == (groups == 2)


@pytest.mark.parametrize("edit, message", [
    (lambda b: b.replace("cu_split = #tile<cu_split cols>, ", "", 1),
     "an INDP residual conv runs with cu_split = cols"),
    (lambda b: b.replace("#tile<mode INDP>", "#tile<mode COOP>", 1), "cu_split: how an INDP conv's CUs share"),
    (lambda b: re.sub(r"(tile\.maps_tile attributes \{)", r"\1cu_rows = 2 : i64, ", b, count=1),
     "cu_rows: with cu_split = cols every CU takes columns"),
])
def test_edits_the_code_cannot_follow_are_refused(tiled, capsys, edit, message) -> None:
    d, text = tiled
    edited = _expand(text, edit)
    assert edited != text
    rc, err, _ = _run(d, edited, capsys)
    assert rc != 0 and message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_columns_written_on_a_plain_indp_1x1_are_followed() -> None:
    """`cu_split = cols` written on an INDP 1x1 conv without a bypass (tiles written empty) is
    followed: its row groups derived without cu_rows, the CUs splitting the columns, exact."""
    from snowir.dialects import tile
    from snowir.fixedpoint import writeback
    from snowir.golden import conv_sum
    from snowir.machine.image import assemble
    from snowir.machine.run import run_image
    from snowir.tile.build import bare_conv_layer
    from snowir.tile.edit import empty_bodies
    from test_lowering import lower_layer

    s = ConvShape(8, 8, 16, 64, 1, 1, 1, 1, 0, 0, 0, 0, True, 12)
    rng = np.random.default_rng(0)
    x = rng.integers(-300, 300, (8, 8, 16)).astype(np.int16)
    wt = rng.integers(-3000, 3000, (64, 8, 1, 1)).astype(np.int16)
    bias = rng.integers(-300, 300, 64).astype(np.int16)
    layer = bare_conv_layer("conv", s, wt, bias, HW, "INDP", False)
    assert layer.cu_split is None
    layer.properties["cu_split"] = tile.CuSplitAttr(tile.CuSplit.COLS)
    empty_bodies(layer)
    image = lower_layer(layer)
    vmovs = [str(op) for op in image.walk() if op.name == "snowflake_asm.vmov"]
    assert any("indp stride" in v for v in vmovs) and not any("bypass" in v for v in vmovs)
    run = run_image(assemble(image, HW), HW, "fast", {"x": x.transpose(1, 2, 0).ravel()}, module=image)
    got = run.outputs["y"].reshape(8, 16, 64).transpose(2, 0, 1)
    acc = conv_sum(x[None], wt, (1, 1), (0, 0, 0, 0), (1, 1), 1, dtype=np.float64)[0].astype(np.int64)
    assert np.array_equal(got, writeback(acc, bias.reshape(-1, 1, 1).astype(np.int64), 0, 12, True))


SMALL = SnowflakeConfig(maps_bank_bytes=4096, weights_buffer_bytes=2048)
"""2048-word banks and a 1024-word weights buffer: a 32 -> 128 1x1 on 8 x 8 is two staggered
kernel tiles over two row groups."""


def test_kernel_order_is_recorded_and_an_edit_is_followed() -> None:
    """The planner records `kernel_order = serpentine` (a later group starts with the tile the
    previous one ended with); the order removed (up: 0, 1 in every group) is followed: one more
    kernel tile load (its four vMACs' LDs), bit-exact, slower."""
    from snowir.dialects import snowflake_asm as sf
    from snowir.machine.image import disassemble

    runs, loads = {}, {}
    for name, edit in (("serpentine", None), ("up", lambda layer: layer.properties.pop("kernel_order"))):
        run, got, want, plan, image = conv_case(32, 8, 8, 128, 1, 1, 1, 0, bypass=True, mode="INDP", shift=12,
                                                hw=SMALL, edit=edit, biases="kernel")
        assert plan.cu_split == "cols" and plan.tiles == 2 and len(plan.strips) == 2 and not plan.resident_weights
        assert plan.kernel_order == name and np.array_equal(got, want)
        runs[name] = run
        loads[name] = sum(isinstance(op, sf.LdOp) and op.target.data == sf.LoadTarget.WEIGHTS
                          for op in disassemble(image).walk())
    assert loads["up"] > loads["serpentine"]
    assert runs["up"].cycles > runs["serpentine"].cycles


@pytest.mark.parametrize("c, h, k, mode, says", [
    (32, 8, 128, "COOP", "kernel_order serpentine: a residual conv (its bypass is read per kernel tile)"),
    (16, 8, 64, "INDP", "kernel_order serpentine: one kernel tile or one row group: the order changes nothing"),
])
def test_kernel_order_where_it_means_nothing_is_refused(c, h, k, mode, says) -> None:
    from xdsl.dialects.builtin import StringAttr
    from xdsl.utils.exceptions import PassFailedException

    def serpentine(layer) -> None:
        layer.properties["kernel_order"] = StringAttr("serpentine")

    with pytest.raises(PassFailedException, match=re.escape(says)):
        conv_case(c, h, h, k, 1, 1, 1, 0, bypass=True, mode=mode, shift=12, hw=SMALL, edit=serpentine)
