"""
A channel concat placed on the device makes its inputs whole pixels of its wider tensor, so every
device reader of an input reads wider rows than when it was placed. A YOLOX SPP block (ddddocr's
common_det at 416²: 5/9/13 max pools over 13x13 pixels of a 768-channel concat) then failed
nn-to-tile with "max pool: 9 rows of 9984 words do not fit the maps buffer" after partition-host
had put the concat on the device. The concat must stay on the host (its reason naming the reader),
and the model must run bit-exact.
"""

from __future__ import annotations

import json
from pathlib import Path

import onnx
from onnx import helper

from snowir.dialects import nn
from tests.onnx_util import GraphBuilder, snow_run
from tests.test_concat_placement import _concats, _prepared

N = helper.make_node


def spp(size: int = 13, c: int = 192, kernels: tuple[int, ...] = (5, 9, 13)) -> onnx.ModelProto:
    """YOLOX's SPP bottleneck: cv1, parallel max pools (5, 9, 13; stride 1), Concat of them all, cv2."""
    net = GraphBuilder()
    a = net.conv("x", 16, c, 1, "cv1")
    pools = [a]
    for k in kernels:
        net.nodes.append(N("MaxPool", [a], [f"p{k}"], name=f"pool{k}", kernel_shape=[k, k], pads=[k // 2] * 4))
        pools.append(f"p{k}")
    y = net.conv(net.concat(pools, "cat"), (len(kernels) + 1) * c, 32, 1, "cv2")
    return net.model({"x": [1, 16, size, size]}, y, [1, 32, size, size])


def test_a_concat_whose_pool_reader_cannot_read_wide_rows_stays_on_the_host(tmp_path: Path, capsys) -> None:
    """A lone 13x13 pool (nothing for cascade-max-pool to chain it to) reading its input in place
    from a 768-channel concat needs 13 rows of 13 x 768 words, more than the maps buffer."""
    m = spp(c=384, kernels=(13,))
    (cat,) = _concats(_prepared(m))
    assert cat.attributes["place"].data == "host"
    reason = cat.attributes["host_reason"].data
    assert "'pool13' cannot read its slice in place" in reason, reason
    path, report = tmp_path / "spp.onnx", tmp_path / "r.json"
    onnx.save(m, path)
    assert snow_run([str(path), "--check", "--quiet", "--report", str(report)]) == 0, capsys.readouterr().err
    r = json.loads(report.read_text())
    assert r["check"]["golden_bit_exact"] and r["check"]["snr_db"] > 30
    where = {row["name"]: row["where"] for row in r["layers"]}
    assert where["pool13"] == "device" and where["cat"] == "host"
    # the report says why, as the IR does (a device layer carries no host_reason)
    rows = {row["name"]: row for row in r["layers"]}
    assert rows["cat"]["host_reason"] == reason and "host_reason" not in rows["pool13"]


def test_the_spp_block_chained_keeps_its_concat_on_the_device() -> None:
    """The same 768-wide concat behind SPP's 5 / 9 / 13 pools: cascade-max-pool makes them three
    5x5 links, whose 5 rows fit, so the concat is placed (tests/test_cascade_max_pool.py runs it)."""
    (cat,) = _concats(_prepared(spp()))
    assert cat.attributes["place"].data == "snowflake", cat.attributes.get("host_reason")


def test_the_same_block_narrow_enough_keeps_its_concat_on_the_device() -> None:
    (cat,) = _concats(_prepared(spp(size=13, c=32)))
    assert cat.attributes["place"].data == "snowflake", cat.attributes.get("host_reason")
    assert isinstance(cat, nn.ConcatOp)
