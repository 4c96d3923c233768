"""
A max pool run inside the program of the INDP conv whose output it reads.

Why: C17 §7 counts "non-overlapped Maxpool layers" among its compiler's losses. A pool layer on
its own is bound by the bus — it reads the conv's whole output back (ResNet's 112², 64-channel
stem output: 1.6 MB, 120 k cycles at 4.2 GB/s) — while the conv before it, computing, leaves
most of the bus idle. Run in the conv's program, the pool's loads share that idle bus and its
MAX traces slot in between the conv's MACs.

Schedule (`plan_ring`): the conv's row groups take one output row per CU, so each group
completes consecutive rows, in order. At the start of group g, the conv rows group g - 1
completed are loaded (broadcast) from the conv's output in DRAM into a ring of row slots in
the maps buffer beside the groups' own regions; an LD still waiting for a write-back waits in
its load unit (dram_raw), not in the control pipeline. Halfway through group g's pixels
(conv_pixels._row's `mid`), the pool rows those loads complete are computed: MAX traces as in
pool_codegen, one per window row (the slots need not be adjacent), then the conv's CU stride
and write-back mask are restored. Before a slot is reloaded, the MAXs that read it have half a
group of MACs behind them, so they are done. What the last group completes is pooled after it. nn-to-tile fuses when `fusing_pays`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from snowir.asm_builder import AsmBuilder
from snowir.conv_codegen import load_broadcast
from snowir.conv_plan import ConvPlan
from snowir.dialects import snowflake_asm as sf
from snowir.hw import SnowflakeConfig
from snowir.pool_codegen import GUARD, R_MASK, R_TMP, PoolShape, ring_output_row, set_up_max

ROWS_PER_CU = 1  # row groups of one row per CU: each group completes consecutive rows


@dataclass(frozen=True)
class PoolRing:
    """Row slots (maps-buffer element addresses, all CUs) and, per row group of the conv, the
    conv rows [a, b) loaded at its start and the pool rows [p, q) computed halfway through it;
    `tail`: the same after the last group."""

    slots: tuple[int, ...]
    steps: tuple[tuple[int, int, int, int], ...]
    tail: tuple[int, int, int, int]


def _first_row(p: PoolShape, j: int) -> int:
    return max(0, j * p.sy - p.pt)


def _end_row(p: PoolShape, j: int) -> int:
    return min(p.h, j * p.sy - p.pt + p.kh)


def ring_schedule(plan: ConvPlan, p: PoolShape) -> tuple[tuple[tuple[int, int, int, int], ...], tuple[int, int, int, int], int]:
    """Per row group of the conv, the conv rows [a, b) loaded at its start and the pool rows
    [p, q) computed halfway through it; the same after the last group; and the slots the ring
    needs at once. Follows from the row groups and the pool's shape alone."""
    done, loaded, pooled, steps, span = 0, 0, 0, [], 1
    for strip in plan.strips:
        q = pooled
        while q < p.oh and _end_row(p, q) <= done:
            q += 1
        steps.append((loaded, done, pooled, q))
        span = max(span, done - _first_row(p, pooled) if pooled < p.oh else 0)
        loaded, pooled, done = done, q, strip.y1
    tail = (loaded, p.h, pooled, p.oh)
    span = max(span, p.h - _first_row(p, pooled) if pooled < p.oh else 0)
    return tuple(steps), tail, span


def group_rows_words(plan: ConvPlan) -> list[int]:
    """Maps-buffer words each bank's row groups take (the ring's slots go above them)."""
    from snowir.indp_codegen import group_of

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


def ring_of(plan: ConvPlan) -> PoolRing:
    """The plan's ring: its recorded slots (`pool_slots`) and the schedule its groups imply."""
    assert plan.pool is not None
    steps, tail, _ = ring_schedule(plan, plan.pool)
    return PoolRing(plan.pool_slots, steps, tail)


def load_rows(b: AsmBuilder, plan: ConvPlan, ring: PoolRing, rows: tuple[int, int], hw: SnowflakeConfig) -> None:
    """Conv output rows [a, b) from DRAM into their ring slots, broadcast to every CU."""
    p = plan.pool
    assert p is not None
    row = p.w * p.c
    n = len(ring.slots)
    for r in range(*rows):
        load_broadcast(b, hw, ring.slots[r % n], plan.out_addr + 2 * r * row, row)


def pool_rows(b: AsmBuilder, plan: ConvPlan, ring: PoolRing, rows: tuple[int, int], hw: SnowflakeConfig,
              restore: tuple[int, int] | None) -> None:
    """The MAX traces of pool rows [p, q) from the ring, then (`restore`) the conv's CU stride
    and write-back mask again (r1-r9 are the pool's here: the conv sets them up afresh after)."""
    p = plan.pool
    assert p is not None
    if rows[0] >= rows[1]:
        return
    n = len(ring.slots)
    set_up_max(b, p)
    for y in range(*rows):
        ring_output_row(b, p, hw, y, lambda r: ring.slots[r % n], plan.pool_out_addr)
    if restore is not None:
        b.const(R_TMP, restore[0])
        b.emit(sf.VmovOp(plan.vector_mode, sf.VmovSelect.STRIDE, R_TMP))
        b.write_mask(hw, R_MASK, restore[1])


def fuse(plan: ConvPlan, p: PoolShape, pool_out_addr: int, hw: SnowflakeConfig) -> ConvPlan | None:
    """`plan` with the pool in its program (row groups of ROWS_PER_CU rows per CU), or None
    when it cannot take it (place_ring)."""
    from snowir.conv_plan import settle
    from snowir.indp_codegen import plan_indp

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
