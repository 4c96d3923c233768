"""
drop-identity: remove what computes nothing: `nn.identity` (ONNX Identity and inference-mode
Dropout), and a concat that puts a split's outputs back together in order (every output of one
ONNX Split, or channel slices covering one tensor from its first channel, along the split's axis):
the concat is that tensor.

They would cost a copy each, on the device or the host. The second shape is what a YOLOv8
Detect head leaves once the write-back activation unit has moved its class sigmoid into the
convs (fuse-activation): Split(box, cls) -> Concat(box, cls) over the scales' Concat(axis 2), two
host copies of the whole output. The pipeline runs this pass again after the write-back units',
then with `split-heads`: a Split along the channels of the scales' Concat(axis 2) of flattened
channel concats, each scale's concat of one input per split output (YOLOv8's Detect with its DFL:
Split(Concat_2(Reshape(Concat_1(box_i, cls_i)))) -> box, cls), is the split outputs' own pixel
concats of the flattened inputs (box = Concat_2(Reshape(box_i)), cls likewise): the same values,
with no host Split copying the whole output (1.38 ms of host time in NudeNet's 320² YOLOv8n).
"""

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint
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


class SplitHeads(RewritePattern):
    """Split_1(Concat_2(Reshape(Concat_1(x_i0, x_i1, ...)))) -> Concat_2(Reshape(x_i0)), ...: each
    split output the pixel concat of the scales' inputs it is made of."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.HostOp, rewriter: PatternRewriter) -> None:
        if op.op_type.data != "Split" or "place" in op.attributes:
            return
        cat = op.inputs[0].owner
        axis = op.attrs.data.get("axis", IntegerAttr(0, 64))
        if not isinstance(cat, nn.ConcatOp) or len(op.inputs[0].type.get_shape()) != 3 or cat.axis.value.data != 2 \
                or not isinstance(axis, IntegerAttr) or axis.value.data % 3 != 1 or len(list(op.inputs[0].uses)) != 1:
            return
        sizes = [r.type.get_shape()[1] for r in op.results]
        scales = []  # per scale: the channel concat's inputs, one per split output
        for flat in cat.operands:
            reshape = flat.owner
            if not isinstance(reshape, nn.ReshapeOp) or len(reshape.input.type.get_shape()) != 4:
                return
            heads = reshape.input.owner
            if not isinstance(heads, nn.ConcatOp) or heads.axis.value.data != 1 \
                    or [v.type.get_shape()[1] for v in heads.operands] != sizes:
                return
            scales.append(list(heads.operands))
        outs = []
        for j, result in enumerate(op.results):
            pieces = []
            for inputs in scales:
                n, c, h, w = inputs[j].type.get_shape()
                piece = nn.ReshapeOp(inputs[j], TensorType(result.type.get_element_type(), [n, c, h * w]))
                rewriter.insert(piece, InsertPoint.before(op))
                pieces.append(piece.results[0])
            joined = nn.ConcatOp(pieces, 2, result.type)
            for key in ("onnx_node",):
                if key in cat.attributes:
                    joined.attributes[key] = StringAttr(f"{cat.attributes[key].data}.{j}")
            rewriter.insert(joined, InsertPoint.before(op))
            outs.append(joined.results[0])
        rewriter.replace(op, [], outs)
        dead = [cat, *(v.owner for v in cat.operands)]  # the pixel concat, its reshapes, the scales' concats
        dead += [r.input.owner for r in dead[1:]]
        for old in dead:
            if isinstance(old, Operation) and all(not r.uses for r in old.results):
                rewriter.erase(old)


@dataclass(frozen=True)
class DropIdentityPass(ModulePass):
    name = "drop-identity"
    split_heads: bool = False
    """Also push a Split of detector heads' pixel concat into the scales (`SplitHeads`)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(GreedyRewritePatternApplier([DropIdentity(), DropReassembly()])).rewrite_module(op)
        if self.split_heads:  # after: a split put back together goes whole
            PatternRewriteWalker(SplitHeads()).rewrite_module(op)
