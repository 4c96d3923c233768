"""
quantize{format=auto}: per-tensor formats from calibration, bit-exact on the machine, joint
formats where the hardware adds or places tensors without rescaling, one-line errors.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper
from xdsl.context import Context

from snowir.dialects import nn
from snowir.fixedpoint import MAX_WB_SHIFT
from snowir.driver.model_api import run_model_on_device
from snowir.nn_util import conv_shape
from snowir.frontend.onnx_import import import_onnx
from snowir.passes.pipelines import NNPreparePass
from snowir.tools.snow_run import main as snow_run_main

sys.path.insert(0, str(Path(__file__).parent))
from onnx_util import model, rand  # noqa: E402

DIGITS = Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx"


def snow_run(argv: list[str]) -> int:
    try:
        return snow_run_main(argv)
    except SystemExit as e:
        return int(e.code or 0)


def test_auto_beats_q88_on_digits_and_stays_bit_exact(tmp_path: Path) -> None:
    """Calibrated on image-like inputs, auto beats Q8.8 on an input like them; without calibration
    data (synthetic inputs) it computes what Q8.8 computes."""
    cal = tmp_path / "cal.npy"
    np.save(cal, np.random.default_rng(0).random((16, 1, 8, 8)).astype(np.float32))
    x = np.random.default_rng(1).random((1, 1, 8, 8)).astype(np.float32)
    pipelines = {"Q8.8": "nn-prepare{format=Q8.8}", "auto": f"nn-prepare{{format=auto calibration={cal}}}",
                 "synthetic": "nn-prepare{format=auto}"}
    runs = {k: run_model_on_device(DIGITS, x, pipeline=p, check=True).report["check"] for k, p in pipelines.items()}
    assert runs["auto"]["golden_bit_exact"] is True and runs["synthetic"]["golden_bit_exact"] is True
    assert runs["auto"]["snr_db"] > runs["Q8.8"]["snr_db"] + 3
    assert runs["synthetic"]["snr_db"] == runs["Q8.8"]["snr_db"]
    module = import_onnx(DIGITS)
    NNPreparePass(format="auto", calibration=str(cal)).apply(Context(), module)
    formats = {str(op.results[0].type.get_element_type()) for op in module.walk()
               if op.name.startswith("nn.") and op.results and not isinstance(op, nn.ConstantOp)}
    assert len(formats) > 1  # per tensor, not one global format


def _branchy(tmp_path: Path) -> Path:
    """A conv chain with a residual add and a channel concat whose inputs differ in range x8."""
    c, h = 16, 10
    w = {f"w{i}": rand(c, c, 3, 3, seed=i, scale=0.1) for i in range(5)}
    b = {f"b{i}": rand(c, seed=10 + i, scale=0.1) for i in range(5)}
    w["w3"] = w["w3"] * 8  # a branch eight times larger than its concat partner
    conv = lambda i, x, y: helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [y], kernel_shape=[3, 3], pads=[1] * 4)  # noqa: E731
    nodes = [conv(0, "x", "a0"), helper.make_node("Relu", ["a0"], ["a"]),
             conv(1, "a", "r0"), helper.make_node("Add", ["r0", "a"], ["r1"]), helper.make_node("Relu", ["r1"], ["r"]),
             conv(2, "r", "p"), conv(3, "r", "q"), helper.make_node("Concat", ["p", "q"], ["cat"], axis=1)]
    wcat = rand(c, 2 * c, 1, 1, seed=20, scale=0.1)
    nodes.append(helper.make_node("Conv", ["cat", "w5", "b4"], ["o"], kernel_shape=[1, 1]))
    m = model(nodes, {"x": [1, c, h, h]}, {"o": [1, c, h, h]}, {**w, **b, "w5": wcat})
    path = tmp_path / "branchy.onnx"
    onnx.save(m, path)
    return path


def test_auto_formats_are_joint_where_the_hardware_does_not_rescale(tmp_path: Path) -> None:
    path = _branchy(tmp_path)
    cal = tmp_path / "cal.npy"  # N(0, 1) given as calibration data: per-tensor formats (synthetic ones are Q8.8's)
    np.save(cal, np.random.default_rng(0).standard_normal((8, 1, 16, 10, 10)).astype(np.float32))
    module = import_onnx(path)
    NNPreparePass(format="auto", calibration=str(cal)).apply(Context(), module)
    convs = [op for op in module.walk() if isinstance(op, nn.Conv2dOp)]
    residual = [op for op in convs if op.bypass is not None]
    assert residual and all(op.bypass.type == op.output.type for op in residual)
    concats = [op for op in module.walk() if isinstance(op, nn.ConcatOp)]
    assert concats and all(len({v.type.get_element_type() for v in (*op.operands, op.results[0])}) == 1
                           for op in concats)
    assert all(1 <= conv_shape(op).shift <= MAX_WB_SHIFT for op in convs)
    assert all("calibrated_max" in op.attributes for op in convs)
    assert len({op.output.type.get_element_type() for op in convs}) > 1
    run = run_model_on_device(path, pipeline=f"nn-prepare{{format=auto calibration={cal}}}", check=True)
    assert run.report["check"]["golden_bit_exact"] is True and run.report["check"]["snr_db"] > 40


def test_calibration_file(tmp_path: Path) -> None:
    """Calibration on image-like inputs: an input like them runs within tolerance; the default
    N(0, 1) input, far outside what was calibrated, saturates (the documented failure mode)."""
    good = tmp_path / "cal.npy"
    np.save(good, np.random.default_rng(0).random((16, 1, 8, 8)).astype(np.float32))  # N samples, batch dim dropped
    x = tmp_path / "x.npy"
    np.save(x, np.random.default_rng(1).random((1, 1, 8, 8)).astype(np.float32))
    cal = ["--format", "auto", "--calibration", str(good), "--check", "--quiet"]
    assert snow_run([str(DIGITS), *cal, "--input", str(x)]) == 0
    assert snow_run([str(DIGITS), *cal]) == 1  # SNR below 30 dB: outside the calibrated range
    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros((4, 3, 8, 8), np.float32))
    assert snow_run([str(DIGITS), "--format", "auto", "--calibration", str(bad), "--quiet"]) == 1
    assert snow_run([str(DIGITS), "--format", "Q8.8", "--calibration", str(good), "--quiet"]) == 1


@pytest.mark.parametrize("fmt", ["Q9.9", "auto"])
def test_format_errors_are_one_line(tmp_path: Path, capsys, fmt: str) -> None:
    args = [str(DIGITS), "--format", fmt, "--quiet"] + (["--pipeline", "nn-prepare"] if fmt == "auto" else [])
    assert snow_run(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
