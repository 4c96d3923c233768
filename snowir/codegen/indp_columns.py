"""
Code of a column-split INDP conv (`cu_split = cols`, snowir/plan/indp_columns.py): weights
broadcast across CUs as in codegen/indp.py, but CU c computes output columns [c·q, (c+1)·q) of
every row of a row group, so `vmov stride` = 2·q·K bytes and a residual conv's `vmov bypass`
finds CU c's bypass q·K words on, in its own buffer. Each kernel tile over a group is the
ordinary pixel code (codegen/pixels.kernel_tile) over CU 0's columns — the conv over q columns
whose input rows lie `seg` words apart and whose output rows lie OW·K words apart; the other
CUs run the same instructions on their own segments. The next group's rows load a part per
kernel tile (behind that tile's first 16 vector ops), so its loads share the bus with the
kernel tiles' instead of queueing before them.
"""

from __future__ import annotations

from dataclasses import replace

from snowir.codegen.builder import AsmBuilder
from snowir.codegen.indp import load_kernel_tile, tile_mask
from snowir.codegen.loads import load_biases, load_runs, preload_next_kernels
from snowir.codegen.pixels import kernel_tile
from snowir.codegen.traces import Prefetch, R_SRC, R_TMP, R_TO, R_TT, R_TW, set_writeback
from snowir.dialects import snowflake_asm as sf
from snowir.hw import SnowflakeConfig
from snowir.dialects.tile.decisions import kernel_tile_order
from snowir.plan.indp_columns import ColumnLayout, column_layout, stagger_parts
from snowir.plan.shapes import ConvPlan, Strip, indp_kernel_words, kernels_per_tile, plan_machine


def _row_loads(plan: ConvPlan, lay: ColumnLayout, hw: SnowflakeConfig, gi: int, rows: range) -> list:
    """Per output row of group `gi` in `rows`: each CU's input row segment and bypass segment."""
    s, st = plan.shape, plan.strips[gi]
    runs = []
    for y in rows:
        i = y - st.y0
        for c in range(hw.cus):
            runs += [(lay.maps_at(gi % 2, i) + at, src, n, c)
                     for at, src, n in lay.maps_loads(s, plan.in_addr, y, c, plan.in_row)]
        if plan.bypass_addr is not None:  # rows OW·K words apart, or a crop's source's width
            for c in range(hw.cus):
                runs.append((lay.bypass_at(gi % 2, i) + c * lay.out_seg,
                             plan.bypass_addr + 2 * (y * (plan.bypass_row or s.ow * s.k) + c * lay.q * s.k),
                             lay.out_seg, c))
    return runs


def _load_rows(b: AsmBuilder, plan: ConvPlan, lay: ColumnLayout, hw: SnowflakeConfig, gi: int, rows: range) -> None:
    if len(rows):
        with b.at(f"load_maps.group{gi}.rows{rows.start}_{rows.stop - 1}"):
            load_runs(b, hw, _row_loads(plan, lay, hw, gi, rows))


def _parts(rows: range, n: int) -> list[range]:
    """`rows` in n consecutive parts, as even as they go."""
    cut = [rows.start + len(rows) * i // n for i in range(n + 1)]
    return [range(a, b) for a, b in zip(cut, cut[1:])]


def generate_indp_columns(plan: ConvPlan, hw: SnowflakeConfig) -> AsmBuilder:
    """Row groups in turn (two slots), every kernel tile per group (Kloop, in `kernel_order`: under
    serpentine a group starts with the tile the previous one ended with, not loaded again): kernel tiles
    resident, double-buffered in the weights slots, staggered, or loaded after the previous one's
    MACs drain."""
    hw = plan_machine(plan, hw)  # room for a `maps` layout's bias block
    s = plan.shape
    b = AsmBuilder()
    set_writeback(b, s, hw)
    lay = column_layout(s, hw, max(st.y1 - st.y0 for st in plan.strips))
    words = indp_kernel_words(s, hw)
    tile = kernels_per_tile(hw)
    # CU 0's columns: input rows `seg` words apart (one per output row), output rows OW x K words apart
    view = replace(plan, shape=replace(s, h=s.oh, w=lay.seg // s.cin, sy=1, sx=1 if lay.gathered else s.sx),
                   out_row=s.ow * s.k)
    base_of = (lambda t: t * words) if plan.resident_weights else (lambda t: 0)  # noqa: E731
    groups = [range(st.y0, st.y1) for st in plan.strips]
    load_kernel_tile(b, plan, hw, 0, 0)
    if plan.weights_before_fence:  # after a max pool: the kernels load while it runs, the maps after
        b.flush_vector_queue(hw, R_TMP)
    load_biases(b, plan, hw)
    for part in _parts(groups[0], len(groups[0])):  # row by row: the first MACs wait for one row
        _load_rows(b, plan, lay, hw, 0, part)
    if plan.resident_weights:
        for t in range(1, plan.tiles):
            load_kernel_tile(b, plan, hw, t, base_of(t))
    b.const(R_TMP, 2 * lay.out_seg)
    b.emit(sf.VmovOp(sf.VectorMode.INDP, sf.VmovSelect.STRIDE, R_TMP))
    reload = not plan.resident_weights and plan.tiles > 1
    slot = 0  # weights slot of the tile being computed (double-buffered: a new tile takes the other)
    items = [(gi, t) for gi in range(len(groups)) for t in kernel_tile_order(plan, gi)]
    for i, (gi, t) in enumerate(items):
        st = plan.strips[gi]
        part = i - gi * plan.tiles  # the kernel tile's place in its group: which part of the next group loads
        nxt_rows = _parts(groups[gi + 1], plan.tiles)[part] if gi + 1 < len(groups) else range(0)
        nt = items[i + 1][1] if i + 1 < len(items) else t
        load = reload and nt != t  # the next item's kernel tile is another: it loads
        with b.at(f"group{gi}.ktile{t}"):
            prefetch: list[Prefetch] = []
            if load and plan.double_buffer_weights:
                prefetch.append(lambda bb, nt=nt, buf=((slot + 1) % 2) * plan.w_slot: load_kernel_tile(bb, plan, hw, nt, buf))
            if load and plan.stagger:  # the next tile's words clear of this one's
                early, late = stagger_parts(words, plan.stagger, slot % 2 == 0)
                prefetch.append(lambda bb, nt=nt, buf=((slot + 1) % 2) * plan.stagger, o=early:
                                load_kernel_tile(bb, plan, hw, nt, buf, o))
            if len(nxt_rows):
                prefetch.append(lambda bb, g=gi + 1, rows=nxt_rows: _load_rows(bb, plan, lay, hw, g, rows))
            if i + 1 == len(items) and plan.preload:  # the next conv's kernel tile 0, into the other slot
                prefetch.append(lambda bb: preload_next_kernels(bb, plan, R_SRC))
            mask = tile_mask(plan, hw, t, hw.cus)
            b.const(R_TW, base_of(t) + (slot % 2) * (plan.w_slot if plan.double_buffer_weights else plan.stagger))
            b.const(R_TT, t * tile)
            b.const(R_TO, 2 * t * tile)
            strip = Strip(st.y0, st.y1, st.y0, st.y1, gi % 2)
            bypass = lay.bypass_at(gi % 2, 0) - st.y0 * lay.out_seg if plan.bypass_addr is not None else None
            kernel_tile(b, view, hw, strip, lay.maps_at(gi % 2, 0), 0, mask, prefetch, bypass_base=bypass)
            if load and not plan.double_buffer_weights:
                b.flush_vector_queue(hw, R_TMP)
                if plan.stagger:
                    load_kernel_tile(b, plan, hw, nt, ((slot + 1) % 2) * plan.stagger, late)
                else:
                    load_kernel_tile(b, plan, hw, nt, 0)
            slot += load
    return b
