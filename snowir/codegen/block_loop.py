"""
A grouped conv over channel-tile-major blocks (`ConvShape.block_maps`: depthwise-to-grouped's one
layer over the blocks) with its kernel tiles as one counted loop rather than unrolled: each tile's
block and kernels found from registers, so the layer's code is one tile's, not C/16 tiles' (which
crossed the bus as instruction-cache fills on layers the diagonal kernels' traffic already makes
DRAM-bound). Kept apart from conv.py, whose Mloop/Kloop tile loops it joins.
"""

from __future__ import annotations

from collections.abc import Callable

from snowir.codegen.builder import AsmBuilder
from snowir.codegen.loops import ktiles, repeat
from snowir.codegen.pixels import kernel_tile, row_steps
from snowir.codegen.traces import Prefetch, R_BYP, R_LEN, R_SRC, R_TMP, R_TMP2, R_TO, R_TW, R_WSRC
from snowir.dialects import snowflake_asm as sf
from snowir.hw import SnowflakeConfig
from snowir.plan.shapes import ConvPlan, full_mask


R_MB = R_BYP
"""A grouped conv over blocks in a counted loop (`over_blocks_loop`): its tile's maps bank base
(0 or the bank size; r22 is otherwise a residual conv's, and a conv over blocks has no residual)."""


def looped_blocks(plan: ConvPlan, hw: SnowflakeConfig) -> bool:
    """Whether the grouped conv over blocks (`ConvShape.block_maps`) runs its kernel tiles as one
    counted loop (`over_blocks_loop`): one maps strip a block, in a bank (not the whole buffer),
    double-buffered kernels, at least three tiles, the next block's address a multiple of the
    output step (R_TO) an immediate holds, and the next block on the bus for at most half a tile's
    MACs. (CenterFace's 30x40x576 3x3/2, a block's 38 KB on the bus for 85% of a tile's MACs, ran
    116.7 k cycles unrolled and 179.5 k looped: load waits; the unrolled tiles' loads lead more.)"""
    s = plan.shape
    if not s.block_maps or plan.loop_order != "Mloop" or len(plan.strips) != 1 or plan.strips[0].bank < 0 \
            or not plan.double_buffer_weights or plan.tiles < 3 or plan.stagger or plan.bypass_addr is not None:
        return False
    block = 2 * s.h * s.w * s.c
    tile_macs = s.oh * s.ow * s.kh * s.kw * -(-s.c // hw.lanes)  # a vMAC's trace cycles; the kernels run side by side
    if block / hw.dram_bytes_per_cycle > 0.5 * tile_macs:
        return False
    return plan.kernels == s.group_kernels and plan.tile_step > 0 and block % plan.tile_step == 0 \
        and block // plan.tile_step < (1 << 15)


def over_blocks_loop(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, mask_last: int, cold_start: Prefetch,
                     next_weights: Prefetch, toggle: Callable[[], list], preload: Prefetch | None) -> None:
    """A grouped conv over blocks (`looped_blocks`), tiles 0..T-2 one counted loop (`repeat`) and
    the last peeled (its write-back mask): tile t reads maps bank t mod 2 (R_MB) and weights slot
    t mod 2 (R_TW; (t + 1) mod 2 under `first_slot`), and loads block t + 1 into the other bank (its
    DRAM address from R_TO, one MULI) and its kernels into the other slot (`next_weights`: R_WSRC
    walking the weights) beside its MACs. conv.py's pieces: `cold_start` (tile 0's kernels, the biases, block 0), `toggle`
    (its ops setting R_TW to the other slot), `preload` (the next conv's kernels, in the last tile).

    Why: unrolled, each tile's ~450 instructions cross the bus once as instruction-cache fills, on
    a layer the kernels' sixteen-fold traffic already makes DRAM-bound (PP-LCNet's 7²x512 5x5: 63 KB
    of its 575 KB; 34,825 cycles against a 34,233-cycle bus floor)."""
    s = plan.shape
    strip = plan.strips[0]
    bank = hw.maps_bank_elements
    row = s.w * s.cin
    words = (strip.r1 - strip.r0) * row
    block = 2 * s.h * s.w * s.c
    cold_start(b)
    b.const(R_MB, 0)
    b.const(R_TW, plan.first_slot)  # tile 0's slot: 0, or the second after a conv ending in the first
    b.const(R_TO, 0)  # (R_TT, the tile's first channel, is a residual conv's or a Kloop spread's: not read here)
    b.const(R_WSRC, plan.w_addr + 2 * plan.kernels * s.kernel_words)  # tile 1's kernels
    row_steps(b, plan)  # the same for every tile: set once, not in the loop's body

    def next_block(bb: AsmBuilder) -> None:
        """Block t + 1 (t = R_TO / tile_step) into the bank R_MB does not hold."""
        with bb.at("load_maps.next_block"):
            bb.emit(sf.MuliOp(R_TMP, R_MB, -1), sf.AddiOp(R_TMP, R_TMP, bank),
                    sf.MuliOp(R_SRC, R_TO, block // plan.tile_step))
            bb.const(R_TMP2, plan.in_addr + block + 2 * strip.r0 * row)
            bb.emit(sf.AddOp(R_SRC, R_SRC, R_TMP2))
            bb.const(R_LEN, words)
            bb.emit(sf.LdOp(sf.LoadTarget.MAPS, R_TMP, R_SRC, R_LEN, 0, sf.SELECT_ALL))

    def tile(bb: AsmBuilder) -> None:
        kernel_tile(bb, plan, hw, strip, 0, 0, full_mask(plan), [next_block, next_weights], base_reg=R_MB, steps_set=True)

    def advance() -> list:  # the other weights slot and maps bank, the next tile's output
        return [*toggle(), sf.AddiOp(R_TO, R_TO, plan.tile_step), sf.MuliOp(R_TMP, R_MB, -1),
                sf.AddiOp(R_MB, R_TMP, bank)]

    with b.at(ktiles(0, plan.tiles - 2)):
        repeat(b, hw, plan.tiles - 1, tile, advance)
    with b.at(ktiles(plan.tiles - 1, plan.tiles - 1)):
        kernel_tile(b, plan, hw, strip, 0, 0, mask_last, [preload] if preload is not None else [], base_reg=R_MB,
                    steps_set=True)
