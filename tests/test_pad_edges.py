"""Convs with padding as large as the kernel: some output pixels' windows cover padding alone, and
their output is the bias (+ bypass, ReLU). The device gives it with a one-word MAC against a zero
word of the kernel's bias block (codegen/pixels._bias_only); these convs once failed to verify
("trace 0 out of range") or left their border pixels unwritten (not bit-exact)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

sys.path.insert(0, str(Path(__file__).parent))
from onnx_util import model, ort_run, rand, snow_run  # noqa: E402

from snowir.driver.model_api import run_model_on_device  # noqa: E402
from snowir.hw import DEFAULT  # noqa: E402
from snowir.plan.conv import choose_mode  # noqa: E402
from snowir.plan.shapes import ConvShape, LoweringError  # noqa: E402
from snowir.tools.snow_opt import main as snow_opt  # noqa: E402

MIN_SNR_DB = 35.0  # Q8.8 against onnxruntime fp32 (these convs measure 50-56 dB)


def _padded_conv(path: Path, c: int, h: int, w: int, k: int, kh: int, stride: int, pads: list[int],
                 before: bool = False, residual: bool = False) -> Path:
    """Conv (kh x kh, `pads` in ONNX order top, left, bottom, right) + ReLU; `before`: a 1x1 conv
    first, so the padded conv does not read the model input (where nn-prepare rewrites some
    convs on the host); `residual`: plus a 1x1 conv with pads 2 of the input (also with windows
    of padding alone) as its bypass."""
    nodes, inits, x = [], {}, "x"
    if before:
        nodes.append(helper.make_node("Conv", ["x", "w0"], ["x0"], kernel_shape=[1, 1]))
        inits["w0"] = rand(c, c, 1, 1, seed=3, scale=0.5)
        x = "x0"
    nodes.append(helper.make_node("Conv", [x, "w", "b"], ["y"], kernel_shape=[kh, kh], strides=[stride] * 2,
                                  pads=pads))
    inits |= {"w": rand(k, c, kh, kh, seed=1, scale=(2 / (c * kh * kh)) ** 0.5), "b": rand(k, seed=2, scale=0.5)}
    last = "y"
    if residual:
        nodes += [helper.make_node("Conv", [x, "wr", "br"], ["r"], kernel_shape=[1, 1], pads=[2] * 4),
                  helper.make_node("Add", ["y", "r"], ["z"])]
        inits |= {"wr": rand(k, c, 1, 1, seed=4, scale=0.5), "br": rand(k, seed=5, scale=0.5)}
        last = "z"
    nodes.append(helper.make_node("Relu", [last], ["o"]))
    onnx.save(model(nodes, {"x": [1, c, h, w]}, {"o": None}, inits), path)
    return path


CASES = {  # (c, h, w, k, kh, stride, pads, before)
    "3x3_pad3": (4, 6, 6, 8, 3, 1, [3, 3, 3, 3], False),
    "3x3_pad3_inner": (4, 6, 6, 8, 3, 1, [3, 3, 3, 3], True),
    "3x3_pad3_stride2": (4, 6, 6, 8, 3, 2, [3, 3, 3, 3], True),
    "3x3_pad3_stride2_input": (4, 6, 6, 8, 3, 2, [3, 3, 3, 3], False),
    "3x3_pad5_32ch": (32, 6, 7, 32, 3, 1, [5, 4, 3, 5], True),
    "2x2_pad1122": (4, 6, 6, 8, 2, 1, [1, 1, 2, 2], False),
    "2x2_pad0213": (4, 6, 6, 8, 2, 1, [0, 2, 1, 3], False),
    "2x2_pad2_stride2": (4, 7, 7, 8, 2, 2, [2, 2, 2, 2], True),
    "1x1_pad1": (4, 6, 6, 8, 1, 1, [1, 1, 1, 1], False),
    "1x1_pad1_32ch": (32, 5, 5, 32, 1, 1, [1, 1, 1, 1], True),
    "1x1_pad1_stride2": (4, 6, 6, 8, 1, 2, [1, 1, 1, 1], True),
    "1x1_pad0102": (4, 6, 6, 8, 1, 1, [0, 1, 0, 2], True),
    "3x3_pad7_strips": (256, 32, 32, 16, 3, 1, [7, 7, 7, 7], True),  # maps strips, the last mostly padding
    "3x3_pad3_column_tiled": (256, 4, 128, 16, 3, 1, [3, 3, 3, 3], True),  # rows too wide: column bands
    "3x3_pad3_64k_indp_shape": (4, 6, 6, 64, 3, 1, [3, 3, 3, 3], True),  # INDP by channels: refused there
}


def _check(path: Path) -> dict:
    report = run_model_on_device(path, check=True).report
    assert report["check"]["golden_bit_exact"], report["check"]
    assert report["check"]["snr_db"] >= MIN_SNR_DB, report["check"]  # against onnxruntime fp32
    return report


@pytest.mark.parametrize("case", sorted(CASES))
def test_windows_of_padding_alone_are_bit_exact_on_the_device(tmp_path: Path, case: str) -> None:
    c, h, w, k, kh, stride, pads, before = CASES[case]
    report = _check(_padded_conv(tmp_path / "m.onnx", c, h, w, k, kh, stride, pads, before))
    device = [layer for layer in report["layers"] if layer["where"] != "host" and layer["name"] == "y"]
    assert len(device) == 1 and device[0]["mode"] == "COOP", report["layers"]


def test_a_residual_conv_with_windows_of_padding_alone_adds_its_bypass_to_the_bias(tmp_path: Path) -> None:
    """Both convs of `y + r` have all-padding pixels; the add is fused into one as its bypass."""
    report = _check(_padded_conv(tmp_path / "m.onnx", 32, 6, 6, 32, 3, 1, [3] * 4, before=True, residual=True))
    assert not [layer for layer in report["layers"] if layer["where"] == "host"], report["layers"]


def test_output_matches_onnxruntime_pixel_by_pixel(tmp_path: Path) -> None:
    """The bias-only border, with its ReLU, against onnxruntime through the ONNX backend."""
    from snowir.backend import SnowflakeBackend

    m = onnx.load(_padded_conv(tmp_path / "m.onnx", 4, 6, 6, 8, 2, 1, [1, 1, 2, 2], before=True))
    x = rand(1, 4, 6, 6, seed=7)
    (y,) = SnowflakeBackend.prepare(m, engine="machine").run([x])
    want = ort_run(m, x)
    assert y.shape == want.shape == (1, 8, 8, 8)
    np.testing.assert_allclose(y, want, atol=0.05)
    # the last two rows and columns' windows are padding alone: relu(bias), one value per channel
    b = np.maximum(onnx.numpy_helper.to_array(next(i for i in m.graph.initializer if i.name == "b")), 0)
    np.testing.assert_allclose(y[0, :, -1, :], np.broadcast_to(b[:, None], (8, 8)), atol=1 / 256)


def test_rows_of_padding_alone_verify_at_the_tile_level(tmp_path: Path) -> None:
    """A pad of 5 over a 3x3 kernel: tile windows of such rows are one-word MACs, not rows <= 0."""
    path = _padded_conv(tmp_path / "m.onnx", 32, 6, 6, 32, 3, 1, [5] * 4, before=True)
    assert snow_opt([str(path), "-p", "nn-prepare,nn-to-tile", "-o", str(tmp_path / "t.mlir")]) == 0
    assert snow_run([str(path), "--check"]) == 0


def test_indp_is_not_chosen_and_refused_in_one_line_for_windows_of_padding_alone(tmp_path: Path,
                                                                                 capsys) -> None:
    """INDP's interleaved kernels hold no zero word for the bias-only MAC."""
    s = ConvShape(c=4, h=6, w=6, k=64, kh=3, kw=3, sy=1, sx=1, pt=3, pl=3, pb=3, pr=3, relu=True, shift=8)
    assert s.empty_windows and choose_mode(s, DEFAULT, False) == "COOP"
    assert choose_mode(replace_pads(s, 1), DEFAULT, False) == "INDP"  # the same conv without them
    with pytest.raises(LoweringError, match="padding alone"):
        choose_mode(s, DEFAULT, False, "INDP")
    path = _padded_conv(tmp_path / "m.onnx", 4, 6, 6, 64, 3, 1, [3] * 4)
    assert snow_run([str(path), "--pipeline", "nn-prepare,nn-to-tile{mode=INDP}"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err[-1:]) == 1 and "padding alone" in err[-1] and "Traceback" not in "\n".join(err), err


def replace_pads(s: ConvShape, p: int) -> ConvShape:
    from dataclasses import replace

    return replace(s, pt=p, pl=p, pb=p, pr=p)


def test_a_concat_of_convs_with_windows_of_padding_alone_writes_their_channel_slices(tmp_path: Path) -> None:
    """The bias-only pixels step by the concat's pixel (codegen/pixels.out_pixel), not by K."""
    nodes = [helper.make_node("Conv", ["x", "w0"], ["x0"], kernel_shape=[1, 1]),
             helper.make_node("Conv", ["x0", "wa", "ba"], ["a"], kernel_shape=[3, 3], pads=[3] * 4),
             helper.make_node("Conv", ["x0", "wb", "bb"], ["b"], kernel_shape=[1, 1], pads=[2] * 4),
             helper.make_node("Concat", ["a", "b"], ["o"], axis=1)]
    inits = {"w0": rand(16, 16, 1, 1, seed=3, scale=0.3), "wa": rand(16, 16, 3, 3, seed=1, scale=0.1),
             "ba": rand(16, seed=2, scale=0.5), "wb": rand(32, 16, 1, 1, seed=4, scale=0.3), "bb": rand(32, seed=5)}
    path = tmp_path / "m.onnx"
    onnx.save(model(nodes, {"x": [1, 16, 6, 6]}, {"o": None}, inits), path)
    report = _check(path)
    assert not [layer for layer in report["layers"] if layer["where"] == "host"], report["layers"]
