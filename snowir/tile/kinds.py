"""
The planner and builder of each device layer kind, behind the registry's uniform signatures
(snowir/device_layers.py; the third function, the program, is tile-to-asm's:
passes/convert/layer_programs.py):

- planner `(op, hw) -> None`: whether the lowering can place the op (LoweringError says why not;
  partition-host and lowerable ask it);
- builder `(op, name, hw, options) -> (layer, computed)`: the op's `tile.layer` (nn-to-tile), and
  another nn op the same layer computes (a fused max pool) or None.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.ir import Operation

from snowir.dialects import nn, tile
from snowir.hw import SnowflakeConfig
from snowir.packed import refer_to_packed
from snowir.plan.pool import plan_pool
from snowir.tile.build import conv_layer, pool_layer, pool_shape
from snowir.tile.lowerable import planned_conv


@dataclass(frozen=True)
class BuildOptions:
    """nn-to-tile's options, as every builder receives them."""

    mode: str | None = None
    """COOP or INDP forced on a conv; None: the compiler's choice."""
    fuse_pool: bool = True
    """A max pool that is a conv's only reader may run in the conv's program."""


def plan_conv_op(op: nn.Conv2dOp, hw: SnowflakeConfig) -> None:
    planned_conv(op, hw)


def plan_pool_op(op: nn.MaxPoolOp, hw: SnowflakeConfig) -> None:
    plan_pool(pool_shape(op), hw)


def build_conv(op: nn.Conv2dOp, name: str, hw: SnowflakeConfig,
               options: BuildOptions) -> tuple[tile.LayerOp, Operation | None]:
    layer, pool = conv_layer(op, name, hw, options.mode, options.fuse_pool)
    refer_to_packed(op, name, hw)  # the weights are the layer's packed image's now
    return layer, pool


def build_pool(op: nn.MaxPoolOp, name: str, hw: SnowflakeConfig,
               options: BuildOptions) -> tuple[tile.LayerOp, Operation | None]:
    return pool_layer(op, name, hw), None
