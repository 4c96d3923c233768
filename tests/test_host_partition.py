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
    # the one at position -1 and the one at 9 fall outside: 13 land
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1])
    op = _host_node(node, {"x": [1, 8, 5, 5]}, {"y": [1, 16, 9, 9]}, {"w": rand(8, 16, 3, 3)})
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
