"""
depthwise-to-grouped: a depthwise conv (one input channel per output channel, C a multiple
of 16) -> a grouped conv of 16 channels per group whose 16 x 16 kernel blocks are diagonal.

Why: the 16 MACs of a vMAC multiply 16 contiguous channels of one trace into one output
channel, so a depthwise conv (one channel per output) has no dense mapping (docs/lowering.md,
"Depthwise convs"). The grouped form is one Snowflake runs: each vMAC still reads its group's
16 channels, 15 of them against zero weights.
That wastes 15/16 of the MACs, and the code generator reaches ~20% of the rest (16-kernel
groups, short traces), so it is a cost decision: the rewrite happens only where the planner's
estimate for the grouped conv beats the host estimate (Cortex-A9, docs/machine.md). Measured:
3x3 depthwise 32x112², 64x56², 384x14², 960x7² take 4.61 / 2.29 / 0.86 / 0.51 ms on the device
against 5.36 / 2.65 / 0.92 / 0.52 ms on the host; 1x1 (a BN left without a conv) 0.50 ms against
the host's memory-bound 1.61 ms; a 7x7 global pool over 512 channels (one output pixel per
16-lane trace) would take 0.26 ms against 0.2 ms, so it stays on the host. The integer sums are the depthwise ones (zero products add nothing), so golden and machine
agree bit for bit. The new conv carries `block_diagonal`: reports count its useful MACs from
the depthwise shape, not from the lanes the machine keeps busy.

Left alone: channel multipliers > 1, C not a multiple of 16 (ShuffleNet's 58-channel groups
would pad lanes as well), convs already grouped by 16, and convs whose grouped form the
planners refuse (a global pool over 16 x 16 pixels: 16 such kernels overflow the weights buffer).
"""

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, UnitAttr
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from snowir.dialects import nn
from snowir.host_model import host_ms
from snowir.hw import SnowflakeConfig
from snowir.nn_util import const_of, constant_op, shape_of
from snowir.plan.shapes import LoweringError
from snowir.tile.lowerable import planned_conv

LANES = SnowflakeConfig().macs_per_vmac
"""the channels one vMAC multiplies per trace word"""


def _block_diagonal(w: np.ndarray) -> np.ndarray:
    c, _, kh, kw = w.shape
    out = np.zeros((c, LANES, kh, kw), np.float32)
    out[np.arange(c), np.arange(c) % LANES] = w[:, 0]
    return out


class DepthwiseToGrouped(RewritePattern):
    def __init__(self, hw: SnowflakeConfig):
        self.hw = hw

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.Conv2dOp, rewriter: PatternRewriter) -> None:
        c = shape_of(op.input)[1]
        k, cg = shape_of(op.weight)[:2]
        if op.groups.value.data != c or cg != 1 or k != c or c % LANES or "place" in op.attributes:
            return
        w = const_of(op.weight)
        if w is None:
            return
        weight = constant_op(_block_diagonal(w), "w_diag")
        conv = nn.Conv2dOp(op.input, weight.result, op.bias, op.output.type, [int(v) for v in op.strides.get_values()],
                           [int(v) for v in op.pads.get_values()], [int(v) for v in op.dilations.get_values()],
                           c // LANES, op.relu is not None, op.bypass)
        conv.attributes.update(op.attributes)
        conv.attributes["block_diagonal"] = UnitAttr()
        try:
            plan = planned_conv(conv, self.hw)
        except LoweringError:
            return  # the planners refuse it: host as it was
        if self.hw.cycles_to_ms(plan.estimated_cycles(self.hw)) >= host_ms(op):
            return  # the host is estimated faster
        rewriter.insert(weight, InsertPoint.before(op))
        old = op.weight.owner
        rewriter.replace(op, conv)
        if isinstance(old, nn.ConstantOp) and not old.result.uses:
            rewriter.erase(old)


@dataclass(frozen=True)
class DepthwiseToGroupedPass(ModulePass):
    name = "depthwise-to-grouped"
    hw: str = ""
    """A hardware description JSON (SnowflakeConfig fields); default: the ZC706 build."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        hw = SnowflakeConfig.load(self.hw or None)
        PatternRewriteWalker(DepthwiseToGrouped(hw), apply_recursively=False).rewrite_module(op)
