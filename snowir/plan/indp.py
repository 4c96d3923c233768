"""
INDP planning (C17 §4, §5.3): when a conv with few input channels runs INDP, and its row groups
(each CU its own output rows of a group, rows clipped by padding alone on CU 0).
"""

from __future__ import annotations

import math
from snowir.hw import SnowflakeConfig
from snowir.plan.indp_columns import columns_refusal, plan_indp_columns
from snowir.plan.shapes import (ConvPlan, ConvShape, LoweringError, Strip, indp_kernel_words, input_rows,
                                kernels_per_tile, load_cycles, weights_slot_elements)


INDP_GROUP_TARGET = 4  # aim for at least this many row groups, so the first (exposed) load is small


def indp_fits(s: ConvShape, hw: SnowflakeConfig, bypass: bool) -> bool:
    """INDP can run it: row groups without a bypass, a residual conv with the CUs splitting
    columns (plan/indp_columns.py). Not a conv with windows of padding alone: their bias-only
    write-back reads a zero weight, which INDP's interleaved kernels do not hold."""
    if s.empty_windows:
        return False
    if bypass:
        return columns_refusal(s, hw) is None
    return (s.groups == 1 and s.cin == s.c and s.k % hw.lanes == 0
            and indp_kernel_words(s, hw) <= hw.weights_buffer_elements)


def mode_rule(s: ConvShape, hw: SnowflakeConfig, bypass: bool, mode: str | None = None) -> str:
    """The rule plan/conv.choose_mode prices: COOP, or INDP for few input channels (C < 16) when
    INDP keeps at least as many lanes busy (64 kernels per tile vs kw·C words per COOP trace) and 16 kernels fit a weights buffer. A
    residual conv stays COOP here (plan/residual_mode.py weighs its column-split INDP plan);
    `mode` INDP on one is refused when its columns do not split."""
    if mode == "INDP" and bypass and not indp_fits(s, hw, bypass):
        raise LoweringError(str(columns_refusal(s, hw) or "INDP needs no output pixel whose window is padding alone"))
    if mode == "INDP" and not indp_fits(s, hw, bypass):
        why = [text for bad, text in (
            (s.empty_windows, "no output pixel whose window is padding alone"),
            (s.groups != 1 or s.cin != s.c, "an ungrouped conv over its whole input"),
            (s.k % hw.lanes != 0, f"output channels a multiple of {hw.lanes} (not {s.k})"),
            (indp_kernel_words(s, hw) > hw.weights_buffer_elements,
             f"16 interleaved kernels within the weights buffer ({indp_kernel_words(s, hw)} words > "
             f"{hw.weights_buffer_elements})")) if bad]
        raise LoweringError(f"INDP needs {' and '.join(why)}")
    if mode in ("COOP", "INDP"):
        return mode
    if mode is not None:
        raise LoweringError(f"mode must be COOP, INDP or auto, not '{mode}'")
    if bypass or not indp_fits(s, hw, bypass) or s.c >= hw.lanes:
        return "COOP"  # a residual conv's INDP is chosen by cost (plan/residual_mode.py)
    trace = s.kw * s.c
    coop_lanes = trace / (hw.lanes * math.ceil(trace / hw.lanes))
    tile = kernels_per_tile(hw)
    indp_lanes = s.k / (tile * math.ceil(s.k / tile))
    return "INDP" if indp_lanes >= coop_lanes else "COOP"


def rows_per_cu_fit(s: ConvShape, hw: SnowflakeConfig) -> int:
    """Output rows one CU's input rows for can hold in a maps bank."""
    row = s.w * s.cin
    bank = hw.maps_bank_elements
    fit = (bank // row - s.kh) // s.sy + 1
    if fit < 1:
        raise LoweringError(f"{s.kh} input rows of {row} words do not fit a {bank}-word maps bank "
                            f"(column tiling is not implemented yet)")
    return fit


PRICE_MARGIN = 0.05  # the cost model's resolution: a priced choice must beat the rule by more (measured:
# a 5% predicted gain at an 80x80 stem on 16 CUs was a 3% loss in the simulator; a 1x28x28 3x3
# conv on 4 CUs, 2% predicted, changed which of pad-rows and clipped rows is faster)


def rule_rows_per_cu(s: ConvShape, hw: SnowflakeConfig) -> int:
    """The rule: as many rows as fit a bank, at most a quarter of the interior rows per CU, so
    at least INDP_GROUP_TARGET groups (the first group's load is exposed)."""
    top, bottom = interior_rows(s)
    return max(1, min(rows_per_cu_fit(s, hw), (bottom - top) // (hw.cus * INDP_GROUP_TARGET)))


def default_rows_per_cu(s: ConvShape, hw: SnowflakeConfig) -> int:
    """Output rows per CU of a row group, priced: every candidate (1 up to what a bank holds)
    by the cost model `indp_cycles`; the rule's choice unless the cheapest beats it by more
    than PRICE_MARGIN (the model does not see the vector queue's spread of loads, so it does
    not rank near-ties: on the default machine the rule stays). The rule alone was 1.15x
    (1.21x after pad-rows) off the best on a 16-CU machine's 7x7/2 stem (bench/stem_search.py):
    one row per CU reloads kh input rows per output row, and 16 CUs' loads outran the MACs."""
    rule = rule_rows_per_cu(s, hw)
    cu, loads, _ = indp_cost_parts(s, hw, indp_groups(s, hw, 0, s.oh, rule))
    if loads <= cu or s.k > kernels_per_tile(hw):
        # MAC-bound: rows per CU only move the exposed loads; several kernel tiles: the model's
        # re-sends per group are not checked against the simulator yet (bench/stem_search.py
        # searches one-tile stems), so the rule stays
        return rule
    cost = {r: indp_cycles(s, hw, indp_groups(s, hw, 0, s.oh, r)) for r in range(1, rows_per_cu_fit(s, hw) + 1)}
    best = min(cost, key=lambda r: (cost[r], r))
    return best if cost[best] < cost[rule] * (1 - PRICE_MARGIN) else rule


def indp_cycles(s: ConvShape, hw: SnowflakeConfig, groups: list[tuple[int, int, int]]) -> float:
    """`indp_cost_parts` as cycles: the larger of the CUs' and the loads' time, plus the exposed."""
    cu, loads, exposed = indp_cost_parts(s, hw, groups)
    return max(cu, loads) + exposed


def indp_cost_parts(s: ConvShape, hw: SnowflakeConfig, groups: list[tuple[int, int, int]]) -> tuple[float, float, float]:
    """The row groups' cost model, (CU cycles, load cycles, exposed load cycles): the CUs' time (all CUs run one instruction
    stream, so a group takes its rows per CU times the kernel rows its rows read, every pixel
    a kw x C trace per kernel tile), the DRAM traffic (each CU's own input rows, the output,
    the kernel tiles per group unless one), plus the first group's load and, kernel tiles not
    double-buffered, each tile's load per group."""
    tiles = -(-s.k // kernels_per_tile(hw))
    cols = sum(min(s.kw, s.w - (x * s.sx - s.pl)) - max(0, s.pl - x * s.sx) for x in range(s.ow))
    cu = 0
    maps_rows = 0
    first = 0
    for gi, (y0, r, cus) in enumerate(groups):
        kernel_rows = max(min(s.kh, s.h - (y * s.sy - s.pt)) - max(0, s.pt - y * s.sy)
                          for y in range(y0, y0 + r * cus))
        cu += r * kernel_rows * cols * s.c * tiles
        rows = sum(r1 - r0 for c in range(cus) for r0, r1 in [input_rows(s.h, s.kh, s.sy, s.pt, y0 + c * r,
                                                                           y0 + (c + 1) * r)])
        maps_rows += rows
        if gi == 0:
            first = rows
    words = indp_kernel_words(s, hw)
    kernels = hw.vmacs_per_cu * words * 2
    sends = tiles * (len(groups) if tiles > 1 else 1)
    row_bytes = s.w * s.cin * 2
    traffic = maps_rows * row_bytes + 2 * s.oh * s.ow * s.k + kernels * sends
    lds = sum(cus for _, _, cus in groups) + hw.vmacs_per_cu * sends
    exposed = first * row_bytes + kernels
    if tiles > 1 and words > weights_slot_elements(hw):
        exposed += (sends - 1) * kernels
    return cu, load_cycles(hw, traffic, lds), exposed / hw.dram_bytes_per_cycle


def interior_rows(s: ConvShape) -> tuple[int, int]:
    """Output rows [top, bottom) whose kernel rows are not clipped by padding."""
    interior = [y for y in range(s.oh) if y * s.sy - s.pt >= 0 and y * s.sy - s.pt + s.kh <= s.h]
    return (interior[0], interior[-1] + 1) if interior else (s.oh, s.oh)


def indp_groups(s: ConvShape, hw: SnowflakeConfig, y0: int, y1: int, per_cu: int) -> list[tuple[int, int, int]]:
    """Output rows [y0, y1) as row groups (first row, rows per CU, CUs): up to `per_cu` rows on
    each of the CUs; rows whose kernel rows padding clips are single-row groups on CU 0 alone."""
    top, bottom = interior_rows(s)
    lo, hi = max(y0, min(top, y1)), min(y1, max(bottom, y0))
    groups: list[tuple[int, int, int]] = [(y, 1, 1) for y in range(y0, lo)]
    y = lo
    while y < hi:
        left = hi - y
        r = min(per_cu, left // hw.cus) or 1
        cus = min(hw.cus, left // r)
        groups.append((y, r, cus))
        y += r * cus
    return groups + [(y, 1, 1) for y in range(max(hi, lo), y1)]


def group_strips(s: ConvShape, groups: list[tuple[int, int, int]]) -> list[Strip]:
    """The maps tiles of row groups: rows [y0, y0 + r x CUs), the input rows of all its CUs."""
    strips = []
    for i, (y0, r, cus) in enumerate(groups):
        r0, _ = input_rows(s.h, s.kh, s.sy, s.pt, y0, y0 + r)
        _, r1 = input_rows(s.h, s.kh, s.sy, s.pt, y0 + (cus - 1) * r, y0 + cus * r)
        strips.append(Strip(y0, y0 + r * cus, r0, r1, i % 2))
    return strips


def plan_indp(s: ConvShape, hw: SnowflakeConfig, in_addr: int, w_addr: int, out_addr: int,
              rows_per_cu: int | None = None, bypass_addr: int | None = None) -> ConvPlan:
    """Row groups of `rows_per_cu` output rows per CU (default_rows_per_cu), Kloop; a residual
    conv's CUs split the columns instead (plan/indp_columns.py)."""
    if bypass_addr is not None:
        return plan_indp_columns(s, hw, in_addr, w_addr, out_addr, bypass_addr)
    per_cu = default_rows_per_cu(s, hw) if rows_per_cu is None else max(1, min(rows_per_cu_fit(s, hw), rows_per_cu))
    groups = indp_groups(s, hw, 0, s.oh, per_cu)
    tiles = -(-s.k // kernels_per_tile(hw))
    # a lone kernel tile loads once, at word 0: no slot to alternate (recorded, an edit of it would mean nothing)
    double = tiles > 1 and indp_kernel_words(s, hw) <= weights_slot_elements(hw)
    return ConvPlan(s, tuple(group_strips(s, groups)), tiles, kernels_per_tile(hw), double, in_addr, w_addr, out_addr,
                    "INDP", "Kloop", cu_rows=tuple(r for _, r, _ in groups))
