"""
Depthwise convs sharing one input (issue 36 item 5): PP-PicoDet's detector feeds one 1x1 conv's
HardSwish result to a 5x5/2 depthwise conv (its down-sampling path) and a 5x5/1 one (its head), so
`tiled_writer`, which asked for a single reader, left both to gather their channels from the
channel-innermost tensor (the 5x5/2 at 100 x 76 x 128: ~25% of its bound, ~100% alone in a block).
Now every reader a depthwise conv, depthwise-to-grouped decides them together: the writer stores the
blocks once and each reader takes its form over them. Exporter-style (Add, Clip, Mul, Div HardSwish)
at 14² x 48, on the stock machine (the host's HardSwish writes the blocks) and with the write-back
unit (the 1x1 it folds into writes them): both depthwise convs one grouped layer over the blocks,
bit-exact against the golden model on both engines, faster than gathering; an edit of one reader's
blocks refused in one line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from snowir.dialects import nn
from snowir.driver.model_api import compile as compile_model
from snowir.hw import SnowflakeConfig
from snowir.passes.nn import depthwise_to_grouped
from snowir.passes.nn.depthwise_slices import OVER_BLOCKS
from snowir.segments import CHANNEL_TILES
from tests.onnx_util import GraphBuilder, model, rand, tile_level, tile_to_asm

UNIT = SnowflakeConfig(writeback_activation=1)


def shared_block(c: int = 48, h: int = 14, kernel: int = 5) -> onnx.ModelProto:
    """`expand` 1x1 16 -> c and its exported HardSwish, read by `dw_s2` (kernel x kernel, stride 2)
    and `dw_s1` (stride 1), each HardSwish and a 1x1 projection: two outputs, as PicoDet's
    Conv.45 -> Div.41 -> Conv.46 / Conv.66."""
    g = GraphBuilder()
    g.inits |= {"three": np.float32(3), "zero": np.float32(0), "six": np.float32(6)}

    def hswish(x: str, name: str) -> str:
        g.op("Add", [x, "three"], f"{name}_add")
        g.op("Clip", [f"{name}_add", "zero", "six"], f"{name}_clip")
        g.op("Mul", [x, f"{name}_clip"], f"{name}_mul")
        return g.op("Div", [f"{name}_mul", "six"], name)

    x = hswish(g.conv("x", 16, c, 1, "expand", relu=False), "expand_hs")
    outputs = {}
    for name, stride in (("dw_s2", 2), ("dw_s1", 1)):
        g.inits |= {f"{name}_w": rand(c, 1, kernel, kernel, seed=len(g.inits), scale=0.3),
                    f"{name}_b": rand(c, seed=len(g.inits) + 1, scale=0.1)}
        g.op("Conv", [x, f"{name}_w", f"{name}_b"], name, group=c, pads=[kernel // 2] * 4, strides=[stride] * 2)
        o = (h - 1) // stride + 1
        outputs[g.conv(hswish(name, f"{name}_hs"), c, c, 1, f"{name}_proj", relu=False)] = [1, c, o, o]
    return model(g.nodes, {"x": [1, 16, h, h]}, outputs, g.inits)


def _run(m: onnx.ModelProto, hw: SnowflakeConfig | None = None, engine: str = "fast"):
    """Compile and run `m`, bit-exact against the golden model asserted: the module, the layers by name."""
    compiled = compile_model(m, hw=hw) if hw is not None else compile_model(m)
    result = compiled.run(rand(1, 16, 14, 14, seed=7), engine=engine, check=True)
    assert result.report.check is not None and result.report.check.golden_bit_exact, result.report.check
    return compiled.module, {row.name: row for row in result.report.layers}


def _tiled(module) -> list[str]:
    return [op.attributes["onnx_node"].data for op in module.walk() if CHANNEL_TILES in op.attributes]


@pytest.mark.parametrize("engine", ["fast", "reference"])
@pytest.mark.parametrize("unit", [False, True])
def test_both_readers_take_the_blocks_bit_exact(unit: bool, engine: str) -> None:
    """The writer stores the blocks once (the host's HardSwish; with the unit, the 1x1 it folds
    into); each depthwise conv is one device layer, a grouped conv of 3 groups over them."""
    module, layers = _run(shared_block(), UNIT if unit else None, engine)
    over = [op for op in module.walk() if isinstance(op, nn.Conv2dOp) and OVER_BLOCKS in op.attributes]
    assert sorted(op.attributes["onnx_node"].data for op in over) == ["dw_s1", "dw_s2"]
    assert all(op.groups.value.data == 3 and op.input is over[0].input for op in over)
    assert _tiled(module) == ["expand" if unit else "expand_hs"]
    assert layers["dw_s1"].where == layers["dw_s2"].where == "device"
    assert not any(k.startswith(("dw_s1.", "dw_s2.")) for k in layers)


def test_faster_than_each_reader_gathering(monkeypatch: pytest.MonkeyPatch) -> None:
    """Against the single-reader rule (each reader gathers its channels: the 5x5/2 one grouped conv
    over the channel-innermost tensor, the 5x5/1 three slices), the two readers over the blocks take
    fewer cycles. Measured: 5,011 + 13,477 against 11,499 + 15,937 (the 1x1 and its host HardSwish
    unchanged)."""
    m = shared_block()
    _, blocks = _run(m)
    monkeypatch.setattr(depthwise_to_grouped, "_tiled_writer", lambda op: None)
    _, gathered = _run(m)

    def dw(layers: dict) -> int:
        return sum(row.cycles or 0 for name, row in layers.items() if name.startswith(("dw_s1", "dw_s2"))
                   and not name.endswith(("_hs", "_proj")))

    assert dw(blocks) < 0.8 * dw(gathered), (dw(blocks), dw(gathered))
    assert blocks["expand"].cycles <= 1.01 * gathered["expand"].cycles


def test_one_readers_blocks_moved_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    """After allocate-dram, each reader's maps region records the blocks [16, 0, 3] of the one tensor
    the host's HardSwish writes; the second reader's moved to block 1 disagrees with where the graph
    places its input: tile-to-asm refuses in one line naming the layer; unedited, it lowers."""
    text = tile_level(shared_block(), tmp_path)
    maps = 'channel_tiles = array<i64: 16, 0, 3>'
    assert text.count(maps) == 2, text.count(maps)  # the two readers' maps
    code, err = tile_to_asm(text, tmp_path, capsys)
    assert code == 0, err
    last = text.rindex(maps)
    moved = text[:last] + maps.replace("16, 0, 3", "16, 1, 3") + text[last + len(maps):]
    code, err = tile_to_asm(moved, tmp_path, capsys)
    assert code != 0 and len(err.strip().splitlines()) == 1, err
    assert "layer @dw_s1: " in err and "channel_tiles [16, 1, 3] where the graph places the input it reads at [16, 0, 3]" in err, err
