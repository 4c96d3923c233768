"""
unfold-rows{hw=}: give a conv reading the model input its kernel rows as channels, so its whole
window is one contiguous COOP trace:

    conv(x, W, kh x kw, stride (sy, sx), pads (t, l, b, r))
        -> conv(unfold_rows(x, kh, sy, (t, b)), W', 1 x kw, stride (1, sx), pads (0, l, 0, r))

    x'[ky·C + c, i, j] = x[c, sy·i + ky − t, j]   (0 outside x)
    W'[k, ky·C + c, 0, kx] = W[k, c, ky, kx]

Why: a model input has few channels, so a kernel row is a short trace (AlexNet's 11x11/4 conv1:
33 words, 3 cycles for 33 of 48 lanes, 11 traces a pixel). space-to-depth makes it a 3x3 conv
over 48 channels (27 cycles a pixel, 144/121 of the MACs are zero taps); unfolded, a pixel is
one 363-word trace, 23 cycles, 363 of 368 lanes. The price is kh/sy times the input's DRAM
traffic (AlexNet: 2.75x, 0.8 MB), which a compute-bound first layer hides (even on 16 CUs at
4.2 GB/s, measured: 75.1 k cycles against space-to-depth's 86.6 k). Columns keep their
padding as the conv clamps it (border pixels get shorter traces); rows' padding becomes zero
channels of the first and last output rows.

Rewritten: a conv reading the model input (the host lays the input out as it loads it, as for
space-to-depth: `nn.unfold_rows` is placed on the host), ungrouped, undilated, whose kernels do
not fit INDP, whose unfolded window occupies fewer MAC lanes than its kernel-row traces, when
snowir.passes.nn.input_layout estimates the unfolded pixel cheaper than both the direct conv's and
space-to-depth's (a layer estimate: its pixels' cycles, or its input and output traffic at the
bus's rate if longer), and a row of the unfolded input fits half a maps bank.
The integer sums are the same products in another order: golden model and machine give the
same bits as the original conv. Run before space-to-depth and quantize (nn-prepare does).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from snowir.dialects import nn
from snowir.hw import SnowflakeConfig
from snowir.nn_util import const_of, conv_shape, drop_dead_constants, shape_of, tensor
from snowir.passes.nn.input_layout import (StemConv, direct_cycles, plain_stem, relayout_conv, space_to_depth_cycles,
                                           unfold_rows_cycles, unfold_rows_fills_lanes, unfold_rows_fits)
from snowir.plan.indp import indp_fits


def unfold_rows_weights(w: np.ndarray) -> np.ndarray:
    """(K, C, kh, kw) -> (K, kh·C, 1, kw), channel ky·C + c."""
    k, c, kh, kw = w.shape
    return np.ascontiguousarray(w.transpose(0, 2, 1, 3).reshape(k, kh * c, 1, kw))


class UnfoldRowsConv(RewritePattern):
    def __init__(self, hw: SnowflakeConfig):
        super().__init__()
        self.hw = hw

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.Conv2dOp, rewriter: PatternRewriter) -> None:
        k, c, kh, kw = shape_of(op.weight)
        sy, sx = (int(v) for v in op.strides.get_values())
        pt, pl, pb, pr = (int(v) for v in op.pads.get_values())
        if not plain_stem(op) or kh < 2 or pt >= kh or pb >= kh:
            return
        if indp_fits(conv_shape(op), self.hw, False):  # INDP runs it without zero taps
            return
        n, _, h, w = shape_of(op.input)
        _, _, oh, ow = shape_of(op.output)
        s = StemConv(c, h, w, kh, kw, sy, sx, oh, ow, k)
        unfolded = unfold_rows_cycles(s, self.hw)
        rivals = [direct_cycles(s, self.hw), space_to_depth_cycles(s, self.hw)]
        if any(r is not None and r <= unfolded for r in rivals) or not unfold_rows_fills_lanes(s, self.hw) \
                or not unfold_rows_fits(s, self.hw):
            return
        weights, bias = const_of(op.weight), const_of(op.bias)
        if weights is None or bias is None:
            return
        relayout_conv(rewriter, op, nn.UnfoldRowsOp(op.input, kh, sy, (pt, pb), tensor([n, kh * c, oh, w], op.input)),
                      unfold_rows_weights(weights), "unfold", [1, sx], [0, pl, 0, pr])

@dataclass(frozen=True)
class UnfoldRowsPass(ModulePass):
    name = "unfold-rows"
    hw: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        hw = SnowflakeConfig.load(self.hw or None)
        PatternRewriteWalker(UnfoldRowsConv(hw), apply_recursively=False).rewrite_module(op)

        drop_dead_constants(op)
