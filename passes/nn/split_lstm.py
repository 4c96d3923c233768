"""
split-lstm: an ONNX LSTM kept as `nn.host` (float W / R / B, or com.microsoft's DynamicQuantizeLSTM,
its 8-bit W / R dequantized) becomes its input projection, a dense layer the device runs, and its
recurrence, snowir's own host kind `LSTMRecurrence` (snowir/recurrence.py):

    Y, Y_h, Y_c = LSTM(X [T, B, I], W, R, B, -, h0, c0)
 -> gates = reshape(dense(reshape(X to [T·B, I]), W' [D·4H, I], Wb + Rb) to [T, B, D·4H])
    Y, Y_h, Y_c = nn.host "LSTMRecurrence"(gates, R, h0, c0) {domain = "snowir"}

W' is both directions' W side by side (ONNX's W [D, 4H, I] is already W' row by row); each
direction's bias is Wb + Rb, since the projection and the recurrence's R·h are summed anyway.

Why: an LSTM's work is D·T·B·4H·(I + H) MACs, and the part X·W^T does not depend on the recurrence:
it is one [T·B, I] x [I, D·4H] matmul over every step, which sequence-gemm runs on the device as
one 1x1 conv over T pixels. Only H·R^T, D·T·B·4H·H MACs, must wait for the previous step. ddddocr's
OCR nets (bidirectional, I = H = 512) spend ~197 ms of ~210-240 ms end to end in that one host node;
half of it moves to the device.

Split where the recurrence is the plain cell: activations sigmoid / tanh / tanh (the default), no
clip, input_forget 0, layout 0 ([T, B, I]), no peepholes, sequence_lens absent or every entry T,
W / R / B constants (the dequantized DynamicQuantizeLSTM: (W_q - W_zp) · W_scale per direction, or
per direction and gate column). Anything else stays the single host node as imported, with
`host_reason` saying what kept it; a node the user placed (`place`) is left alone. GRU and RNN are
not split (see docs/frontend.md): they stay host nodes.

This is a graph pass, not the importer's: the node imports as the ONNX node it is (reports and
`--check` see the model's own LSTM, FloatBackend runs it through onnxruntime), and `-p` without
split-lstm, or nn-prepare{split-lstm=false}, keeps the whole LSTM on the host to compare.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import DictionaryAttr, Float32Type, IntegerAttr, ModuleOp, StringAttr, i64
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from snowir import recurrence
from snowir.dialects import nn
from snowir.host_nodes import host_attr
from snowir.frontend.onnx_import import typed_resource
from snowir.nn_util import const_of, new_constant, shape_of, tensor
from snowir.recurrence import dequantized_rows

KINDS = (("LSTM", ""), ("DynamicQuantizeLSTM", "com.microsoft"))
"""(op type, domain) of the nodes split: ONNX's LSTM (W [D, 4H, I]) and onnxruntime's dynamically
quantized one (W_q [D, I, 4H], 8-bit, with scales and zero points)."""
RECURRENCE_REASON = ("the LSTM's recurrence: each step reads the previous step's hidden state (D x T x B x 4H x H MACs); "
                     "split-lstm runs its input projection on the device")
_DEFAULT_ACTIVATIONS = ["Sigmoid", "Tanh", "Tanh"]
_KEYS = itertools.count()


@dataclass(frozen=True)
class _Split:
    """What the rewrite needs of a splittable LSTM."""

    direction: str
    w: np.ndarray
    """[D·4H, I]: the dense layer's weights."""
    bias: np.ndarray
    """[D·4H]: Wb + Rb of each direction."""
    r: np.ndarray | SSAValue
    """[D, 4H, H]: the ONNX node's own R (a value), or DynamicQuantizeLSTM's 8-bit R transposed (an array)."""
    r_params: tuple[SSAValue, SSAValue] | None = None
    """DynamicQuantizeLSTM's R_scale and R_zero_point (the node's own values): the recurrence reads R
    in 8 bits, as shipped, and multiplies by the float R they make."""


def split_refusal(op: nn.HostOp) -> _Split | str:
    """The split of an LSTM nn.host node, or why it stays whole on the host."""
    kind = op.op_type.data
    quantized = kind == "DynamicQuantizeLSTM"
    by_slot = dict(zip(op.input_slots(), op.inputs))
    attrs = op.attrs.data
    direction = host_attr(op, "direction", "forward")
    if direction not in recurrence.DIRECTIONS:
        return f"direction '{direction}'"
    dirs = recurrence.DIRECTIONS[direction]
    activations = attrs.get("activations")
    if activations is not None and [a.data for a in activations.data] != _DEFAULT_ACTIVATIONS * dirs:
        return f"activations {[a.data for a in activations.data]} (split: the default sigmoid, tanh, tanh only)"
    for key, default in (("input_forget", 0), ("layout", 0)):
        if host_attr(op, key, default) != default:
            return f"{key} = {host_attr(op, key)}"
    odd = sorted(set(attrs) - {"direction", "hidden_size", "activations", "input_forget", "layout"})
    if odd:
        return f"attribute {odd[0]} (a clip, or activation parameters)"
    if 7 in by_slot:
        return "peepholes (P)"
    if op.capture_names() or len(op.outputs) > 3:
        return "captured values or extra results"
    x = shape_of(by_slot[0])
    if len(x) != 3 or not all(isinstance(v.type.get_element_type(), Float32Type) for v in (by_slot[0], *op.outputs)):
        return f"X of rank {len(x)}, or X / Y not float32"
    steps = x[0]
    if 4 in by_slot:
        lens = const_of(by_slot[4])
        if lens is None or not np.all(lens == steps):
            return "sequence_lens shorter than T (or computed at run time)"
    w, r = const_of(by_slot[1]), const_of(by_slot[2])
    if w is None or r is None:
        return "W or R computed at run time"
    if quantized:
        if any(s not in by_slot for s in (8, 9, 10, 11)):
            return "W / R scales or zero points absent"
        params = [const_of(by_slot[s]) for s in (8, 9, 10, 11)]
        if any(p is None for p in params) or w.ndim != 3 or r.ndim != 3:
            return "W / R scales or zero points computed at run time"
        r_q = np.ascontiguousarray(r.transpose(0, 2, 1))  # as ONNX's LSTM holds them: [D, 4H, I], [D, 4H, H]
        w, r = dequantized_rows(w.transpose(0, 2, 1), params[0], params[1]), dequantized_rows(r_q, params[2], params[3])
        if w is None or r is None:
            return "W / R scales of another shape than [D] or [D, 4H]"
    hidden = host_attr(op, "hidden_size", r.shape[-1])
    if w.shape != (dirs, 4 * hidden, x[2]) or r.shape != (dirs, 4 * hidden, hidden):
        return f"W {list(w.shape)} / R {list(r.shape)} not [D, 4H, I] / [D, 4H, H]"
    b = const_of(by_slot[3]) if 3 in by_slot else np.zeros((dirs, 8 * hidden), np.float32)
    if b is None:
        return "B computed at run time"
    b = np.asarray(b, np.float32).reshape(dirs, 8 * hidden)
    bias = (b[:, :4 * hidden] + b[:, 4 * hidden:]).reshape(-1)
    return _Split(direction, w.reshape(dirs * 4 * hidden, x[2]).astype(np.float32), bias.astype(np.float32),
                  r_q if quantized else by_slot[2], (by_slot[10], by_slot[11]) if quantized else None)


class SplitLstm(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.HostOp, rewriter: PatternRewriter) -> None:
        kind = (op.op_type.data, op.domain.data if op.domain else "")
        if kind not in KINDS or "place" in op.attributes or "host_reason" in op.attributes:
            return
        split = split_refusal(op)
        if isinstance(split, str):
            op.attributes["host_reason"] = StringAttr(f"ONNX {kind[0]}: not split (split-lstm): {split}; "
                                                      "the whole LSTM runs on the host")
            return
        by_slot = dict(zip(op.input_slots(), op.inputs))
        x = by_slot[0]
        steps, batch, inputs = shape_of(x)
        width = split.w.shape[0]
        flat = nn.ReshapeOp(x, tensor([steps * batch, inputs], x))
        w = new_constant(rewriter, op, split.w, "lstm_w")
        b = new_constant(rewriter, op, split.bias, "lstm_b")
        if isinstance(split.r, SSAValue):
            r = split.r
        else:  # DynamicQuantizeLSTM's 8-bit R, as shipped but transposed
            r_const = nn.ConstantOp(typed_resource(f"lstm_r_q_{next(_KEYS)}", split.r))
            rewriter.insert_op(r_const, InsertPoint.before(op))
            r = r_const.result
        dense = nn.DenseOp(flat.output, w, b, tensor([steps * batch, width], x))
        gates = nn.ReshapeOp(dense.output, tensor([steps, batch, width], x))
        hidden = split.w.shape[0] // 4 // recurrence.DIRECTIONS[split.direction]
        states = [s for s in (5, 6) if s in by_slot]
        params = list(split.r_params or ())
        cell = nn.HostOp(recurrence.LSTM_RECURRENCE, 1,
                         DictionaryAttr({"direction": StringAttr(split.direction), "hidden_size": IntegerAttr(hidden, i64)}),
                         [gates.output, r, *(by_slot[s] for s in states), *params], [res.type for res in op.outputs],
                         [0, 1, *(s - 3 for s in states), *(4, 5)[:len(params)]], 6 if params else 4, recurrence.DOMAIN)
        cell.attributes["host_reason"] = StringAttr(RECURRENCE_REASON)
        node = op.attributes.get("onnx_node")
        name = node.data if isinstance(node, StringAttr) else (op.outputs[0].name_hint or "lstm")
        for part, suffix in ((flat, "steps_flat"), (dense, "input_projection"), (gates, "gates")):
            part.attributes["onnx_node"] = StringAttr(f"{name}.{suffix}")
        cell.attributes["onnx_node"] = StringAttr(name)  # the recurrence reports as the node
        for old, new in zip(op.outputs, cell.outputs):
            new.name_hint = old.name_hint
        dropped = [v.owner for s, v in by_slot.items() if s in (1, 2, 3, 8, 9) and v is not r]
        rewriter.replace_op(op, [flat, dense, gates, cell])
        for const in dict.fromkeys(dropped):  # the node's own weights, if nothing else reads them
            if isinstance(const, nn.ConstantOp) and not const.result.uses:
                rewriter.erase_op(const)


@dataclass(frozen=True)
class SplitLstmPass(ModulePass):
    name = "split-lstm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(SplitLstm(), apply_recursively=False).rewrite_module(op)
