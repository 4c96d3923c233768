"""
snow-run and the Python API on models as exporters write them (issue 40, "the CLI on real models"):
several inputs, several outputs (a detector's boxes beside its scores), old IR versions, input
names that are not identifiers, input sizes a network cannot take, a module piped on stdin,
and the backend saying what the command line says. Each model is built here with onnx.helper.
"""

from __future__ import annotations

import io
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import snowir
from snowir.tools.snow_opt import main as snow_opt
from snowir.tools.snow_run import main as snow_run

DIGITS = Path(snowir.__file__).parent / "data" / "digits_cnn.onnx"


def _w(*shape: int, seed: int = 0, scale: float = 0.3) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _model(nodes, inputs: dict[str, list], outputs: dict[str, list], inits: dict[str, np.ndarray],
           ir_version: int = 8, opset: int = 13) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in inputs.items()],
                              [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in outputs.items()],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    return model


def residual_block() -> onnx.ModelProto:
    """A residual block cut out of a net: its input and its skip connection are two inputs."""
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "skip"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    return _model(nodes, {"x": [1, 8, 8, 8], "skip": [1, 8, 8, 8]}, {"y": [1, 8, 8, 8]},
                  {"W": _w(8, 8, 3, 3), "B": _w(8, seed=1)})


def detector() -> onnx.ModelProto:
    """A detector's head: class scores [1, 2, 64] and a box decode, sigmoid x 20 x 16 (pixel
    coordinates up to 320; Q8.8 holds under 128) giving boxes [1, 4, 64]. The scores survive
    Q8.8, the boxes do not."""
    nodes = [helper.make_node("Conv", ["images", "W1"], ["f"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["f"], ["r"]),
             helper.make_node("Conv", ["r", "Ws"], ["c"]), helper.make_node("Reshape", ["c", "shape2"], ["scores"]),
             helper.make_node("Conv", ["r", "Wb"], ["b"]), helper.make_node("Reshape", ["b", "shape4"], ["b2"]),
             helper.make_node("Sigmoid", ["b2"], ["sig"]), helper.make_node("Mul", ["sig", "cells"], ["grid"]),
             helper.make_node("Mul", ["grid", "stride"], ["boxes"])]
    return _model(nodes, {"images": [1, 3, 8, 8]}, {"scores": [1, 2, 64], "boxes": [1, 4, 64]},
                  {"W1": _w(8, 3, 3, 3), "Ws": _w(2, 8, 1, 1, seed=1), "Wb": _w(4, 8, 1, 1, seed=2),
                   "shape2": np.array([1, 2, 64], np.int64), "shape4": np.array([1, 4, 64], np.int64),
                   "cells": np.array(20, np.float32), "stride": np.array(16, np.float32)})


def classifier_and_regressor() -> onnx.ModelProto:
    """Two outputs: logits [1, 10] (a classifier's: top-1 means something) and a map [1, 4, 8, 8]."""
    nodes = [helper.make_node("Conv", ["x", "W"], ["m"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["m"], ["g"]), helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "Wd", "Bd"], ["logits"], transB=1)]
    return _model(nodes, {"x": [1, 3, 8, 8]}, {"logits": [1, 10], "m": [1, 4, 8, 8]},
                  {"W": _w(4, 3, 3, 3), "Wd": _w(10, 4, seed=1), "Bd": _w(10, seed=2)})


def old_exporter(cin: int = 3, cout: int = 4) -> onnx.ModelProto:
    """IR version 3, opset 7, initializers not listed as graph inputs (as Caffe2 wrote them);
    64 -> 64 channels: a weight of over 10 000 elements, which the importer's checker sees as an input."""
    nodes = [helper.make_node("Conv", ["data_0", "convolution_W", "convolution_B"], ["y"], pads=[1, 1, 1, 1])]
    return _model(nodes, {"data_0": [1, cin, 8, 8]}, {"y": [1, cout, 8, 8]},
                  {"convolution_W": _w(cout, cin, 3, 3, scale=0.3 / cin ** 0.5), "convolution_B": _w(cout, seed=1)},
                  ir_version=3, opset=7)


def hot() -> onnx.ModelProto:
    """Input `input.1` (PyTorch's spelling) and a conv whose results reach ~300 (Q8.8: < 128)."""
    nodes = [helper.make_node("Conv", ["input.1", "W"], ["y"], pads=[1, 1, 1, 1])]
    return _model(nodes, {"input.1": [1, 3, 8, 8]}, {"y": [1, 4, 8, 8]}, {"W": np.full((4, 3, 3, 3), 4.0, np.float32)})


def pyramid() -> onnx.ModelProto:
    """A feature pyramid in small: the full-size map plus the half-size map upsampled x2, joined
    by `Add_12`: only even input sizes fit; the height and width are dynamic."""
    nodes = [helper.make_node("Conv", ["x", "W1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["c1"], ["p"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
             helper.make_node("Conv", ["p", "W2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["c2", "", "scales"], ["u"], mode="nearest"),
             helper.make_node("Add", ["c1", "u"], ["y"], name="Add_12")]
    return _model(nodes, {"x": [1, 3, "h", "w"]}, {"y": [1, 4, "h2", "w2"]},
                  {"W1": _w(4, 3, 3, 3), "W2": _w(4, 4, 3, 3, seed=1), "scales": np.array([1, 1, 2, 2], np.float32)})


def _save(tmp_path: Path, name: str, model: onnx.ModelProto) -> str:
    path = tmp_path / name
    onnx.save(model, path)
    return str(path)


def _npy(tmp_path: Path, name: str, x: np.ndarray) -> str:
    np.save(tmp_path / name, x)
    return str(tmp_path / name)


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


# ---------------------------------------------------------------- 1. several inputs
def test_a_two_input_model_runs_with_an_input_each(tmp_path: Path, capsys) -> None:
    model = _save(tmp_path, "res.onnx", residual_block())
    a, b = _npy(tmp_path, "a.npy", _w(1, 8, 8, 8, seed=5, scale=1)), _npy(tmp_path, "b.npy", _w(1, 8, 8, 8, seed=6, scale=1))
    ref = _ort(residual_block(), {"x": np.load(a), "skip": np.load(b)})[0]
    outs = {}
    for engine in ("fast", "golden"):
        for how, inputs in (("order", ["--input", a, "--input", b]),
                            ("names", ["--input", f"skip={b}", "--input", f"x={a}"])):
            out, rep = tmp_path / f"{engine}-{how}.npy", tmp_path / f"{engine}-{how}.json"
            assert snow_run([model, *inputs, "--check", "--quiet", "--engine", engine, "--output", str(out),
                             "--report", str(rep)]) == 0, capsys.readouterr().err
            outs[engine, how] = np.load(out)
            check = json.loads(rep.read_text())["check"]
            assert check["golden_bit_exact"] and check["snr_db"] > 30 and check["reference"] == "onnxruntime"
            assert [i["name"] for i in json.loads(rep.read_text())["inputs"]] == ["x", "skip"]
    assert all(np.array_equal(outs["fast", "order"], y) for y in outs.values())
    assert np.abs(outs["fast", "order"] - ref).max() < 0.05


def test_missing_unknown_and_mixed_inputs_are_one_line(tmp_path: Path, capsys) -> None:
    model = _save(tmp_path, "res.onnx", residual_block())
    a = _npy(tmp_path, "a.npy", _w(1, 8, 8, 8, scale=1))
    for inputs, message in ((["--input", a], "the model takes 2 inputs ('x', 'skip'), got 1"),
                            (["--input", f"x={a}"], "no value for input 'skip'"),
                            (["--input", f"y={a}", "--input", f"x={a}"], "no input named 'y'"),
                            (["--input", a, "--input", f"x={a}"], "by order or every one as NAME=X.npy")):
        assert snow_run([model, *inputs, "--quiet"]) == 1
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_the_python_api_takes_inputs_by_name() -> None:
    compiled = snowir.compile(residual_block())
    x, skip = _w(1, 8, 8, 8, seed=5, scale=1), _w(1, 8, 8, 8, seed=6, scale=1)
    by_order = compiled.run([x, skip], check=True)
    by_name = compiled.run({"skip": skip, "x": x}, engine="golden", check=True)
    assert np.array_equal(by_order.outputs[0], by_name.outputs[0])
    assert by_order.report.check.golden_bit_exact and by_order.report.check.snr_db > 30
    assert by_name.report.check.snr_db == by_order.report.check.snr_db
    two = compiled.run()  # seeded inputs for both
    assert two.outputs[0].shape == (1, 8, 8, 8)


# ---------------------------------------------------------------- 2 and 5. every output, a hint
def test_check_covers_every_output_and_says_what_to_do(tmp_path: Path, capsys) -> None:
    model = _save(tmp_path, "det.onnx", detector())
    rep = tmp_path / "r.json"
    assert snow_run([model, "--check", "--report", str(rep)]) == 1
    out, err = capsys.readouterr()
    check = json.loads(rep.read_text())["check"]  # written, atomically, with what failed
    rows = {r["name"]: r for r in check["outputs"]}
    assert set(rows) == {"scores", "boxes"} and check["worst_output"] == "boxes"
    assert rows["scores"]["snr_db"] > 30 > rows["boxes"]["snr_db"] == check["snr_db"]
    assert rows["boxes"]["top1_match"] is None and rows["scores"]["top1_match"] is None  # not a classifier's
    assert check["top1_match"] is None and "top-1" not in out
    assert "output 'scores'" in out and "output 'boxes'" in out
    assert check["failed"].startswith("SNR ")
    report = snowir.Report.from_json(json.loads(rep.read_text()))  # snow-report reads it back
    assert report.check.failed == check["failed"] and report.check.outputs[1].name == "boxes"
    assert report.to_json()["check"] == check
    failure = [line for line in err.splitlines() if "check failed" in line]
    assert len(failure) == 1 and "output 'boxes'" in failure[0], err
    assert "--format auto --calibration X.npy" in failure[0], err
    assert "as values saturate (boxes the most), a wider format: --format Q10.6" in failure[0], err
    assert not list(tmp_path.glob("*.tmp*"))
    # the wider format the hint names passes
    assert snow_run([model, "--check", "--quiet", "--format", "Q10.6"]) == 0, capsys.readouterr().err


def test_top1_is_said_for_classifier_outputs_only(tmp_path: Path, capsys) -> None:
    model = _save(tmp_path, "two.onnx", classifier_and_regressor())
    rep = tmp_path / "r.json"
    assert snow_run([model, "--check", "--report", str(rep)]) == 0, capsys.readouterr().err
    rows = {r["name"]: r for r in json.loads(rep.read_text())["check"]["outputs"]}
    assert isinstance(rows["logits"]["top1_match"], bool) and rows["m"]["top1_match"] is None
    out = capsys.readouterr().out
    assert "output 'logits'" in out and "top-1 match" in out
    detector_model = _save(tmp_path, "det.onnx", detector())
    assert snow_run([detector_model, "--check", "--check-top1", "--quiet", "--format", "Q10.6"]) == 1
    assert "no output is a classifier's" in capsys.readouterr().err


# ---------------------------------------------------------------- 3. old IR versions
def test_an_ir3_model_with_unlisted_initializers_runs_as_onnxruntime_runs_it(tmp_path: Path, capsys) -> None:
    from snowir.backend import FloatBackend, SnowflakeBackend
    from snowir.frontend.onnx_prepare import LegacyInitializersWarning

    model = old_exporter()
    x = _w(1, 3, 8, 8, seed=3, scale=1)
    ref = _ort(model, {"data_0": x})[0]
    with pytest.warns(LegacyInitializersWarning, match="IR version 3 .*'convolution_W' and 1 more"):
        (y,) = FloatBackend.prepare(model).run([x])
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    with pytest.warns(LegacyInitializersWarning):
        (q,) = SnowflakeBackend.prepare(model).run([x])
    assert np.abs(q - ref).max() < 0.05
    assert model.ir_version == 3 and len(model.graph.input) == 1  # the caller's model is not changed
    path = _save(tmp_path, "old.onnx", model)
    assert snow_run([path, "--check", "--quiet", "--input", _npy(tmp_path, "x.npy", x)]) == 0
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if "IR version 3" in line]
    assert len(notes) == 1 and notes[0].startswith("snow-run: warning: "), err
    big = old_exporter(64, 64)
    x = _w(1, 64, 8, 8, seed=3, scale=1)
    with pytest.warns(LegacyInitializersWarning, match="'convolution_W' and 1 more"):
        (y,) = FloatBackend.prepare(big).run([x])
    np.testing.assert_allclose(y, _ort(big, {"data_0": x})[0], rtol=1e-4, atol=1e-4)
    assert snow_run([_save(tmp_path, "big.onnx", big), "--check", "--quiet"]) == 0, capsys.readouterr().err


# ---------------------------------------------------------------- 4 and 6. the backend warns; names
def test_the_backend_warns_where_snow_run_does_and_reports_on_both_engines() -> None:
    from snowir.backend import SaturationWarning, SnowflakeBackend

    x = np.abs(_w(1, 3, 8, 8, seed=4, scale=3))
    for engine in ("machine", "golden"):
        rep = SnowflakeBackend.prepare(hot(), engine=engine, format="Q8.8")
        with pytest.warns(SaturationWarning, match=r"Q8\.8 saturates, values clipped: y .*format='auto'"):
            rep.run([x])
        assert rep.report is not None and rep.report.layer("y").saturated_share > 0.5
        assert rep.report.inputs[0].name == "input.1"
    quiet = SnowflakeBackend.prepare(hot(), engine="golden", format="Q12.4")
    with warnings.catch_warnings():
        warnings.simplefilter("error", SaturationWarning)
        quiet.run([x])
    assert quiet.report.layer("y").saturated == 0


def test_the_saturation_warning_names_the_onnx_input(tmp_path: Path, capsys) -> None:
    model = _save(tmp_path, "hot.onnx", hot())
    x = _npy(tmp_path, "x.npy", np.abs(_w(1, 3, 8, 8, seed=4, scale=200)))
    for engine in ("fast", "golden"):
        assert snow_run([model, "--input", x, "--quiet", "--engine", engine]) == 0
        err = capsys.readouterr().err
        assert "input 'input.1'" in err and "input 'input'" not in err, err


# ---------------------------------------------------------------- 7. an input size the network cannot take
def test_a_wrong_input_size_names_the_node(tmp_path: Path, capsys) -> None:
    model = _save(tmp_path, "pyr.onnx", pyramid())
    assert snow_run([model, "--input", _npy(tmp_path, "even.npy", _w(1, 3, 16, 16, scale=1)), "--quiet", "--check"]) == 0
    capsys.readouterr()
    odd = _npy(tmp_path, "odd.npy", _w(1, 3, 15, 16, scale=1))
    for engine in ("fast", "golden"):
        assert snow_run([model, "--input", odd, "--quiet", "--engine", engine]) == 1
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        assert "node 'Add_12' (Add)" in err and "[1, 4, 15, 16] and [1, 4, 16, 16] do not broadcast" in err, err


# ---------------------------------------------------------------- 8. standard input
def test_a_module_piped_on_stdin_runs(tmp_path: Path, capsys, monkeypatch) -> None:
    low = tmp_path / "low.mlir"
    assert snow_opt([str(DIGITS), "-p", "nn-prepare", "-o", str(low)]) == 0
    rep = tmp_path / "r.json"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(low.read_bytes())))
    assert snow_run(["-", "--check", "--quiet", "--report", str(rep)]) == 0, capsys.readouterr().err
    report = json.loads(rep.read_text())
    assert report["model"] == "<stdin>" and report["check"]["golden_bit_exact"]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"not a module\n")))
    assert snow_run(["-", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("snow-run: <stdin>:") and len(err.strip().splitlines()) == 1 and "snowir-stdin" not in err, err


def test_a_program_or_an_image_piped_on_stdin_runs_as_from_a_file(tmp_path: Path, capsys, monkeypatch) -> None:
    example = Path(__file__).parent.parent / "examples" / "conv3x3.mlir"
    sfb = tmp_path / "conv.sfb"
    assert snow_opt([str(example), "-t", "snowflake-bin", "-o", str(sfb)]) == 0
    outs = []
    for data in (example.read_bytes(), sfb.read_bytes()):
        out = tmp_path / f"y{len(outs)}.npy"
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
        assert snow_run(["-", "--quiet", "--output", str(out)]) == 0, capsys.readouterr().err
        outs.append(np.load(out))
    assert snow_run([str(example), "--quiet", "--output", str(tmp_path / "file.npy")]) == 0
    assert all(np.array_equal(np.load(tmp_path / "file.npy"), y) for y in outs)


def test_an_empty_calibration_file_is_one_line(tmp_path: Path, capsys) -> None:
    """`--calibration` of an empty file (/dev/null, a failed download) named the file and the
    problem, not numpy's bare 'EOFError: No data left in file'."""
    empty = tmp_path / "empty.npy"
    empty.write_bytes(b"")
    digits = Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx"
    rc = snow_run([str(digits), "--format", "auto", "--calibration", str(empty), "--quiet"])
    err = capsys.readouterr().err
    assert rc != 0
    assert str(empty) in err and "cannot read calibration inputs" in err and "EOFError" not in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
