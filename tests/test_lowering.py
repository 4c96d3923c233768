"""
Conv / max-pool lowering to snowflake_asm: machine output bit-exact with the golden model's
fixed-point arithmetic (both engines), icache banking of long programs, and a shipped model
end to end on the machine model.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr

from machine_util import assert_within_bus
from snowir.plan.shapes import ConvShape, LoweringError, PoolShape
from snowir.plan.conv import plan_conv
from snowir.dialects import snowflake_asm as sf, tile
from snowir.fixedpoint import writeback
from snowir.golden import conv_sum, pool
from snowir.hw import SnowflakeConfig
from snowir.machine.image import assemble
from snowir.machine.run import run_image
from snowir.passes.pipelines import PIPELINE
from snowir.passes.convert.tile_to_asm import TileToAsmPass
from snowir.plan.pool import ring_rows
from snowir.tile.build import bare_conv_layer, bare_pool_layer
from snowir.tile.read import conv_plan_of
from snowir.tools.snow_opt import main as snow_opt
from snowir.tools.snow_run import main as snow_run

HW = SnowflakeConfig()
ASM_PIPELINE = tuple(p for p in PIPELINE[PIPELINE.index("tile-to-asm") + 1:] if p != "link-segments")  # one layer: nothing to link
DIGITS = Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx"


def _hw_options(hw: SnowflakeConfig) -> str:
    if hw == HW:
        return ""
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        f.write(json.dumps(hw.to_json()))
    return f"{{hw={f.name}}}"


def asm_lower(module: ModuleOp, passes=ASM_PIPELINE, hw: SnowflakeConfig = HW) -> None:
    """The asm passes of the default pipeline (or the ones named) on a generated program, for `hw`."""
    from snowir.driver.model_run import apply_pipeline

    if passes:
        apply_pipeline(module, ",".join(f"{p}{_hw_options(hw)}" for p in passes))


def lower_layer(layer: tile.LayerOp, hw: SnowflakeConfig = HW, asm_passes=ASM_PIPELINE) -> sf.ImageOp:
    """One tile layer through tile-to-asm and the asm passes: its program image op."""
    from snowir.driver.model_run import apply_pipeline

    module = ModuleOp([layer])
    apply_pipeline(module, f"tile-to-asm{_hw_options(hw)}")
    asm_lower(module, asm_passes, hw)
    module.verify()
    (image,) = [op for op in module.body.block.ops if isinstance(op, sf.ImageOp)]
    return image


def conv_case(c, h, w, k, kh, kw, s, p, relu=True, shift=14, seed=0, engine="fast", loop_order=None, bypass=False,
              groups=1, mode=None, asm_passes=ASM_PIPELINE, hw=HW, edit=None, biases=None):
    """c: input channels per group; mode (biases) None = the compiler's choice. The layer is decided as
    nn-to-tile and tile-loop-order{order=loop_order} decide it (tile/build.bare_conv_layer),
    `edit`ed (a function of the tile.layer), lowered by tile-to-asm from its tile IR, then
    `asm_passes` (default: the asm part of snowflake-lower)."""
    shape = ConvShape(c, h, w, k, kh, kw, s, s, p, p, p, p, relu, shift, groups)
    rng = np.random.default_rng(seed)
    x = rng.integers(-300, 300, (c * groups, h, w)).astype(np.int16)
    wt = rng.integers(-3000, 3000, (k, c, kh, kw)).astype(np.int16)
    bias = rng.integers(-300, 300, k).astype(np.int16)
    layer = bare_conv_layer("conv", shape, wt, bias, hw, mode, bypass, loop_order, biases)
    if edit is not None:
        edit(layer)
    plan = conv_plan_of(layer)
    image_op = lower_layer(layer, hw, asm_passes)
    image = assemble(image_op, hw)
    byp = rng.integers(-3000, 3000, (k, shape.oh, shape.ow)).astype(np.int16)
    inputs = {"x": x.transpose(1, 2, 0).ravel()}
    if bypass:
        inputs["r"] = byp.transpose(1, 2, 0).ravel()
    run = run_image(image, hw, engine, inputs, module=image_op)
    assert_within_bus(run)
    got = run.outputs["y"].reshape(shape.oh, shape.ow, k).transpose(2, 0, 1)
    acc = conv_sum(x[None], wt, (s, s), (p, p, p, p), (1, 1), groups, dtype=np.float64)[0].astype(np.int64)
    want = writeback(acc, bias.reshape(-1, 1, 1).astype(np.int64), byp.astype(np.int64) if bypass else 0, shift, relu)
    return run, got, want, plan, image


def pool_case(x: np.ndarray, k: int, s: int, p: int, asm_passes=ASM_PIPELINE, hw=HW):
    """A max pool decided as nn-to-tile decides it, lowered by tile-to-asm: (run, got, want, image)."""
    c, hh, ww = x.shape
    oh, ow = (hh + 2 * p - k) // s + 1, (ww + 2 * p - k) // s + 1
    shape = PoolShape(c, hh, ww, k, k, s, s, p, p, oh, ow)
    image_op = lower_layer(bare_pool_layer("pool", shape, hw), hw, asm_passes)
    image = assemble(image_op, hw)
    run = run_image(image, hw, "fast", {"x": x.transpose(1, 2, 0).ravel()}, module=image_op)
    got = run.outputs["y"].reshape(oh, ow, c).transpose(2, 0, 1)
    return run, got, pool(x[None], (k, k), (s, s), (p, p, p, p), False, "max")[0], image


@pytest.mark.parametrize("args", [
    (16, 6, 6, 16, 3, 3, 1, 1),       # one tile, padding rows and columns skipped
    (5, 7, 6, 40, 3, 2, 2, 1),        # C not a multiple of 16, non-square kernel, stride 2, 3 tiles (last masked)
    (40, 9, 9, 33, 1, 1, 1, 0),       # 1x1 conv
    (3, 15, 15, 16, 7, 7, 2, 3),      # first-layer shape: 7x7/2, pad 3
    (72, 10, 10, 16, 3, 5, 1, 2),     # trace of 5*72 = 360
    (256, 6, 4, 16, 5, 1, 1, 0),      # 256-channel rows, kernel 5x1
    (224, 3, 7, 16, 1, 5, 1, 0),      # trace 1120 > 1023: split into chunks
])
def test_conv_bit_exact(args) -> None:
    run, got, want, _, _ = conv_case(*args)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("args", [(16, 6, 6, 16, 3, 3, 1, 1), (24, 9, 7, 40, 3, 3, 1, 1), (32, 40, 40, 32, 3, 3, 1, 1),
                                  (64, 14, 14, 32, 1, 1, 2, 0),
                                  (256, 9, 28, 32, 3, 3, 1, 1)])  # maps rows wider than half the buffer
def test_residual_bypass_bit_exact(args) -> None:
    run, got, want, plan, _ = conv_case(*args, bypass=True)
    assert plan.bypass_addr is not None
    assert np.array_equal(got, want)


@pytest.mark.parametrize("args, groups", [((8, 7, 7, 32, 3, 3, 1, 1), 2), ((48, 9, 9, 48, 5, 5, 1, 2), 3),
                                          ((40, 6, 6, 64, 1, 1, 1, 0), 4)])
def test_grouped_conv_bit_exact(args, groups) -> None:
    for engine in ("fast", "reference"):
        run, got, want, plan, _ = conv_case(*args, groups=groups, engine=engine)
        assert np.array_equal(got, want)


def test_depthwise_is_a_clear_error() -> None:
    with pytest.raises(LoweringError, match="depthwise convs are not"):
        plan_conv(ConvShape(1, 8, 8, 32, 3, 3, 1, 1, 1, 1, 1, 1, True, 14, 32), HW, 0, 0, 0)


def test_conv_both_engines_agree_on_a_whole_layer() -> None:
    ref = conv_case(16, 8, 8, 32, 3, 3, 1, 1, engine="reference")
    fast = conv_case(16, 8, 8, 32, 3, 3, 1, 1, engine="fast")
    assert np.array_equal(ref[1], fast[1]) and np.array_equal(fast[1], fast[2])
    assert ref[0].cycles == fast[0].cycles and dict(ref[0].timing.stalls) == dict(fast[0].timing.stalls)


@pytest.mark.parametrize("order", ["Kloop", "Mloop"])
def test_strips_tiles_and_loop_orders(order: str) -> None:
    # 64 rows of 48x24 words do not fit the maps buffer; 28 rows fit a bank -> 3 strips; 48 kernels -> 3 tiles
    run, got, want, plan, image = conv_case(24, 64, 48, 48, 3, 3, 1, 1, loop_order=order)
    assert len(plan.strips) == 3 and plan.tiles == 3 and plan.loop_order == order
    assert np.array_equal(got, want)
    costs = plan.dram_bytes()
    assert run.timing.load_bytes >= costs[order] and run.timing.load_bytes < costs[order] * 1.2


def test_kernels_too_large_are_a_clear_error() -> None:
    with pytest.raises(LoweringError, match="does not fit the 4096-word weights buffer"):
        plan_conv(ConvShape(512, 7, 7, 16, 3, 3, 1, 1, 1, 1, 1, 1, True, 14), HW, 0, 0, 0)


@pytest.mark.parametrize("args", [(256, 6, 6, 40, 6, 6, 1, 0), (4096, 1, 1, 20, 1, 1, 1, 0)])
def test_fully_connected_streams_kernel_chunks(args) -> None:
    # AlexNet FC6-like (9216-word kernels) and FC7-like (4096 inputs): kernels > weights buffer
    run, got, want, plan, _ = conv_case(*args, relu=False)
    assert plan.shape.kernel_words > HW.weights_buffer_elements
    assert np.array_equal(got, want)


@pytest.mark.parametrize("c, k, s, p, hw_", [(16, 2, 2, 0, 8), (64, 3, 2, 1, 9), (96, 3, 1, 1, 6),
                                             (480, 3, 2, 1, 28),   # rows of 13440 words: strips span both banks
                                             (24, 3, 2, 1, 9), (40, 2, 2, 0, 6)])  # partial last CU
def test_max_pool_bit_exact(c, k, s, p, hw_) -> None:
    x = np.random.default_rng(c).integers(-3000, 3000, (c, hw_, hw_)).astype(np.int16)
    _, got, want, _ = pool_case(x, k, s, p)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("c, k, s, p, hw_", [(64, 3, 2, 1, 112), (256, 3, 2, 0, 27)])
def test_max_pool_ring_loads_each_row_once(c, k, s, p, hw_) -> None:
    """Large pools keep a ring of input rows (a window's rows are separate MAX traces): each
    row is loaded once, not once per overlapping strip, so ResNet's 112x112 pool runs at the
    bus's rate; outputs stay exact where the ring wraps."""
    x = np.random.default_rng(c).integers(-3000, 3000, (c, hw_, hw_)).astype(np.int16)
    oh = (hw_ + 2 * p - k) // s + 1
    assert 0 < ring_rows(PoolShape(c, hw_, hw_, k, k, s, s, p, p, oh, oh), HW) < hw_
    run, got, want, _ = pool_case(x, k, s, p)
    assert np.array_equal(got, want)
    in_b, out_b = x.size * 2, oh * oh * c * 2
    # rows, write-backs and the program's instruction fetches: less than one row reloaded
    assert 0 < run.timing.dram_bytes - (in_b + out_b) < hw_ * c * 2


def test_resident_kernel_tiles_load_once_per_layer() -> None:
    """All kernel tiles fit the weights buffer together: Kloop loads them once for the layer,
    not once per maps strip, and the output stays exact."""
    run, got, want, plan, _ = conv_case(256, 20, 20, 64, 1, 1, 1, 0)
    assert plan.resident_weights and len(plan.strips) > 1 and plan.tiles == 4
    assert np.array_equal(got, want)
    maps, weights = 20 * 20 * 256 * 2, 4 * 16 * plan.shape.kernel_words * 2
    assert plan.dram_bytes()["Kloop"] == maps + weights
    assert run.timing.dram_bytes < maps + 2 * weights + 20 * 20 * 64 * 2 + 8192  # weights went once


@pytest.mark.parametrize("c, h, k, s, engine", [(256, 14, 1024, 1, "fast"), (512, 12, 400, 1, "fast"),
                                                (128, 28, 600, 2, "reference")])
def test_bypass_slices(c, h, k, s, engine) -> None:
    """A residual 1x1 conv with its bypass in per-kernel-tile slices (one strip; two strips;
    a gathered stride-2 conv; a partial last tile): exact, on both engines."""
    run, got, want, plan, _ = conv_case(c, h, h, k, 1, 1, s, 0, bypass=True, engine=engine)
    assert plan.bypass_slices
    assert np.array_equal(got, want)


def test_residual_rows_double_buffered() -> None:
    """A residual 1x1 conv with 4-cycle traces: bypass rows beside the maps in the two halves of
    the buffer in turn (the cost model prefers them to slices, whose LDs would cost issue
    slots), the kernels resident, pixels unrolled with the bypass VMOVs; exact (COOP: the
    column-split INDP plan is cheaper here, test_indp_columns.py)."""
    run, got, want, plan, _ = conv_case(64, 24, 24, 256, 1, 1, 1, 0, bypass=True, mode="COOP")
    assert not plan.bypass_slices and plan.resident_weights and [st.bank for st in plan.strips[:2]] == [0, 1]
    assert np.array_equal(got, want)


def test_channel_slice_conv_gathers_its_channels() -> None:
    """A conv over channels [256, 512) of a 512-channel tensor (a split-kernels part) is planned
    on the 256 channels it reads, gathered pixel by pixel."""
    s = ConvShape(256, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1, True, 14, cin_total=512, c_base=256)
    plan = plan_conv(s, HW, 0, 1 << 20, 1 << 22)
    assert plan.gather == (1, 1, 14, 512, 256) and plan.shape.cin == 256 and len(plan.strips) == 1


def test_banking_keeps_loops_inside_banks() -> None:
    # Mloop is emitted tile by tile (no K loop), so this program is long
    run, got, want, _, image = conv_case(64, 13, 13, 128, 3, 3, 1, 1, loop_order="Mloop")
    assert np.array_equal(got, want)
    assert len(image.code) > 1024  # streamed through the instruction cache
    assert run.timing.icache_generation >= 2  # the preload plus at least one bank refill
    from snowir.machine.image import disassemble

    program = next(op for op in disassemble(image).ops if isinstance(op, sf.ProgramOp))
    labels = {}
    pc = 0
    for op in program.body.block.ops:
        if isinstance(op, sf.LabelOp):
            labels[op.label.data] = pc
        else:
            pc += 1
    pc = 0
    for op in program.body.block.ops:
        if isinstance(op, sf.LabelOp):
            continue
        if isinstance(op, sf.BranchOperation):
            assert labels[op.target.data] // 512 == pc // 512 == (pc + 4) // 512
        pc += 1


def test_digits_cnn_end_to_end_on_the_machine(tmp_path: Path) -> None:
    rep = tmp_path / "r.json"
    for engine in ("fast", "reference"):
        assert snow_run([str(DIGITS), "--engine", engine, "--check", "--quiet", "--report", str(rep)]) == 0
        r = json.loads(rep.read_text())
        assert r["check"]["golden_bit_exact"] is True and r["check"]["snr_db"] >= 30 and r["check"]["top1_match"]
        convs = [layer for layer in r["layers"] if layer["op"] in ("conv2d", "dense")]
        assert [layer["op"] for layer in convs] == ["conv2d", "conv2d", "dense"]
        assert len(convs) == 3 and all(layer["cycles"] > 0 for layer in convs)
        # conv1 reads one input channel: INDP (16 kernels per vMAC, every lane busy); pool1 stays
        # its own layer: so short a conv would not hide the pool's traffic (fused_pool.fusing_pays)
        assert [layer["mode"] for layer in convs] == ["INDP", "COOP", "COOP"]
        pools = {layer["name"]: layer for layer in r["layers"] if layer["op"] == "max_pool"}
        assert "computes" not in convs[0] and pools["pool1"]["cycles"] > 0 and "computed_by" not in pools["pool1"]
        assert r["total"]["cycles"] == sum(layer["cycles"] for layer in r["layers"])
        # useful MACs: the golden model's padding-free count, layer by layer
        golden = tmp_path / "g.json"
        assert snow_run([str(DIGITS), "--engine", "golden", "--quiet", "--report", str(golden)]) == 0
        g = {layer["name"]: layer["macs"] for layer in json.loads(golden.read_text())["layers"]}
        assert {layer["name"]: layer["macs"] for layer in r["layers"]} == g
        assert g["conv1"] == 22 * 22 * 16  # 8x8, 3x3 pad 1, 1 -> 16: 22 valid taps per axis
        assert all(layer["gbps"] <= 4.2 and layer["macs"] <= layer["lane_macs"] for layer in convs)


def test_tile_ir_decisions_drive_codegen(tmp_path: Path) -> None:
    """Lower to tile, edit a loop order in the text, run the edited module: the program follows
    the edit (report and code) and still computes the golden outputs; an edit the planner cannot
    honour (Mloop on an INDP layer) is refused in one line."""
    from snowir import api

    tiled = tmp_path / "tiled.mlir"
    assert snow_opt([str(DIGITS), "-p", "nn-prepare,nn-to-tile,tile-loop-order", "-o", str(tiled)]) == 0
    text = tiled.read_text()
    assert text.count("#tile<loop_order Kloop>") == 3
    conv2 = text.index("tile.layer @conv2")
    edited = tmp_path / "edited.mlir"
    edited.write_text(text[:conv2] + text[conv2:].replace("#tile<loop_order Kloop>", "#tile<loop_order Mloop>", 1))
    rep = tmp_path / "r.json"
    assert snow_run([str(edited), "--check", "--quiet", "--report", str(rep)]) == 0
    r = json.loads(rep.read_text())
    assert r["check"]["golden_bit_exact"] is True
    assert {layer["name"]: layer["loop_order"] for layer in r["layers"] if layer["op"] in ("conv2d", "dense")} == \
        {"conv1": "Kloop", "conv2": "Mloop", "fc": "Kloop"}
    module = api.parse_mlir(edited)
    TileToAsmPass().apply(Context(), module)
    assert [op.sym_name.data for op in module.ops if isinstance(op, sf.ImageOp)] == ["conv1", "pool1", "conv2", "pool2", "fc"]
    bad = tmp_path / "bad.mlir"
    bad.write_text(text.replace("#tile<loop_order Kloop>", "#tile<loop_order Mloop>", 1))  # conv1 is INDP
    assert snow_run([str(bad), "--quiet"]) == 1
    # a window or load edit tile-to-asm would not follow is refused, not ignored
    window = text.index("rows = 3", text.index("tile.window", conv2))
    bad.write_text(text[:window] + "rows = 1" + text[window + len("rows = 3"):])
    with pytest.raises(Exception, match="maps tile 0: its loads and windows differ from what its attributes imply"):
        TileToAsmPass().apply(Context(), api.parse_mlir(bad))
    bad.write_text(text.replace("unit = 0 : i64, select = 1 : i64", "unit = 2 : i64, select = 1 : i64", 1))
    with pytest.raises(Exception, match="load units are balance-loads' decision"):
        TileToAsmPass().apply(Context(), api.parse_mlir(bad))


def _residual_block(tmp_path: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = lambda *s, fan: (rng.standard_normal(s) * np.sqrt(2.0 / fan)).astype(np.float32)  # noqa: E731
    inits = [numpy_helper.from_array(w(32, 16, 3, 3, fan=144), "w0"), numpy_helper.from_array(np.zeros(32, np.float32), "b0"),
             numpy_helper.from_array(w(32, 32, 3, 3, fan=288), "w1"), numpy_helper.from_array(np.full(32, 0.1, np.float32), "b1"),
             numpy_helper.from_array(w(32, 32, 3, 3, fan=288) * 0.3, "w2"), numpy_helper.from_array(np.zeros(32, np.float32), "b2")]
    n = helper.make_node
    nodes = [n("Conv", ["x", "w0", "b0"], ["c0"], name="stem", pads=[1, 1, 1, 1]), n("Relu", ["c0"], ["r0"]),
             n("Conv", ["r0", "w1", "b1"], ["c1"], name="branch_a", pads=[1, 1, 1, 1]), n("Relu", ["c1"], ["r1"]),
             n("Conv", ["r1", "w2", "b2"], ["c2"], name="branch_b", pads=[1, 1, 1, 1]),
             n("Add", ["c2", "r0"], ["s"], name="residual"), n("Relu", ["s"], ["y"])]
    g = helper.make_graph(nodes, "res", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 12, 12])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    path = tmp_path / "resblock.onnx"
    onnx.save(m, str(path))
    return path


def test_residual_block_end_to_end(tmp_path: Path) -> None:
    """add(conv, r) + ReLU fused into the conv's write-back: one VMOV bypass per write-back MAC."""
    rep = tmp_path / "r.json"
    assert snow_run([str(_residual_block(tmp_path)), "--check", "--quiet", "--report", str(rep)]) == 0
    r = json.loads(rep.read_text())
    assert r["check"]["golden_bit_exact"] is True and r["check"]["snr_db"] > 40
    assert [layer["name"] for layer in r["layers"] if layer["cycles"]] == ["stem", "branch_a", "branch_b"]


def test_model_trace_has_every_layer(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    assert snow_run([str(DIGITS), "--quiet", "--trace", str(trace)]) == 0
    events = json.loads(trace.read_text())["traceEvents"]
    layers = [e for e in events if e["ph"] == "X" and e["name"].startswith("layer ")]
    assert [e["name"] for e in layers] == ["layer conv1", "layer pool1", "layer conv2", "layer pool2", "layer fc"]
    assert all(a["ts"] + a["dur"] <= b["ts"] + 1e-9 for a, b in zip(layers, layers[1:]))
    assert any(e["ph"] == "X" and e["name"].startswith("MAX") for e in events)


def test_split_kernel_conv_end_to_end(tmp_path: Path) -> None:
    """A 3x3x512 conv (kernel > weights buffer): split-kernels makes channel-slice convs chained
    through the bypass (two at least; three by cost, which double-buffer); the machine reads the
    slices in place, bit-exact with golden."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    w = (rng.standard_normal((32, 512, 3, 3)) * np.sqrt(2 / 4608)).astype(np.float32)
    b = (rng.standard_normal(32) * 0.1).astype(np.float32)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w", "b"], ["c"], name="big", pads=[1, 1, 1, 1]),
                           helper.make_node("Relu", ["c"], ["y"])], "split",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 512, 5, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 5, 5])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    path = tmp_path / "split.onnx"
    onnx.save(m, str(path))
    rep = tmp_path / "r.json"
    assert snow_run([str(path), "--check", "--quiet", "--report", str(rep)]) == 0
    r = json.loads(rep.read_text())
    assert r["check"]["golden_bit_exact"] is True and r["check"]["snr_db"] > 40
    parts = [layer["name"] for layer in r["layers"] if layer["cycles"]]
    assert len(parts) >= 2 and parts == [f"big.part{i}" for i in range(len(parts))]


@pytest.mark.parametrize("order", ["Kloop", "Mloop"])
def test_strips_spanning_both_banks(order: str) -> None:
    # VGG's 224x64 rows: 3 rows (43008 words) exceed a bank; strips use the whole buffer in turn
    run, got, want, plan, _ = conv_case(64, 9, 224, 32, 3, 3, 1, 1, loop_order=order)
    assert all(strip.bank == -1 for strip in plan.strips) and len(plan.strips) > 1
    assert np.array_equal(got, want)


def test_whole_strips_load_as_the_last_tile_frees_their_rows() -> None:
    """ResNet-50's 56², 3x3/2, 128->128 conv takes whole-buffer strips (9 input rows, 129 KB):
    the next strip's rows load during the last kernel tile as it frees them. Loaded after that
    tile, behind a flush, they left the CUs waiting ~31.7 k cycles (473 k cycles, now 446 k)."""
    run, got, want, plan, _ = conv_case(128, 56, 56, 128, 3, 3, 2, 1)
    assert np.array_equal(got, want)
    assert plan.loop_order == "Kloop" and len(plan.strips) > 2 and all(st.bank == -1 for st in plan.strips)
    later = sum((st.r1 - st.r0) * 56 * 128 * 2 for st in plan.strips[1:])
    assert run.timing.stalls["cu_load_wait"] < 0.25 * later / HW.dram_bytes_per_cycle


def test_residual_1x1_slices_hold_two_kernel_tiles() -> None:
    """ResNet-50's 128->512 residual 1x1 (28 columns; 14 of its 28 rows, to halve the test's time):
    a bypass slice of one kernel tile costs an LD per pixel per tile, whose start-ups on the load
    units bound the layer (137.1 k cycles); slices of two tiles (`slice_tiles`) cut them (119.7 k).
    The attribute removed from the tile IR gives one tile a slice again, still bit-exact. (COOP
    pinned: the compiler runs this shape as column-split INDP, tests/test_indp_columns.py.)"""
    args = (128, 14, 28, 512, 1, 1, 1, 0)
    run2, got, want, plan, _ = conv_case(*args, bypass=True, shift=8, mode="COOP")
    assert np.array_equal(got, want) and plan.bypass_slices and plan.slice_tiles == 2
    run1, got, want, plan, _ = conv_case(*args, bypass=True, shift=8, mode="COOP",
                                         edit=lambda layer: layer.properties.pop("slice_tiles"))
    assert np.array_equal(got, want) and plan.bypass_slices and plan.slice_tiles == 1
    assert run2.cycles < 0.97 * run1.cycles


def test_a_sliced_residual_1x1_loads_its_next_strip_during_the_last_tiles() -> None:
    """ResNet-50's 56² -> 28², stride-2, 256->512 residual 1x1 runs 4 strips of 7 rows: the next
    strip's first bypass slice loads during the last tile (into the slice the last tile does not
    read) and its maps rows as the last tile frees them; after the strip, behind a flush, they
    left the CUs waiting 16.8 k cycles (452.5 k cycles; now 441.0 k)."""
    run, got, want, plan, _ = conv_case(256, 56, 56, 512, 1, 1, 2, 0, bypass=True, shift=8)
    assert np.array_equal(got, want)
    assert plan.bypass_slices and len(plan.strips) == 4 and plan.gather is not None
    assert run.timing.stalls["cu_load_wait"] < 12000


def test_a_short_strips_prefetch_goes_inside_its_first_row() -> None:
    """ResNet-50's 28², 1x1, 512->128 conv runs 2-row strips: a tile's next kernels and maps
    piece (~1.4 k cycles on the bus) had only the half tile after its first row to land (224 k
    cycles, ~20 k waiting on loads); they now go after the pixel issuing the 16th MAC."""
    run, got, want, plan, _ = conv_case(512, 28, 28, 128, 1, 1, 1, 0)
    assert np.array_equal(got, want)
    assert max(st.y1 - st.y0 for st in plan.strips) <= 2 and plan.tiles == 8
    assert run.timing.stalls["cu_load_wait"] < 8000


@pytest.mark.parametrize("args", [
    (64, 13, 13, 80, 3, 3, 1, 1),      # 5 tiles: K loop of 4, double-buffered weights
    (256, 9, 9, 72, 3, 3, 1, 1),       # kernels > one weights slot (not double-buffered), partial last tile
    (16, 60, 40, 48, 3, 3, 1, 1),      # several maps strips, each with its own K loop
])
def test_kloop_is_a_loop(args) -> None:
    """The Kloop order emits tiles 0..T-2 as one counted loop (C17 Figure 3): the static program
    does not grow with the number of kernel tiles, and the output stays bit-exact."""
    run, got, want, plan, image = conv_case(*args)
    assert np.array_equal(got, want)
    assert plan.loop_order == "Kloop" and plan.tiles >= 3
    c, h, w, k = args[:4]
    _, _, _, _, fewer = conv_case(c, h, w, k + 32, *args[4:])
    assert len(fewer.code) == len(image.code)


def test_kloop_residual_bit_exact() -> None:
    run, got, want, plan, image = conv_case(32, 8, 8, 80, 1, 1, 1, 0, bypass=True, mode="COOP")
    assert np.array_equal(got, want)
    assert plan.tiles == 5 and run.machine.dynamic > len(image.code)


@pytest.mark.parametrize("args, engine", [
    ((3, 23, 23, 64, 7, 7, 2, 3), "fast"),      # ResNet conv1 shape: border rows on CU 0, row groups on 4 CUs
    ((3, 20, 20, 96, 3, 3, 1, 1), "fast"),      # 2 kernel tiles, the second half masked; double-buffered weights
    ((5, 9, 7, 32, 3, 2, 1, 1), "reference"),   # K < 64: vMACs 2-3 masked; the xDSL-interpreter engine
])
def test_indp_bit_exact(args, engine) -> None:
    run, got, want, plan, _ = conv_case(*args, engine=engine, mode="INDP")
    assert plan.mode == "INDP"
    assert np.array_equal(got, want)


def test_indp_chosen_for_few_channels_and_faster() -> None:
    from snowir.plan.conv import choose_mode

    conv1 = ConvShape(3, 32, 32, 64, 7, 7, 2, 2, 3, 3, 3, 3, True, 14)
    assert choose_mode(conv1, HW, False) == "INDP"
    assert choose_mode(conv1, HW, True) == "COOP"  # a residual conv stays COOP
    assert choose_mode(ConvShape(64, 8, 8, 64, 3, 3, 1, 1, 1, 1, 1, 1, True, 14), HW, False) == "COOP"
    assert choose_mode(ConvShape(3, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1, True, 14), HW, False) == "COOP"  # 16 of 64 lanes
    # (priced: INDP estimated 502 cycles cheaper, under MODE_PRICE_FLOOR; measured 1,230 INDP vs 1,171 COOP)
    with pytest.raises(LoweringError, match="INDP needs"):  # 16 x 11x11x3 kernels exceed the weights buffer
        choose_mode(ConvShape(3, 32, 32, 64, 11, 11, 4, 4, 2, 2, 2, 2, True, 14), HW, False, "INDP")
    indp, got, want, _, _ = conv_case(3, 31, 31, 64, 7, 7, 2, 3)
    coop, got2, want2, _, _ = conv_case(3, 31, 31, 64, 7, 7, 2, 3, mode="COOP")
    assert np.array_equal(got, want) and np.array_equal(got2, want2)
    # measured 15.7 k vs 26.4 k cycles (2.0x at 63x63: fewer single-CU border rows)
    assert indp.cycles * 3 < coop.cycles * 2


def test_mode_priced_where_the_lane_rule_misses_the_issue_slots() -> None:
    """A 3 -> 32 3x3/2 stem (MobileNetV2's, CenterFace's): the lane rule takes COOP (9 of a trace's
    16 lanes against 32 of 64 kernels), but COOP's 9-word traces are issue-bound; the placement
    estimate takes INDP, which runs 3x faster, both bit-exact."""
    from snowir.plan.conv import choose_mode
    from snowir.plan.indp import mode_rule

    s = ConvShape(3, 48, 64, 32, 3, 3, 2, 2, 1, 1, 1, 1, True, 14)
    assert mode_rule(s, HW, False) == "COOP" and choose_mode(s, HW, False) == "INDP"
    chosen, got, want, plan, _ = conv_case(3, 48, 64, 32, 3, 3, 2, 1)
    coop, got2, want2, _, _ = conv_case(3, 48, 64, 32, 3, 3, 2, 1, mode="COOP")
    assert plan.mode == "INDP" and np.array_equal(got, want) and np.array_equal(got2, want2)
    assert chosen.cycles * 2 < coop.cycles  # measured 6,488 vs 19,470


@pytest.mark.parametrize("order, bypass", [("Kloop", False), ("Mloop", False), ("Kloop", True)])
def test_strided_1x1_gathers_the_pixels_it_reads(order, bypass) -> None:
    """A stride-2 1x1 conv reads a quarter of its input: the plan is the compact stride-1 conv
    over those pixels, its maps strips gathered with one LD per pixel (also with a residual
    bypass: ResNet-50's downsample convs carry the block's add)."""
    run, got, want, plan, _ = conv_case(64, 11, 9, 48, 1, 1, 2, 0, loop_order=order, bypass=bypass)
    assert plan.gather == (2, 2, 9, 64, 0) and (plan.shape.h, plan.shape.w, plan.shape.sy) == (6, 5, 1)
    assert np.array_equal(got, want)


def test_strided_1x1_fewer_strips_than_full_rows() -> None:
    # C17 Table 3's layer, 1x1 1024->2048 stride 2 on 14x14: 7 output rows in one strip, not 7 strips
    shape = ConvShape(1024, 14, 14, 2048, 1, 1, 2, 2, 0, 0, 0, 0, False, 14)
    plan = plan_conv(shape, HW, 0, 1 << 20, 1 << 24)
    assert plan.gather is not None and len(plan.strips) == 1
    assert plan.dram_bytes()["Kloop"] < 2 * 2048 * 1040 * 2  # the weights go once


def test_tiling_by_estimated_cycles() -> None:
    """A 7x7x2048 input does not fit the maps buffer: buffer-sized strips (2, loaded in turn)
    re-send the 2 MB of weights half as often as bank-sized ones (4, double-buffered); the cost
    model picks them, and the output stays bit-exact."""
    plan = plan_conv(ConvShape(2048, 7, 7, 512, 1, 1, 1, 1, 0, 0, 0, 0, True, 14), HW, 0, 1 << 20, 1 << 24)
    assert len(plan.strips) == 2 and plan.strips[0].bank == -1 and plan.loop_order == "Kloop"
    run, got, want, small, _ = conv_case(2048, 7, 7, 256, 1, 1, 1, 0)
    assert small.strips[0].bank == -1 and np.array_equal(got, want)


S2D_MODEL = Path(__file__).parent / "filecheck" / "nn" / "passes" / "space_to_depth.mlir"


def test_space_to_depth_is_exact_and_runs_on_the_machine() -> None:
    """The rewrite only reorders the same integer products: the golden model of the rewritten
    graph equals the original's bit for bit, and the machine matches it (conv1 in COOP over 48
    channels instead of 3)."""
    from snowir import api
    from snowir.driver.device_run import run_device
    from snowir.golden import Golden
    from snowir.driver.model_run import apply_pipeline

    text = S2D_MODEL.read_text()
    x = np.random.default_rng(3).standard_normal((1, 3, 35, 35)).astype(np.float32)
    without = api.parse_text(text)
    apply_pipeline(without, "drop-identity,fold-batch-norm,fuse-residual-add,fuse-relu,fc-to-conv,"
                            "avgpool-to-conv,split-kernels,partition-host,quantize")
    a = Golden(without).run(x)[0]  # before the next parse drops this module's weight blobs
    with_s2d = api.parse_text(text)
    apply_pipeline(with_s2d, "drop-identity,fold-batch-norm,fuse-residual-add,fuse-relu,fc-to-conv,"
                             "avgpool-to-conv,split-kernels,space-to-depth,partition-host,quantize")
    assert any(op.name == "nn.space_to_depth" for op in with_s2d.walk())
    b = Golden(with_s2d).run(x)[0]
    assert np.array_equal(a, b)
    apply_pipeline(with_s2d, "snowflake-lower")
    run = run_device(with_s2d, x)
    assert all(layer.bit_exact for layer in run.layers) and np.array_equal(run.outputs[0], b)
    assert run.layers[0].name == "conv1" and run.layers[0].op == "conv2d"


UNFOLD_MODEL = Path(__file__).parent / "filecheck" / "nn" / "passes" / "unfold_rows.mlir"


def test_unfold_rows_is_exact_runs_on_the_machine_and_beats_space_to_depth() -> None:
    """nn-prepare unfolds AlexNet's 11x11/4 conv1 (kernel rows as channels): the same integer
    products, so the golden model equals the original graph's bit for bit, the machine matches
    it, the report counts only the original conv's useful MACs (not the padding rows' zero
    channels), and the layer takes fewer cycles than with space-to-depth."""
    from snowir import api
    from snowir.driver.device_run import run_device
    from snowir.golden import Golden
    from snowir.host_model import useful_macs
    from snowir.driver.model_run import apply_pipeline

    text = UNFOLD_MODEL.read_text()
    x = np.random.default_rng(4).standard_normal((1, 3, 35, 35)).astype(np.float32)
    plain = "drop-identity,fold-batch-norm,fuse-residual-add,fuse-relu,fc-to-conv,avgpool-to-conv,split-kernels,"
    without = api.parse_text(text)
    apply_pipeline(without, plain + "partition-host,quantize")
    want = Golden(without).run(x)
    original_macs = useful_macs(next(op for op in without.walk() if op.attributes.get("onnx_node") == StringAttr("conv1")))
    s2d = api.parse_text(text)  # (each parse drops the previous module's weight blobs: use it first)
    apply_pipeline(s2d, plain + "space-to-depth,partition-host,quantize,snowflake-lower")
    s2d_cycles = run_device(s2d, x).layers[0].cycles
    unfolded = api.parse_text(text)
    apply_pipeline(unfolded, "nn-prepare")
    assert [op.name for op in unfolded.walk() if op.name in ("nn.unfold_rows", "nn.space_to_depth")] == ["nn.unfold_rows"]
    got = Golden(unfolded).run(x)
    assert all(np.array_equal(a, b) for a, b in zip(want, got))
    apply_pipeline(unfolded, "snowflake-lower")
    run = run_device(unfolded, x)
    assert all(layer.bit_exact for layer in run.layers)
    assert all(np.array_equal(a, b) for a, b in zip(run.outputs, got))
    conv1 = run.layers[0]
    assert conv1.name == "conv1" and conv1.macs == original_macs
    assert conv1.cycles < s2d_cycles


@pytest.mark.parametrize(("gbps", "layout"), [(4.2, "nn.unfold_rows"), (2.0, "nn.space_to_depth")])
def test_unfold_rows_gives_way_to_space_to_depth_on_a_slow_bus(tmp_path: Path, gbps: float, layout: str) -> None:
    """The unfolded input is 2.75x AlexNet conv1's: on 16 CUs it still wins at 4.2 GB/s (measured
    75 k vs 87 k cycles) but not at 2 GB/s (157 k vs 103 k), and the layer estimate says so."""
    from snowir import api
    from snowir.driver.model_run import apply_pipeline

    hw = tmp_path / "hw.json"
    SnowflakeConfig(cus=16, dram_gbps=gbps, unit_gbps=min(2.0, gbps)).save(hw)
    module = api.parse_text(UNFOLD_MODEL.read_text().replace("35x35", "224x224").replace("8x8", "55x55")
                            .replace("3x3xf32", "27x27xf32").replace("15x15", "109x109"))
    apply_pipeline(module, f"nn-prepare{{hw={hw}}}")
    assert [op.name for op in module.walk() if op.name in ("nn.unfold_rows", "nn.space_to_depth")] == [layout]


def test_one_route_lowered_module_runs_as_the_model(tmp_path: Path) -> None:
    """snowflake-lower spelled out gives the same module; the lowered module (one image per
    device segment, weights inside) prints, parses and runs with --check, with the cycles of
    `snow-run model.onnx`; a second snowflake-lower changes nothing."""
    low, spelled, again = tmp_path / "low.mlir", tmp_path / "spelled.mlir", tmp_path / "again.mlir"
    assert snow_opt([str(DIGITS), "-p", "snowflake-lower", "-o", str(low)]) == 0
    assert snow_opt([str(DIGITS), "--pass-pipeline", f"builtin.module({','.join(PIPELINE)})", "-o", str(spelled)]) == 0
    assert low.read_text() == spelled.read_text()
    assert snow_opt([str(low), "-p", "snowflake-lower", "-o", str(again)]) == 0
    assert again.read_text() == low.read_text()
    assert low.read_text().count("snowflake_asm.image @") == 1  # one device segment, its 5 layers behind markers
    assert low.read_text().count("snowflake_asm.label @") >= 5
    direct, lowered = tmp_path / "direct.json", tmp_path / "lowered.json"
    assert snow_run([str(DIGITS), "--quiet", "--report", str(direct)]) == 0
    assert snow_run([str(low), "--check", "--quiet", "--report", str(lowered)]) == 0
    d, lw = json.loads(direct.read_text()), json.loads(lowered.read_text())
    assert lw["check"]["golden_bit_exact"] is True
    assert [(x["name"], x["cycles"]) for x in d["layers"]] == [(x["name"], x["cycles"]) for x in lw["layers"]]
    assert all(x["load_imbalance_pct"] is not None for x in lw["layers"] if x["op"] in ("conv2d", "dense"))


def test_staggered_kernel_tiles_prefetch_what_does_not_overlap() -> None:
    """3x3x256 kernels (2320 words) do not fit half the 8 KB weights buffer: tiles alternate
    between bases 0 and F = 4096 - 2320 = 1776, the next tile's F non-overlapping words load
    during the current tile and only 544 after it; bit-exact, and the CUs wait far less."""
    from snowir.plan.shapes import weights_stagger
    from snowir.machine.image import disassemble

    shape = ConvShape(256, 7, 7, 48, 3, 3, 1, 1, 1, 1, 1, 1, True, 14)
    assert weights_stagger(shape, HW) == 1776
    run, got, want, plan, image = conv_case(256, 7, 7, 48, 3, 3, 1, 1)
    assert np.array_equal(got, want) and plan.loop_order == "Kloop" and not plan.double_buffer_weights
    text = str(disassemble(image))
    assert "snowflake_asm.movi r18, 1776" in text and "snowflake_asm.movi r18, 544" in text
    # the first tile's 74 KB (~4.4 k cycles at the bus rate) is exposed; the two later tiles wait
    # only for their 544 overlapping words, not for a whole tile each (15.0 k cycles unstaggered)
    assert run.timing.stalls["cu_load_wait"] < 2 * (16 * 2320 * 2 / 16.8)


@pytest.mark.parametrize("args, bypass", [((128, 28, 28, 512, 1, 1, 1, 0), True),   # ResNet-50's 28² residual 1x1
                                          ((128, 56, 56, 128, 3, 3, 2, 1), False)])  # its 56² 3x3/2
def test_a_faster_bus_does_not_make_a_layer_slower(args, bypass) -> None:
    """At 8.4 GB/s the planners once chose one-row strips whose kernels were re-sent per strip
    and loaded after each tile (ResNet-50 73.6 ms against 68.2 at 4.2): the cost models now
    price LD start-ups per unit and the flush a one-row tile's prefetch goes behind."""
    cycles = {}
    for gbps in (4.2, 8.4):
        run, got, want, plan, _ = conv_case(*args, bypass=bypass, hw=SnowflakeConfig(dram_gbps=gbps), shift=8)
        assert np.array_equal(got, want)
        cycles[gbps] = run.cycles
    assert cycles[8.4] <= cycles[4.2], cycles


def test_a_faster_bus_keeps_a_kernel_split_that_pays(tmp_path: Path) -> None:
    """AlexNet's 13², 3x3, 384->256 conv runs as two channel parts whose kernels double-buffer
    (the whole 3472-word kernel can only stagger). The residual part's cost model counted the
    padding taps the machine skips (298 k estimated, 275 k measured), so at 8.4 GB/s
    split-kernels kept the layer whole, and it ran slower than at 4.2 GB/s (578 k against
    542 k cycles): AlexNet-OWT took longer on the faster bus."""
    import onnx
    from onnx import helper
    from onnx_util import model, rand
    from snowir.driver.model_api import run_model_on_device

    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["y"], ["o"])]
    path = tmp_path / "conv4.onnx"
    onnx.save(model(nodes, {"x": [1, 384, 13, 13]}, {"o": [1, 256, 13, 13]},
                    {"w": rand(256, 384, 3, 3, seed=1, scale=1 / 59), "b": rand(256, seed=2, scale=0.1)}), path)
    cycles, names = {}, {}
    for gbps in (4.2, 8.4):
        report = run_model_on_device(path, check=True, hw=SnowflakeConfig(dram_gbps=gbps)).report
        assert report["check"]["golden_bit_exact"]
        layers = [layer for layer in report["layers"] if layer["cycles"]]
        cycles[gbps] = sum(layer["cycles"] for layer in layers)
        names[gbps] = [layer["name"] for layer in layers]
    assert all(len(n) == 2 for n in names.values()), names
    assert cycles[8.4] <= cycles[4.2], cycles

