"""
COOP with the CUs splitting output rows (`coop_rows`, snowir/plan/coop_rows.py): convs of few
kernels (RGB outputs, heads, ConvTranspose phases) as row groups, each CU's V vMACs a kernel tile
of V kernels. Bit-exact with the golden model in both engines (padding rows, strides, column
bands, two kernel tiles, a concat's channel slice, an interleave's phases in place), chosen by
cost, faster than the broadcast plan where chosen, and an edit of the decision followed or
refused in one line.
"""

from __future__ import annotations

import json
import re
from unittest import mock

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import snowir.plan.conv as plan_conv_module
from snowir.dialects import nn
from snowir.driver.model_api import compile as compile_model
from snowir.hw import SnowflakeConfig
from snowir.plan.conv import plan_conv
from snowir.plan.shapes import ConvShape
from snowir.tools.snow_opt import main as snow_opt
from snowir.tools.snow_run import main as snow_run

SMALL = SnowflakeConfig(maps_bank_bytes=4096)  # 2048-word banks: a 16-channel row of 40 pixels needs column bands


def _model(c: int, k: int, h: int, kk: int = 3, s: int = 1, p: int = 1, concat: int = 0, seed: int = 0) -> onnx.ModelProto:
    """A conv C -> K (kk x kk, stride s, pads p) over h x h; `concat` > 0: its output concatenated
    after another conv's `concat` channels (the device writes it as a channel slice)."""
    rng = np.random.default_rng(seed)
    w = lambda *shape: (rng.standard_normal(shape) * np.sqrt(1 / np.prod(shape[1:]))).astype(np.float32)  # noqa: E731
    inits = [numpy_helper.from_array(w(k, c, kk, kk), "w"), numpy_helper.from_array(w(k) * 0.1, "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y0" if concat else "y"], name="head", kernel_shape=[kk, kk],
                              strides=[s, s], pads=[p] * 4)]
    o = (h + 2 * p - kk) // s + 1
    if concat:
        inits += [numpy_helper.from_array(w(concat, c, 1, 1), "w1"), numpy_helper.from_array(w(concat) * 0.1, "b1")]
        nodes += [helper.make_node("Conv", ["x", "w1", "b1"], ["y1"], name="side", kernel_shape=[1, 1], strides=[s, s]),
                  helper.make_node("Concat", ["y1", "y0"], ["y"], name="cat", axis=1)]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, h])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, k + concat, o, o])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def _input(c: int, h: int) -> np.ndarray:
    return np.random.default_rng(1).uniform(-1, 1, (1, c, h, h)).astype(np.float32)


def _coop_rows_layers(m: onnx.ModelProto, tmp_path, hw: SnowflakeConfig | None = None, pipeline: str = "") -> list[str]:
    """The layers of the model that run coop_rows, as nn-to-tile decides for `hw`."""
    src, out, cfg = tmp_path / "m.onnx", tmp_path / "tiled.mlir", tmp_path / "hw.json"
    onnx.save(m, src)
    cfg.write_text(json.dumps((hw or SnowflakeConfig()).to_json()))
    first = f"{pipeline}," if pipeline else ""
    assert snow_opt([str(src), "-p", f"{first}nn-prepare,partition-host{{hw={cfg}}},nn-to-tile{{hw={cfg}}},"
                     f"tile-loop-order{{hw={cfg}}}", "-o", str(out)]) == 0
    return re.findall(r"tile\.layer @(\S+) conv attributes \{[^\n]*coop_rows", out.read_text())


def _broadcast_only():
    """The planner without coop_rows (the broadcast COOP plan it is weighed against)."""
    return mock.patch.object(plan_conv_module, "with_coop_rows", lambda best, hw: best)


CASES = {  # name: (C, K, H, kernel, stride, pads, concat, hw)
    "rgb_3x3_padded": (16, 3, 24, 3, 1, 1, 0, None),  # rows clipped by padding: one-row groups on CU 0
    "stride_2": (32, 3, 40, 3, 2, 1, 0, None),
    "two_tiles": (16, 6, 24, 3, 1, 1, 0, None),  # K = 6: two kernel tiles of 4 (the second masked to 2 vMACs)
    "column_bands": (16, 3, 40, 3, 1, 1, 0, SMALL),  # a CU's kernel rows exceed a bank: column bands' row groups
    "concat_slice": (16, 3, 24, 3, 1, 1, 16, None),  # writes channels 16..18 of a 19-channel tensor
}


@pytest.mark.parametrize("engine", ["fast", "reference"])
@pytest.mark.parametrize("name", list(CASES))
def test_coop_rows_is_bit_exact(name: str, engine: str, tmp_path) -> None:
    c, k, h, kk, s, p, concat, hw = CASES[name]
    m = _model(c, k, h, kk, s, p, concat)
    assert "head" in _coop_rows_layers(m, tmp_path, hw), f"{name}: the planner did not choose coop_rows"
    compiled = compile_model(m, hw=hw)
    result = compiled.run(_input(c, h), engine=engine, check=True)
    assert result.report.check.golden_bit_exact, result.report.check


def test_coop_rows_is_chosen_where_it_is_faster_and_left_where_not(tmp_path) -> None:
    """An RGB output conv (64 -> 3, 3x3 at 66^2) runs in fewer cycles with coop_rows than broadcast
    (12 of 16 vMACs busy instead of 3); a 16-kernel conv keeps the broadcast plan (its tile fills
    the vMACs: coop_rows is not weighed)."""
    c, h = 32, 66
    m = _model(c, 3, h)
    x = _input(c, h)
    assert _coop_rows_layers(m, tmp_path) == ["head"]
    chosen = compile_model(m)
    with _broadcast_only():
        broadcast = compile_model(m)
    fast, slow = chosen.run(x).report.total.cycles, broadcast.run(x).report.total.cycles
    assert fast < 0.7 * slow, (fast, slow)
    hw = SnowflakeConfig()
    assert not plan_conv(ConvShape(32, 66, 66, 16, 3, 3, 1, 1, 1, 1, 1, 1, False, 8), hw, 0, 0, 0).coop_rows


def test_phase_convs_write_their_pixels_in_place_with_coop_rows(tmp_path) -> None:
    """A ConvTranspose 4x4/2 pad 1, 32 -> 3 (method phases): four phase convs of 3 kernels each
    run coop_rows and write their pixels into the result in place (`pixels`), bit-exact."""
    rng = np.random.default_rng(0)
    wt = (rng.standard_normal((32, 3, 4, 4)) * 0.1).astype(np.float32)
    bt = (rng.standard_normal(3) * 0.1).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "wt", "bt"], ["y"], name="up", kernel_shape=[4, 4], strides=[2, 2],
                            pads=[1, 1, 1, 1])
    g = helper.make_graph([node], "ct", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 48, 48])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 96, 96])],
                          [numpy_helper.from_array(wt, "wt"), numpy_helper.from_array(bt, "bt")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    compiled = compile_model(m, pipeline="conv-transpose-to-conv{method=phases}")
    interleave = [op for op in compiled.module.walk() if isinstance(op, nn.DepthToSpaceOp)]
    assert interleave and interleave[0].attributes["place"].data == "snowflake"
    assert len(_coop_rows_layers(m, tmp_path, pipeline="conv-transpose-to-conv{method=phases}")) == 4
    x = np.random.default_rng(2).uniform(-1, 1, (1, 32, 48, 48)).astype(np.float32)
    for engine in ("fast", "reference"):
        assert compiled.run(x, engine=engine, check=True).report.check.golden_bit_exact


def _tile_text(tmp_path, m: onnx.ModelProto) -> str:
    src, out = tmp_path / "m.onnx", tmp_path / "t.mlir"
    onnx.save(m, src)
    assert snow_opt([str(src), "-p", "nn-prepare,nn-to-tile,tile-loop-order", "-o", str(out)]) == 0
    return out.read_text()


def _run(tmp_path, text: str, capsys) -> tuple[int, str]:
    src = tmp_path / "edited.mlir"
    src.write_text(text)
    code = snow_run([str(src), "--check", "--quiet", "--report", str(tmp_path / "r.json")])
    return code, capsys.readouterr().err


def _empty_bodies(text: str) -> str:
    """Every kernel and maps tile of the text written with an empty body `{}` (to be derived)."""
    text = re.sub(r"(tile\.(kernel|maps)_tile attributes \{[^}]*\}) \{\n.*?\n    \}", r"\1 {}", text, flags=re.S)
    return re.sub(r", cu_rows = \d+ : i64", "", text)


def test_an_edit_adding_or_removing_coop_rows_is_followed(tmp_path, capsys) -> None:
    """coop_rows added to a broadcast layer (bodies empty: the row groups and V-kernel tile derived)
    or removed from a coop_rows layer: followed (other code), bit-exact."""
    text = _tile_text(tmp_path, _model(16, 16, 24))  # 16 kernels: broadcast
    assert "coop_rows" not in text
    added = _empty_bodies(text.replace("loop_order = #tile<loop_order Kloop>", "loop_order = #tile<loop_order Kloop>, "
                                       "coop_rows", 1))
    added = re.sub(r", slot = \d+ : i64", "", added)
    code, err = _run(tmp_path, added, capsys)
    assert code == 0, err
    text = _tile_text(tmp_path, _model(16, 3, 24))
    assert "coop_rows" in text
    removed = _empty_bodies(text.replace(", coop_rows", ""))
    code, err = _run(tmp_path, removed, capsys)
    assert code == 0, err


def test_coop_rows_on_a_layer_that_cannot_run_it_is_refused_in_one_line(tmp_path, capsys) -> None:
    """coop_rows on a layer whose kernel tile holds 16 kernels (bodies kept) is refused naming the
    layer; cu_rows left on a maps tile once coop_rows is removed (bodies kept) too."""
    text = _tile_text(tmp_path, _model(16, 16, 24))
    added = text.replace("loop_order = #tile<loop_order Kloop>", "loop_order = #tile<loop_order Kloop>, coop_rows", 1)
    code, err = _run(tmp_path, added, capsys)
    assert code != 0 and "@head" in err and "coop_rows" in err, err
    text = _tile_text(tmp_path, _model(16, 3, 24))
    code, err = _run(tmp_path, text.replace(", coop_rows", ""), capsys)
    assert code != 0 and "@head" in err and "cu_rows" in err, err


def test_coop_rows_on_a_residual_conv_is_refused_in_one_line(tmp_path, capsys) -> None:
    """A residual conv reads its bypass per kernel tile, broadcast (the CUs' write-backs its
    channels): coop_rows on it is refused naming the layer and why, not followed wrongly."""
    rng = np.random.default_rng(0)
    w = lambda *shape: numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32))  # noqa: E731
    inits = [w(16, 16, 3, 3), w(16), w(16, 16, 3, 3), w(16)]
    for t, name in zip(inits, ("w0", "b0", "w1", "b1")):
        t.name = name
    n = helper.make_node
    nodes = [n("Conv", ["x", "w0", "b0"], ["c0"], name="stem", pads=[1] * 4), n("Relu", ["c0"], ["r0"]),
             n("Conv", ["r0", "w1", "b1"], ["c1"], name="branch", pads=[1] * 4),
             n("Add", ["c1", "r0"], ["y"], name="residual")]
    g = helper.make_graph(nodes, "res", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 12, 12])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    text = _tile_text(tmp_path, m)
    layer = re.search(r"tile\.layer @branch conv attributes \{[^\n]*loop_order = #tile<loop_order Kloop>", text)
    assert layer is not None
    edited = text.replace(layer.group(0), layer.group(0) + ", coop_rows")
    code, err = _run(tmp_path, edited, capsys)
    assert code != 0 and "@branch" in err and "coop_rows" in err and "residual" in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_a_gathering_conv_is_not_planned_coop_rows() -> None:
    """A conv over a channel slice (ShuffleNet's branches) gathers its maps pixel by pixel,
    broadcast: its compact plan does not take row groups, however few its kernels; nor does a
    strided 1x1 whose gathered pixels fit one broadcast strip (row groups over gathered pixels are
    weighed only where the broadcast plan re-sends kernels or maps: tests/test_gathered_rows.py)."""
    hw = SnowflakeConfig()
    for s in (ConvShape(16, 40, 40, 3, 3, 3, 1, 1, 1, 1, 1, 1, False, 8, 1, 64, 16),  # channels 16..31 of 64
              ConvShape(64, 40, 40, 3, 1, 1, 2, 2, 0, 0, 0, 0, False, 8)):  # a strided 1x1
        plan = plan_conv(s, hw, 0, 0, 0)
        assert plan.gather is not None and not plan.coop_rows, s
    # the compact conv alone (no gather) does take them
    assert plan_conv(ConvShape(16, 40, 40, 3, 3, 3, 1, 1, 1, 1, 1, 1, False, 8), hw, 0, 0, 0).coop_rows
