"""
drop-identity: remove what computes nothing: `nn.identity` (ONNX Identity and inference-mode
Dropout), and a concat that puts a split's outputs back together in order (every output of one
ONNX Split, or channel slices covering one tensor from its first channel, along the split's axis):
the concat is that tensor.

They would cost a copy each, on the device or the host. The second shape is what a YOLOv8
Detect head leaves once the write-back activation unit has moved its class sigmoid into the
convs (fuse-activation): Split(box, cls) -> Concat(box, cls) over the scales' Concat(axis 2), two
host copies of the whole output. The pipeline runs this pass again after the write-back units'.
"""

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (GreedyRewritePatternApplier, PatternRewriter, PatternRewriteWalker, RewritePattern,
                                   op_type_rewrite_pattern)

from snowir.dialects import nn


class DropIdentity(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.IdentityOp, rewriter: PatternRewriter) -> None:
        rewriter.replace(op, [], [op.input])


class DropReassembly(RewritePattern):
    """Concat(split(x) in order, along its axis) -> x."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.ConcatOp, rewriter: PatternRewriter) -> None:
        if "place" in op.attributes:  # the user's placement stands
            return
        source = _reassembled(list(op.operands), op.axis.value.data % len(op.output.type.get_shape()))
        if source is None or source.type != op.output.type:
            return
        split = op.operands[0].owner
        rewriter.replace(op, [], [source])
        if isinstance(split, nn.HostOp) and all(not r.uses for r in split.results):
            rewriter.erase(split)


def _reassembled(parts: list[SSAValue], axis: int) -> SSAValue | None:
    """The tensor `parts` are the pieces of, in order along `axis`, if they are all of them."""
    split = parts[0].owner
    if isinstance(split, nn.HostOp) and split.op_type.data == "Split" and list(split.results) == parts:
        x = split.inputs[0]
        split_axis = split.attrs.data.get("axis", IntegerAttr(0, 64))
        rank = len(x.type.get_shape())
        return x if isinstance(split_axis, IntegerAttr) and split_axis.value.data % rank == axis else None
    if axis != 1 or not all(isinstance(p.owner, nn.ChannelSliceOp) for p in parts):
        return None
    x, first = parts[0].owner.input, 0  # type: ignore[union-attr]
    for p in parts:
        piece = p.owner
        if piece.input is not x or piece.start.value.data != first:  # type: ignore[union-attr]
            return None
        first += piece.size.value.data  # type: ignore[union-attr]
    return x if first == x.type.get_shape()[1] else None


@dataclass(frozen=True)
class DropIdentityPass(ModulePass):
    name = "drop-identity"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(GreedyRewritePatternApplier([DropIdentity(), DropReassembly()])).rewrite_module(op)
