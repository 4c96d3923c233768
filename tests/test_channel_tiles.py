"""
A depthwise conv's input stored channel-tile-major (NCHW[16]c, `channel_tiles`; issue 36 item 5,
issue 38's first activation layout): its writer — a 1x1 producer in one layer, its 16-kernel tiles
writing a block each through the write-back's address steps, or a host activation — and the
depthwise slices reading their blocks whole. Exporter-style mobile blocks, bit-exact against the
golden model on both engines; the form against the producer split into one conv per block (the
old form) and the gathered slices; refusals (K not whole blocks, an INDP conv, edits the graph
disagrees with) in one line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from snowir.dialects import nn, tile
from snowir.driver.model_api import compile as compile_model
from snowir.frontend.onnx_import import import_model
from snowir.hw import SnowflakeConfig
from snowir.passes.nn import depthwise_to_grouped
from snowir.passes.nn.fuse_relu import FuseReluPass
from snowir.passes.pipelines import NNPreparePass
from snowir.plan.shapes import LoweringError
from snowir.segments import CHANNEL_TILES, slot_of
from snowir.tile.lowerable import planned_conv
from snowir.tile.placement import region_tiles, regions_of
from tests.onnx_util import model, rand, run_checked, tile_level, tile_to_asm
from tests.test_channel_blocks import mobile_block

N = helper.make_node
NO_TILES = (float("inf"), float("inf"))


@pytest.fixture(autouse=True)
def _slices_not_one_layer_over_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests pin the slice forms: one grouped layer over the blocks, which depthwise-to-grouped
    prefers by cost wherever a writer stores the blocks, is tests/test_depthwise_blocks.py's."""
    from snowir.passes.nn import depthwise_to_grouped

    monkeypatch.setattr(depthwise_to_grouped, "_over_blocks_cycles", lambda *_: (0.0, float("inf")))


def _layers(result) -> dict[str, dict]:
    return {row.name: row for row in result.report.layers}


def _cycles(layers: dict, prefix: str) -> int:
    return sum(v.cycles or 0 for k, v in layers.items() if k == prefix or k.startswith(f"{prefix}."))


_run = run_checked  # compiled and run, bit-exact with the golden model asserted


def _tiled(module) -> list[nn.Conv2dOp]:
    return [op for op in module.walk() if CHANNEL_TILES in op.attributes]


def lcnet_block(c: int, h: int, stride: int = 1) -> onnx.ModelProto:
    """PP-LCNet's C -> C 1x1 then a 5x5 depthwise (pad 2), ReLUs, a 1x1 after."""
    return mobile_block(c, c, h, stride, kernel=5, dw_scale=0.15)


@pytest.mark.parametrize("engine", ["fast", "reference"])
@pytest.mark.parametrize("h, stride", [(14, 1), (14, 2)])
def test_an_expanding_1x1_writes_the_blocks_in_one_layer(h: int, stride: int, engine: str) -> None:
    """16 -> 48 1x1, 48-channel 3x3 depthwise (stride 1 and 2), 48 -> 48 1x1: the 1x1 is one
    layer writing its output channel-tile-major (its output region's `channel_tiles` [16, 0, 3]),
    each depthwise slice reads its block (its maps region's [16, g, 3], no gather); bit-exact."""
    compiled, result = _run(mobile_block(16, 48, h, stride), engine)
    assert [op.attributes["onnx_node"].data for op in _tiled(compiled.module)] == ["expand"]
    layers = _layers(result)
    assert "expand" in layers and "expand.0" not in layers
    assert {"dw.0", "dw.1", "dw.2"} <= set(layers) and all(layers[f"dw.{g}"].where == "device" for g in range(3))


@pytest.mark.parametrize("stride", [1, 2])
def test_the_tile_ir_records_the_layout_once_on_each_region(tmp_path: Path, stride: int) -> None:
    from snowir.passes.convert.nn_to_tile import NNToTilePass

    module = import_model(mobile_block(16, 48, 14, stride))
    NNPreparePass().apply(None, module)
    NNToTilePass().apply(None, module)
    layers = {op.sym_name.data: op for op in module.ops if isinstance(op, tile.LayerOp)}
    assert region_tiles(regions_of(layers["expand"])["output"]) == (16, 0, 3)
    assert [region_tiles(regions_of(layers[f"dw.{g}"])["maps"]) for g in range(3)] == [(16, g, 3) for g in range(3)]
    assert all(layers[f"dw.{g}"].gather is None for g in range(3))
    assert regions_of(layers["expand"])["output"].size.value.data == 2 * 14 * 14 * 48
    assert layers["expand"].mode.data == tile.ComputeMode.COOP


@pytest.mark.parametrize("h, stride", [(14, 1), (28, 2)])
def test_one_producer_beats_one_conv_per_block(h: int, stride: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same block with the producer split into one conv per block (the form before): every
    block re-reads the producer's input and starts a layer; the one producer does neither. The
    slices read their blocks alike. Measured: 14² 4,994 -> 4,357 producer cycles, 28²/2 11,030 ->
    10,284; the depthwise slices 7,115 -> 7,089 and 7,977 -> 7,977 (since first_slot, issue 38, the
    per-block convs after the first load their kernels early: 4,591 -> 4,413 and 10,854 -> 10,340)."""
    m = mobile_block(16, 48, h, stride)
    _, tiled = _run(m)
    monkeypatch.setattr(depthwise_to_grouped, "_tiled_cycles", lambda *a: NO_TILES)
    compiled, split = _run(m)
    assert not _tiled(compiled.module) and "expand.2" in _layers(split)
    a, b = _layers(tiled), _layers(split)
    assert _cycles(a, "expand") < 0.97 * _cycles(b, "expand"), (_cycles(a, "expand"), _cycles(b, "expand"))
    # (the slices after the per-block convs start a few cycles sooner since first_slot: 6,032 / 6,055)
    assert _cycles(a, "dw") <= 1.01 * _cycles(b, "dw"), (_cycles(a, "dw"), _cycles(b, "dw"))


def test_a_c_to_c_producer_before_a_5x5_depthwise(monkeypatch: pytest.MonkeyPatch) -> None:
    """PP-LCNet's shape (C -> C 1x1, 5x5 depthwise), where splitting the producer into blocks did not
    pay (each block re-reads all C input channels): the one producer writes the blocks and the
    slices no longer gather; bit-exact, and the depthwise conv faster than its gathered slices
    (measured 28² x 64: 28,744 -> 25,402 cycles)."""
    m = lcnet_block(64, 28)
    compiled, tiled = _run(m)
    assert [op.attributes["onnx_node"].data for op in _tiled(compiled.module)] == ["expand"]
    monkeypatch.setattr(depthwise_to_grouped, "_tiled_writer", lambda op: None)
    compiled, flat = _run(m)
    assert not _tiled(compiled.module)
    a, b = _layers(tiled), _layers(flat)
    assert _cycles(a, "dw") < 0.95 * _cycles(b, "dw"), (_cycles(a, "dw"), _cycles(b, "dw"))
    assert _cycles(a, "expand") <= _cycles(b, "expand") * 1.01


def grouped_block(c: int = 64, h: int = 14, groups: int = 2, cin: int = 32) -> onnx.ModelProto:
    """A grouped 1x1 (2 groups of 16 -> 32: whole kernel tiles a group), a 3x3 depthwise, a 1x1."""
    nodes = [N("Conv", ["x", "w0", "b0"], ["c0"], name="expand", group=groups), N("Relu", ["c0"], ["r0"]),
             N("Conv", ["r0", "w1", "b1"], ["c1"], name="dw", pads=[1] * 4, group=c),
             N("Relu", ["c1"], ["r1"]), N("Conv", ["r1", "w2", "b2"], ["y"], name="project")]
    inits = {"w0": rand(c, cin // groups, 1, 1, scale=0.2), "b0": rand(c, seed=1, scale=0.1),
             "w1": rand(c, 1, 3, 3, seed=2, scale=0.3), "b1": rand(c, seed=3, scale=0.1),
             "w2": rand(c, c, 1, 1, seed=4, scale=0.3 / c ** 0.5), "b2": rand(c, seed=5, scale=0.1)}
    return model(nodes, {"x": [1, cin, h, h]}, {"y": [1, c, h, h]}, inits)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_grouped_producer_writes_the_blocks(engine: str) -> None:
    """A grouped COOP producer (its tiles run group by group, tile t still 16 channels from 16t):
    each tile's output is one block too; bit-exact."""
    compiled, result = _run(grouped_block(), engine)
    (writer,) = _tiled(compiled.module)
    assert writer.groups.value.data == 2 and "expand" in _layers(result)


@pytest.mark.parametrize("h", [48])
def test_blocks_past_addi_s_reach(h: int) -> None:
    """At 48² a block is 73,728 bytes, past ADDI's 17-bit immediate: the tile step goes through a
    scratch register; bit-exact."""
    compiled, result = _run(mobile_block(16, 32, h))
    assert [op.attributes["onnx_node"].data for op in _tiled(compiled.module)] == ["expand"]
    assert 2 * h * h * 16 >= 1 << 16


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_c_to_c_producer_before_a_5x5_depthwise_is_bit_exact(engine: str) -> None:
    """The same at 14² x 32 on both engines: the producer's two blocks, the 5x5 slices over them."""
    compiled, result = _run(lcnet_block(32, 14), engine)
    assert [op.attributes["onnx_node"].data for op in _tiled(compiled.module)] == ["expand"]
    assert {"expand", "dw.0", "dw.1"} <= set(_layers(result))


def hardswish_block(c: int, h: int) -> onnx.ModelProto:
    """1x1, HardSwish (the host's without the write-back unit), 3x3 depthwise, 1x1."""
    nodes = [N("Conv", ["x", "w0", "b0"], ["c0"], name="expand"), N("HardSwish", ["c0"], ["r0"], name="act"),
             N("Conv", ["r0", "w1", "b1"], ["c1"], name="dw", pads=[1] * 4, group=c),
             N("Relu", ["c1"], ["r1"]), N("Conv", ["r1", "w2", "b2"], ["y"], name="project")]
    inits = {"w0": rand(c, 16, 1, 1, scale=0.5 / 4), "b0": rand(c, seed=1, scale=0.1),
             "w1": rand(c, 1, 3, 3, seed=2, scale=0.3), "b1": rand(c, seed=3, scale=0.1),
             "w2": rand(c, c, 1, 1, seed=4, scale=0.3 / c ** 0.5), "b2": rand(c, seed=5, scale=0.1)}
    return model(nodes, {"x": [1, 16, h, h]}, {"y": [1, c, h, h]}, inits, opset=14)


def test_a_host_activation_writes_the_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A HardSwish between the producer and the depthwise conv runs on the host: the host writes its
    result channel-tile-major as it writes any tensor, and the slices read their blocks whole (no
    gather): bit-exact, the depthwise conv faster than its gathered slices."""
    m = hardswish_block(48, 14)
    compiled, tiled = _run(m)
    (writer,) = _tiled(compiled.module)
    assert isinstance(writer, nn.HardSwishOp) and writer.attributes["place"].data == "host"
    monkeypatch.setattr(depthwise_to_grouped, "_tiled_writer", lambda op: None)
    _, flat = _run(m)
    a, b = _layers(tiled), _layers(flat)
    assert _cycles(a, "dw") < 0.95 * _cycles(b, "dw"), (_cycles(a, "dw"), _cycles(b, "dw"))


def test_with_the_write_back_unit_the_conv_takes_the_layout(tmp_path: Path) -> None:
    """With the write-back activation unit, fuse-activation folds the HardSwish into the 1x1 and
    hands it the layout (the conv writes it no slower): one device layer writes the blocks."""
    hw = tmp_path / "unit.json"
    hw.write_text('{"writeback_activation": 1}')
    m = hardswish_block(48, 14)
    compiled = compile_model(m, hw=SnowflakeConfig.load(str(hw)))
    (writer,) = _tiled(compiled.module)
    assert isinstance(writer, nn.Conv2dOp) and "act" in writer.attributes and writer.attributes["place"].data == "snowflake"
    result = compiled.run(rand(1, 16, 14, 14, seed=7), check=True)
    assert result.report.check.golden_bit_exact


def test_one_program_per_layer_reads_and_writes_the_blocks(tmp_path: Path) -> None:
    """whole-model=false (each layer its own DRAM): the runner reads the producer's blocks back from
    its output region and writes the whole channel-tile-major tensor as each slice's input."""
    import json

    from tests.onnx_util import snow_run

    path, report = tmp_path / "m.onnx", tmp_path / "r.json"
    onnx.save(mobile_block(16, 48, 14), path)
    assert snow_run([str(path), "--check", "--quiet", "--report", str(report),
                     "--pipeline", "snowflake-lower{whole-model=false}"]) == 0
    r = json.loads(report.read_text())
    assert r["check"]["golden_bit_exact"] and {"expand", "dw.0", "dw.2"} <= {row["name"] for row in r["layers"]}


def test_channels_not_whole_blocks_keep_the_other_forms() -> None:
    """40 channels (two blocks and a half): one conv cannot write a last partial block, so the form
    is not priced (inf); a conv told to write such a layout anyway is refused in one line by the
    planner, which partition-host would report as its host reason."""
    module = import_model(mobile_block(16, 40, 14))
    FuseReluPass().apply(None, module)
    dw = next(op for op in module.walk() if isinstance(op, nn.Conv2dOp) and op.groups.value.data == 40)
    w = depthwise_to_grouped.const_of(dw.weight)
    assert depthwise_to_grouped._tiled_cycles(SnowflakeConfig(), dw, w, dw.input.owner) == NO_TILES
    producer = dw.input.owner
    producer.attributes[CHANNEL_TILES] = nn.IntegerAttr(16, 64)
    with pytest.raises(LoweringError, match="its 40 channels are not whole 16-channel blocks"):
        planned_conv(producer, SnowflakeConfig())
    del producer.attributes[CHANNEL_TILES]
    NNPreparePass().apply(None, module)
    assert not _tiled(module)
    assert any("channel_block" in op.attributes for op in module.walk())  # one conv per block, the last of 8


def test_an_indp_conv_cannot_write_the_blocks() -> None:
    """INDP writes a vMAC's 16 kernels 16 words apart, 64 a tile: a channel-tile-major output runs
    COOP (nn-to-tile{mode=INDP} refuses it in one line)."""
    from snowir.tile.build import tiled_mode

    module = import_model(mobile_block(16, 48, 14))
    producer = next(op for op in module.walk() if isinstance(op, nn.Conv2dOp))
    producer.attributes[CHANNEL_TILES] = nn.IntegerAttr(16, 64)
    assert slot_of(producer.output).blocks == (16, 0, 3)
    assert tiled_mode(producer, None) == "COOP"
    with pytest.raises(LoweringError, match="mode INDP refused"):
        tiled_mode(producer, "INDP")


def test_edits_of_the_layout_the_graph_disagrees_with_are_refused(tmp_path: Path, capsys) -> None:
    """After allocate-dram: the producer's `channel_tiles` removed, or a slice's block moved, each
    disagrees with where the graph places the tensor: tile-to-asm refuses in one line naming what to
    edit instead; unedited, it lowers."""
    text = tile_level(mobile_block(16, 48, 14), tmp_path)
    out, block1 = "channel_tiles = array<i64: 16, 0, 3>, tensor = \"expand.output\"", "channel_tiles = array<i64: 16, 1, 3>"
    assert text.count(out) == 2 and block1 in text  # the producer's output and slice 0's maps
    code, err = tile_to_asm(text, tmp_path, capsys)
    assert code == 0, err
    first = text.index(out)
    edited = text[:first] + "tensor = \"expand.output\"" + text[first + len(out):]
    code, err = tile_to_asm(edited, tmp_path, capsys)
    assert code != 0 and len(err.strip().splitlines()) == 1
    assert "layer @expand: tile.dram_region @expand.output: channel_tiles [] where the graph places its output at " \
           "[16, 0, 3]" in err
    code, err = tile_to_asm(text.replace(block1, "channel_tiles = array<i64: 16, 2, 3>"), tmp_path, capsys)
    assert code != 0 and len(err.strip().splitlines()) == 1
    assert "layer @dw.1: tile.dram_region @dw.1.maps: channel_tiles [16, 2, 3] where the graph places the input it " \
           "reads at [16, 1, 3]" in err


def _bare_producer(k: int = 48) -> tile.LayerOp:
    """A 16 -> k 1x1 conv layer at 14² (no graph), its output region grown to a 3-block tensor."""
    from snowir.plan.shapes import ConvShape
    from snowir.tile.build import bare_conv_layer

    s = ConvShape(16, 14, 14, k, 1, 1, 1, 1, 0, 0, 0, 0, True, 14, 1)
    rng = np.random.default_rng(0)
    layer = bare_conv_layer("p", s, rng.integers(-99, 99, (k, 16, 1, 1)).astype(np.int16),
                            rng.integers(-99, 99, k).astype(np.int16), SnowflakeConfig(), "COOP")
    regions_of(layer)["output"].properties["size"] = nn.IntegerAttr(2 * 14 * 14 * 48, 64)
    return layer


@pytest.mark.parametrize("edit, why", [
    ("blocks", "channel_tiles [16, 1, 3]: its 3 blocks from block 1 pass the tensor's 3"),
    ("count", "channel_tiles [16, 0, 3]: a kernel tile of 8 kernels is not one 16-channel block (COOP tiles of 16)"),
    ("indp", "channel_tiles [16, 0, 3]: an INDP conv's vMACs write 16 kernels 16 words apart, 64 a tile: it runs COOP"),
    ("partial", "channel_tiles [16, 0, 3]: its 40 channels are not whole 16-channel blocks"),
    ("pool", "a max pool reads and writes channel-innermost tensors (remove channel_tiles)"),
    ("gathered", "a conv reading a block reads its 16 channels whole, as its input (64 channels, gathered here)"),
])
def test_edits_the_code_cannot_follow_are_refused(edit: str, why: str) -> None:
    """A layout the code cannot follow, whatever the graph says (a layer without one: the checks
    tile-to-asm runs), refused in one line naming the layer, the region and the rule."""
    from snowir.dialects.tile.decisions import CHANNEL_TILES as DECISION
    from snowir.passes.convert.layer_programs import conv_program, pool_program
    from snowir.plan.shapes import ConvShape, PoolShape
    from snowir.tile.build import bare_conv_layer, bare_pool_layer
    from snowir.tile.edit import empty_bodies, set_kernel_count
    from snowir.tile.read import TileError

    hw = SnowflakeConfig()
    layer = _bare_producer(40 if edit == "partial" else 48)
    program, label, value = conv_program, "output", (16, 0, 3)
    if edit == "blocks":
        value = (16, 1, 3)
    elif edit == "count":
        set_kernel_count(layer, 8)
    elif edit == "indp":
        layer.properties["mode"] = tile.ComputeModeAttr(tile.ComputeMode.INDP)
        empty_bodies(layer)
    elif edit == "pool":
        layer, program = bare_pool_layer("p", PoolShape(16, 8, 8, 2, 2, 2, 2, 0, 0, 4, 4), hw), pool_program
    elif edit == "gathered":  # a strided 1x1 over 64 channels gathers its pixels
        s = ConvShape(64, 8, 8, 16, 1, 1, 2, 2, 0, 0, 0, 0, True, 14, 1)
        layer = bare_conv_layer("p", s, np.ones((16, 64, 1, 1), np.int16), np.zeros(16, np.int16), hw)
        label, value = "maps", (16, 0, 1)
    DECISION.write(regions_of(layer)[label], value)
    with pytest.raises(TileError) as e:
        program(layer, hw)
    message = str(e.value)
    assert len(message.splitlines()) == 1 and message.startswith("layer @p: ") and why in message, message


def test_a_block_reader_reads_its_block() -> None:
    """The same 16-channel layer reading block 1 of a 3-block tensor: followed, its maps loads from
    the block's word (14·14·16 words on); channel-innermost, from word 0."""
    from snowir.dialects.tile.decisions import CHANNEL_TILES as DECISION
    from snowir.passes.convert.layer_programs import conv_program
    from snowir.tile.edit import empty_bodies
    from snowir.tile.read import conv_plan_of

    layer = _bare_producer()
    maps = regions_of(layer)["maps"]
    assert conv_plan_of(layer).in_addr == 0
    DECISION.write(maps, (16, 1, 3))
    grow = 2 * 2 * 14 * 14 * 16
    maps.properties["size"] = nn.IntegerAttr(maps.size.value.data + grow, 64)
    for region in regions_of(layer).values():  # the regions above the maps move up past the tensor
        if region is not maps:
            region.properties["offset"] = nn.IntegerAttr(region.offset.value.data + -(-grow // 256) * 256, 64)
    empty_bodies(layer)
    conv_program(layer, SnowflakeConfig())
    assert conv_plan_of(layer).in_addr == 2 * 14 * 14 * 16


def test_the_decision_is_declared_on_output_and_maps_regions() -> None:
    """`channel_tiles` is a declared decision of tile.dram_region: an 'output' or a 'maps' region
    takes it, a 'weights' region does not; a block past the tensor's is refused by its rule."""
    import re

    from xdsl.utils.exceptions import VerifyException

    from snowir.dialects.tile.decisions import CHANNEL_TILES as DECISION

    for label in ("output", "maps"):
        region = tile.DramRegionOp("r", 0, 64, label)
        DECISION.write(region, (16, 1, 3))
        region.verify_()
        assert DECISION.value(region) == (16, 1, 3)
        DECISION.write(region, (16, 3, 3))
        with pytest.raises(VerifyException, match="channel_tiles: " + re.escape(DECISION.rule)):
            region.verify_()
    weights = tile.DramRegionOp("w", 0, 64, "weights")
    DECISION.write(weights, (16, 0, 3))
    with pytest.raises(VerifyException, match="channel_tiles: "):
        weights.verify_()


def test_the_runner_reads_and_writes_the_layout() -> None:
    """The host's view of a channel-tile-major tensor: block g an (H, W, 16) run after block g - 1."""
    from snowir.driver.segment_run import device_order

    x = np.arange(32 * 2 * 3, dtype=np.int16).reshape(32, 2, 3)
    words = device_order(x, 16)
    assert words[:16].tolist() == x[:16, 0, 0].tolist() and words[16:32].tolist() == x[:16, 0, 1].tolist()
    assert words[6 * 16:6 * 16 + 16].tolist() == x[16:, 0, 0].tolist()
    assert np.array_equal(device_order(x), x.transpose(1, 2, 0).ravel())


def test_a_tensor_stored_so_is_no_concat_s_slice() -> None:
    """`channel_tiles` written in @main on a conv a concat reads (a user's edit): its output is not
    whole pixels of the concat's tensor, so partition-host leaves the concat to the host with that
    reason, in one line."""
    nodes = [N("Conv", ["x", "w0", "b0"], ["a"], name="left"), N("Conv", ["x", "w1", "b1"], ["b"], name="right"),
             N("Concat", ["a", "b"], ["c"], name="cat", axis=1), N("Conv", ["c", "w2", "b2"], ["y"], name="mix")]
    inits = {"w0": rand(32, 16, 1, 1, scale=0.1), "b0": rand(32, seed=1, scale=0.1),
             "w1": rand(16, 16, 1, 1, seed=2, scale=0.1), "b1": rand(16, seed=3, scale=0.1),
             "w2": rand(16, 48, 1, 1, seed=4, scale=0.1), "b2": rand(16, seed=5, scale=0.1)}
    module = import_model(model(nodes, {"x": [1, 16, 8, 8]}, {"y": [1, 16, 8, 8]}, inits))
    left = next(op for op in module.walk() if op.attributes.get("onnx_node") == nn.StringAttr("left"))
    left.attributes[CHANNEL_TILES] = nn.IntegerAttr(16, 64)
    NNPreparePass().apply(None, module)
    (cat,) = [op for op in module.walk() if isinstance(op, nn.ConcatOp)]
    reason = cat.attributes["host_reason"].data
    assert cat.attributes["place"].data == "host" and "stored channel-tile-major" in reason and "\n" not in reason
