"""Helpers shared by the nn-level passes: reading and creating weight constants, use checks."""

from __future__ import annotations

import itertools

import numpy as np
from xdsl.dialects.builtin import StringAttr, TensorType
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.rewriter import InsertPoint
from xdsl.pattern_rewriter import PatternRewriter

from snowir import writeback
from snowir.dialects import nn
from snowir.golden import constant_array, int_values
from snowir.plan.shapes import ConvShape
from snowir.resources import f32_resource

_KEYS = itertools.count()


def const_of(value: SSAValue) -> np.ndarray | None:
    """The float array of `value` if an nn.constant defines it."""
    owner = value.owner
    if isinstance(owner, nn.ConstantOp):
        return constant_array(owner)
    return None


def constant_op(array: np.ndarray, hint: str) -> nn.ConstantOp:
    """A float32 nn.constant holding `array` (a fresh blob), not yet in any block."""
    return nn.ConstantOp(f32_resource(f"{hint}_{next(_KEYS)}", np.asarray(array, np.float32)))


def replace_by_cost(rewriter: PatternRewriter, op: Operation, conv: Operation, constants: list[Operation],
                    device_ms: float, host_ms: float, cost: str) -> None:
    """`op` replaced by the device `conv` (its new `constants` inserted before it) when the device's
    estimate beats the host's, else left for the host; `cost` (the estimate's terms) goes on the op
    that runs, as `placement_cost`, where the reports and partition-host read it."""
    if device_ms >= host_ms:
        op.attributes["placement_cost"] = StringAttr(cost)
        for priced in (conv, *constants):  # not taken: the values they read must forget them
            priced.drop_all_references()
        return
    conv.attributes["placement_cost"] = StringAttr(cost)
    rewriter.insert(constants, InsertPoint.before(op))
    rewriter.replace(op, conv)


def new_constant(rewriter: PatternRewriter, before: Operation, array: np.ndarray, hint: str) -> SSAValue:
    op = constant_op(array, hint)
    rewriter.insert(op, InsertPoint.before(before))
    return op.result


def single_use(value: SSAValue) -> bool:
    return value.has_one_use()


def tensor(shape, like: SSAValue | None = None) -> TensorType:
    elem = like.type.get_element_type() if like is not None else nn.Float32Type()
    return TensorType(elem, list(shape))


def shape_of(value: SSAValue) -> list[int]:
    return list(value.type.get_shape())


def defined_before(value: SSAValue, op: Operation) -> bool:
    """True if `value` is available at `op` in the same block (block args always are)."""
    owner = value.owner
    if not isinstance(owner, Operation):
        return True
    block = op.parent_block()
    if owner.parent_block() is not block:
        return True
    return block.get_operation_index(owner) < block.get_operation_index(op)


def per_channel(array: np.ndarray | None, channels: int) -> np.ndarray | None:
    """A constant that broadcasts as one value per channel of an NCHW tensor, as a [C] vector."""
    if array is None:
        return None
    a = np.asarray(array)
    squeezed = a.reshape([d for d in a.shape if d != 1] or [1])
    if a.ndim in (3, 4) and a.shape[-2:] == (1, 1) and squeezed.size in (1, channels):
        return np.broadcast_to(squeezed.reshape(-1), (channels,)).astype(np.float32)
    if a.size == 1:
        return np.full(channels, float(a.reshape(-1)[0]), np.float32)
    return None


def on_host(op: Operation) -> bool:
    """partition-host placed the op on the host CPU (`place = "host"`)."""
    place = op.attributes.get("place")
    return isinstance(place, StringAttr) and place.data == "host"


def layer_name(op: Operation, default: str = "layer") -> str:
    """The ONNX node name of an nn op, else its result's name hint, else `default`."""
    if "onnx_node" in op.attributes:
        return op.attributes["onnx_node"].data
    return (op.results[0].name_hint if op.results else None) or default


def name_part(part: Operation, whole: Operation, suffix: str) -> None:
    """Name `part`, one of the ops `whole` became, as `whole`'s row in the reports with
    `.suffix`: its ONNX node's name, or an unnamed node's output name (`layer_name`)."""
    name = whole.attributes.get("onnx_node")
    if isinstance(name, StringAttr):
        part.attributes["onnx_node"] = StringAttr(f"{name.data}.{suffix}")
    elif whole.results and whole.results[0].name_hint and part.results:
        part.results[0].name_hint = f"{whole.results[0].name_hint}.{suffix}"


def conv_shape(op: nn.Conv2dOp):
    """The code generator's ConvShape of a (quantised) nn.conv2d."""
    _, c, h, w = op.input.type.get_shape()
    k, cg, kh, kw = op.weight.type.get_shape()
    sy, sx = int_values(op.strides)
    pt, pl, pb, pr = int_values(op.pads)
    fw, fi, fo = (v.type.get_element_type() for v in (op.weight, op.input, op.output))
    # the write-back shift: accumulator (input + weight fraction bits) to the output's format
    shift = fw.frac_bits.data + fi.frac_bits.data - fo.frac_bits.data if isinstance(fw, nn.FixedType) else 8
    # the write-back units work in the output's format
    units = writeback.layer_words(op.attributes, fo.frac_bits.data if isinstance(fo, nn.FixedType) else 8)
    return ConvShape(cg, h, w, k, kh, kw, sy, sx, pt, pl, pb, pr, op.relu is not None, shift, c // cg, units=units)


def drop_dead_constants(module: ModuleOp) -> None:
    """Erase nn.constants nothing reads any more (after a rewrite replaced their users)."""
    for op in list(module.walk()):
        if isinstance(op, nn.ConstantOp) and not op.result.uses:
            op.detach()
            op.erase()
