"""
space-to-depth{hw=}: give a strided first-layer conv with few input channels s² times more
channels, so its COOP traces fill the vMAC lanes:

    conv(x, W, stride s, pad (t, l)) -> conv(space_to_depth(x, s, (t, l)), W', stride 1, pad 0)

    x'[(a·s + b)·C + c, i, j] = x[c, s·i + a − t, s·j + b − l]   (0 outside x)
    W'[k, (a·s + b)·C + c, u, v] = W[k, c, s·u + a, s·v + b]      (0 past the kernel)

Why: AlexNet's 11x11/4 conv1 reads 3 channels, so a kernel row is a 33-word trace (3 cycles,
33 of 48 lanes busy) and the layer is bookkeeping-bound; its 16 interleaved kernels need
5824 weights words, more than INDP's 4096. After the rewrite it is a 3x3 conv over 48
channels: 144-word traces, every lane busy; the zero taps of the padded 12x12 kernel cost
144/121 of the MACs. The arithmetic is the same integer sum (zeros add nothing), so the
golden model, and the machine, give the same bits as the original conv.

Only convs reading the model input are rewritten: the host lays the input out as it loads it
(`nn.space_to_depth` is placed on the host), so no device layer pays for the copy. Convs that
INDP can run (their 16 kernels fit a weights buffer) are left to INDP, which wastes no taps.
Run before quantize.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from snowir.dialects import nn
from snowir.hw import SnowflakeConfig
from snowir.nn_util import const_of, conv_shape, drop_dead_constants, shape_of, tensor
from snowir.passes.nn.input_layout import plain_stem, relayout_conv
from snowir.plan.indp import indp_fits

MAX_CHANNELS = 64  # C·s² beyond this gains no lanes (COOP traces are already long)


def space_to_depth_weights(w: np.ndarray, s: int) -> np.ndarray:
    """(K, C, kh, kw) -> (K, s²·C, ⌈kh/s⌉, ⌈kw/s⌉), channel (a·s + b)·C + c."""
    k, c, kh, kw = w.shape
    kh2, kw2 = -(-kh // s), -(-kw // s)
    padded = np.zeros((k, c, kh2 * s, kw2 * s), w.dtype)
    padded[:, :, :kh, :kw] = w
    # [k, c, u, a, v, b] -> [k, a, b, c, u, v]
    blocks = padded.reshape(k, c, kh2, s, kw2, s).transpose(0, 3, 5, 1, 2, 4)
    return np.ascontiguousarray(blocks.reshape(k, s * s * c, kh2, kw2))


class SpaceToDepthConv(RewritePattern):
    def __init__(self, hw: SnowflakeConfig):
        super().__init__()
        self.hw = hw

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.Conv2dOp, rewriter: PatternRewriter) -> None:
        k, c, kh, kw = shape_of(op.weight)
        sy, sx = (int(v) for v in op.strides.get_values())
        pt, pl, pb, pr = (int(v) for v in op.pads.get_values())
        if not plain_stem(op) or sy != sx or sy < 2 or c * sy * sy > MAX_CHANNELS:
            return
        if indp_fits(conv_shape(op), self.hw, False):  # INDP runs it without zero taps
            return
        weights, bias = const_of(op.weight), const_of(op.bias)
        if weights is None or bias is None:
            return
        s = sy
        n, _, oh, ow = shape_of(op.output)
        kh2, kw2 = -(-kh // s), -(-kw // s)
        relayout_conv(rewriter, op, nn.SpaceToDepthOp(op.input, s, (pt, pl), tensor([n, s * s * c, oh + kh2 - 1, ow + kw2 - 1], op.input)),
                      space_to_depth_weights(weights, s), "s2d", [1, 1], [0, 0, 0, 0])


@dataclass(frozen=True)
class SpaceToDepthPass(ModulePass):
    name = "space-to-depth"
    hw: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        hw = SnowflakeConfig.load(self.hw or None)
        PatternRewriteWalker(SpaceToDepthConv(hw), apply_recursively=False).rewrite_module(op)

        drop_dead_constants(op)
