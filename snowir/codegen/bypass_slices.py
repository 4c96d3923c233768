"""
Residual 1x1 convs with the bypass in per-kernel-tile slices (C17 §5.1 holds a residual
conv's bypass rows beside its maps; with 1024-2048 output channels those rows crowd the maps
into many strips). A kernel tile's write-backs read only its own K bypass channels: the whole
input stays in the maps buffer, and two slices at the layer's `bypass_slices` bases take
turns: while tile t computes from one, every pixel's MAC is followed by the LD of the same
pixel's K channels of tile t+1 into the other (four pixels' LDs together, so `balance-loads`
spreads them). A bypass stored channel-tile-major in blocks of a tile's K channels (the bypass
region's `channel_tiles`, `ConvPlan.bypass_tile`) holds a tile's slice of a strip as one run of
its block's rows: then the slice is one LD, issued where a prefetch goes (once 16 vector ops of
the tile are queued, so the previous tile's VMOVs, the other slice's readers, are done).
"""

from __future__ import annotations

from collections.abc import Callable

from snowir.codegen.builder import AsmBuilder
from snowir.codegen.traces import (COOP, Prefetch, R_BYP, R_BYPROW, R_LEN, R_MAPS, R_OUT, R_OUTROW, R_SRC, R_TMP, R_TMP2, R_TO,
                                   R_TT, R_TW, R_W, R_X, R_XEND, R_Y, macs, add_offset, out_pixel)
from snowir.dialects import snowflake_asm as sf
from snowir.hw import SnowflakeConfig
from snowir.plan.shapes import TRACE_CHUNK, ConvPlan, Strip


# registers of the slice loads (free in a 1x1 residual conv: no kernel-row pairs, no unrolled pixels)
R_BSRC, R_BDST, R_BLEN = 4, 5, 12

# a tile's pixels (`slice_tile`): the slice LDs of four pixels each with its own (source,
# destination) pair, and the maps / output addresses of even and odd pixels in two sets, so no
# LD, VMOV or MAC waits on the ADDI stepping its address (ResNet-50's 28², 128->512 residual
# 1x1s lost ~1.3 cycles a pixel to those RAW stalls); none is a prefetch's temporary
LOAD_PAIRS = ((R_BSRC, R_BDST), (8, 9), (10, 11), (13, 15))
PIXEL_SETS = ((R_MAPS, R_OUT), (14, 23))


PIXELS = 4  # pixels per loop iteration: their slice LDs form one group for balance-loads


def slice_channels(plan: ConvPlan) -> int:
    """Words of a pixel in a slice: the channels of the `slice_tiles` kernel tiles it holds."""
    return plan.kernels * plan.slice_tiles


def tiles_per_slice(plan: ConvPlan) -> int:
    """Kernel tiles a slice holds (the layer's `slice_tiles`): the next group's slice loads
    during a group's first tile."""
    return plan.slice_tiles


def slice_gap(plan: ConvPlan) -> int:
    """Words from the first bypass slice to the second (`plan.slice_bases`, the tile IR's
    `bypass_slices`): R_TT is 0 or this, plus K for each earlier tile of the slice's group."""
    return plan.slice_bases[1] - plan.slice_bases[0]


def strips_ahead(plan: ConvPlan, strip: Strip, nxt: Strip) -> bool:
    """Whether the next strip loads during this one's last kernel tiles: its first slice into
    the first slice during the last group's first tile (the last group's other slice then is the
    first: an even number of groups), its maps rows as the last tile frees them; rather than after
    the strip, behind a flush, while nothing computes. A 1x1 conv of one trace a pixel loads the
    slice pixel by pixel beside its own, so the next strip may be no longer than this one (a
    shorter one's loads run on into the bypass rows after it, which must exist); a k x k conv
    loads it whole, after the last tile's first 16 vector ops."""
    s = plan.shape
    groups = plan.tiles // tiles_per_slice(plan)
    if groups < 2 or groups % 2 or plan.resident_weights:
        return False
    if (s.kh, s.kw) != (1, 1):
        return True
    return (s.c <= TRACE_CHUNK and nxt.y1 - nxt.y0 <= strip.y1 - strip.y0
            and nxt.y0 + strip.y1 - strip.y0 <= s.oh)


def load_first_slice(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, strip: Strip) -> None:
    """The strip's slice of tile 0 into slice 0, one LD per pixel (a counted loop of PIXELS), or
    one LD of its block's rows (a channel-tile-major bypass)."""
    s = plan.shape
    n = (strip.y1 - strip.y0) * s.ow
    if plan.bypass_tile:
        b.const(R_BLEN, n * plan.kernels)
        b.const(R_BSRC, plan.bypass_addr + 2 * strip.y0 * s.ow * plan.kernels)
        b.const(R_BDST, plan.slice_bases[0])
        b.emit(sf.LdOp(sf.LoadTarget.MAPS, R_BDST, R_BSRC, R_BLEN, 0, sf.SELECT_ALL))
        return
    b.const(R_BLEN, slice_channels(plan))
    b.const(R_BSRC, plan.bypass_addr + 2 * strip.y0 * s.ow * s.k)
    b.const(R_BDST, plan.slice_bases[0])
    if n // PIXELS:
        b.const(R_X, 1)
        b.const(R_XEND, n // PIXELS)
        top = b.label("bypass_slice_load")
        _slice_loads(b, plan, PIXELS)
        b.emit(sf.AddiOp(R_X, R_X, 1))
        b.branch(sf.BleOp(R_X, R_XEND, top))
    _slice_loads(b, plan, n % PIXELS)


def next_tile_slice(plan: ConvPlan, hw: SnowflakeConfig, strip: Strip) -> Prefetch:
    """A channel-tile-major bypass's slice of tile t + 1 over the strip's pixels into the other
    slice: block t + 1 starts (R_TO + 2K) x OH·OW bytes on (R_TO = 2K·t; R_TO itself when the
    output is channel-tile-major too, its blocks the bypass's), the other slice at slice 0's
    base + gap - R_TT: one run, as `run_pieces`. Uses the prefetches' scratch registers (R_TMP,
    R_TMP2, R_LEN)."""
    s = plan.shape
    assert plan.bypass_addr is not None and plan.bypass_tile == 2 * s.oh * s.ow * plan.kernels
    assert plan.out_tile in (0, plan.bypass_tile), "a channel-tile-major output's blocks are its bypass's"

    def load(b: AsmBuilder) -> None:
        block = R_TO if plan.out_tile else R_TMP2
        if not plan.out_tile:
            b.emit(sf.MuliOp(R_TMP2, R_TO, s.oh * s.ow))
        b.const(R_LEN, plan.bypass_addr + plan.bypass_tile + 2 * strip.y0 * s.ow * plan.kernels)
        b.emit(sf.AddOp(R_TMP2, block, R_LEN), sf.MuliOp(R_TMP, R_TT, -1))
        b.const(R_LEN, plan.slice_bases[0] + slice_gap(plan))
        b.emit(sf.AddOp(R_TMP, R_TMP, R_LEN))
        run_pieces(b, hw, R_TMP, R_TMP2, R_LEN, (strip.y1 - strip.y0) * s.ow * plan.kernels)
    return load


STARTUP_SHARE = 4
"""A piece of `run_pieces` moves at least this many start-ups' worth of words at one port's rate, so
its LD's start-up is at most a fifth of it (512 words on the ZC706 build, balance-loads' `split`)."""


def run_pieces(b: AsmBuilder, hw: SnowflakeConfig, dst: int, src: int, length: int, words: int) -> None:
    """One contiguous run of `words` into the maps buffer (buffer word in `dst`, DRAM byte in `src`,
    both stepped past it) as up to one LD a load unit, pieces of at least STARTUP_SHARE start-ups' words. Its addresses
    are computed at run time (a tile's block), so balance-loads, which splits only loads whose
    addresses it knows, would queue it whole on one unit: at one port's rate (2 GB/s of the bus's
    4.2), that unit's next weights behind it. On 16 CUs, whose kernel tiles read 64-channel blocks,
    one LD left ResNet-50's channel parts 1.2-2.2 k cycles a layer slower than whole pixels' LD a
    pixel; in pieces they are faster."""
    least = STARTUP_SHARE * hw.ld_startup_cycles * hw.unit_bytes_per_cycle / 2
    parts = max(1, min(hw.load_units, int(words // least)))
    step = -(-words // parts)
    if 2 * step >= 1 << 16:  # past ADDI's immediate (its scratch register would be `src`): one LD
        step = words
    for lo in range(0, words, step):
        n = min(step, words - lo)
        b.const(length, n)
        b.emit(sf.LdOp(sf.LoadTarget.MAPS, dst, src, length, 0, sf.SELECT_ALL))
        if lo + n < words:
            b.emit(sf.AddiOp(dst, dst, n), sf.AddiOp(src, src, 2 * n))


def _slice_loads(b: AsmBuilder, plan: ConvPlan, n: int) -> None:
    for _ in range(n):
        b.emit(sf.LdOp(sf.LoadTarget.MAPS, R_BDST, R_BSRC, R_BLEN, 0, sf.SELECT_ALL),
               sf.AddiOp(R_BSRC, R_BSRC, 2 * plan.shape.k), sf.AddiOp(R_BDST, R_BDST, slice_channels(plan)))


def slice_tile(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, strip: Strip, base: int,
               prefetch: list, load_next: bool, next_slice: Strip | None = None,
               row_loads: list[tuple[int, Prefetch]] | None = None) -> None:
    """The pixels of one kernel tile (bias and mask already set): R_TT holds its slice (0 or one
    slice on from the first),
    R_TO its output-channel byte offset. `load_next`: load tile t+1's slice meanwhile;
    `next_slice`: instead the next strip's first slice, into the first slice (`strips_ahead`).
    `prefetch` (the next kernel tile's weights) goes after the first 16 vector ops, each of
    `row_loads` (pixel, load) once 16 vector ops follow that pixel's."""
    s = plan.shape
    row = s.w * s.cin
    s0 = plan.slice_bases[0]
    b.const(R_MAPS, base + (strip.y0 - strip.r0) * row + s.c_base)
    b.const(R_OUT, plan.out_addr + 2 * strip.y0 * s.ow * out_pixel(plan))
    b.emit(sf.AddOp(R_OUT, R_OUT, R_TO), sf.AddiOp(R_W, R_TW, 0))
    add_offset(b, R_BYP, R_TT, s0)
    if plan.bypass_tile and (load_next or next_slice is not None):  # one LD, where the prefetch goes
        ahead = next_slice
        prefetch = [*prefetch, next_tile_slice(plan, hw, strip) if ahead is None else
                    lambda bb: load_first_slice(bb, plan, hw, ahead)]
        load_next, next_slice = False, None
    if next_slice is not None:
        b.const(R_BLEN, slice_channels(plan))
        b.const(R_BSRC, plan.bypass_addr + 2 * next_slice.y0 * s.ow * s.k)
        b.const(R_BDST, s0)
    elif load_next:
        b.const(R_BLEN, slice_channels(plan))
        b.const(R_BSRC, plan.bypass_addr + 2 * strip.y0 * s.ow * s.k + 2 * slice_channels(plan))
        b.emit(sf.AddOp(R_BSRC, R_BSRC, R_TO), sf.MuliOp(R_TMP, R_TT, -1), sf.AddiOp(R_TMP, R_TMP, slice_gap(plan)))
        add_offset(b, R_BDST, R_TMP, s0)

    if s.c <= TRACE_CHUNK:  # one trace a pixel: R_W stays at the tile's weights
        _pipelined_pixels(b, plan, hw, strip, prefetch, load_next or next_slice is not None, row_loads or [])
        return
    assert next_slice is None and not row_loads, "strips_ahead: pipelined pixels only"

    def pixels(bb: AsmBuilder, n: int) -> None:
        if load_next:
            _slice_loads(bb, plan, n)
        for _ in range(n):
            moved = macs(bb, plan, 1, 1, row, bypass=True)
            bb.emit(sf.AddiOp(R_MAPS, R_MAPS, s.cin - moved), sf.AddiOp(R_OUT, R_OUT, 2 * out_pixel(plan)),
                    sf.AddiOp(R_BYP, R_BYP, slice_channels(plan)))
            if moved:
                bb.emit(sf.AddiOp(R_W, R_TW, 0))

    _tile_pixels(b, plan, hw, strip, prefetch, pixels)


def _tile_pixels(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, strip: Strip, prefetch: list,
                 pixels: Callable[[AsmBuilder, int], None],
                 row_loads: list[tuple[int, Prefetch]] | None = None) -> None:
    """The strip's pixels by `pixels`: 2 x PIXELS of them, the prefetch (behind a flush when
    fewer), then counted loops of PIXELS a pass and the rest, cut where a row load (pixel p,
    load) has 16 vector ops after pixel p's (a VMOV and a MAC a pixel); those due after the
    last pixel behind a flush."""
    n = (strip.y1 - strip.y0) * plan.shape.ow
    lag = hw.vector_queue_depth // 2
    head = min(n, 2 * PIXELS)  # 16 vector ops (a VMOV and a MAC per pixel) before the prefetch
    pixels(b, head)
    if prefetch:
        # [fix] the prefetch overwrites the slot and slice the previous tile's queued ops read: only
        # once a full queue of this tile's ops follows them (a machine queuing more than 16: flush)
        if head < 2 * PIXELS or 2 * head < hw.vector_queue_depth:
            b.flush_vector_queue(hw, R_TMP)
        for load in prefetch:
            load(b)

    def run(a: int, z: int) -> None:
        if (z - a) // PIXELS:
            b.const(R_X, 1)
            b.const(R_XEND, (z - a) // PIXELS)
            top = b.label("x_sliced")
            pixels(b, PIXELS)
            b.emit(sf.AddiOp(R_X, R_X, 1))
            b.branch(sf.BleOp(R_X, R_XEND, top))
        pixels(b, (z - a) % PIXELS)

    at = head
    waiting = sorted(row_loads or [], key=lambda r: r[0])
    while waiting and waiting[0][0] + 1 + lag <= n:
        due = max(at, waiting[0][0] + 1 + lag)
        if due > at:
            run(at, due)
            at = due
        waiting.pop(0)[1](b)
    run(at, n)
    if waiting:
        b.flush_vector_queue(hw, R_TMP)
        for _, load in waiting:
            load(b)


def _pipelined_pixels(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, strip: Strip, prefetch: list,
                      load_next: bool, row_loads: list[tuple[int, Prefetch]]) -> None:
    """The tile's pixels (R_MAPS / R_OUT / R_BYP at the first, R_BSRC / R_BDST its next-tile slice
    LD) with their addresses in LOAD_PAIRS and PIXEL_SETS: pixel p's LD uses pair p mod 4, its
    MAC set p mod 2, each stepped past the pixels between."""
    s = plan.shape
    for j, (src, dst) in enumerate(LOAD_PAIRS[1:], 1):
        if load_next:
            b.emit(sf.AddiOp(src, R_BSRC, 2 * j * s.k), sf.AddiOp(dst, R_BDST, j * slice_channels(plan)))
    (m1, o1) = PIXEL_SETS[1]
    b.emit(sf.AddiOp(m1, R_MAPS, s.cin), sf.AddiOp(o1, R_OUT, 2 * out_pixel(plan)))
    at = [0]  # pixels emitted: the next one's place in the pair / set rotation

    def pixels(bb: AsmBuilder, n: int) -> None:
        if load_next:
            for j in range(n):
                src, dst = LOAD_PAIRS[(at[0] + j) % PIXELS]
                bb.emit(sf.LdOp(sf.LoadTarget.MAPS, dst, src, R_BLEN, 0, sf.SELECT_ALL),
                        sf.AddiOp(src, src, 2 * PIXELS * s.k), sf.AddiOp(dst, dst, PIXELS * slice_channels(plan)))
        for j in range(n):
            maps, out = PIXEL_SETS[(at[0] + j) % 2]
            bb.emit(sf.VmovOp(COOP, sf.VmovSelect.BYPASS, R_BYP),
                    sf.MacOp(COOP, out, maps, R_W, s.c, wb=True, relu=s.relu),
                    sf.AddiOp(R_BYP, R_BYP, slice_channels(plan)), sf.AddiOp(maps, maps, 2 * s.cin),
                    sf.AddiOp(out, out, 4 * out_pixel(plan)))
        at[0] += n

    _tile_pixels(b, plan, hw, strip, prefetch, pixels, row_loads)


def row_slice_loads(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig) -> None:
    """A k x k conv's slices: at the start of an output row (R_OUTROW / R_BYPROW set; R_Y the row
    when the output is a concat's slice), the LDs of the row's pixels' K channels of the next
    kernel tile into the other slice (one group: `balance-loads` spreads them over the units).
    The bypass row lies where the output row would in a tensor of the layer's own K channels: its
    address follows from R_OUTROW, or, when the output rows step a wider tensor's channels, from
    the row number (R_Y x the bypass row's bytes)."""
    s = plan.shape
    b.const(R_LEN, plan.kernels)
    b.emit(sf.MuliOp(R_TMP, R_TT, -2), sf.AddOp(R_TMP, R_TMP, R_BYPROW), sf.AddiOp(R_TMP, R_TMP, slice_gap(plan)))
    if out_pixel(plan) != s.k:
        b.const(R_SRC, 2 * s.ow * s.k)
        b.emit(sf.MulOp(R_SRC, R_SRC, R_Y), sf.AddOp(R_SRC, R_SRC, R_TO))
        add_offset(b, R_SRC, R_SRC, plan.bypass_addr + 2 * plan.kernels)
    else:
        b.const(R_SRC, plan.bypass_addr - plan.out_addr + 2 * plan.kernels)
        b.emit(sf.AddOp(R_SRC, R_SRC, R_OUTROW))
    for x in range(s.ow):
        b.emit(sf.LdOp(sf.LoadTarget.MAPS, R_TMP, R_SRC, R_LEN, 0, sf.SELECT_ALL))
        if x + 1 < s.ow:
            b.emit(sf.AddiOp(R_SRC, R_SRC, 2 * s.k), sf.AddiOp(R_TMP, R_TMP, plan.kernels))
