"""A conv after a conv loads its first kernels before the fence when the previous conv's last
kernel tile sits in its second weights slot (snowir/plan/weights_end.py): allocate-dram decides
`weights_before_fence`, the code puts the kernel loads ahead of the fence, and the machine runs it
bit-exact without faulting (its loads would fault on a word a pending MAC still reads)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import helper

from onnx_util import model, rand, tile_level
from snowir.dialects import snowflake_asm as sf, tile
from snowir.driver.model_api import run_model_on_device
from snowir.driver.model_run import apply_pipeline, load_model
from snowir.hw import SnowflakeConfig
from snowir.plan.weights_end import last_kernel_slot, weights_before_fence_refusal
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
    once; one tile (16 kernels): a ends in slot 0, where b's load, so b waits for the fence."""
    path = _chain(tmp_path / "chain.onnx", first_kernels)
    layers = _layers(path)
    a, b = (layers[n] for n in layers)
    hw = SnowflakeConfig()
    pa, pb = conv_plan_of(a), conv_plan_of(b)
    assert last_kernel_slot(pa, hw) == ((pa.w_slot, pa.w_slot + pa.shape.kernel_words) if early
                                        else (0, pa.shape.kernel_words))
    assert (weights_before_fence_refusal(pa, pb, hw) is None) == early
    assert (b.weights_before_fence is not None) == early and b.fence is not None
    run = run_model_on_device(path, check=True, hw=hw)
    assert run.report["check"]["golden_bit_exact"] is True
    if early:  # the reference engine too (it faults on a load over words a pending MAC reads)
        ref = run_model_on_device(path, check=True, hw=hw, engine="reference")
        assert ref.report["check"]["golden_bit_exact"] is True
        assert ref.report["total"]["cycles"] == run.report["total"]["cycles"]


def test_early_kernels_are_ahead_of_the_fence_and_win_cycles(tmp_path: Path) -> None:
    """In b's code the kernel loads come before the fence's VMOVs, and the pair runs in fewer
    cycles than with the decision removed by hand from the tile IR (tile-to-asm follows the edit)."""
    path = _chain(tmp_path / "chain.onnx", 32)
    early = tile_level(onnx.load(path), tmp_path)
    assert early.count("weights_before_fence") == 1
    fenced = early.replace(", weights_before_fence", "").replace("weights_before_fence, ", "")
    assert "weights_before_fence" not in fenced
    cycles = []
    for name, text in (("early", early), ("fenced", fenced)):
        file = tmp_path / f"{name}.mlir"
        file.write_text(text)
        module, _ = load_model(file)
        apply_pipeline(module, "tile-to-asm")
        image = [op for op in module.ops if isinstance(op, sf.ImageOp)][-1]
        code = [op for op in image.walk() if isinstance(op, sf.SnowflakeInstruction)]
        first_weights = next(i for i, op in enumerate(code) if isinstance(op, sf.LdOp)
                             and op.target.data == sf.LoadTarget.WEIGHTS)
        masks = [i for i, op in enumerate(code) if isinstance(op, sf.VmovOp) and op.select.data == sf.VmovSelect.MASK]
        assert (first_weights < masks[SnowflakeConfig().vector_queue_depth - 1]) == (name == "early")
        run = run_model_on_device(file, check=True)
        assert run.report["check"]["golden_bit_exact"] is True
        cycles.append(run.report["total"]["cycles"])
    assert cycles[0] < cycles[1]
