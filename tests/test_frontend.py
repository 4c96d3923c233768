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
from snowir.onnx_import import OnnxImportError, import_model, import_onnx
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

    out["unsupported op"] = (save("tanh", model([N("Tanh", ["x"], ["y"], name="act1")], {"x": X}, {"y": None})),
                             "node 'act1' (Tanh): operator not supported by snowir", [])
    dyn = model([N("Relu", ["x"], ["y"])], {"x": ["batch", 4, 8, 8]}, {"y": None})
    out["dynamic dimension"] = (save("dyn", dyn), "input 'x' has a dynamic dimension", [])
    out["runtime weights"] = (save("rtw", model([N("Conv", ["x", "x2"], ["y"], name="c")], {"x": X, "x2": [6, 4, 3, 3]},
                                               {"y": None})), "node 'c' (Conv): weight must be a constant", [])
    bad = model([N("Relu", ["x"], ["y"])], {"x": X}, {"y": None})
    bad.graph.node[0].input[0] = "nope"
    out["invalid graph"] = (save("invalid", bad), "invalid ONNX model", [])
    (tmp / "garbage.onnx").write_bytes(b"\x08\x07garbage that is not protobuf \xff\xfe")
    out["not onnx"] = (tmp / "garbage.onnx", "not an ONNX model", [])
    out["missing file"] = (tmp / "missing.onnx", "missing.onnx", [])
    out["bad input shape"] = (save("dyn2", dyn), "--input-shape", ["--input-shape", "1,4,x"])
    out["wrong input shape"] = (save("dyn3", dyn), "does not fit input 'x'", ["--input-shape", "2,5,8,8"])
    return out


@pytest.mark.parametrize("case", ["unsupported op", "dynamic dimension", "runtime weights", "invalid graph",
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
