"""
copy-concat-slices: a channel slice of another tensor that a channel concat takes as an input
becomes an identity 1x1 conv (the slice's channels, each kernel one-hot) whose output the concat
places like any conv's, when that is estimated cheaper than the host's concat.

Why: a device concat is one DRAM tensor whose inputs' producers write their channel slices in
place (allocate-dram), but a channel slice writes nothing: it is a view of its source's words,
which sit in another tensor. So ShuffleNetV2's last unit of a stage, Concat(identity half of
the input, branch), went to the host with a DRAM round trip on each side. The identity conv
copies those channels into the concat's tensor on the device: each output is one input word
times 1 plus zeros, so the copy is exact and the golden model and the machine stay bit-exact.
The conv carries `placement_cost` (its device estimate against the host's concat and round trip).

Which ops: `nn.concat` on axis 1 (4-D) whose other inputs come from convs, max pools or concats
(the layers that write channel slices); each input read from an `nn.channel_slice` is copied,
except a run of slices that covers its tensor in order (YOLOv8's C2f concatenates both halves
of its Split: that tensor is placed in the concat whole, snowir/segments.py `concat_inputs`).
Runs after the passes that rebuild convs and before add-to-bypass and partition-host.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr, UnitAttr
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern
from xdsl.rewriter import InsertPoint

from snowir.dialects import nn
from snowir.host_model import copy_ms, host_ms
from snowir.hw import SnowflakeConfig
from snowir.nn_util import constant_op, name_part, shape_of
from snowir.plan.issue import placement_cycles
from snowir.plan.shapes import LoweringError
from snowir.segments import concat_inputs
from snowir.tile.lowerable import planned_conv

WRITERS = (nn.Conv2dOp, nn.MaxPoolOp, nn.ConcatOp, nn.ChannelSliceOp)
"""Ops whose result a device concat can place as one of its slices (a channel slice once copied)."""


def _identity(slice_: nn.ChannelSliceOp) -> tuple[list, nn.Conv2dOp]:
    c = shape_of(slice_.output)[1]
    weight = constant_op(np.eye(c, dtype=np.float32).reshape(c, c, 1, 1), "identity")
    bias = constant_op(np.zeros(c, np.float32), "zero_bias")
    conv = nn.Conv2dOp(slice_.output, weight.result, bias.result, slice_.output.type)
    conv.attributes["block_diagonal"] = UnitAttr()
    return [weight, bias], conv


class CopyConcatSlices(RewritePattern):
    def __init__(self, hw: SnowflakeConfig):
        self.hw = hw

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.ConcatOp, rewriter: PatternRewriter) -> None:
        if op.axis.value.data != 1 or len(shape_of(op.output)) != 4 or "placement_cost" in op.attributes:
            return
        members = [v for v, _ in concat_inputs(op)]  # a Split's slices that cover their tensor are it
        slices = [v.owner for v in members if isinstance(v.owner, nn.ChannelSliceOp)]
        if not slices or not all(isinstance(v.owner, WRITERS) for v in members):
            return
        copies = [_identity(s) for s in slices]
        try:
            device = sum(self.hw.cycles_to_ms(placement_cycles(planned_conv(conv, self.hw), self.hw))
                         for _, conv in copies)
        except LoweringError:
            device = None
        words = sum(int(np.prod(shape_of(v))) for v in op.inputs) + int(np.prod(shape_of(op.output)))
        host = host_ms(op) + copy_ms(2 * words)
        if device is None or device >= host:
            for _, conv in copies:  # priced, not taken: the slices must forget them
                conv.drop_all_references()
            if device is not None:
                op.attributes["placement_cost"] = StringAttr(
                    f"device {device:.4f} ms vs host {host:.4f} ms (the concat and its DRAM round trip)")
            return
        cost = f"device {device:.4f} ms vs host {host:.4f} ms (the concat and its DRAM round trip)"
        for k, (s, (constants, conv)) in enumerate(zip(slices, copies)):
            conv.attributes["placement_cost"] = StringAttr(cost)
            name_part(conv, op, f"copy{k}")
            rewriter.insert([*constants, conv], InsertPoint.before(op))
            op.operands[list(op.inputs).index(s.output)] = conv.output


@dataclass(frozen=True)
class CopyConcatSlicesPass(ModulePass):
    name = "copy-concat-slices"
    hw: str = ""
    """A hardware description JSON (SnowflakeConfig fields); default: the ZC706 build."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        hw = SnowflakeConfig.load(self.hw or None)
        PatternRewriteWalker(CopyConcatSlices(hw), apply_recursively=False).rewrite_module(op)
