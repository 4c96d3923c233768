"""The golden model reads a lowered model's packed weights back in one walk of its program
(issue 40): looking each conv's marker up by walking the segment's whole program made a first
golden run quadratic in the program's size (60 of 64 s on a 2.36 M-instruction detector).
Walks are counted, not timed."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import helper
from xdsl.ir import Block
from xdsl.ir.core import BlockOps

from snowir import api
from snowir.dialects import nn, snowflake_asm as sf
from snowir.driver.model_run import apply_pipeline
from snowir.golden import Golden, constant_array
from snowir.packed import PackedWeightsError, packed_images
from snowir.tools.snow_opt import main as snow_opt
from tests.onnx_util import model, rand

CONVS = 8


def conv_chain(tmp_path) -> str:
    """CONVS small 3x3 convs in a chain: one segment image, one marker per conv."""
    nodes, inits, prev = [], {}, "x"
    for i in range(CONVS):
        nodes.append(helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], name=f"Conv_{i}", pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"Relu_{i}"))
        inits[f"w{i}"] = rand(16, 16, 3, 3, seed=i, scale=0.1)
        inits[f"b{i}"] = rand(16, seed=20 + i, scale=0.1)
        prev = f"r{i}"
    path, out = tmp_path / "chain.onnx", tmp_path / "nn.mlir"
    onnx.save(model(nodes, {"x": [1, 16, 8, 8]}, {prev: [1, 16, 8, 8]}, inits), path)
    assert snow_opt([str(path), "-p", "nn-prepare", "-o", str(out)]) == 0
    return out.read_text()


def program_walks(monkeypatch: pytest.MonkeyPatch) -> Counter[Block]:
    """How many times each block's ops are iterated from the start (a walk of that block)."""
    walks: Counter[Block] = Counter()
    iterate = BlockOps.__iter__

    def counted(self: BlockOps):
        walks[self.block] += 1
        return iterate(self)

    monkeypatch.setattr(BlockOps, "__iter__", counted)
    return walks


def test_a_golden_run_walks_the_segment_program_a_bounded_number_of_times(tmp_path, monkeypatch) -> None:
    nn_text = conv_chain(tmp_path)
    x = rand(1, 16, 8, 8, seed=3)
    want = Golden(api.parse_text(nn_text)).run(x)
    lowered = api.parse_text(nn_text)
    apply_pipeline(lowered, "snowflake-lower")
    images = [op for op in lowered.ops if isinstance(op, sf.ImageOp) and "segment" in op.attributes]
    assert len(images) == 1
    program = images[0].program.body.block
    markers = [op for op in program.ops if isinstance(op, sf.LabelOp) and "layer" in op.attributes]
    assert len(markers) >= CONVS  # one marker per conv: the old lookup walked the program once each
    walks = program_walks(monkeypatch)
    got = Golden(lowered).run(x)
    assert all(np.array_equal(a, b) for a, b in zip(want, got))
    # Golden's own search for @main walks the module once; the packed weights' index once more
    assert walks[program] <= 2, walks[program]
    Golden(lowered).run(x)  # a second golden (--check's) shares the index
    assert walks[program] <= 3, walks[program]


def test_the_index_follows_a_module_rewritten_after_it_was_built(tmp_path) -> None:
    """The index holds ops, not values: a tile layer replaced by its image (tile-to-asm on the same
    module) is found again, and a layer removed is one clear error."""
    lowered = api.parse_text(conv_chain(tmp_path))
    apply_pipeline(lowered, "nn-to-tile,tile-loop-order")
    packed = [op for op in lowered.walk() if isinstance(op, nn.ConstantOp) and isinstance(op.value, nn.PackedWeightsAttr)]
    before = [constant_array(op) for op in packed]
    builds = packed_images(lowered).walks
    assert builds == 1
    apply_pipeline(lowered, "snowflake-lower")
    packed = [op for op in lowered.walk() if isinstance(op, nn.ConstantOp) and isinstance(op.value, nn.PackedWeightsAttr)]
    assert all(np.array_equal(constant_array(op), w) for op, w in zip(packed, before))
    assert packed_images(lowered).walks == 2  # the tile layers were gone: rebuilt once, not per conv
    for op in list(lowered.ops):
        if isinstance(op, sf.ImageOp):
            op.detach()
            op.erase()
    with pytest.raises(PackedWeightsError, match="packed weights are not in the module"):
        constant_array(packed[0])
