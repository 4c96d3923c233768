"""Exporter-style models as real trained nets ship (issue 28): an empty `roi` constant, a contrib
operator run by onnxruntime on the host, a domain nobody runs refused in one line."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from snowir.dialects import nn
from snowir.tools.snow_run import main as snow_run
from tests.onnx_util import ort_run, rand


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
    # nearest x2 runs on the device (resize-to-conv-transpose: four weight-1 phase convs written in place)
    assert [layer["where"] for layer in report["layers"]] == ["device"] * len(report["layers"])
    assert report["total"]["host_ms"] == 0


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
    assert "node 'odd' (Frobnicate): operator domain 'org.example' has no operator Frobnicate that onnxruntime " \
           "runs, nor does onnx's reference evaluator" in err
    # any domain onnxruntime has the operator in is run, not only a list of known ones
    from snowir.frontend.onnx_host import ort_operators

    assert {("com.microsoft", "Gelu"), ("com.microsoft.nchwc", "ReorderInput")} <= ort_operators()


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


# ---------------------------------------------------------------- exporter patterns (issue 28, item 1)
def _graph(nodes: list, inits: dict, out_shape: list[int], x_shape: list[int] | None = None,
           opsets: list | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x_shape or [1, 16, 8, 8])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, out_shape)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(graph, opset_imports=opsets or [helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


CONV = helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1])
WEIGHTS = {"w": rand(16, 16, 3, 3, scale=0.1), "b": rand(16, seed=1, scale=0.1)}
I64 = np.int64

PATTERNS = {
    # Paddle / PyTorch leave zero-length tensors where an input is "not given"
    "empty initializer in a Concat": _graph([CONV, helper.make_node("Concat", ["c", "e"], ["y"], axis=1)],
                                            {**WEIGHTS, "e": np.zeros([1, 0, 8, 8], np.float32)}, [1, 16, 8, 8]),
    "ConstantOfShape of an empty shape": _graph(
        [CONV, helper.make_node("ConstantOfShape", ["es"], ["z"], value=numpy_helper.from_array(np.array([0.5], np.float32))),
         helper.make_node("Add", ["c", "z"], ["y"])], {**WEIGHTS, "es": np.zeros([0], I64)}, [1, 16, 8, 8]),
    # PyTorch's x.view(x.size(0), -1)
    "Shape-Gather-Unsqueeze-Concat reshape": _graph(
        [CONV, helper.make_node("Shape", ["c"], ["sh"]), helper.make_node("Gather", ["sh", "i0"], ["b0"], axis=0),
         helper.make_node("Unsqueeze", ["b0", "ax"], ["b1"]), helper.make_node("Concat", ["b1", "m1"], ["s2"], axis=0),
         helper.make_node("Reshape", ["c", "s2"], ["y"])],
        {**WEIGHTS, "i0": np.array(0, I64), "ax": np.array([0], I64), "m1": np.array([-1], I64)}, [1, 1024]),
    "Resize by sizes, empty roi and scales": _graph(
        [CONV, helper.make_node("Resize", ["c", "roi", "sc", "sz"], ["y"], mode="nearest")],
        {**WEIGHTS, "roi": np.zeros(0, np.float32), "sc": np.zeros(0, np.float32), "sz": np.array([1, 16, 16, 16], I64)},
        [1, 16, 16, 16]),
    # Paddle2ONNX at opset 11: roi and scales as Constant nodes, the roi zero-length
    "Resize by Constant nodes, opset 11, linear": _graph(
        [CONV, helper.make_node("Constant", [], ["roi"], value=numpy_helper.from_array(np.zeros(0, np.float32))),
         helper.make_node("Constant", [], ["sc"], value=numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32))),
         helper.make_node("Resize", ["c", "roi", "sc"], ["y"], mode="linear", coordinate_transformation_mode="half_pixel")],
        WEIGHTS, [1, 16, 16, 16], opsets=[helper.make_opsetid("", 11)]),
    "ConvTranspose then HardSigmoid (PP-OCR det head)": _graph(
        [CONV, helper.make_node("ConvTranspose", ["c", "wt", "bt"], ["d"], strides=[2, 2], kernel_shape=[2, 2]),
         helper.make_node("HardSigmoid", ["d"], ["y"], alpha=0.2, beta=0.5)],
        {**WEIGHTS, "wt": rand(16, 8, 2, 2, seed=3, scale=0.2), "bt": rand(8, seed=4, scale=0.1)}, [1, 8, 16, 16]),
    "LSTM over conv columns (ddddocr)": _graph(
        [CONV, helper.make_node("Reshape", ["c", "rs"], ["seq"]),
         helper.make_node("LSTM", ["seq", "lw", "lr", "lb"], ["ly"], hidden_size=8),
         helper.make_node("Squeeze", ["ly", "one"], ["y"])],
        {**WEIGHTS, "rs": np.array([16, 1, 64], I64), "lw": rand(1, 32, 64, seed=5, scale=0.1),
         "lr": rand(1, 32, 8, seed=6, scale=0.1), "lb": rand(1, 64, seed=7, scale=0.1), "one": np.array([1], I64)}, [16, 1, 8]),
}


def _x() -> np.ndarray:
    return np.random.default_rng(9).uniform(0, 1, [1, 16, 8, 8]).astype(np.float32)


@pytest.mark.parametrize("name", list(PATTERNS))
def test_exporter_patterns_import_and_match_onnxruntime(name: str) -> None:
    from snowir.backend import FloatBackend, SnowflakeBackend
    from snowir.driver.check import snr_db

    m, x = PATTERNS[name], _x()
    ref = ort_run(m, x)
    assert np.allclose(FloatBackend.prepare(m).run([x])[0], ref, atol=1e-5)
    (y,) = SnowflakeBackend.prepare(m, engine="golden").run([x])
    assert snr_db(ref, y) > 30  # snow-run --check's default bar; Q8.8 throughout


def _dynamic_quantized(rescaled: bool = True) -> onnx.ModelProto:
    """onnx.quantize's dynamic quantisation of a conv (common_old.onnx): uint8 activations from
    DynamicQuantizeLinear, int32 sums from ConvInteger, rescaled in float by scale products; not
    `rescaled`, the float sums are the output (no chain the importer knows: it stays as shipped)."""
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("ConvInteger", ["xq", "wq", "xz", "wz"], ["ci"], pads=[1, 1, 1, 1]),
             helper.make_node("Cast", ["ci"], ["cf" if rescaled else "y"], to=onnx.TensorProto.FLOAT)]
    if rescaled:
        nodes += [helper.make_node("Mul", ["xs", "ws"], ["s"], name="scale"),
                  helper.make_node("Mul", ["cf", "s"], ["y"], name="rescale")]
    wq = np.random.default_rng(0).integers(0, 255, [16, 16, 3, 3]).astype(np.uint8)
    inits = {"wq": wq, "wz": np.array(128, np.uint8)} | ({"ws": np.array(0.01, np.float32)} if rescaled else {})
    return _graph(nodes, inits, [1, 16, 8, 8])


def test_dynamic_quantization_runs_as_the_float_conv_it_stands_for() -> None:
    """The chain imports as the float conv it stands for (snowir/frontend/onnx_dequantize.py:
    weights (wq - 128) * 0.01), a device conv, no host rescaling left; the result follows
    onnxruntime running the model as shipped within the 8-bit activations' and Q8.8's rounding."""
    from snowir.backend import SnowflakeBackend
    from snowir.driver.check import snr_db

    m, x = _dynamic_quantized(), _x()
    ref = ort_run(m, x)
    rep = SnowflakeBackend.prepare(m, engine="golden")
    assert not [op for op in rep.module.walk() if isinstance(op, nn.HostOp)]
    assert len([op for op in rep.module.walk() if isinstance(op, nn.Conv2dOp)]) == 1
    (y,) = rep.run([x])
    assert snr_db(ref, y) > 30


def test_a_contrib_op_whose_shape_onnx_cannot_infer_runs(tmp_path: Path, capsys) -> None:
    """DynamicQuantizeLSTM's output shape comes from running it once (regression: a missing import)."""
    gelu = helper.make_node("Gelu", ["c"], ["g"], name="gelu", domain="com.microsoft")
    relu = helper.make_node("Relu", ["g"], ["y"], name="relu")
    m = _graph([CONV, gelu, relu], WEIGHTS, [1, 16, 8, 8],
               opsets=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    rc, report, err = _run(tmp_path, m, capsys)
    assert rc == 0, err
    assert report["check"]["snr_db"] > 40


def test_host_sessions_are_built_once_per_node(monkeypatch) -> None:
    """One onnxruntime session per host node and input signature, whatever the number of runs."""
    from snowir.backend import SnowflakeBackend
    from snowir.frontend import onnx_host

    built = []
    real = onnx_host.ort_session
    monkeypatch.setattr(onnx_host.NodeRunner, "_cache", {})
    monkeypatch.setattr(onnx_host, "ort_session", lambda model: built.append(model.graph.node[0].op_type) or real(model))
    m = _graph([CONV, helper.make_node("Erf", ["c"], ["e"]), helper.make_node("Floor", ["e"], ["y"])], WEIGHTS, [1, 16, 8, 8])
    rep = SnowflakeBackend.prepare(m, engine="golden")
    for _ in range(3):
        rep.run([_x()])
    SnowflakeBackend.prepare(m, engine="golden").run([_x()])  # an equal node elsewhere shares it
    assert sorted(built) == ["Erf", "Floor"]


def test_the_reference_evaluator_runs_host_nodes_without_onnxruntime(monkeypatch, tmp_path: Path) -> None:
    from snowir.backend import FloatBackend
    from snowir.errors import SnowError
    from snowir.frontend import onnx_host
    from snowir.frontend.onnx_import import import_model

    monkeypatch.setattr(onnx_host.NodeRunner, "_cache", {})
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` fails
    m = _graph([CONV, helper.make_node("Erf", ["c"], ["y"])], WEIGHTS, [1, 16, 8, 8])
    (y,) = FloatBackend.prepare(m).run([_x()])
    conv = _graph([CONV, helper.make_node("Identity", ["c"], ["y"])], WEIGHTS, [1, 16, 8, 8])
    (c,) = FloatBackend.prepare(conv).run([_x()])
    assert np.allclose(y, np.vectorize(math.erf)(c), atol=1e-6)
    gelu = _graph([CONV, helper.make_node("Gelu", ["c"], ["y"], name="gelu", domain="com.microsoft")], WEIGHTS,
                  [1, 16, 8, 8], opsets=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    with pytest.raises(SnowError, match=r"^<onnx>: node 'gelu' \(Gelu\): operator domain 'com.microsoft' needs "
                                        r"onnxruntime, which is not installed"):
        import_model(gelu)


def test_host_nodes_count_their_macs() -> None:
    """A ConvInteger or LSTM left to the host is work the report shows (and prices in host ms),
    not 0. (A ConvTranspose is a device conv now: tests/test_conv_transpose.py.)"""
    from snowir.frontend.onnx_import import import_model
    from snowir.host_model import host_ms, useful_macs

    got = {}
    for m in (_dynamic_quantized(rescaled=False), PATTERNS["LSTM over conv columns (ddddocr)"]):
        for op in import_model(m).walk():
            if isinstance(op, nn.HostOp) and useful_macs(op):
                got[op.op_type.data] = useful_macs(op)
                assert host_ms(op) >= 2 * useful_macs(op) / 666e3 / 2.0
    # the ConvInteger: 16 x 16 channels x the 22 x 22 taps of a padded 3x3 that land inside the 8 x 8 input
    assert got == {"ConvInteger": 16 * 16 * 22 * 22, "LSTM": 16 * 4 * 8 * (64 + 8)}
