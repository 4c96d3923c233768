"""
Column tiling: maps tiles that are rectangles of input rows x columns, for a conv whose few
input rows do not fit the maps buffer (a wide 5x5 depthwise layer, a detector at deployment
resolution). The output columns are cut into bands; each band reads its input columns plus the
kernel's halo (neighbouring bands share kw - sx input columns, re-loaded) and writes a column
band of the output rows (plan/shapes.band_plans). Chosen only when no row strip fits, so the
plans of layers that fit are unchanged; the bands are the maps tiles' `out_cols` in the tile IR.
"""

from __future__ import annotations

from collections.abc import Callable

from snowir.hw import SnowflakeConfig
from snowir.plan.shapes import ConvShape, Strip, band_shape, input_columns

BAND_CHOICES = 6
"""Band counts tried past the fewest that fit: more bands hold more rows a tile (less halo
re-loading between row strips, more between bands); the cost model picks."""


def split_columns(ow: int, n: int) -> list[tuple[int, int]]:
    """Output columns 0..ow as n bands of nearly equal width, in order."""
    cuts = [round(i * ow / n) for i in range(n + 1)]
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


def band_strips(s: ConvShape, bands: list[tuple[int, int]], limit: int, whole: bool,
                strips_for: Callable[[ConvShape, int, bool], tuple[Strip, ...]]) -> tuple[Strip, ...] | None:
    """Every band's row strips (`strips_for(band shape, rows that fit, whole)`), each strip
    carrying its band's columns; None when a band's kernel rows do not fit `limit` words."""
    out: list[Strip] = []
    for x0, x1 in bands:
        b = band_shape(s, x0, x1)
        rows = (limit - s.overread) // (b.w * b.cin)
        if rows < s.kh:
            return None
        c0, c1 = input_columns(s, x0, x1)
        out += [Strip(st.y0, st.y1, st.r0, st.r1, st.bank, x0, x1, c0, c1) for st in strips_for(b, rows, whole)]
    return tuple(out)


def column_tilings(s: ConvShape, hw: SnowflakeConfig,
                   strips_for: Callable[[ConvShape, int, bool], tuple[Strip, ...]]) -> list[tuple[Strip, ...]]:
    """Candidate column tilings: from the fewest bands whose kernel rows fit a bank (double-
    buffered) or the buffer (whole), BAND_CHOICES more band counts each."""
    out = []
    for limit, whole in ((hw.maps_bank_elements, False), (hw.maps_buffer_elements, True)):
        fewest = next((n for n in range(2, s.ow + 1)
                       if s.kh * ((-(-s.ow // n) - 1) * s.sx + s.kw) * s.cin + s.overread <= limit), None)
        if fewest is None:
            continue
        for n in range(fewest, min(s.ow, fewest + BAND_CHOICES) + 1):
            tiling = band_strips(s, split_columns(s.ow, n), limit, whole, strips_for)
            if tiling is not None:
                out.append(tiling)
    return out
