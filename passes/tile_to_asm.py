"""
tile-to-asm: generate the snowflake_asm program of every conv `tile.layer`, following the
decisions written in the tile IR (loop order, maps tiles), so an edited tile module compiles
to different code. Each layer is replaced by `snowflake_asm.program @<layer>` with its DRAM segments
`@<layer>.x` (input maps), `@<layer>.w` (weights), `@<layer>.y` (output).

Code shape (C17 Figure 3, conv_codegen.py): shift/bias/mask VMOVs, maps and weight loads
spread over the load units and prefetched into the idle bank, Y loops over rows whose kernel
rows are all inside the input, X loops over interior columns, unrolled border pixels with
shorter traces (padding taps are not computed), write-back on the last MAC of each pixel.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from snowir.conv_codegen import generate_conv
from snowir.conv_plan import ConvPlan, ConvShape, LoweringError, Strip, input_rows, plan_conv
from snowir.dialects import snowflake_asm as sf
from snowir.dialects import tile
from snowir.hw import SnowflakeConfig


def plan_from_tile(layer: tile.LayerOp, hw: SnowflakeConfig) -> ConvPlan:
    name = layer.sym_name.data
    if "shape" not in layer.attributes:
        raise PassFailedException(f"tile-to-asm: layer @{name} has no `shape` attribute")
    v = [int(x) for x in layer.attributes["shape"].get_values()]
    s = ConvShape(*v[:12], relu=bool(v[13]), shift=v[12], groups=v[14] if len(v) > 14 else 1)
    regions = {op.label.data: op for op in layer.body.block.ops if isinstance(op, tile.DramRegionOp)}
    try:
        addr = {k: regions[k].offset.value.data for k in ("maps", "weights", "output")}
    except KeyError as e:
        raise PassFailedException(f"tile-to-asm: layer @{name} has no '{e.args[0]}' dram_region") from None
    order = layer.loop_order.data.value if layer.loop_order else None
    bypass = regions["bypass"].offset.value.data if "bypass" in regions else None
    mode = layer.mode.data.value if layer.mode else None
    try:
        default = plan_conv(s, hw, addr["maps"], addr["weights"], addr["output"], order, bypass, mode)
    except LoweringError as e:
        raise PassFailedException(f"tile-to-asm: layer @{name}: {e}") from None
    if default.indp or default.gather:
        return default  # INDP row groups / gathered strided-1x1 rows are fixed by their load layout
    strips = []
    for i, mt in enumerate(op for op in layer.body.block.ops if isinstance(op, tile.MapsTileOp)):
        (y0, y1), (r0, r1) = mt._ints("out_rows"), mt._ints("in_rows")
        need0, need1 = input_rows(s.h, s.kh, s.sy, s.pt, y0, y1)
        if r0 > need0 or r1 < need1 or r1 > s.h:
            raise PassFailedException(f"tile-to-asm: layer @{name}: maps tile rows {y0}..{y1} need input rows "
                                      f"{need0}..{need1}, the tile holds {r0}..{r1}")
        strips.append(Strip(y0, y1, need0, need1, i % 2))
    if [(st.y0, st.y1) for st in strips] != [(a, b) for a, b in zip([0] + [st.y1 for st in strips[:-1]], [st.y1 for st in strips])] \
            or not strips or strips[-1].y1 != s.oh:
        raise PassFailedException(f"tile-to-asm: layer @{name}: maps tiles must cover output rows 0..{s.oh} in order")
    words = max((st.r1 - st.r0) * s.w * s.cin for st in strips)
    limit = hw.maps_buffer_elements if len(strips) == 1 else hw.maps_bank_elements
    if words > limit:
        raise PassFailedException(f"tile-to-asm: layer @{name}: a maps tile of {words} words exceeds {limit}")
    if bypass is not None:
        return default  # a residual conv's strips are fixed by its two-bank layout
    return ConvPlan(s, tuple(strips), default.tiles, default.double_buffer_weights, addr["maps"],
                    addr["weights"], addr["output"], "COOP", default.loop_order)


@dataclass(frozen=True)
class TileToAsmPass(ModulePass):
    name = "tile-to-asm"
    hw: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        hw = SnowflakeConfig.load(self.hw or None)
        for layer in [o for o in op.ops if isinstance(o, tile.LayerOp)]:
            if layer.kind.data != tile.LayerKind.CONV:
                continue
            plan = plan_from_tile(layer, hw)
            name = layer.sym_name.data
            code = generate_conv(plan, hw)
            regions = {r.label.data: r for r in layer.body.block.ops if isinstance(r, tile.DramRegionOp)}
            segs = [sf.SegmentOp(f"{name}.x", sf.SegmentKind.INPUT, plan.in_addr, regions["maps"].size.value.data),
                    sf.SegmentOp(f"{name}.w", sf.SegmentKind.DATA, plan.w_addr, regions["weights"].size.value.data),
                    sf.SegmentOp(f"{name}.y", sf.SegmentKind.OUTPUT, plan.out_addr, regions["output"].size.value.data)]
            if "bypass" in regions:
                segs.append(sf.SegmentOp(f"{name}.r", sf.SegmentKind.INPUT, regions["bypass"].offset.value.data,
                                         regions["bypass"].size.value.data))
            for seg in segs:
                op.body.block.add_op(seg)
            layer.detach()
            layer.erase()  # lowered: the program replaces the layer object
            op.body.block.add_op(sf.ProgramOp(name, code.ops))
