"""
The cost model behind the layouts the host may give a model input (space-to-depth,
unfold-rows): the layer's cycles, from the COOP cycles of one output pixel and one kernel tile for the traces
each layout makes of a conv's window, or the DRAM traffic each layout costs if that is longer.

A trace of L words takes ⌈L/16⌉ cycles; a pixel whose traces are shorter than its bookkeeping
is issue-bound instead: the X loop costs PIXEL_SLOTS issue slots (counter, branch, its delay
slots carrying the address steps), and each trace a MAC plus the two address ADDIs of the next
kernel row (codegen/traces.macs_pipelined). The estimate only ranks layouts; the machine model
measures the result (docs/lowering.md, "Model-input layouts").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import StringAttr
from xdsl.ir import BlockArgument, Operation
from xdsl.pattern_rewriter import PatternRewriter
from xdsl.rewriter import InsertPoint

from snowir.dialects import nn
from snowir.hw import SnowflakeConfig
from snowir.nn_util import new_constant
from snowir.plan.shapes import TRACE_CHUNK
from snowir.segments import CHANNEL_TILES

CHANNEL_BLOCK = "channel_block"
"""depthwise-to-grouped's attribute on one 16-channel block of a producer (its `BLOCKED`)."""

PIXEL_SLOTS = 4
TRACE_SLOTS = 3


@dataclass(frozen=True)
class StemConv:
    """The geometry of a conv reading the model input."""

    c: int
    h: int
    w: int
    kh: int
    kw: int
    sy: int
    sx: int
    oh: int
    ow: int
    k: int


def pixel_cycles(traces: list[int], hw: SnowflakeConfig) -> int:
    """Cycles of one output pixel (one kernel tile) whose window is `traces` (words each)."""
    chunks = [min(TRACE_CHUNK, t - o) for t in traces for o in range(0, t, TRACE_CHUNK)]
    compute = sum(-(-n // hw.lanes) for n in chunks)
    return max(compute, PIXEL_SLOTS + TRACE_SLOTS * len(chunks))


def layer_cycles(s: StemConv, pixel: int, input_words: int, hw: SnowflakeConfig) -> float:
    """The layer: its pixels' cycles over every kernel tile, or the DRAM traffic of its input
    and output at the bus's rate if that is longer (kernels are small beside them)."""
    compute = s.oh * s.ow * -(-s.k // hw.vmacs) * pixel
    bus = 2 * (input_words + s.oh * s.ow * s.k) / hw.dram_bytes_per_cycle
    return max(compute, bus)


def direct_cycles(s: StemConv, hw: SnowflakeConfig) -> float:
    return layer_cycles(s, pixel_cycles([s.kw * s.c] * s.kh, hw), s.c * s.h * s.w, hw)


def space_to_depth_cycles(s: StemConv, hw: SnowflakeConfig) -> float | None:
    """None when the layout does not apply (square strides of 2 or more only)."""
    if s.sy != s.sx or s.sy < 2:
        return None
    b = s.sy
    kh2, kw2 = -(-s.kh // b), -(-s.kw // b)
    pixel = pixel_cycles([kw2 * b * b * s.c] * kh2, hw)
    return layer_cycles(s, pixel, b * b * s.c * (s.oh + kh2 - 1) * (s.ow + kw2 - 1), hw)


def unfold_rows_cycles(s: StemConv, hw: SnowflakeConfig) -> float:
    """kh/sy times the input's words: a compute-bound first layer hides them, a fast machine
    on a slow bus may not."""
    return layer_cycles(s, pixel_cycles([s.kw * s.kh * s.c], hw), s.oh * s.w * s.kh * s.c, hw)


def lane_slots(traces: list[int], hw: SnowflakeConfig) -> int:
    """MAC lanes the traces occupy, used or not."""
    return sum(-(-t // hw.lanes) for t in traces) * hw.lanes


def unfold_rows_fills_lanes(s: StemConv, hw: SnowflakeConfig) -> bool:
    """Unfolded, the window occupies fewer lanes than as kh kernel-row traces (rows whose trace
    is a whole number of lane groups gain nothing but bookkeeping, for kh times the traffic)."""
    return lane_slots([s.kh * s.kw * s.c], hw) < lane_slots([s.kw * s.c] * s.kh, hw)


def unfold_rows_fits(s: StemConv, hw: SnowflakeConfig) -> bool:
    """A row of the unfolded input fits half a maps bank (strips of whole rows, double-buffered)."""
    return s.w * s.kh * s.c <= hw.maps_bank_elements // 2


def plain_stem(op: nn.Conv2dOp) -> bool:
    """A conv the host can lay the input out for: it reads the model input, ungrouped,
    undilated, without a residual bypass, and is not one 16-channel block of a producer
    (depthwise-to-grouped's `channel_block`: a layout per block would be a copy of the input per
    block to write), nor a conv whose output is stored channel-tile-major (priced and planned as it
    is by depthwise-to-grouped)."""
    return isinstance(op.input, BlockArgument) and op.groups.value.data == 1 and op.bypass is None \
        and all(int(d) == 1 for d in op.dilations.get_values()) and CHANNEL_BLOCK not in op.attributes \
        and CHANNEL_TILES not in op.attributes


def relayout_conv(rewriter: PatternRewriter, op: nn.Conv2dOp, layout: Operation, weights: np.ndarray | None,
                  what: str, strides: Sequence[int], pads: Sequence[int]) -> None:
    """Replace `op` by the same conv over the host's `layout` of its input (named after the
    conv's ONNX node), with its kernels rearranged to match (`weights`, constant `w_<what>`;
    None: the layout keeps the kernels as they are, and the conv reads op's own)."""
    if "onnx_node" in op.attributes:
        layout.attributes["onnx_node"] = StringAttr(f"{op.attributes['onnx_node'].data}.{layout.name.removeprefix('nn.')}")
    rewriter.insert(layout, InsertPoint.before(op))
    wv = op.weight if weights is None else new_constant(rewriter, op, weights, f"w_{what}")
    conv = nn.Conv2dOp(layout.results[0], wv, op.bias, op.output.type, relu=op.relu is not None,
                       strides=list(strides), pads=list(pads), dilations=[1, 1])
    conv.attributes.update(op.attributes)
    rewriter.insert(conv, InsertPoint.before(op))
    rewriter.replace(op, [], [conv.output])
