"""
A `tile.layer` read back as the decisions the code generators follow: a conv's `ConvPlan`, a
max pool's `PoolTile`s. Pure reading, no planner and no hardware configuration: every
decision the generated code depends on is an attribute or op of the layer (docs/dialects.md
lists them), so an edit of any of them changes the plan, and tile-to-asm's code with it.
"""

from __future__ import annotations


from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import PassFailedException

from snowir.dialects import tile
from snowir.device_layers import DEVICE_OPS
from snowir.dialects.tile.decisions import CU_ROWS, KERNEL_TILE, LAYER, MAPS_BUFFERING, RING, SLOT, plan_decisions
from snowir.errors import SnowError
from snowir.nn_util import on_host
from snowir.plan.shapes import ConvPlan, ConvShape, PoolShape, Strip, compact_shape, input_rows
from snowir.plan.pool_shapes import PoolTile
from snowir.tile.build import conv_shape_of, pool_shape_of, shape_of
from snowir.tile.placement import (bypass_blocks, input_offset, input_placement, output_cus, output_placement, output_tile_step,
                                   regions_of)


class TileError(SnowError):
    """A tile layer the code generators cannot follow: one line naming the layer, the op and the rule."""

    def __init__(self, layer: tile.LayerOp, message: str):
        super().__init__(f"layer @{layer.sym_name.data}: {message}")


def compact_shape_of(layer: tile.LayerOp) -> ConvShape:
    """A conv layer's shape over what it loads (its `gather`'s compact input, else its own)."""
    s = shape_of(layer)
    gather = gather_in(layer)
    return compact_shape(s, gather) if gather is not None else s


def gather_in(layer: tile.LayerOp) -> tuple[int, int, int, int, int] | None:
    """The layer's `gather` as ConvPlan.gather's tuple."""
    return tuple(layer.gather.values().values()) if layer.gather is not None else None  # type: ignore[return-value]


def input_rows_of(layer: tile.LayerOp, y0: int, y1: int) -> tuple[int, int]:
    """Input rows [r0, r1) output rows [y0, y1) of the layer read (a gathering conv's compact
    input's), at least one: a maps tile's `in_rows`."""
    if isinstance(layer.shape, tile.PoolShapeAttr):
        p = pool_shape_of(layer.shape)
        r0, r1 = input_rows(p.h, p.kh, p.sy, p.pt, y0, y1)
    else:
        s = compact_shape_of(layer)
        r0, r1 = input_rows(s.h, s.kh, s.sy, s.pt, y0, y1)
    return r0, max(r1, r0 + 1)


def kernel_tile_of(layer: tile.LayerOp) -> tile.KernelTileOp:
    ktiles = [op for op in layer.body.block.ops if isinstance(op, tile.KernelTileOp)]
    if len(ktiles) != 1:
        raise TileError(layer, f"a conv layer has one tile.kernel_tile (it repeats over the kernel tiles), found {len(ktiles)}")
    return ktiles[0]


def maps_tiles_of(layer: tile.LayerOp) -> list[tile.MapsTileOp]:
    tiles = [op for op in layer.body.block.ops if isinstance(op, tile.MapsTileOp)]
    if not tiles:
        raise TileError(layer, "no tile.maps_tile: maps tiles cover output rows 0..OH in order")
    return tiles


def _offset(layer: tile.LayerOp, regions: dict[str, tile.DramRegionOp], label: str) -> int:
    if label not in regions:
        raise TileError(layer, f"no '{label}' tile.dram_region")
    return regions[label].offset.value.data


def buffering_of(layer: tile.LayerOp) -> tile.MapsBuffering:
    buffering = MAPS_BUFFERING.value(layer)
    if buffering is None:
        raise TileError(layer, "no maps_buffering (double, whole or single): where its maps tiles sit")
    return buffering


def strips_of(layer: tile.LayerOp, tiles: list[tile.MapsTileOp]) -> tuple[Strip, ...]:
    """The maps tiles as strips, each in the bank its index and the layer's buffering give."""
    buffering = buffering_of(layer)
    strips: list[Strip] = []
    i = 0  # the tile's place in its column band: each band starts again in bank 0
    for mt in tiles:
        (y0, y1), (r0, r1) = mt._ints("out_rows"), mt._ints("in_rows")
        cols = cols_of(mt)
        i = i + 1 if strips and (strips[-1].x0, strips[-1].x1) == cols[:2] else 0
        bank = -1 if buffering == tile.MapsBuffering.WHOLE else 0 if buffering == tile.MapsBuffering.SINGLE else i % 2
        strips.append(Strip(y0, y1, r0, r1, bank, *cols))
    return tuple(strips)


def cols_of(mt: tile.MapsTileOp) -> tuple[int, int, int, int]:
    """A maps tile's (out_cols, in_cols) as Strip's x0, x1, c0, c1; zeros when it spans every column."""
    if mt.out_cols is None:
        return 0, 0, 0, 0
    c = mt._ints("in_cols") if mt.in_cols is not None else (0, 0)
    return (*mt._ints("out_cols"), *c)  # type: ignore[return-value]


def conv_plan_of(layer: tile.LayerOp) -> ConvPlan:
    """The conv layer's decisions exactly as its IR states them."""
    if not isinstance(layer.shape, tile.ConvShapeAttr):
        raise TileError(layer, "a conv layer needs `shape = #tile.conv_shape<...>`")
    if layer.loop_order is None:
        raise TileError(layer, "no loop_order: run tile-loop-order first (or write Kloop / Mloop)")
    if layer.mode is None:
        raise TileError(layer, "no mode (COOP or INDP)")
    regions = regions_of(layer)
    in_addr, w_addr = _offset(layer, regions, "maps"), _offset(layer, regions, "weights")
    in_addr += input_offset(regions["maps"], conv_shape_of(layer.shape))  # a block of a channel-tile-major tensor
    pool = pool_shape_of(layer.pool) if layer.pool is not None else None
    out_addr = _offset(layer, regions, "conv_output" if pool is not None else "output")
    first, step, row = output_placement(regions["output"], conv_shape_of(layer.shape)) if pool is None else (0, 0, 0)
    cu_stride, per_cu = output_cus(regions["output"], conv_shape_of(layer.shape)) if pool is None else (0, 0)
    out_tile = output_tile_step(regions["output"], conv_shape_of(layer.shape)) if pool is None else 0
    pool_out = _offset(layer, regions, "output") if pool is not None else 0
    bypass = _offset(layer, regions, "bypass") if "bypass" in regions else None
    full = conv_shape_of(layer.shape)
    in_first, in_row = input_placement(regions["maps"], full.cin)  # a crop's window: from its first pixel
    bypass_first, bypass_row = input_placement(regions.get("bypass"), full.k)
    bypass_block, bypass_tile = bypass_blocks(regions.get("bypass"), full)
    kt = kernel_tile_of(layer)
    tiles = maps_tiles_of(layer)
    mode = layer.mode.data.value
    decided = plan_decisions(LAYER, layer) | plan_decisions(KERNEL_TILE, kt)
    cu_rows: tuple[int, ...] = ()
    split = decided["cu_split"]
    if split == "cols":
        given = [i for i, mt in enumerate(tiles) if CU_ROWS.value(mt) is not None]
        if given:
            raise TileError(layer, f"maps tile {given[0]}: cu_rows: with cu_split = cols every CU takes columns of "
                                   "every row of a tile (remove cu_rows)")
    elif mode == "INDP" and bypass is not None:
        raise TileError(layer, "an INDP residual conv runs with cu_split = cols (each CU's bypass where its "
                               "write-back goes; or mode COOP)")
    elif mode == "INDP" or decided["coop_rows"]:
        missing = [i for i, mt in enumerate(tiles) if CU_ROWS.value(mt) is None]
        if missing:
            what = "an INDP" if mode == "INDP" else "a coop_rows"
            raise TileError(layer, f"maps tile {missing[0]}: {what} maps tile (a row group) needs cu_rows "
                                   "(or write its body empty `{}` to derive it)")
        cu_rows = tuple(CU_ROWS.value(mt) for mt in tiles)
    slot = SLOT.value(kt)
    return ConvPlan(
        compact_shape_of(layer), strips_of(layer, tiles), kt._int("repeat"), kt._int("count"), slot is not None,
        in_addr + 2 * in_first, w_addr, out_addr + 2 * first, mode, layer.loop_order.data.value,
        None if bypass is None else bypass + 2 * bypass_first + bypass_block, cu_rows,
        bypass_slices=bool(decided["slice_bases"]), pool=pool, pool_out_addr=pool_out,
        w_slot=slot or 0, in_row=in_row, bypass_row=bypass_row, bypass_tile=bypass_tile,
        out_row=row, out_pixel=step, cu_stride=cu_stride, per_cu=per_cu, out_tile=out_tile, **decided)  # type: ignore[arg-type]


def pool_tiles_of(layer: tile.LayerOp) -> tuple[PoolShape, list[PoolTile]]:
    """A max pool layer's shape and maps tiles (strips in their banks, or rings)."""
    if not isinstance(layer.shape, tile.PoolShapeAttr):
        raise TileError(layer, "a maxpool layer needs `shape = #tile.pool_shape<...>`")
    tiles = maps_tiles_of(layer)
    strips = strips_of(layer, tiles)
    return pool_shape_of(layer.shape), [PoolTile(st, RING.value(mt) or 0)
                                        for st, mt in zip(strips, tiles)]


def _untiled(module: ModuleOp) -> bool:
    """Whether an nn device layer still has neither a tile nor an image (nn-to-tile has not run)."""
    return any(isinstance(op, DEVICE_OPS) and not on_host(op) and "tile" not in op.attributes
               and "image" not in op.attributes for op in module.walk())


def refuse_unlowered(module: ModuleOp, pass_name: str) -> None:
    """An asm pass on a module whose device layers have no program yet (tile layers, or nn device
    layers without a tile or an image) is refused in one line: it would print the module unchanged."""
    if any(isinstance(op, tile.LayerOp) for op in module.ops) or _untiled(module):
        raise PassFailedException(f"{pass_name}: no snowflake_asm program in the module: its device layers are not "
                                  f"lowered yet (run nn-to-tile, tile-to-asm first, or snowflake-lower)")


def tile_layers(module: ModuleOp, pass_name: str) -> list[tile.LayerOp]:
    """The module's tile layers, for a tile pass; a module whose device layers are still nn ops
    is refused in one line (the pass would otherwise do nothing without saying so)."""
    layers = [op for op in module.ops if isinstance(op, tile.LayerOp)]
    if not layers and _untiled(module):
        raise PassFailedException(f"{pass_name}: no tile.layer in the module: run nn-to-tile first "
                                  f"(e.g. nn-prepare,nn-to-tile,tile-loop-order,{pass_name})")
    return layers
