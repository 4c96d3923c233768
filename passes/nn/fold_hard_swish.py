"""
fold-hard-swish: hard-swish as exporters spell it -> one `nn.hard_swish`.

    x * Clip(x + 3, 0, 6) / 6          (PyTorch's F.hardswish before opset 14: Add, Clip, Mul, Div)
    x * Clip(x + 3, 0, 6) * (1/6)
    x * HardSigmoid(x, alpha=1/6, beta=0.5)

Why: four host element-wise ops with three fixed-point boundaries become one host op with one,
and fold-batch-norm no longer turns the `x + 3` into a per-channel conv. Snowflake's write-back
has ReLU and 16-bit saturation but no clamp at 6 or multiply by x, so hard-swish (and ReLU6)
stay host work (docs/lowering.md). Runs first in nn-prepare, before the graph changes shape.
"""

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from snowir.dialects import nn
from snowir.nn_util import const_of


def _is(value: SSAValue, target: float) -> bool:
    c = const_of(value)
    return c is not None and c.size >= 1 and bool(np.allclose(c, target, rtol=1e-6, atol=0))


Match = tuple[SSAValue, list[Operation]]
"""x and the ops computing hard-swish from it (erased once dead)."""


def _clip_of_x_plus_3(value: SSAValue) -> Match | None:
    """Clip(x + 3, 0, 6)."""
    clip = value.owner
    if not isinstance(clip, nn.ClipOp) or clip.min.value.data != 0.0 or clip.max.value.data != 6.0:
        return None
    add = clip.input.owner
    if not isinstance(add, nn.AddOp):
        return None
    for x, three in ((add.lhs, add.rhs), (add.rhs, add.lhs)):
        if _is(three, 3.0):
            return x, [clip, add, three.owner]
    return None


def _x_times_relu6(value: SSAValue) -> Match | None:
    """x * Clip(x + 3, 0, 6)."""
    mul = value.owner
    if not isinstance(mul, nn.MulOp):
        return None
    for x, other in ((mul.lhs, mul.rhs), (mul.rhs, mul.lhs)):
        inner = _clip_of_x_plus_3(other)
        if inner is not None and inner[0] is x:
            return x, [mul, *inner[1]]
    return None


def _replace(root: Operation, match: Match, rewriter: PatternRewriter) -> None:
    x, chain = match
    if root.results[0].type != x.type:
        return
    hs = nn.HardSwishOp(x)
    if "onnx_node" in root.attributes:
        hs.attributes["onnx_node"] = root.attributes["onnx_node"]
    rewriter.replace(root, hs)
    for op in chain:  # in use order: each is dead once its user is gone, unless shared
        if op.parent is not None and all(not r.uses for r in op.results):
            rewriter.erase(op)


class DivBySix(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.HostOp, rewriter: PatternRewriter) -> None:
        if op.op_type.data != "Div" or len(op.inputs) != 2 or not _is(op.inputs[1], 6.0):
            return
        match = _x_times_relu6(op.inputs[0])
        if match is not None:
            _replace(op, (match[0], [*match[1], op.inputs[1].owner]), rewriter)


class TimesSixth(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.MulOp, rewriter: PatternRewriter) -> None:
        for product, scale in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
            match = _x_times_relu6(product) if _is(scale, 1 / 6) else None
            if match is not None:
                _replace(op, (match[0], [*match[1], scale.owner]), rewriter)
                return
        for x, gate in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
            hs = gate.owner
            if isinstance(hs, nn.HardSigmoidOp) and hs.input is x and abs(hs.alpha.value.data - 1 / 6) < 1e-6 \
                    and hs.beta.value.data == 0.5:
                _replace(op, (x, [hs]), rewriter)
                return


@dataclass(frozen=True)
class FoldHardSwishPass(ModulePass):
    name = "fold-hard-swish"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from xdsl.pattern_rewriter import GreedyRewritePatternApplier

        PatternRewriteWalker(GreedyRewritePatternApplier([DivBySix(), TimesSixth()]),
                             apply_recursively=False).rewrite_module(op)
