"""The ONNX frontend: operator coverage against onnxruntime, old opsets, and bad inputs."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from onnx_util import model, ort_run, rand
from snowir.golden import run_golden
from snowir.frontend.onnx_import import OnnxImportError, import_model, import_onnx, parse_input_shape
from snowir.tools.snow_opt import main as snow_opt

X = [1, 4, 8, 8]
N = helper.make_node
W = {"w": rand(6, 4, 3, 3, seed=1), "b": rand(6, seed=2)}
CASES = {
    "conv": ([N("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])], W),
    "conv_stride_no_bias": ([N("Conv", ["x", "w"], ["y"], strides=[2, 2])], {"w": W["w"]}),
    "conv_groups": ([N("Conv", ["x", "g"], ["y"], group=2, pads=[0, 1, 2, 1])], {"g": rand(6, 2, 3, 3, seed=3)}),
    "conv_depthwise_dilated": ([N("Conv", ["x", "d"], ["y"], group=4, dilations=[2, 2])], {"d": rand(4, 1, 3, 3, seed=4)}),
    "conv_same_upper": ([N("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER", strides=[2, 2])], {"w": W["w"]}),
    "relu": ([N("Relu", ["x"], ["y"])], {}),
    "clip": ([N("Clip", ["x", "lo", "hi"], ["y"])], {"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)}),
    "maxpool": ([N("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])], {}),
    "maxpool_ceil": ([N("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)], {}),
    "avgpool": ([N("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])], {}),
    "avgpool_include_pad": ([N("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                              count_include_pad=1)], {}),
    "global_avgpool": ([N("GlobalAveragePool", ["x"], ["y"])], {}),
    "gemm": ([N("Flatten", ["x"], ["f"]), N("Gemm", ["f", "gw", "gb"], ["y"], transB=1, alpha=0.5, beta=2.0)],
             {"gw": rand(5, 256, seed=5), "gb": rand(5, seed=6)}),
    "gemm_not_transposed": ([N("Flatten", ["x"], ["f"]), N("Gemm", ["f", "gw"], ["y"])], {"gw": rand(256, 5, seed=7)}),
    "matmul_add": ([N("Flatten", ["x"], ["f"]), N("MatMul", ["f", "mw"], ["m"]), N("Add", ["m", "mb"], ["y"])],
                   {"mw": rand(256, 7, seed=8), "mb": rand(7, seed=9)}),
    "add_sum_mul": ([N("Relu", ["x"], ["r"]), N("Add", ["x", "r"], ["a"]), N("Sum", ["a", "r", "x"], ["s"]),
                     N("Mul", ["s", "c"], ["y"])], {"c": rand(4, 1, 1, seed=10)}),
    "batchnorm": ([N("BatchNormalization", ["x", "s", "bb", "m", "v"], ["y"], epsilon=1e-3)],
                  {"s": rand(4, seed=11), "bb": rand(4, seed=12), "m": rand(4, seed=13), "v": np.abs(rand(4, seed=14)) + 0.5}),
    "concat": ([N("Relu", ["x"], ["r"]), N("Concat", ["x", "r"], ["y"], axis=1)], {}),
    "flatten_reshape": ([N("Flatten", ["x"], ["f"], axis=2), N("Reshape", ["f", "shape"], ["y"])],
                        {"shape": np.array([0, -1, 16], np.int64)}),
    "transpose": ([N("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1])], {}),
    "unsqueeze_squeeze": ([N("Unsqueeze", ["x", "ax"], ["u"]), N("Squeeze", ["u", "ax"], ["y"])],
                          {"ax": np.array([0], np.int64)}),
    "dropout_identity": ([N("Dropout", ["x"], ["d"]), N("Identity", ["d"], ["y"])], {}),
    "softmax": ([N("Flatten", ["x"], ["f"]), N("Softmax", ["f"], ["y"], axis=1)], {}),
    "lrn": ([N("LRN", ["x"], ["y"], size=3, alpha=1e-2, beta=0.75, bias=2.0)], {}),
    "hardsigmoid": ([N("HardSigmoid", ["x"], ["y"], alpha=0.3, beta=0.4)], {}),
    "hardswish": ([N("HardSwish", ["x"], ["y"])], {}),
    # host nodes (nn.host): what once stopped the import
    "sigmoid_erf_div": ([N("Sigmoid", ["x"], ["s"]), N("Erf", ["s"], ["e"]), N("Div", ["e", "x"], ["y"])], {}),
    "conv_transpose": ([N("ConvTranspose", ["x", "ct"], ["y"], strides=[2, 2])], {"ct": rand(4, 3, 3, 3, seed=15)}),
    "maxpool_dilated": ([N("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[2, 2])], {}),
    "gemm_computed_b": ([N("Flatten", ["x"], ["f"]), N("Transpose", ["f"], ["ft"]), N("Gemm", ["f", "ft"], ["y"])], {}),
    "matmul_3d": ([N("Reshape", ["x", "s3"], ["r"]), N("MatMul", ["r", "m3"], ["y"])],
                  {"s3": np.array([4, 8, 8], np.int64), "m3": rand(8, 5, seed=16)}),
    "softmax_axis1": ([N("Softmax", ["x"], ["y"], axis=1)], {}),
    "shape_arithmetic": ([N("Shape", ["x"], ["sh"]), N("Slice", ["sh", "st", "en"], ["hw"]),
                          N("Concat", ["one", "hw"], ["nsh"], axis=0), N("Reshape", ["x", "nsh"], ["y"])],
                         {"st": np.array([2], np.int64), "en": np.array([4], np.int64), "one": np.array([4], np.int64)}),
    "constant_folding": ([N("ConstantOfShape", ["cs"], ["k"], value=helper.make_tensor("v", 1, [1], [0.25])),
                          N("Constant", [], ["c"], value=numpy_helper.from_array(np.float32(2.0), "c")),
                          N("Mul", ["k", "c"], ["kk"]), N("Add", ["x", "kk"], ["y"])],
                         {"cs": np.array([1, 4, 8, 8], np.int64)}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_operator_matches_onnxruntime(case: str) -> None:
    nodes, inits = CASES[case]
    m = model(nodes, {"x": X}, {"y": None}, inits, opset=14 if case == "hardswish" else 13)
    onnx.checker.check_model(m)
    x = rand(*X, seed=42)
    ref = ort_run(m, x)
    got = run_golden(import_model(m, case), x)[0]
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_double_model_runs_in_float32() -> None:
    g = helper.make_graph([N("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), N("Sigmoid", ["c"], ["y"])], "d",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.DOUBLE, X)],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.DOUBLE, [1, 6, 8, 8])],
                          [numpy_helper.from_array(W["w"].astype(np.float64), "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    module = import_model(m, "double")
    assert "f64" not in str(module) and "nn.conv2d" in str(module)
    from snowir.backend import FloatBackend

    x = rand(*X, seed=3).astype(np.float64)
    (y,) = FloatBackend.prepare(m).run([x])
    assert y.dtype == np.float64
    ref = 1 / (1 + np.exp(-ort_run(model([N("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], {"x": X}, {"y": None},
                                         {"w": W["w"]}), x.astype(np.float32))))
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


def test_integer_input_feeds_host_nodes() -> None:
    g = helper.make_graph([N("Cast", ["i"], ["f"], to=onnx.TensorProto.FLOAT), N("Add", ["x", "f"], ["y"])], "ints",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, X),
                           helper.make_tensor_value_info("i", onnx.TensorProto.INT64, X)],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, X)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    assert "tensor<1x4x8x8xi64>" in str(import_model(m, "ints"))
    from snowir.backend import SnowflakeBackend

    x, i = rand(*X, seed=4), np.arange(256, dtype=np.int64).reshape(X) % 5
    for engine in ("golden", "machine"):
        (y,) = SnowflakeBackend.prepare(m, engine=engine).run({"x": x, "i": i})
        np.testing.assert_allclose(y, x + i, atol=2 ** -8)


PYTORCH = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "pytorch-converted"
OPSET6 = ["test_AvgPool2d", "test_AvgPool2d_stride", "test_BatchNorm2d_eval", "test_BatchNorm2d_momentum_eval",
          "test_Conv2d", "test_Conv2d_depthwise", "test_Conv2d_depthwise_padded", "test_Conv2d_depthwise_strided",
          "test_Conv2d_depthwise_with_multiplier", "test_Conv2d_dilated", "test_Conv2d_groups", "test_Conv2d_no_bias",
          "test_Conv2d_padding", "test_Conv2d_strided", "test_Linear", "test_Linear_no_bias", "test_MaxPool2d",
          "test_ReLU", "test_Softmax"]


@pytest.mark.parametrize("name", OPSET6)
def test_opset6_pytorch_models(name: str) -> None:
    d = PYTORCH / name
    assert onnx.load(str(d / "model.onnx")).opset_import[0].version == 6
    x = numpy_helper.to_array(onnx.load_tensor(str(d / "test_data_set_0" / "input_0.pb")))
    y = numpy_helper.to_array(onnx.load_tensor(str(d / "test_data_set_0" / "output_0.pb")))
    got = run_golden(import_onnx(d / "model.onnx"), x)[0]
    np.testing.assert_allclose(got, y, rtol=1e-4, atol=1e-4 * float(np.abs(y).max()))


def _bad_models(tmp: Path) -> dict[str, tuple[Path, str, list[str]]]:
    out: dict[str, tuple[Path, str, list[str]]] = {}

    def save(name: str, m: onnx.ModelProto) -> Path:
        p = tmp / f"{name}.onnx"
        p.write_bytes(m.SerializeToString())
        return p

    custom = model([N("Foo", ["x"], ["y"], name="act1", domain="com.example")], {"x": X}, {"y": X})
    custom.opset_import.append(onnx.helper.make_opsetid("com.example", 1))
    out["unsupported op"] = (save("foo", custom), "node 'act1' (Foo): operator domain 'com.example' has no operator Foo that onnxruntime runs", [])
    nz = model([N("NonZero", ["x"], ["y"], name="nz")], {"x": X}, {"y": [4, 1]})
    nz.graph.output[0].CopyFrom(onnx.helper.make_tensor_value_info("y", onnx.TensorProto.INT64, [4, "n"]))
    out["data-dependent shape"] = (save("nz", nz), "node 'nz' (NonZero): output 'y' has no static shape", [])
    dyn = model([N("Relu", ["x"], ["y"])], {"x": ["batch", 4, 8, 8]}, {"y": None})
    out["dynamic dimension"] = (save("dyn", dyn), "input 'x' has a dynamic dimension", [])
    bad = model([N("Relu", ["x"], ["y"])], {"x": X}, {"y": None})
    bad.graph.node[0].input[0] = "nope"
    out["invalid graph"] = (save("invalid", bad), "invalid ONNX model", [])
    (tmp / "garbage.onnx").write_bytes(b"\x08\x07garbage that is not protobuf \xff\xfe")
    out["not onnx"] = (tmp / "garbage.onnx", "not an ONNX model", [])
    out["missing file"] = (tmp / "missing.onnx", "missing.onnx", [])
    out["bad input shape"] = (save("dyn2", dyn), "--input-shape", ["--input-shape", "1,4,x"])
    out["wrong input shape"] = (save("dyn3", dyn), "does not fit input 'x'", ["--input-shape", "2,5,8,8"])
    return out


@pytest.mark.parametrize("case", ["unsupported op", "data-dependent shape", "dynamic dimension", "invalid graph",
                                  "not onnx", "missing file", "bad input shape", "wrong input shape"])
def test_bad_input_is_one_line_error(tmp_path: Path, capsys, case: str) -> None:
    path, message, extra = _bad_models(tmp_path)[case]
    out = tmp_path / "out.mlir"
    assert snow_opt([str(path), "-o", str(out), *extra]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
    assert not out.exists()


def test_input_shape_resolves_dynamic_dimension(tmp_path: Path) -> None:
    m = model([N("Relu", ["x"], ["y"])], {"x": ["batch", 4, 8, 8]}, {"y": None})
    path = tmp_path / "dyn.onnx"
    path.write_bytes(m.SerializeToString())
    out = tmp_path / "out.mlir"
    assert snow_opt([str(path), "--input-shape", "2,4,8,8", "-o", str(out)]) == 0
    assert "tensor<2x4x8x8xf32>" in out.read_text()
    with pytest.raises(OnnxImportError, match="dynamic dimension"):
        import_onnx(path)
    # an input named as --input names it, or with ':' (a name may hold ':', as TF's x:0 does)
    assert parse_input_shape("x=2,4,8,8") == parse_input_shape("x:2,4,8,8") == {"x": [2, 4, 8, 8]}
    assert parse_input_shape("in:0=1,3,8,8;y=2x2") == {"in:0": [1, 3, 8, 8], "y": [2, 2]}
    assert snow_opt([str(path), "--input-shape", "x=3,4,8,8", "-o", str(out)]) == 0
    assert "tensor<3x4x8x8xf32>" in out.read_text()
