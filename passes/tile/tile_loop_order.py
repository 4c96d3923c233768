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
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from snowir.dialects import tile
from snowir.hw import SnowflakeConfig
from snowir.plan.conv import plan_conv
from snowir.plan.shapes import LoweringError
from snowir.tile.build import conv_shape_of, layout_of, set_conv_plan, with_layer_pool
from snowir.tile.read import tile_layers


@dataclass(frozen=True)
class TileLoopOrderPass(ModulePass):
    name = "tile-loop-order"
    order: str = "auto"
    hw: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.order not in ("auto", "Kloop", "Mloop"):
            raise PassFailedException(f"tile-loop-order: order must be auto, Kloop or Mloop, not '{self.order}'")
        hw = SnowflakeConfig.load(self.hw or None)
        for layer in tile_layers(op, self.name):
            if layer.kind.data != tile.LayerKind.CONV or not isinstance(layer.shape, tile.ConvShapeAttr):
                continue
            if self.order == "auto" and layer.loop_order is not None:
                continue
            self._order(layer, hw, None if self.order == "auto" else self.order)

    @staticmethod
    def _order(layer: tile.LayerOp, hw: SnowflakeConfig, order: str | None) -> None:
        s = conv_shape_of(layer.shape)
        lay = layout_of(layer)
        mode = layer.mode.data.value if layer.mode else None
        try:
            plan = with_layer_pool(layer, plan_conv(s, hw, 0, lay.w_addr, lay.out_addr, order, lay.r_addr, mode), hw)
        except LoweringError as e:
            raise PassFailedException(f"tile-loop-order: layer @{layer.sym_name.data}: {e}") from None
        if order is not None and plan.loop_order != order:
            # one line per layer the forced order cannot apply to: reported, not skipped silently
            kind = "an INDP" if plan.indp else "a residual" if lay.r_addr is not None else \
                "a fused pool's" if plan.pool is not None else "this"
            print(f"tile-loop-order: layer @{layer.sym_name.data} keeps {plan.loop_order}: {kind} layer runs "
                  f"{plan.loop_order} only", file=sys.stderr)
        set_conv_plan(layer, plan, hw)
