"""
The pixel level of a conv layer's code (C17 §5.2): one kernel tile over one maps strip — output
rows as Y loops, pixels as X loops (4 unrolled for short 1x1 traces), the MACs of a pixel (one
trace per kernel row, padding taps clamped away) with its bias, mask and bypass VMOVs, and the
tile's prefetch after its first 16 vector ops. `conv_codegen` arranges strips and tiles around it.
"""

from __future__ import annotations

from collections.abc import Callable

from snowir.asm_builder import AsmBuilder
from snowir.conv_plan import ConvPlan, Strip, interior_columns
from snowir.dialects import snowflake_asm as sf
from snowir.hw import SnowflakeConfig

TRACE_CHUNK = 1008  # longest trace we emit: a multiple of 16 below the 1023 limit
COOP = sf.VectorMode.COOP

# register plan (static, as the paper's compiler: "register assignment is statically defined")
R_OUT, R_MAPS, R_W, R_KY, R_KYEND, R_X, R_XEND, R_Y, R_YEND = 1, 2, 3, 4, 5, 6, 7, 8, 9
R_ROWBASE, R_OUTROW, R_T, R_TEND, R_WBASE, R_OUTT, R_TMP, R_TMP2, R_LEN, R_SRC = 10, 11, 12, 13, 14, 15, 16, 17, 18, 19
R_BYP, R_BYPROW = 22, 23
# the kernel tile being computed: its weights slot base, K*t (its first output channel, K kernels
# a tile; with bypass slices, its slice), 2K*t (the same in output bytes), the DRAM address of the next
# weights LD, the K-loop counter. r30/r31 stay free for icache-banking.
R_TW, R_TT, R_TO, R_WSRC, R_TK = 27, 28, 21, 29, 20

Prefetch = Callable[[AsmBuilder], None]


def _chunks(length: int) -> list[tuple[int, int]]:
    return [(o, min(TRACE_CHUNK, length - o)) for o in range(0, length, TRACE_CHUNK)]


R_ROWSTEP, R_OUTSTEP, R_BYPSTEP = 24, 25, 26


def _kernel_tile(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, strip: Strip, base: int, c_off: int,
                 mask: int, prefetch: list[Prefetch], bypass_base: int | None = None,
                 load_next: bool = False, mid_row: Prefetch | None = None) -> None:
    """Compute the kernel tile of the tile registers (R_TW weights slot, R_TT/R_TO its first
    output channel) over one maps strip, reading input channels from `c_off`; emit `prefetch`
    once 16 vector ops are queued (the loads then overwrite banks only older, finished vector
    ops read)."""
    s = plan.shape
    b.emit(sf.AddiOp(R_TMP, R_TW, s.kh * s.kw * s.c * plan.weight_step))
    b.emit(sf.VmovOp(plan.vector_mode, sf.VmovSelect.BIAS, R_TMP))
    b.write_mask(hw, R_TMP, mask)
    if plan.bypass_slices:
        from snowir.bypass_slices import row_slice_loads, slice_tile  # (bypass_slices imports this module)

        if s.kh == s.kw == 1:
            slice_tile(b, plan, hw, strip, base, prefetch, load_next)
            return
    slice_next = plan.bypass_slices and load_next  # a k x k conv's slices: per-row LDs (next tile)

    mid = [mid_row] if mid_row is not None else []  # halfway through the tile's first single row

    def one_row(ky0: int, rows: int, bypass: bool, single: bool = False) -> None:
        if slice_next:
            row_slice_loads(b, plan, hw)
        _row(b, plan, ky0, rows, bypass, mid.pop() if single and mid else None)

    issued = 2
    row = s.w * s.cin
    b.const(R_ROWSTEP, s.sy * row)
    b.const(R_OUTSTEP, 2 * s.ow * s.k)
    if bypass_base is not None:
        b.const(R_BYPSTEP, s.ow * _bypass_stride(plan))
    chunks = len(_chunks(s.kw * s.c))
    ops_per_row = lambda kernel_rows: s.ow * kernel_rows * chunks * (s.kw if s.cin != s.c else 1)  # noqa: E731

    def row_block(y: int, issued: int, pending: bool) -> tuple[int, int, int]:
        """(end, first, last kernel row) of the block of output rows from y: the rows with the
        same kernel rows, cut once a pending prefetch has its 16 ops queued."""
        iy = y * s.sy - s.pt
        ky0, ky1 = max(0, -iy), min(s.kh, s.h - iy)
        y_end = y + 1
        if (ky0, ky1) == (0, s.kh):
            while y_end < strip.y1 and y_end * s.sy - s.pt + s.kh <= s.h:
                y_end += 1
            if pending:  # end the block once 16 ops are queued: the prefetch goes there, not after the tile
                y_end = min(y_end, y + max(1, -(-(hw.vector_queue_depth - issued) // ops_per_row(s.kh))))
        return y_end, ky0, ky1

    if prefetch:
        # no block boundary inside the tile with 16 ops queued (a strip of one row): the loads
        # go first, behind a flush, to overlap this tile rather than wait after it
        y, n = strip.y0, issued
        while y < strip.y1 and n < hw.vector_queue_depth:
            y_next, ky0, ky1 = row_block(y, n, True)
            n += (y_next - y) * ops_per_row(ky1 - ky0)
            y = y_next
        if y >= strip.y1:
            b.flush_vector_queue(hw, R_TMP, mask)
            for load in prefetch:
                load(b)
            prefetch = []
    y = strip.y0
    while y < strip.y1:
        if prefetch and issued >= hw.vector_queue_depth:
            for load in prefetch:
                load(b)
            prefetch = []
        iy = y * s.sy - s.pt
        y_end, ky0, ky1 = row_block(y, issued, bool(prefetch))
        b.const(R_ROWBASE, base + (iy + ky0 - strip.r0) * row + c_off)
        b.const(R_OUTROW, plan.out_addr + 2 * y * s.ow * s.k)
        b.emit(sf.AddOp(R_OUTROW, R_OUTROW, R_TO))
        bypass = bypass_base is not None
        if bypass:
            b.const(R_BYPROW, bypass_base + y * s.ow * _bypass_stride(plan))
            b.emit(sf.AddOp(R_BYPROW, R_BYPROW, R_TT))
        if y_end - y > 1:
            if mid:  # not inside a Y loop: before it
                mid.pop()(b)
            b.const(R_Y, y)
            b.const(R_YEND, y_end - 1)
            top = b.label("Y")
            one_row(ky0, ky1 - ky0, bypass)
            b.emit(sf.AddiOp(R_Y, R_Y, 1))
            b.branch(sf.BleOp(R_Y, R_YEND, top), [
                sf.AddOp(R_ROWBASE, R_ROWBASE, R_ROWSTEP), sf.AddOp(R_OUTROW, R_OUTROW, R_OUTSTEP),
                *([sf.AddOp(R_BYPROW, R_BYPROW, R_BYPSTEP)] if bypass else [])])
        else:
            one_row(ky0, ky1 - ky0, bypass, single=True)
        issued += (y_end - y) * ops_per_row(ky1 - ky0)
        y = y_end
    if mid:
        mid.pop()(b)
    if prefetch:
        b.flush_vector_queue(hw, R_TMP)
        for load in prefetch:
            load(b)


def _row(b: AsmBuilder, plan: ConvPlan, ky0: int, rows: int, bypass: bool = False,
         mid: Prefetch | None = None) -> None:
    """One output row: R_ROWBASE = maps address of its first used input row, R_OUTROW = output
    address; `mid` is emitted halfway through its pixels."""
    s = plan.shape
    row = s.w * s.cin
    xl, xr = interior_columns(s.ow, s.sx, s.pl, s.kw, s.w)
    border = [x for x in range(s.ow) if not xl <= x < xr]
    for x in border:
        ix = x * s.sx - s.pl
        kx0, kx1 = max(0, -ix), min(s.kw, s.w - ix)
        _offset(b, R_MAPS, R_ROWBASE, (ix + kx0) * s.cin)
        _offset(b, R_OUT, R_OUTROW, 2 * x * s.k)
        if bypass:
            _offset(b, R_BYP, R_BYPROW, x * _bypass_stride(plan))
        _offset(b, R_W, R_TW, (ky0 * s.kw + kx0) * s.c * plan.weight_step)
        _macs(b, plan, rows, kx1 - kx0, row, bypass)
    short = s.kh == 1 and s.kw == 1 and s.cin == s.c and s.c <= TRACE_CHUNK and not plan.indp
    if short and xr - xl >= 2 * UNROLL:
        xl = _unrolled_pixels(b, plan, xl, xr, bypass)
    # `mid` (a fused pool's work, snowir/fused_pool.py) goes between the two halves of the row's
    # pixel loop: it may use r1-r9, which each half sets up afresh
    halves = [(xl, (xl + xr) // 2), ((xl + xr) // 2, xr)] if mid is not None and xr - xl >= 2 else [(xl, xr)]
    for half, (x0, x1) in enumerate(halves):
        if half:
            mid(b)
        if x1 - x0 < 1:
            continue
        _offset(b, R_MAPS, R_ROWBASE, (x0 * s.sx - s.pl) * s.cin)
        _offset(b, R_OUT, R_OUTROW, 2 * x0 * s.k)
        if bypass:
            _offset(b, R_BYP, R_BYPROW, x0 * _bypass_stride(plan))
        _offset(b, R_W, R_TW, ky0 * s.kw * s.c * plan.weight_step)
        b.const(R_X, x0)
        b.const(R_XEND, x1 - 1)
        top = b.label("X")
        b.emit(sf.AddiOp(R_X, R_X, 1))
        back = _macs(b, plan, rows, s.kw, row, bypass)
        b.branch(sf.BleOp(R_X, R_XEND, top), [
            sf.AddiOp(R_MAPS, R_MAPS, s.sx * s.cin - back), sf.AddiOp(R_W, R_TW, ky0 * s.kw * s.c * plan.weight_step),
            sf.AddiOp(R_OUT, R_OUT, 2 * s.k), *([sf.AddiOp(R_BYP, R_BYP, _bypass_stride(plan))] if bypass else [])])
    if mid is not None and len(halves) == 1:
        mid(b)


UNROLL = 4
R_MAPS_U = (2, 4, 5, 12)  # free registers: one maps / output address per unrolled pixel
R_OUT_U = (1, 13, 14, 15)
# a residual conv's bypass address per unrolled pixel: r22 and the prefetch temporaries (no
# load is set up inside a row; a 1x1 conv neither staggers nor needs r17 for an offset there)
R_BYP_U = (R_BYP, R_TMP2, R_LEN, R_SRC)


def _unrolled_pixels(b: AsmBuilder, plan: ConvPlan, xl: int, xr: int, bypass: bool = False) -> int:
    """1x1 convs have short traces (C/16 cycles), shorter than the loop bookkeeping of one pixel:
    run UNROLL pixels per X-loop iteration, each with its own address registers, so the CUs see
    a MAC every ~3.5 issue slots (~5.5 with a residual's bypass VMOV). Returns the first pixel
    left for the ordinary loop."""
    s = plan.shape
    n = (xr - xl) // UNROLL
    for j in range(UNROLL):
        _offset(b, R_MAPS_U[j], R_ROWBASE, ((xl + j) * s.sx - s.pl) * s.cin)
        _offset(b, R_OUT_U[j], R_OUTROW, 2 * (xl + j) * s.k)
    if bypass:
        for j in range(UNROLL):
            b.emit(sf.AddiOp(R_BYP_U[j], R_BYPROW, (xl + j) * _bypass_stride(plan)))
    b.emit(sf.AddiOp(R_W, R_TW, 0))
    b.const(R_X, 1)
    b.const(R_XEND, n)
    top = b.label("XU")
    b.emit(sf.AddiOp(R_X, R_X, 1))
    for j in range(UNROLL):
        if bypass:
            b.emit(sf.VmovOp(COOP, sf.VmovSelect.BYPASS, R_BYP_U[j]))
        b.emit(sf.MacOp(COOP, R_OUT_U[j], R_MAPS_U[j], R_W, s.c, wb=True, relu=s.relu))
    step_maps, step_out = UNROLL * s.sx * s.cin, 2 * UNROLL * s.k
    b.emit(*(sf.AddiOp(r, r, step_maps) for r in R_MAPS_U))
    if bypass:
        b.emit(*(sf.AddiOp(r, r, UNROLL * _bypass_stride(plan)) for r in R_BYP_U))
    b.branch(sf.BleOp(R_X, R_XEND, top), [sf.AddiOp(r, r, step_out) for r in R_OUT_U])
    return xl + n * UNROLL


def _bypass_stride(plan: ConvPlan) -> int:
    """Words between the bypass values of consecutive output pixels: a row's K channels, or a
    kernel tile's in a bypass slice."""
    return plan.kernels if plan.bypass_slices else plan.shape.k


def _offset(b: AsmBuilder, dst: int, base_reg: int, offset: int) -> None:
    if -(1 << 16) <= offset < (1 << 16):
        b.emit(sf.AddiOp(dst, base_reg, offset))
    else:
        b.const(R_TMP2, offset)
        b.emit(sf.AddOp(dst, base_reg, R_TMP2))


def _macs(b: AsmBuilder, plan: ConvPlan, rows: int, taps: int, row: int, bypass: bool = False) -> int:
    """The MACs of one pixel from R_MAPS / R_W (`rows` kernel rows of `taps` columns), write-back
    on the last (preceded by the bypass VMOV of a residual conv, one per write-back MAC as in C17
    §5.2); returns how far R_MAPS moved. Ungrouped: one trace per kernel row (taps x C contiguous
    words); grouped: one trace per tap (the group's channels), stepping a pixel between taps."""
    s = plan.shape
    ws = plan.weight_step
    if s.cin == s.c and 1 < rows and taps * s.c <= TRACE_CHUNK \
            and (rows - 1) * max(row, s.kw * s.c * ws) < IMM17:
        return _macs_pipelined(b, plan, rows, taps, row, bypass)
    per_row = [(taps * s.c, 0)] if s.cin == s.c else [(s.c, j) for j in range(taps)]
    moved = 0
    for r in range(rows):
        for j, (trace, _) in enumerate(per_row):
            chunks = _chunks(trace)
            for ci, (off, n) in enumerate(chunks):
                last = r == rows - 1 and j == len(per_row) - 1 and ci == len(chunks) - 1
                if off:
                    b.emit(sf.AddiOp(R_MAPS, R_MAPS, TRACE_CHUNK), sf.AddiOp(R_W, R_W, TRACE_CHUNK * ws))
                    moved += TRACE_CHUNK
                if last and bypass:
                    b.emit(sf.VmovOp(plan.vector_mode, sf.VmovSelect.BYPASS, R_BYP))
                b.emit(sf.MacOp(plan.vector_mode, R_OUT, R_MAPS, R_W, n, wb=last, relu=last and s.relu))
            back = (len(chunks) - 1) * TRACE_CHUNK
            if j != len(per_row) - 1:  # next tap of a grouped conv: one pixel on
                b.emit(sf.AddiOp(R_MAPS, R_MAPS, s.cin - back), sf.AddiOp(R_W, R_W, s.c - back))
                moved += s.cin - back
        if r != rows - 1:
            back = (len(_chunks(per_row[-1][0])) - 1) * TRACE_CHUNK
            tap_back = (len(per_row) - 1) * s.cin if s.cin != s.c else 0
            w_step = s.kw * s.c - (len(per_row) - 1) * s.c if s.cin != s.c else s.kw * s.c
            b.emit(sf.AddiOp(R_MAPS, R_MAPS, row - tap_back - back), sf.AddiOp(R_W, R_W, (w_step - back) * ws))
            moved += row - tap_back - back
    return moved


IMM17 = 1 << 16
ROW_PAIRS = ((R_MAPS, R_W), (4, 5), (12, 13))  # (maps, weights) address of kernel row 0, odd rows, even rows


def _macs_pipelined(b: AsmBuilder, plan: ConvPlan, rows: int, taps: int, row: int, bypass: bool) -> int:
    """One trace per kernel row, each row's addresses in a register pair of its own set before
    the previous row's MAC: a MAC never waits on the ADDI just before it (up to 2 RAW cycles a
    row, as long as a 2-3 cycle trace: AlexNet's 11x11x3 conv1 was bookkeeping-bound). R_MAPS
    and R_W stay at the pixel's first row; returns 0 (R_MAPS did not move)."""
    s = plan.shape
    w_row = s.kw * s.c * plan.weight_step
    pair = lambda r: ROW_PAIRS[0] if r == 0 else ROW_PAIRS[1 if r % 2 else 2]  # noqa: E731
    for r in range(rows):
        if r + 1 < rows:
            m, w = pair(r + 1)
            b.emit(sf.AddiOp(m, R_MAPS, (r + 1) * row), sf.AddiOp(w, R_W, (r + 1) * w_row))
        last = r == rows - 1
        if last and bypass:
            b.emit(sf.VmovOp(plan.vector_mode, sf.VmovSelect.BYPASS, R_BYP))
        m, w = pair(r)
        b.emit(sf.MacOp(plan.vector_mode, R_OUT, m, w, taps * s.c, wb=last, relu=last and s.relu))
    return 0
