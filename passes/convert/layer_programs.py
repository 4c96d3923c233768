"""
The program of each device layer kind from its `tile.layer` alone, behind the registry's uniform
signature (snowir/device_layers.py: `program`, tile-to-asm calls it): `(layer, hw) -> (key,
generate)`: the layer's bodies derived and its decisions checked for `hw` (TileError /
LoweringError refuse), then a key under which layers with equal decisions share one generated
program, and the generator to call. (At the passes' level: it joins the tile IR and the code
generators, which do not import each other.)
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import replace

from xdsl.ir import Operation

from snowir.codegen.conv import generate_conv
from snowir.codegen.indp_columns import generate_indp_columns
from snowir.codegen.pool import generate_pool
from snowir.dialects import tile
from snowir.hw import SnowflakeConfig
from snowir.tile.placement import output_channels, regions_of
from snowir.tile.check import check_conv, check_pool
from snowir.tile.derive import derive_layer
from snowir.tile.read import conv_plan_of, pool_tiles_of
from snowir.plan.weights_end import preload_loads, preload_maps_split

Program = tuple[Hashable, Callable[[], list[Operation]]]


def conv_program(layer: tile.LayerOp, hw: SnowflakeConfig, following: tile.LayerOp | None = None,
                 preceding: tile.LayerOp | None = None) -> Program:
    """`following`: the next conv in the program when it is `kernels_preloaded` or `maps_preloaded`
    (tile-to-asm checks it may be): this conv's last kernel tile loads its kernel tile 0, its first
    maps strip (the rows it can while it computes). `preceding`: the conv before, when this one is
    `maps_preloaded`: the rows of the first strip it left, this conv loads (`preload_maps_split`)."""
    derive_layer(layer, hw)
    plan = conv_plan_of(layer)
    check_conv(layer, plan, hw)
    if following is not None:
        derive_layer(following, hw)
        nxt = conv_plan_of(following)
        plan = replace(plan, preload=preload_loads(nxt, hw) if nxt.kernels_preloaded else (),
                       preload_maps=preload_maps_split(plan, nxt, hw)[0] if nxt.maps_preloaded else ())
    if preceding is not None and plan.maps_preloaded:
        derive_layer(preceding, hw)
        plan = replace(plan, maps_left=preload_maps_split(conv_plan_of(preceding), plan, hw)[1])
    # a column-split INDP conv has its own generator (its CUs split columns, not rows)
    gen = generate_indp_columns if plan.indp and plan.cu_split == "cols" else generate_conv
    return ("conv", plan), lambda: gen(plan, hw).ops


def pool_program(layer: tile.LayerOp, hw: SnowflakeConfig) -> Program:
    derive_layer(layer, hw)
    p, tiles = pool_tiles_of(layer)
    check_pool(layer, p, tiles, hw)
    regions = regions_of(layer)
    first, _, total = output_channels(regions["output"])  # a device concat's slice: whole pixels apart
    addrs = (regions["maps"].offset.value.data, regions["output"].offset.value.data + 2 * first)
    return ("pool", p, addrs, tuple(tiles), total), lambda: generate_pool(p, hw, *addrs, tiles, total).ops
