"""Whole-model programs (issue 27): the DRAM plan, one program per device segment with layer
markers, the model image and its round trip, and what the machine model does for them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper
from xdsl.dialects.builtin import IntegerAttr, StringAttr, i64
from xdsl.utils.exceptions import VerifyException

from onnx_util import model, rand
from snowir.dialects import snowflake_asm as sf, tile
from snowir.driver.model_api import run_model_on_device
from snowir.driver.model_run import apply_pipeline, load_model
from snowir.hw import SnowflakeConfig
from snowir.segments import main_of, segments_of

TILE = "nn-prepare,nn-to-tile,tile-loop-order"


def _net() -> onnx.ModelProto:
    """conv + max pool, a residual block, a host LRN, a strided conv, global pool and a dense."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool1"),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="block.conv1"),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1], name="block.conv2"),
        helper.make_node("Add", ["c3", "p1"], ["a"]),
        helper.make_node("Relu", ["a"], ["r3"]),
        helper.make_node("LRN", ["r3"], ["n"], size=3, name="lrn"),
        helper.make_node("Conv", ["n", "w4", "b4"], ["c4"], pads=[1, 1, 1, 1], strides=[2, 2], name="conv4"),
        helper.make_node("Relu", ["c4"], ["r4"]),
        helper.make_node("GlobalAveragePool", ["r4"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "w5", "b5"], ["y"], transB=1, name="fc"),
    ]
    inits = {"w1": rand(16, 3, 3, 3, seed=1, scale=0.3), "b1": rand(16, seed=2, scale=0.1),
             "w2": rand(16, 16, 3, 3, seed=3, scale=0.1), "b2": rand(16, seed=4, scale=0.1),
             "w3": rand(16, 16, 3, 3, seed=5, scale=0.1), "b3": rand(16, seed=6, scale=0.1),
             "w4": rand(32, 16, 3, 3, seed=7, scale=0.1), "b4": rand(32, seed=8, scale=0.1),
             "w5": rand(10, 32, seed=9, scale=0.2), "b5": rand(10, seed=10, scale=0.1)}
    return model(nodes, {"x": [1, 3, 16, 16]}, {"y": [1, 10]}, inits)


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("whole") / "net.onnx"
    onnx.save(_net(), str(path))
    return path


def _x() -> np.ndarray:
    return np.random.default_rng(0).uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)


def test_lowered_module_holds_one_program_per_device_segment(net: Path) -> None:
    module, _ = load_model(net)
    apply_pipeline(module, "snowflake-lower")
    segs = segments_of(main_of(module).body.block)
    images = [op for op in module.ops if isinstance(op, sf.ImageOp)]
    # the host LRN and the host global pool split the device layers in three
    assert [s.layers for s in segs.segments] == [["conv1", "pool1", "block.conv1", "block.conv2"], ["conv4"], ["fc"]]
    assert [op.sym_name.data for op in images] == ["segment0", "segment1", "segment2"]
    for image, segment in zip(images, segs.segments):
        markers = [op.label.data for op in image.program.body.block.ops
                   if isinstance(op, sf.LabelOp) and "layer" in op.attributes]
        assert markers == segment.layers
    # every device nn op names its segment and its layer's marker
    for op in main_of(module).body.block.ops:
        if "layer" in op.attributes:
            assert op.attributes["image"].data in ("segment0", "segment1", "segment2")


def test_whole_model_run_is_bit_exact_and_matches_the_layer_by_layer_run(net: Path) -> None:
    whole = run_model_on_device(net, _x(), check=True)
    layers = run_model_on_device(net, _x(), pipeline="snowflake-lower{whole-model=false}", check=True)
    assert whole.report["check"]["golden_bit_exact"] and layers.report["check"]["golden_bit_exact"]
    np.testing.assert_array_equal(whole.outputs[0], layers.outputs[0])
    rows = {r["name"]: r for r in whole.report["layers"]}
    device = [r for r in whole.report["layers"] if r["where"] == "device" and r["cycles"]]
    assert len(device) >= 5 and all(r["stall_cycles"] is not None for r in device)
    # the per-layer rows add up to the machine's cycles of the whole programs
    assert sum(r["cycles"] for r in whole.report["layers"] if r["cycles"]) == whole.report["total"]["cycles"]
    assert rows["pool1"]["cycles"] > 0 and rows["lrn"]["where"] == "host"
    # no copy between layers: the layer-by-layer run moves each output out and back in again
    assert whole.report["total"]["dram_bytes"] <= layers.report["total"]["dram_bytes"]


def _snow_opt(args: list[str]) -> int:
    from snowir.tools.snow_opt import main

    return main(args)


def _snow_run(args: list[str]) -> int:
    from snowir.tools.snow_run import main

    return main(args)


def test_model_image_round_trip_is_byte_exact_and_runs_like_the_onnx(net: Path, tmp_path: Path) -> None:
    sfb, text, again = tmp_path / "m.sfb", tmp_path / "m.mlir", tmp_path / "m2.sfb"
    assert _snow_opt([str(net), "-p", "snowflake-lower", "-t", "snowflake-bin", "-o", str(sfb)]) == 0
    assert sfb.read_bytes()[:4] == b"SFM1"
    assert _snow_opt([str(sfb), "-o", str(text)]) == 0
    assert "snowflake_asm.image @segment1" in text.read_text()
    assert _snow_opt([str(text), "-t", "snowflake-bin", "-o", str(again)]) == 0
    assert sfb.read_bytes() == again.read_bytes()
    x = tmp_path / "x.npy"
    np.save(x, _x())
    ra, rb, ya, yb = (tmp_path / n for n in ("a.json", "b.json", "a.npy", "b.npy"))
    assert _snow_run([str(sfb), "--input", str(x), "--report", str(ra), "--output", str(ya), "--quiet"]) == 0
    assert _snow_run([str(net), "--input", str(x), "--report", str(rb), "--output", str(yb), "--quiet"]) == 0
    a, b = json.loads(ra.read_text()), json.loads(rb.read_text())
    assert [(r["name"], r["cycles"]) for r in a["layers"]] == [(r["name"], r["cycles"]) for r in b["layers"]]
    np.testing.assert_array_equal(np.load(ya), np.load(yb))


def test_a_corrupt_model_image_is_one_line(net: Path, tmp_path: Path, capsys) -> None:
    sfb = tmp_path / "m.sfb"
    assert _snow_opt([str(net), "-p", "snowflake-lower", "-t", "snowflake-bin", "-o", str(sfb)]) == 0
    sfb.write_bytes(sfb.read_bytes()[:-100])
    assert _snow_run([str(sfb), "--quiet"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "corrupt model image" in err[0] and "Traceback" not in err[0]


def _planned(net: Path):
    module, _ = load_model(net)
    apply_pipeline(module, TILE + ",allocate-dram")
    plan = next(op for op in module.ops if isinstance(op, tile.DramPlanOp))
    return module, plan


def test_dram_plan_shares_a_tensor_between_producer_and_consumer(net: Path) -> None:
    module, plan = _planned(net)
    layers = {op.sym_name.data: op for op in module.ops if isinstance(op, tile.LayerOp)}
    regions = {(name, r.label.data): r for name, layer in layers.items()
               for r in layer.body.block.ops if isinstance(r, tile.DramRegionOp)}
    # the pool reads what conv1 wrote, the block's first conv what the pool wrote; the residual
    # conv's bypass is that same tensor, left where it was
    assert regions[("pool1", "maps")].tensor == regions[("conv1", "output")].tensor
    out = regions[("pool1", "output")]
    assert regions[("block.conv1", "maps")].tensor == out.tensor
    assert regions[("block.conv2", "bypass")].tensor == out.tensor
    assert regions[("block.conv2", "maps")].tensor == regions[("block.conv1", "output")].tensor
    weights = [t for t in plan.tensors().values() if t.role.data == "weights"]
    assert all(t._ints("live") == (0, len(layers) - 1) for t in weights)
    module.verify()


def test_dram_plan_verifier_refuses_overlapping_live_tensors(net: Path) -> None:
    module, plan = _planned(net)
    tensors = list(plan.tensors().values())
    a, b = next((a, b) for a in tensors for b in tensors if a is not b and a.role.data == "activation"
                and b.role.data == "activation" and a._ints("live")[1] >= b._ints("live")[0] >= a._ints("live")[0])
    b.properties["offset"] = a.properties["offset"]
    with pytest.raises(VerifyException, match="overlap in DRAM and are both live"):
        plan.verify()
    # a region that does not sit at its tensor's offset is refused too, naming the layer
    module, plan = _planned(net)
    region = next(r for op in module.ops if isinstance(op, tile.LayerOp) for r in op.body.block.ops
                  if isinstance(r, tile.DramRegionOp) and r.tensor is not None)
    region.properties["offset"] = IntegerAttr(region.offset.value.data + 4096, i64)
    with pytest.raises(VerifyException, match="is not its tensor"):
        plan.verify()


def test_a_conv_after_a_max_pool_loads_its_kernels_before_the_fence(net: Path) -> None:
    """The pool unit reads no weights, so block.conv1's first kernel loads issue while pool1 runs
    and only its maps loads wait for the fence; block.conv2 follows a conv ending in weights slot 0,
    so it starts its tiles in its second slot (`first_slot`) and loads early too."""
    module, plan = _planned(net)
    layers = {op.sym_name.data: op for op in module.ops if isinstance(op, tile.LayerOp)}
    assert layers["pool1"].fence is not None and layers["block.conv1"].weights_before_fence is not None
    conv2 = layers["block.conv2"]
    assert conv2.fence is not None and conv2.weights_before_fence is not None and conv2.first_slot is not None
    # an edit that lets a conv after a conv load its kernels where that conv's last tile still
    # reads (first_slot removed) is refused by tile-to-asm, naming the layer and the words
    from xdsl.dialects.builtin import UnitAttr
    from xdsl.utils.exceptions import PassFailedException
    conv2.properties.pop("first_slot")
    conv2.properties.pop("kernels_preloaded", None)
    plan.verify()  # after a conv the verifier cannot tell; the code generator's plans can
    edited = module.clone()
    with pytest.raises(PassFailedException, match=r"block.conv2.*weights_before_fence after conv @block.conv1: "
                                                  r"its first kernels load weights words \[0, \d+\)"):
        apply_pipeline(edited, "tile-to-asm")
    # after a layer that reads no weights and is not a fenced pool, it is refused at once
    layers["pool1"].properties.pop("fence", None)
    layers["block.conv1"].properties["weights_before_fence"] = UnitAttr()
    with pytest.raises(VerifyException, match="block.conv1: weights_before_fence needs a fenced max pool or a conv"):
        plan.verify()
    layers["pool1"].properties["fence"] = UnitAttr()
    del layers["block.conv2"].properties["weights_before_fence"]
    apply_pipeline(module, "tile-to-asm")
    image = next(op for op in module.ops if isinstance(op, sf.ImageOp) and op.attributes["layer"].data == "block.conv1")
    code = [op for op in image.walk() if isinstance(op, sf.SnowflakeInstruction)]
    loads = [(i, op.target.data) for i, op in enumerate(code) if isinstance(op, sf.LdOp)]
    first_maps = next(i for i, target in loads if target == sf.LoadTarget.MAPS)
    first_weights = next(i for i, target in loads if target == sf.LoadTarget.WEIGHTS)
    flush = [op for op in code[first_weights:first_maps] if isinstance(op, sf.VmovOp)
             and op.select.data == sf.VmovSelect.MASK]
    assert len(flush) >= SnowflakeConfig().vector_queue_depth  # the fence, between the kernels and the maps


def test_link_segments_refuses_banked_layer_programs(net: Path) -> None:
    from xdsl.utils.exceptions import PassFailedException

    module, _ = load_model(net)
    apply_pipeline(module, TILE + ",allocate-dram,tile-to-asm,balance-loads")
    images = [op for op in module.ops if isinstance(op, sf.ImageOp)]
    assert all(op.attributes["dram"] == StringAttr("model") for op in images)
    big = images[0].program
    big.body.block.add_op(sf.LdOp(sf.LoadTarget.ICACHE, 0, 1, 2, 0, 1))
    with pytest.raises(PassFailedException, match="banked already"):
        apply_pipeline(module, "link-segments")


# ---------------------------------------------------------------- the machine model follows

SEG = """
snowflake_asm.segment input @x at 0 size 2048
snowflake_asm.segment data @w at 2048 size 8192
snowflake_asm.segment output @y at 16384 size 2048
"""
NOP = "snowflake_asm.mov r0, r0"


def test_a_write_back_consumes_the_bypass_operand() -> None:
    from machine_util import movi, run_both

    x = np.zeros(1024, np.int16)
    x[:16] = 256
    x[512:528] = 100
    body = [movi(1, 0), movi(3, 1024), movi(2, 2048), movi(4, 16),
            "snowflake_asm.ld maps r0, r1, r3 unit 0 to all", "snowflake_asm.ld weights r0, r2, r4 unit 1 to all",
            movi(5, 512), "snowflake_asm.vmov coop bypass r5",
            movi(8, 16384), "snowflake_asm.mac coop r8, r0, r0 trace 16 wb",
            movi(9, 16384 + 64), "snowflake_asm.mac coop r9, r0, r0 trace 16 wb",    # no VMOV bypass before it
            "snowflake_asm.vmov coop bypass r5",
            movi(10, 16384 + 128), "snowflake_asm.mac coop r10, r0, r0 trace 16 wb"]
    w = np.pad(np.full(16, 256, np.int16), (0, 4080))
    y = run_both("\n".join(body), SEG, inputs={"x": x, "w": w}).outputs["y"]
    base = 16 * 256
    assert y[0] == base + 100        # the bypass the VMOV set
    assert y[32] == base             # consumed: the next write-back adds nothing
    assert y[64] == base + 100       # a new VMOV bypass sets it again


def test_ld_icache_loads_the_words_dram_holds_now() -> None:
    """A three-block program whose third block the host rewrites in DRAM after assembly: the
    bank load brings the new instruction, on both engines."""
    from machine_util import movi, program
    from snowir.hw import SnowflakeConfig
    from snowir.machine.encoding import encode
    from snowir.machine.core import Machine
    from snowir.machine.fast import run_fast
    from snowir.machine.reference import run_reference

    # block 2 (instructions 1024..) is loaded into bank 0 once block 0 has run
    body = [movi(1, 4096), movi(2, 8)] + [NOP] * 600 + ["snowflake_asm.ld icache r0, r1, r2 unit 0 to 0"]
    body += [NOP] * (1024 - len(body)) + [movi(5, 1)] + [NOP] * 7
    image, module = program("\n".join(body))
    patched = encode(next(op for op in module.walk() if isinstance(op, sf.MoviOp) and op._int("imm") == 1
                          and op.reg_index("rd") == 5), 1024, {}, SnowflakeConfig().select_bits)
    new = (int(patched) & ~((1 << 22) - 1)) | 2  # the same movi r5 with immediate 2
    results = {}
    for engine in ("fast", "reference"):
        m = Machine(image, SnowflakeConfig())
        m.state.dram[image.code_base + 4 * 1024:image.code_base + 4 * 1025] = np.array([new], "<u4").view(np.uint8)
        run_fast(m) if engine == "fast" else run_reference(m, module)
        results[engine] = m.state.regs[5]
    assert results == {"fast": 2, "reference": 2}


def test_an_endless_program_stops_with_the_same_fault_on_both_engines(tmp_path: Path, capsys) -> None:
    prog = tmp_path / "endless.mlir"
    prog.write_text("snowflake_asm.program @p {\n  snowflake_asm.label @top\n  snowflake_asm.addi r1, r1, 1\n"
                    "  snowflake_asm.ble r0, r0, @top\n" + "  snowflake_asm.mov r0, r0\n" * 4 + "}\n")
    lines = []
    for engine in ("fast", "reference"):
        assert _snow_run([str(prog), "--engine", engine, "--max-instructions", "1000", "--quiet"]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "instruction limit 1000 reached" in err[0] and "at pc " in err[0]
        lines.append(err[0])
    assert lines[0] == lines[1]
    with pytest.raises(SystemExit):  # argparse: "--jobs: must be at least 1, not 0"
        _snow_run([str(prog), "--jobs", "0"])


def test_the_page_interlock_marks_only_the_pages_a_write_back_writes() -> None:
    """A write-back with a CU stride of 4 pages writes 4 small blocks: a load from a page between
    them does not wait for it; a load from a page it wrote does."""
    from machine_util import movi, run_both

    seg = """
snowflake_asm.segment input @x at 0 size 2048
snowflake_asm.segment data @w at 2048 size 8192
snowflake_asm.segment output @y at 16384 size 65536
"""
    def stalls(src: int) -> int:
        body = [movi(1, 0), movi(3, 1024), movi(2, 2048), movi(4, 16),
                "snowflake_asm.ld maps r0, r1, r3 unit 0 to all", "snowflake_asm.ld weights r0, r2, r4 unit 1 to all",
                movi(7, 16384), "snowflake_asm.vmov coop stride r7",
                movi(8, 16384), "snowflake_asm.mac coop r8, r0, r0 trace 16 wb",
                movi(9, src), movi(10, 2048), movi(11, 64),
                "snowflake_asm.ld maps r10, r9, r11 unit 2 to all"]
        x = np.ones(1024, np.int16)
        w = np.pad(np.full(16, 256, np.int16), (0, 4080))
        return run_both("\n".join(body), seg, inputs={"x": x, "w": w}).timing.stalls["dram_raw"]

    assert stalls(16384 + 8192) == 0      # a page between CU 0's and CU 1's blocks
    assert stalls(16384 + 16384) > 0      # CU 1's block
