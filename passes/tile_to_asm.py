"""
tile-to-asm{hw=path.json}: every `tile.layer` becomes a `snowflake_asm.image` (its DRAM
segments and its program), following the decisions written in the tile IR.

Convs (C17 Figure 3, conv_codegen / indp_codegen): the geometry from `#tile.conv_shape`, the
mode and loop order of the layer, the maps strips of its `tile.maps_tile`s (checked against
the rows each needs), the DRAM regions and the weight image of its `tile.dram_region`s. Max
pools (pool_codegen) from `#tile.pool_shape`. An edit either changes the code or is refused in
one line. The code is straightforward: loads in program order as the generator places them,
every LD on load unit 0 (`balance-loads` spreads them), delay slots left as no-ops where the
generator has nothing of the loop's own to put (`fill-delay-slots` fills them), nothing
reordered (`schedule-asm`). Layers whose plans are equal share one generated program (cloned).

Segments inside an image: `@x` (input maps), `@w` (weights, with data), `@y` (output), `@r`
(residual input), `@slack` (pool scratch), `@t` (a fused pool's conv output, scratch); the
program is `@code`. A conv layer with a fused max pool (`pool`) gives one image, `fused =
"max_pool"`, whose `@y` is the pool's output; both nn ops name it. The nn op that named the
layer (`tile = "..."`) now names the image (`image = "..."`).
"""

from __future__ import annotations

import json

from collections.abc import Hashable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from snowir.asm_analysis import outside_programs
from snowir.conv_codegen import generate_conv
from snowir.conv_plan import ConvPlan, LoweringError, Strip, input_rows, plan_conv, with_residency
from snowir.dialects import snowflake_asm as sf
from snowir.dialects import tile
from snowir.hw import SnowflakeConfig
from snowir.pool_codegen import generate_pool
from snowir.tile_build import conv_shape_of, conv_tile_body, layout_of, pool_shape_of, regions_of, with_layer_pool

SEGMENTS = {"maps": ("x", sf.SegmentKind.INPUT), "weights": ("w", sf.SegmentKind.DATA),
            "output": ("y", sf.SegmentKind.OUTPUT), "bypass": ("r", sf.SegmentKind.INPUT),
            "scratch": ("slack", sf.SegmentKind.SCRATCH), "conv_output": ("t", sf.SegmentKind.SCRATCH)}


def _strips_edited(layer: tile.LayerOp, plan: ConvPlan) -> bool:
    """Maps-tile rows that are not the planner's (an edit tile-to-asm follows; the loads and
    windows inside those tiles are then derived from the new rows)."""
    rows = [mt._ints("out_rows") for mt in layer.body.block.ops if isinstance(mt, tile.MapsTileOp)]
    return plan.gather is None and not plan.indp and rows != [(st.y0, st.y1) for st in plan.strips]


def _fail(layer: tile.LayerOp, message: str) -> PassFailedException:
    return PassFailedException(f"tile-to-asm: layer @{layer.sym_name.data}: {message}")


def plan_from_tile(layer: tile.LayerOp, hw: SnowflakeConfig) -> ConvPlan:
    if not isinstance(layer.shape, tile.ConvShapeAttr):
        raise _fail(layer, "a conv layer needs `shape = #tile.conv_shape<...>`")
    s = conv_shape_of(layer.shape)
    regions = regions_of(layer)
    try:
        addr = {k: regions[k].offset.value.data for k in ("maps", "weights", "output")}
    except KeyError as e:
        raise _fail(layer, f"no '{e.args[0]}' dram_region") from None
    if "conv_output" in regions:  # a fused max pool's layer: `output` is the pool's
        addr["output"] = regions["conv_output"].offset.value.data
    if layer.loop_order is None:
        raise _fail(layer, "no loop order: run tile-loop-order first")
    order = layer.loop_order.data.value
    bypass = regions["bypass"].offset.value.data if "bypass" in regions else None
    mode = layer.mode.data.value if layer.mode else None
    try:
        # the planner's own choice when the IR holds it, else its plan for the order the IR names
        default = plan_conv(s, hw, addr["maps"], addr["weights"], addr["output"], None, bypass, mode)
        if default.loop_order != order:
            default = plan_conv(s, hw, addr["maps"], addr["weights"], addr["output"], order, bypass, mode)
    except LoweringError as e:
        raise _fail(layer, str(e)) from None
    if default.loop_order != order:
        kind = "an INDP" if default.indp else "a residual" if bypass is not None else "this"
        raise _fail(layer, f"loop order {order}: {kind} layer runs {default.loop_order} only")
    try:
        default = with_layer_pool(layer, default, hw)
    except LoweringError as e:
        raise _fail(layer, str(e)) from None
    if default.indp or default.gather or bypass is not None:
        return default  # INDP row groups, gathered strided-1x1 rows, residual strips: fixed by their load layout
    strips = []
    for i, mt in enumerate(op for op in layer.body.block.ops if isinstance(op, tile.MapsTileOp)):
        (y0, y1), (r0, r1) = mt._ints("out_rows"), mt._ints("in_rows")
        need0, need1 = input_rows(s.h, s.kh, s.sy, s.pt, y0, y1)
        if r0 > need0 or r1 < need1 or r1 > s.h:
            raise _fail(layer, f"maps tile rows {y0}..{y1} need input rows {need0}..{need1}, the tile holds {r0}..{r1}")
        strips.append(Strip(y0, y1, need0, need1, i % 2))
    if [(st.y0, st.y1, st.r0, st.r1) for st in strips] == [(st.y0, st.y1, st.r0, st.r1) for st in default.strips]:
        return default  # the planner's own tiling (its bank choices included)
    starts = [0] + [st.y1 for st in strips[:-1]]
    if not strips or [st.y0 for st in strips] != starts or strips[-1].y1 != s.oh:
        raise _fail(layer, f"maps tiles must cover output rows 0..{s.oh} in order")
    words = max((st.r1 - st.r0) * s.w * s.cin for st in strips)
    limit = hw.maps_buffer_elements if len(strips) == 1 else hw.maps_bank_elements
    if words > limit:
        raise _fail(layer, f"a maps tile of {words} words exceeds {limit}")
    if len(strips) == 1 and words > hw.maps_bank_elements:
        strips = [Strip(st.y0, st.y1, st.r0, st.r1, -1) for st in strips]
    return with_residency(ConvPlan(s, tuple(strips), default.tiles, default.kernels, default.double_buffer_weights, addr["maps"],
                                   addr["weights"], addr["output"], "COOP", order), hw)


def _schedule_key(op: Operation) -> tuple:
    """What a tile op says about the schedule: its name, properties and children (load units
    are balance-loads' decision, checked apart)."""
    # attributes compare by value: no need to print them (str() of 3 * 10^4 attributes per model)
    props = tuple(sorted(((k, v) for k, v in op.properties.items() if k != "unit"), key=lambda kv: kv[0]))
    children = tuple(_schedule_key(c) for r in op.regions for c in r.block.ops) if op.regions else ()
    return op.name, props, children


def check_tiles(layer: tile.LayerOp, plan: ConvPlan, hw: SnowflakeConfig) -> None:
    """The layer's kernel tile, maps tiles, loads and windows must be the ones its plan implies:
    tile-to-asm generates code from the plan (shape, mode, loop order, maps-tile rows, regions),
    so an edit of a load or window it would not follow is refused rather than ignored."""
    lay = layout_of(layer)
    have = [op for op in layer.body.block.ops if isinstance(op, tile.KernelTileOp | tile.MapsTileOp)]
    want = conv_tile_body(conv_shape_of(layer.shape), plan, lay, hw)  # the layer's shape (a gathered plan's is compact)
    for op in layer.walk():
        if isinstance(op, tile.LoadOp) and op._int("unit") != 0:
            raise _fail(layer, "tile.load unit: load units are balance-loads' decision "
                               "(balance-loads{units=N}, or edit the snowflake_asm)")
    if len(have) != len(want):
        raise _fail(layer, f"{len(have)} kernel/maps tiles where its plan has {len(want)}")
    for i, (a, b) in enumerate(zip(have, want)):
        if _schedule_key(a) != _schedule_key(b):
            what = "kernel tile" if isinstance(a, tile.KernelTileOp) else f"maps tile {i - 1}"
            raise _fail(layer, f"{what}: its loads or windows differ from what its rows and the layer's "
                               "decisions imply (tile-to-asm derives them; edit mode, loop_order or maps-tile rows)")


def layer_code(layer: tile.LayerOp, hw: SnowflakeConfig, cache: dict[Hashable, list[Operation]]) -> list[Operation]:
    """The layer's instructions; layers with equal plans get clones of one generated program."""
    if layer.kind.data == tile.LayerKind.CONV:
        plan = plan_from_tile(layer, hw)
        if not _strips_edited(layer, plan):
            check_tiles(layer, plan, hw)
        key: Hashable = ("conv", plan)
        generate = lambda: generate_conv(plan, hw).ops  # noqa: E731
    elif layer.kind.data == tile.LayerKind.MAXPOOL:
        if not isinstance(layer.shape, tile.PoolShapeAttr):
            raise _fail(layer, "a maxpool layer needs `shape = #tile.pool_shape<...>`")
        p = pool_shape_of(layer.shape)
        regions = regions_of(layer)
        out_addr = regions["output"].offset.value.data
        key = ("pool", p, regions["maps"].offset.value.data, out_addr)
        generate = lambda: generate_pool(p, hw, regions["maps"].offset.value.data, out_addr).ops  # noqa: E731
    else:
        raise _fail(layer, f"{layer.kind.data.value} layers are not lowered to Snowflake")
    if key not in cache:
        try:
            cache[key] = generate()
        except LoweringError as e:
            raise _fail(layer, str(e)) from None
        return cache[key]
    return [op.clone() for op in cache[key]]


def layer_image(layer: tile.LayerOp, code: list[Operation]) -> sf.ImageOp:
    segments = []
    for label, region in regions_of(layer).items():
        if label not in SEGMENTS:
            continue
        name, kind = SEGMENTS[label]
        segments.append(sf.SegmentOp(name, kind, region.offset.value.data, region.size.value.data, region.value))
    attrs = {"layer": StringAttr(layer.sym_name.data), "kind": StringAttr(layer.kind.data.value)}
    if layer.mode is not None:
        attrs["mode"] = StringAttr(layer.mode.data.value)
    if layer.loop_order is not None:
        attrs["loop_order"] = StringAttr(layer.loop_order.data.value)
    if layer.pool is not None:
        attrs["fused"] = StringAttr("max_pool")  # its @y is the max pool's output
    for key in ("mloop_bytes", "kloop_bytes"):  # both orders' estimated traffic, for C17 Fig. 4 plots
        if key in layer.properties:
            attrs[key] = layer.properties[key]
    return sf.ImageOp(layer.sym_name.data, [*segments, sf.ProgramOp("code", code)], attrs)


@dataclass(frozen=True)
class TileToAsmPass(ModulePass):
    name = "tile-to-asm"
    hw: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        hw = SnowflakeConfig.load(self.hw or None)
        cache: dict[Hashable, list[Operation]] = {}
        images: dict[str, str] = {}
        built_for = StringAttr(json.dumps(hw.code_fields(), separators=(",", ":")))
        for layer in [o for o in op.ops if isinstance(o, tile.LayerOp)]:
            image = layer_image(layer, layer_code(layer, hw, cache))
            image.attributes["hw"] = built_for  # what the program is only correct for (hw.CODE_FIELDS)
            images[layer.sym_name.data] = image.sym_name.data
            op.body.block.insert_op_before(image, layer)
            layer.detach()
            layer.erase()
        for inner in outside_programs(op):  # the nn ops naming the layers, not 10^5 instructions
            ref = inner.attributes.get("tile")
            if isinstance(ref, StringAttr) and ref.data in images:
                del inner.attributes["tile"]
                inner.attributes["image"] = StringAttr(images[ref.data])
