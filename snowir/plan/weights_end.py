"""
Which weights-buffer words a conv's last vector ops read, so that the next layer's first kernels
may load before the fence between them (allocate-dram's `weights_before_fence`).

The fence exists because every layer's code starts on buffer word 0 and the previous layer's
last MACs may still read there. A double-buffered COOP conv alternates its kernel tiles between
slot 0 and slot `w_slot` (codegen/conv.py: `_toggle`, one toggle per new kernel tile), so where
its last tile sits follows from the number of kernel-tile loads: S·T of them in Kloop (each of
the S strips runs the T tiles, the next strip's tile 0 in the other slot) and in a residual
conv (Kloop over strips), T in Mloop (each tile once, the strips inside it). When that slot is
`w_slot`, words [0, w_slot) are no longer read, and a next layer whose first kernel tile fits
there loads it at once, overlapping the previous layer's tail (its maps loads still wait for
the fence). Layer starts were the largest CU-idle cause in ResNet-18 (5-6.6 k cycles each at
its 14² channel parts, of which the first kernels' load is about 2 k).
"""

from __future__ import annotations

from snowir.hw import SnowflakeConfig
from snowir.plan.shapes import ConvPlan, indp_kernel_words


def last_kernel_slot(plan: ConvPlan, hw: SnowflakeConfig) -> tuple[int, int] | None:
    """The weights words [lo, hi) of every vMAC the conv's last kernel tile occupies, when its
    code generator's slot sequence is the plain one (COOP, kernels loaded tile by tile, not
    resident, not staggered, not in chunks, one column band); None otherwise (read as: any word)."""
    s = plan.shape
    if plan.indp or plan.resident_weights or plan.stagger or plan.column_tiled or plan.pool is not None \
            or s.kernel_words > hw.weights_buffer_elements:
        return None
    if plan.tiles == 1 or not plan.double_buffer_weights:
        return 0, s.kernel_words
    mloop = plan.loop_order == "Mloop" and plan.bypass_addr is None  # a residual conv is Kloop over strips
    loads = plan.tiles if mloop else len(plan.strips) * plan.tiles
    lo = ((loads - 1) % 2) * plan.w_slot
    return lo, lo + s.kernel_words


def first_kernel_words(plan: ConvPlan, hw: SnowflakeConfig) -> int:
    """The weights words [0, n) of each vMAC a conv's cold start loads before the fence: its kernel
    tile 0, or every tile when they are resident (tile t at t x kernel words)."""
    if plan.indp:
        return indp_kernel_words(plan.shape, hw)
    return plan.shape.kernel_words * (plan.tiles if plan.resident_weights else 1)


def weights_before_fence_refusal(previous: ConvPlan, plan: ConvPlan, hw: SnowflakeConfig) -> str | None:
    """Why `plan`'s first kernels may not load before the fence behind the conv `previous`
    (None: they may): the words they load must lie below every word `previous`'s last tile reads."""
    if plan.shape.kernel_words > hw.weights_buffer_elements:
        return "its kernels stream in chunks (nothing loads before the fence)"
    last = last_kernel_slot(previous, hw)
    if last is None:
        return "the previous conv's last kernel tile is not in a known slot (INDP, resident, staggered, chunked, " \
               "column bands or a fused pool)"
    n = first_kernel_words(plan, hw)
    if n > last[0]:
        return f"its first kernels load weights words [0, {n}), which the previous conv's last kernel tile still " \
               f"reads ([{last[0]}, {last[1]}))"
    return None
