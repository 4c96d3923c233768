"""SE blocks (issue 36 item 6), as MobileNetV3 / PP-LCNet / CUNet exporters write them:
GlobalAveragePool -> 1x1 conv -> ReLU -> 1x1 conv -> Sigmoid (or HardSigmoid) -> Mul(x, gate).
The 1x1 convs run on the device (measured: on the host the block is slower end to end); the
global pool stays where the depthwise rule puts it; the gate multiply, a per-channel scale computed
at run time, stays on the host with its reason (`partition_host.GATE_REASON`: the device's
multiplier reads kernels from a weights region packed at compile time), while the same Mul by a
constant scale is a 1x1 depthwise conv on the device. Bit-exact against the golden model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from snowir.dialects import nn
from snowir.passes.nn.partition_host import GATE_REASON
from tests.onnx_util import snow_run
from tests.test_concat_placement import N, _Net, _prepared


def se_block(c: int = 32, size: int = 20, gate: str = "Sigmoid", constant: bool = False) -> onnx.ModelProto:
    """A conv, an SE block over its output (squeeze to c/4) and a 1x1 projection; `constant`: the
    gate an initializer instead (the Mul is then a per-channel scale, folded to a conv)."""
    net = _Net()
    y = net.conv(net.conv("x", 16, c, 3, "stem"), c, c, 3, "body")
    if constant:
        net.inits["gate"] = np.random.default_rng(0).uniform(0.2, 0.9, (1, c, 1, 1)).astype(np.float32)
    else:
        net.nodes.append(N("GlobalAveragePool", [y], ["gap"], name="gap"))
        s = net.conv(net.conv("gap", c, c // 4, 1, "fc1"), c // 4, c, 1, "fc2", relu=False)
        attrs = {"alpha": 1 / 6, "beta": 0.5} if gate == "HardSigmoid" else {}
        net.nodes.append(N(gate, [s], ["gate"], name="gate", **attrs))
    net.nodes.append(N("Mul", [y, "gate"], ["scaled"], name="scale"))
    return net.model([1, 16, size, size], net.conv("scaled", c, c, 1, "proj"), [1, c, size, size])


def _node(module, name: str):
    return next(op for op in module.walk() if op.attributes.get("onnx_node") == nn.StringAttr(name))


@pytest.mark.parametrize("gate", ["Sigmoid", "HardSigmoid"])
def test_the_gate_multiply_stays_on_the_host_with_its_reason(gate: str, tmp_path: Path, capsys) -> None:
    m = se_block(gate=gate)
    module = _prepared(m)
    scale = _node(module, "scale")
    assert isinstance(scale, nn.MulOp) and scale.attributes["place"].data == "host"
    assert scale.attributes["host_reason"].data == GATE_REASON
    assert all(_node(module, n).attributes["place"].data == "snowflake" for n in ("fc1", "fc2", "body", "proj"))
    path, report = tmp_path / "m.onnx", tmp_path / "r.json"
    onnx.save(m, path)
    assert snow_run([str(path), "--check", "--quiet", "--report", str(report)]) == 0, capsys.readouterr().err
    r = json.loads(report.read_text())
    assert r["check"]["golden_bit_exact"] and r["check"]["snr_db"] > 30
    rows = {row["name"]: row["where"] for row in r["layers"]}
    assert rows["scale"] == "host" and rows["fc1"] == rows["fc2"] == "device"


def test_a_constant_per_channel_scale_is_no_gate(tmp_path: Path, capsys) -> None:
    """The same Mul by an initializer: fold-batch-norm's 1x1 depthwise conv, on the device between
    two device convs (the reason above is for run-time gates only)."""
    module = _prepared(se_block(constant=True))
    scale = _node(module, "scale")
    assert isinstance(scale, nn.Conv2dOp) and scale.attributes["place"].data == "snowflake"
    assert not any(op.attributes.get("host_reason") == nn.StringAttr(GATE_REASON) for op in module.walk())
