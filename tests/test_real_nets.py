"""Exporter-style models as real trained nets ship (issue 28): an empty `roi` constant, a contrib
operator run by onnxruntime on the host, a domain nobody runs refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from snowir.tools.snow_run import main as snow_run
from tests.onnx_util import model, rand


def _conv_then(node: onnx.NodeProto, out_shape: list[int], inits: dict, opsets: list) -> onnx.ModelProto:
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1])
    graph = helper.make_graph([conv, node], "t", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 16, 8, 8])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, out_shape)],
                              [numpy_helper.from_array(v, k) for k, v in
                               {"w": rand(16, 16, 3, 3, scale=0.1), "b": rand(16, seed=1, scale=0.1), **inits}.items()])
    m = helper.make_model(graph, opset_imports=opsets)
    m.ir_version = 8
    return m


def _run(tmp_path: Path, m: onnx.ModelProto, capsys) -> tuple[int, dict | None, str]:
    path, report = tmp_path / "m.onnx", tmp_path / "r.json"
    onnx.save(m, path)
    rc = snow_run([str(path), "--check", "--quiet", "--report", str(report)])
    err = capsys.readouterr().err
    return rc, json.loads(report.read_text()) if rc == 0 else None, err


def test_an_empty_roi_is_a_value_not_missing_data(tmp_path: Path, capsys) -> None:
    """PyTorch's and Paddle's exporters give Resize an empty roi constant."""
    resize = helper.make_node("Resize", ["c", "roi", "scales"], ["y"], name="up", mode="nearest")
    m = _conv_then(resize, [1, 16, 16, 16], {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 2, 2], np.float32)},
                   [helper.make_opsetid("", 13)])
    rc, report, err = _run(tmp_path, m, capsys)
    assert rc == 0, err
    assert report["check"]["golden_bit_exact"] and report["check"]["snr_db"] > 40
    assert [layer["where"] for layer in report["layers"]][:2] == ["device", "host"]


def test_a_contrib_op_runs_on_the_host_through_onnxruntime(tmp_path: Path, capsys) -> None:
    gelu = helper.make_node("Gelu", ["c"], ["y"], name="gelu", domain="com.microsoft")
    m = _conv_then(gelu, [1, 16, 8, 8], {}, [helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    rc, report, err = _run(tmp_path, m, capsys)
    assert rc == 0, err
    assert report["check"]["reference"] == "onnxruntime" and report["check"]["snr_db"] > 40
    assert {layer["name"]: layer["where"] for layer in report["layers"]}["gelu"] == "host"


def test_a_domain_no_runtime_runs_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    odd = helper.make_node("Frobnicate", ["c"], ["y"], name="odd", domain="org.example")
    m = _conv_then(odd, [1, 16, 8, 8], {}, [helper.make_opsetid("", 13), helper.make_opsetid("org.example", 1)])
    rc, _, err = _run(tmp_path, m, capsys)
    assert rc == 1 and len(err.strip().splitlines()) == 1
    assert "node 'odd' (Frobnicate): operator domain 'org.example' is not one the host runs" in err


def test_backend_verbose_shows_progress(capsys) -> None:
    from snowir.backend import SnowflakeBackend

    digits = onnx.load(str(Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx"))
    rep = SnowflakeBackend.prepare(digits, verbose=True)
    (y,) = rep.run([np.zeros([1, 1, 8, 8], np.float32)])
    err = capsys.readouterr().err
    assert y.shape == (1, 10) and "snowir: <model>: lowering" in err
    assert "snowir: layer 1/5: conv1 (0% of the work done)" in err and "layer 5/5: fc" in err
    SnowflakeBackend.prepare(digits).run([np.zeros([1, 1, 8, 8], np.float32)])
    assert capsys.readouterr().err == ""  # quiet unless asked
