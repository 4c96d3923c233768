"""
fuse-relu: fold `nn.relu` into the producing conv2d / dense / add, or into every phase conv of
a ConvTranspose's interleave (`nn.depth_to_space`, which only moves words, so ReLU commutes
with it), or into the parts of a channel concat that convs write (the others keep a ReLU of
their own channels: ShuffleNet's stride-2 unit ReLUs Concat(avg pool, branch)).

Snowflake applies ReLU in the MAC write-back (after bias and bypass), so a separate ReLU
layer would be a wasted pass over DRAM (on the host: PP-OCRv4 det's ConvTranspose, BN, ReLU,
once fold-batch-norm put the BN into the phase convs, left a 3.7 ms host ReLU).

A ReLU of a value that cannot be negative goes (`nonnegative`: a ReLU's result, through ops that
only move, pick, take the maximum of or average such values, exactly in the golden model's
fixed point too): ShuffleNet's stride-2 units ReLU an average pool of the previous unit's ReLU
output, three host ReLUs of 0.47 ms in all.
"""

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, UnitAttr
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from snowir import writeback
from snowir.dialects import nn
from snowir.nn_util import name_part


PRESERVE_SIGN = (nn.MaxPoolOp, nn.AvgPoolOp, nn.GlobalAvgPoolOp, nn.ConcatOp, nn.ReshapeOp, nn.FlattenOp,
                 nn.TransposeOp, nn.IdentityOp, nn.ChannelSliceOp, nn.CropOp, nn.DepthToSpaceOp)
"""Ops whose result is non-negative when every input is: they move, pick, take the maximum of or
average their inputs' values (a rounded mean of non-negative words is non-negative)."""


def nonnegative(value: SSAValue, depth: int = 16) -> bool:
    """No value of `value` is negative: it is a ReLU's (an nn.relu, or a conv, dense or add with
    its ReLU at write-back, which applies after every write-back unit), through `PRESERVE_SIGN` ops."""
    owner = value.owner
    if depth == 0 or not isinstance(owner, Operation):
        return False
    if isinstance(owner, nn.ReluOp):
        return True
    if isinstance(owner, nn.Conv2dOp | nn.DenseOp | nn.AddOp):
        return owner.relu is not None
    return isinstance(owner, PRESERVE_SIGN) and all(nonnegative(v, depth - 1) for v in owner.operands)


class FuseRelu(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.ReluOp, rewriter: PatternRewriter) -> None:
        if nonnegative(op.input):
            rewriter.replace(op, [], [op.input])
            return
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
        if isinstance(producer, nn.ConcatOp) and producer.axis.value.data == 1:
            _into_concat_parts(op, producer, rewriter)
            return
        if not isinstance(producer, nn.Conv2dOp | nn.DenseOp | nn.AddOp) or producer.relu is not None:
            return
        producer.properties["relu"] = UnitAttr()
        rewriter.replace(op, [], [op.input])


def _takes_relu(v) -> bool:
    p = v.owner
    return isinstance(p, nn.Conv2dOp | nn.DenseOp | nn.AddOp) and p.relu is None and v.has_one_use() \
        and not writeback.layer_choices(p.attributes)


def _into_concat_parts(op: nn.ReluOp, concat: nn.ConcatOp, rewriter: PatternRewriter) -> None:
    """relu(concat(a, b, ...)) = concat(relu(a), relu(b), ...): each part a conv writes takes the
    ReLU at its write-back, any other part (ShuffleNet's stride-2 unit: an average pool the host
    runs) gets a ReLU of its own, over its channels only rather than the whole concat's. Only
    where some part is such a conv."""
    parts = list(concat.inputs)
    if not any(_takes_relu(v) for v in parts):
        return
    for i, v in enumerate(parts):
        if _takes_relu(v):
            v.owner.properties["relu"] = UnitAttr()
        else:
            relu = nn.ReluOp(v, v.type)
            name_part(relu, op, str(i))
            rewriter.insert(relu, InsertPoint.before(concat))
            concat.operands[i] = relu.output
    rewriter.replace(op, [], [op.input])


@dataclass(frozen=True)
class FuseReluPass(ModulePass):
    name = "fuse-relu"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(FuseRelu()).rewrite_module(op)
