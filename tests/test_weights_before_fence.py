"""A conv after a conv loads its first kernels before the fence when the previous conv's last
kernel tile sits in its second weights slot (snowir/plan/weights_end.py): allocate-dram decides
`weights_before_fence`, the code puts the kernel loads ahead of the fence, and the machine runs it
bit-exact without faulting (its loads would fault on a word a pending MAC still reads). Where it
may, allocate-dram also decides `kernels_preloaded`: the previous conv's last kernel tile loads
those kernels as one of its prefetches."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import onnx
import pytest
from onnx import helper

from onnx_util import model, rand, tile_level
from snowir.dialects import snowflake_asm as sf, tile
from snowir.driver.model_api import run_model_on_device
from snowir.driver.model_run import apply_pipeline, load_model
from snowir.hw import SnowflakeConfig
from snowir.plan.weights_end import (kernels_preloaded_refusal, last_kernel_slot, preload_loads,
                                     weights_before_fence_refusal)
from snowir.tile.read import conv_plan_of


def _chain(path: Path, first_kernels: int) -> Path:
    """conv a (64 -> first_kernels, 3x3) then conv b (first_kernels -> 16, 3x3) at 16 x 16."""
    nodes = [helper.make_node("Conv", ["x", "wa", "ba"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "wb", "bb"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    inits = {"wa": rand(first_kernels, 64, 3, 3, seed=1, scale=0.05), "ba": rand(first_kernels, seed=2, scale=0.1),
             "wb": rand(16, first_kernels, 3, 3, seed=3, scale=0.05), "bb": rand(16, seed=4, scale=0.1)}
    onnx.save(model(nodes, {"x": [1, 64, 16, 16]}, {"y": [1, 16, 16, 16]}, inits), str(path))
    return path


def _layers(path: Path) -> dict[str, tile.LayerOp]:
    module, _ = load_model(path)
    apply_pipeline(module, "nn-prepare,nn-to-tile,tile-loop-order,allocate-dram")
    return {op.sym_name.data: op for op in module.ops if isinstance(op, tile.LayerOp)}


@pytest.mark.parametrize("first_kernels, early", [(32, True), (16, False)])
def test_conv_after_conv_loads_its_kernels_early_when_the_slot_is_free(tmp_path: Path, first_kernels: int,
                                                                       early: bool) -> None:
    """Two kernel tiles (32 kernels): conv a ends in its second slot, so b's first kernels load at
    once; one tile (16 kernels): a ends in slot 0, where b's would load, so b starts its tiles in its
    second slot (`first_slot`) and they load at once too (before first_slot: b waited for the fence)."""
    from dataclasses import replace

    path = _chain(tmp_path / "chain.onnx", first_kernels)
    layers = _layers(path)
    a, b = (layers[n] for n in layers)
    hw = SnowflakeConfig()
    pa, pb = conv_plan_of(a), conv_plan_of(b)
    assert last_kernel_slot(pa, hw) == ((pa.w_slot, pa.w_slot + pa.shape.kernel_words) if early
                                        else (0, pa.shape.kernel_words))
    assert pb.first_slot == (0 if early else pb.w_slot)
    assert weights_before_fence_refusal(pa, pb, hw) is None
    assert (weights_before_fence_refusal(pa, replace(pb, first_slot=0), hw) is None) == early
    assert b.weights_before_fence is not None and b.fence is not None
    run = run_model_on_device(path, check=True, hw=hw)
    assert run.report["check"]["golden_bit_exact"] is True
    # the reference engine too (it faults on a load over words a pending MAC reads)
    ref = run_model_on_device(path, check=True, hw=hw, engine="reference")
    assert ref.report["check"]["golden_bit_exact"] is True
    assert ref.report["total"]["cycles"] == run.report["total"]["cycles"]


def _without(text: str, name: str) -> str:
    out = text.replace(f", {name}", "").replace(f"{name}, ", "")
    assert name not in out
    return out


def _weight_loads(image: sf.ImageOp) -> tuple[list, list[int]]:
    code = [op for op in image.walk() if isinstance(op, sf.SnowflakeInstruction)]
    return code, [i for i, op in enumerate(code) if isinstance(op, sf.LdOp) and op.target.data == sf.LoadTarget.WEIGHTS]


def test_early_kernels_are_ahead_of_the_fence_and_win_cycles(tmp_path: Path) -> None:
    """allocate-dram preloads b's kernels (`kernels_preloaded`): a's last kernel tile loads them
    and b's code loads none. Removed by hand from the tile IR (tile-to-asm follows the edit), b
    loads them itself before the fence's VMOVs (`weights_before_fence`); with that removed too,
    after them. Each step back runs more cycles, every one bit-exact."""
    path = _chain(tmp_path / "chain.onnx", 32)
    preloaded = tile_level(onnx.load(path), tmp_path)
    assert preloaded.count("weights_before_fence") == 1 and preloaded.count("kernels_preloaded") == 1
    early = _without(preloaded, "kernels_preloaded")
    fenced = _without(early, "weights_before_fence")
    cycles, a_loads = [], []
    for name, text in (("preloaded", preloaded), ("early", early), ("fenced", fenced)):
        file = tmp_path / f"{name}.mlir"
        file.write_text(text)
        module, _ = load_model(file)
        apply_pipeline(module, "tile-to-asm")
        a, b = [op for op in module.ops if isinstance(op, sf.ImageOp)][-2:]
        code, loads = _weight_loads(b)
        a_loads.append(len(_weight_loads(a)[1]))
        assert (loads == []) == (name == "preloaded")
        if loads:
            masks = [i for i, op in enumerate(code) if isinstance(op, sf.VmovOp) and op.select.data == sf.VmovSelect.MASK]
            assert (loads[0] < masks[SnowflakeConfig().vector_queue_depth - 1]) == (name == "early")
        run = run_model_on_device(file, check=True)
        assert run.report["check"]["golden_bit_exact"] is True
        if name == "preloaded":  # the reference engine faults on a load over words a pending MAC reads
            ref = run_model_on_device(file, check=True, engine="reference")
            assert ref.report["check"]["golden_bit_exact"] is True
            assert ref.report["total"]["cycles"] == run.report["total"]["cycles"]
        cycles.append(run.report["total"]["cycles"])
    assert a_loads[0] == a_loads[1] + 16 == a_loads[2] + 16  # a loads b's 16 kernels when preloaded
    assert cycles[0] < cycles[1] < cycles[2], cycles


def test_kernels_preloaded_where_the_previous_tile_reads_them_is_refused(tmp_path: Path) -> None:
    """Written by hand (with weights_before_fence) where a's single kernel tile sits in slot 0,
    where b's kernels go: tile-to-asm refuses it in one line naming the words; without
    weights_before_fence the verifier refuses it (it moves that decision's early loads further).
    A conv that loads tile 0 otherwise (INDP) is not preloaded."""
    import re

    path = _chain(tmp_path / "chain.onnx", 16)
    text = tile_level(onnx.load(path), tmp_path)
    # allocate-dram starts b in its second slot (first_slot) and preloads it: undone, b as before it
    assert re.search(r"first_slot = \d+ : i64", text) and "kernels_preloaded" in text
    text = _without(_without(re.sub(r", first_slot = \d+ : i64", "", text), "kernels_preloaded"),
                    "weights_before_fence")
    marked = text.replace(", fence}", ", fence, weights_before_fence, kernels_preloaded}", 1)
    assert marked.count("kernels_preloaded") == 1
    file = tmp_path / "marked.mlir"
    file.write_text(marked)
    module, _ = load_model(file)
    with pytest.raises(Exception, match=r"layer @y: weights_before_fence after conv @a: its first kernels load weights "
                                        r"words \[0, \d+\), which the previous conv's last kernel tile still reads"):
        apply_pipeline(module, "tile-to-asm")
    alone = text.replace(", fence}", ", fence, kernels_preloaded}", 1)
    assert alone.count("kernels_preloaded") == 1
    file.write_text(alone)
    with pytest.raises(Exception, match="kernels_preloaded.*weights_before_fence"):
        module, _ = load_model(file)
        apply_pipeline(module, "tile-to-asm")


def test_kernels_preloaded_only_where_tile_0_loads_once(tmp_path: Path) -> None:
    layers = _layers(_chain(tmp_path / "chain.onnx", 32))
    a, b = (conv_plan_of(layers[n]) for n in layers)
    hw = SnowflakeConfig()
    assert kernels_preloaded_refusal(a, b, hw) is None
    # resident: its tile 0 loads once too, its other tiles after its fence (tests/test_resident_loads.py)
    assert kernels_preloaded_refusal(a, replace(b, resident_weights=True), hw) is None
    assert kernels_preloaded_refusal(a, replace(b, mode="INDP"), hw) is not None
    assert preload_loads(b, hw) == tuple((b.w_addr + 2 * j * b.shape.kernel_words, b.shape.kernel_words, j,
                                          b.first_slot) for j in range(16))


def _pair(path: Path, c: int, size: int, kernels: int, kh: int) -> Path:
    """conv a (c -> kernels, kh x kh, ReLU) then conv b (kernels -> 16, 3x3) at size x size."""
    pad = kh // 2
    nodes = [helper.make_node("Conv", ["x", "wa", "ba"], ["a"], kernel_shape=[kh, kh], pads=[pad] * 4),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "wb", "bb"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    inits = {"wa": rand(kernels, c, kh, kh, seed=1, scale=0.05), "ba": rand(kernels, seed=2, scale=0.1),
             "wb": rand(16, kernels, 3, 3, seed=3, scale=0.05), "bb": rand(16, seed=4, scale=0.1)}
    onnx.save(model(nodes, {"x": [1, c, size, size]}, {"y": [1, 16, size, size]}, inits), str(path))
    return path


def _layer_cycles(text: str, file: Path) -> dict[str, int]:
    file.write_text(text)
    run = run_model_on_device(file, check=True)
    assert run.report["check"]["golden_bit_exact"] is True
    return {layer["name"]: layer["cycles"] for layer in run.report["layers"] if layer["cycles"]}


@pytest.mark.parametrize("c, size, kernels, kh, preloaded", [(32, 27, 128, 1, False), (64, 16, 32, 3, True)])
def test_kernels_preloaded_makes_no_layer_slower(tmp_path: Path, c: int, size: int, kernels: int, kh: int,
                                                 preloaded: bool) -> None:
    """allocate-dram's price (weights_end.preload_pays): a 1x1 conv over 32 channels (SqueezeNet's
    expand 1x1s) issues its pixel loops slower than its MACs run, so the preload's LDs in its last
    tile would delay it (issue 38: +47-103 cycles a layer there); it is not preloaded, and added by
    hand (tile-to-asm follows the edit) a runs slower than without. A 3x3 conv over 64 channels
    hides the LDs behind its MACs: preloaded, b gains and a is not slower. Per-layer cycles of the
    machine model, with and without the decision, every run bit-exact."""
    path = _pair(tmp_path / "pair.onnx", c, size, kernels, kh)
    text = tile_level(onnx.load(path), tmp_path)
    assert text.count("weights_before_fence") == 1
    assert (text.count("kernels_preloaded") == 1) == preloaded
    layers = _layers(path)
    pa, pb = (conv_plan_of(layers[n]) for n in layers)
    assert kernels_preloaded_refusal(pa, pb, SnowflakeConfig()) is None  # the price decides, not the rule
    with_ = text if preloaded else text.replace(", weights_before_fence}", ", weights_before_fence, kernels_preloaded}")
    without = _without(with_, "kernels_preloaded")
    on, off = _layer_cycles(with_, tmp_path / "on.mlir"), _layer_cycles(without, tmp_path / "off.mlir")
    a, b = on
    assert on[b] < off[b]  # the preload's gain, for the next layer
    if preloaded:
        assert on[a] <= off[a], (on, off)
    else:
        assert on[a] > off[a], (on, off)  # what the price avoids


def test_a_resident_conv_loads_its_other_kernel_tiles_after_its_first_strip(tmp_path: Path) -> None:
    """DenseNet-121's dense-block pair at 28²: a block-diagonal 1x1 (14 groups of 16 channels) then a
    224 -> 128 1x1 with resident kernels (eight tiles). With `weights_before_fence` its first kernel
    tile loads before the fence; the other seven (53 KB) loaded there too, ahead of the first maps
    strip, so the first MACs waited for them: +3,017 cycles against the same conv without the early
    kernels (DenseNet-121: 33 layers slower, up to +3.1 k). Now they load after the first strip, as
    without the decision: the conv is not slower for it, bit-exact."""
    n = helper.make_node
    nodes = [n("Conv", ["x", "w1", "b1"], ["a"], group=14, name="g"), n("Relu", ["a"], ["ar"]),
             n("Conv", ["ar", "w2", "b2"], ["y0"], name="p"), n("Relu", ["y0"], ["y"])]
    inits = {"w1": rand(224, 16, 1, 1, seed=1, scale=0.2), "b1": rand(224, seed=2, scale=0.1),
             "w2": rand(128, 224, 1, 1, seed=3, scale=0.05), "b2": rand(128, seed=4, scale=0.1)}
    m = model(nodes, {"x": [1, 224, 28, 28]}, {"y": None}, inits)
    text = tile_level(m, tmp_path)
    line = next(x for x in text.splitlines() if "tile.layer @p " in x)
    assert "weights_before_fence" in line
    on = _layer_cycles(text, tmp_path / "on.mlir")
    off = _layer_cycles(_without(text, "weights_before_fence"), tmp_path / "off.mlir")
    assert on["g"] == off["g"] and on["p"] <= off["p"], (on, off)  # p: 93,768 against 90,751 before

