"""Honest host estimates and partitioning (issue 28 item 7): every host node's MACs by op type
from the ONNX formulas, and add-to-bypass putting an add of host-produced tensors on the device
as an identity conv with bypass when the cost model (DRAM round trip included) says it pays."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from snowir.dialects import nn
from snowir.frontend.onnx_import import import_model
from snowir.host_model import host_bytes, host_ms, useful_macs
from snowir.passes.pipelines import NNPreparePass
from snowir.tools.snow_run import main as snow_run
from tests.onnx_util import model, rand


def _host_node(node: onnx.NodeProto, inputs: dict, outputs: dict, inits: dict) -> nn.HostOp:
    module = import_model(model([node], inputs, outputs, inits))
    return next(op for op in module.walk() if isinstance(op, nn.HostOp))


def test_conv_transpose_counts_the_taps_that_land_in_the_output() -> None:
    # 8 -> 16 channels, 3x3, stride 2, pads 1, 5x5 -> 9x9: per axis, of 5 x 3 (input, tap) pairs
    # the one at position -1 and the one at 9 fall outside: 13 land (weights computed at run time:
    # a constant-weight ConvTranspose is a device conv, conv-transpose-to-conv)
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1])
    op = _host_node(node, {"x": [1, 8, 5, 5], "w": [8, 16, 3, 3]}, {"y": [1, 16, 9, 9]}, {})
    assert useful_macs(op) == 8 * 16 * 13 * 13
    assert host_bytes(op) == 4 * (8 * 25 + 8 * 16 * 9 + 16 * 81)


def test_a_1d_conv_on_the_host_counts_the_taps_inside_the_input() -> None:
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1])
    op = _host_node(node, {"x": [1, 4, 10]}, {"y": [1, 6, 10]}, {"w": rand(6, 4, 3)})
    assert useful_macs(op) == 6 * 4 * (10 * 3 - 2)  # the first and last outputs miss one tap each


def test_matmul_and_gemm_count_output_times_k() -> None:
    matmul = helper.make_node("MatMul", ["a", "b"], ["y"])  # computed B: an attention product
    op = _host_node(matmul, {"a": [2, 6, 5], "b": [2, 5, 7]}, {"y": [2, 6, 7]}, {})
    assert useful_macs(op) == 2 * 6 * 7 * 5
    gemm = helper.make_node("Gemm", ["a", "b"], ["y"], transA=1)
    op = _host_node(gemm, {"a": [5, 6], "b": [5, 7]}, {"y": [6, 7]}, {})
    assert useful_macs(op) == 6 * 7 * 5


@pytest.mark.parametrize("kind, gates", [("LSTM", 4), ("GRU", 3), ("RNN", 1)])
def test_recurrent_cells_count_gates_times_input_and_hidden(kind: str, gates: int) -> None:
    t, b, i, h, d = 7, 1, 12, 10, 2
    node = helper.make_node(kind, ["x", "w", "r"], ["y"], hidden_size=h, direction="bidirectional")
    op = _host_node(node, {"x": [t, b, i]}, {"y": [t, d, b, h]},
                    {"w": rand(d, gates * h, i), "r": rand(d, gates * h, h, seed=1)})
    assert useful_macs(op) == d * t * b * gates * h * (i + h)
    # R is streamed again at every step: the bytes grow with the sequence
    assert host_bytes(op) == 4 * (t * b * i + d * gates * h * i + d * gates * h * h * t + t * d * b * h)


@pytest.mark.parametrize("mode, taps", [("nearest", 0), ("linear", 4), ("cubic", 16)])
def test_resize_counts_interpolation_taps(mode: str, taps: int) -> None:
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode)
    op = _host_node(node, {"x": [1, 4, 6, 6]}, {"y": [1, 4, 12, 12]}, {"scales": np.array([1, 1, 2, 2], np.float32)})
    assert useful_macs(op) == 4 * 12 * 12 * taps
    assert host_ms(op) > 0


def test_a_sigmoid_costs_more_than_an_add() -> None:
    sig = _host_node(helper.make_node("Sigmoid", ["x"], ["y"]), {"x": [1, 4096]}, {"y": [1, 4096]}, {})
    div = _host_node(helper.make_node("Div", ["x", "z"], ["y"]), {"x": [1, 4096], "z": [1, 4096]}, {"y": [1, 4096]}, {})
    assert useful_macs(sig) == 0
    from snowir.host_model import host_ops
    assert host_ops(sig) == 10 * 4096 and host_ops(div) == 4 * 4096


C, HW = 32, 32


def silu_sum(channels: int = C, size: int = HW) -> onnx.ModelProto:
    """conv -> SiLU (Sigmoid, Mul: host) twice -> Add of the two host results -> conv: the adds of
    a YOLO's C3 blocks, whose operands no conv produces."""
    nodes, inits = [], {}
    for i in range(2):
        nodes += [helper.make_node("Conv", ["x", f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]),
                  helper.make_node("Sigmoid", [f"c{i}"], [f"s{i}"], name=f"sig{i}"),
                  helper.make_node("Mul", [f"c{i}", f"s{i}"], [f"m{i}"], name=f"silu{i}")]
        inits |= {f"w{i}": rand(channels, channels, 3, 3, seed=i, scale=0.1), f"b{i}": rand(channels, seed=9 + i, scale=0.1)}
    nodes += [helper.make_node("Add", ["m0", "m1"], ["a"], name="sum"),
              helper.make_node("Conv", ["a", "w2", "b2"], ["y"], name="conv2")]
    inits |= {"w2": rand(channels, channels, 1, 1, seed=5, scale=0.1), "b2": rand(channels, seed=6, scale=0.1)}
    return model(nodes, {"x": [1, channels, size, size]}, {"y": [1, channels, size, size]}, inits)


def _prepared(m: onnx.ModelProto):
    module = import_model(m)
    NNPreparePass().apply(None, module)
    return module


def _by_node(module, name: str):
    return next(op for op in module.walk() if op.attributes.get("onnx_node") == nn.StringAttr(name))


def test_an_add_of_host_results_runs_on_the_device_when_it_pays() -> None:
    module = _prepared(silu_sum())
    add = _by_node(module, "sum")
    assert isinstance(add, nn.Conv2dOp) and "from_add" in add.attributes and add.bypass is not None
    assert add.attributes["place"].data == "snowflake" and add.groups.value.data == 1
    cost = add.attributes["placement_cost"].data
    device, trip, host = (float(part.split()[-2]) for part in cost.replace(" vs ", " + ").split(" + "))
    assert device + trip < host
    assert useful_macs(add) == C * HW * HW  # one useful MAC an output: the identity's


def test_a_tiny_add_stays_on_the_host_with_its_costs_in_the_ir() -> None:
    # 16 channels of 2x2: the conv's fixed start-up costs more than the host's 64 adds
    add = _by_node(_prepared(silu_sum(16, 2)), "sum")
    assert isinstance(add, nn.AddOp) and add.attributes["place"].data == "host"
    assert "vs host" in add.attributes["placement_cost"].data


def test_the_user_placement_is_honoured_or_refused() -> None:
    from xdsl.utils.exceptions import PassFailedException

    module = import_model(silu_sum())
    next(op for op in module.walk() if isinstance(op, nn.AddOp)).attributes["place"] = nn.StringAttr("host")
    NNPreparePass().apply(None, module)
    assert isinstance(_by_node(module, "sum"), nn.AddOp) and _by_node(module, "sum").attributes["place"].data == "host"
    conv = _by_node(module, "conv2")
    conv.attributes["place"] = nn.StringAttr("host")
    NNPreparePass().apply(None, module)
    assert _by_node(module, "conv2").attributes["place"].data == "host"
    module = import_model(silu_sum())
    next(op for op in module.walk() if isinstance(op, nn.MulOp)).attributes["place"] = nn.StringAttr("snowflake")
    with pytest.raises(PassFailedException, match="placed on snowflake in the IR, but cannot run there"):
        NNPreparePass().apply(None, module)


def test_the_moved_add_is_bit_exact_and_close_to_onnxruntime(tmp_path: Path, capsys) -> None:
    path, report = tmp_path / "m.onnx", tmp_path / "r.json"
    onnx.save(silu_sum(), path)
    assert snow_run([str(path), "--check", "--quiet", "--report", str(report)]) == 0, capsys.readouterr().err
    r = json.loads(report.read_text())
    assert r["check"]["golden_bit_exact"] and r["check"]["snr_db"] > 35
    row = next(layer for layer in r["layers"] if layer["name"] == "sum")
    assert row["where"] == "device" and row["op"] == "add" and row["macs"] == C * HW * HW and row["cycles"] > 0


def _cost(op) -> tuple[float, float, float]:
    """(device, round trip, host) ms of an op's `placement_cost`."""
    text = op.attributes["placement_cost"].data
    device, trip, host = (float(part.split()[-2]) for part in text.replace(" vs ", " + ").split(" + "))
    return device, trip, host


def scaled(channels: int, size: int, between: str = "host") -> onnx.ModelProto:
    """A Mul by a per-channel constant (fold-batch-norm: a depthwise 1x1 conv) between two host
    Sigmoids, or between a max pool and a conv (`between="device"`: a conv before it would
    absorb the scale)."""
    n = helper.make_node
    shape = [1, channels, size, size]
    inits = {"k": rand(1, channels, 1, 1, seed=3)}
    if between == "host":
        nodes = [n("Sigmoid", ["x"], ["a"], name="before"), n("Mul", ["a", "k"], ["m"], name="scale"),
                 n("Sigmoid", ["m"], ["y"], name="after")]
    else:
        nodes = [n("MaxPool", ["x"], ["a"], name="before", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                 n("Mul", ["a", "k"], ["m"], name="scale"), n("Conv", ["m", "w"], ["y"], name="after")]
        inits["w"] = rand(channels, channels, 1, 1, seed=4, scale=0.2)
    return model(nodes, {"x": shape}, {"y": shape}, inits)


def test_a_mul_by_a_constant_between_host_ops_stays_for_the_round_trip() -> None:
    # 16 channels of 3x3: the device alone would be faster than the host, not with the input
    # written for it and the output read back
    op = _by_node(_prepared(scaled(16, 3)), "scale")
    assert isinstance(op, nn.Conv2dOp) and op.groups.value.data == 16 and op.attributes["place"].data == "host"
    device, trip, host = _cost(op)
    assert device < host <= device + trip
    # between device layers there is no round trip: the same mul moves
    op = _by_node(_prepared(scaled(16, 3, between="device")), "scale")
    assert op.attributes["place"].data == "snowflake" and "block_diagonal" in op.attributes
    device, trip, host = _cost(op)
    assert trip == 0 and device < host


def test_a_larger_mul_between_host_ops_moves_and_is_bit_exact(tmp_path: Path, capsys) -> None:
    op = _by_node(_prepared(scaled(32, 8)), "scale")
    assert op.attributes["place"].data == "snowflake" and op.groups.value.data == 2
    device, trip, host = _cost(op)
    assert trip > 0 and device + trip < host
    path, report = tmp_path / "m.onnx", tmp_path / "r.json"
    onnx.save(scaled(32, 8), path)
    assert snow_run([str(path), "--check", "--quiet", "--report", str(report)]) == 0, capsys.readouterr().err
    r = json.loads(report.read_text())
    assert r["check"]["golden_bit_exact"]
    row = next(layer for layer in r["layers"] if layer["name"] == "scale")
    assert row["where"] == "device" and row["cycles"] > 0


def test_the_depthwise_estimate_counts_issue_not_only_macs(tmp_path: Path, capsys) -> None:
    # a 3x3 depthwise conv in 16-lane groups is a trace per tap and its ADDI pair (3 issue slots
    # for 1 MAC cycle): the estimate placement compares must be near the machine's cycles, not
    # the MAC count's ~3x below (written as its 16-lane groups: depthwise-to-grouped prefers
    # 16-channel slices for this one)
    from snowir.tile.lowerable import planned_conv
    from snowir.hw import SnowflakeConfig
    from snowir.plan.issue import issue_cycles
    from snowir.plan.layout import block_diagonal

    n = helper.make_node
    nodes = [n("Conv", ["x", "w0"], ["a"], name="expand"),
             n("Conv", ["a", "w1"], ["d"], name="dw", group=6, pads=[1, 1, 1, 1]),
             n("Conv", ["d", "w2"], ["y"], name="project")]
    inits = {"w0": rand(96, 96, 1, 1, scale=0.1), "w1": block_diagonal(rand(96, 1, 3, 3, seed=1, scale=0.3), 16),
             "w2": rand(96, 96, 1, 1, seed=2, scale=0.1)}
    m = model(nodes, {"x": [1, 96, 16, 16]}, {"y": [1, 96, 16, 16]}, inits)
    dw = _by_node(_prepared(m), "dw")
    hw = SnowflakeConfig()
    plan = planned_conv(dw, hw)
    assert issue_cycles(plan, hw) > 2 * plan.estimated_cycles(hw)
    path, report = tmp_path / "m.onnx", tmp_path / "r.json"
    onnx.save(m, path)
    assert snow_run([str(path), "--quiet", "--report", str(report)]) == 0, capsys.readouterr().err
    row = next(layer for layer in json.loads(report.read_text())["layers"] if layer["name"] == "dw")
    assert row["where"] == "device" and abs(row["cycles"] / issue_cycles(plan, hw) - 1) < 0.15


def concat_net(channels: int = 16, size: int = 8, reader: str = "Conv") -> onnx.ModelProto:
    """A concat of host tensors (a host ReLU's output and the model input) read by a conv, or (reader
    "Sigmoid") by a host layer (a concat a device layer feeds: tests/test_concat_placement.py)."""
    n = helper.make_node
    mix = n("Conv", ["c", "w2"], ["y"], name="mix") if reader == "Conv" else n(reader, ["c"], ["y"], name="mix")
    nodes = [n("Relu", ["x"], ["a"], name="left"), n("Concat", ["a", "x"], ["c"], name="cat", axis=1), mix]
    inits = {"w2": rand(channels, 2 * channels, 1, 1, seed=2, scale=0.2)} if reader == "Conv" else {}
    out = [1, channels if reader == "Conv" else 2 * channels, size, size]
    return model(nodes, {"x": [1, channels, size, size]}, {"y": out}, inits)


def test_a_channel_concat_only_host_layers_read_is_the_hosts_copy_with_its_time_estimated(tmp_path: Path,
                                                                                            capsys) -> None:
    cat = _by_node(_prepared(concat_net(reader="Sigmoid")), "cat")
    assert cat.attributes["place"].data == "host" and "copies" in cat.attributes["host_reason"].data
    words = 2 * (2 * 16 * 8 * 8)  # read both inputs, write the output, 16-bit words
    assert host_bytes(cat) == 2 * words and host_ms(cat) == pytest.approx(2 * words / 1e6)
    path, report = tmp_path / "m.onnx", tmp_path / "r.json"
    onnx.save(concat_net(reader="Sigmoid"), path)
    assert snow_run([str(path), "--check", "--quiet", "--report", str(report)]) == 0, capsys.readouterr().err
    r = json.loads(report.read_text())
    row = next(layer for layer in r["layers"] if layer["name"] == "cat")
    assert r["check"]["golden_bit_exact"] and row["where"] == "host" and row["host_ms"] == pytest.approx(host_ms(cat))
    assert r["total"]["host_ms"] >= row["host_ms"]


def test_a_channel_concat_of_host_tensors_a_conv_reads_is_written_in_place_by_the_host(tmp_path: Path,
                                                                                         capsys) -> None:
    """Every input a host tensor (PicoDet's concats of host HardSwish outputs on the stock machine)
    but a device conv reading the result: the concat is placed, the host writes each input in its
    slice of the one DRAM tensor as it writes it for the device anyway, and no host copy is left."""
    cat = _by_node(_prepared(concat_net()), "cat")
    assert cat.attributes["place"].data == "snowflake"
    path, report = tmp_path / "m.onnx", tmp_path / "r.json"
    onnx.save(concat_net(), path)
    assert snow_run([str(path), "--check", "--quiet", "--report", str(report)]) == 0, capsys.readouterr().err
    r = json.loads(report.read_text())
    rows = {layer["name"]: layer for layer in r["layers"]}
    assert r["check"]["golden_bit_exact"] and rows["cat"]["where"] == "device"
    assert r["total"]["host_ms"] == pytest.approx(rows["left"]["host_ms"])  # the ReLU's own time alone
    assert sum(t["bytes"] for t in r["round_trips"] if t["direction"] == "to_device") == 2 * 2 * 16 * 8 * 8


def test_a_concat_placed_on_the_device_is_refused() -> None:
    from xdsl.utils.exceptions import PassFailedException

    module = import_model(concat_net(reader="Sigmoid"))
    next(op for op in module.walk() if isinstance(op, nn.ConcatOp)).attributes["place"] = nn.StringAttr("snowflake")
    with pytest.raises(PassFailedException, match="cannot run there: channel concat"):
        NNPreparePass().apply(None, module)


@pytest.mark.parametrize("include_pad,place", [(0, "host"), (1, "snowflake")])
def test_an_average_pool_excluding_padding_stays_on_the_host_and_says_why(include_pad: int, place: str) -> None:
    """Inception's branch pool (3x3, stride 1, pad 1, count_include_pad = 0): a border window
    divides by 6 or 4, the interior by 9, which one conv's weights cannot give; with the padding
    counted it is a conv (avgpool-to-conv) on the device."""
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                            count_include_pad=include_pad, name="pool")
    module = import_model(model([node], {"x": [1, 32, 14, 14]}, {"y": [1, 32, 14, 14]}))
    NNPreparePass().apply(None, module)
    (op,) = [op for op in module.walk() if getattr(op.attributes.get("onnx_node"), "data", None) == "pool"
             and not isinstance(op, nn.ConstantOp)]
    assert op.attributes["place"].data == place
    if place == "host":
        assert "count_include_pad = 0" in op.attributes["host_reason"].data
