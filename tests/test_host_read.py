"""The host reads a merged conv's interleave in place (issue 36 item 1, issue 38 item 2): a
ConvTranspose lowered as one merged sub-pixel conv whose interleave (and crop) only the host reads
(the model's output, host layers) is no host layer: the conv writes its phase grid as it would
anyway, the output region's `host_read` = [sy, sx, oy, ox, height, width] says how the host reads
the result from it, and the runner's read, the golden comparison and the end-to-end timeline follow
it (each result word copied back once, no host interleave time). Exporter-style models
(onnx.helper): waifu2x UpConv7's tail, ConvTranspose 4x4/2 pad 3 as the last layer, and the same
read by a host layer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper
from xdsl.dialects.builtin import DictionaryAttr, StringAttr

from snowir.dialects import nn
from snowir.driver.model_api import compile as compile_model
from snowir.driver.segment_run import host_read_words
from snowir.golden import depth_to_space
from snowir.tile.placement import output_host_read, regions_of
from tests.onnx_util import model, rand, tile_level, tile_to_asm

N = helper.make_node
SIZE = 12  # the ConvTranspose's input: 12x12 -> 20x20 (grid 11x11, first row and column cropped)


def _tail(reader: str = "", c: int = 64) -> onnx.ModelProto:
    """conv 3x3 -> ReLU -> ConvTranspose c -> 3, 4x4 stride 2 pad 3 (UpConv7's last layer), the
    model's output or read by `reader` (an ONNX op the host runs: Sigmoid; a device one: Conv)."""
    nodes = [N("Conv", ["x", "w0", "b0"], ["h"], pads=[1, 1, 1, 1]), N("Relu", ["h"], ["r"]),
             N("ConvTranspose", ["r", "w"], ["t"], name="up", kernel_shape=[4, 4], strides=[2, 2], pads=[3, 3, 3, 3])]
    inits = {"w0": rand(c, 16, 3, 3, seed=5, scale=0.1), "b0": rand(c, seed=6, scale=0.1),
             "w": rand(c, 3, 4, 4, seed=1, scale=0.05)}
    out = "t"
    if reader == "Sigmoid":
        nodes.append(N("Sigmoid", ["t"], ["y"], name="sig"))
        out = "y"
    elif reader == "Conv":
        nodes.append(N("Conv", ["t", "w1", "b1"], ["y"], name="after", pads=[1, 1, 1, 1]))
        inits |= {"w1": rand(16, 3, 3, 3, seed=7, scale=0.1), "b1": rand(16, seed=8, scale=0.1)}
        out = "y"
    return model(nodes, {"x": [1, 16, SIZE, SIZE]}, {out: None}, inits)


def _ort(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _interleave(module) -> nn.DepthToSpaceOp:
    (d2s,) = [op for op in module.walk() if isinstance(op, nn.DepthToSpaceOp)]
    return d2s


@pytest.mark.parametrize("reader", ["", "Sigmoid"])
@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_the_host_reads_the_merged_convs_interleave_in_place(reader: str, engine: str) -> None:
    """Placed `host-read` (no host layer, no host_reason), recorded once on the conv's output region;
    the machine is bit-exact with the host's read of the grid, close to onnxruntime, and the timeline
    copies the result's words back once (not the grid's): no host interleave time."""
    m = _tail(reader)
    compiled = compile_model(m)
    d2s = _interleave(compiled.module)
    assert d2s.attributes["place"].data == "host-read" and "host_reason" not in d2s.attributes
    conv = d2s.inputs[0].owner
    assert conv.attributes["conv_transpose"].data.startswith("sub-pixel"), conv.attributes["conv_transpose"]
    x = rand(1, 16, SIZE, SIZE, seed=3)
    result = compiled.run(x, check=True, engine=engine)
    report = result.report
    assert report.check.golden_bit_exact, report.check
    assert np.abs(result.outputs[0] - _ort(m, x)).max() < 0.02
    rows = {row.name: row for row in report.layers}
    assert rows["up.interleave"].where == "host-read" and not rows["up.interleave"].host_ms
    total = report.total
    sigmoid = sum(row.host_ms or 0.0 for row in report.layers if row.where == "host")
    assert (total.host_ms == 0) == (reader == "") and total.host_ms == pytest.approx(sigmoid)
    # the round trips: the input written, the 3x20x20 result read (the 12x11x11 grid is never copied)
    assert total.round_trip_bytes == 2 * (16 * SIZE * SIZE + 3 * 20 * 20)
    assert total.end_to_end_ms == pytest.approx(total.ms + total.host_ms + total.round_trip_ms)


def test_a_device_reader_keeps_the_host_interleave() -> None:
    """A conv reading the result cannot read through the permutation: the interleave stays a host
    layer, its reason naming both what keeps cu-stride out and what keeps the host read out; still
    bit-exact."""
    m = _tail("Conv")
    compiled = compile_model(m)
    d2s = _interleave(compiled.module)
    why = d2s.attributes["host_reason"].data
    assert d2s.attributes["place"].data == "host", why
    assert "(method sub-pixel)" in why and "host-read: 'after' (nn.conv2d) may run on the device" in why
    assert not _host_read_facts(compiled.module)
    result = compiled.run(rand(1, 16, SIZE, SIZE, seed=3), check=True)
    assert result.report.check.golden_bit_exact and result.report.total.host_ms > 0


def test_the_tile_ir_records_the_host_read_once(tmp_path: Path) -> None:
    from snowir.dialects import tile
    from snowir.frontend.onnx_import import import_model
    from snowir.passes.convert.nn_to_tile import NNToTilePass
    from snowir.passes.pipelines import NNPreparePass

    module = import_model(_tail())
    NNPreparePass().apply(None, module)
    NNToTilePass().apply(None, module)
    reads = [output_host_read(regions_of(op)["output"]) for op in module.ops if isinstance(op, tile.LayerOp)]
    assert reads == [None, (2, 2, 1, 1, 20, 20)]


@pytest.mark.parametrize("layout", [(2, 2, 1, 1, 20, 20), (2, 2, 0, 0, 22, 22), (2, 3, 1, 2, 19, 30),
                                    (3, 1, 2, 0, 30, 11)])
def test_the_host_reader_is_the_graphs_interleave(layout: tuple) -> None:
    """host_read_words (the runner's read, each result word once) equals the golden model's
    nn.depth_to_space of the grid, crops included."""
    sy, sx, oy, ox, h, w = layout
    m, gh, gw = 3, 11, 11
    grid = np.random.default_rng(sum(layout)).integers(-30000, 30000, (sy * sx * m, gh, gw)).astype(np.int16)
    words = grid.transpose(1, 2, 0).ravel()  # the conv's output region: channel-innermost
    want = depth_to_space(grid[None], (sy, sx), (oy, ox), 1, h, w)[0]
    assert np.array_equal(host_read_words(words, layout, sy * sx * m, gh, gw), want)


def _host_read_facts(module) -> list[tuple]:
    """(op, attribute name) of every marker's facts holding a `host_read`, and of every image
    attribute `host_read` where no marker does (one program per layer)."""
    markers, images = [], []
    for op in module.walk():
        for key, attr in op.attributes.items():
            if isinstance(attr, DictionaryAttr) and "host_read" in attr.data:
                markers.append((op, key))
            elif key == "host_read" and isinstance(attr, StringAttr):
                images.append((op, key))
    return markers or images


@pytest.mark.parametrize("pipeline", [None, "snowflake-lower{whole-model=false}"])
def test_the_runner_follows_the_recorded_read(pipeline: str | None) -> None:
    """The runner reads the result as the layer's marker (whole-model programs) or image (one program
    per layer) says — the tile IR's `host_read`, through tile-to-asm (and link-segments) — not as the
    graph says: a read bypassing the refusals (edited after lowering) reads other words, and the run
    is no longer bit-exact."""
    x = rand(1, 16, SIZE, SIZE, seed=3)
    assert compile_model(_tail(), pipeline=pipeline).run(x, check=True).report.check.golden_bit_exact
    compiled = compile_model(_tail(), pipeline=pipeline)
    ((op, key),) = _host_read_facts(compiled.module)
    moved = StringAttr("2,2,0,0,20,20")  # the grid's first row and column instead
    if isinstance(op.attributes[key], DictionaryAttr):  # a marker's facts
        facts = dict(op.attributes[key].data)
        assert facts["host_read"] == StringAttr("2,2,1,1,20,20")
        op.attributes[key] = DictionaryAttr({**facts, "host_read": moved})
    else:  # the layer image's attribute
        assert op.attributes[key] == StringAttr("2,2,1,1,20,20")
        op.attributes[key] = moved
    assert not compiled.run(x, check=True).report.check.golden_bit_exact


def test_an_edited_host_read_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    """The graph's interleave reads the conv's output: an edited `host_read` (moved, or removed) is
    refused in one line (a window past the conv's grid, or a phase offset past the stride, too: the
    graph disagrees, or the declaration's rule); the unedited text lowers."""
    text = tile_level(_tail(), tmp_path)
    placed = "host_read = array<i64: 2, 2, 1, 1, 20, 20>"
    assert placed in text
    for old, new, message in [
        (placed, placed.replace("1, 1, 20", "0, 0, 20"), "host_read [2, 2, 0, 0, 20, 20] where the graph's "
                                                         "interleave reads its output as [2, 2, 1, 1, 20, 20]"),
        (", " + placed, "", "host_read [] where the graph's interleave reads its output as [2, 2, 1, 1, 20, 20]"),
        (placed, placed.replace("20, 20", "22, 22"), "host_read [2, 2, 1, 1, 22, 22] where the graph's interleave "
                                                     "reads its output as [2, 2, 1, 1, 20, 20]"),
        (placed, placed.replace("2, 2, 1, 1", "2, 2, 2, 1"), "host_read: [sy, sx, oy, ox, height, width]"),
    ]:
        assert old in text
        code, err = tile_to_asm(text.replace(old, new), tmp_path, capsys)
        assert code != 0 and len(err.strip().splitlines()) == 1 and message in err, err
    code, err = tile_to_asm(text, tmp_path, capsys)
    assert code == 0, err


def test_host_read_is_only_an_interleaves_placement() -> None:
    """`place = "host-read"` on an op that is not a merged conv's interleave (a user's edit of @main) is
    refused in one line."""
    from xdsl.utils.exceptions import PassFailedException

    from snowir.frontend.onnx_import import import_model
    from snowir.passes.pipelines import NNPreparePass

    module = import_model(_tail())
    conv = next(op for op in module.walk() if isinstance(op, nn.Conv2dOp))
    conv.attributes["place"] = StringAttr("host-read")
    with pytest.raises(PassFailedException, match="only a merged conv's interleave"):
        NNPreparePass().apply(None, module)


def test_a_user_s_snowflake_placement_the_device_cannot_take_is_refused() -> None:
    """The merged conv cannot write UpConv7's cropped interleave in place: `place = "snowflake"` on it
    in @main is refused in one line, naming why (not silently made the host's read)."""
    from xdsl.utils.exceptions import PassFailedException

    from snowir.frontend.onnx_import import import_model
    from snowir.passes.nn.conv_transpose_to_conv import ConvTransposeToConvPass
    from snowir.passes.pipelines import NNPreparePass

    module = import_model(_tail())
    ConvTransposeToConvPass(method="sub-pixel").apply(None, module)
    _interleave(module).attributes["place"] = StringAttr("snowflake")
    with pytest.raises(PassFailedException, match="placed on snowflake in the IR, but cannot run there: .*cropped"):
        NNPreparePass().apply(None, module)
