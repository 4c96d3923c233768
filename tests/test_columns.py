"""
Depthwise convs of any width and column tiling (issue 28 item 6), on small exporter-style
models: a depthwise conv of 8, 88 or 200 channels behind a 1x1 conv runs on the device
bit-exact; a conv whose input row is wider than the maps buffer runs column-tiled bit-exact
(a 3x3 conv over 2200 columns, a 5x5 depthwise over 240 channels); a column split forced on a
layer that fits is followed, an impossible one refused in one line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import onnx
import pytest
from onnx import helper

from snowir.tools.snow_opt import main as snow_opt
from snowir.tools.snow_run import main as snow_run
from tests.onnx_util import model, rand


def _net(c: int, h: int, w: int, k: int, kernel: int, groups: int, lead: bool = True) -> onnx.ModelProto:
    """[a 1x1 conv c -> c, ReLU, then] a kernel x kernel conv c -> k in `groups` groups, ReLU[, then
    a 1x1 conv k -> k when grouped]: what an exporter writes for a mobile block."""
    n = helper.make_node
    pad = kernel // 2
    nodes, inits, src = [], {}, "x"
    if lead:
        nodes += [n("Conv", ["x", "w0", "b0"], ["c0"], name="expand"), n("Relu", ["c0"], ["r0"])]
        inits |= {"w0": rand(c, c, 1, 1, scale=0.3 / c ** 0.5), "b0": rand(c, seed=1, scale=0.1)}
        src = "r0"
    nodes += [n("Conv", [src, "w1", "b1"], ["c1"], name="dw", pads=[pad] * 4, group=groups),
              n("Relu", ["c1"], ["r1" if groups > 1 else "y"])]
    inits |= {"w1": rand(k, c // groups, kernel, kernel, seed=2, scale=0.3), "b1": rand(k, seed=3, scale=0.1)}
    if groups > 1:  # the project conv: no DRAM round trip for the host to read the depthwise output
        nodes.append(n("Conv", ["r1", "w2", "b2"], ["y"], name="project"))
        inits |= {"w2": rand(k, k, 1, 1, seed=4, scale=0.3 / k ** 0.5), "b2": rand(k, seed=5, scale=0.1)}
    return model(nodes, {"x": [1, c, h, w]}, {"y": [1, k, h, w]}, inits)


def _run(tmp_path: Path, m: onnx.ModelProto | Path) -> dict:
    path = m if isinstance(m, Path) else tmp_path / "m.onnx"
    if not isinstance(m, Path):
        onnx.save(m, path)
    report = tmp_path / "r.json"
    assert snow_run([str(path), "--check", "--quiet", "--report", str(report)]) == 0
    r = json.loads(report.read_text())
    assert r["check"]["golden_bit_exact"] is True
    return r


def _layer(r: dict, name: str) -> dict:
    return next(layer for layer in r["layers"] if layer["name"] == name)


@pytest.mark.parametrize("c", [8, 88, 200])
def test_depthwise_of_any_width_runs_on_the_device(tmp_path: Path, c: int) -> None:
    """8 channels: one ungrouped diagonal conv; 88, 200: groups of 16 lanes, the last padded
    (its lanes past C read the next pixel against zero weights, its extra kernels masked)."""
    r = _run(tmp_path, _net(c, 20, 20, c, 3, c))
    # 88 and 200 channels run as 16-channel slices (the last 8) and their concat `dw`
    parts = [layer for layer in r["layers"] if layer["name"] == "dw" or layer["name"].startswith("dw.")]
    assert all(p["where"] == "device" for p in parts) and sum(p["cycles"] for p in parts) > 0
    # the useful MACs are the depthwise ones, not the lanes the machine keeps busy
    assert sum(p["macs"] for p in parts) == c * 58 * 58  # 20 output rows read 18 x 3 + 2 x 2 = 58 valid input rows


def test_padded_groups_are_the_tile_level_form(tmp_path: Path) -> None:
    """An 88-channel depthwise conv stays depthwise in nn (`lane_groups`, written here: for this
    shape depthwise-to-grouped prefers 16-channel slices); its tile layer is 6 groups of 16 lanes
    over the 88-channel input, 16 kernels a tile."""
    src, nn_text, out = tmp_path / "m.onnx", tmp_path / "n.mlir", tmp_path / "t.mlir"
    onnx.save(_net(88, 20, 20, 88, 3, 88), src)
    assert snow_opt([str(src), "-o", str(nn_text)]) == 0
    text = nn_text.read_text()
    edited = re.sub(r"(nn\.conv2d [^\n]*?onnx_node = \"dw\")", r"\1, lane_groups", text, count=1)
    assert edited != text
    nn_text.write_text(edited)
    assert snow_opt([str(nn_text), "-p", "nn-prepare,nn-to-tile", "-o", str(out)]) == 0
    text = out.read_text()
    assert "lane_groups" in text
    layer = text[text.index("tile.layer @dw "):]
    assert re.search(r"c = 16, .*k = 88, .*groups = 6, cin_total = 88", layer.split("\n", 1)[0])
    assert "count = 16 : i64, repeat = 6 : i64" in layer


def test_a_row_wider_than_the_maps_buffer_is_column_tiled(tmp_path: Path) -> None:
    """32 channels x 2200 columns = 70400 words a row, above the 65536-word maps buffer."""
    m = _net(32, 3, 2200, 32, 3, 1, lead=False)
    src, out = tmp_path / "m.onnx", tmp_path / "t.mlir"
    onnx.save(m, src)
    assert snow_opt([str(src), "-p", "nn-prepare,nn-to-tile,tile-loop-order", "-o", str(out)]) == 0
    cols = [tuple(map(int, c)) for c in re.findall(r"out_cols = array<i64: (\d+), (\d+)>", out.read_text())]
    bands = sorted(set(cols))
    assert len(bands) > 1 and bands[0][0] == 0 and bands[-1][1] == 2200
    assert all(a[1] == b[0] for a, b in zip(bands, bands[1:]))
    r = _run(tmp_path, out)
    assert _layer(r, "dw")["where"] == "device"


def test_wide_5x5_depthwise_240_channels(tmp_path: Path) -> None:
    """The issue's refused layer: 5 input rows of 80 x 240 = 19200 words exceed the maps buffer.
    Written as its 15 block-diagonal groups of 16: as a depthwise conv, depthwise-to-grouped runs
    it in 16-channel slices (gathered: 5 x 80 x 16 words, no column bands)."""
    m = _net(240, 5, 80, 240, 5, 240, lead=False)
    from onnx import numpy_helper
    from snowir.plan.layout import block_diagonal
    (w1,) = [t for t in m.graph.initializer if t.name == "w1"]
    w1.CopyFrom(numpy_helper.from_array(block_diagonal(numpy_helper.to_array(w1), 16), "w1"))
    (dw,) = [node for node in m.graph.node if node.name == "dw"]
    next(a for a in dw.attribute if a.name == "group").i = 15
    src, out = tmp_path / "m.onnx", tmp_path / "t.mlir"
    onnx.save(m, src)
    assert snow_opt([str(src), "-p", "nn-prepare,nn-to-tile", "-o", str(out)]) == 0
    assert "out_cols" in out.read_text()
    assert _layer(_run(tmp_path, out), "dw")["where"] == "device"


def _tiled(tmp_path: Path) -> str:
    src, out = tmp_path / "m.onnx", tmp_path / "t.mlir"
    onnx.save(_net(16, 6, 24, 32, 3, 1, lead=False), src)
    assert snow_opt([str(src), "-p", "nn-prepare,nn-to-tile,tile-loop-order", "-o", str(out)]) == 0
    return out.read_text()


def _with_cols(text: str, bands: list[tuple[int, int]]) -> str:
    """The layer's maps tiles replaced by one empty tile per band over all its rows."""
    tiles = list(re.finditer(r"    tile\.maps_tile attributes \{([^}]*)\} \{.*?\n    \}\n", text, flags=re.S))
    header = tiles[0].group(1)
    h = re.sub(r"out_rows = array<i64: \d+, \d+>", "out_rows = array<i64: 0, 6>", header)
    h = re.sub(r"in_rows = array<i64: \d+, \d+>", "in_rows = array<i64: 0, 6>", h)
    new = "".join(f"    tile.maps_tile attributes {{{h}, out_cols = array<i64: {a}, {b}>}} {{}}\n" for a, b in bands)
    return text[:tiles[0].start()] + new + text[tiles[-1].end():]


def test_a_forced_column_split_is_followed(tmp_path: Path) -> None:
    text = _tiled(tmp_path)
    assert "out_cols" not in text
    before = _layer(_run(tmp_path, tmp_path / "t.mlir"), "dw")["cycles"]
    (tmp_path / "e.mlir").write_text(_with_cols(text, [(0, 10), (10, 24)]))
    after = _layer(_run(tmp_path, tmp_path / "e.mlir"), "dw")["cycles"]
    assert after != before


@pytest.mark.parametrize("bands, says", [([(0, 10), (12, 24)], "cover output columns"),
                                         ([(0, 10), (10, 20)], "out_cols end at 20, not 24"),
                                         ([(0, 10), (10, 30)], "cover output columns")])
def test_an_impossible_column_split_is_refused_in_one_line(tmp_path: Path, capsys, bands, says: str) -> None:
    (tmp_path / "e.mlir").write_text(_with_cols(_tiled(tmp_path), bands))
    capsys.readouterr()
    assert snow_run([str(tmp_path / "e.mlir"), "--quiet"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and says in err, err


def test_lane_groups_on_a_conv_that_is_not_depthwise_is_refused(tmp_path: Path, capsys) -> None:
    src, out = tmp_path / "m.onnx", tmp_path / "t.mlir"
    onnx.save(_net(16, 6, 24, 32, 3, 1, lead=False), src)
    assert snow_opt([str(src), "-o", str(out)]) == 0
    text = out.read_text()
    edited = re.sub(r"(nn\.conv2d [^\n]*?\{)", r"\1lane_groups, ", text, count=1)
    assert edited != text
    (tmp_path / "e.mlir").write_text(edited)
    capsys.readouterr()
    assert snow_opt([str(tmp_path / "e.mlir"), "-p", "nn-prepare"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "lane_groups: a depthwise conv's" in err, err


def test_lane_groups_written_on_a_depthwise_conv_of_whole_groups_is_followed(tmp_path: Path) -> None:
    """32 channels: depthwise-to-grouped would rewrite it; written `lane_groups` by hand, it runs
    as two 16-lane groups from its depthwise weights."""
    src, out = tmp_path / "m.onnx", tmp_path / "t.mlir"
    onnx.save(_net(32, 12, 12, 32, 3, 32), src)
    assert snow_opt([str(src), "-o", str(out)]) == 0
    text = out.read_text()
    edited = re.sub(r"(nn\.conv2d [^\n]*?onnx_node = \"dw\")", r"\1, lane_groups", text, count=1)
    assert edited != text
    (tmp_path / "e.mlir").write_text(edited)
    r = _run(tmp_path, tmp_path / "e.mlir")
    assert _layer(r, "dw")["where"] == "device"


def test_whole_buffer_bands_are_not_taken_for_hidden_loads() -> None:
    """A whole-buffer strip's next load goes in as its last kernel tile frees the rows it replaces
    (codegen/strip_loads.replacing_rows), so a 2-row strip hides about a third of its 3-row load.
    UpConv7's merged ConvTranspose conv (256 -> 12 2x2 at 130^2: two kernel rows exceed the maps
    buffer, so column bands) ran 1,390 k cycles in whole-buffer bands, which the estimate had at
    1,077 k (the whole load counted against the whole strip), and 1,080 k in double-buffered bands:
    the planner must take the double-buffered ones."""
    from snowir.hw import SnowflakeConfig
    from snowir.plan.conv import plan_conv
    from snowir.plan.shapes import ConvShape
    plan = plan_conv(ConvShape(256, 130, 130, 12, 2, 2, 1, 1, 0, 0, 0, 0, False, 8), SnowflakeConfig(), 0, 0, 0)
    assert plan.column_tiled and not plan.coop_rows
    assert all(st.bank >= 0 for st in plan.strips), "whole-buffer strips chosen"
