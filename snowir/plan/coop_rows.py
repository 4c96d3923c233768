"""
COOP row groups (`coop_rows`): a COOP conv of few kernels with the CUs splitting its output rows
instead of its kernel tile. A COOP conv broadcasts its maps to the 4 CUs and gives the 16 vMACs 16
kernels of a kernel tile (C17 §5.1), so a conv of K < 16 kernels leaves 16 - K vMACs idle (an RGB
output's K = 3: 3 of 16 busy). Here, as INDP's row groups do (plan/indp.py), CU c computes its own
`cu_rows` output rows of each group from its own maps load (LD select c, every CU at the group's
buffer address), the kernel tile is V = 4 kernels on vMAC v of every CU (LD select CV+v: the
weights broadcast), and `vmov stride` puts CU c's write-backs its rows on: K = 3 keeps 12 of 16
vMACs busy. K = 5..8 takes two such tiles per group, and so on; the traces are COOP's (kw·C words
a kernel row). Rows whose kernel rows padding clips are one-row groups on CU 0 alone (one
instruction stream: the CUs' windows must be alike), as in INDP.

Chosen by cost (plan/conv.py `_plan_conv`) for a conv whose kernels do not fill the broadcast
tiles' vMACs (K not a multiple of 16): `broadcast_cycles` (the COOP plan, its compute at the
share of vMACs its tiles fill) against `coop_rows_cycles`, by PRICE_MARGIN and MODE_PRICE_FLOOR.
Weighed the same way, whatever K, for a strided 1x1 whose gathered pixels take several broadcast
strips: planned over its compact pixels (`gather` kept), each CU gathers its own rows' pixels,
so the CUs' buffers hold the whole compact input together and each kernel tile loads once.
"""

from __future__ import annotations

import math
from dataclasses import replace

from snowir.hw import SnowflakeConfig
from snowir.plan.columns import BAND_CHOICES, split_columns
from snowir.plan.indp import group_strips, indp_groups, interior_rows, rows_per_cu_fit
from snowir.plan.shapes import (ConvPlan, ConvShape, LoweringError, band_plans, band_shape, gather_of, input_columns,
                                input_rows, load_cycles, weights_slot_elements)


def coop_rows_shape_refusal(s: ConvShape, hw: SnowflakeConfig, bypass: bool) -> str | None:
    """Why a conv of this shape cannot run COOP row groups (None: it can)."""
    if bypass:
        return "a residual conv's bypass is read per kernel tile, broadcast"
    if s.groups > 1:
        return "grouped"
    if gather_of(s) is not None:  # its row groups are planned over its compact pixels (plan/conv.py)
        return "a gathering conv's maps load pixel by pixel"
    if s.kernel_words > weights_slot_elements(hw):
        return "its kernel exceeds a weights slot"
    if s.empty_windows:
        return "an output pixel whose window is padding alone"
    if s.kh * s.kw * s.cin > hw.maps_bank_elements:
        return f"{s.kh} input rows of {s.kw} columns exceed a maps bank"
    return None


def pixel_cycles(s: ConvShape, hw: SnowflakeConfig) -> int:
    """MAC cycles of one output row's pixels per kernel row: each pixel's kernel row one COOP trace
    of its valid taps x C words, a lane group a cycle."""
    cols = [min(s.kw, s.w - (x * s.sx - s.pl)) - max(0, s.pl - x * s.sx) for x in range(s.ow)]
    return sum(math.ceil(n * s.c / hw.lanes) for n in cols)


def cost_parts(s: ConvShape, hw: SnowflakeConfig, groups: list[tuple[int, int, int]], kernels: int,
               gathered: bool = False) -> tuple[float, float, float]:
    """(CU cycles, load cycles, exposed load cycles) of row groups (first row, rows per CU, CUs):
    all CUs run one instruction stream, so a group takes its rows per CU times its kernel rows'
    traces per kernel tile; the traffic is each CU's own input rows, the output and the kernel
    tiles (once per group when there are several); exposed: the first group's rows and kernels.
    `gathered`: `s` is a gathering conv's compact shape, its rows loaded a pixel an LD."""
    tiles = -(-s.k // kernels)
    per_row = pixel_cycles(s, hw)
    cu, maps_rows, first = 0.0, 0, 0
    for gi, (y0, r, cus) in enumerate(groups):
        kernel_rows = max(min(s.kh, s.h - (y * s.sy - s.pt)) - max(0, s.pt - y * s.sy)
                          for y in range(y0, y0 + r * cus))
        cu += r * kernel_rows * per_row * tiles
        rows = sum(r1 - r0 for c in range(cus)
                   for r0, r1 in [input_rows(s.h, s.kh, s.sy, s.pt, y0 + c * r, y0 + (c + 1) * r)])
        maps_rows += rows
        first = first or rows
    tile_bytes = kernels * s.kernel_words * 2
    sends = tiles * (len(groups) if tiles > 1 else 1)
    row_bytes = s.w * s.cin * 2
    traffic = maps_rows * row_bytes + 2 * s.oh * s.ow * s.k + tile_bytes * sends
    lds = (maps_rows * s.w if gathered else sum(cus for _, _, cus in groups)) + kernels * sends
    return cu, load_cycles(hw, traffic, lds), (first * row_bytes + tile_bytes) / hw.dram_bytes_per_cycle


def groups_of(plan: ConvPlan) -> list[tuple[int, int, int]]:
    """The plan's row groups as (first row, rows per CU, CUs)."""
    return [(st.y0, r, (st.y1 - st.y0) // r) for st, r in zip(plan.strips, plan.cu_rows)]


def coop_rows_cycles(plan: ConvPlan, hw: SnowflakeConfig, issue: float = 0.0) -> float:
    """A coop_rows plan's estimate: the largest of the CUs', the loads' and the control
    pipeline's (`issue`, plan/issue.py) time, plus the exposed loads; a column-tiled one's
    bands' in turn (`issue` shared out by their CU time)."""
    if plan.column_tiled:
        bands = [p for _, p in band_plans(plan)]
        parts = [cost_parts(p.shape, hw, groups_of(p), p.kernels) for p in bands]
        cu = sum(c for c, _, _ in parts) or 1.0
        return sum(max(c, lo, issue * c / cu) + OVERLAP_LOSS * min(c, lo) + ex for c, lo, ex in parts)
    groups = groups_of(plan)
    cu, loads, exposed = cost_parts(plan.shape, hw, groups, plan.kernels, plan.gather is not None)
    if plan.gather is not None and len(groups) == 1:
        # one group of gathered pixels: no next group's maps to wait for a freed bank, only the
        # kernel tiles' double-buffered loads
        return max(cu, loads, issue) + exposed
    return max(cu, loads, issue) + OVERLAP_LOSS * min(cu, loads) + exposed


OVERLAP_LOSS = 0.25
"""[P] The share of the smaller of the CUs' and the loads' time that does not hide behind the
larger: a group's maps load for the next group only once the group's first 16 vector ops are
queued, into the bank the group before just freed. Measured (fast engine, default machine):
64 -> 12 2x2 at 130²: 204 k CU and 223 k load cycles predicted, 285 k run; 64 -> 3: 68 k and
198 k, 202 k run."""


def broadcast_cycles(plan: ConvPlan, hw: SnowflakeConfig, issue: float = 0.0) -> float:
    """A broadcast COOP plan's estimate (`ConvPlan.estimated_cycles`) with its compute at the share
    of vMACs its kernel tiles fill (K of tiles x 16 kernels), and its issue floor: what coop_rows
    is weighed against."""
    s = plan.shape
    compute = s.valid_macs() / hw.macs
    load = load_cycles(hw, plan.dram_bytes(hw)[plan.loop_order], plan.load_count())
    rest = plan.estimated_cycles(hw) - max(compute, load)  # the exposed loads and flushes
    return max(compute * plan.tiles * plan.kernels / s.k, load, issue) + rest


def coop_rows_per_cu(s: ConvShape, hw: SnowflakeConfig) -> int:
    """Output rows per CU of a row group: the cheapest by `cost_parts` (ties: more rows, so fewer
    input rows are loaded twice), up to what a bank holds of a CU's input rows."""
    top, bottom = interior_rows(s)
    most = max(1, min(rows_per_cu_fit(s, hw), -(-(bottom - top) // hw.cus)))

    def cost(r: int) -> float:
        cu, loads, exposed = cost_parts(s, hw, indp_groups(s, hw, 0, s.oh, r), hw.vmacs_per_cu)
        return max(cu, loads) + exposed

    return min(range(1, most + 1), key=lambda r: (cost(r), -r))


def plan_coop_rows(s: ConvShape, hw: SnowflakeConfig, in_addr: int, w_addr: int, out_addr: int,
                   rows_per_cu: int | None = None) -> ConvPlan:
    """Row groups of `rows_per_cu` output rows per CU (None: the cheapest by `cost_parts`, ties to
    more rows), V kernels a tile, Kloop; kernel tiles double-buffered when there are several."""
    why = coop_rows_shape_refusal(s, hw, False)
    if why is not None:
        raise LoweringError(f"coop_rows: {why}")
    kernels = hw.vmacs_per_cu
    tiles = -(-s.k // kernels)
    plan = lambda strips, rows: ConvPlan(s, tuple(strips), tiles, kernels, tiles > 1, in_addr, w_addr,  # noqa: E731
                                         out_addr, "COOP", "Kloop", cu_rows=tuple(rows), coop_rows=True)
    if s.kh * s.w * s.cin <= hw.maps_bank_elements:
        per_cu = coop_rows_per_cu(s, hw) if rows_per_cu is None else max(1, min(rows_per_cu_fit(s, hw), rows_per_cu))
        groups = indp_groups(s, hw, 0, s.oh, per_cu)
        return plan(group_strips(s, groups), [r for _, r, _ in groups])
    # a CU's kernel rows do not fit a bank: column bands (plan/columns.py), each band's row groups
    candidates = []
    fewest = next(n for n in range(2, s.ow + 1)
                  if s.kh * ((-(-s.ow // n) - 1) * s.sx + s.kw) * s.cin <= hw.maps_bank_elements)
    for n in range(fewest, min(s.ow, fewest + BAND_CHOICES) + 1):
        strips, rows = [], []
        for x0, x1 in split_columns(s.ow, n):
            b = band_shape(s, x0, x1)
            if s.kh * b.w * b.cin > hw.maps_bank_elements:
                break
            c0, c1 = input_columns(s, x0, x1)
            per_cu = coop_rows_per_cu(b, hw) if rows_per_cu is None else max(1, min(rows_per_cu_fit(b, hw), rows_per_cu))
            groups = indp_groups(b, hw, 0, b.oh, per_cu)
            strips += [replace(st, x0=x0, x1=x1, c0=c0, c1=c1) for st in group_strips(b, groups)]
            rows += [r for _, r, _ in groups]
        else:
            candidates.append(plan(strips, rows))
    return min(candidates, key=lambda p: coop_rows_cycles(p, hw))
