"""
Fusing a max pool into the program of the conv it reads (C17 §7 counts "non-overlapped
Maxpool layers" among its compiler's losses): whether it can (`fusable`, room for the ring
above the conv's maps: `place_ring`), the conv's maps tiles that leave that room (`fuse`) and
whether it pays (`fusing_pays`). An INDP conv takes row groups of one row per CU; a COOP conv
takes maps strips short enough for the ring beside them in their banks. The schedule itself
(`ring_schedule`) is in plan/shapes.py, its code in codegen/fused_pool.py.
"""

from __future__ import annotations

from dataclasses import replace
from snowir.hw import SnowflakeConfig
from snowir.plan.conv import row_strips, settle, with_residency
from snowir.plan.indp import plan_indp
from snowir.plan.shapes import ConvPlan, PoolShape, group_of, input_rows, weights_slot_elements
from snowir.plan.pool_shapes import GUARD, ring_schedule


ROWS_PER_CU = 1  # row groups of one row per CU: each group completes consecutive rows


def maps_words(plan: ConvPlan) -> list[int]:
    """Maps-buffer words each bank's row groups (INDP) or strips (COOP) take from the bank's
    start (the ring's slots go above them)."""
    s = plan.shape
    row_in = s.w * s.cin
    used = [0, 0]
    for gi, strip in enumerate(plan.strips):
        if plan.indp:
            _, _, rows = group_of(plan, gi)
            words = max((r1 - r0) * row_in for r0, r1 in rows)
        else:
            words = (strip.r1 - strip.r0) * row_in + s.overread
        used[strip.bank] = max(used[strip.bank], words)
    return used


def coop_fusable(plan: ConvPlan) -> bool:
    """A COOP conv whose program codegen/conv.py's Kloop runs strip by strip, each strip in its
    own bank: ungrouped, no residual input, no gathered maps, no column bands, weights in slots
    or resident (a fully connected layer has no rows to pool)."""
    s = plan.shape
    return (not plan.indp and plan.loop_order == "Kloop" and s.groups == 1 and plan.bypass_addr is None
            and plan.gather is None and not plan.column_tiled and all(st.bank >= 0 for st in plan.strips))


def fusable(plan: ConvPlan, p: PoolShape, hw: SnowflakeConfig) -> bool:
    """An INDP conv, or a COOP one `coop_fusable`, whose output is the pool's input, channels the
    pool unit takes."""
    s = plan.shape
    return (plan.indp or coop_fusable(plan)) and (p.c, p.h, p.w) == (s.k, s.oh, s.ow) \
        and not (p.c % hw.lanes and p.c > hw.lanes * hw.cus)


def place_ring(plan: ConvPlan, p: PoolShape, hw: SnowflakeConfig) -> tuple[int, ...] | None:
    """The ring's row slots above each bank's maps, or None when the pool cannot run in the
    conv's program (`fusable`, a strip over its bank, or no room for the rows the pool needs at
    once)."""
    if not fusable(plan, p, hw):
        return None
    span = ring_schedule(plan, p)[2]
    used = maps_words(plan)
    size = p.w * p.c + GUARD
    slots: list[int] = []
    for bank in (0, 1):
        if used[bank] > hw.maps_bank_elements:
            return None
        lo, hi = bank * hw.maps_bank_elements + used[bank], (bank + 1) * hw.maps_bank_elements
        lo += lo % 2
        while lo + size <= hi and len(slots) < span:
            slots.append(lo)
            lo += size
    return tuple(slots) if len(slots) >= span else None


def _coop_tilings(plan: ConvPlan, hw: SnowflakeConfig) -> list[ConvPlan]:
    """`plan` (Kloop) with strips of at most n input rows in alternating banks, for each n from
    the most a bank holds down to the kernel's rows: shorter strips leave room for the ring."""
    s = plan.shape
    row = s.w * s.cin
    rows = lambda y0, y1: input_rows(s.h, s.kh, s.sy, s.pt, y0, y1)  # noqa: E731
    plans = []
    for n in range(min(s.h, (hw.maps_bank_elements - s.overread) // row), s.kh - 1, -1):
        strips = tuple(row_strips(s.oh, rows, lambda y0, y1, n=n: rows(y0, y1)[1] - rows(y0, y1)[0] <= n,
                                  lambda i: i % 2, "conv"))
        if not plans or strips != plans[-1].strips:
            plans.append(with_residency(replace(plan, strips=strips, loop_order="Kloop", resident_weights=False,
                                                double_buffer_weights=s.kernel_words <= weights_slot_elements(hw)),
                                        hw))
    return plans


# a kernel tile's MACs over a strip must last this many times the next tile's weights' load:
# that load shares the bus with the strip's maps, the write-backs and the pool's rows, and the
# estimate does not see the CUs wait on it (AlexNet's conv2 in 4-row strips, 1.8 times: 863 k
# cycles measured for 807 k estimated; Inception-v2's 56x56 64->192 conv in 1-row strips, 1.8
# times: 1,417 k for 1,389 k, slower than with its pool apart; conv2 in 5-row strips, 2.7 times:
# 810 k for 808 k)
WEIGHTS_HIDDEN = 2.0


def weights_hidden(plan: ConvPlan, hw: SnowflakeConfig) -> bool:
    """Whether the kernel tiles a COOP Kloop plan re-sends per strip load well within the MACs
    of the tile before (`WEIGHTS_HIDDEN`); resident or single tiles load once."""
    if plan.resident_weights or plan.tiles < 2:
        return True
    s = plan.shape
    per_tile = s.valid_macs() / hw.macs / (len(plan.strips) * plan.tiles)
    return per_tile >= WEIGHTS_HIDDEN * plan.kernels * s.kernel_words * 2 / hw.dram_bytes_per_cycle


def fuse(plan: ConvPlan, p: PoolShape, pool_out_addr: int, hw: SnowflakeConfig) -> ConvPlan | None:
    """`plan` with the pool in its program, or None when it cannot take it (place_ring). INDP:
    row groups of ROWS_PER_CU rows per CU. COOP: the longest strips that leave the ring room
    (shorter ones pool no more of the conv's output in its program, and each strip more re-sends
    the kernel tiles and restarts the pipeline: AlexNet's conv2 in 12 strips of 4 rows took
    863 k cycles with its pool, in 8 of 5 rows 810 k, where the estimate rates both alike), and
    not so short that the weights they re-send are not hidden (`weights_hidden`)."""
    if plan.indp:
        fused = replace(settle(plan_indp(plan.shape, hw, plan.in_addr, plan.w_addr, plan.out_addr,
                                         rows_per_cu=ROWS_PER_CU), hw), pool=p, pool_out_addr=pool_out_addr)
        slots = place_ring(fused, p, hw)
        return replace(fused, pool_slots=slots) if slots is not None else None
    for tiling in _coop_tilings(plan, hw):  # longest strips first
        if not weights_hidden(tiling, hw):
            break  # shorter strips hide them less
        candidate = replace(settle(tiling, hw), pool=p, pool_out_addr=pool_out_addr)
        slots = place_ring(candidate, p, hw)
        if slots is not None:
            return replace(candidate, pool_slots=slots)
    return None


MIN_GAIN = 0.03  # fusing must save this share of the two layers' estimated cycles (INDP)
# COOP: `fused_cycles` rates the fused program with its own strips, closer than the INDP rule
# (AlexNet's conv2 + pool2: 2.0% estimated, 1.7% measured; conv1 + pool1: 7.5%, 6.5%)
MIN_GAIN_COOP = 0.01


def _pool_costs(p: PoolShape, hw: SnowflakeConfig) -> tuple[float, float]:
    """The pool's DRAM bytes (its input read back, its output written) and MAX cycles."""
    pool_bytes = 2 * (p.h * p.w * p.c + p.oh * p.ow * p.c)
    rows = min(p.kh, p.h)
    return pool_bytes, p.oh * p.ow * rows * p.kw * -(-p.c // (hw.lanes * hw.cus))


def fused_cycles(plan: ConvPlan, hw: SnowflakeConfig) -> float:
    """A COOP conv with its pool: the conv's estimate with the MAX traces on its CUs and the
    pool's traffic on its bus, plus the pool rows only the last strip completes (its `tail`:
    their loads and MAXs follow the conv's last MACs)."""
    p = plan.pool
    assert p is not None
    bw = hw.dram_bytes_per_cycle
    pool_bytes, maxs = _pool_costs(p, hw)
    conv = plan.estimated_cycles(hw)
    traffic = (plan.dram_bytes(hw)[plan.loop_order] + 2 * plan.shape.oh * plan.shape.ow * plan.shape.k + pool_bytes) / bw
    a, b, q0, q1 = ring_schedule(plan, p)[1]
    tail = 2 * (b - a) * p.w * p.c / bw + maxs * (q1 - q0) / max(1, p.oh)
    return max(conv + maxs, traffic) + tail


def fusing_pays(plan: ConvPlan, p: PoolShape, hw: SnowflakeConfig, fused: ConvPlan | None = None) -> bool:
    """Apart, the pool layer is bus-bound (its input read back, its output written) after the
    conv; fused, the MAX traces add to the conv's CU time and all the traffic shares one
    program's bus. A conv that computes for long hides the pool's traffic (ResNet's 7x7 stem:
    573 k estimated apart, 482 k fused); a short one does not (SqueezeNet's 3x3 stem: its own
    output and the pool's traffic are longer than its MACs, 202 k apart, 232 k fused). A COOP
    conv is rated as `fused` (its shorter strips) against `plan` apart (`fused_cycles`)."""
    bw = hw.dram_bytes_per_cycle
    s = plan.shape
    pool_bytes, maxs = _pool_costs(p, hw)
    if not plan.indp:
        if fused is None:
            return False
        return fused_cycles(fused, hw) < (plan.estimated_cycles(hw) + pool_bytes / bw) * (1 - MIN_GAIN_COOP)
    compute = s.valid_macs() / hw.macs
    conv_bytes = plan.dram_bytes(hw)[plan.loop_order] + 2 * s.oh * s.ow * s.k
    apart = max(compute, conv_bytes / bw) + pool_bytes / bw
    fused_est = max(compute + maxs, (conv_bytes + pool_bytes) / bw)
    return fused_est < apart * (1 - MIN_GAIN)
