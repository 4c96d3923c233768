"""
fc-to-conv: run fully connected layers as convolutions (paper §2: Snowflake has one MAC
datapath; an FC layer is a conv whose kernel covers the whole input).

  * dense(flatten(x: NxCxHxW)) -> reshape(conv(x, W as MxCxHxW)) with a HxW kernel;
  * dense(x: NxK) -> reshape(conv(reshape(x to NxKx1x1), W as MxKx1x1)).
"""

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, UnitAttr
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern
from xdsl.rewriter import InsertPoint

from snowir.dialects import nn
from snowir.nn_util import const_of, drop_dead_constants, new_constant, shape_of, tensor


class FcToConv(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.DenseOp, rewriter: PatternRewriter) -> None:
        w = const_of(op.weight)
        if w is None:
            return
        n, k = shape_of(op.input)
        m = w.shape[0]
        src = op.input.owner
        if isinstance(src, nn.FlattenOp) and src.axis.value.data == 1 and len(shape_of(src.input)) == 4:
            x = src.input
            _, c, h, wd = shape_of(x)
        else:
            reshape = nn.ReshapeOp(op.input, tensor([n, k, 1, 1], op.input))
            rewriter.insert(reshape, InsertPoint.before(op))
            x, c, h, wd = reshape.output, k, 1, 1
        w4 = new_constant(rewriter, op, w.reshape(m, c, h, wd), "fc_w")
        conv = nn.Conv2dOp(x, w4, op.bias, tensor([n, m, 1, 1], op.output), relu=op.relu is not None)
        conv.attributes.update(op.attributes)
        conv.attributes["from_dense"] = UnitAttr()  # reports name it a dense layer (C17 Table 2 counts convs only)
        back = nn.ReshapeOp(conv.output, op.output.type)
        rewriter.replace(op, [conv, back])
        if isinstance(src, nn.FlattenOp) and not src.output.uses:
            rewriter.erase(src)


@dataclass(frozen=True)
class FcToConvPass(ModulePass):
    name = "fc-to-conv"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(FcToConv()).rewrite_module(op)

        drop_dead_constants(op)
