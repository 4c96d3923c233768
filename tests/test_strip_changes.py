"""
Issue 38, the layer starts and strip changes the schedule space took as fixed: a COOP conv's
kernel tiles in serpentine order (`kernel_order`, a strip starting with the two tiles the one
before ended with), its first kernel tile in the second weights slot (`first_slot`), its first
maps strip loaded by the previous conv's last kernel tile (`maps_preloaded`), the shortest
whole-buffer strip first (`short_first`) and the residual add on the cheaper of two convs
(fuse-residual-add{by-cost}). Each is followed bit-exact, and an edit is followed or refused.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper
from xdsl.dialects.builtin import IntegerAttr, StringAttr, UnitAttr, i64
from xdsl.utils.exceptions import PassFailedException

from onnx_util import GraphBuilder, model
from snowir.hw import SnowflakeConfig
from snowir.plan.conv import plan_conv
from snowir.plan.shapes import ConvShape
from test_lowering import conv_case

SMALL = SnowflakeConfig(maps_bank_bytes=4096, weights_buffer_bytes=2048)
"""2048-word banks, a 1024-word weights buffer (two 512-word slots)."""


def _up(layer) -> None:
    layer.properties.pop("kernel_order", None)


@pytest.mark.parametrize("args, gathered", [
    ((256, 6, 6, 96, 1, 1, 1, 0), False),  # three whole-buffer strips of 2 rows, six kernel tiles
    ((128, 16, 16, 160, 1, 1, 2, 0), True),  # a strided 1x1 gathered in whole-buffer strips, ten tiles
    ((32, 16, 8, 256, 3, 3, 1, 1), False),  # a 3x3 (strips sharing rows), 16 tiles (MID machine, Kloop)
])
@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_serpentine_coop_is_chosen_followed_and_undone(args, gathered, engine) -> None:
    """The planner records serpentine on a COOP conv of several strips and double-buffered kernel
    tiles; it runs bit-exact on both engines with two kernel tiles fewer loaded per strip change,
    and the order removed (up) is followed: bit-exact, more LDs, slower."""
    runs, loads = {}, {}
    for name, edit in (("serpentine", None), ("up", _up)):
        kw = {"hw": SnowflakeConfig(maps_bank_bytes=2048), "mode": "COOP", "loop_order": "Kloop"} if args[4] == 3 \
            else {"hw": SMALL}
        run, got, want, plan, image = conv_case(*args, **kw, shift=12, edit=edit, engine=engine)
        assert np.array_equal(got, want)
        assert plan.kernel_order == name and plan.double_buffer_weights and len(plan.strips) > 1
        assert (plan.gather is not None) == gathered
        runs[name], loads[name] = run.cycles, run.machine.timing.load_bytes
    tile = plan.kernels * plan.shape.kernel_words * 2  # two tiles a strip change (and the programs' own fetches)
    kept = 2 * (len(plan.strips) - 1) * tile
    assert abs(loads["up"] - loads["serpentine"] - kept) < 0.1 * kept
    assert runs["serpentine"] < runs["up"]


def test_serpentine_estimate_prices_the_strip_change() -> None:
    """ResNet-50's 14², 1x1 1024->256 conv: the plan takes serpentine and the shortest strip first
    (3 + 4 + 4 + 3 rows), each by the tiling estimate."""
    s = ConvShape(1024, 14, 14, 256, 1, 1, 1, 1, 0, 0, 0, 0, True, 8)
    hw = SnowflakeConfig()
    plan = plan_conv(s, hw, 0, 1 << 24, 1 << 25)
    assert plan.kernel_order == "serpentine"
    assert [st.y1 - st.y0 for st in plan.strips] == [3, 4, 4, 3]
    from dataclasses import replace
    up = replace(plan, kernel_order="up")
    assert plan.estimated_cycles(hw) < up.estimated_cycles(hw)
    assert plan.dram_bytes(hw)["Kloop"] < up.dram_bytes(hw)["Kloop"]


@pytest.mark.parametrize("args, kw, says", [
    # a residual COOP conv: its bypass is read per kernel tile
    ((64, 8, 8, 256, 1, 1, 1, 0), {"bypass": True}, "kernel_order serpentine: a residual conv"),
    # Mloop: the strips inside each kernel tile
    ((32, 16, 8, 256, 3, 3, 1, 1), {"hw": SnowflakeConfig(maps_bank_bytes=2048), "mode": "COOP", "loop_order": "Mloop"},
     "kernel_order serpentine: Mloop"),
])
def test_serpentine_where_the_code_cannot_follow_is_refused(args, kw, says) -> None:
    def serpentine(layer) -> None:
        layer.properties["kernel_order"] = StringAttr("serpentine")

    with pytest.raises(PassFailedException, match=re.escape(says)):
        conv_case(*args, **{"hw": SMALL, **kw}, shift=12, edit=serpentine)


def test_first_slot_is_followed_on_a_lone_layer() -> None:
    """`first_slot` = the second slot's word (with fence and weights_before_fence, as allocate-dram
    writes it): the kernel tiles start there and alternate from it, bit-exact; another word is
    refused in one line, and without weights_before_fence the verifier refuses it."""
    args = (256, 6, 6, 96, 1, 1, 1, 0)

    def second(word):
        def edit(layer) -> None:
            layer.properties["fence"] = UnitAttr()
            layer.properties["weights_before_fence"] = UnitAttr()
            layer.properties["first_slot"] = IntegerAttr(word, i64)
        return edit

    run, got, want, plan, _ = conv_case(*args, hw=SMALL, shift=12, edit=second(512))
    assert plan.first_slot == 512 and np.array_equal(got, want)
    with pytest.raises(PassFailedException, match=re.escape("first_slot 300: the second weights slot is word 512")):
        conv_case(*args, hw=SMALL, shift=12, edit=second(300))

    from snowir.dialects.tile.decisions import FIRST_SLOT
    from snowir.tile.build import bare_conv_layer

    layer = bare_conv_layer("conv", ConvShape(*args[:6], 1, 1, 0, 0, 0, 0, True, 12), np.zeros((96, 256, 1, 1), np.int16),
                            np.zeros(96, np.int16), SMALL)
    layer.properties["first_slot"] = IntegerAttr(512, i64)
    assert FIRST_SLOT.verify(layer) == "first_slot: the second weights slot's word, with weights_before_fence, on a conv layer"


def test_a_lone_kernel_tile_stays_in_its_first_slot() -> None:
    """A conv of one kernel tile keeps it where it starts: in the second slot under `first_slot`, so
    the next conv's first kernels go below it (SqueezeNet's 1x1 128->16 after a serpentine conv
    faulted with them loading over it)."""
    from dataclasses import replace

    from snowir.plan.weights_end import last_kernel_slot

    hw = SnowflakeConfig()
    plan = plan_conv(ConvShape(128, 55, 55, 16, 1, 1, 1, 1, 0, 0, 0, 0, True, 8), hw, 0, 1 << 24, 1 << 25)
    assert plan.tiles == 1 and plan.double_buffer_weights
    k = plan.shape.kernel_words
    assert last_kernel_slot(plan, hw) == (0, k)
    assert last_kernel_slot(replace(plan, first_slot=plan.w_slot), hw) == (plan.w_slot, plan.w_slot + k)


def test_maps_preloaded_on_a_lone_layer_is_refused() -> None:
    def preloaded(layer) -> None:
        layer.properties["fence"] = UnitAttr()
        layer.properties["maps_preloaded"] = UnitAttr()

    with pytest.raises(PassFailedException, match="maps_preloaded needs a conv before it"):
        conv_case(256, 6, 6, 96, 1, 1, 1, 0, hw=SMALL, shift=12, edit=preloaded)


def _bottlenecks(c: int, mid: int, h: int, blocks: int) -> onnx.ModelProto:
    """ResNet-50's layer3 bottleneck blocks (1x1 c->mid, 3x3 mid->mid, 1x1 mid->c + x)."""
    g = GraphBuilder()
    x = "x"
    for i in range(blocks):
        a = g.conv(x, c, mid, 1, f"b{i}c1", pad=0)
        b = g.conv(a, mid, mid, 3, f"b{i}c2", pad=1)
        cc = g.conv(b, mid, c, 1, f"b{i}c3", pad=0, relu=False)
        g.nodes += [helper.make_node("Add", [cc, x], [f"b{i}s"]), helper.make_node("Relu", [f"b{i}s"], [f"b{i}o"])]
        x = f"b{i}o"
    return model(g.nodes, {"x": [1, c, h, h]}, {x: None}, g.inits)


def _run(m: onnx.ModelProto, pipeline: str | None = None) -> dict:
    from snowir.driver.model_api import run_model_on_device

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.onnx"
        onnx.save(m, path)
        r = run_model_on_device(path, pipeline=pipeline, check=True).report
    assert r["check"]["golden_bit_exact"]
    return {layer["name"]: layer["cycles"] for layer in r["layers"] if layer["cycles"]}


def _tile_text(m: onnx.ModelProto) -> str:
    from snowir.tools.snow_opt import main as snow_opt

    with tempfile.TemporaryDirectory() as tmp:
        path, out = Path(tmp) / "m.onnx", Path(tmp) / "tile.mlir"
        onnx.save(m, path)
        assert snow_opt([str(path), "-p", "nn-prepare,nn-to-tile,tile-loop-order,allocate-dram", "-o", str(out)]) == 0
        return out.read_text()


def test_resnet50_layer3_blocks_in_one_program() -> None:
    """Two of ResNet-50's 14² bottleneck blocks, whole-model program, bit-exact against golden: the
    1x1 1024->256 convs run serpentine, the second with its first maps strip and kernels loaded
    by the residual 1x1 before it; the 3x3 part after a serpentine conv starts in the second slot;
    the residual 1x1s have their first strip loaded by the 3x3 part before them (row by row)."""
    m = _bottlenecks(1024, 256, 14, 2)
    cycles = _run(m)
    assert cycles["b1c1"] < 209_000 and cycles["b0c1"] < 212_000  # 216,970 / 219,120 before
    assert cycles["b0c3"] < 216_000 and cycles["b1c3"] < 216_000  # 218,602 / 218,737 before
    text = _tile_text(m)
    layer = lambda name: next(line for line in text.splitlines() if f"tile.layer @{name} " in line)  # noqa: E731
    assert 'kernel_order = "serpentine"' in layer("b1c1") and "maps_preloaded" in layer("b1c1")
    assert "kernels_preloaded" in layer("b1c1")
    assert "first_slot" in layer("b0c2.part0")
    assert "maps_preloaded" in layer("b0c3") and "maps_preloaded" in layer("b1c3")


def test_residual_add_on_the_cheaper_conv() -> None:
    """ResNet-50's layer2.0 (56² 256 -> 128 -> 512, a strided 1x1 projection): by cost the 1x1
    expansion adds the residual (column-split INDP) and the projection runs plain, before it;
    `nn-prepare{...}` with fuse-residual-add by-cost off keeps the projection's add. Both
    bit-exact; the priced pair is faster."""
    g = GraphBuilder()
    a = g.conv("x", 256, 128, 1, "c1", pad=0)
    b = g.conv(a, 128, 128, 3, "c2", pad=1, stride=2)
    c = g.conv(b, 128, 512, 1, "c3", pad=0, relu=False)
    d = g.conv("x", 256, 512, 1, "down", pad=0, stride=2, relu=False)
    g.nodes += [helper.make_node("Add", [c, d], ["s"]), helper.make_node("Relu", ["s"], ["o"])]
    m = model(g.nodes, {"x": [1, 256, 56, 56]}, {"o": None}, g.inits)
    priced = _run(m)
    stock = _run(m, "fuse-residual-add{by-cost=false}")
    assert list(priced)[-2:] == ["down", "c3"] and list(stock)[-2:] == ["c3", "down"]
    assert priced["c3"] + priced["down"] < stock["c3"] + stock["down"] - 20_000


def _preloaded_plans(m: onnx.ModelProto, *names: str) -> list:
    from snowir.driver.model_run import apply_pipeline, load_model
    from snowir.dialects import tile
    from snowir.tile.read import conv_plan_of

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.onnx"
        onnx.save(m, path)
        module, _ = load_model(path)
    apply_pipeline(module, "nn-prepare,nn-to-tile,tile-loop-order,allocate-dram")
    layers = {op.sym_name.data: op for op in module.ops if isinstance(op, tile.LayerOp)}
    return [conv_plan_of(layers[name]) for name in names]


def _cycles_of_text(text: str, tmp_path: Path, name: str) -> dict[str, int]:
    from snowir.driver.model_api import run_model_on_device

    path = tmp_path / f"{name}.mlir"
    path.write_text(text)
    r = run_model_on_device(path, check=True).report
    assert r["check"]["golden_bit_exact"]
    return {layer["name"]: layer["cycles"] for layer in r["layers"] if layer["cycles"]}


def test_maps_preloaded_leaves_the_rows_of_the_last_ops_to_the_conv(tmp_path: Path) -> None:
    """ResNet-50's 14² bottleneck: the residual 1x1's first strip is loaded by the 3x3 part before
    it (`maps_preloaded`), each row once the part's MACs wrote it and no longer read its words. Two
    rows wait for the last output row (its data, and words its taps read), so their LDs could only
    follow a flush after the part's last MACs, which held its end back by the queue's drain: +311
    cycles against no preload (issue 38's slower layers). The conv now loads those rows itself,
    behind its fence (weights_end.preload_maps_split): the part runs
    at most 60 cycles over its time without the preload, the pair well under it. After the
    bypass-slice 1x1 (one strip) every row of the next 1x1's first strip lands while it computes."""
    from snowir.plan.weights_end import preload_maps_loads, preload_maps_split

    hw = SnowflakeConfig()
    m = _bottlenecks(1024, 256, 14, 2)
    part, conv, nxt = _preloaded_plans(m, "b0c2.part1", "b0c3", "b1c1")
    assert conv.maps_preloaded and nxt.maps_preloaded
    kept, left = preload_maps_split(part, conv, hw)
    loads = preload_maps_loads(part, conv)
    assert sorted(kept + left) == sorted(loads) and {p for p, *_ in left} == {part.strips[-1].y1 - 1} and len(left) == 2
    assert preload_maps_split(conv, nxt, hw) == (preload_maps_loads(conv, nxt), ())
    one = _bottlenecks(1024, 256, 14, 1)
    text = _tile_text(one)
    line = next(x for x in text.splitlines() if "tile.layer @b0c3 " in x)
    without = text.replace(line, line.replace(", maps_preloaded", "").replace("maps_preloaded, ", ""))
    assert without.count("maps_preloaded") == text.count("maps_preloaded") - 1
    on, off = _cycles_of_text(text, tmp_path, "on"), _cycles_of_text(without, tmp_path, "off")
    assert on["b0c2.part1"] <= off["b0c2.part1"] + 60, (on, off)  # +311 with the row behind a flush
    assert on["b0c2.part1"] + on["b0c3"] < off["b0c2.part1"] + off["b0c3"] - 2_000

if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def test_no_first_strip_preloaded_after_a_bypass_slice_conv_of_several_strips(tmp_path: Path, capsys) -> None:
    """CenterFace's inverted residual at 15 x 20: a 960 -> 160 1x1 with its residual in bypass
    slices over five strips, then a 160 -> 960 1x1. With the next conv's first strip preloaded by
    its last tile, the 960 -> 160 conv's result was wrong (machine != golden, its own inputs given);
    maps_preloaded now follows only a bypass-slice conv of one strip (or a plain Kloop conv)."""
    from onnx_util import rand, snow_run

    n = helper.make_node
    nodes = [n("Conv", ["x", "w1", "b1"], ["a"], name="expand"), n("Relu", ["a"], ["ar"], name="r1"),
             n("Conv", ["ar", "w2", "b2"], ["d"], pads=[1] * 4, group=960, name="dw"), n("Relu", ["d"], ["dr"], name="r2"),
             n("Conv", ["dr", "w3", "b3"], ["p"], name="project"), n("Add", ["p", "x"], ["s"], name="add"),
             n("Conv", ["s", "w4", "b4"], ["y"], name="next")]
    inits = {"w1": rand(960, 160, 1, 1, seed=1, scale=0.05), "b1": rand(960, seed=2, scale=0.1),
             "w2": rand(960, 1, 3, 3, seed=3, scale=0.2), "b2": rand(960, seed=4, scale=0.1),
             "w3": rand(160, 960, 1, 1, seed=5, scale=0.03), "b3": rand(160, seed=6, scale=0.1),
             "w4": rand(960, 160, 1, 1, seed=7, scale=0.05), "b4": rand(960, seed=8, scale=0.1)}
    path, report = tmp_path / "res.onnx", tmp_path / "r.json"
    onnx.save(model(nodes, {"x": [1, 160, 15, 20]}, {"y": [1, 960, 15, 20]}, inits), path)
    assert snow_run([str(path), "--check", "--quiet", "--report", str(report)]) == 0, capsys.readouterr().err
    layers = json.loads(report.read_text())["layers"]
    assert [row["golden_bit_exact"] for row in layers if row["where"] == "device"] == [True] * 4


def test_a_gathered_bypass_slice_1x1_carries_no_preload() -> None:
    """A Split's halves: A, a 1x1 over the first, and B, a 1x1 over the second taking A's output as its
    bypass (bypass slices; its input a channel slice of x, gathered pixel by pixel), then d, a 1x1 over
    B's output. B's last tile frees its maps pixel by pixel only over whole pixels of its own input:
    d's first strip preloaded by B (keyed by row, run as by pixel) overwrote maps B still read, both
    wrong on both engines (held-out audit). maps_preloaded is refused after such a carrier: bit-exact."""
    import onnx
    from onnx import helper
    from tests.onnx_util import model, rand, run_checked

    n = helper.make_node
    nodes = [n("Split", ["x", "sp"], ["x0", "x1"], name="split", axis=1),
             n("Conv", ["x0", "wa", "ba"], ["a"], name="A", kernel_shape=[1, 1]),
             n("Conv", ["x1", "wb", "bb"], ["b"], name="B", kernel_shape=[1, 1]),
             n("Add", ["b", "a"], ["s"], name="add"), n("Relu", ["s"], ["r"], name="relu"),
             n("Conv", ["r", "w2", "b2"], ["y2"], name="d", kernel_shape=[1, 1]), n("Relu", ["y2"], ["o"], name="relu2")]
    inits = {"sp": np.array([128, 128], np.int64),
             "wa": rand(64, 128, 1, 1, seed=1, scale=1 / 16), "ba": rand(64, seed=2, scale=0.1),
             "wb": rand(64, 128, 1, 1, seed=3, scale=1 / 16), "bb": np.zeros(64, np.float32),
             "w2": rand(32, 64, 1, 1, seed=4, scale=1 / 8), "b2": rand(32, seed=5, scale=0.1)}
    m: onnx.ModelProto = model(nodes, {"x": [1, 256, 8, 8]}, {"o": None}, inits)
    for engine in ("fast", "reference"):
        _, result = run_checked(m, engine)
        assert all(row.golden_bit_exact for row in result.report.layers if row.op == "conv2d")
