"""The conv that carries the next conv's preload (`kernels_preloaded`, snowir/plan/weights_end.py)
issues it where it costs that conv least: a resident conv whose resident tiles lie below the words
the preload lands on issues it from its last strip's tile 0 (`preload_at_last_strip`), so the
loads have the strip's tiles of MACs to land in rather than its last tile's (AlexNet-OWT's conv1:
+2,009 cycles with the preload in its last tile, +66 from its last strip's tile 0)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import helper

from onnx_util import model, rand
from snowir.codegen import conv as conv_codegen
from snowir.dialects import tile
from snowir.driver.model_api import run_model_on_device
from snowir.driver.model_run import apply_pipeline, load_model
from snowir.plan.weights_end import preload_at_last_strip
from snowir.tile.read import conv_plan_of


def _pair(path: Path) -> Path:
    """A 1x1 256 -> 32 (ReLU) then a 5x5 32 -> 96 at 27 x 27 (Inception v1's n30 -> n32): the 1x1
    keeps its two kernel tiles resident (words [0, 544)) over 7 strips, and the 5x5's first tile
    starts in the second weights slot (word 2048), preloaded by the 1x1."""
    nodes = [helper.make_node("Conv", ["x", "wa", "ba"], ["a"], kernel_shape=[1, 1]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "wb", "bb"], ["y"], kernel_shape=[5, 5], pads=[2, 2, 2, 2])]
    inits = {"wa": rand(32, 256, 1, 1, seed=1, scale=0.05), "ba": rand(32, seed=2, scale=0.1),
             "wb": rand(96, 32, 5, 5, seed=3, scale=0.05), "bb": rand(96, seed=4, scale=0.1)}
    onnx.save(model(nodes, {"x": [1, 256, 27, 27]}, {"y": [1, 96, 27, 27]}, inits), str(path))
    return path


def _cycles(path: Path, engine: str = "fast") -> dict[str, int]:
    run = run_model_on_device(path, check=True, engine=engine)
    assert run.report["check"]["golden_bit_exact"] is True
    return {layer["name"]: layer["cycles"] for layer in run.report["layers"] if layer["cycles"]}


def test_a_resident_conv_preloads_from_its_last_strips_first_tile(tmp_path: Path, monkeypatch) -> None:
    """The pair's 1x1 issues the 5x5's tile 0 from its last strip's tile 0: the 5x5 gains (its
    kernels land sooner) and the 1x1 is no slower than with the loads in its last tile; bit-exact."""
    path = _pair(tmp_path / "pair.onnx")
    module, _ = load_model(path)
    apply_pipeline(module, "nn-prepare,nn-to-tile,tile-loop-order,allocate-dram")
    a, b = (op for op in module.ops if isinstance(op, tile.LayerOp))
    assert b.kernels_preloaded is not None
    pa, pb = conv_plan_of(a), conv_plan_of(b)
    assert pa.resident_weights and pa.tiles == 2 and len(pa.strips) > 1
    assert pb.first_slot >= pa.tiles * pa.shape.kernel_words  # above every resident tile
    early = _cycles(path)
    monkeypatch.setattr(conv_codegen, "preload_at_last_strip", lambda plan: False)  # in the last tile
    late = _cycles(path)
    first, second = early
    assert early[second] < late[second], (early, late)
    assert early[first] <= late[first], (early, late)


def test_preload_at_last_strip_only_above_the_resident_tiles(tmp_path: Path) -> None:
    """Words the preload shares with a resident tile are read by every strip: then the last tile
    carries it, as does a conv that is not resident or has one strip."""
    from dataclasses import replace

    path = _pair(tmp_path / "pair.onnx")
    module, _ = load_model(path)
    apply_pipeline(module, "nn-prepare,nn-to-tile,tile-loop-order,allocate-dram")
    a, _ = (op for op in module.ops if isinstance(op, tile.LayerOp))
    pa = conv_plan_of(a)
    preload = ((pa.w_addr, 800, 0, 2048),)
    assert preload_at_last_strip(replace(pa, preload=preload))
    assert not preload_at_last_strip(pa)  # nothing to carry
    assert not preload_at_last_strip(replace(pa, preload=((pa.w_addr, 800, 0, 0),)))  # tile 0's words
    assert not preload_at_last_strip(replace(pa, preload=preload, resident_weights=False))
    assert not preload_at_last_strip(replace(pa, preload=preload, strips=pa.strips[-1:]))


def test_the_early_preload_runs_on_the_reference_engine(tmp_path: Path) -> None:
    """The reference engine faults on a load over words a pending MAC reads: none here."""
    path = _pair(tmp_path / "pair.onnx")
    assert _cycles(path, "reference") == _cycles(path)


def _carrier(path: Path, c: int, h: int, k: int, kh: int = 1, residual: bool = False, pool: bool = False) -> Path:
    """A kh x kh c -> k conv (ReLU; `residual`: plus a second input, its bypass; `pool`: a fused
    3x3/2 max pool after it) then a 5x5 k -> 96 whose kernel tile 0 it preloads."""
    nodes = [helper.make_node("Conv", ["x", "wa", "ba"], ["a"], kernel_shape=[kh, kh], pads=[kh // 2] * 4)]
    inputs, cur = {"x": [1, c, h, h]}, "a"
    if residual:
        inputs["r"] = [1, k, h, h]
        nodes.append(helper.make_node("Add", ["a", "r"], ["ad"]))
        cur = "ad"
    nodes.append(helper.make_node("Relu", [cur], ["ar"]))
    cur = "ar"
    if pool:
        nodes.append(helper.make_node("MaxPool", [cur], ["p"], kernel_shape=[3, 3], strides=[2, 2]))
        cur = "p"
    nodes.append(helper.make_node("Conv", [cur, "wb", "bb"], ["y"], kernel_shape=[5, 5], pads=[2, 2, 2, 2]))
    inits = {"wa": rand(k, c, kh, kh, seed=1, scale=0.05), "ba": rand(k, seed=2, scale=0.1),
             "wb": rand(96, k, 5, 5, seed=3, scale=0.05), "bb": rand(96, seed=4, scale=0.1)}
    onnx.save(model(nodes, inputs, {"y": None}, inits), str(path))
    return path


@pytest.mark.parametrize("c, h, k, kh, residual, pool, tiles, early", [
    (256, 27, 32, 1, True, False, 2, True),   # a residual carrier: its bypass rows' loads (R_LEN) after the preload's
    (256, 27, 64, 1, True, False, 4, True),   # tiles 1-2 a counted loop after tile 0's preload
    (128, 27, 48, 1, False, False, 3, True),  # one peeled middle tile
    (256, 28, 64, 1, False, True, 4, True),   # a fused pool's rings after the preload (AlexNet-OWT conv1's kind)
    # the 5x5's tile 0 lands on word 0, the carrier's resident tile 0 (issued from tile 0 it lost
    # bit-exactness on both engines, the later strips reading the 5x5's kernels): the last tile carries it
    (64, 27, 64, 3, False, True, 4, False),
])
def test_the_early_preload_is_safe_in_every_carrier(tmp_path: Path, c, h, k, kh, residual, pool, tiles,
                                                     early) -> None:
    """Audit (stop 54): carriers the pair above does not cover issue the preload from their last
    strip's tile 0 (its R_TMP, R_LEN and R_WSRC then clobbered before the strip's later tiles and
    the carrier's own later loads) and run bit-exact, with the same cycles, on the reference engine
    (which faults on a load over words a pending MAC reads) as on the fast one; one whose preload
    lands on its resident tiles keeps it in its last tile, also bit-exact."""
    from dataclasses import replace

    from snowir.hw import SnowflakeConfig
    from snowir.plan.weights_end import preload_loads

    path = _carrier(tmp_path / "carrier.onnx", c, h, k, kh, residual=residual, pool=pool)
    module, _ = load_model(path)
    apply_pipeline(module, "nn-prepare,nn-to-tile,tile-loop-order,allocate-dram")
    convs = [op for op in module.ops if isinstance(op, tile.LayerOp) and op.kernels_preloaded is not None]
    assert len(convs) == 1
    layers = [op for op in module.ops if isinstance(op, tile.LayerOp)]
    carrier = conv_plan_of(layers[0])  # codegen's plan (passes/convert/layer_programs.conv_program)
    carrier = replace(carrier, preload=preload_loads(conv_plan_of(convs[0]), SnowflakeConfig()))
    assert carrier.tiles == tiles and carrier.resident_weights and preload_at_last_strip(carrier) is early
    assert _cycles(path, "reference") == _cycles(path)
