"""A layer's cold-start gather (its first strip loaded pixel by pixel: a strided 1x1's pixels, a
channel part's slice) is a counted loop of LDs (codegen/loads.load_runs with `loop`), not three
straight-line instructions a pixel that crossed instruction-cache banks; bit-exact on both
engines."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import helper

from onnx_util import model, rand
from snowir.codegen.loads import LOOP_MIN, LOOP_UNROLL, _progressions
from snowir.dialects import snowflake_asm as sf
from snowir.driver.model_api import run_model_on_device
from snowir.driver.model_run import apply_pipeline, load_model


def _parts(path: Path) -> Path:
    """A 3x3 conv over 512 channels, 8 x 8, 512 -> 16: its kernels (4,608 words) exceed the
    weights buffer, so split-kernels makes channel parts, each gathering its channels of every
    pixel (one LD a pixel; the first piece, output row 0's two input rows, is 16 pixels)."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["y"], ["o"])]
    onnx.save(model(nodes, {"x": [1, 512, 8, 8]}, {"o": None},
                    {"w": rand(16, 512, 3, 3, seed=1, scale=0.02), "b": rand(16, seed=2, scale=0.1)}), str(path))
    return path


def test_progressions_split_runs_where_a_step_changes() -> None:
    runs = [(64 * i, 512 * i, 64, 15) for i in range(20)] + [(5000, 9000, 64, 15), (5064, 9512, 32, 15)]
    assert _progressions(runs) == [(0, 20), (20, 21), (21, 22)]


def test_a_gathered_cold_start_is_a_loop_and_bit_exact(tmp_path: Path) -> None:
    path = _parts(tmp_path / "parts.onnx")
    module, _ = load_model(path)
    apply_pipeline(module, "snowflake-lower")
    ops = list(module.walk())
    labels = [op.label.data for op in ops if isinstance(op, sf.LabelOp)]
    loops = [name for name in labels if ".gather" in name]
    assert loops and all("load_maps" in name for name in loops), labels
    maps_lds = sum(1 for op in ops if isinstance(op, sf.LdOp) and op.target.data == sf.LoadTarget.MAPS)
    assert maps_lds < 64  # unrolled, one LD a pixel: 64 a part
    assert LOOP_MIN >= LOOP_UNROLL
    fast = run_model_on_device(path, check=True)
    ref = run_model_on_device(path, check=True, engine="reference")
    assert fast.report["check"]["golden_bit_exact"] is True and ref.report["check"]["golden_bit_exact"] is True
    assert fast.report["total"]["cycles"] == ref.report["total"]["cycles"]
