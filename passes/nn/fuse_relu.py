"""
fuse-relu: fold `nn.relu` into the producing conv2d / dense / add.

Snowflake applies ReLU in the MAC write-back (after bias and bypass), so a separate ReLU
layer would be a wasted pass over DRAM.
"""

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, UnitAttr
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from snowir.dialects import nn


class FuseRelu(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.ReluOp, rewriter: PatternRewriter) -> None:
        producer = op.input.owner
        if not isinstance(producer, nn.Conv2dOp | nn.DenseOp | nn.AddOp):
            return
        if not op.input.has_one_use() or producer.relu is not None:
            return
        producer.properties["relu"] = UnitAttr()
        rewriter.replace(op, [], [op.input])


@dataclass(frozen=True)
class FuseReluPass(ModulePass):
    name = "fuse-relu"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(FuseRelu()).rewrite_module(op)
