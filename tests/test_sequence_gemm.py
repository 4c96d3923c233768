"""sequence-gemm (issue 28 item 5): a Gemm / MatMul over T timesteps, as an OCR head exports it
(Conv -> Transpose -> Reshape -> Gemm), runs as one 1x1 conv over T pixels: one program that
streams its weights once, bit-exact against golden and close to onnxruntime."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from snowir.dialects import nn
from snowir.frontend.onnx_import import import_model as import_onnx_model
from snowir.passes.nn.sequence_gemm import SequenceGemmPass
from snowir.tools.snow_run import main as snow_run
from tests.onnx_util import rand

T, C, H, K, M = 24, 16, 4, 64, 40


def ocr_head(op: str = "Gemm", host_between: bool = True) -> onnx.ModelProto:
    """x [1, C, H, T] -> conv -> (Sigmoid on the host) -> Transpose(3, 0, 1, 2) -> Reshape [T, C*H]
    -> Gemm(transB) / MatMul: the shape of common.onnx's CTC head."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1])]
    src = "c"
    if host_between:
        nodes.append(helper.make_node("Sigmoid", ["c"], ["s"], name="act"))
        src = "s"
    nodes += [helper.make_node("Transpose", [src], ["t"], name="tr", perm=[3, 0, 1, 2]),
              helper.make_node("Reshape", ["t", "shape"], ["r"], name="flat")]
    inits = {"w": rand(C, C, 3, 3, scale=0.1), "b": rand(C, seed=1, scale=0.1), "shape": np.array([T, C * H], np.int64)}
    if op == "Gemm":
        nodes.append(helper.make_node("Gemm", ["r", "fc_w", "fc_b"], ["y"], name="head", transB=1))
        inits |= {"fc_w": rand(M, C * H, seed=2, scale=0.1), "fc_b": rand(M, seed=3, scale=0.1)}
    else:
        nodes.append(helper.make_node("MatMul", ["r", "fc_w"], ["y"], name="head"))
        inits |= {"fc_w": rand(C * H, M, seed=2, scale=0.1)}
    graph = helper.make_graph(nodes, "ocr", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, C, H, T])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [T, M])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def _run(tmp_path: Path, m: onnx.ModelProto, capsys, *extra: str) -> dict:
    path, report = tmp_path / "m.onnx", tmp_path / "r.json"
    onnx.save(m, path)
    rc = snow_run([str(path), "--check", "--quiet", "--report", str(report), *extra])
    assert rc == 0, capsys.readouterr().err
    return json.loads(report.read_text())


def _rewritten(m: onnx.ModelProto, layout: str = "auto"):
    module = import_onnx_model(m)
    SequenceGemmPass(layout=layout).apply(None, module)
    return module


@pytest.mark.parametrize("op", ["Gemm", "MatMul"])
def test_a_gemm_over_timesteps_is_one_conv_over_t_pixels(op: str) -> None:
    module = _rewritten(ocr_head(op))
    assert not any(isinstance(o, nn.DenseOp) for o in module.walk())
    head = next(o for o in module.walk() if isinstance(o, nn.Conv2dOp) and "from_dense" in o.attributes)
    n, k, h, w = head.input.type.get_shape()
    assert (n, k, h * w) == (1, C * H, T) and 1 in (h, w)
    assert head.output.type.get_shape()[1] == M


@pytest.mark.parametrize("layout, pixels", [("row", (1, T)), ("column", (T, 1))])
def test_the_layout_option_forces_the_form(layout: str, pixels: tuple[int, int]) -> None:
    head = next(o for o in _rewritten(ocr_head(), layout).walk()
                if isinstance(o, nn.Conv2dOp) and "from_dense" in o.attributes)
    assert tuple(head.input.type.get_shape()[2:]) == pixels


def test_layout_off_and_a_placed_dense_are_left_alone() -> None:
    assert any(isinstance(o, nn.DenseOp) for o in _rewritten(ocr_head(), "off").walk())
    module = import_onnx_model(ocr_head())
    dense = next(o for o in module.walk() if isinstance(o, nn.DenseOp))
    dense.attributes["place"] = nn.StringAttr("snowflake")
    SequenceGemmPass().apply(None, module)
    assert any(isinstance(o, nn.DenseOp) for o in module.walk())


def test_a_bad_layout_is_refused() -> None:
    from xdsl.utils.exceptions import PassFailedException

    with pytest.raises(PassFailedException, match="layout must be one of"):
        SequenceGemmPass(layout="diagonal").apply(None, import_onnx_model(ocr_head()))


@pytest.mark.parametrize("host_between", [True, False])
def test_the_head_runs_as_one_program_bit_exact(tmp_path: Path, capsys, host_between: bool) -> None:
    report = _run(tmp_path, ocr_head(host_between=host_between), capsys)
    assert report["check"]["golden_bit_exact"] and report["check"]["snr_db"] > 35
    head = next(layer for layer in report["layers"] if layer["name"] == "head")
    assert head["where"] == "device" and head["op"] == "dense" and head["macs"] == T * C * H * M
    # one program: the weights (M kernels of C*H words and a 16-word bias block) stream once, not T times
    weights = M * (C * H + 16) * 2
    assert weights <= head["dram_bytes"] < 2 * weights + T * (C * H + M) * 2
    # the exporter's Transpose moves bytes (host work); the views sequence-gemm adds around the conv do not
    moves = [layer for layer in report["layers"] if layer["op"] in ("transpose", "reshape")]
    assert [layer["host_ms"] > 0 for layer in moves if layer["name"] == "tr"] == [True]
    views = [layer for layer in moves if layer["name"] != "tr"]
    assert len(views) >= 4 and all(layer["where"] == "device" and not layer["host_ms"] for layer in views)


def test_per_image_lowering_runs_it_too(tmp_path: Path, capsys) -> None:
    report = _run(tmp_path, ocr_head(), capsys, "--pipeline", "snowflake-lower{whole-model=false}", "--jobs", "1")
    assert report["check"]["golden_bit_exact"]
    assert next(layer for layer in report["layers"] if layer["name"] == "head")["macs"] == T * C * H * M


def paddle_head() -> onnx.ModelProto:
    """Paddle's spelling (PP-OCRv4's recogniser): a 3-D MatMul over [1, T, K] and its bias as an Add."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Squeeze", ["c", "axis"], ["s"], name="squeeze"),
             helper.make_node("Transpose", ["s"], ["t"], name="tr", perm=[0, 2, 1]),
             helper.make_node("MatMul", ["t", "fc_w"], ["mm"], name="head"),
             helper.make_node("Add", ["mm", "fc_b"], ["y"], name="bias")]
    inits = {"w": rand(C, C, 3, 3, scale=0.1), "b": rand(C, seed=1, scale=0.1), "axis": np.array([2], np.int64),
             "fc_w": rand(C, M, seed=2, scale=0.1), "fc_b": rand(M, seed=3, scale=0.1)}
    graph = helper.make_graph(nodes, "rec", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, C, 1, T])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, T, M])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def test_a_3d_matmul_and_its_bias_add_are_one_conv(tmp_path: Path, capsys) -> None:
    from snowir.passes.pipelines import NNPreparePass

    module = import_onnx_model(paddle_head())
    NNPreparePass(quantize=False).apply(None, module)
    assert not any(isinstance(o, nn.AddOp | nn.DenseOp | nn.HostOp) for o in module.walk())
    report = _run(tmp_path, paddle_head(), capsys)
    assert report["check"]["golden_bit_exact"] and report["check"]["snr_db"] > 35
    head = next(layer for layer in report["layers"] if layer["name"] == "head")
    assert head["where"] == "device" and head["macs"] == T * C * M


def mixed_batches() -> onnx.ModelProto:
    """A dense over T rows between two convs of one image: with sequence-gemm off it runs as T
    images, the segments around it as one."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Transpose", ["c"], ["t"], name="tr", perm=[3, 0, 1, 2]),
             helper.make_node("Reshape", ["t", "shape"], ["r"], name="flat"),
             helper.make_node("Gemm", ["r", "fw", "fb"], ["g"], name="head", transB=1),
             helper.make_node("Sigmoid", ["g"], ["s"], name="act"),
             helper.make_node("Reshape", ["s", "shape2"], ["s4"], name="back"),
             helper.make_node("Conv", ["s4", "w2", "b2"], ["y"], name="conv2")]
    inits = {"w": rand(C, C, 3, 3, scale=0.1), "b": rand(C, seed=1, scale=0.1), "shape": np.array([T, C], np.int64),
             "fw": rand(M, C, seed=2, scale=0.1), "fb": rand(M, seed=3, scale=0.1),
             "shape2": np.array([1, M, 1, T], np.int64), "w2": rand(M, M, 1, 1, seed=4, scale=0.1),
             "b2": rand(M, seed=5, scale=0.1)}
    graph = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, C, 1, T])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, M, 1, T])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("pipeline", ["nn-prepare", "nn-prepare{sequence-gemm=false}"])
def test_segments_of_different_image_counts_run_bit_exact(tmp_path: Path, capsys, pipeline: str) -> None:
    report = _run(tmp_path, mixed_batches(), capsys, "--pipeline", pipeline)
    assert report["check"]["golden_bit_exact"] and report["check"]["snr_db"] > 35
    head = next(layer for layer in report["layers"] if layer["name"] == "head")
    weights = M * (C + 16) * 2
    programs = 1 if pipeline == "nn-prepare" else T  # each streams the weights (and fetches its code) once
    assert programs * weights <= head["dram_bytes"] < programs * (weights + 1024) + T * (C + M) * 2
