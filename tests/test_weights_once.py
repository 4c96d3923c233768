"""Weights stored once (issue 29): from the tile level on, a device conv's nn constant refers to
its layer's packed weight image (`#nn.packed`), so lowered text is not the weights twice; the
golden model reads them back from wherever the lowering put the image, bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from snowir import api
from snowir.dialects import nn
from snowir.golden import Golden, constant_array
from snowir.tools.snow_opt import main as snow_opt
from tests.onnx_util import model, rand


def wide_convs() -> onnx.ModelProto:
    """Three 3x3 convs of 128 channels: weights dominate the text, as in a real net."""
    nodes, inits = [], {}
    prev = "x"
    for i in range(3):
        nodes.append(helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], name=f"Conv_{i}", pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"Relu_{i}"))
        inits[f"w{i}"] = rand(128, 16 if i == 0 else 128, 3, 3, seed=i, scale=0.05)
        inits[f"b{i}"] = rand(128, seed=10 + i, scale=0.1)
        prev = f"r{i}"
    return model(nodes, {"x": [1, 16, 8, 8]}, {prev: [1, 128, 8, 8]}, inits)


def test_lowered_text_holds_the_weights_once(tmp_path: Path) -> None:
    path = tmp_path / "wide.onnx"
    onnx.save(wide_convs(), path)
    nn_text, low_text = tmp_path / "nn.mlir", tmp_path / "low.mlir"
    assert snow_opt([str(path), "-p", "nn-prepare", "-o", str(nn_text)]) == 0
    assert snow_opt([str(nn_text), "-p", "snowflake-lower", "-o", str(low_text)]) == 0
    ratio = low_text.stat().st_size / nn_text.stat().st_size
    assert ratio <= 1.2, ratio  # was 2.1: the nn constants stayed beside the packed images
    assert low_text.read_text().count('#nn.packed<"') == 3


def test_golden_reads_packed_weights_back_at_every_level(tmp_path: Path) -> None:
    """The same weights from the nn constant, the tile layer's region, a layer's image and a
    segment's image: the golden model's outputs are equal at every level."""
    m = api.parse_text(_nn_text(tmp_path))
    weights = {op.result.name_hint: constant_array(op) for op in m.walk()
               if isinstance(op, nn.ConstantOp) and len(op.result.type.get_shape()) == 4}
    x = rand(1, 16, 8, 8, seed=5)
    want = Golden(api.parse_text(_nn_text(tmp_path))).run(x)
    for pipeline in ("nn-to-tile,tile-loop-order", "snowflake-lower{whole-model=false}", "snowflake-lower"):
        lowered = api.parse_text(_nn_text(tmp_path))
        from snowir.driver.model_run import apply_pipeline

        apply_pipeline(lowered, pipeline)
        packed = [op for op in lowered.walk() if isinstance(op, nn.ConstantOp)
                  and isinstance(op.value, nn.PackedWeightsAttr)]
        assert len(packed) == 3, pipeline
        for op in packed:
            assert np.array_equal(constant_array(op), weights[op.result.name_hint]), (pipeline, op.result.name_hint)
        got = Golden(lowered).run(x)
        assert all(np.array_equal(a, b) for a, b in zip(want, got)), pipeline


def test_a_missing_packed_image_is_one_clear_error(tmp_path: Path) -> None:
    text = _nn_text(tmp_path)
    lowered = api.parse_text(text)
    from snowir.driver.model_run import apply_pipeline

    apply_pipeline(lowered, "nn-to-tile")
    for op in list(lowered.ops):
        if op.name == "tile.layer":
            op.detach()
            op.erase()
    const = next(op for op in lowered.walk() if isinstance(op, nn.ConstantOp)
                 and isinstance(op.value, nn.PackedWeightsAttr))
    try:
        constant_array(const)
    except Exception as e:  # noqa: BLE001 - the message is what is checked
        assert "packed weights are not in the module" in str(e) and "Conv_" in str(e), e
    else:
        raise AssertionError("no error")


def _nn_text(tmp_path: Path) -> str:
    out = tmp_path / "nn.mlir"
    if not out.exists():
        path = tmp_path / "wide.onnx"
        onnx.save(wide_convs(), path)
        assert snow_opt([str(path), "-p", "nn-prepare", "-o", str(out)]) == 0
    return out.read_text()


def test_a_model_larger_than_dram_runs_one_program_per_layer(tmp_path: Path, capsys) -> None:
    """Every weight resident does not fit (VGG-19's 287 MB on a 256 MB machine): allocate-dram
    says so and leaves one program per layer, bit-exact; per-layer-if-too-big=false refuses."""
    import dataclasses

    from snowir.hw import SnowflakeConfig
    from snowir.tools.snow_run import main as snow_run

    path, hw = tmp_path / "wide.onnx", tmp_path / "hw.json"
    onnx.save(wide_convs(), path)
    dataclasses.replace(SnowflakeConfig(), dram_bytes=640 * 1024).save(hw)
    report = tmp_path / "r.json"
    assert snow_run([str(path), "--hw", str(hw), "--check", "--quiet", "--report", str(report)]) == 0
    err = capsys.readouterr().err
    assert "warning: allocate-dram: the model needs 671,744 bytes of DRAM, the machine has 655,360" in err
    import json

    assert json.loads(report.read_text())["check"]["golden_bit_exact"]
    out = tmp_path / "low.mlir"
    assert snow_opt([str(path), "-p", f"snowflake-lower{{hw={hw}}}", "-o", str(out)]) == 0
    assert out.read_text().count("snowflake_asm.image @") == 3  # one per layer, no segment image
    capsys.readouterr()
    assert snow_opt([str(path), "-p", f"nn-prepare,nn-to-tile{{hw={hw}}},allocate-dram{{hw={hw} "
                                      "per-layer-if-too-big=false}"]) == 1
    assert "the model needs 671,744 bytes of DRAM" in capsys.readouterr().err
