"""
What the work of an nn layer is, counted the same way for the golden model and the report:
useful multiply-accumulates (padding taps excluded) and, for layers that stay on the host,
an estimate of their time on the host CPU (an ONNX node kept as `nn.host`: its work by op type,
snowir/host_nodes.py).

The host is the ZC706's ARM Cortex-A9 (C17 §3: two cores at 666 MHz [S]). The time model
is ours ([P], docs/machine.md "Host layers"): one core runs a host layer in float, at
`ops_per_cycle` arithmetic operations per cycle (NEON, 4 fp32 lanes, taken at half rate for
loads, stores and loop overhead), or at `gbps` of memory streaming, whichever is slower.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.ir import BlockArgument, Operation, SSAValue

from snowir.dialects import nn
from snowir.golden import int_values as ints
from snowir.host_nodes import node_bytes, node_macs, node_ops, scatter_taps, valid_taps
from snowir.segments import is_view, transpose_is_view


@dataclass(frozen=True)
class HostCPU:
    clock_mhz: float = 666.0
    """[S] C17 §3: the Cortex-A9 host cores run at 666 MHz."""
    ops_per_cycle: float = 2.0
    """[P] sustained fp32 operations per cycle of one core (NEON 4 lanes at half rate)."""
    gbps: float = 1.0
    """[P] sustained memory streaming of one core (read + write)."""


HOST = HostCPU()

# [P] operations per output element of element-wise host work
_PER_ELEMENT = {
    "nn.softmax": 12.0,  # max, subtract, exp (~8), sum, divide
    "nn.relu": 1.0, "nn.add": 1.0, "nn.mul": 1.0, "nn.clip": 2.0,
    "nn.hard_sigmoid": 4.0, "nn.hard_swish": 5.0, "nn.batch_norm": 2.0,
}
_VIEWS = (nn.ConstantOp, nn.ReshapeOp, nn.FlattenOp, nn.IdentityOp)


def int_values(attr) -> list[int]:
    return ints(attr)


def useful_macs(op: Operation) -> int:
    """Multiply-accumulates a layer needs, padding taps excluded (0 for layers without MACs)."""
    if isinstance(op, nn.Conv2dOp):
        n, _, h, w = op.input.type.get_shape()
        k, cg, kh, kw = op.weight.type.get_shape()
        _, _, oh, ow = op.output.type.get_shape()
        sy, sx = int_values(op.strides)
        pt, pl, _, _ = int_values(op.pads)
        dy, dx = int_values(op.dilations)
        if "block_diagonal" in op.attributes:
            cg = 1  # depthwise-to-grouped: one channel of the group's kernel block is not zero
        elif "dense_groups" in op.attributes:
            cg //= op.attributes["dense_groups"].value.data  # a grouped conv's kernels, zero outside their group
        rows = valid_taps(oh, kh, sy, pt, dy, h)
        layout = op.input.owner  # the host's layout of a model input, whose zeros are not work
        if isinstance(layout, nn.UnfoldRowsOp):  # kernel rows as channels: the rows' padding is zero channels
            kh0 = layout.kernel.value.data
            cg //= kh0
            rows = valid_taps(oh, kh0, layout.stride.value.data, int_values(layout.pads)[0], 1, layout.input.type.get_shape()[2])
        elif isinstance(layout, nn.PadRowsOp):  # the rows' padding is zero rows of the input
            rows = valid_taps(oh, kh, sy, pt + int_values(layout.pads)[0], dy, layout.input.type.get_shape()[2])
        return n * k * cg * rows * valid_taps(ow, kw, sx, pl, dx, w)
    if isinstance(op, nn.ConvTranspose2dOp):  # left unrewritten: the (input, tap) pairs that land inside
        n, c, h, w = op.input.type.get_shape()
        _, mg, kh, kw = op.weight.type.get_shape()
        _, _, oh, ow = op.output.type.get_shape()
        (sy, sx), (pt, pl, _, _), (dy, dx) = (int_values(a) for a in (op.strides, op.pads, op.dilations))
        return n * c * mg * scatter_taps(h, kh, sy, pt, dy, oh) * scatter_taps(w, kw, sx, pl, dx, ow)
    if isinstance(op, nn.DenseOp):
        return int(np.prod(op.output.type.get_shape())) * op.weight.type.get_shape()[1]
    if isinstance(op, nn.HostOp):
        return node_macs(op)
    return 0


def _elements(op: Operation) -> int:
    return int(sum(np.prod(r.type.get_shape()) for r in op.results if hasattr(r.type, "get_shape")))


def input_layout(op: Operation) -> bool:
    """A layout of a model input (pad-rows, unfold-rows): the host writes the input into DRAM in
    the device's order and format as it loads it, so the layout is that write, which the round
    trip counts (the laid-out tensor's words to the device), not work of its own."""
    return isinstance(op, nn.PadRowsOp | nn.UnfoldRowsOp) and isinstance(op.input, BlockArgument)


def host_ops(op: Operation) -> float:
    """[P] arithmetic operations of the layer run in float on the host (a concat, an interleave, a
    zero insertion: a copy, none; a model input's layout: none)."""
    if isinstance(op, (*_VIEWS, nn.ConcatOp, nn.DepthToSpaceOp, nn.ZeroInsertOp, nn.CropOp)) or input_layout(op):
        return 0.0
    if isinstance(op, nn.HostOp):
        return 2.0 * node_macs(op) + node_ops(op)
    macs = useful_macs(op)
    if macs:
        return 2.0 * macs
    out = _elements(op)
    if isinstance(op, nn.MaxPoolOp | nn.AvgPoolOp):
        kh, kw = int_values(op.kernel)
        return float(out * kh * kw)
    if isinstance(op, nn.GlobalAvgPoolOp):
        return float(np.prod(op.input.type.get_shape()))
    if isinstance(op, nn.LrnOp):
        return out * (2.0 * op.size.value.data + 10.0)  # window sum of squares, then a pow
    return out * _PER_ELEMENT.get(op.name, 1.0)


def host_bytes(op: Operation) -> int:
    """fp32 bytes the host reads and writes for the layer (views and a model input's layout move
    nothing of their own; a concat, an interleave or a zero insertion copies 16-bit words)."""
    if isinstance(op, _VIEWS) or (isinstance(op, nn.TransposeOp) and transpose_is_view(op)) or input_layout(op):
        return 0
    if isinstance(op, nn.HostOp):
        return node_bytes(op)
    if isinstance(op, nn.ConcatOp | nn.DepthToSpaceOp | nn.ZeroInsertOp):  # the device's 16-bit words, moved as they are
        return 2 * int(sum(np.prod(v.type.get_shape()) for v in (*op.operands, op.results[0])))
    if isinstance(op, nn.CropOp):  # the window's 16-bit words read and written
        return 2 * 2 * int(np.prod(op.output.type.get_shape()))
    values = list(op.operands) + list(op.results)
    return 4 * int(sum(np.prod(v.type.get_shape()) for v in values if hasattr(v.type, "get_shape")))


def host_ms(op: Operation, cpu: HostCPU = HOST) -> float:
    compute = host_ops(op) / (cpu.ops_per_cycle * cpu.clock_mhz * 1e3)
    memory = host_bytes(op) / (cpu.gbps * 1e6)
    return max(compute, memory)


def _device_layer(op: Operation | None) -> bool:
    """A conv or max pool the device runs, as the nn passes leave them before partition-host: a
    depthwise conv depthwise-to-grouped left (group width not whole 16-lane groups, no
    `lane_groups`) and anything placed on the host in the IR are the host's."""
    place = op.attributes.get("place") if isinstance(op, Operation) else None
    if getattr(place, "data", None) == "host":
        return False
    if isinstance(op, nn.MaxPoolOp):
        return True
    if not isinstance(op, nn.Conv2dOp):
        return False
    groups = op.groups.value.data
    return groups == 1 or "lane_groups" in op.attributes or (op.output.type.get_shape()[1] // groups) % 16 == 0


def _source(value: SSAValue) -> Operation | None:
    """The op whose DRAM bytes `value` reads (through views, channel slices and crops, read in place)."""
    while isinstance(value.owner, Operation) and (is_view(value.owner)
                                                  or isinstance(value.owner, nn.ChannelSliceOp | nn.CropOp)):
        value = value.owner.operands[0]
    return value.owner if isinstance(value.owner, Operation) else None


def _readers(value: SSAValue) -> list[Operation]:
    """The ops that read `value`'s DRAM bytes (through views, channel slices and crops)."""
    out = []
    for use in value.uses:
        user = use.operation
        if is_view(user) or isinstance(user, nn.ChannelSliceOp | nn.CropOp):
            out += _readers(user.results[0])
        else:
            out.append(user)
    return out


def round_trip_ms(inputs: list[SSAValue], output: SSAValue, cpu: HostCPU = HOST) -> float:
    """[P] What the host pays in DRAM traffic when the layer of `inputs` -> `output` runs on the
    device between host layers: each input a host layer produces (or the model input) written as
    16-bit words, and the output read back when a host layer reads it, at the host's streaming
    rate. Constants are in the device's DRAM already."""
    words = sum(int(np.prod(v.type.get_shape())) for v in inputs
                if not isinstance(_source(v), nn.ConstantOp) and not _device_layer(_source(v)))
    if any(not _device_layer(user) for user in _readers(output)):
        words += int(np.prod(output.type.get_shape()))
    return copy_ms(words * 2, cpu)


def host_round_trip_ms(inputs: list[SSAValue], output: SSAValue, cpu: HostCPU = HOST) -> float:
    """[P] The other way round: what the host pays when the layer runs on the host between device
    layers: each input a device layer wrote read back, the output written when a device layer reads it."""
    words = sum(int(np.prod(v.type.get_shape())) for v in inputs if _device_layer(_source(v)))
    if any(_device_layer(user) for user in _readers(output)):
        words += int(np.prod(output.type.get_shape()))
    return copy_ms(words * 2, cpu)


def copy_ms(words_bytes: int, cpu: HostCPU = HOST) -> float:
    """[P] `words_bytes` bytes of device words copied between host and device DRAM at the host's
    streaming rate: a round trip as partition-host prices it, and the end-to-end timeline's copies."""
    return words_bytes / (cpu.gbps * 1e6)
