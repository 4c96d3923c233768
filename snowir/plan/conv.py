"""
The conv planner (C17 §5.1 steps 3-4): the maps tiling, kernel tiles, loop order and buffer
placements of a conv layer, by the cost models below. Called by the passes that decide
(nn-to-tile, tile-loop-order, partition-host's can-it-run question), never by tile-to-asm.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING
from dataclasses import replace
from snowir.hw import SnowflakeConfig
from snowir.plan.columns import column_tilings
from snowir.plan.coop_rows import broadcast_cycles, coop_rows_cycles, coop_rows_shape_refusal, plan_coop_rows
from snowir.plan.indp import PRICE_MARGIN, indp_fits, mode_rule, plan_indp
from snowir.plan.issue import issue_cycles, placement_cycles
from snowir.plan.paired_start import with_paired_start
from snowir.dialects.tile.refusals import bias_refusal, kernel_order_refusal
from snowir.plan.indp_columns import columns_cycles
from snowir.plan.shapes import (ConvPlan, ConvShape, LoweringError, Strip, bias_block_words, bias_room, compact_shape,
                                coop_kernels, gather_of, indp_kernel_words, input_rows, kernels_per_tile, load_cycles,
                                weights_slot_elements, weights_stagger)


if TYPE_CHECKING:
    pass


def slice_words(plan: ConvPlan) -> int:
    """Words of one bypass slice: `slice_tiles` kernel tiles' channels of the largest strip's pixels."""
    return max(st.y1 - st.y0 for st in plan.strips) * plan.shape.ow * plan.kernels * plan.slice_tiles


def settle(plan: ConvPlan, hw: SnowflakeConfig) -> ConvPlan:
    """The plan with its buffer placements decided for `hw`: the weights slot of double-buffered
    (or chunked FC) kernel tiles, the stagger of kernel tiles too large for a slot (Kloop,
    ungrouped COOP), the bypass slices' bases. What the code generators follow, recorded in the
    tile IR (the generators never compute them)."""
    s = plan.shape
    fc = s.kernel_words > hw.weights_buffer_elements
    w_slot = weights_slot_elements(hw) if plan.double_buffer_weights or fc else 0
    stagger = 0
    if not (plan.double_buffer_weights or plan.resident_weights or plan.indp or s.groups != 1
            or plan.loop_order != "Kloop" or fc):
        stagger = weights_stagger(s, hw)
    if plan.cu_split == "cols":  # a column-split INDP plan decides its own (plan/indp_columns.py)
        stagger = plan.stagger
    bases: tuple[int, ...] = ()
    if plan.bypass_slices:
        n = slice_words(plan)
        bases = (hw.maps_buffer_elements - 2 * n, hw.maps_buffer_elements - n)
    return with_paired_start(replace(plan, w_slot=w_slot, stagger=stagger, slice_bases=bases), hw)


def choose_mode(s: ConvShape, hw: SnowflakeConfig, bypass: bool, mode: str | None = None) -> str:
    """`mode` if given (refused when the layer cannot run it), else plan/indp.mode_rule, priced
    where the rule weighs lanes alone: a conv of fewer input channels than a vMAC's lanes that
    both modes can run (not residual: plan/residual_mode.py prices those) takes the other mode
    when its placement estimate (plan/issue.placement_cycles: MACs and traffic, or issue) is
    lower by more than PRICE_MARGIN and MODE_PRICE_FLOOR cycles. The rule counts the lanes a
    trace fills, not the issue slots: a 3-channel 3x3 stem's COOP traces are 9 words, one per
    kernel row, issue-bound (3 -> 32 3x3/2 at 48 x 64: 19,470 cycles COOP, 6,488 INDP)."""
    rule = mode_rule(s, hw, bypass, mode)
    if mode is not None or bypass or s.c >= hw.lanes or not indp_fits(s, hw, bypass):
        return rule
    other = "INDP" if rule == "COOP" else "COOP"
    cost = {m: placement_cycles(plan_conv(s, hw, 0, 0, 0, None, None, m, s.bias_at), hw) for m in (rule, other)}
    wins = cost[other] < (1 - PRICE_MARGIN) * cost[rule] and cost[rule] - cost[other] > MODE_PRICE_FLOOR
    return other if wins else rule


BLOCKS_MLOOP = ("loop_order Kloop: a grouped conv over channel-tile-major blocks runs Mloop (each kernel tile "
                "loads its own group's block, strip by strip: the blocks are the kernel-tile loop)")
"""Why a `block_maps` conv has one loop order (tile-to-asm's refusal of an edited Kloop: the planner
plans Mloop whatever order it is asked for): under Kloop a strip would hold every block's rows and
the kernel tiles would share it, a layout its maps tiles (one block's rows) do not describe."""


MODE_PRICE_FLOOR = 2_000
"""Cycles a priced mode must save beyond the margin: the estimates leave out a layer's fixed costs
(prologue, first loads), so smaller predicted gains are noise (3 -> 16 3x3 over 8 x 8: 502 cycles
predicted for INDP, 59 lost measured, 1,230 against 1,171)."""


def plan_conv(shape: ConvShape, hw: SnowflakeConfig, in_addr: int, w_addr: int, out_addr: int,
              loop_order: str | None = None, bypass_addr: int | None = None, mode: str | None = None,
              biases: str | None = None, *, bypass_crop: bool = False, bypass_tiles: bool = False) -> ConvPlan:
    """The layer's decisions; `mode`/`loop_order` None = chosen here (choose_mode,
    fewer DRAM bytes); `biases` None = the weight image's bias layout chosen here too
    (`choose_biases`), else that one ("kernel" or "maps", dialects/tile/decisions.py BIAS_LAYOUTS).
    `bypass_crop`: the residual input is a device crop's window (rows its source's width apart),
    which bypass slices cannot follow: their loads step the bypass pixel by pixel through a
    strip, as one run of the tensor's rows. `bypass_tiles`: the residual input is stored
    channel-tile-major in blocks of a kernel tile's channels (the bypass region's `channel_tiles`),
    which only bypass slices of one tile read (a slice is a run of its block's rows)."""
    args = (in_addr, w_addr, out_addr, loop_order, bypass_addr, mode)
    if biases is None:
        try:
            kernel = plan_conv(shape, hw, *args, "kernel", bypass_crop=bypass_crop, bypass_tiles=bypass_tiles)
        except LoweringError as refused:  # the kernels with their bias blocks do not fit: maps, or that
            if not maps_may_pay(replace(shape, bias_at="maps"), hw):
                raise
            try:
                return plan_conv(shape, hw, *args, "maps", bypass_crop=bypass_crop, bypass_tiles=bypass_tiles)
            except LoweringError:
                raise refused from None
        if not maps_may_pay(replace(shape, bias_at="maps"), hw):
            return kernel
        try:
            maps = plan_conv(shape, hw, *args, "maps", bypass_crop=bypass_crop, bypass_tiles=bypass_tiles)
        except LoweringError:
            return kernel
        return choose_biases(kernel, maps, hw)
    s = replace(shape, bias_at=biases)
    if biases == "kernel":
        return settle(_plan_conv(s, hw, in_addr, w_addr, out_addr, loop_order, bypass_addr, mode, bypass_crop=bypass_crop,
                                 bypass_tiles=bypass_tiles), hw)
    if biases != "maps":
        raise LoweringError(f"biases must be kernel or maps, not '{biases}'")
    m = choose_mode(s, hw, bypass_addr is not None, mode)
    room = bias_room(hw, bias_block_words(s.k, kernels_per_tile(hw) if m == "INDP" else coop_kernels(hw, s)))
    plan = settle(_plan_conv(s, room, in_addr, w_addr, out_addr, loop_order, bypass_addr, m, bypass_crop=bypass_crop,
                             bypass_tiles=bypass_tiles), room)
    why = bias_refusal(plan, room)
    if why is not None:
        raise LoweringError(f"biases maps: {why}")
    return plan


def maps_may_pay(s: ConvShape, hw: SnowflakeConfig) -> bool:
    """Whether keeping the biases out of the weights buffer (`s` with bias_at "maps") changes how
    the kernels can be held: a COOP kernel or an INDP tile's 16 that then fit a weights slot
    (double-buffered), the buffer (at all: an INDP conv over 256 channels), or every tile of them
    the buffer together (resident). Elsewhere the 16 words a kernel save nothing but 3% of its
    load, and the layer keeps the stock layout unpriced."""
    if s.kh * s.kw * s.c > hw.weights_buffer_elements or s.empty_windows:
        return False
    if s.block_maps:  # over blocks every kernel loads once, a block's 16 beside its MACs: their words are its traffic
        return True
    kernel = replace(s, bias_at="kernel")
    slot, buffer = weights_slot_elements(hw), hw.weights_buffer_elements
    coop_tiles = -(-s.k // coop_kernels(hw, s))
    indp_tiles = -(-s.k // kernels_per_tile(hw))
    for before, after, tiles in ((kernel.kernel_words, s.kernel_words, coop_tiles),
                                 (indp_kernel_words(kernel, hw), indp_kernel_words(s, hw), indp_tiles)):
        if any(before > limit >= after for limit in (slot, buffer)) or tiles * before > buffer >= tiles * after:
            return True
    return False


BIAS_MIN_GAIN = 0.01
"""The share of the layer's estimated cycles the maps layout must save over the stock one (beyond
holding its kernels otherwise, `choose_biases`): the estimates' resolution."""


def layout_cycles(plan: ConvPlan, hw: SnowflakeConfig) -> float:
    """The estimate a plan's own planner ranks it by: a column-split INDP plan's, a residual
    plan's, or the loop-order model's."""
    if plan.indp and plan.cu_split == "cols":
        return columns_cycles(plan, hw)
    if plan.bypass_addr is not None and not plan.indp:
        return residual_cycles(plan, hw)
    return plan.estimated_cycles(hw)


def _held(plan: ConvPlan) -> tuple:
    """What a plan decides beyond its bias layout's own effects: how the kernels are held and the
    maps tiled (a staggered tile's F moves by the 16 words either way: only whether it staggers)."""
    return (plan.mode, plan.cu_split, plan.loop_order, plan.tiles, plan.kernels, plan.strips, plan.cu_rows,
            plan.double_buffer_weights, plan.resident_weights, bool(plan.stagger), plan.bypass_slices,
            plan.slice_tiles, plan.gather, plan.kernel_order)


def choose_biases(kernel: ConvPlan, maps: ConvPlan, hw: SnowflakeConfig) -> ConvPlan:
    """The stock plan, unless the maps layout holds the kernels otherwise (resident, double-
    buffered, another mode or tiling) and its estimate is lower by BIAS_MIN_GAIN: a tie keeps the
    stock image."""
    if _held(kernel) == _held(maps) and not kernel.shape.block_maps:
        return kernel
    return maps if layout_cycles(maps, hw) < (1 - BIAS_MIN_GAIN) * layout_cycles(kernel, hw) else kernel


def _tile_kernels(s: ConvShape, hw: SnowflakeConfig) -> int:
    """A COOP kernel tile's kernels (`coop_kernels`), refused where a grouped conv's groups are not
    whole tiles: a tile never spans two groups, whose kernels read other channels."""
    kernels = coop_kernels(hw, s)
    if s.groups > 1 and s.group_kernels % kernels:
        raise LoweringError(f"grouped conv with {s.group_kernels} output channels per group: only multiples of "
                            f"{kernels} (a kernel tile) are lowered (depthwise convs are not)")
    return kernels


def _plan_conv(shape: ConvShape, hw: SnowflakeConfig, in_addr: int, w_addr: int, out_addr: int,
               loop_order: str | None = None, bypass_addr: int | None = None, mode: str | None = None,
               row_groups: bool = True, bypass_crop: bool = False, bypass_tiles: bool = False) -> ConvPlan:
    """`row_groups`: coop_rows may be weighed (for a gathering conv, over its compact plan's
    pixels, after that plan: `with_coop_rows`); `bypass_crop`, `bypass_tiles`: plan_conv's."""
    s = shape
    if choose_mode(s, hw, bypass_addr is not None, mode) == "INDP":
        if bypass_tiles:
            raise LoweringError("a channel-tile-major bypass is read by a COOP conv's bypass slices: mode INDP refused")
        return plan_indp(s, hw, in_addr, w_addr, out_addr, bypass_addr=bypass_addr)
    kernels = _tile_kernels(s, hw)
    row = s.w * s.cin
    gather = gather_of(s)
    if gather is not None:
        # a conv over a channel slice (split-kernels) read in place would load every channel of
        # its rows: gather the slice's channels pixel by pixel, so strips hold twice the rows and
        # traces span whole kernel rows; a strided 1x1 conv reads 1/(sy*sx) of its input: load
        # only those pixels, so more output rows share a maps strip and the weights are re-sent
        # for fewer strips
        strided = gather[:2] != (1, 1)
        plan = _plan_conv(compact_shape(s, gather), hw, in_addr, w_addr, out_addr, loop_order, bypass_addr,
                          "COOP" if strided else mode, row_groups=False, bypass_crop=bypass_crop, bypass_tiles=bypass_tiles)
        plan = replace(plan, gather=gather)  # its next strip then loads whole: the kernel order may change
        if plan.indp or plan.bypass_addr is not None:
            return plan
        plan = with_kernel_order(plan, hw)
        # a strided 1x1's pixels gathered by each CU for its own rows: the whole compact input may fit
        # the CUs' buffers at once where one broadcast strip does not, and each kernel then loads once
        # (weighed only there: the gathered LDs' issue, which both plans share, is in neither estimate)
        resent = len(plan.strips) > 1  # Kloop re-sends the kernels a strip, Mloop the strips a kernel tile
        return with_coop_rows(plan, hw) if strided and resent and row_groups and loop_order != "Mloop" else plan
    if bypass_addr is not None:
        return _plan_bypass(s, hw, in_addr, w_addr, out_addr, bypass_addr, not bypass_crop, bypass_tiles)
    if s.kernel_words > hw.weights_buffer_elements:
        fc = s.oh == 1 and s.ow == 1 and (s.pt, s.pl, s.pb, s.pr) == (0, 0, 0, 0) and s.kh == s.h and s.kw == s.w \
            and s.groups == 1
        if not fc:
            raise LoweringError(f"kernel of {s.kernel_words} words does not fit the {hw.weights_buffer_elements}-word "
                                f"weights buffer (channel splitting is implemented for fully connected layers only)")
        if s.h * row > hw.maps_buffer_elements:
            raise LoweringError(f"fully connected input of {s.h * row} words does not fit the maps buffer")
        strip = Strip(0, 1, 0, s.h, 0)
        return ConvPlan(s, (strip,), math.ceil(s.k / kernels), kernels, True, in_addr, w_addr, out_addr, "COOP", "Kloop")
    rows = lambda y0, y1: _rows(s, y0, y1)  # noqa: E731

    def strips_for(shape: ConvShape, max_rows: int, whole: bool) -> tuple[Strip, ...]:
        return tuple(balanced_strips(shape.oh, rows, lambda y0, y1: rows(y0, y1)[1] - rows(y0, y1)[0] <= max_rows,
                                     lambda i: -1 if whole else i % 2, "conv"))

    def strips_of(max_rows: int, whole: bool) -> tuple[Strip, ...]:
        return strips_for(s, max_rows, whole)

    # maps tilings: the whole input in one strip if it fits the buffer; else bank-sized strips
    # (double-buffered) and buffer-sized strips (fewer, so weights are re-sent fewer times in
    # Kloop, but each is loaded while nothing computes)
    # (a padded depthwise conv's last group reads `overread` words past a tile: room above it)
    # (over blocks, a maps tile a kernel tile, in alternate banks: one strip too must fit a bank)
    if s.h * row + s.overread <= (hw.maps_bank_elements if s.block_maps else hw.maps_buffer_elements):
        tilings = [strips_of(s.h, False)]
    else:
        tilings = [strips_of(n, whole) for n, whole in (((hw.maps_bank_elements - s.overread) // row, False),
                                                        ((hw.maps_buffer_elements - s.overread) // row, True))
                   if n >= s.kh]
        whole_rows = (hw.maps_buffer_elements - s.overread) // row
        tilings += [t for t in (short_first(t, rows, whole_rows) for t in tilings if t[0].bank < 0) if t]
    if not tilings and s.block_maps:  # a band's block would start a band's columns into it: not built
        raise LoweringError(f"{s.kh} rows of a {s.w}-wide {s.c}-channel block exceed a maps bank: a grouped conv "
                            "over blocks is not column-tiled")
    if not tilings:  # not even the kernel's rows fit: maps tiles of rows x columns (plan/columns.py)
        tilings = column_tilings(s, hw, strips_for)
    if not tilings:
        raise LoweringError(f"{s.kh} input rows of {s.kw} columns ({s.kh * s.kw * s.cin} words) do not fit the "
                            f"{hw.maps_buffer_elements}-word maps buffer, even column-tiled")
    tiles = math.ceil(s.k / kernels)
    double = s.kernel_words <= weights_slot_elements(hw)
    # over blocks the blocks are the kernel-tile loop: Mloop only (as INDP plans are Kloop only, a
    # forced order another plan cannot take is the caller's to report: tile-loop-order prints it)
    orders = ["Mloop"] if s.block_maps else [loop_order] if loop_order else ["Kloop", "Mloop"]
    plans = [with_kernel_order(with_residency(ConvPlan(s, strips, tiles, kernels, double, in_addr, w_addr, out_addr,
                                                       "COOP", order), hw), hw)
             for strips in tilings for order in orders]
    best = min(plans, key=lambda p: p.estimated_cycles(hw))
    return best if loop_order == "Mloop" or not row_groups else with_coop_rows(best, hw)


def with_coop_rows(best: ConvPlan, hw: SnowflakeConfig) -> ConvPlan:
    """`best` (a broadcast COOP plan), or the conv's row-group plan (plan/coop_rows.py) where it is
    cheaper by more than PRICE_MARGIN and MODE_PRICE_FLOOR cycles (both with their issue floors):
    weighed where the kernels do not fill the broadcast tiles' vMACs, and for a strided 1x1 that
    gathers its pixels (`best.gather`: each CU then gathers its own rows' pixels, so the CUs'
    buffers hold the whole compact input together and each kernel tile loads once, broadcast to
    the CUs, where a broadcast plan of several strips re-sends every tile a strip)."""
    s = best.shape
    if (s.k % hw.vmacs == 0 and best.gather is None) or coop_rows_shape_refusal(s, hw, False) is not None:
        return best
    rows = replace(settle(plan_coop_rows(s, hw, best.in_addr, best.w_addr, best.out_addr), hw), gather=best.gather)
    if rows.gather is not None and rows.column_tiled:  # a gathering conv is not column-tiled (tile/check.py)
        return best
    old = broadcast_cycles(settle(best, hw), hw, issue_cycles(best, hw))
    new = coop_rows_cycles(rows, hw, issue_cycles(rows, hw))
    return rows if new < (1 - PRICE_MARGIN) * old and old - new > MODE_PRICE_FLOOR else best


def short_first(strips: tuple[Strip, ...], rows: Callable[[int, int], tuple[int, int]],
                max_rows: int) -> tuple[Strip, ...] | None:
    """Whole-buffer strips with the last (shortest) one moved to the front, or None (no shorter
    strip, or one that no longer fits `max_rows` input rows): the layer's first strip is the load
    nothing overlaps, and a strip replacing a shorter one loads its extra rows into free words at
    once (ResNet-50's 14², 1x1 1024->256 convs: 4 + 4 + 3 + 3 rows 209.7 k cycles, 3 + 4 + 4 + 3
    rows 208.9 k). The tiling estimate chooses."""
    sizes = [st.y1 - st.y0 for st in strips]
    if len(sizes) < 2 or sizes[-1] >= sizes[0]:
        return None
    out, y0 = [], strips[0].y0
    for n in [sizes[-1], *sizes[:-1]]:
        r0, r1 = rows(y0, y0 + n)
        if r1 - r0 > max_rows:
            return None
        out.append(Strip(y0, y0 + n, r0, r1, -1))
        y0 += n
    return tuple(out)


def with_kernel_order(plan: ConvPlan, hw: SnowflakeConfig) -> ConvPlan:
    """The plan with its kernel tiles in serpentine order (`kernel_order`) where its program can
    follow it (whole-buffer strips, double-buffered kernel tiles: `kernel_order_refusal`) and the
    estimate is lower: a strip then starts with the two tiles the previous one ended with, still in
    their slots, so two kernel tiles fewer load per strip change and none shares the bus with the
    rows the next strip replaces (ResNet-50's 14², 1x1 1024->256 convs waited ~4.5 k cycles a strip
    change for those rows and tiles)."""
    serpentine = replace(plan, kernel_order="serpentine")
    if kernel_order_refusal(serpentine) is not None:
        return plan
    # a tie (a compute-bound conv whose strip changes the estimate sees covered) goes to the fewer loads
    return serpentine if serpentine.estimated_cycles(hw) <= plan.estimated_cycles(hw) else plan


def with_residency(plan: ConvPlan, hw: SnowflakeConfig) -> ConvPlan:
    """The plan with `resident_weights` decided: in Kloop order over several maps strips, when
    all kernel tiles fit the weights buffer together, each kernel is loaded once for the layer
    (C17's Kloop otherwise re-sends every tile per strip), and the bus is left to the maps."""
    s = plan.shape
    resident = (not plan.indp and plan.loop_order == "Kloop" and s.groups == 1 and plan.tiles > 1
                and len(plan.strips) > 1 and plan.tiles * s.kernel_words <= hw.weights_buffer_elements)
    # resident tiles each have their own place: no slots to alternate
    return replace(plan, resident_weights=resident, double_buffer_weights=plan.double_buffer_weights and not resident)


def _plan_bypass(s: ConvShape, hw: SnowflakeConfig, in_addr: int, w_addr: int, out_addr: int,
                 bypass_addr: int, slices: bool = True, blocks: bool = False) -> ConvPlan:
    """A conv with a residual bypass holds two inputs at once (C17 §5.1). Up to three plans,
    the fewest `residual_cycles` wins: its maps strips with the bypass per kernel tile in two
    slices at the top of the buffer (snowir/codegen/bypass_slices.py); its maps strip at the bottom of
    the buffer and the bypass rows of the same output rows right above it, laid out like the
    output (a `vmov bypass` hands vMAC v of CU c channel 4c + v of a 16-channel block, as the
    write-back stores them), strips loaded in turn; or those strips in the two halves of the
    buffer in turn, the next loading meanwhile. Kloop. `slices` False: the bypass rows only (a
    cropped bypass); `blocks`: the slices of one kernel tile only, each strip's slice one run of
    the tile's block (a bypass stored channel-tile-major: `bypass_tile`)."""
    if s.kernel_words > hw.weights_buffer_elements:
        raise LoweringError(f"kernel of {s.kernel_words} words does not fit the weights buffer")
    row = s.w * s.cin
    out_row = s.ow * s.k
    room = hw.maps_buffer_elements
    rows = lambda y0, y1: _rows(s, y0, y1)  # noqa: E731

    def holds(per_output_row: int, limit: int) -> Callable[[int, int], bool]:
        """Output rows [y0, y1) fit `limit` words: their input rows plus `per_output_row` each."""
        return lambda y0, y1: (rows(y0, y1)[1] - rows(y0, y1)[0]) * row + (y1 - y0) * per_output_row <= limit

    kernels = _tile_kernels(s, hw)
    tiles, double = math.ceil(s.k / kernels), s.kernel_words <= weights_slot_elements(hw)
    plan = lambda strips, **kw: with_residency(ConvPlan(s, tuple(strips), tiles, kernels, double, in_addr, w_addr,  # noqa: E731
                                                        out_addr, "COOP", "Kloop", bypass_addr, **kw), hw)
    candidates = []
    fits, half = holds(out_row, room), holds(out_row, room // 2)
    one_by_one = s.kh == s.kw == 1 and (s.sy, s.sx, s.pt, s.pl, s.pb, s.pr) == (1, 1, 0, 0, 0, 0)
    for group in ((1,) if blocks else (1, 2) if one_by_one else (1,)) if slices else ():
        fits_slices = holds(2 * group * kernels * s.ow, room)
        if (one_by_one or (s.kh, s.kw) != (1, 1)) and s.groups == 1 and s.cin == s.c and tiles > 1 \
                and tiles % group == 0 and (group == 1 or double) and fits_slices(0, 1):
            # strips as long as the maps alone allow, so the weights are re-sent for few strips;
            # a 1x1's slices may hold two tiles' channels, one LD a pixel for both
            sliced = plan(balanced_strips(s.oh, rows, fits_slices, lambda i: 0, "a residual conv"),
                          bypass_slices=True, slice_tiles=group, bypass_tile=2 * s.oh * s.ow * kernels if blocks else 0)
            if group == 1 or not sliced.resident_weights:
                candidates.append(sliced)
    if blocks:
        if not candidates:
            raise LoweringError(f"its bypass is stored channel-tile-major, which only bypass slices of one "
                                f"{kernels}-kernel tile read, and they do not apply here")
        return candidates[0]
    if fits(0, 1) or any(fits(y, y + 1) for y in range(s.oh)):
        candidates.append(plan(row_strips(s.oh, rows, fits, lambda i: 0, "a residual conv")))
        if all(half(y, y + 1) for y in range(s.oh)):
            candidates.append(plan(row_strips(s.oh, rows, half, lambda i: i % 2, "a residual conv")))
    if not candidates:
        raise LoweringError(f"a residual conv needs {s.kh} input rows of {row} words and an output row of "
                            f"{out_row} words in the {hw.maps_buffer_elements}-word maps buffer")
    return min(candidates, key=lambda p: residual_cycles(p, hw))


# issue slots per output pixel of a residual conv's kernel tile: its bypass VMOV, MAC(s) and the
# maps / output / bypass address steps; a bypass slice adds its LD and two address steps
RESIDUAL_PIXEL_ISSUE, SLICE_PIXEL_ISSUE = 5, 3


def residual_cycles(plan: ConvPlan, hw: SnowflakeConfig) -> float:
    """The residual conv's cost model: the largest of the CUs' time (MAC traces and the bypass
    VMOV of each output pixel), the control pipeline's issue time and the DRAM traffic, plus
    the loads nothing overlaps (the first strip; every strip of a single-buffered plan)."""
    s = plan.shape
    bw = hw.dram_bytes_per_cycle
    pixels = s.oh * s.ow * plan.tiles
    trace = sum(-(-s.kw * s.c // hw.lanes) for _ in range(s.kh))
    # padding taps are not computed (border pixels clamp their traces): the padding-free MACs,
    # with a full window's lane rounding, plus the bypass VMOV of every write-back
    cu = s.valid_macs() / hw.macs * trace * hw.lanes / (s.kh * s.kw * s.c) + pixels * hw.vmov_cycles
    per_pixel = plan.bypass_slices and not plan.bypass_tile  # channel-tile-major: one run a tile a strip
    issue = pixels * (RESIDUAL_PIXEL_ISSUE + (SLICE_PIXEL_ISSUE / plan.slice_tiles if per_pixel else 0))
    row, out_row = s.w * s.cin, s.ow * s.k
    strip_bytes = [2 * ((st.r1 - st.r0) * row + (0 if plan.bypass_slices else (st.y1 - st.y0) * out_row))
                   for st in plan.strips]
    weights = plan.tiles * plan.kernels * s.kernel_words * 2
    traffic = sum(strip_bytes) + 2 * s.oh * out_row + weights * (1 if plan.resident_weights else len(plan.strips))
    # LDs: the plan's own, and the bypass: a row block per strip, or one per pixel per kernel tile
    lds = plan.load_count() + (s.oh * s.ow * plan.tiles // plan.slice_tiles if per_pixel else
                               len(plan.strips) * plan.tiles if plan.bypass_slices else len(plan.strips))
    double = len(plan.strips) > 1 and plan.strips[1].bank == 1
    exposed = strip_bytes[0] if double else sum(strip_bytes)
    if not plan.double_buffer_weights and not plan.resident_weights:
        exposed += plan.tiles * len(plan.strips) * plan.kernels * (s.kernel_words - weights_stagger(s, hw)) * 2
    return max(cu, issue, load_cycles(hw, traffic, lds)) + exposed / bw + plan.flush_cycles(hw)


def _rows(s: ConvShape, y0: int, y1: int) -> tuple[int, int]:
    return input_rows(s.h, s.kh, s.sy, s.pt, y0, y1)


def row_strips(oh: int, rows: Callable[[int, int], tuple[int, int]], fits: Callable[[int, int], bool],
               bank: Callable[[int], int], what: str) -> list[Strip]:
    """Maps tiles: output-row strips grown greedily while `fits(y0, y1)`; strip i gets `bank(i)`."""
    strips: list[Strip] = []
    y0 = 0
    while y0 < oh:
        y1 = y0 + 1
        if not fits(y0, y1):
            raise LoweringError(f"{what}: rows {y0}..{y1} do not fit the maps buffer")
        while y1 < oh and fits(y0, y1 + 1):
            y1 += 1
        r0, r1 = rows(y0, y1)
        strips.append(Strip(y0, y1, r0, r1, bank(len(strips))))
        y0 = y1
    return strips


def balanced_strips(oh: int, rows: Callable[[int, int], tuple[int, int]], fits: Callable[[int, int], bool],
                    bank: Callable[[int], int], what: str) -> list[Strip]:
    """As many strips as `row_strips` grows, their output rows spread evenly (the first ones a
    row longer): Kloop re-sends every kernel tile per strip, and a short last strip's tiles
    compute for less time than their weights take on the bus (ResNet-18's 14-row layer3.0.conv1
    in 4 + 4 + 4 + 2 rows waited ~10 k cycles on its last strip's kernels). The greedy strips
    when an even spread does not fit."""
    greedy = row_strips(oh, rows, fits, bank, what)
    n, strips, y0 = len(greedy), [], 0
    for i in range(n):
        y1 = min(oh, y0 + -(-(oh - y0) // (n - i)))
        while y1 > y0 + 1 and not fits(y0, y1):
            y1 -= 1
        r0, r1 = rows(y0, y1)
        strips.append(Strip(y0, y1, r0, r1, bank(i)))
        y0 = y1
    return strips if y0 == oh else greedy
