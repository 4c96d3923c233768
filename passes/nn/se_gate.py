"""
se-gate: an SE block's gate multiply (MobileNetV3, PP-LCNet, CUNet: GlobalAveragePool -> 1x1
conv -> ReLU -> 1x1 conv -> Sigmoid / HardSigmoid -> Mul(x, gate)) becomes a 1x1 depthwise conv
whose kernels are the gate, where the cost model says the device pays:

    mul(x, gate) -> conv2d(x, reshape(gate) [C, 1, 1, 1], 0, groups = C, lane_groups)

Why: Snowflake multiplies maps only by weights-buffer words, which LD loads from any DRAM
address; a weights region written at run time is as good as one written at compile time. The
gate is a host result (the sigmoid runs on the host: no write-back activation unit), so the host
writes it, packed as the conv's block-diagonal 16-lane groups (`tile/build.weight_image` with the
gate's words; `lane_groups`), into the layer's weights region before the segment that runs it
(snowir/driver/segment_run.py, device_run.py) — C words, where the host Mul reads x and writes
x·gate (2·H·W·C words) and computes H·W·C products.

Fixed point: the kernels are the gate's words in its own format (Q8.8 by default: the conv's
weight fraction is the gate's, not a weight format), so the write-back rounds x·gate once, by
`in_frac + gate_frac - out_frac` bits, exactly as the golden model's conv over the same words;
the float Mul it replaces rounds differently (< 1 LSB), and the ONNX comparison sees that.

A gate the host computes is written before the segment that runs the conv. A gate a device
layer writes (with the write-back activation unit, the gate conv applies the sigmoid itself)
would be written mid-segment, after the kernels load, so the kernels' reshape is placed on the
host: the segment ends after the gate, the host writes its C words as the kernels, the next
segment runs the conv. The
cost model as add-to-bypass's: the conv's estimate against the host's, each side with its round
trip (the host Mul reads x back and writes its result: `round_trip_ms`), recorded as
`placement_cost`; a Mul left on the host keeps it and partition-host's `GATE_REASON`.

A gate conv whose result is then added to another tensor (waifu2x's ResBlock: body·gate + the
cropped block input), which add-to-bypass made an identity conv because the Mul was no conv yet,
takes that tensor as its own bypass (`GateResidual`): the gated result is no longer written,
read back and written again (UpResNet10's 150² blocks: 446 k + 526 k cycles -> 804 k).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr, TensorType, UnitAttr
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from snowir.dialects import nn
from snowir.host_model import host_ms, host_round_trip_ms, round_trip_ms
from snowir.hw import SnowflakeConfig
from snowir.nn_util import constant_op, name_part, replace_by_cost, shape_of, single_use
from snowir.plan.issue import placement_cycles
from snowir.plan.layout import LANE_GROUPS
from snowir.plan.shapes import LoweringError
from snowir.tile.build import RUNTIME_KERNELS
from snowir.tile.lowerable import planned_conv

_DEVICE_WRITERS = (nn.Conv2dOp, nn.MaxPoolOp, nn.ConcatOp, nn.ChannelSliceOp)


def gate_of(op: nn.MulOp) -> tuple[SSAValue, SSAValue] | None:
    """(x, gate) when `op` scales an [N, C, H, W] tensor by an [N, C, 1, 1] one no constant holds
    (an SE block's gate), else None."""
    a, b = (tuple(shape_of(v)) for v in op.operands)
    for x, gate, xs, gs in ((op.operands[0], op.operands[1], a, b), (op.operands[1], op.operands[0], b, a)):
        if len(gs) == 4 and len(xs) == 4 and gs[2:] == (1, 1) and xs[2:] != (1, 1) and gs[:2] == xs[:2] \
                and gs[0] == 1 and not isinstance(gate.owner, nn.ConstantOp):
            return x, gate
    return None


class GateToConv(RewritePattern):
    def __init__(self, hw: SnowflakeConfig):
        self.hw = hw

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.MulOp, rewriter: PatternRewriter) -> None:
        found = gate_of(op)
        if found is None or "place" in op.attributes or "placement_cost" in op.attributes:
            return
        x, gate = found
        c = shape_of(x)[1]
        kernels = nn.ReshapeOp(gate, TensorType(gate.type.get_element_type(), [c, 1, 1, 1]))
        name_part(kernels, op, "kernels")
        if isinstance(gate.owner, _DEVICE_WRITERS):
            # a device layer writes the gate (its activation in the write-back, with the unit): the
            # host reads its C words at a segment's end and writes them as the kernels before the
            # next, as it would write a gate it computed; nothing of the gate is computed there
            kernels.attributes["place"] = StringAttr("host")
            kernels.attributes["host_reason"] = StringAttr(
                "the host writes a gate a device layer computed as the gate conv's kernels (C words), between segments")
        bias = constant_op(np.zeros(c, np.float32), "zero_bias")
        conv = nn.Conv2dOp(x, kernels.results[0], bias.result, op.output.type, groups=c)
        conv.attributes.update(op.attributes)
        conv.attributes[LANE_GROUPS] = UnitAttr()
        conv.attributes[RUNTIME_KERNELS] = UnitAttr()
        try:
            device = self.hw.cycles_to_ms(placement_cycles(planned_conv(conv, self.hw), self.hw))
        except LoweringError:
            return
        # the conv: the gate's C words written (and x, its result, as their producers and readers
        # need); the host Mul: x read back, its result written
        trip_device = round_trip_ms([x, gate], op.output)
        trip_host, host = host_round_trip_ms([x], op.output), host_ms(op)
        cost = (f"device {device:.4f} ms + gate written {trip_device:.4f} ms vs host {host:.4f} ms + "
                f"DRAM round trip {trip_host:.4f} ms")
        replace_by_cost(rewriter, op, conv, [kernels, bias], device + trip_device, host + trip_host, cost)


class GateResidual(RewritePattern):
    """A gate conv whose result add-to-bypass added to another tensor (a C x C identity conv over
    one with the other as its bypass, `from_add`: waifu2x's ResBlock adds the gated body to the
    cropped block input) takes that tensor as its own bypass: the identity conv's pass over the
    gated result (read once more, written once more) is gone. add-to-bypass ran first because the
    Mul was not a conv yet."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.Conv2dOp, rewriter: PatternRewriter) -> None:
        if "from_add" not in op.attributes or op.bypass is None or not _on_device(op):
            return
        for gated, other in ((op.input, op.bypass), (op.bypass, op.input)):
            gate = gated.owner
            if isinstance(gate, nn.Conv2dOp) and RUNTIME_KERNELS in gate.attributes and _on_device(gate) \
                    and single_use(gated) and gate.relu is None and gate.bypass is None and other is not gated:
                break
        else:
            return
        fused = nn.Conv2dOp(gate.input, gate.weight, gate.bias, op.output.type, groups=gate.groups.value.data,
                            relu=op.relu is not None, bypass=other)
        fused.attributes.update(gate.attributes)
        fused.attributes["placement_cost"] = StringAttr(
            f"{gate.attributes['placement_cost'].data}; the add ({op.attributes['placement_cost'].data}) as its bypass"
            if "placement_cost" in gate.attributes and "placement_cost" in op.attributes else "the add as its bypass")
        rewriter.replace(op, fused)  # at the add's place: the bypass is defined before it
        rewriter.erase(gate)


def _on_device(op: nn.Conv2dOp) -> bool:
    """A conv add-to-bypass or se-gate made because the device pays (`placement_cost`), which no
    user placed on the host; partition-host, next, places it."""
    return "placement_cost" in op.attributes and op.attributes.get("place") != StringAttr("host")


@dataclass(frozen=True)
class SEGatePass(ModulePass):
    name = "se-gate"
    enable: bool = True
    hw: str = ""
    """A hardware description JSON (SnowflakeConfig fields); default: the ZC706 build."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if not self.enable:
            return
        hw = SnowflakeConfig.load(self.hw or None)
        PatternRewriteWalker(GateToConv(hw), apply_recursively=False).rewrite_module(op)
        PatternRewriteWalker(GateResidual(), apply_recursively=False).rewrite_module(op)
