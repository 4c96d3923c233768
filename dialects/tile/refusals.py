"""
Why a planned conv cannot take a declared decision's value: the plan-level preconditions of
decisions.py's declarations (`Decision.refuse`), as one-line reasons naming what is in the way,
which tile-to-asm gives for a user's edit (snowir/tile/check.py) and the planners ask before
choosing the value (a planner never chooses what a refusal names).
"""

from __future__ import annotations

from typing import Any


def slice_tiles_refusal(plan: Any, hw: Any) -> str | None:
    s = plan.shape
    fits = (s.kh, s.kw) == (1, 1) and plan.tiles % plan.slice_tiles == 0 and plan.double_buffer_weights
    return None if fits else "a 1x1 conv's whose kernel tiles, a multiple of it, double-buffer (remove it)"


def prefetch_refusal(plan: Any, hw: Any) -> str | None:
    s = plan.shape
    if plan.prefetch_after < hw.vector_queue_depth:
        return (f"fewer than the vector queue's {hw.vector_queue_depth} ops: the loads could overwrite words "
                "queued vector ops still read")
    if plan.bypass_slices and (s.kh, s.kw) == (1, 1):
        return "a bypass-slice 1x1 conv's prefetches follow its pixel pipeline (remove it)"
    if plan.indp and plan.cu_split == "cols":
        return "a column-split INDP conv places its own loads (remove it)"
    return None


def kernel_order_refusal(plan: Any) -> str | None:
    if plan.tiles == 1 or len(plan.strips) == 1:
        return "one kernel tile or one row group: the order changes nothing (remove it)"
    if plan.indp and plan.cu_split == "cols":
        return None
    s = plan.shape
    why = ("an INDP conv whose CUs split rows" if plan.indp else
           "coop_rows" if plan.coop_rows else
           "Mloop" if plan.loop_order != "Kloop" else
           "a residual conv (its bypass is read per kernel tile)" if plan.bypass_addr is not None else
           "grouped" if s.groups > 1 else
           "column bands" if plan.column_tiled else
           "a fused pool" if plan.pool is not None else
           "its kernel tiles not double-buffered" if not plan.double_buffer_weights or plan.resident_weights
           or plan.stagger else
           "maps strips in banks loading in pieces beside the tiles (a next strip loading whole, gathered or "
           "load_next_whole, takes it)"
           if any(st.bank >= 0 for st in plan.strips) and plan.gather is None and not plan.load_next_whole else None)
    if why is None:
        return None
    return (f"{why}: only a column-split INDP conv or a COOP conv of double-buffered kernel tiles whose next strip "
            "loads in its last tile orders its kernel tiles; this one runs them up (remove it)")


def first_slot_refusal(plan: Any) -> str | None:
    """Why a planned conv cannot start its kernel tiles in the second weights slot (`first_slot`)."""
    s = plan.shape
    why = ("INDP" if plan.indp else "its CUs split rows (coop_rows)" if plan.coop_rows else
           "column bands" if plan.column_tiled else
           "a kernel larger than the weights buffer" if s.kernel_words > 2 * plan.w_slot else
           "its kernel tiles not double-buffered" if not plan.double_buffer_weights or plan.resident_weights
           or plan.stagger else None)
    if why is not None:
        return f"{why}: only a COOP conv of double-buffered kernel tiles starts in the second slot (remove it)"
    if plan.first_slot != plan.w_slot:
        return f"the second weights slot is word {plan.w_slot} (the kernel tile's slot)"
    return None


def paired_start_refusal(plan: Any) -> str | None:
    """Why a planned conv cannot compute its first two maps strips tile by tile (`paired_start`)."""
    s = plan.shape
    why = ("its kernel tiles not resident" if not plan.resident_weights or plan.tiles < 2 else
           "not a plain COOP Kloop conv (INDP, row groups, Mloop, grouped, column bands, a bypass, a fused pool or "
           "phases in place)" if plan.indp or plan.row_groups or plan.loop_order != "Kloop" or s.groups != 1
           or plan.column_tiled or plan.bypass_addr is not None or plan.pool is not None or plan.cu_stride else
           "fewer than three maps tiles, the first two in banks 0 and 1"
           if len(plan.strips) < 3 or plan.strips[0].bank != 0 or plan.strips[1].bank != 1 else None)
    return None if why is None else f"{why}: only resident kernel tiles over banked strips take turns (remove it)"


def bias_refusal(plan: Any, hw: Any) -> str | None:
    """Why a plan cannot keep its biases in the maps buffer (`BIASES` maps; None: it can): the
    programs that read the kernel's bias block or share the banks' tops otherwise."""
    s = plan.shape
    if s.kh * s.kw * s.c > hw.weights_buffer_elements:
        return "a kernel larger than the weights buffer streams in chunks, its bias block with the last"
    if s.empty_windows:
        return "its windows of padding alone write back the bias through a MAC on the kernel's zero bias word"
    if plan.pool is not None:
        return "a fused pool's ring takes the tops of the banks"
    if plan.column_tiled:
        return "column bands start over in the buffer"
    if plan.cu_stride:
        return "its phases in place spread its kernels a result row apart over the CUs, not as one pixel's channels"
    if getattr(plan, "coop_rows", False):
        return "its CUs split rows (coop_rows): the CU stride is a row group's, not the bias block's"
    return None


def coop_rows_refusal(plan: Any, hw: Any) -> str | None:
    """Why a planned COOP conv cannot split its output rows over the CUs (`coop_rows`)."""
    s = plan.shape
    why = ("a residual conv's bypass is read per kernel tile, broadcast" if plan.bypass_addr is not None else
           "a fused pool reads rows every CU wrote" if plan.pool is not None else
           "grouped" if s.groups > 1 else
           "a merged conv's phases in place take the CU stride" if plan.cu_stride else
           "Mloop" if plan.loop_order != "Kloop" else
           "its kernel exceeds a weights slot" if s.kernel_words > hw.weights_buffer_elements // 2 else
           "an output pixel whose window is padding alone" if s.empty_windows else
           "staggered or resident kernel tiles" if plan.stagger or plan.resident_weights else
           "its biases in the maps buffer (biases = maps)" if getattr(s, "bias_at", "kernel") == "maps" else
           f"kernel tile count {plan.kernels} > a CU's {hw.vmacs_per_cu} vMACs" if plan.kernels > hw.vmacs_per_cu
           else None)
    return None if why is None else f"{why} (remove it)"


def whole_refusal(plan: Any, hw: Any) -> str | None:
    if plan.indp or plan.coop_rows:
        return "a row-group conv (INDP, coop_rows) loads its next row group whole already (remove it)"
    return None
