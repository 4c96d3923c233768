"""
The bodies of a layer's tiles: a conv's kernel tile and maps tiles (their loads and windows) and
a pool's tiles, from the plan; `body_difference` says how a written body differs from the one
its attributes imply (snowir/tile/check.py refuses it; snowir/tile/derive.py fills an empty one).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from xdsl.dialects.builtin import DenseArrayBase, IntegerAttr, i64
from xdsl.ir import Operation

from snowir.dialects import snowflake_asm as sf, tile
from snowir.dialects.tile.decisions import CU_ROWS, KERNEL_TILE, RING, SLOT, write_decisions
from snowir.hw import SnowflakeConfig
from snowir.plan.indp_columns import column_layout
from snowir.plan.layout import ConvLayout, bias_block_load
from snowir.plan.pool import ring_loads
from snowir.plan.shapes import (ConvPlan, ConvShape, LoweringError, PoolShape, Strip, band_plans, indp_kernel_words,
                                input_columns, input_rows, kernel_vmacs, kernels_per_tile, row_runs)
from snowir.plan.pool_shapes import PoolTile

def tile_base(plan: ConvPlan, strip: Strip, hw: SnowflakeConfig) -> int:
    """The maps-buffer word a maps tile's input rows start at: its bank (a residual conv's
    half of the buffer), 0 when it fills the buffer or the layer's tiles take turns there."""
    if strip.bank <= 0:
        return 0
    return strip.bank * (hw.maps_buffer_elements // 2 if plan.bypass_addr is not None else hw.maps_bank_elements)


def conv_tile_body(s: ConvShape, plan: ConvPlan, lay: ConvLayout, hw: SnowflakeConfig) -> list[Operation]:
    """The kernel tile and the maps tiles (loads, windows) of a planned conv."""
    w_addr, out_addr, r_addr = lay.w_addr, lay.out_addr + 2 * lay.out_first, lay.r_addr
    if lay.out_pixel:  # a channel slice of a wider tensor, an interleave's phase, blocks: pixels `out_pixel` words apart
        if lay.out_row not in (0, s.ow * lay.out_pixel) and (plan.column_tiled or plan.indp or plan.pool is not None or plan.bypass_slices):
            raise LoweringError("a conv writing an interleave's phase (rows apart by more than its own) runs COOP, "
                                "by rows, without a fused pool or bypass slices")
        if (plan.cu_split == "cols" or plan.pool is not None) and not lay.out_tile:  # blocks: tile.placement.tiles_refusal
            raise LoweringError("a conv writing a channel slice of a concat runs without a fused pool and, in INDP, "
                                "with the CUs splitting rows (a column-split INDP conv's CU stride is its bypass's too)")
        plan = dataclasses.replace(plan, out_row=lay.out_row or s.ow * lay.out_pixel, out_pixel=lay.out_pixel,
                                   out_tile=lay.out_tile)
    if lay.in_row:  # the input a crop's window: loads from its first pixel, rows the tensor's width apart
        plan = dataclasses.replace(plan, in_addr=lay.in_addr + 2 * lay.in_first, in_row=lay.in_row)
    if lay.bypass_row:  # the residual input a crop's window: bypass slices cannot follow it
        if plan.bypass_slices:
            raise LoweringError("bypass_slices: a bypass that is a crop's window is read by rows (the slices' loads "
                                "step the bypass pixel by pixel through a strip, one run of the tensor's rows; "
                                "remove bypass_slices and slice_tiles)")
        plan = dataclasses.replace(plan, bypass_addr=(r_addr or 0) + 2 * lay.bypass_first, bypass_row=lay.bypass_row)
    if lay.cu_stride:  # a merged conv's phases in place: phase row a's kernels on CU a
        if plan.indp or plan.tiles != 1 or s.kernel_words > hw.weights_buffer_elements:
            raise LoweringError("a merged conv writing its phases in place runs COOP in one kernel tile")
        plan = dataclasses.replace(plan, cu_stride=lay.cu_stride, per_cu=lay.per_cu)
    if plan.indp:  # vMAC v of every CU: 16 interleaved kernels (weights broadcast)
        words = indp_kernel_words(s, hw)
        kernel_loads = [tile.LoadOp(tile.BufferKind.WEIGHTS, words, w_addr + 2 * v * words, 0, 0, hw.vmacs + v)
                        for v in range(hw.vmacs_per_cu)]
        per_tile = kernels_per_tile(hw)
    elif plan.coop_rows:  # vMAC v of every CU: kernel v of the tile (weights broadcast)
        per_tile = plan.kernels
        kernel_loads = [tile.LoadOp(tile.BufferKind.WEIGHTS, s.kernel_words, w_addr + 2 * j * s.kernel_words, 0, 0,
                                    hw.vmacs + j) for j in range(per_tile)]
    else:
        per_tile = plan.kernels
        vmacs = kernel_vmacs(plan, hw, s.k if plan.per_cu else per_tile)  # a merged conv in place: its kernels' vMACs
        kernel_loads = [tile.LoadOp(tile.BufferKind.WEIGHTS, s.kernel_words, w_addr + 2 * j * s.kernel_words, 0, 0, v)
                        for j, v in enumerate(vmacs)] if s.kernel_words <= hw.weights_buffer_elements else []
    if s.bias_at == "maps":  # the bias block after the kernels, once, to the top of the maps buffer
        src, base, words = bias_block_load(s, plan.mode, per_tile, w_addr, hw)
        kernel_loads.append(tile.LoadOp(tile.BufferKind.MAPS, words, src, base, 0, sf.SELECT_ALL))
    ktile = tile.KernelTileOp(0, per_tile, plan.tiles, kernel_loads)
    if plan.double_buffer_weights:
        SLOT.write(ktile, plan.w_slot)
    write_decisions(KERNEL_TILE, plan, ktile.properties)
    ops: list[Operation] = [ktile]
    ids = iter(range(1 << 30))
    for load in kernel_loads:
        load.properties["load_id"] = IntegerAttr(next(ids), i64)
    if plan.column_tiled:  # each column band's tiles: its input columns, rows of the whole width apart
        for (x0, x1), band in band_plans(plan):
            for mt in _maps_tiles(band, out_addr + 2 * x0 * (lay.out_pixel or s.k), r_addr, hw, ids):
                c0, c1 = input_columns(s, x0, x1)
                mt.properties["out_cols"] = DenseArrayBase.from_list(i64, [x0, x1])
                mt.properties["in_cols"] = DenseArrayBase.from_list(i64, [c0, c1])
                ops.append(mt)
        return ops
    return ops + _maps_tiles(plan, out_addr, r_addr, hw, ids)


BODY_RULES: dict[tuple[str, str], str] = {
    ("tile.load", "buffer"): "a kernel tile loads weights (and, biases maps, the bias block to the maps buffer), "
                             "a maps tile maps",
    ("tile.load", "length"): "a maps load's words are its rows' (in_rows, cu_rows in row groups) x the input row's "
                             "words; a kernel load's a kernel's (or 16 interleaved kernels' in INDP)",
    ("tile.load", "dram_addr"): "the maps (weights) region's offset + 2 x the words before its first row (kernel)",
    ("tile.load", "buf_addr"): "its tile's bank (maps_buffering) or the row's place in it; kernel loads at 0 "
                               "(the kernel tile's slot / stagger place them)",
    ("tile.load", "select"): "the mode: every CU (COOP maps), CU c its own rows (INDP, coop_rows), vMAC j kernel j "
                             "(row groups: broadcast 16+j)",
    ("tile.window", ""): "the layer's shape, the tile's out_rows, the mode and the output region",
}
"""What each field of a derived body follows from (the rule a body edit is refused by)."""


def body_difference(have: Operation, want: Operation) -> str | None:
    """The first field where a tile's written body differs from the one its attributes imply, with
    the rule it follows from: bodies are derived (conv_tile_body, pool_tile_body), so a body edit
    is refused naming what to edit instead. None: the bodies agree (NOT_SCHEDULE fields aside)."""
    a, b = tile.body_ops(have), tile.body_ops(want)
    if len(a) != len(b) or any(x.name != y.name for x, y in zip(a, b)):
        return (f"{len(a)} loads and windows ({', '.join(o.name for o in a) or 'none'}) where its attributes imply "
                f"{len(b)} ({', '.join(o.name for o in b)}): a tile's loads follow its rows and the mode")
    counts: dict[str, int] = {}
    for x, y in zip(a, b):
        i = counts[x.name] = counts.get(x.name, -1) + 1
        for k in sorted(x.properties.keys() | y.properties.keys()):
            if k in ("unit", "load_id") or x.properties.get(k) == y.properties.get(k):
                continue
            got, exp = (str(o.properties[k]).split(" : ")[0] if k in o.properties else "(absent)" for o in (x, y))
            rule = BODY_RULES.get((x.name, k)) or BODY_RULES.get((x.name, ""), "")
            return f"{x.name} {i}: {k} {got} where its attributes imply {exp} ({rule})"
    return None


def _maps_tiles(plan: ConvPlan, out_addr: int, r_addr: int | None, hw: SnowflakeConfig,
                ids: Iterator[int]) -> list[tile.MapsTileOp]:
    """The maps tiles (loads, windows) of a plan's strips; its shape is what the tiles load (a
    gathering conv's compact input, a column band's columns)."""
    s = plan.shape
    row = s.w * s.cin
    in_row, stride_rows, c_base = plan.in_row or row, 1, 0
    if plan.gather is not None:
        # the layer loads only what it reads (the plan's `gather` (plan/conv.py): a channel slice's channels,
        # a strided 1x1's pixels): strips, loads and windows are over the compact image the
        # plan was made for, compact row r being DRAM row r * sy from channel c0 on
        stride_rows, _, w_in, cin_row, c_base = plan.gather
        in_row = plan.in_row or w_in * cin_row  # a crop's source's rows, or the gathered tensor's own
    out_row = plan.out_row or s.ow * s.k
    if plan.indp and plan.cu_split == "cols":
        return _column_tiles(plan, out_addr, r_addr, hw, ids)
    ops: list[tile.MapsTileOp] = []
    prev_end = 0
    for si, strip in enumerate(plan.strips):
        words = (strip.r1 - strip.r0) * row
        base = tile_base(plan, strip, hw)
        if plan.row_groups:  # each CU its own rows of the row group, at the same buffer address
            r = plan.cu_rows[si]
            cu_rows = [input_rows(s.h, s.kh, s.sy, s.pt, y, y + r) for y in range(strip.y0, strip.y1, r)]
            if plan.gather is not None:  # CU c's compact rows, gathered (codegen/indp.group_runs), a load a row
                loads = [tile.LoadOp(tile.BufferKind.MAPS, row, plan.in_addr + 2 * (r * stride_rows * in_row + c_base),
                                     base + (r - r0) * row, 0, c) for c, (r0, r1) in enumerate(cu_rows) for r in range(r0, r1)]
            else:
                loads = [tile.LoadOp(tile.BufferKind.MAPS, n, plan.in_addr + 2 * src, base + at, 0, c)
                         for c, (r0, r1) in enumerate(cu_rows) for at, src, n in row_runs(r0, r1, row, in_row)]
        elif in_row != row and plan.gather is None:  # a column band: one LD per row
            loads = [tile.LoadOp(tile.BufferKind.MAPS, row, plan.in_addr + 2 * r * in_row, base + (r - strip.r0) * row,
                                 0, sf.SELECT_ALL) for r in range(strip.r0, strip.r1)]
        else:
            loads = [tile.LoadOp(tile.BufferKind.MAPS, words, plan.in_addr + 2 * (strip.r0 * stride_rows * in_row + c_base), base, 0,
                                 sf.SELECT_ALL)]
        windows = []
        y = strip.y0
        while y < strip.y1:
            iy = y * s.sy - s.pt
            ky0, ky1 = max(0, -iy), min(s.kh, s.h - iy)
            y_end = y + 1
            while y_end < strip.y1 and (max(0, -(y_end * s.sy - s.pt)),
                                         min(s.kh, s.h - (y_end * s.sy - s.pt))) == (ky0, ky1):
                y_end += 1
            if ky1 <= ky0:  # rows of padding alone: a one-word MAC a pixel, its bias (codegen/pixels._bias_only)
                windows.append(tile.WindowOp(1, 1, s.ow, y_end - y, 0, 0, 0, out_addr + 2 * y * out_row,
                                             bias_vmov=True, bypass_vmov=r_addr is not None))
                y = y_end
                continue
            windows.append(tile.WindowOp(s.kw * s.c if s.groups == 1 or s.block_maps else s.c, ky1 - ky0, s.ow, y_end - y,
                                         s.sx * s.cin, s.sy * row,
                                         (iy + ky0 - strip.r0) * row if iy + ky0 >= strip.r0 else 0,
                                         out_addr + 2 * y * out_row, bias_vmov=True,
                                         bypass_vmov=r_addr is not None))
            y = y_end
        overlap = max(0, prev_end - strip.r0) if si else 0
        prev_end = strip.r1
        for load in loads:
            load.properties["load_id"] = IntegerAttr(next(ids), i64)
        mt = tile.MapsTileOp((strip.y0, strip.y1), (strip.r0, strip.r1), overlap, -1, [*loads, *windows])
        if plan.row_groups:
            CU_ROWS.write(mt, plan.cu_rows[si])
        ops.append(mt)
    return ops


def _column_tiles(plan: ConvPlan, out_addr: int, r_addr: int | None, hw: SnowflakeConfig,
                  ids: Iterator[int]) -> list[tile.MapsTileOp]:
    """A column-split INDP layer's row groups (snowir/plan/indp_columns.py): per output row, each
    CU's LD (select c) of its input row segment into the group's slot; one window per CU's row
    segment (q pixels, sx x C words apart), the output rows OW x K words apart."""
    s = plan.shape
    lay = column_layout(s, hw, max(st.y1 - st.y0 for st in plan.strips))
    ops: list[tile.MapsTileOp] = []
    prev_end = 0
    for si, st in enumerate(plan.strips):
        loads = [tile.LoadOp(tile.BufferKind.MAPS, n, src, lay.maps_at(si % 2, i) + at, 0, c)
                 for i, y in enumerate(range(st.y0, st.y1)) for c in range(hw.cus)
                 for at, src, n in lay.maps_loads(s, plan.in_addr, y, c, plan.in_row)]
        step = s.cin if lay.gathered else s.sx * s.cin
        window = tile.WindowOp(s.c, 1, lay.q, st.y1 - st.y0, step, lay.seg, lay.maps_at(si % 2, 0),
                               out_addr + 2 * st.y0 * s.ow * s.k, bias_vmov=True, bypass_vmov=r_addr is not None)
        for load in loads:
            load.properties["load_id"] = IntegerAttr(next(ids), i64)
        ops.append(tile.MapsTileOp((st.y0, st.y1), (st.r0, st.r1), max(0, prev_end - st.r0) if si else 0, -1,
                                   [*loads, window]))
        prev_end = st.r1
    return ops


def pool_tile_body(p: PoolShape, tiles: list[PoolTile], hw: SnowflakeConfig, in_addr: int = 0) -> list[Operation]:
    """A max pool's maps tiles with their loads (broadcast) from its input at DRAM `in_addr`: a
    strip's rows in one LD, a ring's LDs in the order `ring_loads` issues them, into slot (r - r0) mod N."""
    row = p.w * p.cin
    ops: list[Operation] = []
    for t in tiles:
        st = t.strip
        if t.ring:
            loads = [tile.LoadOp(tile.BufferKind.MAPS, rows * row, in_addr + 2 * r * row, ((r - st.r0) % t.ring) * row, 0,
                                 sf.SELECT_ALL) for _, r, rows in ring_loads(p, t)]
        else:
            loads = [tile.LoadOp(tile.BufferKind.MAPS, (st.r1 - st.r0) * row, in_addr + 2 * st.r0 * row,
                                 max(st.bank, 0) * hw.maps_bank_elements, 0, sf.SELECT_ALL)]
        mt = tile.MapsTileOp((st.y0, st.y1), (st.r0, st.r1), 0, -1, loads)
        if t.ring:
            RING.write(mt, t.ring)
        ops.append(mt)
    return ops
