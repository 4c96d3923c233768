"""pad-rows: an INDP conv on the model input reads its row padding as zero rows the host
writes (nn.pad_rows), so its output rows form full groups of CUs. Exact (the zero rows add
nothing), faster, and the report's MACs stay the layer's useful ones."""

from __future__ import annotations

import sys
from pathlib import Path

import onnx
import pytest
from onnx import helper

sys.path.insert(0, str(Path(__file__).parent))
from onnx_util import model, rand  # noqa: E402

from snowir import api  # noqa: E402
from snowir.driver.model_api import run_model_on_device  # noqa: E402
from snowir.tools.snow_opt import main as snow_opt  # noqa: E402


def _conv(path: Path, c: int, size: int, k: int, kh: int, stride: int) -> Path:
    m = model([helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[kh, kh], strides=[stride] * 2,
                                pads=[kh // 2] * 4),
               helper.make_node("Relu", ["y"], ["o"])], {"x": [1, c, size, size]}, {"o": None},
              {"w": rand(k, c, kh, kh, seed=1, scale=(2 / (c * kh * kh)) ** 0.5), "b": rand(k, seed=2, scale=0.1)})
    onnx.save(m, path)
    return path


def _device(report: dict) -> list[dict]:
    return [layer for layer in report["layers"] if layer["where"] != "host"]


@pytest.mark.parametrize("c, size, kh, stride", [(3, 64, 7, 2), (1, 28, 3, 1), (3, 30, 5, 2)])
def test_padded_rows_are_exact_faster_and_count_the_same_useful_macs(tmp_path: Path, c, size, kh, stride) -> None:
    path = _conv(tmp_path / "m.onnx", c, size, 64, kh, stride)
    padded = run_model_on_device(path, check=True).report
    clipped = run_model_on_device(path, pipeline="nn-prepare{pad-rows=false}", check=True).report
    for report in (padded, clipped):
        assert report["check"]["golden_bit_exact"], report["check"]
    assert [layer["op"] for layer in padded["layers"] if layer["where"] == "host"] == ["pad_rows"]
    assert not [layer for layer in clipped["layers"] if layer["where"] == "host"]
    (a,), (b,) = _device(padded), _device(clipped)
    assert a["mode"] == b["mode"] == "INDP"
    assert a["macs"] == b["macs"]  # the zero rows' taps are not useful work
    assert a["cycles"] < b["cycles"], (a["cycles"], b["cycles"])


def test_a_coop_conv_keeps_its_padding(tmp_path: Path) -> None:
    """32 input channels run COOP, where clipped rows use every CU already: nothing to gain."""
    out = tmp_path / "nn.mlir"
    assert snow_opt([str(_conv(tmp_path / "m.onnx", 32, 16, 32, 3, 1)), "-p", "nn-prepare", "-o", str(out)]) == 0
    text = out.read_text()
    assert "nn.pad_rows" not in text and "pads = array<i64: 1, 1, 1, 1>" in text


def test_pad_rows_verifies_its_result_shape() -> None:
    text = """func.func @main(%x: tensor<1x3x8x8xf32>) -> tensor<1x3x11x8xf32> {
      %y = nn.pad_rows %x {pads = array<i64: 1, 1>} : (tensor<1x3x8x8xf32>) -> tensor<1x3x11x8xf32>
      func.return %y : tensor<1x3x11x8xf32>
    }"""
    module = api.parse_text(text)
    with pytest.raises(Exception, match="1x3x10x8"):
        module.verify()
