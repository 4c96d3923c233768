"""
Quantized ONNX models imported as the float model they stand for: onnxruntime's dynamic
quantization (below) and its static one in the QDQ and QOperator forms (`dequantize_qdq`,
`qoperator_as_qdq`, further down); `dequantize` applies all three, as the importer does.

onnxruntime's `quantize_dynamic` turns each Conv / MatMul into DynamicQuantizeLinear of its input,
a ConvInteger / MatMulInteger over 8-bit weights, a Cast back to float and a Mul by the product of
the two scales, and adds the bias: in float after the Mul (onnxruntime 1.x today), or, in older
exports, quantized at run time by the input's scale (Div, Floor, Cast, Reshape) before the Cast.
None of those is an op the device runs, so as shipped every layer of such a model ran on the host
(ddddocr 1.6.1's common_old.onnx: 274 host nodes, 1,106 ms end to end). Each such chain is the
float Conv / MatMul with weights (W_q - W_zp) · W_scale (per tensor or per output channel) and its
bias as given: `dequantize_dynamic` rewrites it so, and snowir quantizes the float model to its own
fixed point (Q8.8, or `--format auto`) as any other. A chain that differs from this shape (another
reader of an intermediate, weights computed at run time) is left as it is, on the host.

`--check` still compares with onnxruntime running the model as shipped, so its SNR includes the
8-bit dynamic quantization's own error (docs/frontend.md, "Quantized models").
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import onnx
from onnx import helper, numpy_helper

INTEGER_OPS = {"ConvInteger": "Conv", "MatMulInteger": "MatMul"}


class _Graph:
    """Producers, readers and constant initializers of a graph, by tensor name."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.producer = {o: n for n in graph.node for o in n.output}
        self.readers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
        for n in graph.node:
            for i in n.input:
                self.readers[i].append(n)
        for o in graph.output:
            self.readers[o.name].append(None)  # type: ignore[arg-type]  # a model output: read outside
        self.inits = {i.name: i for i in graph.initializer}
        self.opset = 0  # the default domain's, where a rewrite needs it

    def const(self, name: str) -> np.ndarray | None:
        init = self.inits.get(name)
        return None if init is None else numpy_helper.to_array(init)

    def only_reader(self, name: str, op_type: str) -> onnx.NodeProto | None:
        readers = self.readers.get(name, [])
        if len(readers) == 1 and readers[0] is not None and readers[0].op_type == op_type:
            return readers[0]
        return None

    def made_by(self, name: str, op_type: str) -> onnx.NodeProto | None:
        node = self.producer.get(name)
        return node if node is not None and node.op_type == op_type else None


def _scale_of(g: _Graph, name: str, x_scale: str) -> tuple[onnx.NodeProto, np.ndarray] | None:
    """`name` = Mul(x_scale, W_scale) with W_scale constant: (that Mul, W_scale)."""
    mul = g.made_by(name, "Mul")
    if mul is None or x_scale not in mul.input:
        return None
    w_scale = g.const(next((i for i in mul.input if i != x_scale), x_scale))
    return None if w_scale is None else (mul, w_scale.astype(np.float32))


def _shaped(g: _Graph, value: np.ndarray, reshape: onnx.NodeProto | None) -> tuple[int, ...] | None:
    """The shape `value` takes through `reshape` (a Reshape by a constant shape) if any, else its own."""
    if reshape is None:
        return value.shape
    target = g.const(reshape.input[1]) if len(reshape.input) > 1 else None
    try:
        return None if target is None else np.reshape(value, [int(d) for d in target]).shape
    except ValueError:
        return None


def _per_channel(shape: tuple[int, ...] | None, op_type: str, channels: int) -> bool:
    """A bias of `shape` adds one value per output channel to the op's result as it broadcasts: a
    Conv's (N, C, H, W) on its axis -3, a MatMul's (..., N) on its last."""
    axis = -3 if op_type == "ConvInteger" else -1
    if shape is None or len(shape) < -axis or shape[axis] != channels:
        return False
    return all(d == 1 for i, d in enumerate(shape) if i != len(shape) + axis)


def _runtime_bias(g: _Graph, name: str, x_scale: str, op_type: str,
                  channels: int) -> tuple[list[onnx.NodeProto], np.ndarray] | None:
    """`name` = Reshape(Cast(Floor(Div(b, Mul(x_scale, W_scale))))), b constant, one value per
    output channel: (those nodes, b)."""
    reshape = g.made_by(name, "Reshape")
    cast = reshape and g.made_by(reshape.input[0], "Cast")
    floor = cast and g.made_by(cast.input[0], "Floor")
    div = floor and g.made_by(floor.input[0], "Div")
    if div is None:
        return None
    bias, scale = g.const(div.input[0]), _scale_of(g, div.input[1], x_scale)
    if bias is None or scale is None or not _per_channel(_shaped(g, bias, reshape), op_type, channels):
        return None
    return [reshape, cast, floor, div], bias.astype(np.float32).reshape(-1)


def _chain(g: _Graph, q: onnx.NodeProto):
    """The float op a ConvInteger / MatMulInteger chain stands for: (nodes it replaces, input,
    output, dequantized weights, bias or None), or None where the chain has another shape."""
    dql = g.made_by(q.input[0], "DynamicQuantizeLinear")
    w_q = g.const(q.input[1]) if len(q.input) > 1 else None
    if dql is None or w_q is None or dql.output[0] != q.input[0]:
        return None
    x_scale, x_zero = dql.output[1], dql.output[2]
    if len(q.input) > 2 and q.input[2] not in ("", x_zero):
        return None
    w_zero = g.const(q.input[3]) if len(q.input) > 3 and q.input[3] else np.zeros((), w_q.dtype)
    if w_zero is None:
        return None
    nodes, bias, out = [q], None, q.output[0]
    channels = w_q.shape[0] if q.op_type == "ConvInteger" else w_q.shape[-1]
    add = g.only_reader(out, "Add")
    if add is not None:
        other = next((i for i in add.input if i != out), "")
        found = _runtime_bias(g, other, x_scale, q.op_type, channels)
        if found is None:
            return None
        nodes += [add, *found[0]]
        bias, out = found[1], add.output[0]
    cast = g.only_reader(out, "Cast")
    mul = cast and g.only_reader(cast.output[0], "Mul")
    if mul is None:
        return None
    scale = _scale_of(g, next((i for i in mul.input if i != cast.output[0]), ""), x_scale)
    if scale is None:
        return None
    nodes += [cast, mul]
    add = g.only_reader(mul.output[0], "Add") if bias is None and q.op_type == "ConvInteger" else None
    if add is not None and (found := _float_bias(g, next((i for i in add.input if i != mul.output[0]), ""),
                                                 channels)) is not None:
        nodes.append(add)  # newer onnxruntime adds the float bias after the scale
        bias = found
    return nodes, dql.input[0], nodes[-1].output[0], _dequantized(q.op_type, w_q, w_zero, scale[1]), bias


def _float_bias(g: _Graph, name: str, channels: int) -> np.ndarray | None:
    """`name` = a constant, or Reshape of one by a constant shape, of one value per output channel
    of a Conv's result: as a vector (another Add stays an Add after the conv)."""
    reshape = g.made_by(name, "Reshape")
    bias = g.const(reshape.input[0] if reshape is not None else name)
    if bias is None or not _per_channel(_shaped(g, bias, reshape), "ConvInteger", channels):
        return None
    return bias.astype(np.float32).reshape(-1)


def _dequantized(op_type: str, w_q: np.ndarray, w_zero: np.ndarray, w_scale: np.ndarray) -> np.ndarray:
    """(W_q - W_zp) · W_scale, a zero point and scale per tensor or per output channel (a Conv's
    axis 0; a MatMul's last axis, where numpy broadcasts them already)."""
    def per_channel(a: np.ndarray) -> np.ndarray:
        a = a.astype(np.float32)
        return a.reshape((-1,) + (1,) * (w_q.ndim - 1)) if op_type == "ConvInteger" and a.size > 1 else a

    return ((w_q.astype(np.float32) - per_channel(w_zero)) * per_channel(w_scale)).astype(np.float32)


def dequantize(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` as the float model its quantized layers stand for, in all three of onnxruntime's
    forms (dynamic chains, QOperator ops, QDQ pairs); the model itself when it has none."""
    return dequantize_qdq(qoperator_as_qdq(dequantize_dynamic(model)))


def dequantize_dynamic(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with every dynamically quantized Conv / MatMul chain as its float op (a copy; the
    model itself when it has none)."""
    if not any(n.op_type in INTEGER_OPS for n in model.graph.node):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    g = _Graph(graph)
    replaced: dict[int, onnx.NodeProto] = {}
    gone: set[int] = set()
    added: list[onnx.TensorProto] = []
    for q in graph.node:
        if q.op_type not in INTEGER_OPS or (found := _chain(g, q)) is None:
            continue
        nodes, x, y, weights, bias = found
        if any(id(n) in gone for n in nodes) or any(len(g.readers.get(o, [])) != 1 for n in nodes[:-1]
                                                    for o in n.output):
            continue  # an intermediate someone else reads: the chain stays
        stem = q.name or y
        inputs = [x, f"{stem}_dequantized_w"]
        added.append(numpy_helper.from_array(weights, inputs[1]))
        if bias is not None:
            inputs.append(f"{stem}_dequantized_b")
            added.append(numpy_helper.from_array(bias, inputs[2]))
        replaced[id(q)] = helper.make_node(INTEGER_OPS[q.op_type], inputs, [y], name=stem, **_attrs(q))
        gone.update(id(n) for n in nodes)
    if not replaced:
        return model
    kept = [replaced.get(id(n), n) for n in graph.node if id(n) not in gone or id(n) in replaced]
    kept = _without_unread(kept, graph)
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(added)
    _drop_unread_initializers(graph)
    return out


def _drop_unread_initializers(graph: onnx.GraphProto) -> None:
    """Drop the initializers (and their graph inputs) nothing reads any more, and the value_info of
    tensors no node makes any more (the rewrites change some tensors' element type)."""
    read = {i for n in graph.node for i in n.input}
    unread = [i for i in graph.initializer if i.name not in read]
    for init in unread:
        graph.initializer.remove(init)
    names = {i.name for i in unread}
    for inp in [i for i in graph.input if i.name in names]:
        graph.input.remove(inp)
    made = {o for n in graph.node for o in n.output}
    for info in [v for v in graph.value_info if v.name not in made]:
        graph.value_info.remove(info)


def _without_unread(nodes: list[onnx.NodeProto], graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """`nodes` less those none of whose outputs anything reads (the DynamicQuantizeLinear nodes and
    scale Muls the rewrite left without a reader, unless something else reads them), repeated
    until none is left."""
    outputs = {o.name for o in graph.output}
    while True:
        read = {i for n in nodes for i in n.input} | outputs
        live = [n for n in nodes if any(o in read for o in n.output)]
        if len(live) == len(nodes):
            return nodes
        nodes = live


# Static quantization (`quantize_static`, PyTorch / TensorRT exports). In the QDQ form the model is
# the float model with a QuantizeLinear -> DequantizeLinear pair on each activation and a
# DequantizeLinear of each constant int8 weight (int32 bias): folding the constants and dropping
# the pairs leaves the float model. In the QOperator form each layer is one integer op
# (QLinearConv, QLinearMatMul, com.microsoft's QGemm) between 8-bit tensors: `qoperator_as_qdq`
# writes each as DequantizeLinear -> the float op -> QuantizeLinear, which is what it computes, and
# the QDQ rewrite does the rest.

QUANT_TYPES = (np.int8, np.uint8, np.int16, np.uint16)
# Ops that move or pick 8-bit values without arithmetic: with one scale and zero point for the
# tensor, the op on the dequantized values is the dequantized op on the integers (a positive
# scale keeps MaxPool's order).
MOVERS = {"Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "MaxPool"}
# Ops whose values are never negative: a pair clamping at 0 after one needs no Relu.
NON_NEGATIVE = {"Relu", "Sigmoid", "Softmax"}
KEEP_SIGN = MOVERS | {"AveragePool", "GlobalAveragePool"}  # non-negative in, non-negative out


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _qparams(g: _Graph, node: onnx.NodeProto) -> tuple[np.ndarray, np.ndarray] | None:
    """(scale, zero point) of a QuantizeLinear / DequantizeLinear whose scale and zero point are
    constants, one for the whole tensor, the zero point 8 or 16 bits (where a pair's rounding is
    the 8-bit quantization, and its clamp known); None otherwise."""
    if len(node.input) < 3 or _attrs(node).get("block_size", 0):
        return None
    scale, zero = g.const(node.input[1]), g.const(node.input[2])
    if scale is None or zero is None or scale.size != 1 or zero.size != 1 or zero.dtype not in QUANT_TYPES:
        return None
    return scale.astype(np.float32).reshape(()), zero.reshape(())


def _folded(g: _Graph, dq: onnx.NodeProto) -> np.ndarray | None:
    """A DequantizeLinear of constants as the float constant it makes: (q - zp) · scale, one
    scale and zero point per tensor or per slice along `axis` (the ONNX default 1)."""
    q, scale = g.const(dq.input[0]), (g.const(dq.input[1]) if len(dq.input) > 1 else None)
    zero = g.const(dq.input[2]) if len(dq.input) > 2 and dq.input[2] else (None if q is None else np.zeros((), q.dtype))
    if q is None or scale is None or zero is None or _attrs(dq).get("block_size", 0) \
            or q.dtype not in (*QUANT_TYPES, np.int32):
        return None
    if scale.size > 1:
        shape = [1] * q.ndim
        shape[_attrs(dq).get("axis", 1) % q.ndim] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    # onnxruntime subtracts in integers and multiplies in float32
    return ((q.astype(np.int64) - zero.astype(np.int64)).astype(np.float32) * scale.astype(np.float32)).astype(np.float32)


def dequantize_qdq(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with each DequantizeLinear of constants folded and each QuantizeLinear whose only
    readers are DequantizeLinear nodes of the same scale and zero point dropped with them (a copy;
    the model itself when there is nothing to do). A pair whose zero point is its type's least
    value clamps below at 0: onnxruntime's quantizer drops a Conv's ReLU into it, so it becomes a
    Relu. Its other clamp (the calibrated maximum) and its rounding are the 8-bit quantization's
    error, which the float model has not."""
    if not any(n.op_type == "DequantizeLinear" for n in model.graph.node):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    g = _Graph(graph)
    outputs = {o.name for o in graph.output}
    rename: dict[str, str] = {}
    gone: set[int] = set()
    added: list[onnx.TensorProto] = []
    new: dict[int, list[onnx.NodeProto]] = {}  # nodes to put after the node of this id
    non_negative: set[str] = set()  # a ReLU's values, moved or not: no second Relu for them
    for node in graph.node:
        if node.op_type in NON_NEGATIVE or (node.op_type in KEEP_SIGN
                                            and rename.get(node.input[0], node.input[0]) in non_negative):
            non_negative.add(node.output[0])
        if node.op_type == "DequantizeLinear" and (value := _folded(g, node)) is not None:
            added.append(numpy_helper.from_array(value, node.output[0]))
            gone.add(id(node))
        elif node.op_type == "QuantizeLinear" and (pair := _pair(g, node)) is not None:
            params, dqs = pair
            x = node.input[0]
            if params[1] == np.iinfo(params[1].dtype).min and rename.get(x, x) not in non_negative:
                relu = helper.make_node("Relu", [x], [f"{node.output[0]}_relu"], name=f"{node.name or x}_relu")
                new.setdefault(id(node), []).append(relu)
                x = relu.output[0]
                non_negative.add(x)
            for dq in dqs:
                rename[dq.output[0]] = x
                gone.add(id(dq))
            gone.add(id(node))
    if not gone:
        return model
    kept = []
    for node in graph.node:
        if id(node) not in gone:
            kept.append(node)
        kept.extend(new.get(id(node), []))
    for node in kept:
        for k, name in enumerate(node.input):
            node.input[k] = rename.get(name, name)
    made = {o: n for n in kept for o in n.output}
    inputs = {i.name for i in graph.input}
    for name in sorted(outputs & rename.keys()):  # a model output keeps its name
        src = rename[name]
        if src in made and src not in outputs and src not in inputs:
            made[src].output[list(made[src].output).index(src)] = name  # its maker writes it
            for node in kept:
                for k, i in enumerate(node.input):
                    if i == src:
                        node.input[k] = name
        else:
            kept.append(helper.make_node("Identity", [src], [name], name=f"{name}_float"))
    del graph.node[:]
    graph.node.extend(_without_unread(kept, graph))
    graph.initializer.extend(added)
    _drop_unread_initializers(graph)
    return out


def _pair(g: _Graph, q: onnx.NodeProto):
    """(scale and zero point, the DequantizeLinear readers) where every reader of `q`'s output
    is a DequantizeLinear of the same constant scale and zero point; None otherwise."""
    params = _qparams(g, q)
    readers = g.readers.get(q.output[0], [])
    if params is None or not readers or any(r is None or r.op_type != "DequantizeLinear" or r.input[0] != q.output[0]
                                            for r in readers):
        return None
    for r in readers:
        theirs = _qparams(g, r)
        if theirs is None or theirs[0] != params[0] or theirs[1] != params[1] or theirs[1].dtype != params[1].dtype:
            return None
    return params, readers


def qoperator_as_qdq(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with each QLinearConv, QLinearMatMul and com.microsoft QGemm of constant weights,
    scales and zero points as DequantizeLinear -> Conv / MatMul / Gemm -> QuantizeLinear (weights
    (W_q - W_zp) · W_scale, the int32 bias times x_scale · W_scale), com.microsoft's elementwise
    and pooling QLinear ops (ELEMENTWISE) as the float op between the same, and each of MOVERS
    reading such an op's output as the same op on the dequantized values; a copy, or the model
    itself when it has none. A QLinear op of another kind or shape stays as shipped, on the host,
    reading and writing 8-bit tensors as before."""
    if not any(n.op_type in ("QLinearConv", "QLinearMatMul", "QGemm") for n in model.graph.node):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    g = _Graph(graph)
    g.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    kept: list[onnx.NodeProto] = []
    added: list[onnx.TensorProto] = []
    made_by_q: dict[str, onnx.NodeProto] = {}  # 8-bit tensors the rewrite made, by name
    for node in graph.node:
        found = _qlinear(g, node) or _qlinear_elementwise(g, node)
        if found is None and node.op_type in MOVERS and len(node.output) == 1 and node.input[0] in made_by_q:
            q = made_by_q[node.input[0]]
            found = [(node.input[0], *q.input[1:3])], node.output[0], [*q.input[1:3]], \
                helper.make_node(node.op_type, ["", *node.input[1:]], [""], name=node.name, **_attrs(node)), []
        if found is None:
            kept.append(node)
            continue
        xs, y, y_params, op, inits = found
        stem = node.name or y
        y_float = f"{stem}_y_float"
        op.output[0] = y_float if y_params else y
        for k, (x, x_scale, x_zero) in enumerate(xs):
            x_float = f"{stem}_x{k}_float"
            op.input[[i for i, name in enumerate(op.input) if not name][0]] = x_float
            kept.append(helper.make_node("DequantizeLinear", [x, x_scale, x_zero], [x_float], name=f"{stem}_dequantize{k}"))
        kept.append(op)
        if y_params:
            q = helper.make_node("QuantizeLinear", [y_float, *y_params], [y], name=f"{stem}_quantize")
            kept.append(q)
            made_by_q[y] = q
        added += inits
    if len(kept) == len(graph.node):
        return model
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(added)
    _drop_unread_initializers(graph)
    return out


# com.microsoft's QLinear ops that are a float op between 8-bit tensors: the float op, and how
# many (tensor, scale, zero point) inputs come before the output's scale and zero point
ELEMENTWISE = {"QLinearAdd": ("Add", 2), "QLinearMul": ("Mul", 2), "QLinearGlobalAveragePool": ("GlobalAveragePool", 1),
               "QLinearAveragePool": ("AveragePool", 1), "QLinearSigmoid": ("Sigmoid", 1),
               "QLinearLeakyRelu": ("LeakyRelu", 1), "QLinearSoftmax": ("Softmax", 1)}


def _qlinear_elementwise(g: _Graph, node: onnx.NodeProto):
    """One of ELEMENTWISE, channels first, all scales and zero points constants of one value: as
    `_qlinear` gives it; None otherwise."""
    if node.domain != "com.microsoft" or node.op_type not in ELEMENTWISE:
        return None
    op_type, n = ELEMENTWISE[node.op_type]
    attrs = _attrs(node)
    ins = list(node.input) + [""] * (3 * n + 2 - len(node.input))
    if op_type == "Softmax" and attrs.pop("opset", 0) != g.opset:
        return None  # its axis means what Softmax's does in that opset: the model's own, or no rewrite
    if attrs.pop("channels_last", 0) or any(not ins[i] or g.const(ins[i]) is None or g.const(ins[i]).size != 1
                                            for k in range(n) for i in (3 * k + 1, 3 * k + 2)) \
            or any(not ins[i] or g.const(ins[i]) is None for i in (3 * n, 3 * n + 1)):
        return None
    xs = [tuple(ins[3 * k: 3 * k + 3]) for k in range(n)]
    op = helper.make_node(op_type, [""] * n, [""], name=node.name or node.output[0], **attrs)
    return xs, node.output[0], [ins[3 * n], ins[3 * n + 1]], op, []


def _qlinear(g: _Graph, node: onnx.NodeProto):
    """A QLinearConv / QLinearMatMul / QGemm as ([its 8-bit input with scale and zero point], its
    output, the output's scale and zero point (none: a float output), the float op with the input
    and output left to name, its float constants); None for any other node or shape."""
    ins = list(node.input) + [""] * (9 - len(node.input))
    if node.op_type == "QLinearConv" and node.domain in ("", "ai.onnx"):
        b_at, y_at, op_type = 8, 6, "Conv"
    elif node.op_type == "QLinearMatMul" and node.domain in ("", "ai.onnx"):
        b_at, y_at, op_type = None, 6, "MatMul"
    elif node.op_type == "QGemm" and node.domain == "com.microsoft":
        b_at, y_at, op_type = 6, 7, "Gemm"
    else:
        return None
    attrs = _attrs(node)
    if op_type == "Gemm" and (attrs.pop("alpha", 1.0) != 1.0 or attrs.get("transA", 0)):
        return None  # the bias's scale would carry alpha; A' not a plain matrix of rows
    x_scale, w_q, w_scale, w_zero = (g.const(ins[i]) for i in (1, 3, 4, 5))
    if x_scale is None or w_q is None or w_scale is None or w_zero is None or x_scale.size != 1 \
            or g.const(ins[2]) is None or w_q.dtype not in QUANT_TYPES or w_q.ndim < 2:
        return None
    if ins[y_at] and (g.const(ins[y_at]) is None or g.const(ins[y_at + 1]) is None):
        return None
    # the weights' output channels: a Conv's axis 0, a MatMul's last, a Gemm's B' columns
    axis = 0 if op_type == "Conv" or (op_type == "Gemm" and attrs.get("transB", 0)) else w_q.ndim - 1
    shape = [1] * w_q.ndim
    shape[axis] = -1
    w_scale = w_scale.astype(np.float32).reshape(shape if w_scale.size > 1 else ())
    w_zero = w_zero.reshape(shape if w_zero.size > 1 else ())
    weights = ((w_q.astype(np.int64) - w_zero.astype(np.int64)).astype(np.float32) * w_scale).astype(np.float32)
    stem = node.name or node.output[0]
    inits = [numpy_helper.from_array(weights, f"{stem}_dequantized_w")]
    inputs = ["", inits[0].name]
    if b_at is not None and ins[b_at]:
        b_q = g.const(ins[b_at])
        if b_q is None or b_q.dtype != np.int32:
            return None
        bias = (b_q.astype(np.float32) * (x_scale.astype(np.float32).reshape(()) * w_scale.reshape(-1))).astype(np.float32)
        inits.append(numpy_helper.from_array(bias.reshape(-1), f"{stem}_dequantized_b"))
        inputs.append(inits[1].name)
    op = helper.make_node(op_type, inputs, [""], name=stem, **attrs)
    y_params = [ins[y_at], ins[y_at + 1]] if ins[y_at] else []
    return [(ins[0], ins[1], ins[2])], node.output[0], y_params, op, inits
