"""
split-recurrence: an ONNX LSTM, GRU or RNN kept as `nn.host` (float W / R / B, or com.microsoft's
DynamicQuantizeLSTM, its 8-bit W dequantized) becomes its input projection, a dense layer the
device runs, and its recurrence, one of snowir's own host kinds (snowir/recurrence.py):

    Y, Y_h, Y_c = LSTM(X [T, B, I], W, R, B, -, h0, c0)
 -> gates = reshape(dense(reshape(X to [T·B, I]), W' [D·4H, I], Wb + Rb) to [T, B, D·4H])
    Y, Y_h, Y_c = nn.host "LSTMRecurrence"(gates, R, h0, c0) {domain = "snowir"}

W' is both directions' W side by side (ONNX's W [D, G·H, I] is W' row by row); each direction's
bias is Wb + Rb, since the projection and the recurrence's H·R^T are summed anyway, except GRU's
Rb_h with linear_before_reset = 1, which the reset gate multiplies with H·R_h^T: it stays with the
recurrence (GRURecurrence's Rb_h). DynamicQuantizeLSTM's W is (W_q - W_zp) · W_scale (per direction,
or per direction and gate column); its R stays 8-bit as shipped, with its scale and zero point, for
the host to stream a quarter of the bytes at every step.

Why: an LSTM's work is D·T·B·4H·(I + H) MACs (GRU 3H, RNN H), and the part X·W^T does not depend
on the recurrence: it is one [T·B, I] x [I, D·G·H] matmul over every step, which sequence-gemm runs
on the device as one 1x1 conv over T pixels. Only H·R^T, D·T·B·G·H·H MACs, must wait for the
previous step. ddddocr's OCR nets (a bidirectional LSTM, I = H = 512) spent ~200 of their 230-245 ms
end to end in that one host node.

Split where the recurrence is the plain cell: ONNX's default activations (LSTM sigmoid / tanh /
tanh, GRU sigmoid / tanh, RNN tanh), no clip or activation parameters, LSTM's input_forget 0 and no
peepholes, layout 0 ([T, B, I]), sequence_lens absent or every entry T, W / R / B constants, X and Y
float32. Anything else stays the single host node as imported, with `host_reason` saying what kept
it; a node the user placed (`place`) is left alone.

This is a graph pass, not the importer's: the node imports as the ONNX node it is (FloatBackend runs
it through onnxruntime), and `-p` without split-recurrence, or nn-prepare{split-recurrence=false},
keeps the whole node on the host to compare.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import DictionaryAttr, Float32Type, IntegerAttr, ModuleOp, StringAttr, i64
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern
from xdsl.rewriter import InsertPoint

from snowir import recurrence
from snowir.dialects import nn
from snowir.frontend.onnx_import import typed_resource
from snowir.host_nodes import host_attr
from snowir.nn_util import const_of, drop_dead_constants, new_constant, shape_of, tensor
from snowir.recurrence import CELLS, KIND_OF, dequantized_rows

KINDS = {("LSTM", ""): "LSTM", ("DynamicQuantizeLSTM", "com.microsoft"): "LSTM", ("GRU", ""): "GRU", ("RNN", ""): "RNN"}
"""(op type, domain) of the nodes split, and the ONNX cell each computes: DynamicQuantizeLSTM is
onnxruntime's dynamically quantized LSTM (W_q [D, I, 4H], R_q [D, H, 4H], 8-bit, with scales and
zero points)."""
DEFAULT_ACTIVATIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}
ATTRIBUTES = {"LSTM": {"input_forget": 0}, "GRU": {"linear_before_reset": None}, "RNN": {}}
"""Each cell's own attributes split-recurrence takes, and the one value it takes (None: any)."""
_KEYS = itertools.count()


def recurrence_reason(onnx: str, gates: int) -> str:
    return (f"the {onnx}'s recurrence: each step reads the previous step's hidden state "
            f"(D x T x B x {gates}H x H MACs); split-recurrence runs its input projection on the device")


@dataclass(frozen=True)
class _Split:
    """What the rewrite needs of a splittable node."""

    cell: str
    """The ONNX cell: LSTM, GRU or RNN."""
    direction: str
    w: np.ndarray
    """[D·G·H, I]: the dense layer's weights."""
    bias: np.ndarray
    """[D·G·H]: Wb + Rb of each direction (GRU with linear_before_reset: Rb_h apart)."""
    r: np.ndarray | SSAValue
    """[D, G·H, H]: the ONNX node's own R (a value), or DynamicQuantizeLSTM's 8-bit R transposed (an array)."""
    r_params: tuple[SSAValue, SSAValue] | None = None
    """DynamicQuantizeLSTM's R_scale and R_zero_point (the node's own values): the recurrence reads R
    in 8 bits, as shipped, and multiplies by the float R they make."""
    rb_h: np.ndarray | None = None
    """GRU with linear_before_reset: the h gate's recurrent bias [D, H]."""
    linear_before_reset: int = 0


def split_refusal(op: nn.HostOp, onnx: str) -> _Split | str:
    """The split of an LSTM / GRU / RNN nn.host node (`onnx` the cell), or why it stays whole."""
    quantized = op.op_type.data == "DynamicQuantizeLSTM"
    gates = CELLS[KIND_OF[onnx]].gates
    by_slot = dict(zip(op.input_slots(), op.inputs))
    attrs = op.attrs.data
    direction = host_attr(op, "direction", "forward")
    if direction not in recurrence.DIRECTIONS:
        return f"direction '{direction}'"
    dirs = recurrence.DIRECTIONS[direction]
    activations = attrs.get("activations")
    if activations is not None and [a.data for a in activations.data] != DEFAULT_ACTIVATIONS[onnx] * dirs:
        return (f"activations {[a.data for a in activations.data]} (split: the default "
                f"{', '.join(DEFAULT_ACTIVATIONS[onnx]).lower()} only)")
    for key, value in {**ATTRIBUTES[onnx], "layout": 0}.items():
        if value is not None and host_attr(op, key, value) != value:
            return f"{key} = {host_attr(op, key)}"
    odd = sorted(set(attrs) - {"direction", "hidden_size", "activations", "layout", *ATTRIBUTES[onnx]})
    if odd:
        return f"attribute {odd[0]} (a clip, or activation parameters)"
    if onnx == "LSTM" and 7 in by_slot:
        return "peepholes (P)"
    if op.capture_names() or len(op.outputs) > CELLS[KIND_OF[onnx]].outputs:
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
    r_q = None
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
    if w.shape != (dirs, gates * hidden, x[2]) or r.shape != (dirs, gates * hidden, hidden):
        return f"W {list(w.shape)} / R {list(r.shape)} not [D, {gates}H, I] / [D, {gates}H, H]"
    b = const_of(by_slot[3]) if 3 in by_slot else np.zeros((dirs, 2 * gates * hidden), np.float32)
    if b is None:
        return "B computed at run time"
    b = np.asarray(b, np.float32).reshape(dirs, 2 * gates * hidden)
    w_b, r_b = b[:, :gates * hidden], b[:, gates * hidden:].copy()
    lbr = host_attr(op, "linear_before_reset", 0) if onnx == "GRU" else 0
    rb_h = None
    if lbr:  # inside the reset gate's product: the recurrence adds it
        rb_h = r_b[:, 2 * hidden:].copy()
        r_b[:, 2 * hidden:] = 0
    return _Split(onnx, direction, w.reshape(dirs * gates * hidden, x[2]).astype(np.float32),
                  (w_b + r_b).reshape(-1).astype(np.float32), r_q if quantized else by_slot[2],
                  (by_slot[10], by_slot[11]) if quantized else None, rb_h, lbr)


class SplitRecurrence(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.HostOp, rewriter: PatternRewriter) -> None:
        onnx = KINDS.get((op.op_type.data, op.domain.data if op.domain else ""))
        if onnx is None or "place" in op.attributes or "host_reason" in op.attributes:
            return
        split = split_refusal(op, onnx)
        if isinstance(split, str):
            op.attributes["host_reason"] = StringAttr(f"ONNX {op.op_type.data}: not split (split-recurrence): {split}; "
                                                      f"the whole {onnx} runs on the host")
            return
        kind = KIND_OF[onnx]
        by_slot = dict(zip(op.input_slots(), op.inputs))
        x = by_slot[0]
        steps, batch, inputs = shape_of(x)
        width = split.w.shape[0]
        flat = nn.ReshapeOp(x, tensor([steps * batch, inputs], x))
        w = new_constant(rewriter, op, split.w, f"{onnx.lower()}_w")
        b = new_constant(rewriter, op, split.bias, f"{onnx.lower()}_b")
        if isinstance(split.r, SSAValue):
            r = split.r
        else:  # DynamicQuantizeLSTM's 8-bit R, as shipped but transposed
            r_const = nn.ConstantOp(typed_resource(f"lstm_r_q_{next(_KEYS)}", split.r))
            rewriter.insert(r_const, InsertPoint.before(op))
            r = r_const.result
        dense = nn.DenseOp(flat.output, w, b, tensor([steps * batch, width], x))
        gates = nn.ReshapeOp(dense.output, tensor([steps, batch, width], x))
        hidden = width // CELLS[kind].gates // recurrence.DIRECTIONS[split.direction]
        # the recurrence's operands by slot (snowir/recurrence.py): gates, R, then initial_h, ...
        operands = {0: gates.output, 1: r}
        if 5 in by_slot:
            operands[2] = by_slot[5]
        if onnx == "LSTM" and 6 in by_slot:
            operands[3] = by_slot[6]
        if split.rb_h is not None:
            operands[3] = new_constant(rewriter, op, split.rb_h, "gru_rb_h")
        if split.r_params is not None:
            operands[4], operands[5] = split.r_params
        attrs = {"direction": StringAttr(split.direction), "hidden_size": IntegerAttr(hidden, i64)}
        if onnx == "GRU":
            attrs["linear_before_reset"] = IntegerAttr(split.linear_before_reset, i64)
        cell = nn.HostOp(kind, 1, DictionaryAttr(attrs), list(operands.values()), [res.type for res in op.outputs],
                         list(operands), max(operands) + 1, recurrence.DOMAIN)
        cell.attributes["host_reason"] = StringAttr(recurrence_reason(onnx, CELLS[kind].gates))
        node = op.attributes.get("onnx_node")
        name = node.data if isinstance(node, StringAttr) else (op.outputs[0].name_hint or onnx.lower())
        for part, suffix in ((flat, "steps_flat"), (dense, "input_projection"), (gates, "gates")):
            part.attributes["onnx_node"] = StringAttr(f"{name}.{suffix}")
        cell.attributes["onnx_node"] = StringAttr(name)  # the recurrence reports as the node
        for old, new in zip(op.outputs, cell.outputs):
            new.name_hint = old.name_hint
        stem = op.outputs[0].name_hint or onnx.lower()  # else the rewriter names the parts after Y too
        for part, suffix in ((flat, "steps"), (dense, "projection"), (gates, "gates")):
            part.results[0].name_hint = f"{stem}_{suffix}"
        rewriter.replace(op, [flat, dense, gates, cell])


@dataclass(frozen=True)
class SplitRecurrencePass(ModulePass):
    name = "split-recurrence"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(SplitRecurrence(), apply_recursively=False).rewrite_module(op)
        drop_dead_constants(op)  # the nodes' own W, R, B (and scales) where nothing else reads them
