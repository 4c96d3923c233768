"""Quantized ONNX models (onnxruntime's quantize_dynamic, and quantize_static in the QDQ and
QOperator forms) import as the float convs and dense layers they stand for
(snowir/frontend/onnx_dequantize.py): on the device, bit-exact against the golden model, close to
onnxruntime running the model as shipped."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from snowir.dialects import nn
from snowir.frontend.onnx_dequantize import dequantize, dequantize_dynamic, dequantize_qdq
from snowir.frontend.onnx_import import import_model
from tests.onnx_util import model, rand, snow_run

N = helper.make_node


def float_net() -> onnx.ModelProto:
    nodes = [N("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4, name="conv1"), N("Relu", ["c1"], ["r1"], name="relu1"),
             N("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1] * 4, strides=[2, 2], name="conv2"),
             N("Relu", ["c2"], ["r2"], name="relu2"), N("Flatten", ["r2"], ["f"], name="flat"),
             N("Gemm", ["f", "wf", "bf"], ["y"], transB=1, name="fc")]
    inits = {"w1": rand(16, 3, 3, 3, seed=1, scale=0.3), "b1": rand(16, seed=2, scale=0.1),
             "w2": rand(32, 16, 3, 3, seed=3, scale=0.1), "b2": rand(32, seed=4, scale=0.1),
             "wf": rand(10, 32 * 4 * 4, seed=5, scale=0.05), "bf": rand(10, seed=6, scale=0.1)}
    return model(nodes, {"x": [1, 3, 8, 8]}, {"y": [1, 10]}, inits)


@pytest.fixture(scope="module")
def quantized(tmp_path_factory) -> Path:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    d = tmp_path_factory.mktemp("dq")
    onnx.save(float_net(), d / "float.onnx")
    quantize_dynamic(str(d / "float.onnx"), str(d / "dq.onnx"), weight_type=QuantType.QUInt8)
    return d / "dq.onnx"


def old_style(reader_of_the_sum: bool = False, per_channel: bool = False,
              bias_shape: tuple[int, ...] = (1, 8, 1, 1)) -> onnx.ModelProto:
    """One conv as older onnxruntime exports wrote it (ddddocr 1.6.1's common_old.onnx): the bias
    quantized at run time by the input's scale and added to the integer sums before the Cast;
    `per_channel` weight scales (shaped to broadcast over the sums' channels) and zero points.
    `reader_of_the_sum`: the integer sum is a model output too, so the chain must stay. `bias_shape`:
    what the run-time bias is reshaped to (not one value per channel: the chain must stay)."""
    rng = np.random.default_rng(7)
    w_q = rng.integers(0, 255, (8, 4, 3, 3)).astype(np.uint8)
    scale = np.linspace(0.002, 0.004, 8).astype(np.float32).reshape(8, 1, 1) if per_channel else np.float32(0.003)
    inits = {"w_q": w_q, "w_zp": np.full(8, 128, np.uint8) if per_channel else np.uint8(128), "w_scale": scale,
             "b": rand(8, seed=8, scale=0.2), "shape": np.array(bias_shape, np.int64)}
    nodes = [N("DynamicQuantizeLinear", ["x"], ["x_q", "x_scale", "x_zp"], name="dql"),
             N("Mul", ["x_scale", "w_scale"], ["b_scale"], name="b_scale"),
             N("Div", ["b", "b_scale"], ["b_div"], name="b_div"), N("Floor", ["b_div"], ["b_floor"], name="b_floor"),
             N("Cast", ["b_floor"], ["b_q"], to=TensorProto.INT32, name="b_cast"),
             N("Reshape", ["b_q", "shape"], ["b_r"], name="b_reshape"),
             N("ConvInteger", ["x_q", "w_q", "x_zp", "w_zp"], ["s"], pads=[1] * 4, name="conv_quant"),
             N("Add", ["s", "b_r"], ["s_b"], name="bias_add"),
             N("Cast", ["s_b"], ["s_f"], to=TensorProto.FLOAT, name="cast"),
             N("Mul", ["x_scale", "w_scale"], ["scale"], name="scales"),
             N("Mul", ["s_f", "scale"], ["y"], name="out_scale")]
    outs = {"y": [1, 8, 6, 6]}
    g = helper.make_graph(nodes, "old", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                          [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in outs.items()],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    if reader_of_the_sum:
        g.output.append(helper.make_tensor_value_info("s", TensorProto.INT32, [1, 8, 6, 6]))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def _ops(module) -> list[str]:
    return [op.op_type.data if isinstance(op, nn.HostOp) else op.name for op in module.walk()
            if op.name.startswith("nn.") and not isinstance(op, nn.ConstantOp)]


def test_a_quantize_dynamic_model_imports_as_float_convs_and_runs_on_the_device(quantized: Path, tmp_path: Path,
                                                                                 capsys) -> None:
    m = onnx.load(quantized)
    assert {"ConvInteger", "MatMulInteger", "DynamicQuantizeLinear"} <= {n.op_type for n in m.graph.node}
    ops = _ops(import_model(m))
    assert ops.count("nn.conv2d") == 2 and not any(o in ops for o in ("ConvInteger", "MatMulInteger",
                                                                        "DynamicQuantizeLinear", "Cast", "Mul"))
    report = tmp_path / "r.json"
    assert snow_run([str(quantized), "--check", "--quiet", "--report", str(report)]) == 0, capsys.readouterr().err
    r = json.loads(report.read_text())
    assert r["check"]["golden_bit_exact"] is True and r["check"]["snr_db"] > 30  # against the quantized model
    assert r["total"]["host_ms"] == 0 and [row["where"] for row in r["layers"] if row["macs"]] == ["device"] * 3


def test_the_older_runtime_bias_form_and_per_channel_scales_dequantize_exactly() -> None:
    m = old_style(per_channel=True)
    (conv,) = [n for n in dequantize_dynamic(m).graph.node]
    assert conv.op_type == "Conv" and list(conv.output) == ["y"]
    weights = {i.name: numpy_helper.to_array(i) for i in dequantize_dynamic(m).graph.initializer}
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    want = (inits["w_q"].astype(np.float32) - 128) * inits["w_scale"].reshape(8, 1, 1, 1)
    np.testing.assert_array_equal(weights[conv.input[1]], want)
    np.testing.assert_array_equal(weights[conv.input[2]], inits["b"])


def test_the_older_form_runs_on_the_device_close_to_onnxruntime(tmp_path: Path, capsys) -> None:
    path, report = tmp_path / "old.onnx", tmp_path / "r.json"
    onnx.save(old_style(), path)
    assert snow_run([str(path), "--check", "--quiet", "--report", str(report)]) == 0, capsys.readouterr().err
    r = json.loads(report.read_text())
    assert r["check"]["golden_bit_exact"] is True and r["check"]["snr_db"] > 30
    assert [row["where"] for row in r["layers"] if row["macs"]] == ["device"]


def test_a_chain_whose_integer_sum_is_read_elsewhere_stays_as_shipped() -> None:
    m = old_style(reader_of_the_sum=True)
    assert dequantize_dynamic(m) is m


def test_a_bias_added_along_another_axis_is_not_taken_for_the_convs() -> None:
    """Reshaped to (1, 1, 1, 8) the run-time bias adds along W, not the channels: no float Conv's bias
    says that, so the chain stays as shipped."""
    m = old_style(bias_shape=(1, 1, 1, 8))
    assert dequantize_dynamic(m) is m


def residual_net() -> onnx.ModelProto:
    """Two convs, the first's ReLU output added back, a global average pool: what the static
    quantizer fuses (Conv + Relu) and, in QOperator form, writes as com.microsoft ops."""
    nodes = [N("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4, name="conv1"), N("Relu", ["c1"], ["r1"], name="relu1"),
             N("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1] * 4, name="conv2"), N("Add", ["c2", "r1"], ["s"], name="add"),
             N("GlobalAveragePool", ["s"], ["y"], name="gap")]
    inits = {"w1": rand(8, 3, 3, 3, seed=1, scale=0.3), "b1": rand(8, seed=2, scale=0.1),
             "w2": rand(8, 8, 3, 3, seed=3, scale=0.1), "b2": rand(8, seed=4, scale=0.1)}
    return model(nodes, {"x": [1, 3, 8, 8]}, {"y": [1, 8, 1, 1]}, inits)


def softmax_net() -> onnx.ModelProto:
    """float_net with a Softmax: --check compares its logits, which the quantized model rounds to
    8 bits (QDQ) or holds in 8 bits (QOperator's QLinearSoftmax) before it."""
    m = float_net()
    m.graph.output[0].name = "p"
    m.graph.node.append(N("Softmax", ["y"], ["p"], axis=1, name="softmax"))
    return m


@pytest.fixture(scope="module")
def static(tmp_path_factory):
    """quantize_static's output for (net, form), calibrated on four random inputs."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.inputs = iter([{"x": rand(1, 3, 8, 8, seed=s)} for s in range(4)])

        def get_next(self):
            return next(self.inputs, None)

    d, made = tmp_path_factory.mktemp("static"), {}

    def get(net: str, form: str) -> Path:
        if (net, form) not in made:
            onnx.save({"plain": float_net, "residual": residual_net, "softmax": softmax_net}[net](), d / f"{net}.onnx")
            made[net, form] = d / f"{net}_{form}.onnx"
            quantize_static(str(d / f"{net}.onnx"), str(made[net, form]), Reader(), per_channel=form == "QDQ",
                            quant_format=getattr(QuantFormat, form))
        return made[net, form]
    return get


STATIC_OPS = ("QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "QGemm", "QLinearAdd",
              "QLinearGlobalAveragePool")


@pytest.mark.parametrize("net,form,shipped", [("plain", "QDQ", "QuantizeLinear"), ("plain", "QOperator", "QLinearConv"),
                                              ("residual", "QDQ", "QuantizeLinear"),
                                              ("residual", "QOperator", "QLinearAdd"),
                                              ("softmax", "QDQ", "QuantizeLinear"),
                                              ("softmax", "QOperator", "QLinearSoftmax")])
def test_a_quantize_static_model_imports_as_float_convs_and_runs_on_the_device(static, net: str, form: str,
                                                                              shipped: str, tmp_path: Path,
                                                                              capsys) -> None:
    path = static(net, form)
    assert shipped in {n.op_type for n in onnx.load(path).graph.node}
    ops = _ops(import_model(onnx.load(path)))
    assert ops.count("nn.conv2d") == 2 and not any(o in ops for o in STATIC_OPS), ops
    assert ops.count("nn.relu") == (1 if net == "residual" else 2)  # the ReLUs the quantizer folded into its clamps
    report = tmp_path / "r.json"
    assert snow_run([str(path), "--check", "--quiet", "--report", str(report)]) == 0, capsys.readouterr().err
    r = json.loads(report.read_text())
    assert r["check"]["golden_bit_exact"] is True and r["check"]["snr_db"] > 25  # against the quantized model
    assert r["total"]["host_ms"] < 0.01  # (a softmax's)
    # (the float model's global average pool of 8x8 runs on the host too)
    assert [row["where"] for row in r["layers"] if row["macs"] and not row["name"].startswith(("gap", "conv1.unfold",
                                                                                              "conv1_quant.unfold"))] \
        == ["device"] * (2 if net == "residual" else 3)


def _pair_model(zero: np.ndarray, dq_scale: float = 0.05, output_too: bool = False) -> onnx.ModelProto:
    """x -> QuantizeLinear -> DequantizeLinear -> y, the dequantize's scale `dq_scale` (the
    quantize's is 0.05); `output_too`: the 8-bit tensor is a model output as well."""
    nodes = [N("QuantizeLinear", ["x", "s", "zp"], ["q"], name="q"), N("DequantizeLinear", ["q", "s2", "zp"], ["y"], name="dq")]
    g = helper.make_graph(nodes, "pair", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                          [numpy_helper.from_array(v, k) for k, v in
                           {"s": np.float32(0.05), "s2": np.float32(dq_scale), "zp": zero}.items()])
    if output_too:
        g.output.append(helper.make_tensor_value_info("q", helper.np_dtype_to_tensor_dtype(zero.dtype), [1, 4]))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def test_a_pair_clamping_at_zero_is_a_relu_and_others_drop() -> None:
    for zero in (np.uint8(0), np.int8(-128)):
        (relu,) = dequantize_qdq(_pair_model(zero)).graph.node
        assert relu.op_type == "Relu" and list(relu.output) == ["y"]  # the model output keeps its name
    (same,) = dequantize_qdq(_pair_model(np.int8(0))).graph.node
    assert same.op_type == "Identity" and list(same.input) == ["x"]


def test_pairs_that_do_not_match_stay_as_shipped() -> None:
    for m in (_pair_model(np.int8(0), dq_scale=0.1), _pair_model(np.int8(0), output_too=True)):
        assert dequantize_qdq(m) is m


def test_a_dequantized_constant_folds_per_axis() -> None:
    w_q = np.arange(-12, 12, dtype=np.int8).reshape(2, 3, 4)
    scale, zero = np.array([0.1, 0.2, 0.3], np.float32), np.array([1, 0, -1], np.int8)
    nodes = [N("DequantizeLinear", ["w_q", "w_s", "w_zp"], ["w"], axis=1), N("Add", ["x", "w"], ["y"])]
    g = helper.make_graph(nodes, "fold", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])],
                          [numpy_helper.from_array(v, k) for k, v in {"w_q": w_q, "w_s": scale, "w_zp": zero}.items()])
    out = dequantize_qdq(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
    (w,) = [numpy_helper.to_array(i) for i in out.graph.initializer if i.name == "w"]
    np.testing.assert_allclose(w, (w_q - zero.reshape(1, 3, 1)) * scale.reshape(1, 3, 1), rtol=1e-6)
    assert [n.op_type for n in out.graph.node] == ["Add"]


def test_a_qlinearconv_whose_weights_are_an_input_stays_and_the_rest_still_runs(static) -> None:
    import onnxruntime as ort

    m = onnx.load(static("plain", "QOperator"))
    (w,) = [i for i in m.graph.initializer if i.name == "w1_quantized"]
    m.graph.initializer.remove(w)
    m.graph.input.append(helper.make_tensor_value_info(w.name, w.data_type, list(w.dims)))
    out = dequantize(m)
    assert [n.op_type for n in out.graph.node].count("QLinearConv") == 1
    assert "Conv" in {n.op_type for n in out.graph.node} and "QGemm" not in {n.op_type for n in out.graph.node}
    feeds = {"x": rand(1, 3, 8, 8, seed=9), w.name: numpy_helper.to_array(w)}
    shipped, ours = (ort.InferenceSession(x.SerializeToString()).run(None, feeds)[0] for x in (m, out))
    assert np.abs(ours - shipped).max() < 0.1 * np.abs(shipped).max()  # 8-bit rounding only
