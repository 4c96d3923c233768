"""
The issue floor of a COOP conv: the cycles the control pipeline needs to issue its pixel loops,
one instruction a cycle, whatever the vector unit does meanwhile. `ConvPlan.estimated_cycles`
counts MACs and DRAM traffic; a conv of short traces (a depthwise conv in block-diagonal groups:
one 16-word trace per tap, one cycle of MACs, and the next tap's ADDI pair) is bound by issue
instead, ~3 cycles a trace (4-5 before the pairs were set a MAC ahead, 2026-11-28: measured
3.9-5.2x the MAC estimate then, bench/results/columns.json).
Placement decisions (depthwise-to-grouped, add-to-bypass) take the larger of the two,
`placement_cycles`. The planners' choices among plans do not use it: every loop order of a conv
issues the same traces.

The counts follow the code generator (snowir/codegen/pixels.py `_row`, traces.py `macs`):
  * a pixel of the loop: the X-counter ADDI, the branch and its delay slots (the address steps);
  * grouped (one trace per tap): a MAC per tap and the next tap's ADDI pair (maps, weights),
    set a MAC ahead (`macs_taps_pipelined`) so no MAC waits; where the offsets do not fit an
    ADDI, the pair the next MAC reads, which waits `scalar_latency - 1` cycles after the second;
  * ungrouped, kernel rows pipelined (`macs_pipelined`): a MAC per kernel row and the next row's
    ADDI pair, set early enough not to wait; with 2-3 kernel rows (`_row_traces_loop`) the
    weights addresses are set before the loop and a pixel issues a MAC and a maps ADDI a row,
    the output step and the branch (its delay slots hold the pixel's last four: no counter, no
    no-ops), a residual's bypass VMOV and step besides;
  * 1x1, ungrouped or grouped (`_unrolled_pixels`): UNROLL pixels an iteration, a MAC and a maps ADDI each
    (a residual's: its bypass VMOV and ADDI too), the output ADDIs in the delay slots, the branch
    on the first pixel's maps address (no counter).
Border pixels (fewer taps) are counted by their valid taps. INDP plans (16 rows a MAC) are
MAC-bound: floor 0. The issue rule is the ISA table's (dialects/snowflake_asm/isa.py
`TimingClass`, as the machine's `Timing.scalar` applies it): every class issues `ISSUE` cycles
apart, a scalar result is readable `SCALAR_TIMING.latency(hw)` after its dispatch.
"""

from __future__ import annotations

import math
from dataclasses import replace

from snowir.dialects.snowflake_asm.isa import SCALAR_TIMING, TIMING_CLASSES
from snowir.host_nodes import valid_taps
from snowir.hw import SnowflakeConfig
from snowir.plan.coop_rows import coop_rows_cycles
from snowir.plan.indp_columns import columns_cycles
from snowir.plan.shapes import TRACE_CHUNK, ConvPlan, band_plans

ISSUE = SCALAR_TIMING.issue_cycles
"""Cycles between two dispatches: the counts below are instructions of any class, one slot each."""
assert all(t.issue_cycles == ISSUE for t in TIMING_CLASSES), "plan/issue.py counts one slot an instruction"

ROW_REGISTERS = 3
"""Kernel rows with an address register pair each, whose weights addresses a pixel loop sets
once (snowir/codegen/traces.py `ROW_PAIRS`, pixels.py `_row_traces_loop`)."""

IMM17 = 1 << 16
"""ADDI's immediate range (its 17-bit signed field)."""

UNROLL = 4
"""1x1 convs: pixels an X-loop iteration (snowir/codegen/pixels.py `_unrolled_pixels`)."""


def rows_pipelined(plan: ConvPlan, rows: int, taps: int, row: int) -> bool:
    """An ungrouped conv's window as one trace per kernel row, each row's addresses an ADDI
    from the first's (snowir/codegen/traces.py `macs_pipelined`)."""
    s = plan.shape
    return s.cin == s.c and 1 < rows and taps * s.c <= TRACE_CHUNK \
        and (rows - 1) * max(row, s.kw * s.c * plan.weight_step) < IMM17


def row_loop_pays(plan: ConvPlan, rows: int, hw: SnowflakeConfig) -> bool:
    """Whether a COOP pixel loop over `rows` pipelined kernel rows (2-3: a register pair each)
    sets the rows' weights addresses once (snowir/codegen/pixels.py `_row_traces_loop`): where a
    pixel's MAC cycles are fewer than the counted loop's 3 * rows + 3 issue slots (+2 with a
    residual's bypass), so the vector unit waits on issue, as a 16-channel 3x3 window's 9 do
    on 12. Elsewhere the counted loop stays: the saved slots would hide behind MACs, and a
    shorter program moves the instruction-cache banks against the loads (C17 Table 1's fourth
    layer, MAC-bound, measured 1.440 -> 1.444 ms with every such loop rewritten)."""
    s = plan.shape
    if plan.indp or not 1 < rows <= ROW_REGISTERS \
            or not rows_pipelined(plan, rows, s.kw, s.w * s.cin):
        return False
    bypass = plan.bypass_addr is not None
    return rows * math.ceil(s.kw * s.c / hw.lanes) < 3 * rows + 3 + 2 * bypass


def issue_cycles(plan: ConvPlan, hw: SnowflakeConfig) -> float:
    """[P] Issue slots of the plan's pixel loops over all kernel tiles (module docstring)."""
    if plan.column_tiled:
        return sum(issue_cycles(p, hw) for _, p in band_plans(plan))
    if plan.indp:
        return 0.0
    s = plan.shape
    if plan.coop_rows:  # row groups: the stream issues CU 0's rows of each group, the other CUs' alongside
        issued = sum(plan.cu_rows)
        return issue_cycles(replace(plan, coop_rows=False), hw) * issued / s.oh
    bypass = plan.bypass_addr is not None
    pixels = s.oh * s.ow
    rows = valid_taps(s.oh, s.kh, s.sy, s.pt, 1, s.h)
    cols = valid_taps(s.ow, s.kw, s.sx, s.pl, 1, s.w)
    if s.kh == s.kw == 1 and s.c <= TRACE_CHUNK:  # ungrouped or grouped (a group's channels)
        per_iteration = 1 + hw.branch_delay_slots + UNROLL * (2 + 2 * bypass)
        return ISSUE * plan.tiles * pixels * per_iteration / UNROLL
    wait = SCALAR_TIMING.latency(hw) - 1  # a MAC reading the pair's second ADDI at once
    loop = 2 + hw.branch_delay_slots + bypass
    if s.cin != s.c:  # grouped: a trace a tap, each tap's ADDI pair a MAC ahead where offsets fit
        row = s.w * s.cin
        ahead = s.c <= TRACE_CHUNK and max((s.kh - 1) * row + (s.kw - 1) * s.cin, s.kh * s.kw * s.c) < IMM17
        traces, gap = rows * cols, 2 if ahead else 2 + wait
    else:
        chunks = math.ceil(s.kw * s.c / TRACE_CHUNK)
        traces = rows * s.ow * chunks
        if row_loop_pays(plan, s.kh, hw):  # `_row_traces_loop`: weights rows set once
            return ISSUE * plan.tiles * (2 * traces + pixels * (2 + 2 * bypass))
        gap = 2 if s.kh > 1 and chunks == 1 else 2 + wait
    return ISSUE * plan.tiles * (pixels * loop + traces + (traces - pixels) * gap)


def placement_cycles(plan: ConvPlan, hw: SnowflakeConfig) -> float:
    """The estimate a placement decision compares with the host's: MACs and traffic, or issue; a
    column-split INDP plan's own (its bypass and output traffic included)."""
    if plan.indp and plan.cu_split == "cols":
        return columns_cycles(plan, hw)
    if plan.coop_rows:
        return coop_rows_cycles(plan, hw, issue_cycles(plan, hw))
    return max(plan.estimated_cycles(hw), issue_cycles(plan, hw))
