"""
The derivation of what a researcher leaves empty in the tile IR (snowir/tile/check.py verifies
the result).

`derive_layer`: a `tile.kernel_tile` / `tile.maps_tile` written with an empty body `{}` gets
its derived attributes recomputed (a maps tile's `in_rows` and `overlap` from its `out_rows`;
an INDP maps tile over several row groups' rows split into its row groups; a kernel tile's
`repeat`, and in INDP its `count`), the weights repacked when the layer's mode or kernel count
no longer matches the image's `packing`, and then its loads and windows derived.
"""
from __future__ import annotations

from xdsl.dialects.builtin import DenseArrayBase, IntegerAttr, i64
from xdsl.ir import Block, Operation

from snowir.dialects import tile
from snowir.dialects.tile.decisions import CU_ROWS, MAPS_BUFFERING, PAIRED_START, SLOT
from snowir.hw import SnowflakeConfig
from snowir.plan.coop_rows import coop_rows_per_cu
from snowir.plan.fused_pool import place_ring
from snowir.plan.indp import default_rows_per_cu, group_strips, indp_groups
from snowir.plan.shapes import (ConvPlan, ConvShape, band_shape, indp_kernel_words, input_columns, bias_block_words,
                                bias_room, kernels_per_tile, plan_machine)
from snowir.tile.bodies import conv_tile_body, pool_tile_body
from snowir.tile.build import layout_of, repack, shape_of
from snowir.tile.placement import regions_of
from snowir.tile.read import (cols_of, compact_shape_of, conv_plan_of, input_rows_of, kernel_tile_of, maps_tiles_of,
                              pool_tiles_of)


def _empty(op: Operation) -> bool:
    """Written empty, `{}`: to be derived (tile.to_derive)."""
    return tile.to_derive(op)


def _set(op: Operation, name: str, value: int | None) -> None:
    if value is None:
        op.properties.pop(name, None)
    else:
        op.properties[name] = IntegerAttr(value, i64)


def _fill(op: Operation, ops: list[Operation]) -> None:
    """`op`'s body becomes `ops` (a derived tile's loads and windows)."""
    region = op.regions[0]
    if not region.blocks:
        region.add_block(Block())
    for o in ops:
        if o.parent is not None:
            o.detach()
        region.block.add_op(o)


# ---------------------------------------------------------------------------------- derive

def derive_layer(layer: tile.LayerOp, hw: SnowflakeConfig) -> None:
    """Recompute what empty-bodied tiles leave to derivation, then fill their bodies."""
    if layer.kind.data == tile.LayerKind.MAXPOOL:
        _derive_pool(layer, hw)
    elif layer.kind.data == tile.LayerKind.CONV and isinstance(layer.shape, tile.ConvShapeAttr):
        _derive_conv(layer, hw)


def _derive_conv(layer: tile.LayerOp, hw: SnowflakeConfig) -> None:
    tiles = [op for op in layer.body.block.ops if isinstance(op, tile.KernelTileOp | tile.MapsTileOp)]
    if not any(_empty(op) for op in tiles) or layer.mode is None:
        return
    full = shape_of(layer)
    s = compact_shape_of(layer)
    indp = layer.mode.data == tile.ComputeMode.INDP
    coop_rows = not indp and layer.coop_rows is not None
    kt = kernel_tile_of(layer)
    if _empty(kt):
        if indp:
            _set(kt, "count", kernels_per_tile(hw))
        elif coop_rows:  # a kernel a vMAC of a CU, every CU the same kernels
            _set(kt, "count", hw.vmacs_per_cu)
        _set(kt, "repeat", -(-full.k // max(1, kt._int("count"))))
        repack(layer, layer.mode.data.value, kt._int("count"), hw)
        _keep_holding(layer, kt, s, hw)
    # the maps tiles' machine: with room for a `maps` layout's bias block (plan_machine)
    room = bias_room(hw, bias_block_words(full.k, max(1, kt._int("count")))) if full.bias_at == "maps" else hw
    maps = [op for op in tiles if isinstance(op, tile.MapsTileOp)]
    all_maps = all(_empty(mt) for mt in maps)  # the strips derived as a whole: the ring's slots too
    for mt in maps:
        if not _empty(mt):
            continue
        y0, y1 = mt._ints("out_rows")
        if indp and layer.cu_split is not None and layer.cu_split.data == tile.CuSplit.COLS:
            CU_ROWS.write(mt, None)  # every CU takes columns of every row of the tile
        elif indp or coop_rows:
            band = band_shape(s, *mt._ints("out_cols")) if mt.out_cols is not None else s  # a column band's rows
            per_cu = CU_ROWS.value(mt) or (default_rows_per_cu(s, room) if indp else coop_rows_per_cu(band, room))
            groups = indp_groups(s, room, y0, min(y1, s.oh), per_cu)
            if len(groups) > 1 or groups[0][1] * groups[0][2] != y1 - y0:
                # one maps tile over several row groups' rows: its row groups
                for (_, r, _), st in zip(groups, group_strips(s, groups)):
                    new = tile.MapsTileOp((st.y0, st.y1), (st.r0, st.r1), 0, -1)
                    new.regions[0].detach_block(0)  # its body to be derived
                    CU_ROWS.write(new, r)
                    for cols in ("out_cols", "in_cols"):  # a column band's groups stay in its band
                        if cols in mt.properties:
                            new.properties[cols] = mt.properties[cols]
                    layer.body.block.insert_op_before(new, mt)
                mt.detach()
                mt.erase()
                continue
            CU_ROWS.write(mt, groups[0][1])
        else:
            CU_ROWS.write(mt, None)
        mt.properties["in_rows"] = DenseArrayBase.from_list(i64, list(input_rows_of(layer, y0, y1)))
        if mt.out_cols is not None:
            mt.properties["in_cols"] = DenseArrayBase.from_list(i64, list(input_columns(s, *mt._ints("out_cols"))))
    if (indp or coop_rows) and all(_empty(mt) for mt in maps_tiles_of(layer)):
        MAPS_BUFFERING.write(layer, tile.MapsBuffering.DOUBLE)
    prev, band = 0, None
    for i, mt in enumerate(maps_tiles_of(layer)):
        r0, r1 = mt._ints("in_rows")
        first = i == 0 or cols_of(mt)[:2] != band  # a column band's first tile overlaps nothing
        if _empty(mt):
            _set(mt, "overlap", 0 if first else max(0, prev - r0))
        prev, band = r1, cols_of(mt)[:2]
    plan = conv_plan_of(layer)
    if all_maps and plan.pool is not None:
        _derive_pool_slots(layer, plan, room)
        plan = conv_plan_of(layer)
    want = conv_tile_body(full, plan, layout_of(layer), plan_machine(plan, hw))
    have = [op for op in layer.body.block.ops if isinstance(op, tile.KernelTileOp | tile.MapsTileOp)]
    if len(want) == len(have):
        for a, b in zip(have, want):
            if _empty(a):
                _fill(a, tile.body_ops(b))


def _derive_pool_slots(layer: tile.LayerOp, plan: ConvPlan, hw: SnowflakeConfig) -> None:
    """A fused pool's ring slots (`pool_slots`, derived like a tile's `in_rows`) placed above the
    new strips' maps when every maps tile is written empty; left as written when the ring has no
    room there (check_conv then says so)."""
    assert plan.pool is not None
    slots = place_ring(plan, plan.pool, hw)
    if slots is not None:
        layer.properties["pool_slots"] = DenseArrayBase.from_list(i64, list(slots))


def _keep_holding(layer: tile.LayerOp, kt: tile.KernelTileOp, s: ConvShape, hw: SnowflakeConfig) -> None:
    """An empty kernel tile keeps its slot, stagger or residency while the (new) kernels still
    fit it; one that no longer fits is dropped: the tiles are then single-buffered (a dropped
    residency takes the layer's `paired_start` with it)."""
    indp = layer.mode.data == tile.ComputeMode.INDP  # type: ignore[union-attr]
    words = indp_kernel_words(s, hw) if indp else s.kernel_words
    if words > hw.weights_buffer_elements:
        return  # a kernel streamed in chunks: its slot is the chunks'
    tiles = kt._int("repeat")
    kloop_coop = not indp and layer.loop_order is not None and layer.loop_order.data == tile.LoopOrder.KLOOP \
        and shape_of(layer).groups == 1 and layer.coop_rows is None  # coop_rows: double-buffered
    columns = layer.cu_split is not None and layer.cu_split.data == tile.CuSplit.COLS
    slot = SLOT.value(kt)
    if slot is not None and not holds("slot", slot, words, tiles, hw):
        SLOT.write(kt, None)
    if kt.stagger is not None and (not (kloop_coop or columns)
                                   or not holds("stagger", kt._int("stagger"), words, tiles, hw)):
        _set(kt, "stagger", None)
    if kt.resident is not None and (not (kloop_coop or columns) or not holds("resident", 1, words, tiles, hw)):
        kt.properties.pop("resident")
        PAIRED_START.write(layer, False)  # the first strips' tiles take turns only while the tiles are resident


def holds(how: str, value: int, words: int, tiles: int, hw: SnowflakeConfig) -> bool:
    """Whether kernel tiles of `words` a kernel fit the weights buffer held `how`: two slots
    from 0 and `value`, staggered at 0 and F = `value`, or `tiles` of them resident."""
    if how == "slot":
        return words <= value and value + words <= hw.weights_buffer_elements
    if how == "stagger":
        return value < words and words + value <= hw.weights_buffer_elements
    return tiles * words <= hw.weights_buffer_elements


def _derive_pool(layer: tile.LayerOp, hw: SnowflakeConfig) -> None:
    if not isinstance(layer.shape, tile.PoolShapeAttr):
        return
    maps = [op for op in layer.body.block.ops if isinstance(op, tile.MapsTileOp)]
    if not any(_empty(mt) for mt in maps):
        return
    for mt in maps:
        if _empty(mt):
            mt.properties["in_rows"] = DenseArrayBase.from_list(i64, list(input_rows_of(layer, *mt._ints("out_rows"))))
            _set(mt, "overlap", 0)
    p, tiles = pool_tiles_of(layer)
    for mt, op in zip(maps, pool_tile_body(p, tiles, hw, maps_at(layer))):
        if _empty(mt):
            _fill(mt, tile.body_ops(op))


def maps_at(layer: tile.LayerOp) -> int:
    """The DRAM address of the layer's input maps (0 until a DRAM plan moves them)."""
    maps = regions_of(layer).get("maps")
    return maps.offset.value.data if maps is not None else 0
