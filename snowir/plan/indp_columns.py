"""
INDP with the CUs splitting the output columns (`cu_split = cols`). INDP broadcasts the weights
(C17 §4), so which pixels a CU computes is the compiler's choice; splitting rows (plan/indp.py)
puts CU c's outputs R rows on (`vmov stride` = R rows), and a residual conv's `vmov bypass`,
which reads CU c's maps buffer c·S/2 words on (docs/isa.md), would then need R rows of bypass
per CU in the buffer. Here CU c takes output columns [c·q, (c+1)·q) of every row (q = OW / CUs):
S = 2·q·K bytes, the bypass a CU reads is its own q·K-word segment of each row, and a trace is C
cycles against one bypass VMOV — where COOP's 1x1 residual convs issue a VMOV and three address
steps per 4-cycle trace.

Per row group (a maps tile of R output rows, groups alternating between two slots) CU c holds,
in its own maps buffer (LD select c, one LD per row; strided, one per pixel read): its input
row segments, row i at `maps_at(slot, i)`, and its bypass segments skewed, row i at
`bypass_at(slot, i)` + c·q·K (where the VMOV reads it), so R rows take (R + CUs − 1)·q·K words,
not CUs·R·q·K. The two slots' bypass
spans do not overlap even as the union of the CUs' reads (what the machine's region interlock
tracks for a VMOV: [rs1, rs1 + (CUs − 1)·S/2 + 64)), so the next group loads while the current
one's VMOVs run. Everything follows from the shape and the largest maps tile's rows
(`column_layout`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from snowir.dialects.tile.decisions import kernel_tile_sends
from snowir.dialects.tile.refusals import kernel_order_refusal
from snowir.hw import SnowflakeConfig
from snowir.plan.shapes import (FLUSH_COST, ConvPlan, ConvShape, Strip, indp_kernel_words, input_rows, kernels_per_tile,
                                load_cycles, stagger_words, weights_slot_elements)


@dataclass(frozen=True)
class ColumnLayout:
    """Where a column-split INDP layer keeps a row group in each CU's maps buffer."""

    q: int  # output columns per CU
    seg: int  # words of a CU's input row segment (its q pixels, sx apart)
    out_seg: int  # words of a CU's output (and bypass) row segment, q x K: half the CU stride S
    rows: int  # output rows of the largest row group
    cus: int
    gathered: bool  # strided: one LD a pixel read, so a segment holds only those

    def maps_at(self, slot: int, i: int) -> int:
        """Maps-buffer word of row i of a group in `slot` (0 or 1)."""
        return (slot * self.rows + i) * self.seg

    @property
    def bypass_base(self) -> int:
        return 2 * self.rows * self.seg

    def bypass_at(self, slot: int, i: int) -> int:
        """Where the VMOV reads row i of a group in `slot` (CU c: c x out_seg words further)."""
        return self.bypass_base + (slot * (self.rows + self.cus - 1) + i) * self.out_seg

    @property
    def words(self) -> int:
        """Maps-buffer words the two slots take."""
        return self.bypass_base + 2 * (self.rows + self.cus - 1) * self.out_seg

    def maps_loads(self, s: ConvShape, in_addr: int, y: int, c: int, in_row: int = 0) -> list[tuple[int, int, int]]:
        """CU c's LDs of its input row segment for output row y: (word in the segment, DRAM byte,
        words): the span its q pixels cover in one, or (strided) each pixel it reads. `in_row`: DRAM
        words between input rows when not the shape's (a crop's window of a wider tensor)."""
        row = in_addr + 2 * (y * s.sy * (in_row or s.w * s.cin) + c * self.q * s.sx * s.cin)
        if not self.gathered:
            return [(0, row, self.seg)]
        return [(j * s.cin, row + 2 * j * s.sx * s.cin, s.cin) for j in range(self.q)]


def column_layout(s: ConvShape, hw: SnowflakeConfig, rows: int) -> ColumnLayout:
    q = s.ow // hw.cus
    gathered = s.sx > 1
    return ColumnLayout(q, (q if gathered else (q - 1) * s.sx + 1) * s.cin, q * s.k, rows, hw.cus, gathered)


def columns_refusal(s: ConvShape, hw: SnowflakeConfig) -> str | None:
    """Why the CUs cannot split this conv's columns (None: they can)."""
    why = [text for bad, text in (
        ((s.kh, s.kw, s.pt, s.pl, s.pb, s.pr) != (1, 1, 0, 0, 0, 0), "a 1x1 conv without padding"),
        (s.groups != 1 or s.cin != s.c, "an ungrouped conv over its whole input"),
        (s.k % hw.lanes != 0, f"output channels a multiple of {hw.lanes} (not {s.k})"),
        (s.ow % hw.cus != 0, f"output columns a multiple of the {hw.cus} CUs (not {s.ow})"),
        (indp_kernel_words(s, hw) > hw.weights_buffer_elements,
         f"16 interleaved kernels within the weights buffer ({indp_kernel_words(s, hw)} words > "
         f"{hw.weights_buffer_elements})")) if bad]
    if not why and column_layout(s, hw, 1).words > hw.maps_buffer_elements:
        why = [f"two rows' segments within the maps buffer ({column_layout(s, hw, 1).words} words)"]
    return f"INDP with a residual bypass needs {' and '.join(why)}" if why else None


def max_group_rows(s: ConvShape, hw: SnowflakeConfig) -> int:
    """The most output rows a row group may take with two groups in the buffer."""
    rows = 1
    while rows < s.oh and column_layout(s, hw, rows + 1).words <= hw.maps_buffer_elements:
        rows += 1
    return rows


def group_strips(s: ConvShape, rows: int) -> tuple[Strip, ...]:
    """Output rows in groups of at most `rows`, as even as that allows, alternating slots."""
    n = -(-s.oh // rows)
    cuts = [s.oh * i // n for i in range(n + 1)]
    return tuple(Strip(y0, y1, *input_rows(s.h, s.kh, s.sy, s.pt, y0, y1), i % 2)
                 for i, (y0, y1) in enumerate(zip(cuts, cuts[1:])))


def plan_indp_columns(s: ConvShape, hw: SnowflakeConfig, in_addr: int, w_addr: int, out_addr: int,
                      bypass_addr: int | None, rows: int | None = None) -> ConvPlan:
    """Row groups of the most rows two fit the buffer (a strided conv's: about one a kernel
    tile; or `rows`), Kloop; the kernel tiles resident when they all fit the weights buffer,
    else double-buffered when one fits a slot, else staggered."""
    words = indp_kernel_words(s, hw)
    tiles = -(-s.k // kernels_per_tile(hw))
    if rows is None and column_layout(s, hw, 1).gathered:
        # a strided conv's next group loads pixel by pixel, a part per kernel tile: about a row
        # of LDs (and their address steps) at once, which the queued vector ops cover; more
        # rows a part starved the CUs (ResNet-18's layer2.0.down: 2 rows a group 32.9 k
        # cycles, 4: 33.9 k, 14: 38.1 k)
        rows = max(2, tiles)
    strips = group_strips(s, min(rows or s.oh, max_group_rows(s, hw)))
    resident = tiles > 1 and len(strips) > 1 and tiles * words <= hw.weights_buffer_elements
    double = not resident and words <= weights_slot_elements(hw)
    stagger = stagger_words(words, hw) if tiles > 1 and not (resident or double) else 0
    plan = ConvPlan(s, strips, tiles, kernels_per_tile(hw), double, in_addr, w_addr, out_addr, "INDP", "Kloop",
                    bypass_addr, resident_weights=resident, stagger=stagger, cu_split="cols")
    serpentine = replace(plan, kernel_order="serpentine")
    if kernel_order_refusal(serpentine) is None:
        # serpentine spares a kernel tile's load per later group (priced, as the rest, by the cost
        # model; on a tie, where the loads hide behind the MACs, still the fewer loads)
        plan = min((serpentine, plan), key=lambda p: columns_cycles(p, hw))
    return plan


def stagger_parts(words: int, f: int, at_f: bool) -> tuple[tuple[int, int], tuple[int, int]]:
    """The next tile's words [o0, o1) that load during the current tile, and those that load
    after its MACs drain, when the next tile goes to base F (`at_f`) or to 0."""
    return ((words - f, words), (0, words - f)) if at_f else ((0, f), (f, words))


def columns_cycles(plan: ConvPlan, hw: SnowflakeConfig) -> float:
    """The column split's cost model, as plan/conv.residual_cycles for COOP's residual plans: the
    larger of the CUs' time (a C-cycle trace and a bypass VMOV per pixel and kernel tile) and the
    DRAM traffic (each CU's row segments, the bypass, the output, the kernels per group unless
    resident) at the bus's and the load units' rate, plus what nothing overlaps: the first
    kernel tile and row, and every kernel tile's load that is not double-buffered."""
    s = plan.shape
    lay = column_layout(s, hw, max(st.y1 - st.y0 for st in plan.strips))
    cu = s.oh * lay.q * plan.tiles * (s.c + (hw.vmov_cycles if plan.bypass_addr is not None else 0))
    kernels = hw.vmacs_per_cu * indp_kernel_words(s, hw) * 2
    sends = kernel_tile_sends(plan)
    per_row = hw.cus * (lay.seg + (lay.out_seg if plan.bypass_addr is not None else 0)) * 2
    traffic = s.oh * per_row + 2 * s.oh * s.ow * s.k + kernels * sends
    lds = s.oh * hw.cus * ((lay.q if lay.gathered else 1) + (plan.bypass_addr is not None)) + hw.vmacs_per_cu * sends
    exposed = per_row + kernels  # the first group loads row by row: its first row's MACs wait for one
    waits = 0.0
    if plan.tiles > 1 and not plan.double_buffer_weights and not plan.resident_weights:
        # every kernel tile (its part over the current one, staggered) loads behind a flush
        late = kernels * (1 - plan.stagger / indp_kernel_words(s, hw))
        exposed += (sends - 1) * late
        waits = (sends - 1) * (hw.ld_startup_cycles + FLUSH_COST * hw.vector_queue_depth)
    return max(cu, load_cycles(hw, traffic, lds)) + exposed / hw.dram_bytes_per_cycle + waits
