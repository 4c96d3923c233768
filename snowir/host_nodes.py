"""
The work of an ONNX node kept as `nn.host`, by op type, from the ONNX operator's own semantics
(onnx.ai/onnx/operators): its multiply-accumulates, its other arithmetic per element, and the
fp32 bytes one Cortex-A9 core moves for it. snowir/host_model.py turns them into a time.

MACs (padding taps excluded, as for device convs):
  * Conv (1-D, 3-D, dilated: what the nn mapping leaves) N·M·(C/g)·Π_d taps_d, taps_d the
    (output, kernel) pairs of axis d that fall inside the input;
  * ConvTranspose N·C·(M/g)·Π_d taps_d, taps_d the (input, kernel) pairs of axis d that land
    inside the output (every input pixel scatters its kernel; pads crop the border);
  * MatMul |Y|·K (K: A's last axis), Gemm |Y|·K (K: A's axis 1, axis 0 with transA);
  * LSTM D·T·B·4H·(I + H) (+ 3H a step with peepholes), GRU D·T·B·3H·(I + H),
    RNN D·T·B·H·(I + H) (D directions, T steps, B batch, I input size, H hidden size);
    split-recurrence's LSTM / GRU / RNNRecurrence (snowir/recurrence.py) D·T·B·G·H·H (G gates): its
    X·W^T runs on the device (an 8-bit R, DynamicQuantizeLSTM's: WIDEN operations a weight and step
    to make it float);
  * Resize |Y|·taps: linear 2^d, cubic 4^d over the d resized axes, nearest 0 (a copy).
Other arithmetic [P]: transcendental functions (Sigmoid, Tanh, Exp, Erf, ...) ~10 operations an
element on NEON (a polynomial and a reciprocal), a divide or square root 4 (reciprocal estimate
and two Newton steps), anything else 1; recurrent cells add their gates' functions per step.
Bytes: every operand and result once (at its element size; fixed-point operands are dequantised
to fp32), but a recurrent cell's R weights once per step (4H x H fp32 per direction outgrows the
A9's 512 KB L2 from H = 182 on; a split recurrence's R at its own element size, 8-bit where it
came so).
"""

from __future__ import annotations

import math

import numpy as np
from xdsl.dialects.builtin import DenseArrayBase, IntegerAttr, StringAttr

from snowir.dialects import nn
from snowir.recurrence import CELLS, DOMAIN

TRANSCENDENTAL = 10.0
"""[P] NEON operations for one exp / tanh / erf / log / pow evaluation (polynomial + reciprocal)"""
RECIPROCAL = 4.0
"""[P] a divide or square root: reciprocal estimate and two Newton steps"""
_PER_ELEMENT = {
    "Sigmoid": TRANSCENDENTAL, "Tanh": TRANSCENDENTAL, "Exp": TRANSCENDENTAL, "Log": TRANSCENDENTAL,
    "Erf": TRANSCENDENTAL, "Softplus": TRANSCENDENTAL, "Mish": 2 * TRANSCENDENTAL, "Pow": TRANSCENDENTAL,
    "Elu": TRANSCENDENTAL, "Selu": TRANSCENDENTAL, "Gelu": TRANSCENDENTAL, "HardSigmoid": 4.0,
    "Div": RECIPROCAL, "Sqrt": RECIPROCAL, "Reciprocal": RECIPROCAL, "LeakyRelu": 2.0, "PRelu": 2.0,
}
WIDEN = 1.0
"""[P] NEON operations to make one 8-bit weight a float32 (vmovl twice and vcvt, a lane of 4 to 8;
the zero point and scale applied to the dot product, not to each weight)"""
_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
_RECURRENCES = {f"{DOMAIN}.{kind}": cell for kind, cell in CELLS.items()}
"""split-recurrence's kinds (snowir/recurrence.py), as `_kind` names them."""
_AS = {"ConvInteger": "Conv", "MatMulInteger": "MatMul", "DynamicQuantizeLSTM": "LSTM"}
"""Integer and quantised forms (onnx.quantize, com.microsoft) count as the float op they compute."""


def _kind(op: nn.HostOp) -> str:
    if op.domain is not None and op.domain.data == DOMAIN:
        return f"{DOMAIN}.{op.op_type.data}"  # snowir's own kinds, apart from any ONNX domain's names
    return _AS.get(op.op_type.data, op.op_type.data)


def _gate_weights(op: nn.HostOp, w: tuple[int, ...]) -> tuple[int, int, int]:
    """(directions, gates x hidden, inputs) of a recurrent cell's W: DynamicQuantizeLSTM holds it
    transposed, [directions, inputs, 4 x hidden]."""
    return (w[0], w[2], w[1]) if op.op_type.data == "DynamicQuantizeLSTM" else (w[0], w[1], w[2])
_CELL_OPS = {"LSTM": 5 * TRANSCENDENTAL + 5, "GRU": 3 * TRANSCENDENTAL + 6, "RNN": TRANSCENDENTAL + 1}
"""[P] per hidden unit and step: LSTM's 3 sigmoids + 2 tanh and its 5 products / sums, GRU's 2 + 1
and 6, RNN's tanh and its sum"""


def host_attr(op: nn.HostOp, key: str, default=None):
    value = op.attrs.data.get(key)
    if isinstance(value, IntegerAttr):
        return value.value.data
    if isinstance(value, DenseArrayBase):
        return [int(v) for v in value.get_values()]
    if isinstance(value, StringAttr):
        return value.data
    return default


def _inputs(op: nn.HostOp) -> dict[int, tuple[int, ...]]:
    """The shapes of the node's present inputs, by ONNX input position."""
    return {slot: tuple(v.type.get_shape()) for slot, v in zip(op.input_slots(), op.inputs)}


def _size(shape) -> int:
    return int(math.prod(shape))


def valid_taps(out: int, k: int, stride: int, pad: int, dil: int, size: int) -> int:
    """(output, tap) pairs of one axis whose input position lies inside the input: the kernel
    taps a conv computes, padding left out (host nodes, `useful_macs`, the issue count)."""
    o = np.arange(out)[:, None] * stride - pad + np.arange(k)[None, :] * dil
    return int(((o >= 0) & (o < size)).sum())


def scatter_taps(size: int, k: int, stride: int, pad: int, dil: int, out: int) -> int:
    """(input, tap) pairs of one axis whose output position lies inside the output."""
    o = np.arange(size)[:, None] * stride - pad + np.arange(k)[None, :] * dil
    return int(((o >= 0) & (o < out)).sum())


def _begin_pads(op: nn.HostOp, spatial: int, totals: list[int]) -> list[int]:
    """The leading pad of each spatial axis: `pads`, or auto_pad's share of the total padding."""
    pads = host_attr(op, "pads")
    auto = host_attr(op, "auto_pad", "NOTSET")
    if pads and auto in ("NOTSET", ""):
        return list(pads[:spatial])
    if auto == "SAME_UPPER":
        return [t // 2 for t in totals]
    if auto == "SAME_LOWER":
        return [t - t // 2 for t in totals]
    return [0] * spatial


def node_macs(op: nn.HostOp) -> int:
    kind = _kind(op)
    ins = _inputs(op)
    out = tuple(op.outputs[0].type.get_shape())
    if kind in ("Conv", "ConvTranspose") and 0 in ins and 1 in ins and len(ins[0]) >= 3:
        x, w = ins[0], ins[1]
        spatial = len(x) - 2
        kernel = list(w[2:])
        strides = host_attr(op, "strides") or [1] * spatial
        dil = host_attr(op, "dilations") or [1] * spatial
        groups = host_attr(op, "group", 1)
        if kind == "Conv":
            totals = [max(0, (out[2 + d] - 1) * strides[d] + (kernel[d] - 1) * dil[d] + 1 - x[2 + d]) for d in range(spatial)]
            pads = _begin_pads(op, spatial, totals)
            taps = [valid_taps(out[2 + d], kernel[d], strides[d], pads[d], dil[d], x[2 + d]) for d in range(spatial)]
            return x[0] * out[1] * (x[1] // groups) * _size(taps)
        totals = [max(0, strides[d] * (x[2 + d] - 1) + (kernel[d] - 1) * dil[d] + 1 - out[2 + d]) for d in range(spatial)]
        pads = _begin_pads(op, spatial, totals)
        taps = [scatter_taps(x[2 + d], kernel[d], strides[d], pads[d], dil[d], out[2 + d]) for d in range(spatial)]
        return x[0] * x[1] * w[1] * _size(taps)
    if kind == "MatMul" and 0 in ins:
        return _size(out) * ins[0][-1]
    if kind == "Gemm" and 0 in ins:
        return _size(out) * ins[0][0 if host_attr(op, "transA", 0) else 1]
    if kind in _RECURRENCES and 0 in ins and 1 in ins:  # split-recurrence's: H·R^T only, X·W^T is on the device
        (steps, batch, _), (dirs, gates_h, hidden) = ins[0], ins[1]
        return dirs * steps * batch * gates_h * hidden
    if kind in _GATES and 0 in ins and 1 in ins:
        steps, batch = _steps_batch(op, ins[0])
        dirs, gates_h, inputs = _gate_weights(op, ins[1])
        hidden = host_attr(op, "hidden_size", gates_h // _GATES[kind])
        peep = 3 * hidden if kind == "LSTM" and 7 in ins else 0
        return dirs * steps * batch * (gates_h * (inputs + hidden) + peep)
    if kind == "Resize" and 0 in ins:
        return _size(out) * _resize_taps(op, ins[0], out)
    return 0


def _steps_batch(op: nn.HostOp, x: tuple[int, ...]) -> tuple[int, int]:
    return (x[1], x[0]) if host_attr(op, "layout", 0) else (x[0], x[1])


def _resize_taps(op: nn.HostOp, x: tuple[int, ...], out: tuple[int, ...]) -> int:
    resized = sum(1 for a, b in zip(x, out) if a != b)
    mode = host_attr(op, "mode", "nearest")
    return {"linear": 2 ** resized, "cubic": 4 ** resized}.get(mode, 0)


def node_ops(op: nn.HostOp) -> float:
    """Arithmetic operations besides the MACs' 2 each."""
    kind = _kind(op)
    out = sum(_size(r.type.get_shape()) for r in op.outputs)
    if kind in _RECURRENCES:
        ins = _inputs(op)
        if 0 in ins and 1 in ins:  # the cell's functions, and adding each gate's projection
            (steps, batch, _), (dirs, gates_h, hidden) = ins[0], ins[1]
            widen = steps * _size(ins[1]) * WIDEN if 4 in ins else 0  # an 8-bit R made float at every step
            return dirs * steps * batch * (hidden * _CELL_OPS[_RECURRENCES[kind].onnx] + gates_h) + widen
    if kind in _GATES:
        ins = _inputs(op)
        if 0 in ins and 1 in ins:
            steps, batch = _steps_batch(op, ins[0])
            hidden = host_attr(op, "hidden_size", _gate_weights(op, ins[1])[1] // _GATES[kind])
            return ins[1][0] * steps * batch * hidden * _CELL_OPS[kind]
    if kind in ("Conv", "ConvTranspose", "MatMul", "Gemm"):
        return float(_size(op.outputs[0].type.get_shape()))  # the bias / accumulator write
    if kind == "Resize":
        return float(out)  # index arithmetic (nearest: the copy)
    return out * _PER_ELEMENT.get(kind, 1.0)


def node_bytes(op: nn.HostOp) -> int:
    """fp32 bytes (an element's own size for other types) read and written."""
    total = sum(_size(v.type.get_shape()) * _element_bytes(v) for v in [*op.inputs, *op.outputs])
    kind = _kind(op)
    ins = _inputs(op)
    if kind in _GATES and 0 in ins and 2 in ins:
        steps, _ = _steps_batch(op, ins[0])
        total += (steps - 1) * _size(ins[2]) * 4  # R again at every step after the first
    if kind in _RECURRENCES and 0 in ins and 1 in ins:  # R again at every step after the first, as it is held
        total += (ins[0][0] - 1) * _size(ins[1]) * _element_bytes(op.inputs[op.input_slots().index(1)])
    return total


def _element_bytes(value) -> int:
    elem = value.type.get_element_type()
    width = getattr(elem, "bitwidth", None)
    if isinstance(width, int) and width >= 8:
        return width // 8
    return 4
