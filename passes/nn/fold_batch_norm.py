"""
fold-batch-norm: fold inference batch normalisation and per-channel scale/shift into convolutions.

  * batch_norm(conv(x)) -> conv with w' = w*k, b' = (b - mean)*k + beta, k = gamma/sqrt(var+eps);
  * caffe2's "Scale" (BN followed by Mul/Add with per-channel constants, from Unsqueeze in the
    ONNX graph): mul(conv, c) and add(conv, c) fold into the conv's weights and bias;
  * one after an `nn.depth_to_space` of convs' phases (a ConvTranspose, conv-transpose-to-conv's
    interleave, read only by it) folds into those convs, each phase channel taking its output
    channel's scale and shift (the interleave only moves words): PP-OCRv4's detector's last BN;
  * a batch_norm, mul or add by per-channel constants that has no conv to fold into (DenseNet's
    pre-activation BN after a concat) becomes a depthwise 1x1 conv, which is how Snowflake runs it;
  * add(dense(x), c), through a reshape that keeps the last axis, with c one constant per output
    (Paddle's MatMul + Add bias): into the dense's bias.

Snowflake has no normalisation unit, and a folded conv costs nothing extra.
"""

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (GreedyRewritePatternApplier, PatternRewriter, PatternRewriteWalker,
                                   RewritePattern, op_type_rewrite_pattern)

from snowir.dialects import nn
from snowir.nn_util import const_of, drop_dead_constants, new_constant, per_channel, shape_of, single_use


def _foldable_conv(value: SSAValue) -> nn.Conv2dOp | None:
    """The conv producing `value`, when a per-channel scale / shift may go into its constant
    weights and bias."""
    conv = value.owner
    if isinstance(conv, nn.Conv2dOp) and single_use(value) and conv.relu is None and conv.bypass is None \
            and const_of(conv.weight) is not None and const_of(conv.bias) is not None:
        return conv
    return None


def _scaled(conv: nn.Conv2dOp, k: np.ndarray, shift: np.ndarray, rewriter: PatternRewriter) -> nn.Conv2dOp:
    """`conv` with weights * k (per output channel) and bias * k + shift, inserted before it."""
    w, b = const_of(conv.weight), const_of(conv.bias)
    new_w = new_constant(rewriter, conv, w * k.reshape(-1, 1, 1, 1), "w_folded")
    new_b = new_constant(rewriter, conv, b * k + shift, "b_folded")
    folded = nn.Conv2dOp(conv.input, new_w, new_b, conv.output.type, **conv.window(), groups=conv.groups.value.data)
    folded.attributes.update(conv.attributes)
    rewriter.insert(folded, _before(conv))
    return folded


def _interleaved(value: SSAValue) -> tuple[nn.DepthToSpaceOp, list[tuple[nn.Conv2dOp, np.ndarray]]] | None:
    """The convs whose phases an `nn.depth_to_space` read only by the BN interleaves into
    `value`, each with the output channel of each of its channels; None if it is not that."""
    d2s = value.owner
    if not isinstance(d2s, nn.DepthToSpaceOp) or not single_use(value):
        return None
    convs = [_foldable_conv(v) for v in d2s.inputs]
    if any(c is None for c in convs):
        return None
    by, bx = (int(v) for v in d2s.block.get_values())
    per_group = shape_of(value)[1] // d2s.groups.value.data  # Mg
    out, start = [], 0
    for conv in convs:
        q = start + np.arange(shape_of(conv.output)[1])
        out.append((conv, q // (by * bx * per_group) * per_group + q % per_group))
        start += len(q)
    return d2s, out


def _fold(x: SSAValue, k: np.ndarray, shift: np.ndarray, rewriter: PatternRewriter, replace) -> None:
    """Replace `replace` (a per-channel scale / shift of x) by x's conv rescaled; or, after a
    ConvTranspose's interleave, by the interleave of its phase convs rescaled (it only moves
    words, so output channel o's k and shift apply to every phase of o); else by a depthwise
    1x1 conv."""
    conv = _foldable_conv(x)
    if conv is not None:
        rewriter.replace(replace, [], [_scaled(conv, k, shift, rewriter).output])
        rewriter.erase(conv)
        return
    interleaved = _interleaved(x)
    if interleaved is not None:
        d2s, parts = interleaved
        for conv, channel in parts:
            rewriter.replace(conv, [], [_scaled(conv, k[channel], shift[channel], rewriter).output])
        rewriter.replace(replace, [], [d2s.output])
        return
    _depthwise(x, k, shift, rewriter, replace)


def _before(op):
    from xdsl.rewriter import InsertPoint

    return InsertPoint.before(op)


def _depthwise(x: SSAValue, k: np.ndarray, shift: np.ndarray, rewriter: PatternRewriter, replace) -> None:
    c = len(k)
    w = new_constant(rewriter, replace, k.reshape(c, 1, 1, 1), "w_channel")
    b = new_constant(rewriter, replace, shift, "b_channel")
    conv = nn.Conv2dOp(x, w, b, replace.results[0].type, groups=c)
    conv.attributes.update(replace.attributes)
    rewriter.replace(replace, conv)


class FoldBatchNorm(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.BatchNormOp, rewriter: PatternRewriter) -> None:
        if len(shape_of(op.input)) != 4:
            return
        gamma, beta, mean, var = (const_of(v) for v in (op.scale, op.bias, op.mean, op.var))
        if any(a is None for a in (gamma, beta, mean, var)):
            return
        k = (gamma / np.sqrt(var.astype(np.float64) + op.epsilon.value.data)).astype(np.float32)
        shift = (beta - mean * k).astype(np.float32)
        _fold(op.input, k, shift, rewriter, op)


class FoldChannelScale(RewritePattern):
    """mul / add of a conv (or any NCHW tensor) with a per-channel constant."""

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, nn.MulOp | nn.AddOp) or (isinstance(op, nn.AddOp) and op.relu is not None):
            return
        for x, c in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
            shape = shape_of(x)
            if len(shape) != 4 or shape_of(op.output) != shape:
                continue
            vec = per_channel(const_of(c), shape[1])
            if vec is None or const_of(x) is not None:
                continue
            ones, zeros = np.ones_like(vec), np.zeros_like(vec)
            k, shift = (vec, zeros) if isinstance(op, nn.MulOp) else (ones, vec)
            _fold(x, k, shift, rewriter, op)
            return


def _last_axis(array: np.ndarray, m: int) -> np.ndarray | None:
    """A constant that broadcasts as one value per entry of the last axis (of length m), as [m]."""
    if array.size == 1:
        return np.full(m, float(array.reshape(-1)[0]), np.float32)
    if array.ndim >= 1 and array.shape[-1] == m and array.size == m:
        return array.reshape(m).astype(np.float32)
    return None


class FoldDenseBias(RewritePattern):
    """add of a dense's output (or a reshape of it keeping the last axis) and a per-output constant."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.AddOp, rewriter: PatternRewriter) -> None:
        if op.relu is not None:
            return
        for v, c in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
            array, dense_out = const_of(c), v
            if array is None or shape_of(op.output) != shape_of(v) or not single_use(v):
                continue
            if isinstance(v.owner, nn.ReshapeOp):
                dense_out = v.owner.input
            dense = dense_out.owner
            if not isinstance(dense, nn.DenseOp) or dense.relu is not None or not single_use(dense_out):
                continue
            m = shape_of(dense.output)[1]
            vec, bias = _last_axis(array, m), const_of(dense.bias)
            if vec is None or bias is None or shape_of(v)[-1] != m:
                continue
            folded = nn.DenseOp(dense.input, dense.weight, new_constant(rewriter, dense, bias + vec, "b_folded"),
                                dense.output.type)
            folded.attributes.update(dense.attributes)
            rewriter.replace(dense, folded)
            rewriter.replace(op, [], [folded.output if dense_out is v else v])
            return


@dataclass(frozen=True)
class FoldBatchNormPass(ModulePass):
    name = "fold-batch-norm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(GreedyRewritePatternApplier([FoldBatchNorm(), FoldChannelScale(), FoldDenseBias()])).rewrite_module(op)
        drop_dead_constants(op)


