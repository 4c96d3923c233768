"""SE blocks (issue 36 item 6), as MobileNetV3 / PP-LCNet / CUNet exporters write them:
GlobalAveragePool -> 1x1 conv -> ReLU -> 1x1 conv -> Sigmoid (or HardSigmoid) -> Mul(x, gate).
The 1x1 convs run on the device; the sigmoid on the host (no write-back activation unit); the
gate multiply becomes a 1x1 depthwise conv whose kernels are the gate (se-gate), the host
writing the gate's words, packed, into the layer's weights region before its segment runs.
Bit-exact against the golden model with whole-model programs and with one program per layer;
a gate a device layer writes stays on the host with its reason."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from snowir.dialects import nn
from snowir.nn_util import const_of
from snowir.tile.build import RUNTIME_KERNELS
from tests.onnx_util import GraphBuilder, ort_run, snow_run
from tests.test_concat_placement import N, _prepared


def se_block(c: int = 32, size: int = 20, gate: str = "Sigmoid", constant: bool = False) -> onnx.ModelProto:
    """A conv, an SE block over its output (squeeze to c/4) and a 1x1 projection. `gate`: the
    activation making the gate ("" for none: the second 1x1 conv's output is the gate);
    `constant`: the gate an initializer instead (the Mul a per-channel scale, folded to a conv)."""
    net = GraphBuilder()
    y = net.conv(net.conv("x", 16, c, 3, "stem"), c, c, 3, "body")
    if constant:
        net.inits["gate"] = np.random.default_rng(0).uniform(0.2, 0.9, (1, c, 1, 1)).astype(np.float32)
    else:
        net.nodes.append(N("GlobalAveragePool", [y], ["gap"], name="gap"))
        s = net.conv(net.conv("gap", c, max(8, c // 4), 1, "fc1"), max(8, c // 4), c, 1, "fc2", relu=False)
        if gate:
            attrs = {"alpha": 1 / 6, "beta": 0.5} if gate == "HardSigmoid" else {}
            net.nodes.append(N(gate, [s], ["gate"], name="gate", **attrs))
        else:
            net.nodes.append(N("Identity", [s], ["gate"], name="gate"))
    net.nodes.append(N("Mul", [y, "gate"], ["scaled"], name="scale"))
    return net.model({"x": [1, 16, size, size]}, net.conv("scaled", c, c, 1, "proj"), [1, c, size, size])


def _node(module, name: str):
    return next(op for op in module.walk() if op.attributes.get("onnx_node") == nn.StringAttr(name))


def _run(m: onnx.ModelProto, tmp_path: Path, capsys, *extra: str) -> dict:
    path, report = tmp_path / "m.onnx", tmp_path / "r.json"
    onnx.save(m, path)
    assert snow_run([str(path), "--check", "--quiet", "--report", str(report), *extra]) == 0, capsys.readouterr().err
    r = json.loads(report.read_text())
    assert r["check"]["golden_bit_exact"] and r["check"]["snr_db"] > 30
    return r


@pytest.mark.parametrize("gate, c, pipeline", [("Sigmoid", 32, ""), ("HardSigmoid", 40, ""),
                                               ("Sigmoid", 40, "snowflake-lower{whole-model=false}")])
def test_the_gate_multiply_runs_on_the_device(gate: str, c: int, pipeline: str, tmp_path: Path, capsys) -> None:
    """40 channels: two full 16-lane groups and a partial one."""
    m = se_block(c, gate=gate)
    module = _prepared(m)
    scale = _node(module, "scale")
    assert isinstance(scale, nn.Conv2dOp) and RUNTIME_KERNELS in scale.attributes
    assert scale.attributes["place"].data == "snowflake" and "placement_cost" in scale.attributes
    assert not isinstance(scale.weight.owner, nn.ConstantOp)
    assert all(_node(module, n).attributes["place"].data == "snowflake" for n in ("fc1", "fc2", "body", "proj"))
    r = _run(m, tmp_path, capsys, *(["--pipeline", pipeline] if pipeline else []))
    rows = {row["name"]: row["where"] for row in r["layers"]}
    assert rows["scale"] == rows["fc1"] == rows["fc2"] == "device" and rows["gate"] == "host"
    assert {row["name"] for row in r["layers"] if row["where"] == "host"} == {"gap", "gate"}


def test_the_gate_conv_matches_onnxruntime(tmp_path: Path) -> None:
    """The golden model (the machine's words) against onnxruntime's float SE block."""
    from snowir.backend import SnowflakeBackend

    m = se_block(32, 12)
    x = np.random.default_rng(5).standard_normal((1, 16, 12, 12)).astype(np.float32)
    (y,) = SnowflakeBackend.prepare(m, engine="golden").run([x])
    want = ort_run(m, x)
    snr = 10 * np.log10(np.sum(want ** 2) / np.sum((y - want) ** 2))
    assert snr > 35, snr


def test_a_gate_a_device_layer_writes_is_written_as_kernels_between_segments(tmp_path: Path, capsys) -> None:
    """No activation between the second 1x1 conv and the Mul: the gate is a device conv's output.
    Loaded as kernels in its own segment it would be read before it is written, so the kernels'
    reshape is the host's: the segment ends after the gate, the host writes its C words as the
    Mul conv's kernels, the next segment runs the conv; bit-exact (once the Mul stayed on the host)."""
    m = se_block(gate="")
    module = _prepared(m)
    scale = _node(module, "scale")
    assert isinstance(scale, nn.Conv2dOp) and RUNTIME_KERNELS in scale.attributes
    assert scale.attributes["place"].data == "snowflake" and scale.weight.owner.attributes["place"].data == "host"
    r = _run(m, tmp_path, capsys)
    rows = {row["name"]: row["where"] for row in r["layers"]}
    assert rows["scale"] == rows["fc2"] == "device" and rows["scale.kernels"] == "host", rows


def test_a_constant_per_channel_scale_is_no_gate() -> None:
    """The same Mul by an initializer: fold-batch-norm's 1x1 depthwise conv, constant kernels."""
    scale = _node(_prepared(se_block(constant=True)), "scale")
    assert isinstance(scale, nn.Conv2dOp) and RUNTIME_KERNELS not in scale.attributes
    assert scale.attributes["place"].data == "snowflake"


def test_the_gate_conv_takes_the_gate_format_with_calibration(tmp_path: Path, capsys) -> None:
    """--format auto: the conv's kernels are in the format chosen for the gate tensor (no weight
    format of its own: calibration once failed on it with a KeyError), bit-exact."""
    cal = tmp_path / "cal.npy"
    np.save(cal, np.random.default_rng(0).standard_normal((3, 1, 16, 20, 20)).astype(np.float32))
    _run(se_block(), tmp_path, capsys, "--format", "auto", "--calibration", str(cal))


ACT_UNIT = str(Path(__file__).resolve().parent / "filecheck" / "Inputs" / "act_unit.json")


@pytest.mark.parametrize("gate", ["Sigmoid", "HardSigmoid"])
def test_with_the_activation_unit_the_gate_is_computed_on_the_device(gate: str, tmp_path: Path, capsys) -> None:
    """With the write-back activation unit the gate's activation goes into the second 1x1 conv
    (no sigmoid on the host); the Mul is still a device conv whose kernels are the gate: the host
    writes the gate's C words, which that conv computed, as the kernels between segments (the
    kernels' reshape is the host's, with its reason). Bit-exact. (Once the gate, a device conv's
    output, left the Mul on the host: H x W x C products.)"""
    from snowir.passes.pipelines import NNPreparePass
    from snowir.frontend.onnx_import import import_model

    m = se_block(32, gate=gate)
    module = import_model(m)
    NNPreparePass(hw=ACT_UNIT).apply(None, module)
    scale = _node(module, "scale")
    assert isinstance(scale, nn.Conv2dOp) and RUNTIME_KERNELS in scale.attributes
    assert scale.attributes["place"].data == "snowflake"
    kernels = scale.weight.owner
    assert kernels.attributes["place"].data == "host" and "a gate a device layer computed" in \
        kernels.attributes["host_reason"].data
    assert "act" in _node(module, "fc2").attributes
    assert not [op for op in module.walk() if isinstance(op, nn.HostOp) or isinstance(op, nn.HardSigmoidOp)]
    r = _run(m, tmp_path, capsys, "--hw", ACT_UNIT)
    rows = {row["name"]: row["where"] for row in r["layers"]}
    assert rows["scale"] == rows["fc2"] == "device", rows
    assert {row["name"] for row in r["layers"] if row["where"] == "host"} == {"gap", "scale.kernels"}


def test_a_pool_too_big_for_one_kernel_runs_its_row_means_on_the_device(tmp_path: Path, capsys) -> None:
    """An SE block over 32 x 24 x 64 (PP-OCRv4's detector pools 96 x 40 x 120): one 24 x 64 kernel
    per 16 channels does not fit a weights buffer, so the pool is the means of 8 x 8 windows
    (kernels of 1/64) on the device, then their mean; bit-exact, and as close to onnxruntime as
    the others."""
    net = GraphBuilder()
    y = net.conv(net.conv("x", 16, 32, 3, "stem"), 32, 32, 3, "body")
    net.nodes.append(N("GlobalAveragePool", [y], ["gap"], name="gap"))
    s = net.conv(net.conv("gap", 32, 8, 1, "fc1"), 8, 32, 1, "fc2", relu=False)
    net.nodes.append(N("Sigmoid", [s], ["gate"], name="gate"))
    net.nodes.append(N("Mul", [y, "gate"], ["scaled"], name="scale"))
    m = net.model({"x": [1, 16, 24, 64]}, net.conv("scaled", 32, 32, 1, "proj"), [1, 32, 24, 64])
    module = _prepared(m)
    windows = _node(module, "gap.8x8")
    assert isinstance(windows, nn.Conv2dOp) and tuple(windows.weight.type.get_shape()[2:]) == (8, 8)
    assert windows.attributes["place"].data == "snowflake"
    r = _run(m, tmp_path, capsys)
    assert {row["name"]: row["where"] for row in r["layers"]}["gap.8x8"] == "device"


def test_an_exported_mean_over_a_prime_size_is_a_padded_window_pool_on_the_device(tmp_path: Path, capsys) -> None:
    """The squeeze as PyTorch's `x.mean((2, 3))` and onnx-chainer export it (ReduceMean over H and
    W, keepdims 0, then Gemm; waifu2x UpResNet10's SE blocks) imports as a global average pool, not
    a host ReduceMean. Over 67 x 4 (67 a prime) the cheapest windows (17 x 2) reach into zero
    padding at the bottom and weigh gh·gw / (H·W), so the grid's plain mean is the map's; bit-exact
    and as close to onnxruntime as the others."""
    net = GraphBuilder()
    y = net.conv(net.conv("x", 16, 16, 3, "stem"), 16, 16, 3, "body")
    net.op("ReduceMean", [y], "squeeze", axes=[2, 3], keepdims=0)
    g = np.random.default_rng(7)
    net.inits |= {"fc1_w": (0.3 * g.standard_normal((8, 16))).astype(np.float32), "fc1_b": np.zeros(8, np.float32),
                  "fc2_w": (0.3 * g.standard_normal((16, 8))).astype(np.float32), "fc2_b": np.zeros(16, np.float32),
                  "shape": np.array([1, 16, 1, 1], np.int64)}
    net.op("Relu", [net.op("Gemm", ["squeeze", "fc1_w", "fc1_b"], "fc1", transB=1)], "fc1_relu")
    net.op("Sigmoid", [net.op("Gemm", ["fc1_relu", "fc2_w", "fc2_b"], "fc2", transB=1)], "gate_flat")
    net.op("Reshape", ["gate_flat", "shape"], "gate")
    net.op("Mul", [y, "gate"], "scaled")
    m = net.model({"x": [1, 16, 67, 4]}, net.conv("scaled", 16, 16, 1, "proj"), [1, 16, 67, 4])
    module = _prepared(m)
    assert [op.attributes["onnx_node"].data for op in module.walk() if isinstance(op, nn.HostOp)] == ["gate_flat"]
    windows = next(op for op in module.walk() if isinstance(op, nn.Conv2dOp)
                   and op.attributes.get("onnx_node", nn.StringAttr("")).data.startswith("squeeze."))
    (fh, fw), (gh, gw) = windows.weight.type.get_shape()[2:], windows.output.type.get_shape()[2:]
    assert (gh * fh > 67 or gw * fw > 4) and nn.int_values(windows.pads) == (0, 0, gh * fh - 67, gw * fw - 4)
    frac = windows.weight.type.get_element_type().frac_bits.data  # quantized (and block-diagonal: zeros)
    assert set(np.unique(const_of(windows.weight))) == {0, round(gh * gw / (67 * 4) * 2 ** frac)}
    assert windows.attributes["place"].data == "snowflake"
    r = _run(m, tmp_path, capsys)
    where = {row["name"]: row["where"] for row in r["layers"]}
    assert where[windows.attributes["onnx_node"].data] == "device"
    assert "squeeze" not in {row["name"] for row in r["layers"] if row["where"] == "host" and row["op"].startswith("host:")}


@pytest.mark.parametrize("unit", [False, True])
def test_a_residual_add_after_the_gate_is_the_gate_convs_bypass(unit: bool, tmp_path: Path, capsys) -> None:
    """waifu2x's ResBlock: body * gate + the block's input. add-to-bypass makes the add an identity
    conv (the Mul is no conv yet); se-gate then gives the gate conv the other operand as its bypass,
    so the gated result is not read and written once more: no `from_add` conv is left, one device
    layer fewer, bit-exact (a grouped conv with a bypass: tests/test_grouped_bypass.py)."""
    net = GraphBuilder()
    stem = net.conv("x", 16, 32, 3, "stem")
    y = net.conv(net.conv(stem, 32, 32, 3, "body1"), 32, 32, 3, "body2", relu=False)
    net.op("GlobalAveragePool", [y], "gap")
    s = net.conv(net.conv("gap", 32, 8, 1, "fc1"), 8, 32, 1, "fc2", relu=False)
    net.op("Sigmoid", [s], "gate")
    net.op("Add", [net.op("Mul", [y, "gate"], "scale"), stem], "res")
    m = net.model({"x": [1, 16, 20, 20]}, net.conv("res", 32, 16, 1, "proj"), [1, 16, 20, 20])
    extra = ("--hw", ACT_UNIT) if unit else ()
    module = _prepared(m) if not unit else None
    if module is not None:
        gate = _node(module, "scale")
        assert RUNTIME_KERNELS in gate.attributes and gate.bypass is not None
        assert not [op for op in module.walk() if "from_add" in op.attributes]
    r = _run(m, tmp_path, capsys, *extra)
    rows = {row["name"]: row for row in r["layers"]}
    assert rows["scale"]["where"] == "device" and "res" not in rows, sorted(rows)
