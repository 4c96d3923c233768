"""
A conv's maps strips into the maps buffer (broadcast to every CU): a strip whole, a layer's
first strip in pieces in the order its output rows need them, the next strip in pieces beside
the current one's kernel tiles (`spread_piece`), or, where it replaces the current strip, row
by row as the last kernel tile frees the rows it overwrites (`replacing_rows`,
`replacing_pixels`); a residual conv's bypass rows.
"""

from __future__ import annotations

from snowir.codegen.builder import AsmBuilder
from snowir.codegen.loads import load_broadcast, load_runs
from snowir.codegen.traces import Prefetch, R_LEN, R_SRC, R_TMP, R_TT, R_X, R_XEND, add_offset
from snowir.dialects import snowflake_asm as sf
from snowir.hw import SnowflakeConfig
from snowir.plan.shapes import ConvPlan, Strip, input_rows, row_runs


def replacing_rows(plan: ConvPlan, hw: SnowflakeConfig, strip: Strip, nxt: Strip) -> list[tuple[int, Prefetch]]:
    """The next whole-buffer strip's rows as its last kernel tile frees them (`kernel_tile`'s
    `row_loads`): the next strip's row j replaces this one's row j (both from word 0), so it
    loads once the last output row reading that row is done (at once when none does), runs of
    rows freed by the same output row in one LD. Rather than all of it after the last tile,
    behind a flush, while nothing computes."""
    s = plan.shape
    last: dict[int, int] = {}  # this strip's row (from r0) -> the last output row reading it
    for y in range(strip.y0, strip.y1):
        lo, hi = input_rows(s.h, s.kh, s.sy, s.pt, y, y + 1)
        for r in range(lo, hi):
            last[r - strip.r0] = y
    runs: list[tuple[int, int, int]] = []  # (output row, first next row, end)
    for j in range(nxt.r1 - nxt.r0):
        y = last.get(j, strip.y0 - 1)
        if runs and runs[-1][0] == y and runs[-1][2] == j:
            runs[-1] = (y, runs[-1][1], j + 1)
        else:
            runs.append((y, j, j + 1))
    return [(y, lambda bb, j0=j0, j1=j1: load_maps(bb, plan, hw, nxt, 0, 0, (nxt.r0 + j0, nxt.r0 + j1)))
            for y, j0, j1 in runs]


def replacing_pixels(plan: ConvPlan, hw: SnowflakeConfig, strip: Strip, nxt: Strip) -> list[tuple[int, Prefetch]]:
    """A bypass-slice 1x1's next strip's maps rows as its last tile frees them (`slice_tile`'s
    `row_loads`): row j replaces this strip's row j, last read by that row's last pixel; rows
    this strip does not have load at once, in one LD."""
    ow, have = plan.shape.ow, strip.r1 - strip.r0
    loads: list[tuple[int, Prefetch]] = [
        ((j + 1) * ow - 1, lambda bb, j=j: load_maps(bb, plan, hw, nxt, 0, 0, (nxt.r0 + j, nxt.r0 + j + 1)))
        for j in range(min(have, nxt.r1 - nxt.r0))]
    if nxt.r1 - nxt.r0 > have:
        loads.insert(0, (-1, lambda bb: load_maps(bb, plan, hw, nxt, 0, 0, (nxt.r0 + have, nxt.r1))))
    return loads


def spreads(plan: ConvPlan, streams: list[tuple[int, int, int]]) -> bool:
    """Whether the next strip's `streams` (buffer element, DRAM byte, words: contiguous runs)
    load in pieces, one per kernel tile (`spread_piece`): several kernel tiles, not resident
    (those leave tile 0 the bus), not gathered or a column band (runs of their own), and each
    stream longer than the T - 1 pieces of whole vMAC counts the loop's tiles load; never when the
    layer says `load_next_whole`, nor for rows of a wider tensor (a column band's, a crop's maps or
    bypass: their own runs)."""
    if plan.load_next_whole or plan.resident_weights or plan.gather is not None or plan.in_row or plan.bypass_row \
            or plan.tiles < 2:
        return False
    return all((plan.tiles - 1) * piece_words(plan, words) < words for _, _, words in streams)


def piece_words(plan: ConvPlan, words: int) -> int:
    """Words a kernel tile's piece of a spread stream loads: a multiple of the tile's kernels,
    so its place follows from R_TT (K x t) by one MULI."""
    k = plan.kernels
    return -(-words // (plan.tiles * k)) * k


def spread_piece(bb: AsmBuilder, plan: ConvPlan, streams: list[tuple[int, int, int]], last: bool) -> None:
    """Kernel tile t's piece of each stream of the next strip (t from R_TT = K x t, so the
    counted K loop's body is one piece for every tile); the last tile loads the remainder."""
    k = plan.kernels
    for dst, src, words in streams:
        q = piece_words(plan, words)
        n = words - (plan.tiles - 1) * q if last else q
        bb.emit(sf.MuliOp(R_TMP, R_TT, q // k))
        add_offset(bb, R_TMP, R_TMP, dst)
        bb.emit(sf.MuliOp(R_SRC, R_TT, 2 * q // k))
        add_offset(bb, R_SRC, R_SRC, src)
        bb.const(R_LEN, n)
        bb.emit(sf.LdOp(sf.LoadTarget.MAPS, R_TMP, R_SRC, R_LEN, 0, sf.SELECT_ALL))


def load_maps(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, strip: Strip, bank: int,
               base: int | None = None, rows: tuple[int, int] | None = None, loop: bool = False) -> None:
    """One maps strip, broadcast to every CU; a gathering plan loads each row's pixels from
    every sy-th row and sx-th column of the DRAM input, channels c0.. of each (one LD per run,
    spread over the load units; `loop`: R_X / R_XEND are free here, so the pixels' LDs may be
    a counted loop, `load_runs`)."""
    s = plan.shape
    row = s.w * s.cin
    base = bank * hw.maps_bank_elements if base is None else base
    r_from, r_to = rows or (strip.r0, strip.r1)  # of the strip's rows, these (a first strip's pieces)
    with b.at(f"load_maps.rows{r_from}_{r_to}"):
        base += (r_from - strip.r0) * row
        if plan.gather is None and plan.in_row not in (0, row):  # a band's or a crop's: a row at a time
            load_runs(b, hw, [(base + (r - r_from) * row, plan.in_addr + 2 * r * plan.in_row, row, sf.SELECT_ALL)
                              for r in range(r_from, r_to)])
            return
        if plan.gather is None:
            load_broadcast(b, hw, base, plan.in_addr + 2 * r_from * row, (r_to - r_from) * row)
            return
        sy, sx, w_in, cin_in, c0 = plan.gather
        in_row = plan.in_row or w_in * cin_in  # DRAM words between the tensor's rows (a crop's source's)
        if sx == 1 and cin_in == s.cin:  # whole rows are contiguous
            runs = [(base + (r - r_from) * row, plan.in_addr + 2 * r * sy * in_row, row)
                    for r in range(r_from, r_to)]
        else:
            runs = [(base + (r - r_from) * row + x * s.cin,
                     plan.in_addr + 2 * (r * sy * in_row + x * sx * cin_in + c0), s.cin)
                    for r in range(r_from, r_to) for x in range(s.w)]
        load_runs(b, hw, [(dst, src, n, sf.SELECT_ALL) for dst, src, n in runs], (R_X, R_XEND) if loop else None)


FIRST_STRIP_PIECES = 4


def load_first_strip(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, strip: Strip,
                      bypass_base: int | None = None, after_first: Prefetch | None = None) -> None:
    """A layer's first maps strip (at the bottom of bank 0), after its first kernel tile, in
    pieces in the order the output rows need them: the first output row's input rows (and
    bypass row, a residual conv's, laid out from buffer word `bypass_base` + y x the output
    row), then the rest in parts. The buffers interlock by region, so the first MACs wait for
    the kernels and one piece rather than for the whole strip; later strips load while an
    earlier one computes."""
    s = plan.shape
    rest = strip.y1 - strip.y0 - 1
    step = max(1, -(-rest // (FIRST_STRIP_PIECES - 1)))
    cuts = sorted({strip.y0, strip.y0 + 1, *range(strip.y0 + 1, strip.y1, step), strip.y1})
    loaded = strip.r0
    for ya, yb in zip(cuts, cuts[1:]):
        need = strip.r1 if yb == strip.y1 else min(strip.r1, input_rows(s.h, s.kh, s.sy, s.pt, ya, yb)[1])
        if need > loaded:
            load_maps(b, plan, hw, strip, 0, 0, (loaded, need), loop=True)  # before any pixel loop
            loaded = need
        if bypass_base is not None:
            load_bypass_rows(b, plan, hw, bypass_base, ya, yb)
        if after_first is not None:
            after_first(b)
            after_first = None


def load_bypass_rows(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, bypass_base: int, y0: int, y1: int) -> None:
    """A residual conv's bypass rows [y0, y1), laid out like the output from `bypass_base`: one LD,
    or one a row when they are a crop's window of a wider tensor (`bypass_row`)."""
    out_row = plan.shape.ow * plan.shape.k
    with b.at(f"load_bypass.y{y0}_{y1}"):
        load_runs(b, hw, [(bypass_base + y0 * out_row + at, plan.bypass_addr + 2 * src, n, sf.SELECT_ALL)
                          for at, src, n in row_runs(y0, y1, out_row, plan.bypass_row or out_row)])
