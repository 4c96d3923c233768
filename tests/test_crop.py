"""Crops read in place (issue 36): an ONNX Slice of H and W, step 1, constant bounds (waifu2x's
UNets crop a feature map, `x[:, :, 4:-4, 4:-4]`, and add it to the other branch) imports as an
`nn.crop`; partition-host places it on the device when every reader is a device conv that loads
its window of the source's DRAM tensor in place (the maps or bypass region's `crop`: loads from the
window's first pixel, rows the source's width apart), else the host copies it, with its reason.
Exporter-style models (onnx.helper): each is bit-exact against the golden model on both engines."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from snowir.dialects import nn
from snowir.dialects.tile.decisions import CROP
from snowir.driver.model_api import compile as compile_model
from snowir.frontend.onnx_import import import_model
from snowir.hw import SnowflakeConfig
from snowir.passes.pipelines import NNPreparePass
from snowir.plan.conv import plan_conv
from snowir.segments import segments_of, main_of, slot_of
from snowir.tile.build import layer_conv_shape
from snowir.tile.lowerable import planned_conv
from snowir.tile.placement import regions_of
from tests.onnx_util import GraphBuilder, model, ort_run, rand, snow_run, tile_level, tile_to_asm

N = helper.make_node


def crop_into_conv(y0: int = 3, x0: int = 1, h: int = 9, w: int = 8) -> onnx.ModelProto:
    """A conv's output cropped at odd offsets into a window of its own height and width, read by a
    padded 3x3 conv (COOP by rows)."""
    net = GraphBuilder(same_pad=False)
    a = net.conv("x", 16, 32, 3, "a", pad=1)
    c = net.crop(a, [y0, x0], [y0 + h, x0 + w], "crop")
    return net.model({"x": [1, 16, 14, 14]}, net.conv(c, 32, 32, 3, "b", pad=1, relu=False))


def crop_into_residual() -> onnx.ModelProto:
    """CUNet's UNet block, small: a's 16x16 output cropped to the 14x14 of the convs after it, at
    (2, 1), and added to their output (fuse-residual-add: the last conv's bypass is the crop)."""
    net = GraphBuilder(same_pad=False)
    a = net.conv("x", 16, 32, 3, "a")
    b = net.conv(net.conv(a, 32, 32, 3, "b1"), 32, 32, 1, "b2", relu=False)
    y = net.op("Add", [b, net.crop(a, [2, 1], [16, 15], "crop")], "res")
    return net.model({"x": [1, 16, 18, 18]}, y)


def crop_into_add(crop_first: bool) -> onnx.ModelProto:
    """waifu2x CUNet's `x1 + x2`, x2 ending in a layer that is no conv (here a max pool): add-to-bypass
    makes the add a 1x1 identity conv over one operand with the other as its bypass, so the crop
    (negative ends, as `x[:, :, 1:-1, 1:-1]` exports) is the conv's maps (`crop_first`) or its bypass."""
    net = GraphBuilder(same_pad=False)
    a = net.conv("x", 16, 32, 3, "a")
    g = net.op("MaxPool", [net.conv(a, 32, 32, 3, "b")], "pool", kernel_shape=[3, 3], pads=[1] * 4)
    c = net.crop(a, [1, 1], [-1, -1], "crop")
    y = net.op("Add", [c, g] if crop_first else [g, c], "add")
    return net.model({"x": [1, 16, 16, 16]}, net.conv(y, 32, 16, 3, "post", pad=1, relu=False))


def crop_of_the_input() -> onnx.ModelProto:
    """The model input cropped (the host writes it whole), read by a 3-channel stem: INDP row groups,
    each CU loading its rows from the window."""
    net = GraphBuilder(same_pad=False)
    c = net.crop("x", [2, 3], [42, 43], "crop")
    return net.model({"x": [1, 3, 44, 46]}, net.conv(net.conv(c, 3, 32, 3, "stem"), 32, 16, 1, "post"))


def crop_into_strided_1x1() -> onnx.ModelProto:
    """A strided 1x1 conv over a crop: its pixels gathered one LD each from the window."""
    net = GraphBuilder(same_pad=False)
    a = net.conv("x", 16, 64, 3, "a")
    c = net.crop(a, [1, 2], [11, 12], "crop")
    return net.model({"x": [1, 16, 14, 14]}, net.conv(c, 64, 32, 1, "down", stride=2, relu=False))


def _prepared(m: onnx.ModelProto, hw: str = "") -> object:
    module = import_model(m)
    NNPreparePass(hw=hw).apply(None, module)
    return module


def _crops(module) -> list[nn.CropOp]:
    return [op for op in module.walk() if isinstance(op, nn.CropOp)]


def _bit_exact(m: onnx.ModelProto, engines: tuple[str, ...] = ("fast", "reference")):
    """Compiled and run on each engine: the crops placed on the device, no host layer at all (one
    segment), bit-exact against the golden model, close to onnxruntime."""
    compiled = compile_model(m)
    crops = _crops(compiled.module)
    assert crops and all(op.attributes["place"].data == "snowflake" for op in crops), \
        [op.attributes.get("host_reason") for op in crops]
    assert len(segments_of(main_of(compiled.module).body.block).segments) == 1
    results = [compiled.run(engine=engine, check=True) for engine in engines]
    for engine, result in zip(engines, results):
        check = result.report.check
        assert check is not None and check.golden_bit_exact and check.snr_db > 30, (engine, check)
        assert result.report.total.host_ms == 0
    assert all(np.array_equal(r.outputs[0], results[0].outputs[0]) for r in results)
    return results[0].report


def _tile_regions(m: onnx.ModelProto) -> dict[str, dict[str, tuple[int, ...] | None]]:
    """Per conv layer, each region's `crop` at the tile level (after allocate-dram)."""
    from snowir.dialects import tile
    from snowir.driver.model_run import apply_pipeline

    module = import_model(m)
    apply_pipeline(module, "nn-prepare,nn-to-tile,tile-loop-order,allocate-dram")
    return {layer.sym_name.data: {label: CROP.value(r) for label, r in regions_of(layer).items()}
            for layer in module.walk() if isinstance(layer, tile.LayerOp)}


# ---------------------------------------------------------------------------------------------- import

def test_a_slice_of_pixels_imports_as_a_crop() -> None:
    """Starts / ends on H and W (a negative end, an INT64_MAX end), step 1: an nn.crop of every channel;
    a strided one, or one of pixels and channels at once, stays a host Slice with its reason."""
    net = GraphBuilder(same_pad=False)
    a = net.conv("x", 16, 32, 3, "a", pad=1)
    net.crop(a, [1, 2], [-1, 2**63 - 1], "win")
    net.crop(a, [0, 0], [8, 8], "strided", steps=[2, 2])
    net.crop(a, [0, 0, 0], [16, 8, 8], "both", axes=(1, 2, 3))
    m = model(net.nodes, {"x": [1, 16, 10, 10]}, {"win": None, "strided": None, "both": None}, net.inits)
    module = _prepared(m)
    (crop,) = _crops(module)
    assert tuple(nn.int_values(crop.offsets)) == (1, 2) and crop.output.type.get_shape() == (1, 32, 8, 8)
    hosts = {op.attributes["onnx_node"].data: op.attributes["host_reason"].data
             for op in module.walk() if isinstance(op, nn.HostOp)}
    assert set(hosts) == {"strided", "both"}
    assert all("a strided slice, one of pixels and channels at once" in why for why in hosts.values())


# ---------------------------------------------------------------------------------------------- readers

@pytest.mark.parametrize("y0, x0, h, w", [(3, 1, 9, 8), (0, 5, 14, 9), (4, 0, 10, 14)],
                         ids=["odd", "rows_whole", "columns_whole"])
def test_a_crop_into_a_conv_s_maps_is_read_in_place(y0: int, x0: int, h: int, w: int) -> None:
    """The reader's maps region is the source's whole tensor with `crop` = [y0, x0, 14, 14]; its loads
    start at the window's first pixel, one a row where the window is narrower than the tensor."""
    m = crop_into_conv(y0, x0, h, w)
    assert _tile_regions(m)["b"]["maps"] == (y0, x0, 14, 14)
    _bit_exact(m)


def test_a_crop_into_a_residual_bypass_is_read_in_place() -> None:
    """fuse-residual-add puts the crop on the conv's bypass: bypass rows from the window (the bypass
    region's `crop`), bit-exact."""
    regions = _tile_regions(crop_into_residual())
    assert regions["b2"]["bypass"] == (2, 1, 16, 16) and regions["b2"]["maps"] is None
    report = _bit_exact(crop_into_residual())
    assert {r.name: r.mode for r in report.layers}["b2"] == "COOP"  # bypass rows beside the maps


@pytest.mark.parametrize("crop_first", [True, False], ids=["maps", "bypass"])
def test_a_crop_into_an_add_is_read_in_place(crop_first: bool) -> None:
    """add-to-bypass's identity conv (a column-split INDP residual conv here) reads the crop as its
    maps or as its bypass, from the window, bit-exact."""
    m = crop_into_add(crop_first)
    regions = _tile_regions(m)["add"]
    assert regions["maps" if crop_first else "bypass"] == (1, 1, 14, 14)
    assert regions["bypass" if crop_first else "maps"] is None
    report = _bit_exact(m)
    assert {r.name: r.mode for r in report.layers}["add"] == "INDP"


def test_a_crop_of_the_model_input_read_by_an_indp_stem() -> None:
    """The host writes the input whole; the stem's row groups load their rows from the window."""
    assert _tile_regions(crop_of_the_input())["stem"]["maps"] == (2, 3, 44, 46)
    report = _bit_exact(crop_of_the_input())
    assert {r.name: r.mode for r in report.layers}["stem"] == "INDP"


def test_a_crop_into_a_strided_1x1_conv_gathers_from_the_window() -> None:
    assert _tile_regions(crop_into_strided_1x1())["down"]["maps"] == (1, 2, 12, 12)
    _bit_exact(crop_into_strided_1x1())


def test_a_cropped_bypass_is_read_by_rows_not_slices() -> None:
    """A residual 1x1 conv whose planner takes bypass slices over a bypass of its own (they step the
    bypass pixel by pixel through a strip, one run of rows) reads a cropped bypass by rows."""
    net = GraphBuilder(same_pad=False)
    a = net.conv("x", 16, 128, 3, "a")
    b = net.conv(net.conv(a, 128, 128, 3, "b1"), 128, 128, 1, "b2", relu=False)
    m = net.model({"x": [1, 16, 12, 12]}, net.op("Add", [b, net.crop(a, [1, 1], [-1, -1], "crop")], "res"))
    module = _prepared(m)
    (conv,) = [op for op in module.walk() if isinstance(op, nn.Conv2dOp) and op.bypass is not None]
    assert slot_of(conv.bypass).window == (1, 1, 10, 10)
    s, hw = layer_conv_shape(conv), SnowflakeConfig()
    assert plan_conv(s, hw, 0, 0, 0, None, 0, "COOP").bypass_slices  # a bypass of its own: slices
    assert not planned_conv(conv, hw).bypass_slices
    _bit_exact(m, ("fast",))


# ---------------------------------------------------------------------------------------------- the host

def _host_crop(m: onnx.ModelProto) -> str:
    (crop,) = _crops(_prepared(m))
    assert crop.attributes["place"].data == "host"
    return crop.attributes["host_reason"].data


def test_a_crop_some_reader_cannot_read_in_place_stays_on_the_host(tmp_path: Path, capsys) -> None:
    """A crop read by a max pool (which loads whole rows of its input), or by a host op as well as a
    conv, or returned: the host copies the window (its reason), and the model still runs bit-exact."""
    net = GraphBuilder(same_pad=False)
    c = net.crop(net.conv("x", 16, 32, 3, "a", pad=1), [1, 1], [9, 9], "crop")
    pooled = net.model({"x": [1, 16, 10, 10]}, net.op("MaxPool", [c], "pool", kernel_shape=[2, 2], strides=[2, 2]))
    assert _host_crop(pooled) == ("crop: the host copies the window ('pool' (nn.max_pool) reads the window as a "
                                  "tensor of its own (a max pool loads whole rows of its input))")
    net = GraphBuilder(same_pad=False)
    c = net.crop(net.conv("x", 16, 32, 3, "a", pad=1), [1, 1], [9, 9], "crop")
    y = net.op("Add", [net.op("Sigmoid", [c], "sig"), net.conv(c, 32, 32, 3, "b", pad=1, relu=False)], "y")
    shared = net.model({"x": [1, 16, 10, 10]}, y)
    assert "'sig' (nn.host) reads the window as a tensor of its own" in _host_crop(shared)
    path, report = tmp_path / "m.onnx", tmp_path / "r.json"
    onnx.save(shared, path)
    assert snow_run([str(path), "--check", "--quiet", "--report", str(report)]) == 0, capsys.readouterr().err
    r = json.loads(report.read_text())
    row = {row["name"]: row for row in r["layers"]}["crop"]
    assert r["check"]["golden_bit_exact"] and row["where"] == "host" and row["host_ms"] > 0
    net = GraphBuilder(same_pad=False)
    out = net.model({"x": [1, 16, 10, 10]}, net.crop(net.conv("x", 16, 32, 3, "a", pad=1), [1, 1], [9, 9], "crop"))
    assert "'func.return' (func.return) reads the window" in _host_crop(out)


def test_an_edited_crop_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    """The reader's `crop` moved or removed: tile-to-asm refuses in one line naming the layer, where
    the graph finds its maps and what to edit instead; a window past its tensor likewise."""
    text = tile_level(crop_into_conv(), tmp_path)
    have = ", crop = array<i64: 3, 1, 14, 14>"
    assert text.count(have) == 1
    for edit, want in ((have.replace("3, 1", "2, 1"),
                        "layer @b: tile.dram_region @b.maps: crop [2, 1, 14, 14] where the graph finds its maps at "
                        "[3, 1, 14, 14]"),
                       (have.replace("3, 1", "6, 1"), "crop [6, 1, 14, 14] where the graph finds its maps at"),
                       ("", "crop [] where the graph finds its maps at [3, 1, 14, 14]")):
        code, err = tile_to_asm(text.replace(have, edit), tmp_path, capsys)
        assert code != 0 and len(err.strip().splitlines()) == 1, err
        assert want in err, err
    code, err = tile_to_asm(text, tmp_path, capsys)
    assert code == 0, err


def test_one_program_per_layer_reads_the_window(tmp_path: Path, capsys) -> None:
    """whole-model=false (each layer its own DRAM): the host writes the crop's source whole into the
    reader's maps segment (and bypass segment), the reader loads the window; bit-exact."""
    for m in (crop_into_conv(), crop_into_add(False)):
        path, report = tmp_path / "m.onnx", tmp_path / "r.json"
        onnx.save(m, path)
        assert snow_run([str(path), "--check", "--quiet", "--report", str(report),
                         "--pipeline", "snowflake-lower{whole-model=false}"]) == 0, capsys.readouterr().err
        r = json.loads(report.read_text())
        assert r["check"]["golden_bit_exact"] and {row["name"]: row for row in r["layers"]}["crop"]["where"] == "device"
