"""
pad-rows{hw=}: give an INDP conv reading the model input its row padding as zero rows, so no
output row has clipped kernel rows:

    conv(x, W, pads (t, l, b, r)) -> conv(pad_rows(x, (t, b)), W, pads (0, l, 0, r))

Why: INDP splits output rows over the CUs, all running one instruction stream, so a row whose
kernel rows padding clips runs alone on CU 0 (snowir/plan/indp.indp_groups): ResNet's 7x7/2
stem has three such rows (0, 1 and 111) at a quarter of the machine, and its 109 other rows
leave one over after groups of four CUs. With the padding as rows of zeros every output row
reads all kh kernel rows and the 112 rows are 28 full groups; the price is the zero rows'
taps (computed, not useful: the report counts useful MACs without them) and the host writing
t + b more input rows.

Rewritten: a conv reading the model input (the host lays the input out as it loads it, as for
unfold-rows: `nn.pad_rows` is placed on the host), ungrouped, undilated, with row padding, that
runs INDP as it is and padded, when the CU rows it takes padded (every group of CUs x rows per
CU computing kh kernel rows) are fewer than as it is (clipped rows alone, each its valid kernel
rows). The zero taps add nothing: golden model and machine give the same bits as the original
conv. Run with the other input layouts, before quantize (nn-prepare does).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from snowir.dialects import nn
from snowir.hw import SnowflakeConfig
from snowir.nn_util import const_of, conv_shape, tensor
from snowir.passes.nn.input_layout import plain_stem, relayout_conv
from snowir.plan.conv import choose_mode
from snowir.plan.indp import default_rows_per_cu, indp_groups
from snowir.plan.shapes import ConvShape, LoweringError


def indp_row_cycles(s: ConvShape, hw: SnowflakeConfig) -> int:
    """Kernel-row passes an INDP conv's CUs make, in units of one output row's kernel row: each
    row group takes its rows per CU times the kernel rows its rows read (clipped rows alone)."""
    total = 0
    for y0, r, _ in indp_groups(s, hw, 0, s.oh, default_rows_per_cu(s, hw)):
        iy = y0 * s.sy - s.pt
        total += r * (min(s.kh, s.h - iy) - max(0, -iy))
    return total


def padded_shape(s: ConvShape) -> ConvShape:
    return replace(s, h=s.h + s.pt + s.pb, pt=0, pb=0)


class PadRowsConv(RewritePattern):
    def __init__(self, hw: SnowflakeConfig):
        super().__init__()
        self.hw = hw

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.Conv2dOp, rewriter: PatternRewriter) -> None:
        pt, pl, pb, pr = (int(v) for v in op.pads.get_values())
        if not plain_stem(op) or pt + pb == 0:
            return
        s = conv_shape(op)
        padded = padded_shape(s)
        try:
            if choose_mode(s, self.hw, False) != "INDP" or choose_mode(padded, self.hw, False) != "INDP":
                return
            if indp_row_cycles(padded, self.hw) >= indp_row_cycles(s, self.hw):
                return
        except LoweringError:
            return
        if const_of(op.weight) is None:  # kernels computed at run time: a host conv, nothing to gain
            return
        n, c, h, w = op.input.type.get_shape()
        relayout_conv(rewriter, op, nn.PadRowsOp(op.input, (pt, pb), tensor([n, c, h + pt + pb, w], op.input)),
                      None, "pad", [int(v) for v in op.strides.get_values()], [0, pl, 0, pr])


@dataclass(frozen=True)
class PadRowsPass(ModulePass):
    name = "pad-rows"
    hw: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        hw = SnowflakeConfig.load(self.hw or None)
        PatternRewriteWalker(PadRowsConv(hw), apply_recursively=False).rewrite_module(op)
