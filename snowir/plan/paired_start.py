"""
`paired_start`: a resident conv's first two maps strips computed kernel tile by kernel tile.

A COOP Kloop conv whose kernel tiles are resident (`resident`: every tile held at once, loaded
once) loads tile 0, its first strip, then tiles 1..T-1 behind them; strip 1 (bank 1) loads after
those tiles, behind them on the load units. Where the kernels outweigh the strips (ResNet-50's
14², 1x1 1024 -> 256 on 16 CUs: four 131 KB tiles against 57 KB strips) the CUs compute strip 0's
tiles as they arrive and then wait for strip 1, and every later strip computes after all of it:
the kernels' bus time and the strips' MACs add up instead of overlapping. With `paired_start`
the cold start loads strip 1 right behind strip 0, ahead of tiles 1..T-1, and each kernel tile
computes over strip 0 then strip 1 (codegen/conv.py `_paired_strips`): both strips' MACs of a
tile run while the next tile arrives, and only the last tile's are left after the kernels.
Strip 2 loads into bank 0 during the last tile over strip 1, row by row.

The choice is priced by `start_cycles`, a timeline of the strips' MACs against their loads and
the kernel tiles' (the loop-order estimate, `ConvPlan.estimated_cycles`, counts the resident
tiles' traffic but not when it lands), and taken when it is `PAIRED_MIN_GAIN` faster.
"""

from __future__ import annotations

from dataclasses import replace

from snowir.dialects.tile.refusals import paired_start_refusal
from snowir.hw import SnowflakeConfig
from snowir.plan.shapes import ConvPlan


PAIRED_MIN_GAIN = 0.01
"""Share of the layer's estimated cycles the paired start must save (the timeline leaves out the
write-backs' share of the bus and the loads' start-ups: a smaller predicted gain is noise)."""


def start_cycles(plan: ConvPlan, hw: SnowflakeConfig, paired: bool) -> float:
    """Cycles until the layer's last MAC, the strips' MACs in program order (Kloop; `paired`: the
    first two strips tile by tile) each starting once its kernel tile and its strip have landed.
    The bus carries, in order: tile 0, strip 0 (with `paired` strip 1), tiles 1..T-1, then each
    later strip as its bank frees (at the start of the previous strip's tile 0, or with `paired`
    strip 2 at the start of the last tile over strip 1), at the shared bus rate."""
    s = plan.shape
    bw = hw.dram_bytes_per_cycle
    tiles = plan.tiles
    row = s.valid_macs() / hw.macs / tiles / s.oh  # a kernel tile's MAC cycles per output row
    compute = [(st.y1 - st.y0) * row for st in plan.strips]
    nbytes = [(st.r1 - st.r0) * s.w * s.cin * 2 for st in plan.strips]
    kernel = plan.kernels * s.kernel_words * 2
    bus = kernel
    tile_at = [bus / bw]
    strip_at: dict[int, float] = {}
    bus += nbytes[0]
    strip_at[0] = bus / bw
    if paired:
        bus += nbytes[1]
        strip_at[1] = bus / bw
    for _ in range(1, tiles):
        bus += kernel
        tile_at.append(bus / bw)
    free = bus / bw  # the bus from here: each later strip's load
    if paired:
        order = [(si, t) for t in range(tiles) for si in (0, 1)]
        order += [(si, t) for si in range(2, len(plan.strips)) for t in range(tiles)]
        triggers = {(1, tiles - 1): 2}
    else:
        order = [(si, t) for si in range(len(plan.strips)) for t in range(tiles)]
        triggers = {}
    triggers.update({(si - 1, 0): si for si in range(1 if not paired else 3, len(plan.strips))})
    now = 0.0
    for si, t in order:
        start = max(now, tile_at[t], strip_at[si])
        nxt = triggers.get((si, t))
        if nxt is not None:  # the next strip's load, issued as this tile starts, behind what the bus still carries
            free = max(free, start) + nbytes[nxt] / bw
            strip_at[nxt] = free
        now = start + compute[si]
    return now


def with_paired_start(plan: ConvPlan, hw: SnowflakeConfig) -> ConvPlan:
    """`plan` with `paired_start` where it can take it and `start_cycles` says it pays."""
    if paired_start_refusal(replace(plan, paired_start=True)) is not None:
        return plan
    before, after = start_cycles(plan, hw, False), start_cycles(plan, hw, True)
    if after < before - PAIRED_MIN_GAIN * plan.estimated_cycles(hw):
        return replace(plan, paired_start=True)
    return plan
