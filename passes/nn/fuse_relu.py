"""
fuse-relu: fold `nn.relu` into the producing conv2d / dense / add, or into every phase conv of
a ConvTranspose's interleave (`nn.depth_to_space`, which only moves words, so ReLU commutes
with it).

Snowflake applies ReLU in the MAC write-back (after bias and bypass), so a separate ReLU
layer would be a wasted pass over DRAM (on the host: PP-OCRv4 det's ConvTranspose, BN, ReLU,
once fold-batch-norm put the BN into the phase convs, left a 3.7 ms host ReLU).
"""

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, UnitAttr
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from snowir import writeback
from snowir.dialects import nn


class FuseRelu(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.ReluOp, rewriter: PatternRewriter) -> None:
        producer = op.input.owner
        if not op.input.has_one_use():
            return
        if isinstance(producer, nn.DepthToSpaceOp):
            phases = [v.owner for v in producer.inputs]
            if not all(isinstance(p, nn.Conv2dOp) and p.relu is None and not writeback.layer_choices(p.attributes)
                       and v.has_one_use() for p, v in zip(phases, producer.inputs)):
                return
            for p in phases:
                p.properties["relu"] = UnitAttr()
            rewriter.replace(op, [], [op.input])
            return
        if not isinstance(producer, nn.Conv2dOp | nn.DenseOp | nn.AddOp) or producer.relu is not None:
            return
        producer.properties["relu"] = UnitAttr()
        rewriter.replace(op, [], [op.input])


@dataclass(frozen=True)
class FuseReluPass(ModulePass):
    name = "fuse-relu"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(FuseRelu()).rewrite_module(op)
