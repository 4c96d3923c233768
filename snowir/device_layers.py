"""
What a device layer is, declared once: the nn op kinds the lowering runs on Snowflake as a
`tile.layer` of their own, each with the planner that says whether it runs, the builder of its
tile layer (snowir/tile/kinds.py) and the program from that layer (passes/convert/layer_programs.py).

Every place that asks "is this op a device layer?" (nn-to-tile, allocate-dram, tile-to-asm,
lowerable, segments, the device and segment runs, the timeline) reads `DEVICE_OPS` /
`is_device_layer`, and the passes call a kind's functions through here: partition-host's
`device_refusal` the planner (`kind_of(op)`), nn-to-tile the builder, tile-to-asm the program
(`kind_of_layer(layer)`). A new layer kind (a vector add, an upsample) is one entry here plus its
three functions.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from xdsl.ir import Operation

from snowir.dialects import nn, tile


@dataclass(frozen=True)
class DeviceLayerKind:
    """One lowerable layer kind. The three functions are named "module:function" (imported when
    asked for: the registry sits below the modules that define them)."""

    op: type[Operation]
    kind: tile.LayerKind
    planner: str
    """`(op, hw) -> None`: whether the op runs on the device (partition-host's question, LoweringError if not)."""
    builder: str
    """`(op, name, hw, options) -> (tile.layer, op it also computes or None)` (nn-to-tile)."""
    program: str
    """`(tile.layer, hw) -> (key, generate)`: its snowflake_asm, from the tile IR alone (tile-to-asm)."""

    def function(self, role: str) -> Any:
        """The kind's `role` ("planner", "builder" or "program") function."""
        module, name = getattr(self, role).split(":")
        return getattr(importlib.import_module(module), name)


DEVICE_LAYER_KINDS: tuple[DeviceLayerKind, ...] = (
    DeviceLayerKind(nn.Conv2dOp, tile.LayerKind.CONV, "snowir.tile.kinds:plan_conv_op",
                    "snowir.tile.kinds:build_conv", "snowir.passes.convert.layer_programs:conv_program"),
    DeviceLayerKind(nn.MaxPoolOp, tile.LayerKind.MAXPOOL, "snowir.tile.kinds:plan_pool_op",
                    "snowir.tile.kinds:build_pool", "snowir.passes.convert.layer_programs:pool_program"),
)

DEVICE_OPS: tuple[type[Operation], ...] = tuple(k.op for k in DEVICE_LAYER_KINDS)
"""The nn op classes that are device layers (for isinstance)."""


def is_device_layer(op: Operation) -> bool:
    """Whether `op` is of a kind the lowering runs as a tile.layer (placement aside: see on_host)."""
    return isinstance(op, DEVICE_OPS)


def kind_of(op: Operation) -> DeviceLayerKind | None:
    """The op's device layer kind, None when it is not one."""
    return next((k for k in DEVICE_LAYER_KINDS if isinstance(op, k.op)), None)


def kind_of_layer(layer: tile.LayerOp) -> DeviceLayerKind:
    """The kind a tile.layer was built for (by its `kind`)."""
    return next(k for k in DEVICE_LAYER_KINDS if k.kind == layer.kind.data)
