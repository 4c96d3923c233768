"""
Whether the lowering can put an nn op on Snowflake: one predicate, asked by partition-host
(which sends what cannot be lowered to the host, labelled with the reason) and answered by the
planners nn-to-tile uses, so the two never disagree.
"""

from __future__ import annotations

from xdsl.ir import Operation

from snowir.dialects import nn
from snowir.golden import int_values
from snowir.hw import SnowflakeConfig
from snowir.plan.conv import plan_conv
from snowir.plan.residual_mode import conv_mode
from snowir.plan.layout import conv_layout
from snowir.plan.pool import plan_pool
from snowir.plan.shapes import ConvPlan, LoweringError
from snowir.tile.build import layer_conv_shape, pool_shape


def device_refusal(op: Operation, hw: SnowflakeConfig | None = None) -> str | None:
    """Why the lowering cannot run `op` on Snowflake; None when it can (or the op needs no lowering)."""
    hw = hw or SnowflakeConfig()
    if isinstance(op, nn.ConcatOp):
        axis = op.axis.value.data
        if axis != 1:
            return f"concat on axis {axis} (a device layer writes whole pixels, channel-innermost)"
        # its producers could write side by side in one DRAM tensor, but no device layer writes a
        # channel slice of a wider tensor yet: the host copies the inputs between segments
        return "channel concat: the host copies its inputs side by side (no device layer writes a channel slice yet)"
    if isinstance(op, nn.MaxPoolOp):
        try:
            plan_pool(pool_shape(op), hw)
        except LoweringError as e:
            return str(e)
        return None
    if isinstance(op, nn.Conv2dOp):
        try:
            planned_conv(op, hw)
        except LoweringError as e:
            return str(e)
    return None


def planned_conv(op: nn.Conv2dOp, hw: SnowflakeConfig) -> ConvPlan:
    """The plan the lowering would make for `op` (mode and loop order as nn-to-tile and
    tile-loop-order choose them); LoweringError when it cannot place it."""
    if any(d != 1 for d in int_values(op.dilations)):
        raise LoweringError("dilated convolution (traces need contiguous taps)")

    s = layer_conv_shape(op)
    bypass = op.bypass is not None
    mode = conv_mode(s, hw, bypass)
    lay = conv_layout(s, bypass, mode, hw)
    return plan_conv(s, hw, 0, lay.w_addr, lay.out_addr, None, lay.r_addr, mode)
