"""
fuse-residual-add: turn add(conv(x), r) into conv(x) with `bypass r` (ResNet's residual add).

The paper (§2, §5.2) adds bypass values while the conv's outputs are produced (one VMOV per
write-back MAC) to save a round trip through DRAM. The conv must have no ReLU of its own
(ReLU comes after the add) and no other user; `r` must be available before the conv, or be a crop
of a tensor that is (exporters write waifu2x's `conv(...) + x[:, :, 4:-4, 4:-4]` with the Slice
after the conv): the crop, which computes nothing, then moves before the conv.

**[choice] Which conv adds** when both operands are such convs (a ResNet downsampling block's last
conv and its projection shortcut): the one defined last, unless `by-cost` (on) and the planner's
estimates say the other pairing is cheaper by RESIDUAL_MIN_GAIN: the conv with the bypass priced
by its residual plan (`residual_mode.conv_mode`: column-split INDP or COOP with a bypass VMOV per
write-back), the other by its plain plan. That conv then runs last, at the add (its inputs are
already there). ResNet-50's layer2.0: the 28², 128->512 conv takes the bypass (column-split INDP,
one VMOV a 128-cycle trace) and the strided 256->512 projection runs plain, rather than that
projection paying a VMOV per 16-cycle trace (25 k cycles) with the bypass slices' loads.
"""

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.ir import SSAValue
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern
from xdsl.rewriter import InsertPoint

from snowir.dialects import nn
from snowir.errors import SnowError
from snowir.hw import SnowflakeConfig
from snowir.nn_util import conv_shape, defined_before, shape_of, single_use
from snowir.plan.conv import layout_cycles, plan_conv
from snowir.plan.residual_mode import conv_mode, coop_residual_cycles
from snowir.plan.shapes import LoweringError


RESIDUAL_MIN_GAIN = 0.01
"""The share of the two convs' estimated cycles the other pairing must save (the estimates'
resolution): a tie keeps the conv defined last."""


def _fusable(conv_val: SSAValue) -> bool:
    conv = conv_val.owner
    return isinstance(conv, nn.Conv2dOp) and single_use(conv_val) and conv.relu is None and conv.bypass is None


def conv_cycles(conv: nn.Conv2dOp, bypass: bool, hw: SnowflakeConfig) -> float | None:
    """The planner's estimate of `conv` with or without a residual bypass (None: not plannable as
    it is, e.g. kernels split-kernels will cut)."""
    s = conv_shape(conv)
    try:
        mode = conv_mode(s, hw, bypass)
        plan = plan_conv(s, hw, 0, 1 << 24, 1 << 25, None, 1 << 26 if bypass else None, mode)
    except (LoweringError, SnowError):
        return None
    if bypass and not plan.indp:
        return coop_residual_cycles(plan, hw)
    return layout_cycles(plan, hw)


def cheaper_pairing(stock: nn.Conv2dOp, other: nn.Conv2dOp, hw: SnowflakeConfig) -> bool:
    """Whether `other` adding the bypass (`stock` plain) is estimated cheaper than the stock
    pairing by RESIDUAL_MIN_GAIN."""
    costs = [conv_cycles(stock, True, hw), conv_cycles(other, False, hw),
             conv_cycles(other, True, hw), conv_cycles(stock, False, hw)]
    if any(c is None for c in costs):
        return False
    before, after = costs[0] + costs[1], costs[2] + costs[3]
    return after < (1 - RESIDUAL_MIN_GAIN) * before


class FuseResidualAdd(RewritePattern):
    def __init__(self, hw: SnowflakeConfig | None = None):
        self.hw = hw  # by cost when given

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.AddOp, rewriter: PatternRewriter) -> None:
        if shape_of(op.lhs) != shape_of(op.rhs):
            return
        # prefer the conv defined last: its bypass operand is then surely available
        candidates = []
        for conv_val, other in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
            conv = conv_val.owner
            if _fusable(conv_val) and (defined_before(other, conv) or _movable_crop(other, conv)):
                candidates.append((conv, other))
        if not candidates:
            return
        block = op.parent_block()
        conv, other = max(candidates, key=lambda c: block.get_operation_index(c[0]))
        at = None  # where the fused conv goes: the conv's place, or (the other conv adding) the add's
        if self.hw is not None and _fusable(other) and isinstance(other.owner, nn.Conv2dOp) \
                and cheaper_pairing(conv, other.owner, self.hw):
            conv, other, at = other.owner, conv.results[0], op
        if at is None and not defined_before(other, conv):  # a crop of a tensor that is: computed before the conv instead
            crop = other.owner
            assert isinstance(crop, nn.CropOp)
            moved = crop.clone()
            rewriter.insert(moved, InsertPoint.before(conv))
            rewriter.replace(crop, [], [moved.output])
            other = moved.output
        fused = nn.Conv2dOp(conv.input, conv.weight, conv.bias, op.output.type, **conv.window(),
                            groups=conv.groups.value.data, relu=op.relu is not None, bypass=other)
        fused.attributes.update(conv.attributes)
        if at is None:
            rewriter.replace(conv, fused)
            rewriter.replace(op, [], [fused.output])
        else:  # after the other conv, whose output it adds: its own inputs are defined before it
            rewriter.insert(fused, InsertPoint.before(at))
            rewriter.replace(op, [], [fused.output])
            rewriter.erase(conv)


def _movable_crop(value: SSAValue, conv: nn.Conv2dOp) -> bool:
    """`value` is a crop of a tensor available before the conv."""
    return isinstance(value.owner, nn.CropOp) and defined_before(value.owner.input, conv)


@dataclass(frozen=True)
class FuseResidualAddPass(ModulePass):
    name = "fuse-residual-add"
    by_cost: bool = True
    """Which of two convs adds the residual: by the planner's estimates (false: the one defined last)."""
    hw: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        hw = SnowflakeConfig.load(self.hw or None) if self.by_cost else None
        PatternRewriteWalker(FuseResidualAdd(hw)).rewrite_module(op)
