"""
tile-loop-order{order=auto|Kloop|Mloop hw=path.json}: the loop order of every conv `tile.layer`
(C17 §6.2), and the maps tiling that goes with it.

Kloop keeps a maps strip while every kernel tile passes over it (kernels re-sent per strip);
Mloop keeps a kernel tile while every strip passes (maps re-sent per tile). `auto` takes the
cheaper by the cost model of `ConvPlan.estimated_cycles`: the larger of the padding-free
compute and the DRAM traffic at the shared bandwidth, plus the loads nothing overlaps; the
strips are chosen with it (bank-sized or buffer-sized). A forced order re-tiles for that order.
Layers that already have an order keep it under `auto`, so an edited order survives the
default pipeline. The byte counts of both orders stay on the layer (mloop_bytes, kloop_bytes).

The pass is a rewrite (`LoopOrderPattern`): it owns the loop order and what follows from it
(the maps strips, the kernel tile's residency, stagger and slot, both orders' bytes). The rest of
the layer is the planner's for the layer's own mode; a decision the layer states otherwise (an
edit made before the pass: a kernel tile's `slot`, `stagger`, `resident`, a layer's
`slice_tiles`, or, when the order stays, its maps tiles and their `cu_rows`) is kept when
tile-to-asm would follow it on the re-derived layer (`snowir.tile.edit.edit_refusal`), and
dropped with one line on stderr naming it and the rule otherwise.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Attribute
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern
from xdsl.utils.exceptions import PassFailedException

from snowir.dialects import tile
from snowir.dialects.tile.decisions import KERNEL_TILE, LAYER, PLAN_DECISIONS, decisions_on
from snowir.hw import SnowflakeConfig
from snowir.plan.conv import plan_conv
from snowir.plan.shapes import ConvPlan, LoweringError
from snowir.tile.build import layout_of, set_conv_plan, shape_of, with_layer_pool
from snowir.tile.edit import edit_refusal
from snowir.tile.read import tile_layers

KERNEL_TILE_KEPT = tuple(d.name for d in decisions_on(KERNEL_TILE))
"""The kernel tile's decisions an edit may set before the pass (slot, stagger, resident)."""
LAYER_KEPT = tuple(d.name for d in decisions_on(LAYER, PLAN_DECISIONS) if d.planned and d.name != "pool_slots")
"""The layer's planned decisions an edit may set before the pass (pool_slots goes with the maps tiles)."""
MAPS_GROUP = ("maps_buffering", "pool_slots")
"""The layer properties that go with its maps tiles (where they sit, a fused pool's ring beside them)."""


@dataclass(frozen=True)
class Kept:
    """One decision the layer states otherwise than the planner: its name, and the edit that puts
    the layer's value on the re-derived layer."""

    name: str
    shown: str
    apply: Callable[[tile.LayerOp], None]


def _kernel_tile(layer: tile.LayerOp) -> tile.KernelTileOp | None:
    kts = [op for op in layer.body.block.ops if isinstance(op, tile.KernelTileOp)]
    return kts[0] if len(kts) == 1 else None


def _put(props: dict[str, Attribute], name: str, value: Attribute | None) -> None:
    if value is None:
        props.pop(name, None)
    else:
        props[name] = value


def _maps_key(layer: tile.LayerOp) -> list[tuple]:
    """The maps tiles as decisions: each tile's properties (out_rows, cu_rows, ...), bodies aside."""
    return [sorted((k, str(v)) for k, v in op.properties.items())
            for op in layer.body.block.ops if isinstance(op, tile.MapsTileOp)]


def _set_maps(source: tile.LayerOp) -> Callable[[tile.LayerOp], None]:
    """The edit that gives a layer `source`'s maps tiles (bodies and all) and the properties with them."""
    tiles = [op.clone() for op in source.body.block.ops if isinstance(op, tile.MapsTileOp)]
    group = {k: source.properties.get(k) for k in MAPS_GROUP}

    def apply(layer: tile.LayerOp) -> None:
        block = layer.body.block
        for old in [op for op in block.ops if isinstance(op, tile.MapsTileOp)]:
            old.detach()
            old.erase()
        for t in tiles:
            block.add_op(t.clone())
        for k, v in group.items():
            _put(layer.properties, k, v)
    return apply


def _set_kt(name: str, value: Attribute | None) -> Callable[[tile.LayerOp], None]:
    def apply(layer: tile.LayerOp) -> None:
        kt = _kernel_tile(layer)
        assert kt is not None
        _put(kt.properties, name, value)
    return apply


def _set_layer(name: str, value: Attribute | None) -> Callable[[tile.LayerOp], None]:
    return lambda layer: _put(layer.properties, name, value)


def edits(layer: tile.LayerOp, before: tile.LayerOp, after: tile.LayerOp, same_order: bool) -> list[Kept]:
    """The decisions `layer` states otherwise than the planner wrote them (`before`: the plan for
    the order the layer was tiled for) and than the re-derived layer has them (`after`): the
    edits made before the pass. The maps tiles count only while the order stays (they follow it)."""
    found: list[Kept] = []
    if same_order and _maps_key(layer) != _maps_key(before) and _maps_key(layer) != _maps_key(after):
        found.append(Kept("maps tiles", "", _set_maps(layer)))
    kt, kb, ka = _kernel_tile(layer), _kernel_tile(before), _kernel_tile(after)
    if kt is not None and kb is not None and ka is not None:
        for name in KERNEL_TILE_KEPT:
            have = kt.properties.get(name)
            if have != kb.properties.get(name) and have != ka.properties.get(name):
                found.append(Kept(f"kernel tile {name}", _show(have), _set_kt(name, have)))
    for name in LAYER_KEPT:
        have = layer.properties.get(name)
        if have != before.properties.get(name) and have != after.properties.get(name):
            found.append(Kept(name, _show(have), _set_layer(name, have)))
    return found


def _show(value: Attribute | None) -> str:
    if value is None:
        return "(absent)"
    text = str(value)
    return text.split(" : ")[0] if " : " in text else text


@dataclass
class LoopOrderPattern(RewritePattern):
    """Sets one conv layer's loop order: the layer re-derived by the planner for its mode and the
    order, with the decisions it stated otherwise kept where tile-to-asm follows them."""

    order: str | None
    hw: SnowflakeConfig

    @op_type_rewrite_pattern
    def match_and_rewrite(self, layer: tile.LayerOp, rewriter: PatternRewriter) -> None:
        if layer.kind.data != tile.LayerKind.CONV or not isinstance(layer.shape, tile.ConvShapeAttr):
            return
        if self.order is None and layer.loop_order is not None:
            return  # an order in the IR (edited, or set by an earlier run) stays under auto
        name = layer.sym_name.data
        plan = self._plan(layer, self.order)
        if self.order is not None and plan.loop_order != self.order:
            # one line per layer the forced order cannot apply to: reported, not skipped silently
            lay = layout_of(layer)
            kind = "an INDP" if plan.indp else "a residual" if lay.r_addr is not None else \
                "a fused pool's" if plan.pool is not None else \
                "a grouped-over-blocks" if plan.shape.block_maps else "this"
            print(f"tile-loop-order: layer @{name} keeps {plan.loop_order}: {kind} layer runs "
                  f"{plan.loop_order} only", file=sys.stderr)
        was = layer.loop_order.data.value if layer.loop_order is not None else None
        before_plan = plan if was == plan.loop_order else self._plan(layer, was)
        before, after = layer.clone(), layer.clone()
        set_conv_plan(before, before_plan, self.hw)
        set_conv_plan(after, plan, self.hw)
        for kept in edits(layer, before, after, before_plan.loop_order == plan.loop_order):
            why = edit_refusal(after, kept.apply, self.hw)
            if why is None:
                kept.apply(after)
            else:
                print(f"tile-loop-order: layer @{name}: {kept.name} {kept.shown} dropped for {plan.loop_order}: "
                      f"{why.removeprefix(f'layer @{name}: ')}".replace("  ", " "), file=sys.stderr)
        before.erase()
        rewriter.replace(layer, after, [])

    def _plan(self, layer: tile.LayerOp, order: str | None) -> ConvPlan:
        """The planner's decisions for the layer's shape, layout, mode, weight image's bias layout
        (`biases`) and fused pool, in `order`."""
        s = shape_of(layer)
        lay = layout_of(layer)
        mode = layer.mode.data.value if layer.mode else None
        try:
            plan = plan_conv(s, self.hw, 2 * lay.in_first, lay.w_addr, lay.out_addr, order, lay.r_addr, mode, s.bias_at,
                             bypass_crop=lay.bypass_row != 0, bypass_tiles=lay.bypass_tile != 0)
            return with_layer_pool(layer, plan, self.hw)
        except LoweringError as e:
            raise PassFailedException(f"tile-loop-order: layer @{layer.sym_name.data}: {e}") from None


@dataclass(frozen=True)
class TileLoopOrderPass(ModulePass):
    name = "tile-loop-order"
    order: str = "auto"
    hw: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.order not in ("auto", "Kloop", "Mloop"):
            raise PassFailedException(f"tile-loop-order: order must be auto, Kloop or Mloop, not '{self.order}'")
        tile_layers(op, self.name)  # no tile.layer yet: refused in one line
        pattern = LoopOrderPattern(None if self.order == "auto" else self.order, SnowflakeConfig.load(self.hw or None))
        PatternRewriteWalker(pattern, apply_recursively=False, walk_regions_first=False).rewrite_module(op)
