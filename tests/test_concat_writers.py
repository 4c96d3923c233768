"""Concat by placement, the writers that once kept a concat on the host (issue 36 item 2): an
INDP conv (few input channels), a column-tiled conv (input rows wider than the maps buffer), a
residual conv with bypass slices (Inception v2's n402: a 3x3/2 split-kernels part beside a max
pool) and a residual 1x1 the CUs would otherwise split by columns write their channel slice of
the concat's tensor in place: no host copy, bit-exact against the golden model on the machine."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from snowir.dialects import nn
from snowir.hw import SnowflakeConfig
from snowir.tile.lowerable import planned_conv
from tests.onnx_util import GraphBuilder, snow_run
from tests.test_concat_placement import N, _concats, _prepared


def indp_partner(size: int = 12) -> onnx.ModelProto:
    """Two convs over a 3-channel input, concatenated: 3 -> 64 runs INDP (64 kernels a tile keep
    more lanes busy than a 27-word COOP trace), 3 -> 16 COOP."""
    net = GraphBuilder()
    cat = net.concat([net.conv("x", 3, 64, 3, "wide"), net.conv("x", 3, 16, 3, "narrow")], "cat")
    y = net.conv(cat, 80, 16, 1, "post")
    return net.model({"x": [1, 3, size, size]}, y, [1, 16, size, size])


def columns_partner(w: int = 720) -> onnx.ModelProto:
    """A 3x3 conv over 32 channels of 720 columns (3 rows: 69,120 words > the 65,536-word maps
    buffer) runs column-tiled, beside a 1x1 conv, concatenated."""
    net = GraphBuilder()
    x = net.conv("x", 4, 32, 1, "stem")
    cat = net.concat([net.conv(x, 32, 16, 3, "wide"), net.conv(x, 32, 16, 1, "narrow")], "cat")
    y = net.conv(cat, 32, 16, 1, "post")
    return net.model({"x": [1, 4, 3, w]}, y, [1, 16, 3, w])


def sliced_partner(size: int = 14) -> onnx.ModelProto:
    """Inception v2's reduction (n402): a 3x3/2 conv 256 -> 256 that split-kernels runs as two
    input-channel parts chained through the bypass (the second part's bypass in per-kernel-tile
    slices), a 3x3/2 conv 256 -> 32 and a 3x3/2 max pool, concatenated."""
    net = GraphBuilder()
    x = net.conv("x", 16, 256, 1, "stem")
    a = net.conv(x, 256, 256, 3, "big", stride=2)
    b = net.conv(x, 256, 32, 3, "small", stride=2)
    net.nodes.append(N("MaxPool", [x], ["pool"], name="pool", kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4))
    y = net.conv(net.concat([a, b, "pool"], "cat"), 544, 16, 1, "post")
    half = size // 2
    return net.model({"x": [1, 16, size, size]}, y, [1, 16, half, half])


def residual_columns_partner(size: int = 16) -> onnx.ModelProto:
    """A residual 1x1 conv 64 -> 256 over 16 columns (which alone runs INDP with the CUs splitting
    columns) concatenated with a 3x3 conv over the same input: as a slice writer it runs COOP."""
    net = GraphBuilder()
    x = net.conv("x", 16, 64, 3, "stem")
    r = net.conv(x, 64, 256, 1, "r")
    net.nodes.append(N("Add", [net.conv(x, 64, 256, 1, "res", relu=False), r], ["sum"], name="add"))
    y = net.conv(net.concat(["sum", net.conv(x, 64, 16, 3, "side")], "cat"), 272, 16, 1, "post")
    return net.model({"x": [1, 16, size, size]}, y, [1, 16, size, size])


WRITERS = {"indp": (indp_partner, "wide", lambda p: p.indp),
           "columns": (columns_partner, "wide", lambda p: p.column_tiled),
           "bypass_slices": (sliced_partner, "big.part1", lambda p: p.bypass_slices),
           "residual_columns": (residual_columns_partner, "res", lambda p: p.indp and p.cu_split == "cols")}


def _conv(module, name: str) -> nn.Conv2dOp:
    return next(op for op in module.walk() if isinstance(op, nn.Conv2dOp)
                and op.attributes.get("onnx_node") == nn.StringAttr(name))


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_the_writer_places_its_slice(writer: str, tmp_path: Path, capsys) -> None:
    build, name, was = WRITERS[writer]
    m = build()
    module = _prepared(m)
    concats = _concats(module)
    assert [op.attributes["place"].data for op in concats] == ["snowflake"], \
        [op.attributes.get("host_reason") for op in concats]
    conv = _conv(module, name)
    hw = SnowflakeConfig()
    alone, placed = planned_conv(conv, hw, sliced=False), planned_conv(conv, hw)
    assert was(alone)  # the plan that once kept the concat on the host
    # the slice's writer keeps its plan, but a column-split INDP's CU stride is its bypass's too: COOP
    assert was(placed) == (writer != "residual_columns")
    path, report = tmp_path / "m.onnx", tmp_path / "r.json"
    onnx.save(m, path)
    assert snow_run([str(path), "--check", "--quiet", "--report", str(report)]) == 0, capsys.readouterr().err
    r = json.loads(report.read_text())
    assert r["check"]["golden_bit_exact"] and r["check"]["snr_db"] > 30
    assert not [row for row in r["layers"] if row["op"] == "concat" and row["where"] == "host"]


@pytest.mark.parametrize("size", [20, 40])
@pytest.mark.parametrize("block", ["c2f", "sppf"])
def test_yolo_blocks_at_their_sizes_place_every_concat_and_split(block: str, size: int) -> None:
    """YOLOv8's C2f (Split, bottlenecks, Concat) and SPPF (three chained 5x5 pools, Concat) at
    20^2 and 40^2: every channel Concat placed on the device and every Split a channel slice read
    in place (no nn.host, nothing on the host)."""
    from tests.test_concat_placement import c2f, sppf

    module = _prepared({"c2f": c2f, "sppf": sppf}[block](size))
    host = [op.name for op in module.walk() if op.attributes.get("place") == nn.StringAttr("host")]
    assert not host and not any(isinstance(op, nn.HostOp) for op in module.walk())
    assert all(op.attributes["place"].data == "snowflake" for op in _concats(module))
    slices = [op for op in module.walk() if isinstance(op, nn.ChannelSliceOp)]
    assert (block == "c2f") == bool(slices)


def test_c2f_at_20_runs_bit_exact(tmp_path: Path, capsys) -> None:
    from tests.test_concat_placement import c2f

    path, report = tmp_path / "m.onnx", tmp_path / "r.json"
    onnx.save(c2f(20), path)
    assert snow_run([str(path), "--check", "--quiet", "--report", str(report)]) == 0, capsys.readouterr().err
    r = json.loads(report.read_text())
    assert r["check"]["golden_bit_exact"] and r["check"]["snr_db"] > 30
    assert all(row["where"] == "device" for row in r["layers"])
