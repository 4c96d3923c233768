"""
Max pool planning: strips of input rows in the maps banks (or the whole buffer), or a ring of
row slots when a window's rows and the next row's fit it.
"""

from __future__ import annotations

from snowir.hw import SnowflakeConfig
from snowir.plan.conv import row_strips
from snowir.plan.shapes import LoweringError, PoolShape, Strip, input_rows
from snowir.plan.pool_shapes import GUARD, PoolTile


def max_pool_rows(p: PoolShape, hw: SnowflakeConfig, whole: bool) -> int:
    """Input rows a pool strip may hold: a bank's (or the whole buffer's), less the guard."""
    room = hw.maps_buffer_elements if whole else hw.maps_bank_elements
    return (room - GUARD - hw.lanes) // (p.w * p.cin)


def check_pool_channels(p: PoolShape, hw: SnowflakeConfig) -> None:
    if p.c % hw.lanes and p.c > hw.lanes * hw.cus:
        raise LoweringError(f"max pool over {p.c} channels: only multiples of {hw.lanes}, or fewer than "
                            f"{hw.lanes * hw.cus}, are lowered")


def plan_pool(p: PoolShape, hw: SnowflakeConfig) -> list[Strip]:
    check_pool_channels(p, hw)
    max_rows = max_pool_rows(p, hw, False)
    whole = max_rows < p.kh  # strips then use the whole buffer, one at a time
    if whole:
        max_rows = max_pool_rows(p, hw, True)
        if max_rows < p.kh:
            raise LoweringError(f"max pool: {p.kh} rows of {p.w * p.cin} words do not fit the maps buffer")
    rows = lambda y0, y1: input_rows(p.h, p.kh, p.sy, p.pt, y0, y1)  # noqa: E731
    return row_strips(p.oh, rows, lambda y0, y1: rows(y0, y1)[1] - rows(y0, y1)[0] <= max_rows,
                      lambda i: -1 if whole else i % 2, "max pool")


def plan_pool_tiles(p: PoolShape, hw: SnowflakeConfig) -> list[PoolTile]:
    """The pool's maps tiles: one ring over every row when it fits (`ring_rows`), else strips."""
    check_pool_channels(p, hw)
    n = ring_rows(p, hw)
    if n:
        return [PoolTile(Strip(0, p.oh, *input_rows(p.h, p.kh, p.sy, p.pt, 0, p.oh), -1), n)]
    return [PoolTile(st) for st in plan_pool(p, hw)]


def ring_rows(p: PoolShape, hw: SnowflakeConfig) -> int:
    """Input-row slots of the ring the pool keeps in the maps buffer (0: strips instead). Each
    input row is loaded once, into slot r mod N, when the row it replaces is no longer read: a
    window's rows are separate MAX traces, so they need not be contiguous. Needs room for a
    window and the next output row's new rows, and 16 MAXs per output row (the previous row's
    are then done when the loads behind it are issued)."""
    n = max_pool_rows(p, hw, True)
    return n if n >= p.kh + p.sy and row_maxs(p, hw) >= hw.vector_queue_depth and p.oh > 1 else 0


def row_maxs(p: PoolShape, hw: SnowflakeConfig) -> int:
    """MAX traces of one output row (a window row each, per group of 16 x CUs channels)."""
    return p.ow * min(p.kh, p.h) * -(-p.c // (hw.lanes * hw.cus))


def ring_loads(p: PoolShape, t: PoolTile) -> list[tuple[int, int, int]]:
    """A ring tile's loads in program order: (output row after which it is issued, -1 before
    the first; its first input row; rows). Input row r goes to slot (r - r0) mod N; rows past
    the last window of the layer's last tile are loaded too, as the ring always did."""
    st, n = t.strip, t.ring
    end = p.h if st.y1 == p.oh else st.r1
    out: list[tuple[int, int, int]] = []
    loaded = st.r0

    def ensure(after: int, upto: int) -> None:
        nonlocal loaded
        upto = min(upto, end)
        while loaded < upto:  # consecutive rows up to the ring's wrap in one LD
            run = min(upto - loaded, n - (loaded - st.r0) % n)
            out.append((after, loaded, run))
            loaded += run

    ensure(-1, st.r0 + n)
    for y in range(st.y0, st.y1):
        if y + 1 < st.y1:
            ensure(y, max(0, y * p.sy - p.pt) + n)  # row r replaces r - n < first(y): read only by rows before y
    return out
