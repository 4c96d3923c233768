"""
What a device layer is, declared once: the nn op kinds the lowering runs on Snowflake as a
`tile.layer` of their own, each with the planner that says whether and how it runs, the builder
of its tile layer (nn-to-tile) and the code generator that follows it (tile-to-asm).

Every place that asks "is this op a device layer?" (nn-to-tile, allocate-dram, tile-to-asm,
lowerable, segments, the device and segment runs, the timeline) reads `DEVICE_OPS` /
`is_device_layer`, so a new layer kind (a vector add, an upsample) is one entry here plus its
planner, builder and generator.
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
    """Whether and how the op runs on the device (partition-host's question, LoweringError if not)."""
    builder: str
    """Its tile.layer (nn-to-tile)."""
    generator: str
    """Its snowflake_asm (tile-to-asm)."""

    def function(self, role: str) -> Any:
        """The kind's `role` ("planner", "builder" or "generator") function."""
        module, name = getattr(self, role).split(":")
        return getattr(importlib.import_module(module), name)


DEVICE_LAYER_KINDS: tuple[DeviceLayerKind, ...] = (
    DeviceLayerKind(nn.Conv2dOp, tile.LayerKind.CONV, "snowir.tile.lowerable:planned_conv",
                    "snowir.tile.build:conv_layer", "snowir.codegen.conv:generate_conv"),
    DeviceLayerKind(nn.MaxPoolOp, tile.LayerKind.MAXPOOL, "snowir.plan.pool:plan_pool",
                    "snowir.tile.build:pool_layer", "snowir.codegen.pool:generate_pool"),
)

DEVICE_OPS: tuple[type[Operation], ...] = tuple(k.op for k in DEVICE_LAYER_KINDS)
"""The nn op classes that are device layers (for isinstance)."""


def is_device_layer(op: Operation) -> bool:
    """Whether `op` is of a kind the lowering runs as a tile.layer (placement aside: see on_host)."""
    return isinstance(op, DEVICE_OPS)


def kind_of(op: Operation) -> DeviceLayerKind | None:
    """The op's device layer kind, None when it is not one."""
    return next((k for k in DEVICE_LAYER_KINDS if isinstance(op, k.op)), None)
