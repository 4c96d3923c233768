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
from xdsl.dialects.builtin import ModuleOp

from snowir.conv_codegen import ConvShape, LoweringError, generate_conv, pack_weights, plan_conv
from snowir.dialects import snowflake_asm as sf
from snowir.fixedpoint import writeback
from snowir.golden import conv_sum, pool
from snowir.hw import SnowflakeConfig
from snowir.machine.image import assemble
from snowir.machine.run import run_image
from snowir.passes.icache_banking import IcacheBankingPass
from snowir.pool_codegen import PoolShape, generate_pool
from snowir.resources import int16_resource
from snowir.tools.snow_run import main as snow_run

HW = SnowflakeConfig()
DIGITS = Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx"


def conv_case(c, h, w, k, kh, kw, s, p, relu=True, shift=14, seed=0, engine="fast", loop_order=None):
    shape = ConvShape(c, h, w, k, kh, kw, s, s, p, p, p, p, relu, shift)
    rng = np.random.default_rng(seed)
    x = rng.integers(-300, 300, (c, h, w)).astype(np.int16)
    wt = rng.integers(-3000, 3000, (k, c, kh, kw)).astype(np.int16)
    bias = rng.integers(-300, 300, k).astype(np.int16)
    wimg = pack_weights(wt, bias, -(-k // 16))
    in_b = h * w * c * 2
    w_addr = -(-in_b // 64) * 64
    out_addr = -(-(w_addr + wimg.size * 2) // 64) * 64
    plan = plan_conv(shape, HW, 0, w_addr, out_addr, loop_order)
    module = ModuleOp([sf.SegmentOp("x", sf.SegmentKind.INPUT, 0, in_b),
                       sf.SegmentOp("w", sf.SegmentKind.DATA, w_addr, wimg.size * 2, int16_resource("w", wimg)),
                       sf.SegmentOp("y", sf.SegmentKind.OUTPUT, out_addr, shape.oh * shape.ow * k * 2),
                       sf.ProgramOp("conv", generate_conv(plan, HW).ops)])
    IcacheBankingPass().apply(None, module)
    module.verify()
    image = assemble(module)
    run = run_image(image, HW, engine, {"x": x.transpose(1, 2, 0).ravel()}, module=module)
    got = run.outputs["y"].reshape(shape.oh, shape.ow, k).transpose(2, 0, 1)
    acc = conv_sum(x[None], wt, (s, s), (p, p, p, p), (1, 1), 1, dtype=np.float64)[0].astype(np.int64)
    want = writeback(acc, bias.reshape(-1, 1, 1).astype(np.int64), 0, shift, relu)
    return run, got, want, plan, image


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


@pytest.mark.parametrize("c, k, s, p, hw_", [(16, 2, 2, 0, 8), (64, 3, 2, 1, 9), (96, 3, 1, 1, 6)])
def test_max_pool_bit_exact(c, k, s, p, hw_) -> None:
    x = np.random.default_rng(c).integers(-3000, 3000, (c, hw_, hw_)).astype(np.int16)
    oh = (hw_ + 2 * p - k) // s + 1
    shape = PoolShape(c, hw_, hw_, k, k, s, s, p, p, oh, oh)
    in_b = x.size * 2
    out_addr = -(-in_b // 64) * 64
    module = ModuleOp([sf.SegmentOp("x", sf.SegmentKind.INPUT, 0, in_b),
                       sf.SegmentOp("y", sf.SegmentKind.OUTPUT, out_addr, oh * oh * c * 2),
                       sf.ProgramOp("pool", generate_pool(shape, HW, 0, out_addr).ops)])
    run = run_image(assemble(module), HW, "fast", {"x": x.transpose(1, 2, 0).ravel()})
    got = run.outputs["y"].reshape(oh, oh, c).transpose(2, 0, 1)
    want = pool(x[None], (k, k), (s, s), (p, p, p, p), False, "max")[0]
    assert np.array_equal(got, want)


def test_banking_keeps_loops_inside_banks() -> None:
    run, got, want, _, image = conv_case(64, 13, 13, 128, 3, 3, 1, 1)
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
        convs = [layer for layer in r["layers"] if layer["op"] == "conv2d"]
        assert len(convs) == 3 and all(layer["cycles"] > 0 and layer["mode"] == "COOP" for layer in convs)
        assert r["total"]["cycles"] == sum(layer["cycles"] for layer in r["layers"])


def test_tile_ir_decisions_drive_codegen(tmp_path: Path) -> None:
    """Lower to tile, edit the loop order in the text, lower to asm: the program follows the edit
    and still computes the same outputs."""
    from snowir import api
    from snowir.passes.nn_prepare import NNPreparePass
    from snowir.passes.nn_to_tile import NNToTilePass
    from snowir.passes.tile_to_asm import TileToAsmPass
    from snowir.passes.icache_banking import IcacheBankingPass
    from snowir.onnx_import import import_onnx
    from xdsl.context import Context

    module = import_onnx(DIGITS)
    NNPreparePass().apply(Context(), module)
    NNToTilePass().apply(Context(), module)
    text = str(module)
    assert text.count("#tile<loop_order Kloop>") == 3
    edited = api.parse_text(text.replace("#tile<loop_order Kloop>", "#tile<loop_order Mloop>", 1))
    layer = next(op for op in edited.ops if op.name == "tile.layer")
    assert layer.loop_order.data.value == "Mloop"
    TileToAsmPass().apply(Context(), edited)
    IcacheBankingPass().apply(Context(), edited)
    programs = [op for op in edited.ops if isinstance(op, sf.ProgramOp)]
    assert [p.sym_name.data for p in programs] == ["conv1", "conv2", "fc"]
    assert all(len(p.instructions) > 10 for p in programs)
