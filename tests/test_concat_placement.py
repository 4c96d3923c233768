"""Channel concats by placement (issue 36 item 2, C17 §5.1 step 2): a device concat is one DRAM
tensor, each input a channel slice its producer writes in place (whole pixels, the concat's
channels apart) and its readers read in place; no host copy. Exporter-style blocks (onnx.helper):
a DenseNet dense block (chained concats, each read by the next layer's pre-activation BN), a
SqueezeNet / Inception fire module, a YOLO C2f (Split -> convs -> Concat) and an SPPF (max pools
concatenated); each is bit-exact against the golden model on the machine and close to onnxruntime."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from snowir.dialects import nn
from snowir.frontend.onnx_import import import_model
from snowir.passes.pipelines import NNPreparePass
from snowir.segments import slot_of
from tests.onnx_util import GraphBuilder, model, rand, snow_run, tile_level, tile_to_asm

N = helper.make_node


def dense_block(c0: int = 32, growth: int = 16, layers: int = 3, size: int = 12) -> onnx.ModelProto:
    """DenseNet: a stem conv and max pool, then BN-ReLU-conv1x1-BN-ReLU-conv3x3 concatenated to the
    block's input, chained."""
    net = GraphBuilder()
    net.nodes.append(N("MaxPool", [net.conv("x", 16, c0, 3, "stem")], ["pool"], name="pool", kernel_shape=[3, 3],
                       strides=[2, 2], pads=[1] * 4))
    x, c = "pool", c0
    for i in range(layers):
        a = net.bn_relu(x, c, f"l{i}_bn1")
        b = net.conv(a, c, 4 * growth, 1, f"l{i}_conv1", relu=False)
        b = net.bn_relu(b, 4 * growth, f"l{i}_bn2")
        g = net.conv(b, 4 * growth, growth, 3, f"l{i}_conv2", relu=False)
        x = net.concat([x, g], f"l{i}_cat")
        c += growth
    y = net.conv(x, c, 32, 1, "transition")
    return net.model({"x": [1, 16, size, size]}, y, [1, 32, size // 2, size // 2])


def fire(size: int = 12) -> onnx.ModelProto:
    """SqueezeNet's fire module / an Inception module: two convs over one input, concatenated."""
    net = GraphBuilder()
    x = net.conv("x", 16, 32, 3, "stem")
    s = net.conv(x, 32, 16, 1, "squeeze")
    cat = net.concat([net.conv(s, 16, 32, 1, "expand1"), net.conv(s, 16, 32, 3, "expand3")], "cat")
    y = net.conv(cat, 64, 32, 3, "post")
    return net.model({"x": [1, 16, size, size]}, y, [1, 32, size, size])


def c2f(size: int = 10, chunk: bool = False) -> onnx.ModelProto:
    """YOLOv8's C2f: cv1, Split in two, bottleneck convs on the second half, Concat of all, cv2.
    `chunk`: the split as two channel Slices (torch's `chunk` / `x[:, :32]`, `x[:, 32:]`, the
    second with the INT64_MAX end and negative axis exporters write)."""
    net = GraphBuilder()
    x = net.conv("x", 16, 32, 3, "stem")
    a = net.conv(x, 32, 64, 1, "cv1")
    if chunk:
        net.inits |= {"s0": np.array([0], np.int64), "e0": np.array([32], np.int64), "ax": np.array([1], np.int64),
                      "s1": np.array([32], np.int64), "e1": np.array([2**63 - 1], np.int64),
                      "axn": np.array([-3], np.int64)}
        net.nodes += [N("Slice", [a, "s0", "e0", "ax"], ["a0"], name="slice0"),
                      N("Slice", [a, "s1", "e1", "axn"], ["a1"], name="slice1")]
    else:
        net.inits["split"] = np.array([32, 32], np.int64)
        net.nodes.append(N("Split", [a, "split"], ["a0", "a1"], name="split", axis=1))
    m0 = net.conv("a1", 32, 32, 3, "m0")
    m1 = net.conv(m0, 32, 32, 3, "m1")
    cat = net.concat(["a0", "a1", m1], "cat")
    y = net.conv(cat, 96, 32, 1, "cv2")
    return net.model({"x": [1, 16, size, size]}, y, [1, 32, size, size])


def host_partner(size: int = 8) -> onnx.ModelProto:
    """A concat of a device conv's output and a host op's (a Sigmoid): the host writes its slice into
    the concat's tensor before the segment that reads it."""
    net = GraphBuilder()
    x = net.conv("x", 16, 32, 3, "stem")
    a = net.conv(x, 32, 16, 1, "left")
    net.nodes.append(N("Sigmoid", [net.conv(x, 32, 16, 3, "right", relu=False)], ["gate"], name="gate"))
    y = net.conv(net.concat([a, "gate"], "cat"), 32, 16, 3, "post")
    return net.model({"x": [1, 16, size, size]}, y, [1, 16, size, size])


def host_partner_early(size: int = 16) -> onnx.ModelProto:
    """The host writes its slice (a Sigmoid of the first conv) a segment before the device writes
    the concat's other slice at the end of a three-conv branch: the concat's tensor must be live
    from that segment's start, or the branch's tensors are laid over the host's slice (found on
    ShuffleNetV2 exports, whose channel Slice runs on the host: the machine differed from golden)."""
    net = GraphBuilder()
    net.nodes.append(N("Sigmoid", [net.conv("x", 32, 16, 1, "first", relu=False)], ["gate"], name="gate"))
    b = net.conv(net.conv(net.conv("x", 32, 16, 1, "b1"), 16, 16, 3, "b2"), 16, 16, 1, "b3")
    y = net.conv(net.concat(["gate", b], "cat"), 32, 16, 1, "post")
    return net.model({"x": [1, 32, size, size]}, y, [1, 16, size, size])


def residual_partner(size: int = 14) -> onnx.ModelProto:
    """A concat whose second input is a residual conv's (a ResNet-style add fused into the conv's
    write-back): the conv reads its bypass whole and writes its output as the concat's slice."""
    net = GraphBuilder()
    x = net.conv(net.conv("x", 16, 32, 3, "stem"), 32, 256, 3, "x2")
    a = net.conv(x, 256, 64, 1, "a")
    net.nodes.append(N("Add", [net.conv(x, 256, 64, 1, "b", relu=False), a], ["res"], name="res"))
    y = net.conv(net.concat([x, "res"], "cat"), 320, 16, 1, "post")
    return net.model({"x": [1, 16, size, size]}, y, [1, 16, size, size])


def sppf(size: int = 12) -> onnx.ModelProto:
    """YOLO's SPPF: cv1, three chained 5x5 max pools, Concat of the four, cv2."""
    net = GraphBuilder()
    x = net.conv("x", 16, 32, 3, "stem")
    a = net.conv(x, 32, 32, 1, "cv1")
    pools = [a]
    for i in range(3):
        net.nodes.append(N("MaxPool", [pools[-1]], [f"p{i}"], name=f"pool{i}", kernel_shape=[5, 5], pads=[2] * 4))
        pools.append(f"p{i}")
    cat = net.concat(pools, "cat")
    y = net.conv(cat, 128, 32, 1, "cv2")
    return net.model({"x": [1, 16, size, size]}, y, [1, 32, size, size])


def _prepared(m: onnx.ModelProto):
    module = import_model(m)
    NNPreparePass().apply(None, module)
    return module


def _concats(module) -> list[nn.ConcatOp]:
    return [op for op in module.walk() if isinstance(op, nn.ConcatOp)]


def _run(m: onnx.ModelProto, tmp_path: Path, capsys) -> dict:
    path, report = tmp_path / "m.onnx", tmp_path / "r.json"
    onnx.save(m, path)
    assert snow_run([str(path), "--check", "--quiet", "--report", str(report)]) == 0, capsys.readouterr().err
    return json.loads(report.read_text())


DEVICE_PATTERNS = {"dense_block": dense_block, "fire": fire, "c2f": c2f, "c2f_chunk": lambda: c2f(chunk=True), "sppf": sppf, "host_partner": host_partner,
                   "host_partner_early": host_partner_early, "residual_partner": residual_partner}


@pytest.mark.parametrize("pattern", sorted(DEVICE_PATTERNS))
def test_the_concats_run_on_the_device_bit_exact(pattern: str, tmp_path: Path, capsys) -> None:
    m = DEVICE_PATTERNS[pattern]()
    concats = _concats(_prepared(m))
    assert concats and all(op.attributes["place"].data == "snowflake" for op in concats), \
        [op.attributes.get("host_reason") for op in concats]
    r = _run(m, tmp_path, capsys)
    assert r["check"]["golden_bit_exact"] and r["check"]["snr_db"] > 30
    rows = {row["name"]: row for row in r["layers"]}
    assert all(rows[op.attributes["onnx_node"].data]["where"] == "device" for op in concats)
    host = [row for row in r["layers"] if row["where"] == "host"]
    assert all(row["op"] != "concat" for row in host)  # no host copy left
    assert r["total"]["host_ms"] == sum(row["host_ms"] for row in host) and pattern.startswith("host_partner") == bool(host)


@pytest.mark.parametrize("chunk", [False, True])
def test_a_split_imports_as_channel_slices_read_in_place(chunk: bool) -> None:
    module = _prepared(c2f(chunk=chunk))
    slices = [op for op in module.walk() if isinstance(op, nn.ChannelSliceOp)]
    assert [(op.start.value.data, op.size.value.data) for op in slices] == [(0, 32), (32, 32)]
    assert not any(isinstance(op, nn.HostOp) for op in module.walk())
    m0 = next(op for op in module.walk() if op.attributes.get("onnx_node") == nn.StringAttr("m0"))
    slot = slot_of(m0.input)  # the second half of cv1's output, itself the concat's first 64 channels
    assert (slot.first, slot.channels, slot.total) == (32, 32, 96)


def test_the_dense_block_concats_nest_into_one_tensor() -> None:
    module = _prepared(dense_block())
    first, *_, last = _concats(module)
    inner = slot_of(first.results[0])
    assert inner.root is last.results[0] and (inner.first, inner.channels, inner.total) == (0, 48, 80)


def test_the_sppf_pools_read_and_write_slices_of_one_tensor() -> None:
    """Each pool reads its input's channels in place (whole pixels of the concat's 128 channels) and
    writes its own slice; the tile IR records both (pool_shape's cin_total / c_base, channels)."""
    from snowir.passes.convert.nn_to_tile import NNToTilePass
    from snowir.tile.placement import output_channels, regions_of
    from snowir.dialects import tile

    module = _prepared(sppf())
    NNToTilePass().apply(None, module)
    pools = {op.sym_name.data: op for op in module.ops if isinstance(op, tile.LayerOp) and op.kind.data.value == "maxpool"}
    shapes = {name: (op.shape.values()["cin_total"], op.shape.values()["c_base"]) for name, op in pools.items()}
    assert shapes == {"pool0": (128, 0), "pool1": (128, 32), "pool2": (128, 64)}
    assert [output_channels(regions_of(pools[n])["output"]) for n in sorted(pools)] == [(32, 32, 128), (64, 32, 128),
                                                                                        (96, 32, 128)]


def _lowered_tile(tmp_path: Path) -> str:
    return tile_level(fire(), tmp_path)


def test_two_producers_writing_one_channel_range_are_refused(tmp_path: Path, capsys) -> None:
    text = _lowered_tile(tmp_path)
    assert "channels = array<i64: 32, 32, 64>" in text
    code, err = tile_to_asm(text.replace("channels = array<i64: 32, 32, 64>", "channels = array<i64: 16, 32, 64>"),
                             tmp_path, capsys)
    assert code != 0 and len(err.strip().splitlines()) == 1
    assert "writes channels [16, 48) of tensor @cat, which layer @expand1 writes too ([0, 32))" in err


def test_an_edited_slice_the_graph_disagrees_with_is_refused(tmp_path: Path, capsys) -> None:
    """Swapping the two slices keeps them disjoint, but the reader and the host find each result where
    the graph's concat puts it: refused in one line, naming the layer and what to edit instead."""
    text = _lowered_tile(tmp_path)
    swapped = text.replace("channels = array<i64: 0, 32, 64>", "@@").replace(
        "channels = array<i64: 32, 32, 64>", "channels = array<i64: 0, 32, 64>").replace("@@", "channels = array<i64: 32, 32, 64>")
    code, err = tile_to_asm(swapped, tmp_path, capsys)
    assert code != 0 and len(err.strip().splitlines()) == 1
    assert "layer @expand1: tile.dram_region @expand1.output: channels [32, 32, 64] where the graph places its " \
           "output at [0, 32, 64]" in err
    code, err = tile_to_asm(text, tmp_path, capsys)
    assert code == 0, err


def test_one_program_per_layer_reads_and_writes_the_slices(tmp_path: Path, capsys) -> None:
    """whole-model=false (each layer its own DRAM): the host gives a layer reading a concat's first
    channels the tensor assembled from the slices so far, and reads each producer's slice back."""
    path, report = tmp_path / "m.onnx", tmp_path / "r.json"
    onnx.save(dense_block(), path)
    assert snow_run([str(path), "--check", "--quiet", "--report", str(report),
                     "--pipeline", "snowflake-lower{whole-model=false}"]) == 0, capsys.readouterr().err
    r = json.loads(report.read_text())
    assert r["check"]["golden_bit_exact"] and r["total"]["host_ms"] == 0


@pytest.mark.parametrize("opset, axis, attrs, inputs, device", [
    (13, 1, {}, ["x", "sizes"], True),             # sizes as an input
    (11, 1, {"split": [16, 48]}, ["x"], True),     # sizes as an attribute
    (18, 1, {"num_outputs": 2}, ["x"], True),      # equal parts: 32, 32
    (13, 2, {}, ["x", "rows"], False),             # off the channel axis: the host's
])
def test_a_split_maps_to_channel_slices_on_the_channel_axis_only(opset: int, axis: int, attrs: dict, inputs: list[str],
                                                                 device: bool) -> None:
    nodes = [N("Split", inputs, ["a", "b"], name="split", axis=axis, **attrs)]
    inits = {"sizes": np.array([16, 48], np.int64), "rows": np.array([4, 4], np.int64)}
    m = model(nodes, {"x": [1, 64, 8, 8]}, {"a": None, "b": None}, {k: inits[k] for k in inputs[1:]}, opset=opset)
    module = import_model(m)
    slices = [op for op in module.walk() if isinstance(op, nn.ChannelSliceOp)]
    hosts = [op for op in module.walk() if isinstance(op, nn.HostOp)]
    assert bool(slices) == device and bool(hosts) != device
    if device:
        want = [(0, 16), (16, 48)] if "num_outputs" not in attrs else [(0, 32), (32, 32)]
        assert [(op.start.value.data, op.size.value.data) for op in slices] == want


@pytest.mark.parametrize("starts,ends,axes,steps,crop", [([0, 0], [1, 6], [0, 2], None, True),
                                                         ([2], [8], [-1], None, True), ([0], [64], [1], [2], False),
                                                         ([1], [2], [0], None, False)])
def test_a_slice_of_pixels_or_a_strided_one_is_no_channel_slice(starts, ends, axes, steps, crop) -> None:
    """Only a contiguous run of channels over every pixel is a channel slice; a window of rows or
    columns is a crop (tests/test_crop.py); a strided slice (fold-focus's input) or a slice of the
    batch stays ONNX's Slice on the host."""
    inits = {"s": np.array(starts, np.int64), "e": np.array(ends, np.int64), "a": np.array(axes, np.int64)}
    if steps:
        inits["st"] = np.array(steps, np.int64)
    node = N("Slice", ["x", "s", "e", "a", *(["st"] if steps else [])], ["y"], name="slice")
    module = import_model(model([node], {"x": [1, 64, 8, 8]}, {"y": None}, inits))
    assert [op.op_type.data for op in module.walk() if isinstance(op, nn.HostOp)] == ([] if crop else ["Slice"])
    assert any(isinstance(op, nn.CropOp) for op in module.walk()) == crop
    assert not any(isinstance(op, nn.ChannelSliceOp) for op in module.walk())
