"""
avgpool-to-conv: run average pooling as a depthwise convolution with weight 1/window
(paper §2: "Average pooling can be implemented as a CONV with a single weight value of
inverse of window size").

Converted: global average pooling, and avg_pool whose every window has the full count
(no padding, or count_include_pad) and no ceil-mode partial windows. Others stay avg_pool:
their border windows need their own weights (separate window objects at the tile level).
"""

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (GreedyRewritePatternApplier, PatternRewriter, PatternRewriteWalker,
                                   RewritePattern, op_type_rewrite_pattern)

from snowir.dialects import nn
from snowir.nn_util import new_constant, shape_of


def _depthwise(op, kernel, strides, pads, rewriter: PatternRewriter) -> None:
    c = shape_of(op.input)[1]
    w = new_constant(rewriter, op, np.full((c, 1, kernel[0], kernel[1]), 1.0 / (kernel[0] * kernel[1]), np.float32), "avg_w")
    b = new_constant(rewriter, op, np.zeros(c, np.float32), "avg_b")
    conv = nn.Conv2dOp(op.input, w, b, op.output.type, strides, pads, groups=c)
    conv.attributes.update(op.attributes)
    rewriter.replace(op, conv)


class GlobalAvgToConv(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.GlobalAvgPoolOp, rewriter: PatternRewriter) -> None:
        h, w = shape_of(op.input)[2:]
        _depthwise(op, (h, w), (1, 1), (0, 0, 0, 0), rewriter)


class AvgToConv(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.AvgPoolOp, rewriter: PatternRewriter) -> None:
        k = [int(v) for v in op.kernel.get_values()]
        s = [int(v) for v in op.strides.get_values()]
        p = [int(v) for v in op.pads.get_values()]
        if any(p) and op.count_include_pad is None:
            return
        if op.ceil_mode is not None:
            h, w = shape_of(op.input)[2:]
            if nn.window_out(h, k[0], s[0], p[0], p[2], 1, True) != nn.window_out(h, k[0], s[0], p[0], p[2]) or \
               nn.window_out(w, k[1], s[1], p[1], p[3], 1, True) != nn.window_out(w, k[1], s[1], p[1], p[3]):
                return
        _depthwise(op, k, s, p, rewriter)


@dataclass(frozen=True)
class AvgPoolToConvPass(ModulePass):
    name = "avgpool-to-conv"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(GreedyRewritePatternApplier([GlobalAvgToConv(), AvgToConv()])).rewrite_module(op)
