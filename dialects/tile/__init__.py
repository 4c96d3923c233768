"""
The `tile` dialect: a layer's workload broken down for one Snowflake configuration.

This is the Snowball paper's Figure 2 data structure as IR (C17 §5.1, steps 2-5):

    tile.layer @conv2 conv {mode = #tile<mode COOP>, loop_order = #tile<loop_order Kloop>, ...} {
      tile.dram_region @conv2.in {offset = 0 : i64, size = 186624 : i64, label = "maps"}
      tile.kernel_tile {first = 0 : i64, count = 16 : i64, repeat = 12 : i64} { tile.load ... }
      tile.maps_tile {out_rows = array<i64: 0, 4>, in_rows = array<i64: 0, 8>, overlap = 4 : i64, cu = -1 : i64} {
        tile.load {buffer = #tile<buffer maps>, length = ..., dram_addr = ..., buf_addr = ..., unit = 0 : i64, select = 127 : i64}
        tile.window {trace_length = 320 : i64, repeat_x = 27 : i64, repeat_y = 4 : i64, ...}
      }
    }

Every decision (mode, loop order, tile bounds, load placement, load unit) is an
attribute a researcher can read, edit and feed back into the lowering.

Laid out as xDSL's riscv dialect is: attributes.py (the decision enums and the geometry
attributes), abstract_ops.py (the op base and the helpers the ops share), layer_ops.py (a layer,
its DRAM regions, tiles, loads and windows), plan_ops.py (the model's DRAM plan), field_docs.py
(what each attribute means for the generated code). Every name is re-exported here, so
`from snowir.dialects import tile; tile.LayerOp` reads as it always has.
"""

from __future__ import annotations

from xdsl.ir import Dialect

from snowir.dialects.tile.abstract_ops import LayerScope, TileOperation, body_ops, i64_array, i64_attr, to_derive
from snowir.dialects.tile.attributes import (
    BufferKind,
    BufferKindAttr,
    ComputeMode,
    ComputeModeAttr,
    ConvShapeAttr,
    CuSplit,
    CuSplitAttr,
    GatherAttr,
    LayerKind,
    LayerKindAttr,
    LoopOrder,
    LoopOrderAttr,
    MapsBuffering,
    MapsBufferingAttr,
    PoolShapeAttr,
)
from snowir.dialects.tile.field_docs import FIELD_DOCS
from snowir.dialects.tile.layer_ops import DramRegionOp, KernelTileOp, LayerOp, LoadOp, MapsTileOp, WindowOp
from snowir.dialects.tile.plan_ops import DramPlanOp, TensorOp, weights_free

Tile = Dialect(
    "tile",
    [LayerOp, DramRegionOp, KernelTileOp, MapsTileOp, LoadOp, WindowOp, DramPlanOp, TensorOp],
    [ComputeModeAttr, LoopOrderAttr, LayerKindAttr, BufferKindAttr, MapsBufferingAttr, CuSplitAttr, ConvShapeAttr,
     GatherAttr, PoolShapeAttr],
)

__all__ = [
    "FIELD_DOCS", "Tile",
    "BufferKind", "BufferKindAttr", "ComputeMode", "ComputeModeAttr", "ConvShapeAttr", "CuSplit", "CuSplitAttr",
    "DramPlanOp", "DramRegionOp", "GatherAttr", "KernelTileOp", "LayerKind", "LayerKindAttr", "LayerOp",
    "LayerScope", "LoadOp", "LoopOrder", "LoopOrderAttr", "MapsBuffering", "MapsBufferingAttr", "MapsTileOp",
    "PoolShapeAttr", "TensorOp", "TileOperation", "WindowOp", "body_ops", "i64_array", "i64_attr", "to_derive", "weights_free",
]
