"""
Dynamically quantized ONNX models imported as the float model they stand for.

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


def _runtime_bias(g: _Graph, name: str, x_scale: str) -> tuple[list[onnx.NodeProto], np.ndarray] | None:
    """`name` = Reshape(Cast(Floor(Div(b, Mul(x_scale, W_scale))))), b constant: (those nodes, b)."""
    reshape = g.made_by(name, "Reshape")
    cast = reshape and g.made_by(reshape.input[0], "Cast")
    floor = cast and g.made_by(cast.input[0], "Floor")
    div = floor and g.made_by(floor.input[0], "Div")
    if div is None:
        return None
    bias, scale = g.const(div.input[0]), _scale_of(g, div.input[1], x_scale)
    if bias is None or scale is None:
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
    add = g.only_reader(out, "Add")
    if add is not None:
        other = next((i for i in add.input if i != out), "")
        found = _runtime_bias(g, other, x_scale)
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
    if add is not None and (found := _float_bias(g, next((i for i in add.input if i != mul.output[0]), ""))) is not None:
        nodes.append(add)  # newer onnxruntime adds the float bias after the scale
        bias = found
    return nodes, dql.input[0], nodes[-1].output[0], _dequantized(q.op_type, w_q, w_zero, scale[1]), bias


def _float_bias(g: _Graph, name: str) -> np.ndarray | None:
    """`name` = a constant, or Reshape of one, of one value per output channel: as a vector."""
    reshape = g.made_by(name, "Reshape")
    bias = g.const(reshape.input[0] if reshape is not None else name)
    return None if bias is None else bias.astype(np.float32).reshape(-1)


def _dequantized(op_type: str, w_q: np.ndarray, w_zero: np.ndarray, w_scale: np.ndarray) -> np.ndarray:
    """(W_q - W_zp) · W_scale, a zero point and scale per tensor or per output channel (a Conv's
    axis 0; a MatMul's last axis, where numpy broadcasts them already)."""
    def per_channel(a: np.ndarray) -> np.ndarray:
        a = a.astype(np.float32)
        return a.reshape((-1,) + (1,) * (w_q.ndim - 1)) if op_type == "ConvInteger" and a.size > 1 else a

    return ((w_q.astype(np.float32) - per_channel(w_zero)) * per_channel(w_scale)).astype(np.float32)


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
        attrs = {a.name: helper.get_attribute_value(a) for a in q.attribute}
        replaced[id(q)] = helper.make_node(INTEGER_OPS[q.op_type], inputs, [y], name=stem, **attrs)
        gone.update(id(n) for n in nodes)
    if not replaced:
        return model
    kept = [replaced.get(id(n), n) for n in graph.node if id(n) not in gone or id(n) in replaced]
    kept = _without_unread(kept, graph)
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(added)
    read = {i for n in graph.node for i in n.input}
    unread = [i for i in graph.initializer if i.name not in read]
    for init in unread:
        graph.initializer.remove(init)
    names = {i.name for i in unread}
    for inp in [i for i in graph.input if i.name in names]:
        graph.input.remove(inp)
    return out


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
