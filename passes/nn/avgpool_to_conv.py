"""
avgpool-to-conv: run average pooling as a depthwise convolution with weight 1/window
(paper §2: "Average pooling can be implemented as a CONV with a single weight value of
inverse of window size").

Converted: global average pooling, and avg_pool whose every window has the full count
(no padding, or count_include_pad) and no ceil-mode partial windows. Others stay avg_pool:
their border windows need their own weights (separate window objects at the tile level).

A global pool whose H x W kernel does not fit a vMAC's weights buffer as a 16-channel diagonal
kernel (16·H·W words and a bias block: an SE block's pool over 96 x 40 x 120 needs 76,800 of
4,096) becomes the means of fh x fw windows (a depthwise conv, kernel and stride fh x fw), then the
global pool of those, split again while it does not fit: the window of at most MAX_WINDOW_TAPS
taps whose kernels for all the channel groups stay in the weights buffers together (so the input
streams through once), with the fewest taps over both stages (96 x 40 x 120: 5 x 8 windows, then one
8 x 15 kernel). Each conv runs on the device, where the one conv went to the host (PP-OCRv4's
detector: 3.69 ms of host time for that pool). A window need not divide H and W: the last row
and column of windows then reach into zero padding (bottom, right), and the windows' weight is
gh·gw / (H·W) for a gh x gw grid of windows rather than 1/(fh·fw), so that the plain mean of the
grid is the mean of the H·W pixels (waifu2x UpResNet10's SE pools over 146², 142², 134²: 146 =
2·73 had no dividing window, and its 73 x 73 kernel ran on the host, 2.7 ms). The window means
are rounded to the tensor format once more than the one conv's sum; the weights are finer (1/40
and 1/120 in Q1.15: 819 and 273 LSBs, against 7 for 1/4800), so the result is closer to float,
not farther.
"""

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint
from xdsl.pattern_rewriter import (GreedyRewritePatternApplier, PatternRewriter, PatternRewriteWalker,
                                   RewritePattern, op_type_rewrite_pattern)

from snowir.dialects import nn
from snowir.hw import SnowflakeConfig
from snowir.nn_util import name_part, new_constant, shape_of, tensor
from snowir.plan.shapes import BIAS_BLOCK


def _depthwise_conv(op, x, kernel, strides, pads, out_type, rewriter: PatternRewriter,
                    weight: float | None = None) -> nn.Conv2dOp:
    c = shape_of(x)[1]
    weight = 1.0 / (kernel[0] * kernel[1]) if weight is None else weight
    w = new_constant(rewriter, op, np.full((c, 1, kernel[0], kernel[1]), weight, np.float32), "avg_w")
    b = new_constant(rewriter, op, np.zeros(c, np.float32), "avg_b")
    return nn.Conv2dOp(x, w, b, out_type, strides, pads, groups=c)


def _depthwise(op, kernel, strides, pads, rewriter: PatternRewriter) -> None:
    conv = _depthwise_conv(op, op.input, kernel, strides, pads, op.output.type, rewriter)
    conv.attributes.update(op.attributes)
    rewriter.replace(op, conv)


def kernel_fits(kh: int, kw: int, hw: SnowflakeConfig, kernels: int = 1) -> bool:
    """`kernels` 16-channel diagonal kernels of kh x kw taps, each with its bias block, fit a
    vMAC's weights buffer."""
    return kernels * (hw.lanes * kh * kw + BIAS_BLOCK) <= hw.weights_buffer_elements


MAX_WINDOW_TAPS = 64
"""A window's taps at most: a 16-channel group's trace a tap, so a pixel's code grows with them
(120 taps, 360 straight-line instructions a pixel: 38 k instruction-cache stall cycles on a
96 x 40 x 120 pool's rows)."""


def pool_window(h: int, w: int, c: int, hw: SnowflakeConfig) -> tuple[int, int] | None:
    """The window (fh, fw) of at most MAX_WINDOW_TAPS taps whose kernels for every 16-channel
    group stay in the weights buffers together (so the first stage streams its input once), with
    the fewest taps over both stages: the windows' padded area (a window past H or W reads zero
    padding, and its taps are MAC cycles too) plus the grid the next stage pools; then one that
    divides H and W, then the most square. None if no window of more than one tap leaves fewer
    windows than pixels."""
    groups = -(-c // hw.lanes)
    per_vmac = -(-groups * hw.lanes // hw.vmacs)  # kernels a vMAC holds
    best, best_key = None, None
    for fh in range(1, min(h, MAX_WINDOW_TAPS) + 1):
        for fw in range(1, min(w, MAX_WINDOW_TAPS // fh) + 1):
            gh, gw = -(-h // fh), -(-w // fw)
            if fh * fw < 2 or gh * gw >= h * w or not kernel_fits(fh, fw, hw, per_vmac):
                continue
            key = (-(gh * fh * gw * fw + gh * gw), h % fh == 0 and w % fw == 0, -abs(fh - fw))
            if best_key is None or key > best_key:
                best, best_key = (fh, fw), key
    return best


class GlobalAvgToConv(RewritePattern):
    def __init__(self, hw: SnowflakeConfig):
        super().__init__()
        self.hw = hw

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.GlobalAvgPoolOp, rewriter: PatternRewriter) -> None:
        n, c, h, w = shape_of(op.input)
        window = None if kernel_fits(h, w, self.hw) else pool_window(h, w, c, self.hw)
        if window is None:
            _depthwise(op, (h, w), (1, 1), (0, 0, 0, 0), rewriter)
            return
        # the window's means, then the global pool of those (split again if it is still too big)
        fh, fw = window
        gh, gw = -(-h // fh), -(-w // fw)
        part = _depthwise_conv(op, op.input, window, window, (0, 0, gh * fh - h, gw * fw - w),
                               tensor([n, c, gh, gw], op.input), rewriter, weight=gh * gw / (h * w))
        name_part(part, op, f"{fh}x{fw}")
        rewriter.insert(part, InsertPoint.before(op))
        rest = nn.GlobalAvgPoolOp(part.output, op.output.type)
        rest.attributes.update(op.attributes)
        rewriter.replace(op, rest)


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
    hw: str = ""
    """A hardware description JSON (the weights buffer a global pool's kernel must fit); default: ZC706."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        hw = SnowflakeConfig.load(self.hw or None)
        PatternRewriteWalker(GreedyRewritePatternApplier([GlobalAvgToConv(hw), AvgToConv()])).rewrite_module(op)
