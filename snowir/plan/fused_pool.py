"""
Fusing a max pool into the program of the INDP conv it reads (C17 §7 counts "non-overlapped
Maxpool layers" among its compiler's losses): whether it can (`fusable`, room for the ring
above the row groups: `place_ring`) and whether it pays (`fusing_pays`). The schedule itself
(`ring_schedule`) is in plan/shapes.py, its code in codegen/fused_pool.py.
"""

from __future__ import annotations

from dataclasses import replace
from snowir.hw import SnowflakeConfig
from snowir.plan.conv import settle
from snowir.plan.indp import plan_indp
from snowir.plan.shapes import ConvPlan, GUARD, PoolShape, group_of, ring_schedule


ROWS_PER_CU = 1  # row groups of one row per CU: each group completes consecutive rows


def group_rows_words(plan: ConvPlan) -> list[int]:
    """Maps-buffer words each bank's row groups take (the ring's slots go above them)."""
    s = plan.shape
    row_in = s.w * s.cin
    used = [0, 0]
    for gi, strip in enumerate(plan.strips):
        _, _, rows = group_of(plan, gi)
        used[strip.bank] = max(used[strip.bank], max((r1 - r0) * row_in for r0, r1 in rows))
    return used


def fusable(plan: ConvPlan, p: PoolShape, hw: SnowflakeConfig) -> bool:
    """An INDP conv whose output is the pool's input, channels the pool unit takes."""
    s = plan.shape
    return plan.indp and (p.c, p.h, p.w) == (s.k, s.oh, s.ow) and not (p.c % 16 and p.c > 16 * hw.cus)


def place_ring(plan: ConvPlan, p: PoolShape, hw: SnowflakeConfig) -> tuple[int, ...] | None:
    """The ring's row slots above each bank's row groups, or None when the pool cannot run in
    the conv's program (`fusable`, or no room for the rows the pool needs at once)."""
    if not fusable(plan, p, hw):
        return None
    span = ring_schedule(plan, p)[2]
    used = group_rows_words(plan)
    size = p.w * p.c + GUARD
    slots: list[int] = []
    for bank in (0, 1):
        lo, hi = bank * hw.maps_bank_elements + used[bank], (bank + 1) * hw.maps_bank_elements
        lo += lo % 2
        while lo + size <= hi and len(slots) < span:
            slots.append(lo)
            lo += size
    return tuple(slots) if len(slots) >= span else None


def fuse(plan: ConvPlan, p: PoolShape, pool_out_addr: int, hw: SnowflakeConfig) -> ConvPlan | None:
    """`plan` with the pool in its program (row groups of ROWS_PER_CU rows per CU), or None
    when it cannot take it (place_ring)."""
    if not plan.indp:
        return None
    fused = replace(settle(plan_indp(plan.shape, hw, plan.in_addr, plan.w_addr, plan.out_addr, rows_per_cu=ROWS_PER_CU), hw),
                    pool=p, pool_out_addr=pool_out_addr)
    slots = place_ring(fused, p, hw)
    return replace(fused, pool_slots=slots) if slots is not None else None


MIN_GAIN = 0.03  # fusing must save this share of the two layers' estimated cycles


def fusing_pays(plan: ConvPlan, p: PoolShape, hw: SnowflakeConfig) -> bool:
    """Apart, the pool layer is bus-bound (its input read back, its output written) after the
    conv; fused, the MAX traces add to the conv's CU time and all the traffic shares one
    program's bus. A conv that computes for long hides the pool's traffic (ResNet's 7x7 stem:
    573 k estimated apart, 482 k fused); a short one does not (SqueezeNet's 3x3 stem: its own
    output and the pool's traffic are longer than its MACs, 202 k apart, 232 k fused)."""
    bw = hw.dram_bytes_per_cycle
    s = plan.shape
    compute = s.valid_macs() / hw.macs
    conv_bytes = plan.dram_bytes(hw)[plan.loop_order] + 2 * s.oh * s.ow * s.k
    pool_bytes = 2 * (p.h * p.w * p.c + p.oh * p.ow * p.c)
    rows = min(p.kh, p.h)
    maxs = p.oh * p.ow * rows * p.kw * -(-p.c // (16 * hw.cus))
    apart = max(compute, conv_bytes / bw) + pool_bytes / bw
    fused = max(compute + maxs, (conv_bytes + pool_bytes) / bw)
    return fused < apart * (1 - MIN_GAIN)
