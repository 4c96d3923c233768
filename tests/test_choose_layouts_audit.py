"""
A held-out audit of choose-layouts (c28dc54): its reproducers, each failing on c28dc54. Fixed: a
layout that forced a reader from INDP to COOP on one load unit (the two planners' estimates are not
calibrated against each other: blocks now only for a conv its planners run COOP anyway), and a
grouped residual conv on 16 CUs tiled across its groups (`_plan_bypass` now tiles as `_plan_conv`).
Known gaps, strict xfails: blocks the estimate cannot tell from whole pixels (a tie, taken by the 1%
credit that measured chains need, docs/lowering.md) measuring slower, and a 16-CU 8.4 GB/s reader
whose sliced single-buffered plan `residual_cycles` ranks 7% cheaper and measures 11% dearer.
"""

from __future__ import annotations

import onnx
import pytest
from onnx import helper

from snowir.passes.nn import choose_layouts
from tests.onnx_util import GraphBuilder, rand, run_checked
from tests.test_choose_layouts import _tiled, parts, shortcut

N = helper.make_node


def _layers(m: onnx.ModelProto) -> tuple[list[str], dict[str, int]]:
    compiled, result = run_checked(m)
    return _tiled(compiled.module), {row.name: row.cycles for row in result.report.layers}


@pytest.mark.xfail(strict=True, reason="a tie taken by TILES_MARGIN's credit: 3 readers +47..+178 cycles (known gap; without the credit measured chains lose, ZFNet 57 k cycles)")
def test_a_tie_in_the_estimate_does_not_take_blocks_that_measure_slower(monkeypatch: pytest.MonkeyPatch) -> None:
    """1024 -> 128 3x3 at 7² on the default machine: four parts of 256, whose estimates are the same
    with whole pixels and with blocks (every link: 55,991 / 56,383 cycles either way). The 1%
    TILES_MARGIN credit alone then takes blocks for every link, and measured the three readers are
    slower than with whole pixels (c.part1 57,103 -> 57,150, c.part2 56,910 -> 57,088, c.part3
    57,424 -> 57,471; the chain 227,413 -> 227,685): issue 38's "no layer slower" broken by a layout
    the estimate gives nothing for."""
    m = parts(1024, 7, 128)
    tiled, layers = _layers(m)
    monkeypatch.setattr(choose_layouts.ChooseLayoutsPass, "apply", lambda self, ctx, op: None)
    flat_tiled, flat = _layers(m)
    assert flat_tiled == []
    slower = {name: (flat[name], layers[name]) for name in layers if name in flat and layers[name] > flat[name]}
    assert not slower, (tiled, slower)


def _compare(m: onnx.ModelProto, hw, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], dict[str, int], dict[str, int]]:
    """(the convs stored as blocks, per-layer cycles with choose-layouts, without it) on `hw`, bit-exact."""
    from snowir.driver.model_api import compile as compile_model

    x = rand(*[d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim], seed=7)

    def run() -> tuple[list[str], dict[str, int]]:
        compiled = compile_model(m, hw=hw)
        result = compiled.run(x, check=True)
        assert result.report.check is not None and result.report.check.golden_bit_exact
        return _tiled(compiled.module), {row.name: row.cycles for row in result.report.layers}

    tiled, layers = run()
    with monkeypatch.context() as mp:
        mp.setattr(choose_layouts.ChooseLayoutsPass, "apply", lambda self, ctx, op: None)
        flat_tiled, flat = run()
    assert flat_tiled == []
    return tiled, layers, flat


def residual_trio(c: int, k: int, h: int) -> onnx.ModelProto:
    """c1 (1x1) -> c2 (1x1, adds c1) -> c4 (3x3, adds c2), one input x: a chain of three convs where
    c2 is a residual conv that may read and write blocks."""
    g = GraphBuilder()
    a = g.conv("x", c, k, 1, "c1", relu=False)
    b = g.conv("x", c, k, 1, "c2", relu=False)
    s = g.op("Add", [b, a], "s1")
    d = g.conv("x", c, k, 3, "c4", relu=False)
    u = g.op("Add", [d, s], "s3")
    return g.model({"x": [1, c, h, h]}, g.op("Relu", [u], "o"))


@pytest.mark.xfail(strict=True, reason="a 16-CU tie taken by the credit: the one run's arrival is not in residual_cycles (known gap)")
def test_a_16_cu_chain_tie_does_not_slow_its_3x3_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """16 CUs (64-channel blocks), 64 -> 128 at 14²: c2|c4 estimates the same either way (c4 14,994
    cycles with pixels or blocks), the 1% credit takes blocks, and c4 measures 21,256 -> 22,716
    (+6.9%, load_wait 6,524 -> 8,979) while c2 gains 1,147: the chain c2 + c4 is slower than
    whole pixels (30,372 -> 30,685). c4's plan is the same both ways (COOP, single-buffered, bypass
    slices): only the slice loads differ, and `residual_cycles` prices blocks by the issue slots
    and LDs they save, which do not bound this layer, not by when the one run (`run_pieces`, at
    the next kernels' prefetch) arrives."""
    from snowir.hw import SnowflakeConfig

    tiled, layers, flat = _compare(residual_trio(64, 128, 14), SnowflakeConfig(cus=16), monkeypatch)
    chain = ("c1", "c2", "c4")
    assert sum(layers[n] for n in chain) <= sum(flat[n] for n in chain), (tiled, layers, flat)
    assert layers["c4"] <= flat["c4"], (tiled, layers["c4"], flat["c4"])


def test_the_projection_reader_on_16_cus_at_8_4_gbps_is_not_slower(monkeypatch: pytest.MonkeyPatch) -> None:
    """test_choose_layouts' projection shortcut (256 -> 512 over 28², conv3 128 -> 512) on 16 CUs at
    8.4 GB/s: the estimate says proj reading conv3's 64-channel blocks is faster (32,008 -> 29,643
    cycles, not a tie), measured it is slower (39,296 -> 43,802, +11.5%; load_wait 10,157 -> 14,673,
    vector_queue 10,102 -> 14,955), the pair too (54,643 -> 59,149): the 1x1 reader's estimate
    with a block slice misprices this machine. The layouts change proj's plan, not only its loads:
    with pixels it holds its bypass rows beside double-buffered maps strips (no slices), with blocks
    it must take bypass slices (bypass_tiles_refusal) in single-buffered strips; `residual_cycles`
    ranks the sliced single-buffered plan 7% cheaper, measured it was 11% dearer (an xfail until
    stop 53). Its kernel tiles are resident: loaded all at once behind the first strip, they held
    the next tile's slice back; loaded one tile ahead (codegen/conv.resident_ahead) the blocks'
    reader runs 35,204 against 38,881 with whole pixels."""
    from snowir.hw import SnowflakeConfig

    tiled, layers, flat = _compare(shortcut(256, 28, 128, 512), SnowflakeConfig(cus=16, dram_gbps=8.4), monkeypatch)
    assert layers["proj"] <= flat["proj"], (tiled, layers["proj"], flat["proj"])
    assert layers["proj"] + layers["conv3"] <= flat["proj"] + flat["conv3"], (tiled, layers, flat)


def residual_pair(c: int, k: int, h: int) -> onnx.ModelProto:
    """w (1x1 c -> k) and r (1x1 c -> k, adds w), one input: a ResNet first block's conv3 and
    projection at stride 1 (ResNet-50's layer1: 64 -> 256 over 56²)."""
    g = GraphBuilder()
    a = g.conv("x", c, k, 1, "w", relu=False)
    b = g.conv("x", c, k, 1, "r", relu=False)
    s = g.op("Add", [b, a], "s")
    return g.model({"x": [1, c, h, h]}, g.op("Relu", [s], "o"))


def test_one_load_unit_does_not_take_blocks_for_resnet50_layer1s_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    """load_units 1, 64 -> 256 1x1s over 56²: the estimate prices the reader at 473,149 cycles with
    whole pixels and 290,805 with blocks, so blocks are taken; measured the reader runs 284,259 ->
    354,451 (+24.7%) -- the estimate misprices both (on one load unit a block slice is one LD of a
    strip's run). The layouts change the reader's mode: with whole pixels r runs INDP over column
    bands (cu_split cols, double-buffered: `columns_cycles` 473,149, measured 284,259), with blocks
    it must run COOP with slices (`residual_cycles` 290,805, measured 354,451): choose-layouts
    compares two planners' estimates that are not calibrated against each other, and on one load
    unit columns_cycles overprices INDP by 66%. In ResNet-50 itself (build/models/resnet50.onnx,
    load_units 1): n12 284,259 -> 354,532 (+24.7%), n42 262,727 -> 286,012 (+8.9%), 14 layers slower
    in all (the model 2.0% faster)."""
    from snowir.hw import SnowflakeConfig

    tiled, layers, flat = _compare(residual_pair(64, 256, 56), SnowflakeConfig(load_units=1), monkeypatch)
    assert layers["r"] <= flat["r"], (tiled, layers["r"], flat["r"])


def test_a_grouped_residual_conv_on_16_cus_at_8_4_gbps_compiles() -> None:
    """Not choose-layouts' (it fails with the pass a no-op too): a grouped 3x3 conv (64 -> 64, 2
    groups of 32) whose result adds a 1x1's, on 16 CUs at 8.4 GB/s, is planned with a kernel tile of
    64 kernels and then refused by tile-to-asm ("kernel tile: count 64 does not divide a group's 32
    kernels"): the model does not compile, rather than the planner tiling by the group or
    partition-host placing the conv on the host. 4.2 GB/s (INDP chosen), or 7² maps, compile. Cause:
    snowir/plan/conv.py `_plan_bypass` tiles by `coop_kernels(hw)` (64 on 16 CUs), where `_plan_conv`
    uses `coop_kernels(hw, s)` and refuses a group size no tile divides."""
    from snowir.driver.model_api import compile as compile_model
    from snowir.hw import SnowflakeConfig

    g = GraphBuilder()
    g.inits["gw"] = rand(64, 32, 3, 3, seed=50, scale=0.1)
    g.inits["gb"] = rand(64, seed=51, scale=0.05)
    a = g.conv("x", 64, 64, 1, "c1", relu=False)
    g.nodes.append(helper.make_node("Conv", ["x", "gw", "gb"], ["gc"], name="gc", pads=[1] * 4, group=2))
    m = g.model({"x": [1, 64, 14, 14]}, g.op("Relu", [g.op("Add", ["gc", a], "s")], "o"))
    compiled = compile_model(m, hw=SnowflakeConfig(cus=16, dram_gbps=8.4))
    x = rand(1, 64, 14, 14, seed=7)
    check = compiled.run(x, check=True).report.check
    assert check is not None and check.golden_bit_exact, check
