"""
The conv code's register plan and its MAC traces: a window's kernel rows as MAC traces (chunked
below the 1023-word trace limit), a register per kernel row stepped in the loop's delay slots
when the rows are few (`macs_pipelined`).
"""

from __future__ import annotations

from collections.abc import Callable

from snowir import writeback
from snowir.codegen.builder import AsmBuilder
from snowir.dialects import snowflake_asm as sf
from snowir.hw import SnowflakeConfig
from snowir.plan.issue import IMM17, ROW_REGISTERS, rows_pipelined
from snowir.plan.shapes import ConvPlan, ConvShape, LoweringError, TRACE_CHUNK




COOP = sf.VectorMode.COOP


# register plan (static, as the paper's compiler: "register assignment is statically defined")
R_OUT, R_MAPS, R_W, R_X, R_XEND, R_Y, R_YEND = 1, 2, 3, 6, 7, 8, 9


R_ROWBASE, R_OUTROW, R_TMP, R_TMP2, R_LEN, R_SRC = 10, 11, 16, 17, 18, 19


R_BYP, R_BYPROW = 22, 23


# the kernel tile being computed: its weights slot base, K*t (its first output channel, K kernels
# a tile; with bypass slices, its slice), 2K*t (the same in output bytes), the DRAM address of the next
# weights LD, the K-loop counter. r30/r31 stay free for icache-banking.
R_TW, R_TT, R_TO, R_WSRC, R_TK = 27, 28, 21, 29, 20


Prefetch = Callable[[AsmBuilder], None]


def trace_chunks(length: int) -> list[tuple[int, int]]:
    return [(o, min(TRACE_CHUNK, length - o)) for o in range(0, length, TRACE_CHUNK)]


R_ROWSTEP, R_OUTSTEP, R_BYPSTEP = 24, 25, 26


def out_pixel(plan: ConvPlan) -> int:
    """Words between the write-backs of consecutive output pixels: K, or the channels of the wider
    tensor whose channel slice the layer writes (a device concat's)."""
    return plan.out_pixel or plan.shape.k


def add_offset(b: AsmBuilder, dst: int, base_reg: int, offset: int) -> None:
    if -(1 << 16) <= offset < (1 << 16):
        b.emit(sf.AddiOp(dst, base_reg, offset))
    else:
        b.const(R_TMP2, offset)
        b.emit(sf.AddOp(dst, base_reg, R_TMP2))


def macs(b: AsmBuilder, plan: ConvPlan, rows: int, taps: int, row: int, bypass: bool = False) -> int:
    """The MACs of one pixel from R_MAPS / R_W (`rows` kernel rows of `taps` columns), write-back
    on the last (preceded by the bypass VMOV of a residual conv, one per write-back MAC as in C17
    §5.2); returns how far R_MAPS moved. Ungrouped: one trace per kernel row (taps x C contiguous
    words); grouped: one trace per tap (the group's channels), stepping a pixel between taps."""
    s = plan.shape
    ws = plan.weight_step
    if rows_pipelined(plan, rows, taps, row):
        return macs_pipelined(b, plan, rows, taps, row, bypass)
    if taps_pipelined(plan, rows, row):
        return macs_taps_pipelined(b, plan, rows, taps, row, bypass)
    per_row = [(taps * s.c, 0)] if s.cin == s.c else [(s.c, j) for j in range(taps)]
    moved = 0
    for r in range(rows):
        for j, (trace, _) in enumerate(per_row):
            chunks = trace_chunks(trace)
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
            back = (len(trace_chunks(per_row[-1][0])) - 1) * TRACE_CHUNK
            tap_back = (len(per_row) - 1) * s.cin if s.cin != s.c else 0
            w_step = s.kw * s.c - (len(per_row) - 1) * s.c if s.cin != s.c else s.kw * s.c
            b.emit(sf.AddiOp(R_MAPS, R_MAPS, row - tap_back - back), sf.AddiOp(R_W, R_W, (w_step - back) * ws))
            moved += row - tap_back - back
    return moved


ROW_PAIRS = ((R_MAPS, R_W), (4, 5), (12, 13))  # (maps, weights) address of kernel row 0, odd rows, even rows
assert len(ROW_PAIRS) == ROW_REGISTERS


def macs_pipelined(b: AsmBuilder, plan: ConvPlan, rows: int, taps: int, row: int, bypass: bool) -> int:
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


def taps_pipelined(plan: ConvPlan, rows: int, row: int) -> bool:
    """A grouped conv (a trace a tap) whose taps' offsets from the pixel's first fit an ADDI."""
    s = plan.shape
    return s.cin != s.c and s.c <= TRACE_CHUNK and not plan.indp \
        and max((rows - 1) * row + (s.kw - 1) * s.cin, (rows * s.kw) * s.c * plan.weight_step) < IMM17


def macs_taps_pipelined(b: AsmBuilder, plan: ConvPlan, rows: int, taps: int, row: int, bypass: bool) -> int:
    """A grouped conv's traces, one a tap, each tap's addresses in a register pair of its own set
    before the previous tap's MAC (as `macs_pipelined` does for kernel rows): 3 issue slots a tap
    instead of an ADDI pair the MAC waits on. R_MAPS and R_W stay at the pixel's first tap;
    returns 0."""
    s = plan.shape
    ws = plan.weight_step
    offsets = [(r * row + j * s.cin, (r * s.kw + j) * s.c * ws) for r in range(rows) for j in range(taps)]
    pair = lambda t: ROW_PAIRS[0] if t == 0 else ROW_PAIRS[1 if t % 2 else 2]  # noqa: E731
    for t in range(len(offsets)):
        if t + 1 < len(offsets):
            m, w = pair(t + 1)
            b.emit(sf.AddiOp(m, R_MAPS, offsets[t + 1][0]), sf.AddiOp(w, R_W, offsets[t + 1][1]))
        last = t == len(offsets) - 1
        if last and bypass:
            b.emit(sf.VmovOp(plan.vector_mode, sf.VmovSelect.BYPASS, R_BYP))
        m, w = pair(t)
        b.emit(sf.MacOp(plan.vector_mode, R_OUT, m, w, s.c, wb=last, relu=last and s.relu))
    return 0


def set_writeback(b: AsmBuilder, s: ConvShape, hw: SnowflakeConfig) -> None:
    """A conv program's write-back set-up: the shift, and for each write-back unit the machine
    has (snowir/writeback.py) the layer's word, 0 (none) included, since a unit keeps the word of
    the layer before in a whole-model program (a stock program has no unit VMOV: its image is the
    ZC706 build's)."""
    b.const(R_TMP, s.shift)
    b.emit(sf.VmovOp(COOP, sf.VmovSelect.SHIFT, R_TMP))
    words = dict(s.units)
    why = writeback.refusal(words, hw)
    if why is not None:
        raise LoweringError(why)
    for unit in writeback.units():
        if unit.machine_has(hw):
            b.const(R_TMP, words.get(unit.name, 0))
            b.emit(sf.VmovOp(COOP, sf.VmovSelect(unit.name), R_TMP))
