"""
Max pool code on the pool units (MAX instructions): the input broadcast, CU c comparing
channels 16c.. of a pixel (CU stride 32 bytes), a window row one MAX trace; strips in banks,
or a ring of input-row slots. Padding taps are skipped by clamping, like the conv.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from snowir.codegen.builder import AsmBuilder
from snowir.codegen.loads import load_broadcast
from snowir.dialects import snowflake_asm as sf
from snowir.hw import DEFAULT, SnowflakeConfig
from snowir.plan.pool import ring_loads
from snowir.plan.shapes import PoolShape, interior_columns
from snowir.plan.pool_shapes import PoolTile


R_OUT, R_MAPS, R_STEP, R_X, R_XEND, R_TMP, R_SRC, R_LEN, R_MASK = 1, 2, 3, 4, 5, 6, 7, 8, 9


def set_up_max(b: AsmBuilder, p: PoolShape) -> None:
    """R_STEP = the channel count (a MAX trace steps a pixel) and the CU stride: CU c compares
    channels 16c.. of a pixel and writes them there (32 bytes a CU)."""
    b.const(R_STEP, p.cin)
    b.const(R_TMP, DEFAULT.element_bytes * DEFAULT.lanes)  # [S] 16 lanes of 16 bits on every machine
    b.emit(sf.VmovOp(sf.VectorMode.COOP, sf.VmovSelect.STRIDE, R_TMP))


def generate_pool(p: PoolShape, hw: SnowflakeConfig, in_addr: int, out_addr: int,
                  tiles: Sequence[PoolTile], out_pixel: int = 0) -> AsmBuilder:
    """The pool's maps tiles in order: rings, or strips (double-buffered in the two banks, or
    each filling the buffer once the previous one's MAXs are done). `out_pixel`: words between
    output pixels when the output is a channel slice of a wider tensor (a device concat's; 0: C)."""
    b = AsmBuilder()
    q = out_pixel or p.c
    row = p.w * p.cin
    set_up_max(b, p)

    def load(st) -> None:
        with b.at(f"load_maps.rows{st.r0}_{st.r1}"):
            load_broadcast(b, hw, max(st.bank, 0) * hw.maps_bank_elements, in_addr + 2 * st.r0 * row,
                           (st.r1 - st.r0) * row)

    if not tiles[0].ring:
        load(tiles[0].strip)
    for ti, t in enumerate(tiles):
        with b.at(f"tile{ti}"):
            strip = t.strip
            if t.ring:
                if ti:  # the ring's first loads overwrite what earlier MAXs read
                    b.flush_vector_queue(hw, R_TMP)
                _ring(b, p, hw, in_addr, out_addr, t, q)
                continue
            # bank -1: the strip spans both banks, so the previous one must be done (no double buffering)
            base = max(strip.bank, 0) * hw.maps_bank_elements
            if (strip.bank < 0 or tiles[ti - 1].ring) and ti >= 1:
                b.flush_vector_queue(hw, R_TMP)
                load(strip)
            # double-buffered: the next strip loads into the other bank once 16 MAXs of this one are
            # queued (the previous strip's, which read that bank, are then done)
            nxt = tiles[ti + 1].strip if ti + 1 < len(tiles) and strip.bank >= 0 and not tiles[ti + 1].ring \
                and tiles[ti + 1].strip.bank >= 0 else None
            issued = 0
            for g in range(0, p.c, hw.lanes * hw.cus):
                # a last, partial CU (channels not a multiple of 16, all in this one group) writes
                # its extra lanes into the next pixel's first channels, which that pixel's own
                # write-back (issued later, in pixel order) overwrites; the output has 16 words slack
                cus = min(hw.cus, -(-(p.c - g) // hw.lanes))
                b.write_mask(hw, R_MASK, sum(1 << (hw.vmacs_per_cu * c) for c in range(cus)))
                for y in range(strip.y0, strip.y1):
                    if nxt is not None and issued >= hw.vector_queue_depth:
                        load(nxt)
                        nxt = None
                    iy = y * p.sy - p.pt
                    ky0, ky1 = max(0, -iy), min(p.kh, p.h - iy)
                    row_base = base + (iy + ky0 - strip.r0) * row + p.c_base + g
                    out_row = out_addr + 2 * (y * p.ow * q + g)
                    _pool_row(b, p, row_base, out_row, ky1 - ky0, row, out_pixel=q)
                    issued += p.ow * (ky1 - ky0)
            if nxt is not None:
                b.flush_vector_queue(hw, R_TMP)
                load(nxt)
    return b


def _ring(b: AsmBuilder, p: PoolShape, hw: SnowflakeConfig, in_addr: int, out_addr: int, t: PoolTile,
          out_pixel: int) -> None:
    """Output rows in order over a ring of `t.ring` input rows; after each output row, the rows
    `ring_loads` places there are loaded into the slots of rows no longer read."""
    row = p.w * p.cin
    st, n = t.strip, t.ring
    loads = ring_loads(p, t)

    def issue(after: int) -> None:
        for a, r, rows in loads:
            if a == after:
                load_broadcast(b, hw, ((r - st.r0) % n) * row, in_addr + 2 * r * row, rows * row)

    issue(-1)
    for y in range(st.y0, st.y1):
        ring_output_row(b, p, hw, y, lambda r: ((r - st.r0) % n) * row, out_addr, out_pixel)
        issue(y)


def ring_output_row(b: AsmBuilder, p: PoolShape, hw: SnowflakeConfig, y: int, slot: Callable[[int], int],
                    out_addr: int, out_pixel: int = 0) -> None:
    """Output row y from input rows held in slots (`slot(r)`: buffer element address of input
    row r): a MAX trace per window row, so the slots need not be adjacent; each group of 16 x CUs
    channels with its write-back mask."""
    iy = y * p.sy - p.pt
    ky0, ky1 = max(0, -iy), min(p.kh, p.h - iy)
    slots = [slot(iy + ky) for ky in range(ky0, ky1)]
    steps = [b_ - a for a, b_ in zip(slots, slots[1:])]
    for g in range(0, p.c, hw.lanes * hw.cus):
        cus = min(hw.cus, -(-(p.c - g) // hw.lanes))
        b.write_mask(hw, R_MASK, sum(1 << (hw.vmacs_per_cu * c) for c in range(cus)))
        q = out_pixel or p.c
        _pool_row(b, p, slots[0] + p.c_base + g, out_addr + 2 * (y * p.ow * q + g), ky1 - ky0, p.w * p.cin, steps, q)


def _pool_row(b: AsmBuilder, p: PoolShape, row_base: int, out_row: int, rows: int, row: int,
              steps: list[int] | None = None, out_pixel: int = 0) -> None:
    q = out_pixel or p.c
    xl, xr = interior_columns(p.ow, p.sx, p.pl, p.kw, p.w)

    def border(xs: list[int]) -> None:
        for x in xs:
            ix = x * p.sx - p.pl
            kx0, kx1 = max(0, -ix), min(p.kw, p.w - ix)
            b.const(R_MAPS, row_base + (ix + kx0) * p.cin)
            b.const(R_OUT, out_row + 2 * x * q)
            _window(b, rows, kx1 - kx0, row, steps)

    # pixels in order: a partial last CU writes into the next pixel, which must come later
    border([x for x in range(p.ow) if x < xl])
    offsets = [0]
    for r in range(rows - 1):
        offsets.append(offsets[-1] + (steps[r] if steps else row))
    if xr > xl and rows <= len(R_WINDOW_ROWS) and max(map(abs, offsets)) < 1 << 16:
        _pixels_pipelined(b, p, row_base + (xl * p.sx - p.pl) * p.cin, out_row, xl, xr, offsets, q)
    elif xr > xl:
        b.const(R_MAPS, row_base + (xl * p.sx - p.pl) * p.cin)
        b.const(R_OUT, out_row + 2 * xl * q)
        b.const(R_X, xl)
        b.const(R_XEND, xr - 1)
        top = b.label("x")
        b.emit(sf.AddiOp(R_X, R_X, 1))
        moved = _window(b, rows, p.kw, row, steps)
        b.branch(sf.BleOp(R_X, R_XEND, top), [sf.AddiOp(R_MAPS, R_MAPS, p.sx * p.cin - moved),
                                               sf.AddiOp(R_OUT, R_OUT, 2 * q)])
    border([x for x in range(p.ow) if x >= max(xr, xl)])


R_WINDOW_ROWS = (R_MAPS, R_SRC, R_LEN)  # a window row's address each, stepped in the branch's delay slots


def _pixels_pipelined(b: AsmBuilder, p: PoolShape, first: int, out_row: int, xl: int, xr: int,
                      offsets: list[int], q: int) -> None:
    """Interior pixels [xl, xr) with a register per window row, all stepped in the branch's
    delay slots: a pixel is the output step, its MAX traces and the branch (9 issue slots for 3
    rows of 3 cycles), and no MAX waits on the ADDI of its address (a pool computed in a conv's
    program runs on the CUs' time, snowir/plan/fused_pool.py). The loop ends on the output address."""
    regs = R_WINDOW_ROWS[:len(offsets)]
    b.const(R_MAPS, first)
    for reg, off in zip(regs[1:], offsets[1:]):
        b.emit(sf.AddiOp(reg, R_MAPS, off))
    b.const(R_OUT, out_row + 2 * (xl - 1) * q)  # stepped first thing in the loop
    b.const(R_XEND, out_row + 2 * (xr - 2) * q)  # the last pixel's branch falls through
    top = b.label("x_pipelined")
    b.emit(sf.AddiOp(R_OUT, R_OUT, 2 * q))
    for r, reg in enumerate(regs):
        b.emit(sf.MaxOp(R_OUT, reg, R_STEP, p.kw, wb=r == len(regs) - 1))
    b.branch(sf.BleOp(R_OUT, R_XEND, top), [sf.AddiOp(reg, reg, p.sx * p.cin) for reg in regs])


def _window(b: AsmBuilder, rows: int, trace: int, row: int, steps: list[int] | None = None) -> int:
    """One window: a MAX trace per window row, `steps[r]` words from row r to r+1 (`row`: contiguous)."""
    moved = 0
    for r in range(rows):
        last = r == rows - 1
        b.emit(sf.MaxOp(R_OUT, R_MAPS, R_STEP, trace, wb=last))
        if not last:
            step = steps[r] if steps else row
            b.emit(sf.AddiOp(R_MAPS, R_MAPS, step))
            moved += step
    return moved
