"""
add-to-bypass: an add that fuse-residual-add could not fuse (neither operand is a conv it may
change: both come from host ops, as in a YOLO's SiLU blocks) becomes a 1x1 identity conv over
one operand with the other as its `bypass`, where the cost model says the device pays:

    add(a, b) -> conv2d(a, I, 0, bypass b)   (I: the C x C identity, 1 x 1)

Why: Snowflake adds bypass values at write-back (paper §2, §5.2), so an add is a conv whose
kernel passes its input through. One MAC an output is useful (`block_diagonal`: each kernel has
one channel that is not zero; the reports count that one), the machine does C. Not the grouped
form of 16-channel identity blocks (16 MACs an output): a grouped conv with a bypass is not
bit-exact on the machine today (docs/lowering.md, "Known gaps").

The cost model: the estimate for the conv (the planner's, or its issue slots where larger:
snowir/plan/issue.py, as depthwise-to-grouped), plus the DRAM round trip the host pays
because the add leaves it (each operand a host op produces written as 16-bit words, the result
read back when a host op reads it, at the host's streaming rate: host_model.round_trip_ms), against
the host's own estimate of the add. Both numbers are in the IR: the conv, or the add left for
the host, carries `placement_cost`. An add the user placed (`place`) is left as it is;
`add-to-bypass{enable=false}` leaves every add.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, UnitAttr
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from snowir.dialects import nn
from snowir.host_model import host_ms, round_trip_ms
from snowir.hw import SnowflakeConfig
from snowir.nn_util import const_of, constant_op, replace_by_cost, shape_of
from snowir.plan.issue import placement_cycles
from snowir.plan.shapes import LoweringError
from snowir.tile.lowerable import planned_conv


def _identity(channels: int) -> np.ndarray:
    return np.eye(channels, dtype=np.float32).reshape(channels, channels, 1, 1)


class AddToBypass(RewritePattern):
    def __init__(self, hw: SnowflakeConfig):
        self.hw = hw

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.AddOp, rewriter: PatternRewriter) -> None:
        shape = shape_of(op.output)
        if ("place" in op.attributes or "placement_cost" in op.attributes or len(shape) != 4
                or shape_of(op.lhs) != shape or shape_of(op.rhs) != shape
                or const_of(op.lhs) is not None or const_of(op.rhs) is not None):
            return
        c = shape[1]
        weight = constant_op(_identity(c), "identity")
        bias = constant_op(np.zeros(c, np.float32), "zero_bias")
        conv = nn.Conv2dOp(op.lhs, weight.result, bias.result, op.output.type, relu=op.relu is not None, bypass=op.rhs)
        conv.attributes.update(op.attributes)
        conv.attributes["block_diagonal"] = UnitAttr()
        conv.attributes["from_add"] = UnitAttr()  # reports name it an add
        try:
            device = self.hw.cycles_to_ms(placement_cycles(planned_conv(conv, self.hw), self.hw))
        except LoweringError:
            return  # the planners refuse it: the host's, as partition-host decides
        trip, host = round_trip_ms([op.lhs, op.rhs], op.output), host_ms(op)
        cost = f"device {device:.4f} ms + DRAM round trip {trip:.4f} ms vs host {host:.4f} ms"
        replace_by_cost(rewriter, op, conv, [weight, bias], device + trip, host, cost)


@dataclass(frozen=True)
class AddToBypassPass(ModulePass):
    name = "add-to-bypass"
    enable: bool = True
    hw: str = ""
    """A hardware description JSON (SnowflakeConfig fields); default: the ZC706 build."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if not self.enable:
            return
        hw = SnowflakeConfig.load(self.hw or None)
        PatternRewriteWalker(AddToBypass(hw), apply_recursively=False).rewrite_module(op)
