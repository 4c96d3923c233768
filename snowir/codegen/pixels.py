"""
One kernel tile over one maps strip (C17 Figure 3's Y/X/T loops): output rows in classes of
equal kernel-row clipping, each row its border pixels and an X loop over the interior (unrolled
pixels for short traces), the tile's prefetches after its first 16 vector ops.
"""

from __future__ import annotations

from xdsl.ir import Operation

from snowir.codegen.builder import DELAY_SLOTS, AsmBuilder
from snowir.codegen.bypass_slices import next_tile_slice, row_slice_loads, slice_channels, slice_tile
from snowir.codegen.traces import (COOP, Prefetch, R_BYP, R_BYPROW, R_BYPSTEP, R_LEN, R_MAPS, R_OUT, R_OUTROW,
                                   R_OUTSTEP, R_ROWBASE, R_ROWSTEP, R_SRC, R_TMP, R_TMP2, R_TO, R_TT, R_TW, R_W, R_X,
                                   R_XEND, R_Y, R_YEND, ROW_PAIRS, TRACE_CHUNK, add_offset, out_pixel, trace_chunks,
                                   macs)
from snowir.dialects import snowflake_asm as sf
from snowir.hw import SnowflakeConfig
from snowir.plan.issue import UNROLL, row_loop_pays
from snowir.plan.shapes import ConvPlan, Strip, interior_columns


def row_steps(b: AsmBuilder, plan: ConvPlan) -> None:
    """R_ROWSTEP and R_OUTSTEP: the input and output words between output rows."""
    s = plan.shape
    b.const(R_ROWSTEP, s.sy * s.w * s.cin)
    b.const(R_OUTSTEP, 2 * (plan.out_row or s.ow * s.k))


def kernel_tile(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, strip: Strip, base: int, c_off: int,
                 mask: int, prefetch: list[Prefetch], bypass_base: int | None = None,
                 load_next: bool = False, mid_row: Prefetch | None = None,
                 row_loads: list[tuple[int, Prefetch]] | None = None, next_slice: Strip | None = None,
                 base_reg: int | None = None, steps_set: bool = False) -> None:
    """Compute the kernel tile of the tile registers (R_TW weights slot, R_TT/R_TO its first
    output channel) over one maps strip (from maps word `base`, plus register `base_reg`'s value
    when given: a counted loop's tiles over alternating banks; `steps_set`: its `row_steps` set
    once before it), reading input channels from `c_off`; emit `prefetch`
    once 16 vector ops are queued (the loads then overwrite banks only older, finished vector
    ops read). `row_loads` = (output row y, load): each load once 16 vector ops follow row y's
    (y below the strip: at once), the rows then one block each; those still due at the end
    behind a flush (the next whole-buffer strip replacing this one as its last tile frees the
    rows; a 1x1 bypass-slice tile's are by pixel, and `next_slice` its slice loads' strip,
    bypass_slices.slice_tile). The layer's `prefetch_after` moves `prefetch` past more ops."""
    s = plan.shape
    depth = plan.prefetch_after or hw.vector_queue_depth  # ops queued before the prefetch
    if s.bias_at == "maps":
        # the tile's biases in the bias block on top of the maps buffer, 2 x its first channel
        # on (R_TO, plan/shapes.bias_block_words); INDP's CUs hold the same kernels: `shared`
        add_offset(b, R_TMP, R_TO, hw.maps_buffer_elements)
        b.emit(sf.VmovOp(plan.vector_mode, sf.VmovSelect.MBIAS, R_TMP, shared=plan.indp))
    else:  # the bias block after the kernel's taps in the weights buffer
        b.emit(sf.AddiOp(R_TMP, R_TW, s.kh * s.kw * s.c * plan.weight_step))
        b.emit(sf.VmovOp(plan.vector_mode, sf.VmovSelect.BIAS, R_TMP))
    b.write_mask(hw, R_TMP, mask)
    if plan.bypass_slices:
        if s.kh == s.kw == 1:
            slice_tile(b, plan, hw, strip, base, prefetch, load_next, next_slice, row_loads)
            return
    slice_next = plan.bypass_slices and load_next and not plan.bypass_tile  # a k x k conv's slices: per-row LDs
    if plan.bypass_slices and load_next and plan.bypass_tile:  # the next tile's: one LD of its block's rows
        prefetch = [*prefetch, next_tile_slice(plan, hw, strip)]

    mid = [mid_row] if mid_row is not None else []  # halfway through the tile's first single row

    def one_row(ky0: int, rows: int, bypass: bool, single: bool = False,
                loads: tuple[Prefetch, int] | None = None) -> None:
        if slice_next:
            row_slice_loads(b, plan, hw)
        if loads is not None:  # the prefetch after this row's first ops
            _row(b, plan, hw, ky0, rows, bypass, loads[0], loads[1])
            return
        _row(b, plan, hw, ky0, rows, bypass, mid.pop() if single and mid else None)

    issued = 2
    row = s.w * s.cin
    out_row = plan.out_row or s.ow * s.k  # a column band (a concat's slice) writes into rows of the whole output
    if not steps_set:
        row_steps(b, plan)
    if bypass_base is not None:
        b.const(R_BYPSTEP, s.ow * _bypass_stride(plan))
    chunks = len(trace_chunks(s.kw * s.c))
    # (a row of padding alone: one bias-only MAC a pixel)
    ops_per_row = lambda kernel_rows: s.ow * max(1, kernel_rows * chunks * (s.kw if s.cin != s.c else 1))  # noqa: E731

    def row_block(y: int, issued: int, pending: bool) -> tuple[int, int, int]:
        """(end, first, last kernel row) of the block of output rows from y: the rows with the
        same kernel rows, cut once a pending prefetch has its 16 ops queued."""
        iy = y * s.sy - s.pt
        ky0, ky1 = max(0, -iy), min(s.kh, s.h - iy)
        y_end = y + 1
        if (ky0, ky1) == (0, s.kh) and not row_loads:
            while y_end < strip.y1 and y_end * s.sy - s.pt + s.kh <= s.h:
                y_end += 1
            if pending:  # end the block once 16 ops are queued: the prefetch goes there, not after the tile
                y_end = min(y_end, y + max(1, -(-(depth - issued) // ops_per_row(s.kh))))
        return y_end, ky0, ky1

    if prefetch:
        # no block boundary inside the tile with 16 ops queued (a strip of one row): the loads
        # go first, behind a flush, to overlap this tile rather than wait after it
        y, n = strip.y0, issued
        while y < strip.y1 and n < depth:
            y_next, ky0, ky1 = row_block(y, n, True)
            n += (y_next - y) * ops_per_row(ky1 - ky0)
            y = y_next
        if y >= strip.y1:
            b.flush_vector_queue(hw, R_TMP, mask)
            for load in prefetch:
                load(b)
            prefetch = []
    tile_ops = sum(ops_per_row(min(s.kh, s.h - (y * s.sy - s.pt)) - max(0, s.pt - y * s.sy))
                   for y in range(strip.y0, strip.y1))
    waiting = sorted(row_loads or [], key=lambda r: r[0])
    done_at: dict[int, int] = {}  # vector ops issued once output row y's are

    def due_row_loads() -> None:
        while waiting and (waiting[0][0] < strip.y0 or waiting[0][0] in done_at
                           and issued >= done_at[waiting[0][0]] + hw.vector_queue_depth):
            waiting.pop(0)[1](b)

    y = strip.y0
    while y < strip.y1:
        if prefetch and issued >= depth:
            for load in prefetch:
                load(b)
            prefetch = []
        due_row_loads()
        iy = y * s.sy - s.pt
        y_end, ky0, ky1 = row_block(y, issued, bool(prefetch))
        # a row of padding alone reads no input row: its bias-only MACs read the strip's first word
        offset = base + ((iy + ky0 - strip.r0) * row if ky1 > ky0 else 0) + c_off
        if base_reg is None:
            b.const(R_ROWBASE, offset)
        else:
            add_offset(b, R_ROWBASE, base_reg, offset)
        b.const(R_OUTROW, plan.out_addr + 2 * y * out_row)
        b.emit(sf.AddOp(R_OUTROW, R_OUTROW, R_TO))
        bypass = bypass_base is not None
        if bypass:
            b.const(R_BYPROW, bypass_base + y * s.ow * _bypass_stride(plan))
            b.emit(sf.AddOp(R_BYPROW, R_BYPROW, R_TT))
        inside = None
        if prefetch and not mid and y_end - y == 1 and issued + ops_per_row(ky1 - ky0) > depth \
                and 4 * ops_per_row(ky1 - ky0) >= tile_ops:
            # the row, a quarter of the tile or more, would hold the prefetch back past the
            # tile's first 16 ops: it goes into the row, after the pixel that issues the 16th (a
            # short strip's tiles otherwise gave their next kernels half a tile less to land;
            # in longer strips the split loop costs more than the loads gain)
            pending = prefetch
            inside = (lambda bb: [load(bb) for load in pending], depth - issued)
            prefetch = []
        if y_end - y > 1:
            if mid:  # not inside a Y loop: before it
                mid.pop()(b)
            b.const(R_Y, y)
            b.const(R_YEND, y_end - 1)
            top = b.label("y")
            one_row(ky0, ky1 - ky0, bypass)
            b.emit(sf.AddiOp(R_Y, R_Y, 1))
            b.branch(sf.BleOp(R_Y, R_YEND, top), [
                sf.AddOp(R_ROWBASE, R_ROWBASE, R_ROWSTEP), sf.AddOp(R_OUTROW, R_OUTROW, R_OUTSTEP),
                *([sf.AddOp(R_BYPROW, R_BYPROW, R_BYPSTEP)] if bypass else [])])
        else:
            if slice_next and out_pixel(plan) != s.k:  # row_slice_loads finds the bypass row by its number
                b.const(R_Y, y)
            one_row(ky0, ky1 - ky0, bypass, single=True, loads=inside)
        issued += (y_end - y) * ops_per_row(ky1 - ky0)
        done_at[y_end - 1] = issued
        y = y_end
    if mid:
        mid.pop()(b)
    due_row_loads()
    if prefetch or waiting:
        b.flush_vector_queue(hw, R_TMP)
        for load in [*prefetch, *(load for _, load in waiting)]:
            load(b)


def _row(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, ky0: int, rows: int, bypass: bool = False,
         mid: Prefetch | None = None, mid_after: int | None = None) -> None:
    """One output row: R_ROWBASE = maps address of its first used input row, R_OUTROW = output
    address; `mid` is emitted halfway through its pixels, or once `mid_after` of its MACs are
    issued (border pixels first, then the interior in order)."""
    s = plan.shape
    if rows <= 0:  # a row of padding alone: every pixel the bias
        _bias_only_pixels(b, plan, bypass, 0, s.ow)
        if mid is not None:
            mid(b)
        return
    xl, xr = interior_columns(s.ow, s.sx, s.pl, s.kw, s.w)
    border = [x for x in range(s.ow) if not xl <= x < xr]
    if mid_after is not None:
        assert mid is not None
        macs_of = lambda taps: rows * (len(trace_chunks(taps * s.c)) if s.cin == s.c  # noqa: E731
                                       else taps * len(trace_chunks(s.c)))
        first = 0
        for x in border:
            ix = x * s.sx - s.pl
            first += macs_of(min(s.kw, s.w - ix) - max(0, -ix))
        split = min(xr, xl + max(0, -(-(mid_after - first) // macs_of(s.kw))))
        _border_pixels(b, plan, ky0, rows, bypass, border)
        _interior(b, plan, hw, ky0, rows, bypass, xl, split)
        mid(b)
        _interior(b, plan, hw, ky0, rows, bypass, split, xr)
        return
    _border_pixels(b, plan, ky0, rows, bypass, border)
    if _short(plan) and xr - xl >= 2 * UNROLL:
        xl = _unrolled_pixels(b, plan, xl, xr, bypass)
    # `mid` (a fused pool's work, snowir/plan/fused_pool.py) goes between the two halves of the row's
    # pixel loop: it may use r1-r9, which each half sets up afresh
    halves = [(xl, (xl + xr) // 2), ((xl + xr) // 2, xr)] if mid is not None and xr - xl >= 2 else [(xl, xr)]
    for half, (x0, x1) in enumerate(halves):
        if half:
            mid(b)
        _pixel_loop(b, plan, hw, ky0, rows, bypass, x0, x1)
    if mid is not None and len(halves) == 1:
        mid(b)


def _border_pixels(b: AsmBuilder, plan: ConvPlan, ky0: int, rows: int, bypass: bool, border: list[int]) -> None:
    """The row's pixels whose window is clipped by padding columns, each with its own traces."""
    s = plan.shape
    row = s.w * s.cin
    for x in border:
        ix = x * s.sx - s.pl
        kx0, kx1 = max(0, -ix), min(s.kw, s.w - ix)
        add_offset(b, R_MAPS, R_ROWBASE, (ix + kx0) * s.cin if kx1 > kx0 else 0)
        add_offset(b, R_OUT, R_OUTROW, 2 * x * out_pixel(plan))
        if bypass:
            add_offset(b, R_BYP, R_BYPROW, x * _bypass_stride(plan))
        if kx1 <= kx0:  # columns of padding alone
            _bias_only(b, plan, bypass)
            continue
        add_offset(b, R_W, R_TW, (ky0 * s.kw + kx0) * s.c * plan.weight_step)
        macs(b, plan, rows, kx1 - kx0, row, bypass)


def _bias_only(b: AsmBuilder, plan: ConvPlan, bypass: bool) -> None:
    """The write-back of a pixel whose window is padding alone (R_OUT, R_BYP set): the ISA has
    no empty trace, so a one-word MAC against word 1 of the kernel's bias block, zero in every
    COOP kernel (plan/layout.pack_weights), reading any loaded maps word (R_MAPS). Its output
    is then the bias (+ bypass, ReLU), as the golden model's all-padding window."""
    assert not plan.indp, "INDP kernels hold no zero word (plan/indp.indp_fits refuses the layer)"
    s = plan.shape
    add_offset(b, R_W, R_TW, s.kh * s.kw * s.c + 1)
    if bypass:
        b.emit(sf.VmovOp(plan.vector_mode, sf.VmovSelect.BYPASS, R_BYP))
    b.emit(sf.MacOp(plan.vector_mode, R_OUT, R_MAPS, R_W, 1, wb=True, relu=s.relu))


def _bias_only_pixels(b: AsmBuilder, plan: ConvPlan, bypass: bool, x0: int, x1: int) -> None:
    """Pixels [x0, x1) of a row of padding alone (R_ROWBASE: a loaded maps word), one a loop
    iteration (`_bias_only`)."""
    b.emit(sf.AddiOp(R_MAPS, R_ROWBASE, 0))
    add_offset(b, R_OUT, R_OUTROW, 2 * x0 * out_pixel(plan))
    if bypass:
        add_offset(b, R_BYP, R_BYPROW, x0 * _bypass_stride(plan))
    b.const(R_X, x0)
    b.const(R_XEND, x1 - 1)
    top = b.label("x_bias")
    b.emit(sf.AddiOp(R_X, R_X, 1))
    _bias_only(b, plan, bypass)
    b.branch(sf.BleOp(R_X, R_XEND, top), [
        sf.AddiOp(R_OUT, R_OUT, 2 * out_pixel(plan)), *([sf.AddiOp(R_BYP, R_BYP, _bypass_stride(plan))] if bypass else [])])


def _interior(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, ky0: int, rows: int, bypass: bool, x0: int, x1: int) -> None:
    """Interior pixels [x0, x1): unrolled when traces are short and there are enough of them."""
    if _short(plan) and x1 - x0 >= 2 * UNROLL:
        x0 = _unrolled_pixels(b, plan, x0, x1, bypass)
    _pixel_loop(b, plan, hw, ky0, rows, bypass, x0, x1)


def _short(plan: ConvPlan) -> bool:
    """A 1x1 conv's one-trace pixels, unrolled (`_unrolled_pixels`): a grouped one's too (a
    group's channels, `cin` apart from pixel to pixel: a per-channel scale, an SE gate)."""
    s = plan.shape
    return s.kh == 1 and s.kw == 1 and s.c <= TRACE_CHUNK and not plan.indp


def _loop_start(b: AsmBuilder, plan: ConvPlan, ky0: int, bypass: bool, x0: int) -> None:
    """A pixel loop's addresses at pixel x0: maps (from its first used kernel row), output,
    bypass, weights (kernel row ky0)."""
    s = plan.shape
    add_offset(b, R_MAPS, R_ROWBASE, (x0 * s.sx - s.pl) * s.cin)
    add_offset(b, R_OUT, R_OUTROW, 2 * x0 * out_pixel(plan))
    if bypass:
        add_offset(b, R_BYP, R_BYPROW, x0 * _bypass_stride(plan))
    add_offset(b, R_W, R_TW, ky0 * s.kw * s.c * plan.weight_step)


def _pixel_loop(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, ky0: int, rows: int, bypass: bool, x0: int, x1: int) -> None:
    """Interior pixels [x0, x1), one a loop iteration."""
    s = plan.shape
    row = s.w * s.cin
    if x1 - x0 < 1:
        return
    if row_loop_pays(plan, rows, hw):
        _row_traces_loop(b, plan, ky0, rows, bypass, x0, x1)
        return
    _loop_start(b, plan, ky0, bypass, x0)
    b.const(R_X, x0)
    b.const(R_XEND, x1 - 1)
    top = b.label("x")
    b.emit(sf.AddiOp(R_X, R_X, 1))
    back = macs(b, plan, rows, s.kw, row, bypass)
    b.branch(sf.BleOp(R_X, R_XEND, top), [
        sf.AddiOp(R_MAPS, R_MAPS, s.sx * s.cin - back), sf.AddiOp(R_W, R_TW, ky0 * s.kw * s.c * plan.weight_step),
        sf.AddiOp(R_OUT, R_OUT, 2 * out_pixel(plan)), *([sf.AddiOp(R_BYP, R_BYP, _bypass_stride(plan))] if bypass else [])])



def _row_traces_loop(b: AsmBuilder, plan: ConvPlan, ky0: int, rows: int, bypass: bool, x0: int, x1: int) -> None:
    """Interior pixels [x0, x1) of a conv whose kernel rows are one trace each, with a register
    pair per row (2-3 rows): the rows' weights addresses do not change from pixel to pixel, so
    they are set once, before the loop, and a pixel issues its MACs, the maps ADDI of each row
    past the first, the maps and output steps and the branch: 2 * rows + 2 slots (+2 with a
    residual's bypass) where the counted loop took 3 * rows + 3 (the delay slots hold the
    pixel's last instructions, the loop ends on the output address: no counter). A 16-channel
    3x3 window (a depthwise slice's: 3 MAC cycles a row) was issue-bound at 12 slots for 9 MAC
    cycles; it now takes 8."""
    s = plan.shape
    row = s.w * s.cin
    ws = plan.weight_step
    step_out = 2 * out_pixel(plan)
    _loop_start(b, plan, ky0, bypass, x0)
    for r in range(1, rows):
        b.emit(sf.AddiOp(ROW_PAIRS[r][1], R_W, r * s.kw * s.c * ws))
    # taken while the pixel just computed is not the last but one: R_OUT steps in a delay slot
    add_offset(b, R_XEND, R_OUT, (x1 - x0 - 2) * step_out)
    top = b.label("x")
    # the rows' maps addresses first, so the first MAC, which reads R_OUT (its write-back
    # address) too, issues the scalar latency after the last pixel's output step; R_MAPS steps
    # once every read of it is issued, early enough for the next pixel's ADDIs
    body: list[Operation] = [sf.AddiOp(ROW_PAIRS[r][0], R_MAPS, r * row) for r in range(1, rows)]
    for r in range(rows):
        last = r == rows - 1
        if last:
            body.append(sf.AddiOp(R_MAPS, R_MAPS, s.sx * s.cin))
            if bypass:
                body.append(sf.VmovOp(plan.vector_mode, sf.VmovSelect.BYPASS, R_BYP))
        m, w = ROW_PAIRS[r]
        body.append(sf.MacOp(plan.vector_mode, R_OUT, m, w, s.kw * s.c, wb=last, relu=last and s.relu))
    body.append(sf.AddiOp(R_OUT, R_OUT, step_out))
    if bypass:
        body.append(sf.AddiOp(R_BYP, R_BYP, _bypass_stride(plan)))
    b.emit(*body[:-DELAY_SLOTS], sf.BleOp(R_OUT, R_XEND, top), *body[-DELAY_SLOTS:])


R_MAPS_U = (2, 4, 5, 12)  # free registers: one maps / output address per unrolled pixel


R_OUT_U = (1, 13, 14, 15)


# a residual conv's bypass address per unrolled pixel: r22 and the prefetch temporaries (a load
# inside a row goes between two unrolled loops, each setting them afresh; a 1x1 conv neither
# staggers nor needs r17 for an offset there)
R_BYP_U = (R_BYP, R_TMP2, R_LEN, R_SRC)


def _unrolled_pixels(b: AsmBuilder, plan: ConvPlan, xl: int, xr: int, bypass: bool = False) -> int:
    """1x1 convs have short traces (C/16 cycles), shorter than the loop bookkeeping of one pixel:
    run UNROLL pixels per X-loop iteration, each with its own address registers, so the CUs see
    a MAC every ~3.5 issue slots (~5.5 with a residual's bypass VMOV). Returns the first pixel
    left for the ordinary loop."""
    s = plan.shape
    n = (xr - xl) // UNROLL
    for j in range(UNROLL):
        add_offset(b, R_MAPS_U[j], R_ROWBASE, ((xl + j) * s.sx - s.pl) * s.cin)
        add_offset(b, R_OUT_U[j], R_OUTROW, 2 * (xl + j) * out_pixel(plan))
    if bypass:
        for j in range(UNROLL):
            b.emit(sf.AddiOp(R_BYP_U[j], R_BYPROW, (xl + j) * _bypass_stride(plan)))
    step_maps, step_out = UNROLL * s.sx * s.cin, 2 * UNROLL * out_pixel(plan)
    # the loop ends on the first pixel's maps address (no counter to step): its last pass's
    b.emit(sf.AddiOp(R_W, R_TW, 0), sf.AddiOp(R_XEND, R_MAPS_U[0], (n - 1) * step_maps))
    top = b.label("x_unrolled")
    for j in range(UNROLL):
        if bypass:
            b.emit(sf.VmovOp(COOP, sf.VmovSelect.BYPASS, R_BYP_U[j]))
        b.emit(sf.MacOp(COOP, R_OUT_U[j], R_MAPS_U[j], R_W, s.c, wb=True, relu=s.relu))
    b.emit(*(sf.AddiOp(r, r, step_maps) for r in R_MAPS_U))
    if bypass:
        b.emit(*(sf.AddiOp(r, r, UNROLL * _bypass_stride(plan)) for r in R_BYP_U))
    b.branch(sf.BleOp(R_MAPS_U[0], R_XEND, top), [sf.AddiOp(r, r, step_out) for r in R_OUT_U])
    return xl + n * UNROLL


def _bypass_stride(plan: ConvPlan) -> int:
    """Words between the bypass values of consecutive output pixels: a row's K channels, or a
    kernel tile's in a bypass slice."""
    return slice_channels(plan) if plan.bypass_slices else plan.shape.k
