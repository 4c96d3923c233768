"""
Channel parts chained through channel-tile-major partial sums (issue 38, activation layouts): a conv
split-kernels cuts into input-channel parts writes each part's partial sums through DRAM and the
next part adds them back at its write-back, as its bypass. Stored as whole pixels, the next part's
kernel tile loads its K channels of them one LD a pixel (a strided run); stored channel-tile-major
in blocks of a COOP tile's 16 channels, a tile's slice of a strip is one run of its block. The part
chain bit-exact on both engines (3x3 and 1x1 slices, one strip and several), the LDs and cycles
against whole pixels, and the edits that would break it refused in one line.
"""

from __future__ import annotations

import re
from pathlib import Path

import onnx
import pytest
from onnx import helper

from snowir.dialects import nn
from snowir.passes.nn import choose_layouts, split_kernels
from snowir.segments import CHANNEL_TILES
from tests.onnx_util import model, rand, run_checked, tile_level, tile_to_asm

N = helper.make_node


def conv(c: int, h: int, k: int, kh: int) -> onnx.ModelProto:
    """One kh x kh conv (pad to keep H) over c channels, a ReLU: split into channel parts."""
    pad = kh // 2
    nodes = [N("Conv", ["x", "w", "b"], ["y"], name="c", kernel_shape=[kh, kh], pads=[pad] * 4), N("Relu", ["y"], ["o"])]
    inits = {"w": rand(k, c, kh, kh, seed=1, scale=1 / (c * kh * kh) ** 0.5), "b": rand(k, seed=2, scale=0.1)}
    return model(nodes, {"x": [1, c, h, h]}, {"o": None}, inits)


def _run(m: onnx.ModelProto, engine: str = "fast"):
    """Compiled and run bit-exact (`run_checked`): the compiled model and its report's rows by name."""
    compiled, result = run_checked(m, engine)
    return compiled, {row.name: row for row in result.report.layers}


def _tiled(module) -> list[str]:
    return [op.attributes["onnx_node"].data for op in module.walk()
            if isinstance(op, nn.Conv2dOp) and CHANNEL_TILES in op.attributes]


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_3x3_part_chain_through_blocks(engine: str) -> None:
    """256 -> 64 3x3 at 8²: two parts of 128; part 0 writes its four 16-channel blocks, part 1's
    tiles each load their block's rows as their bypass slice; bit-exact on both engines."""
    compiled, layers = _run(conv(256, 8, 64, 3), engine)
    assert _tiled(compiled.module) == ["c.part0"]
    assert {"c.part0", "c.part1"} <= set(layers)


@pytest.mark.parametrize("h", [7, 24])
def test_a_1x1_part_chain_through_blocks(h: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The 1x1 slices' code (the next tile's slice, and the next strip's first slice during the
    last tile: at 24², several strips) with the blocks forced (by estimate the 1x1 parts of this shape keep
    their bypass rows beside the maps): bit-exact."""
    monkeypatch.setattr(choose_layouts, "TILES_MARGIN", 1.0)  # every layout a planner takes
    monkeypatch.setattr(split_kernels.SplitKernel, "_count_by_cost", lambda self, op, c: 2)
    compiled, layers = _run(conv(256, h, 64, 1))
    assert _tiled(compiled.module) == ["c.part0"]
    assert {"c.part0", "c.part1"} <= set(layers)


def test_blocks_cut_the_reader_s_loads_and_cycles(monkeypatch: pytest.MonkeyPatch) -> None:
    """256 -> 64 3x3 at 13² (AlexNet-OWT's conv5 with a quarter of its kernels): part 1's bypass
    slices are one LD a tile a strip instead of one a pixel; part 1 faster, part 0 no slower."""
    m = conv(256, 13, 64, 3)
    compiled, tiled = _run(m)
    assert _tiled(compiled.module) == ["c.part0"]
    monkeypatch.setattr(choose_layouts.ChooseLayoutsPass, "apply", lambda self, ctx, op: None)  # whole pixels
    flat_compiled, flat = _run(m)
    assert _tiled(flat_compiled.module) == []
    assert tiled["c.part1"].cycles < flat["c.part1"].cycles, (tiled["c.part1"].cycles, flat["c.part1"].cycles)
    assert tiled["c.part0"].cycles <= flat["c.part0"].cycles * 1.002, (tiled["c.part0"].cycles, flat["c.part0"].cycles)


def _edit_bypass_tiles(text: str, edit: str) -> str:
    """`text` with the reader's bypass region's channel_tiles replaced by `edit`."""
    pattern = r'(tile.dram_region @c.part1.bypass \{[^}]*), channel_tiles = array<i64: [0-9, ]+>'
    assert re.search(pattern, text) is not None, "the reader's bypass region records channel_tiles"
    return re.sub(pattern, lambda m: m.group(1) + edit, text, count=1)


def test_an_edited_bypass_layout_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The graph places part 0's partial sums channel-tile-major: a bypass region that says otherwise
    (removed, another block) is refused in one line naming the region, not followed."""
    text = tile_level(conv(256, 8, 64, 3), tmp_path)
    for edit in ("", ", channel_tiles = array<i64: 16, 1, 4>"):
        code, err = tile_to_asm(_edit_bypass_tiles(text, edit), tmp_path, capsys)
        assert code != 0 and "c.part1.bypass" in err and "channel_tiles" in err, err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_a_bypass_layout_the_reader_cannot_follow_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Blocks read without bypass slices (their loads are the slices' runs): refused naming the rule."""
    text = tile_level(conv(256, 8, 64, 3), tmp_path)
    edited = re.sub(r"(tile.layer @c.part1 conv attributes \{[^\n]*?), bypass_slices = array<i64: [0-9, ]+>", r"\1",
                    text, count=1)
    assert edited != text
    code, err = tile_to_asm(edited, tmp_path, capsys)
    assert code != 0 and "channel_tiles" in err and "bypass slices" in err, err
    assert "Traceback" not in err


def test_one_program_per_layer_gives_the_reader_its_blocks() -> None:
    """whole-model=false (each layer its own program and DRAM, as a model too large for the machine's
    DRAM runs: VGG-19): the runner writes part 0's partial sums into part 1's bypass segment as blocks,
    as the reader loads them (regression: they were written as whole pixels, every part 1 of VGG-19's
    channel parts off the golden model)."""
    from snowir.driver.model_api import compile as compile_model

    m = conv(256, 8, 64, 3)
    compiled = compile_model(m, "snowflake-lower{whole-model=false}")
    assert _tiled(compiled.module) == ["c.part0"]
    x = rand(*[d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim], seed=7)
    check = compiled.run(x, check=True).report.check
    assert check is not None and check.golden_bit_exact, check
