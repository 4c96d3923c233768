"""
split-kernels{max-words=4080}: split convolutions whose kernels do not fit a vMAC's weights
buffer into convolutions over input-channel slices, chained through the bypass operand:

    conv(x, W, b) -> y1 = conv(slice(x, 0..c1), W[:, 0..c1], b [, bypass r])
                     y2 = conv(slice(x, c1..c2), W[:, c1..c2], 0, bypass y1) ... (relu on the last)

A 3x3x512 kernel (4624 words with its bias block) cannot live in the 4096-word weights buffer,
and the 48-bit accumulator cannot be carried across a weights reload for every pixel, so the
partial result goes through DRAM as a fixed-point tensor and is added back at the next part's
write-back. The rewrite is explicit in the graph, so the golden model rounds the partial
result exactly where the hardware does. Fully connected layers (1x1 output) are left alone:
the code generator streams their kernels without rounding. Run before quantize.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from snowir.dialects import nn
from snowir.nn_util import const_of, new_constant, shape_of, tensor


class SplitKernel(RewritePattern):
    def __init__(self, max_words: int):
        super().__init__()
        self.max_words = max_words

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.Conv2dOp, rewriter: PatternRewriter) -> None:
        k, cg, kh, kw = shape_of(op.weight)
        n, c, h, w = shape_of(op.input)
        _, _, oh, ow = shape_of(op.output)
        if op.groups.value.data != 1 or kh * kw * cg + 16 <= self.max_words or (oh == 1 and ow == 1):
            return
        weights, bias = const_of(op.weight), const_of(op.bias)
        if weights is None or bias is None:
            return
        per = (self.max_words - 16) // (kh * kw) // 16 * 16
        if per < 16:
            return
        count = -(-c // per)
        even = -(-c // count)
        per = -(-even // 16) * 16  # balanced parts, 16-channel aligned
        parts = [(a, min(per, c - a)) for a in range(0, c, per)]
        args = dict(strides=[int(v) for v in op.strides.get_values()], pads=[int(v) for v in op.pads.get_values()],
                    dilations=[int(v) for v in op.dilations.get_values()])
        acc = op.bypass
        new_ops = []
        for i, (a, size) in enumerate(parts):
            last = i == len(parts) - 1
            part = nn.ChannelSliceOp(op.input, a, size, tensor([n, size, h, w], op.input))
            rewriter.insert(part, _before(op))
            wv = new_constant(rewriter, op, weights[:, a:a + size], "w_part")
            bv = new_constant(rewriter, op, bias if i == 0 else np.zeros_like(bias), "b_part")
            conv = nn.Conv2dOp(part.output, wv, bv, op.output.type, relu=last and op.relu is not None,
                               bypass=acc, **args)
            conv.attributes.update(op.attributes)
            if "onnx_node" in op.attributes:
                conv.attributes["onnx_node"] = nn.StringAttr(f"{op.attributes['onnx_node'].data}.part{i}")
            rewriter.insert(conv, _before(op))
            acc = conv.output
            new_ops.append(conv)
        rewriter.replace(op, [], [acc])


def _before(op):
    from xdsl.rewriter import InsertPoint

    return InsertPoint.before(op)


@dataclass(frozen=True)
class SplitKernelsPass(ModulePass):
    name = "split-kernels"
    max_words: int = 4080

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(SplitKernel(self.max_words), apply_recursively=False).rewrite_module(op)
        from snowir.passes.fold_batch_norm import _drop_dead_constants

        _drop_dead_constants(op)
