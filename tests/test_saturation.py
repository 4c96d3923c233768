"""No silent saturation (issue 28): the golden model and both machine engines count the values
each layer's fixed-point results lose to saturation, alike; the report carries them per layer
and per input; snow-run warns in one line naming the worst layers, and says when the output is
constant while onnxruntime's is not. Small exporter-style models stand in for the detectors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

import snowir
from snowir.driver.check import constant_output
from snowir.driver.model_api import Report
from snowir.fixedpoint import INT16_MAX, INT16_MIN, clipped, clipped_count, quantize_counted
from snowir.tools.snow_run import main as snow_run
from tests.onnx_util import model, rand

SHAPE = [1, 3, 12, 12]


def _net(w1_scale: float, input_name: str = "x") -> onnx.ModelProto:
    """conv (3x3) -> relu -> max pool -> conv (3x3), named as PyTorch's exporter names."""
    nodes = [helper.make_node("Conv", [input_name, "w1", "b1"], ["c1"], name="/backbone/conv1/Conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="/backbone/relu/Relu"),
             helper.make_node("MaxPool", ["r1"], ["p1"], name="/backbone/pool/MaxPool", kernel_shape=[2, 2],
                              strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["y"], name="/head/conv2/Conv",
                              pads=[1, 1, 1, 1])]
    inits = {"w1": rand(16, 3, 3, 3, seed=1, scale=w1_scale), "b1": rand(16, seed=2, scale=0.1),
             "w2": rand(8, 16, 3, 3, seed=3, scale=0.05), "b2": np.zeros(8, np.float32)}
    return model(nodes, {input_name: SHAPE}, {"y": [1, 8, 6, 6]}, inits)


def _x(scale: float = 1.0) -> np.ndarray:
    return rand(*SHAPE, seed=5, scale=scale)


def test_clipped_counts_what_saturation_changes() -> None:
    rounded = np.array([INT16_MAX, INT16_MAX + 1, INT16_MIN, INT16_MIN - 1, 0], np.int64)
    assert clipped(rounded, False).tolist() == [False, True, False, True, False]
    # below the range ReLU writes 0 whatever the saturation did: nothing lost there
    assert clipped(rounded, True).tolist() == [False, True, False, False, False]
    assert clipped_count(rounded, False) == 2 and clipped_count(rounded, True) == 1
    words, n = quantize_counted(np.array([127.99, 128.0, -128.0, -128.01, 255.0]), 8)
    assert n == 3 and words.tolist() == [32765, INT16_MAX, INT16_MIN, INT16_MIN, INT16_MAX]


def test_constant_output_means_collapsed_against_the_reference() -> None:
    ref = np.array([0.0, 0.5, 0.2])
    assert constant_output(np.zeros(3), ref)
    assert constant_output(np.array([1e-31, 1.2e-6, 3e-7]), ref)  # a sigmoid of saturated logits
    assert not constant_output(np.array([0.0, 0.1, 0.0]), ref)
    assert not constant_output(np.zeros(3), np.zeros(3))  # the reference is constant too


@pytest.mark.parametrize("pipeline, engines", [(None, ("fast", "reference")),
                                               ("snowflake-lower{whole-model=false}", ("fast",))])
def test_golden_and_machine_count_alike(pipeline: str | None, engines: tuple[str, ...]) -> None:
    compiled = snowir.compile(_net(w1_scale=20.0), pipeline=pipeline)
    golden = compiled.run(_x(), engine="golden").report
    conv1 = golden.layer("/backbone/conv1/Conv")
    assert conv1.saturated > 0 and conv1.saturated_share == pytest.approx(conv1.saturated / (16 * 12 * 12))
    counts = [(layer.name, layer.saturated) for layer in golden.layers]
    for engine in engines:
        result = compiled.run(_x(), engine=engine, check=True)
        assert result.report.check.golden_bit_exact  # outputs and saturated counts, layer by layer
        assert [(layer.name, layer.saturated) for layer in result.report.layers] == counts
    # a max pool picks among values already in range: it never saturates
    assert all(layer.saturated == 0 for layer in golden.layers if layer.op == "max_pool")


def test_a_fused_pool_counts_with_its_conv() -> None:
    """ResNet's stem with the max pool in the INDP conv's program: the conv's row has the count."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[7, 7], strides=[2, 2],
                              pads=[3] * 4),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["o"], name="pool", kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)]
    m = model(nodes, {"x": [1, 3, 40, 40]}, {"o": [1, 64, 10, 10]},
              {"w": rand(64, 3, 7, 7, seed=1, scale=0.08), "b": rand(64, seed=2, scale=0.1)})
    x = rand(1, 3, 40, 40, seed=3, scale=60.0)
    compiled = snowir.compile(m)
    golden = compiled.run(x, engine="golden").report
    report = compiled.run(x, check=True).report
    assert report.check.golden_bit_exact and report.layer("conv").computes == "pool"
    assert report.layer("conv").saturated == golden.layer("conv").saturated > 0
    assert report.layer("pool").saturated == 0


def test_report_carries_the_counts(tmp_path: Path) -> None:
    result = snowir.compile(_net(w1_scale=20.0)).run(_x())
    data = result.report.to_json()
    row = next(r for r in data["layers"] if r["name"] == "/backbone/conv1/Conv")
    assert row["saturated"] > 0 and 0 < row["saturated_share"] < 1
    assert data["inputs"] == [{"name": "x", "format": "Q8.8", "saturated": 0, "saturated_share": 0.0}]
    back = Report.from_json(json.loads(json.dumps(data)))
    assert back == result.report
    # a report written before the fields existed still reads, with nothing saturated
    for r in data["layers"]:
        del r["saturated"], r["saturated_share"]
    del data["inputs"]
    assert Report.from_json(data).layer("/backbone/conv1/Conv").saturated == 0


def _snow_run(tmp_path: Path, m: onnx.ModelProto, x: np.ndarray, capsys, *flags: str) -> tuple[int, list[str]]:
    path, inp = tmp_path / "m.onnx", tmp_path / "x.npy"
    onnx.save(m, path)
    np.save(inp, x)
    rc = snow_run([str(path), "--input", str(inp), "--quiet", *flags])
    return rc, [line for line in capsys.readouterr().err.splitlines() if "warning" in line]


def test_snow_run_warns_once_naming_the_worst_layers(tmp_path: Path, capsys) -> None:
    rc, warnings = _snow_run(tmp_path, _net(w1_scale=20.0), _x(), capsys, "--report", str(tmp_path / "r.json"))
    assert rc == 0 and len(warnings) == 1, warnings
    report = json.loads((tmp_path / "r.json").read_text())
    worst = max(report["layers"], key=lambda r: r["saturated_share"])
    assert worst["name"] == "/backbone/conv1/Conv"
    assert warnings[0].startswith("snow-run: warning: Q8.8 saturates, values clipped: /backbone/conv1/Conv "
                                  f"{100 * worst['saturated_share']:.1f}% ({worst['saturated']:,})")
    assert warnings[0].endswith("try --format auto --calibration X.npy")


def test_a_model_that_fits_gets_no_warning(tmp_path: Path, capsys) -> None:
    rc, warnings = _snow_run(tmp_path, _net(w1_scale=0.2), _x(), capsys, "--check")
    assert rc == 0 and warnings == []


def test_raw_pixels_saturate_the_input(tmp_path: Path, capsys) -> None:
    """A YOLO-like detector reads 0..255 pixels (its first conv divides): Q8.8 clips them at 128."""
    pixels = np.random.default_rng(0).integers(0, 256, SHAPE).astype(np.float32)
    m = _net(w1_scale=1 / 255, input_name="images")
    rc, warnings = _snow_run(tmp_path, m, pixels, capsys, "--report", str(tmp_path / "r.json"))
    assert rc == 0 and len(warnings) == 1
    share = float((pixels >= 128).mean())
    assert f"input 'images' {100 * share:.1f}%" in warnings[0]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["inputs"][0]["saturated"] == int((pixels >= 128).sum())


def test_a_zeroed_output_says_so(tmp_path: Path, capsys) -> None:
    """fp32: conv1 reaches ~1,700 (as PP-OCR's feature pyramid does), conv2 takes its channels'
    mean off and ReLU keeps what is above; Q8.8 clips conv1 at 128 and conv2's bias at -128, so
    every output is 0."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="/neck/conv1/Conv", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c1", "w2", "b2"], ["c2"], name="/head/conv2/Conv"),
             helper.make_node("Relu", ["c2"], ["y"], name="/head/Relu")]
    inits = {"w1": rand(16, 3, 3, 3, seed=1, scale=30.0), "b1": np.full(16, 1700.0, np.float32),
             "w2": np.full((8, 16, 1, 1), 1 / 16, np.float32), "b2": np.full(8, -1700.0, np.float32)}
    m = model(nodes, {"x": SHAPE}, {"y": [1, 8, 12, 12]}, inits)
    result = snowir.compile(m).run(_x(), check=True)
    assert result.report.check.constant_output and not result.outputs[0].any()
    share = result.report.layer("/neck/conv1/Conv").saturated_share
    assert share > 0.3  # its bias is clipped to 128 too (a constant's quantisation: the quantize pass says so)
    capsys.readouterr()
    rc, warnings = _snow_run(tmp_path, m, _x(), capsys, "--check")
    biases, warnings = warnings[:1], warnings[1:]
    assert biases[0].startswith("quantize: warning: constants saturate in their formats: /neck/conv1/Conv's bias 16 "
                                "of 16 (largest 1700, Q8.8 holds 128), /head/conv2/Conv's bias 8 of 8")
    assert rc == 1 and len(warnings) == 1  # the SNR fails the check; the warning says why
    assert f"/neck/conv1/Conv {100 * share:.1f}%" in warnings[0]
    assert "output 0 is constant (0 everywhere) while onnxruntime's is not" in warnings[0]


def test_a_bias_its_format_cannot_hold_is_named_at_compile_time(tmp_path: Path, capsys) -> None:
    """A constant saturates when it is quantised, before any write-back: the quantize pass says so
    in one line (a Q8.8 bias of 200 becomes 127.996), and calibrated auto, which gives the bias the
    output's wider format, does not."""
    b = rand(16, seed=1, scale=0.1)
    b[3] = 200.0
    m = model([helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], name="conv1")], {"x": [1, 3, 8, 8]},
              {"y": [1, 16, 8, 8]}, {"w": rand(16, 3, 3, 3, scale=0.3), "b": b})
    path, cal, x = tmp_path / "m.onnx", tmp_path / "cal.npy", tmp_path / "x.npy"
    onnx.save(m, path)
    np.save(cal, np.random.default_rng(0).random((4, 1, 3, 8, 8)).astype(np.float32))
    np.save(x, np.random.default_rng(1).random((1, 3, 8, 8)).astype(np.float32))
    assert snow_run([str(path), "--input", str(x), "--engine", "golden", "--quiet"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("quantize:")]
    assert lines == ["quantize: warning: constants saturate in their formats: conv1's bias 1 of 16 (largest 200, "
                     "Q8.8 holds 128); try format=auto with calibration data"]
    assert snow_run([str(path), "--input", str(x), "--format", "auto", "--calibration", str(cal), "--engine", "golden",
                     "--quiet"]) == 0
    assert "quantize:" not in capsys.readouterr().err
