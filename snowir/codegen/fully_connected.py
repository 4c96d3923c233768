"""
Fully connected layers (a kernel larger than the weights buffer on a 1x1 output): each kernel tile
streamed in chunks through the two weights slots (C17 §6.1: FC layers are bandwidth-bound).
"""

from __future__ import annotations

from snowir.codegen.builder import AsmBuilder
from snowir.codegen.loops import ktiles, repeat
from snowir.codegen.strip_loads import load_maps
from snowir.codegen.traces import (COOP, R_LEN, R_MAPS, R_OUT, R_SRC, R_TMP, R_TMP2, R_TO, R_TW, R_W, R_WSRC,
                                   TRACE_CHUNK, trace_chunks)
from snowir.dialects import snowflake_asm as sf
from snowir.hw import SnowflakeConfig
from snowir.plan.shapes import BIAS_BLOCK, ConvPlan, full_mask


def fully_connected(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, mask_last: int) -> None:
    """A kernel larger than the weights buffer on a 1x1 output (an FC layer): stream each kernel
    tile in chunks that alternate weights slots (R_TW toggles per chunk), accumulate across
    chunks, write back on the last (its load also brings the bias block). Tiles 0..T-2 are one
    counted loop when the tile fits an icache bank (R_WSRC: the tile's first kernel in DRAM,
    R_TO: its output offset). FC layers are bandwidth-bound (C17 §6.1)."""
    s = plan.shape
    total = s.kh * s.kw * s.c  # the whole input, in the same (y, x, c) order as the kernel
    chunk = (plan.w_slot - BIAS_BLOCK) // hw.lanes * hw.lanes
    chunks = [(o, min(chunk, total - o)) for o in range(0, total, chunk)]
    if plan.weights_before_fence:  # its kernels stream in chunks: nothing to load before the fence
        b.flush_vector_queue(hw, R_TMP)
    load_maps(b, plan, hw, plan.strips[0], 0)
    b.const(R_TW, 0)
    b.const(R_TO, 0)
    b.const(R_WSRC, plan.w_addr)
    b.const(R_TMP2, 2 * plan.kernels * s.kernel_words)  # DRAM bytes of one kernel tile

    def tile(bb: AsmBuilder, mask: int) -> None:
        bb.write_mask(hw, R_TMP, mask)
        for ci, (off, n) in enumerate(chunks):
            last = ci == len(chunks) - 1
            bb.flush_vector_queue(hw, R_TMP, mask)
            bb.const(R_LEN, n + (BIAS_BLOCK if last else 0))
            bb.emit(sf.AddiOp(R_TMP, R_TW, 0), sf.AddiOp(R_SRC, R_WSRC, 2 * off))
            for j in range(plan.kernels):
                bb.emit(sf.LdOp(sf.LoadTarget.WEIGHTS, R_TMP, R_SRC, R_LEN, 0, j),
                        sf.AddiOp(R_SRC, R_SRC, 2 * s.kernel_words))
            if last:
                bb.emit(sf.AddiOp(R_TMP, R_TW, n), sf.VmovOp(COOP, sf.VmovSelect.BIAS, R_TMP))
                bb.const(R_OUT, plan.out_addr)
                bb.emit(sf.AddOp(R_OUT, R_OUT, R_TO))
            bb.const(R_MAPS, off)
            bb.emit(sf.AddiOp(R_W, R_TW, 0))
            pieces = trace_chunks(n)
            for pi, (po, pn) in enumerate(pieces):
                if po:
                    bb.emit(sf.AddiOp(R_MAPS, R_MAPS, TRACE_CHUNK), sf.AddiOp(R_W, R_W, TRACE_CHUNK))
                wb = last and pi == len(pieces) - 1
                bb.emit(sf.MacOp(COOP, R_OUT, R_MAPS, R_W, pn, wb=wb, relu=wb and s.relu))
            bb.emit(sf.MuliOp(R_TMP, R_TW, -1), sf.AddiOp(R_TW, R_TMP, plan.w_slot))

    advance = lambda: [sf.AddOp(R_WSRC, R_WSRC, R_TMP2), sf.AddiOp(R_TO, R_TO, 2 * plan.kernels)]  # noqa: E731
    with b.at(ktiles(0, plan.tiles - 2)):
        repeat(b, hw, plan.tiles - 1, lambda bb: tile(bb, full_mask(plan)), advance)
    with b.at(ktiles(plan.tiles - 1, plan.tiles - 1)):
        tile(b, mask_last)
