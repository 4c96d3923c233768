"""
split-kernels{max-words=0 by-cost=true kernel-parts= hw=}: split convolutions whose kernels
do not fit a vMAC's weights buffer -- or, with `by-cost`, whose parts the planner estimates
faster (kernels that then fit a weights slot and double-buffer, maps that then fit the buffer so
the weights go once) -- into convolutions over input-channel slices, chained through the bypass
operand:

    conv(x, W, b) -> y1 = conv(slice(x, 0..c1), W[:, 0..c1], b [, bypass r])
                     y2 = conv(slice(x, c1..c2), W[:, c1..c2], 0, bypass y1) ... (relu on the last)

The parts' partial sums are whole pixels here; choose-layouts then decides, over the graph's
bypass chains, which to store channel-tile-major (docs/lowering.md "Channel-tile-major tensors").

With `by-cost` a conv without a bypass may instead split its kernels (output channels) into
kernel parts, each over the whole input, joined by a channel concat that the parts write in place:

    conv(x, W, b) -> concat(conv(x, W[0..k1], b[0..k1]), conv(x, W[k1..k2], b[k1..k2]), ...)

Each output is still one conv's, so nothing is rounded that was not; what it buys is kernels that
all fit the machine's weights buffers at once (`resident`: loaded once, every strip computed
under them) where the whole conv's do not. ResNet-50's 14², 1x1 1024 -> 512 on 16 CUs: four
input-channel parts (each writing and reading back 200 KB of partial sums) or two kernel parts
of 256 (each its input once more, 401 KB); the estimate decides between channel parts, kernel
parts and none, by KERNEL_PARTS_MIN_GAIN (the estimate does not see a resident part's cold start).

A 3x3x512 kernel (4624 words with its bias block) cannot live in the 4096-word weights buffer,
and the 48-bit accumulator cannot be carried across a weights reload for every pixel, so the
partial result goes through DRAM as a fixed-point tensor and is added back at the next part's
write-back. The rewrite is explicit in the graph, so the golden model rounds the partial
result exactly where the hardware does. Fully connected layers (1x1 output) are left alone:
the code generator streams their kernels without rounding. Run before quantize.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from snowir.dialects import nn
from snowir.errors import SnowError
from snowir.hw import SnowflakeConfig
from snowir.nn_util import const_of, conv_shape, drop_dead_constants, name_part, new_constant, shape_of, tensor
from snowir.plan.conv import plan_conv, residual_cycles
from snowir.plan.issue import placement_cycles
from snowir.plan.shapes import ConvPlan, ConvShape, LoweringError, weights_slot_elements
from snowir.segments import CHANNEL_TILES


MAX_PARTS_BY_COST = 4
MIN_GAIN = 0.03  # a split for speed must save this share of the layer's estimated cycles
KERNEL_PARTS_MIN_GAIN = 0.05
"""The share kernel parts must save: their estimate leaves out each part's resident cold start (its
kernels land before its later strips compute, plan/paired_start.py), which the whole conv pays
once. Measured on 16 CUs at 4.2 GB/s (fast engine, bit-exact): ResNet-18's layer3.0.conv1 (3x3/2,
128 -> 256 at 28²) predicted 4.1% faster as two parts, ran 4.6% slower; ResNet-50's n86 (1x1/2,
512 -> 1024) predicted 4.6%, ran 4.4% faster; the 14² 1x1 1024 -> 512 predicted 25.8%, ran 13.8%
faster than its channel parts. Since stop 55 the whole conv is priced by its own planner's estimate
(`placement_cycles`): n86's row groups 126.9 k against the parts' 107.2 k (15.5%), so it splits;
layer3.0.conv1 (a broadcast plan) is priced as before and stays whole."""


def _parts(c: int, count: int) -> list[tuple[int, int]]:
    """`count` balanced, 16-channel aligned input-channel slices."""
    even = -(-c // count)
    per = -(-even // 16) * 16
    return [(a, min(per, c - a)) for a in range(0, c, per)]


def _part_shape(op: nn.Conv2dOp, parts: list[tuple[int, int]], i: int) -> ConvShape:

    whole = conv_shape(op)
    a, size = parts[i]
    return replace(whole, c=size, cin_total=whole.c if len(parts) > 1 else 0, c_base=a)


def _kernel_part_plan(op: nn.Conv2dOp, size: int, hw: SnowflakeConfig) -> ConvPlan | None:
    """The planner's plan of a kernel part of `size` kernels (no bypass: only a conv without one
    splits its kernels), or None where the planner refuses it."""
    try:
        return plan_conv(replace(conv_shape(op), k=size), hw, 0, 1 << 24, 1 << 25, None, None, "COOP")
    except LoweringError:
        return None


def kernel_parts_cycles(op: nn.Conv2dOp, parts: list[tuple[int, int]], hw: SnowflakeConfig) -> float:
    """The planner's estimate for the conv run as these kernel parts, one after the other, or inf
    where a part has no plan or its kernels are not resident (the structural gain kernel parts are
    weighed for: a part's kernels loaded once while its maps go once). Each part is priced as the
    whole conv is (`placement_cycles`: the estimate its own planner chose its plan by)."""
    total = 0.0
    for _, size in parts:
        plan = _kernel_part_plan(op, size, hw)
        if plan is None or not plan.resident_weights:
            return float("inf")
        total += placement_cycles(plan, hw)
    return total


def estimated_cycles(op: nn.Conv2dOp, parts: list[tuple[int, int]], hw: SnowflakeConfig) -> float:
    """The planner's estimate for the conv run as these channel parts (the first with the conv's
    own bypass if any, each later one with the previous part's output as its bypass)."""
    total = 0.0
    for i in range(len(parts)):
        s = _part_shape(op, parts, i)
        bypass = i > 0 or op.bypass is not None
        try:
            plan = plan_conv(s, hw, 0, 1 << 24, 1 << 25, None, 1 << 26 if bypass else None, "COOP")
        except LoweringError:
            return float("inf")
        total += residual_cycles(plan, hw) if bypass else plan.estimated_cycles(hw)
    return total


def _cheapest(best: int, best_cycles: float, counts: range, channels: int, price: Callable[[int], float],
              gain: float) -> int:
    """The part count among `counts` (parts of at least 16 of `channels`) whose estimated cycles
    (`price`) beat the best so far by `gain`, else `best`: an estimate's small wins are noise."""
    for count in counts:
        if channels // count < 16:
            break
        cycles = price(count)
        if cycles < best_cycles * (1 - gain):
            best, best_cycles = count, cycles
    return best


class SplitKernel(RewritePattern):
    def __init__(self, max_words: int, by_cost: bool, hw: SnowflakeConfig, kernel_parts: bool = True):
        super().__init__()
        self.max_words = max_words
        self.by_cost = by_cost
        self.hw = hw
        self.kernel_parts = kernel_parts

    def _count_by_cost(self, op: nn.Conv2dOp, c: int) -> int:
        """Parts that make the layer faster by the planner's estimate: a kernel that cannot be
        double-buffered (staggered, its overlap loaded while nothing computes) or maps that
        need several strips (every strip re-sends the weights) can become parts whose kernels
        fit a weights slot and whose maps fit the buffer. 1: no split."""
        if c < 32:
            return 1
        _, _, kh, kw = shape_of(op.weight)
        _, _, h, w = shape_of(op.input)
        slot, room = weights_slot_elements(self.hw), self.hw.maps_buffer_elements
        best, best_cycles = 1, estimated_cycles(op, [(0, c)], self.hw)
        for count in range(2, MAX_PARTS_BY_COST + 1):
            if c // count < 16:
                break
            parts = _parts(c, count)
            size = max(n for _, n in parts)
            # only splits with a structural gain: kernels that now double-buffer, or maps that
            # now fit one strip (so each part sends its weights once); the estimate decides
            double = kh * kw * c + 16 > slot >= kh * kw * size + 16
            one_strip = h * w * c > room >= h * w * size
            if not (double or one_strip):
                continue
            cycles = estimated_cycles(op, parts, self.hw)
            if cycles < best_cycles * (1 - MIN_GAIN):
                best, best_cycles = count, cycles
        return best

    def _kernel_count_by_cost(self, op: nn.Conv2dOp, k: int, c: int, channel_count: int) -> int:
        """Kernel parts that make the layer faster than it runs whole or as its `channel_count`
        channel parts (the estimates) by KERNEL_PARTS_MIN_GAIN: only where the whole conv's
        kernels are not resident and a part's are (kernel_parts_cycles). The whole conv is priced
        by the estimate its planner chose its plan by (`placement_cycles`): a strided 1x1's row
        groups (`coop_rows`) by theirs, which counts the CUs a group leaves idle and the issue,
        not the broadcast loop-order model's (ResNet-50's n86 on 16 CUs, 1x1/2 512 -> 1024:
        112.3 k by that model, 126.9 k by its own, 137.6 k run; two parts 107.2 k, 131.6 k run).
        1: none."""
        if not self.kernel_parts or op.bypass is not None or k < 32:
            return 1  # a part would need its channels of the bypass; too few kernels to share out
        whole = _kernel_part_plan(op, k, self.hw)
        if whole is None or whole.resident_weights:
            return 1
        now = placement_cycles(whole, self.hw) if channel_count == 1 \
            else estimated_cycles(op, _parts(c, channel_count), self.hw)
        return _cheapest(1, now, range(2, MAX_PARTS_BY_COST + 1), k,
                         lambda count: kernel_parts_cycles(op, _parts(k, count), self.hw), KERNEL_PARTS_MIN_GAIN)

    def _more_parts(self, op: nn.Conv2dOp, c: int, least: int) -> int:
        """The fewest parts the kernels need, or more where the planner estimates them faster by
        MIN_GAIN: parts whose kernels then fit a weights slot double-buffer instead of staggering
        (a 3x3 conv over 512 channels: two parts of 256 stagger, four of 128 double-buffer)."""
        return _cheapest(least, estimated_cycles(op, _parts(c, least), self.hw),
                         range(least + 1, max(MAX_PARTS_BY_COST, least) + 1), c,
                         lambda count: estimated_cycles(op, _parts(c, count), self.hw), MIN_GAIN)

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.Conv2dOp, rewriter: PatternRewriter) -> None:
        k, cg, kh, kw = shape_of(op.weight)
        n, c, h, w = shape_of(op.input)
        _, _, oh, ow = shape_of(op.output)
        if op.groups.value.data != 1 or (oh == 1 and ow == 1) or "split" in op.attributes or CHANNEL_TILES in op.attributes:
            return  # a channel-tile-major output (depthwise-to-grouped) is one conv's: parts chain through a bypass
        weights, bias = const_of(op.weight), const_of(op.bias)
        if weights is None or bias is None:
            return
        if kh * kw * cg + 16 > self.max_words:
            per = (self.max_words - 16) // (kh * kw) // 16 * 16
            if per < 16:
                return
            count = -(-c // per)
            if self.by_cost:  # more parts than the buffer forces, where the estimate says they pay
                count = self._more_parts(op, c, count)
        else:
            count = self._count_by_cost(op, c) if self.by_cost else 1
            if self.by_cost:
                kernel_count = self._kernel_count_by_cost(op, k, c, count)
                if kernel_count > 1:
                    self._split_kernels(op, rewriter, _parts(k, kernel_count))
                    return
            if count == 1:
                return
        parts = _parts(c, count)
        args = op.window()
        acc = op.bypass
        for i, (a, size) in enumerate(parts):
            last = i == len(parts) - 1
            part = nn.ChannelSliceOp(op.input, a, size, tensor([n, size, h, w], op.input))
            rewriter.insert(part, _before(op))
            wv = new_constant(rewriter, op, weights[:, a:a + size], "w_part")
            bv = new_constant(rewriter, op, bias if i == 0 else np.zeros_like(bias), "b_part")
            conv = nn.Conv2dOp(part.output, wv, bv, op.output.type, relu=last and op.relu is not None,
                               bypass=acc, **args)
            conv.attributes.update(op.attributes)
            conv.attributes["split"] = nn.UnitAttr()
            if "onnx_node" in op.attributes:
                conv.attributes["onnx_node"] = nn.StringAttr(f"{op.attributes['onnx_node'].data}.part{i}")
            rewriter.insert(conv, _before(op))
            acc = conv.output
        rewriter.replace(op, [], [acc])

    @staticmethod
    def _split_kernels(op: nn.Conv2dOp, rewriter: PatternRewriter, parts: list[tuple[int, int]]) -> None:
        """`op` as kernel parts over its whole input, concatenated along the channels."""
        n, _, oh, ow = shape_of(op.output)
        weights, bias = const_of(op.weight), const_of(op.bias)
        args = op.window()
        outs = []
        for i, (a, size) in enumerate(parts):
            wv = new_constant(rewriter, op, weights[a:a + size], "w_kpart")
            bv = new_constant(rewriter, op, bias[a:a + size], "b_kpart")
            conv = nn.Conv2dOp(op.input, wv, bv, tensor([n, size, oh, ow], op.output), relu=op.relu is not None, **args)
            conv.attributes.update(op.attributes)
            conv.attributes["split"] = nn.UnitAttr()
            name_part(conv, op, f"kpart{i}")
            rewriter.insert(conv, _before(op))
            outs.append(conv.output)
        concat = nn.ConcatOp(outs, 1, op.output.type)
        name_part(concat, op, "kparts")
        rewriter.replace(op, [concat], [concat.output])


def _before(op):
    from xdsl.rewriter import InsertPoint

    return InsertPoint.before(op)


@dataclass(frozen=True)
class SplitKernelsPass(ModulePass):
    name = "split-kernels"
    max_words: int = 0
    """Kernel words a part may hold; 0: the weights buffer less its 16-word bias block."""
    by_cost: bool = True
    """Also split where the planner estimates the parts faster (at least MIN_GAIN)."""
    kernel_parts: bool | None = None
    """Also weigh kernel (output-channel) parts, by cost (absent: whenever `by-cost`; false: channel
    parts only). True without `by-cost` is refused: nothing would weigh them."""
    hw: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.kernel_parts and not self.by_cost:
            raise SnowError("split-kernels: kernel-parts=true needs by-cost=true (kernel parts are taken only where "
                            "the planner's estimate says they pay)")
        hw = SnowflakeConfig.load(self.hw or None)
        max_words = self.max_words or hw.weights_buffer_elements - hw.macs_per_vmac
        kernel_parts = self.by_cost if self.kernel_parts is None else self.kernel_parts
        PatternRewriteWalker(SplitKernel(max_words, self.by_cost, hw, kernel_parts),
                             apply_recursively=False).rewrite_module(op)

        drop_dead_constants(op)
