"""
Stop 53's audit: defects found by a fuzz over small ONNX graphs (shapes x machines x both engines),
each case here failing without its fix.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from onnx import helper

from onnx_util import model, rand
from snowir.driver.model_api import run_model_on_device
from snowir.hw import SnowflakeConfig
from test_resident_loads import SIXTEEN_CUS, _layer_line, _lower


def _layers(path: Path, hw_file: Path, engine: str) -> dict[str, bool]:
    run = run_model_on_device(path, check=True, hw=SnowflakeConfig.load(str(hw_file)), engine=engine)
    return {layer["name"]: layer["golden_bit_exact"] for layer in run.report["layers"] if layer["cycles"]}


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_maps_preloaded_after_an_expanding_bypass_slice_1x1_waits_for_its_rows(tmp_path: Path, engine: str) -> None:
    """A bottleneck (1x1 128 -> 16, 1x1 16 -> 16, 1x1 16 -> 128 adding the block input, bypass
    slices, one strip) then a 1x1 reading its output, over 8 x 8 on 16 CUs: the last 1x1's first
    strip is loaded by the residual conv's last kernel tile (`maps_preloaded`). Its rows past the
    residual conv's 16-channel maps words (rows 1..7 of 128 channels) were loaded at once, before
    that tile wrote their channels back: 895 of 1024 words wrong on both engines. Each row now
    waits for its output row's last pixel."""
    n = helper.make_node
    one = {"kernel_shape": [1, 1], "pads": [0, 0, 0, 0]}
    nodes = [n("Conv", ["x", "w1", "b1"], ["a"], name="a", **one), n("Relu", ["a"], ["ar"]),
             n("Conv", ["ar", "w2", "b2"], ["b"], name="b", **one), n("Relu", ["b"], ["br"]),
             n("Conv", ["br", "w3", "b3"], ["c"], name="c", **one), n("Add", ["c", "x"], ["s"]),
             n("Relu", ["s"], ["sr"]), n("Conv", ["sr", "w4", "b4"], ["y"], name="d", **one)]
    inits = {"w1": rand(16, 128, 1, 1, seed=1, scale=0.09), "b1": rand(16, seed=51, scale=0.1),
             "w2": rand(16, 16, 1, 1, seed=2, scale=0.25), "b2": rand(16, seed=52, scale=0.1),
             "w3": rand(128, 16, 1, 1, seed=3, scale=0.25), "b3": rand(128, seed=53, scale=0.1),
             "w4": rand(16, 128, 1, 1, seed=4, scale=0.09), "b4": rand(16, seed=54, scale=0.1)}
    hw_file, path = _lower(model(nodes, {"x": [1, 128, 8, 8]}, {"y": None}, inits), tmp_path, SIXTEEN_CUS)
    text = path.read_text()
    assert "bypass_slices" in _layer_line(text, "c") and "maps_preloaded" in _layer_line(text, "d")
    assert _layers(path, hw_file, engine) == {"a": True, "b": True, "c": True, "d": True}


@pytest.mark.parametrize("hw, c, k", [({"cus": 8}, 512, 128), ({}, 1024, 64)], ids=["8 CUs", "default"])
def test_a_gathered_resident_conv_without_slices_loads_its_tiles_at_once(hw: dict, c: int, k: int) -> None:
    """A strided 1x1 over 28² whose kernel tiles are resident and whose pixels are gathered, no
    bypass: one tile ahead (`resident_ahead`, merged in stop 53 for gathered convs too) its short
    MACs left the bus idle between the tiles, 35,564 against 31,681 cycles at once on 8 CUs
    (+12%), 60,003 against 56,492 on the default machine (+6%). It loads them at once now, faster,
    bit-exact on both engines."""
    from unittest import mock

    import numpy as np

    from snowir.codegen import conv as conv_codegen
    from test_lowering import conv_case

    machine = SnowflakeConfig(**hw)
    runs = {}
    for engine in ("fast", "reference"):
        run, got, want, plan, _ = conv_case(c, 28, 28, k, 1, 1, 2, 0, hw=machine, shift=12, engine=engine)
        assert np.array_equal(got, want) and plan.resident_weights and plan.gather is not None
        assert not plan.bypass_slices and not conv_codegen.resident_ahead(plan)
        runs[engine] = run.cycles
    assert runs["fast"] == runs["reference"]
    with mock.patch.object(conv_codegen, "resident_ahead", lambda p: p.resident_weights and p.tiles > 1):
        ahead, got, want, _, _ = conv_case(c, 28, 28, k, 1, 1, 2, 0, hw=machine, shift=12)
    assert np.array_equal(got, want)
    assert runs["fast"] < ahead.cycles, (runs, ahead.cycles)
