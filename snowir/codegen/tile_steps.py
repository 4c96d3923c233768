"""
The register steps between a COOP conv's kernel tiles (codegen/conv.py's programs): which input
channels a tile reads (`group_channels`, `block_view`), and the ADDI/MULI sequences that move the
tile's weights base R_TW (`toggle` between double-buffered slots or staggered halves,
`next_resident` through resident tiles), its channel offset R_TT and its output offset R_TO
(`advance_channels`). Emitted inside counted loops, so each is a constant sequence of ops.
"""

from __future__ import annotations

from dataclasses import replace

from snowir.codegen.builder import AsmBuilder
from snowir.codegen.bypass_slices import slice_channels, slice_gap
from snowir.codegen.traces import R_TMP, R_TMP2, R_TO, R_TT, R_TW
from snowir.codegen.weight_loads import R_PAR
from snowir.dialects import snowflake_asm as sf
from snowir.hw import SnowflakeConfig
from snowir.plan.shapes import ConvPlan


def group_channels(plan: ConvPlan, t: int) -> int:
    """The first input channel kernel tile t reads: its group's (a grouped conv's tile t of K
    kernels reads group Kt // group_kernels; over blocks, `block_maps`, the bank holds its block
    alone: 0), c_base for an ungrouped conv. A constant in the tile's code, so a grouped conv's
    tiles are one counted loop only over blocks (codegen/block_loop.py: 0 for every tile)."""
    s = plan.shape
    if s.block_maps:
        return 0
    return s.c_base + (plan.kernels * t) // s.group_kernels * s.c if s.groups > 1 else s.c_base


def block_view(plan: ConvPlan, t: int) -> ConvPlan:
    """`plan` with its maps at kernel tile t's group's block (a `block_maps` conv: group g's H·W·c
    words, block g of the channel-tile-major input, `in_addr` block 0's), else `plan` itself."""
    s = plan.shape
    if not s.block_maps:
        return plan
    return replace(plan, in_addr=plan.in_addr + 2 * ((plan.kernels * t) // s.group_kernels) * s.h * s.w * s.c)


def next_resident(plan: ConvPlan) -> list:
    """R_TW to the next resident tile (tile t + 1 at (t + 1) x K), then `advance_channels`."""
    return [sf.AddiOp(R_TW, R_TW, plan.shape.kernel_words), *advance_channels(plan)]


def toggle(plan: ConvPlan, hw: SnowflakeConfig) -> list:
    """R_TW to the other base: the other slot (double-buffered) or 0 <-> F (staggered, R_PAR too)."""
    if plan.double_buffer_weights:
        return [sf.MuliOp(R_TMP, R_TW, -1), sf.AddiOp(R_TW, R_TMP, plan.w_slot)]
    f = plan.stagger
    if f:
        return [sf.MuliOp(R_TMP, R_TW, -1), sf.AddiOp(R_TW, R_TMP, f),
                sf.MuliOp(R_TMP2, R_PAR, -1), sf.AddiOp(R_PAR, R_TMP2, 1)]
    return []


def advance_tile(plan: ConvPlan, hw: SnowflakeConfig, in_group: bool = False) -> list:
    """R_TW to the next tile's base, then `advance_channels`."""
    return [*toggle(plan, hw), *advance_channels(plan, in_group)]


def advance_channels(plan: ConvPlan, in_group: bool = False, sign: int = 1) -> list:
    """R_TT += K (bypass slices: to the other slice's first tile, or `in_group` to the next
    tile's channels in the same slice), R_TO += the next tile's output offset (2K bytes, K kernels
    per tile; a channel-tile-major output's block, through R_TMP2 when past ADDI's immediate)."""
    if plan.bypass_slices and not in_group:
        first = slice_gap(plan) + slice_channels(plan) - plan.kernels  # R_TT sits at its group's last tile
        tt = [sf.MuliOp(R_TMP2, R_TT, -1), sf.AddiOp(R_TT, R_TMP2, first)]
    else:
        tt = [sf.AddiOp(R_TT, R_TT, sign * plan.kernels)]
    step = sign * plan.tile_step
    if -(1 << 16) <= step < (1 << 16):
        return [*tt, sf.AddiOp(R_TO, R_TO, step)]
    constant = AsmBuilder()
    constant.const(R_TMP2, step)
    return [*tt, *constant.ops, sf.AddOp(R_TO, R_TO, R_TMP2)]
