"""
fuse-residual-add: turn add(conv(x), r) into conv(x) with `bypass r` (ResNet's residual add).

The paper (§2, §5.2) adds bypass values while the conv's outputs are produced (one VMOV per
write-back MAC) to save a round trip through DRAM. The conv must have no ReLU of its own
(ReLU comes after the add) and no other user; `r` must be available before the conv, or be a crop
of a tensor that is (exporters write waifu2x's `conv(...) + x[:, :, 4:-4, 4:-4]` with the Slice
after the conv): the crop, which computes nothing, then moves before the conv.
"""

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.ir import SSAValue
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern
from xdsl.rewriter import InsertPoint

from snowir.dialects import nn
from snowir.nn_util import defined_before, shape_of, single_use


class FuseResidualAdd(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.AddOp, rewriter: PatternRewriter) -> None:
        if shape_of(op.lhs) != shape_of(op.rhs):
            return
        # prefer the conv defined last: its bypass operand is then surely available
        candidates = []
        for conv_val, other in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
            conv = conv_val.owner
            if (isinstance(conv, nn.Conv2dOp) and single_use(conv_val) and conv.relu is None
                    and conv.bypass is None and (defined_before(other, conv) or _movable_crop(other, conv))):
                candidates.append((conv, other))
        if not candidates:
            return
        block = op.parent_block()
        conv, other = max(candidates, key=lambda c: block.get_operation_index(c[0]))
        if not defined_before(other, conv):  # a crop of a tensor that is: computed before the conv instead
            crop = other.owner
            assert isinstance(crop, nn.CropOp)
            moved = crop.clone()
            rewriter.insert(moved, InsertPoint.before(conv))
            rewriter.replace(crop, [], [moved.output])
            other = moved.output
        fused = nn.Conv2dOp(conv.input, conv.weight, conv.bias, op.output.type,
                            [int(v) for v in conv.strides.get_values()], [int(v) for v in conv.pads.get_values()],
                            [int(v) for v in conv.dilations.get_values()], conv.groups.value.data,
                            relu=op.relu is not None, bypass=other)
        fused.attributes.update(conv.attributes)
        rewriter.replace(conv, fused)
        rewriter.replace(op, [], [fused.output])


def _movable_crop(value: SSAValue, conv: nn.Conv2dOp) -> bool:
    """`value` is a crop of a tensor available before the conv."""
    return isinstance(value.owner, nn.CropOp) and defined_before(value.owner.input, conv)


@dataclass(frozen=True)
class FuseResidualAddPass(ModulePass):
    name = "fuse-residual-add"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(FuseResidualAdd()).rewrite_module(op)
