"""
The ONNX frontend: an ONNX model -> an `nn`-level module (`func.func @main`).

Steps: load, `onnx.checker`, upgrade old opsets with `onnx.version_converter` (the onnx
wheel's light models are opset 9), shape inference, then one pass over the nodes in
order. Nodes whose inputs are all constant (Constant, ConstantOfShape, shape arithmetic,
Unsqueeze of weights, ...) are folded with onnx's own reference evaluator. A node with an
nn mapping (conv, pools, gemm, add, ...) on float32 inputs becomes that nn op; every other
node, and a mapped one whose form the mapping does not cover (a 1-D or 3-D conv, a dilated
pool, a Gemm whose B is computed, ...), becomes `nn.host`: the node as it is, for the host.
Doubles become float32. What cannot be carried (other domains, sub-graphs, outputs whose
shape depends on the data, a dynamic dimension without an explicit input shape) is an
`OnnxImportError` naming the node, its op type and why.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper
from xdsl.dialects import func
from xdsl.dialects.builtin import DenseResourceAttr, Float32Type, ModuleOp, TensorType
from xdsl.ir import Block, Operation, Region, SSAValue

from snowir.dialects import nn
from snowir.errors import SnowError
from snowir.onnx_host import OnnxTypeError, element_type, numpy_dtype, onnx_type_of, to_mlir_attrs
from snowir.resources import put_blob

TARGET_OPSET = 13
F32 = Float32Type()


class OnnxImportError(SnowError):
    pass


class Unmapped(Exception):
    """A handler's answer that the node, though valid, has no nn-op mapping: it becomes nn.host."""


def f32_resource(key: str, array: np.ndarray) -> DenseResourceAttr:
    data = np.array(array, dtype="<f4", order="C")  # ascontiguousarray would make a scalar 1-D
    used = put_blob(_identifier(key), data.tobytes())
    return DenseResourceAttr.from_params(used, TensorType(F32, list(data.shape)))


def typed_resource(key: str, array: np.ndarray) -> DenseResourceAttr:
    """A blob in the array's own element type (nn.host operands: int64 shapes, bool masks, ...)."""
    if array.dtype == np.float32:
        return f32_resource(key, array)
    data = np.array(array, dtype=array.dtype.newbyteorder("<"), order="C")
    used = put_blob(_identifier(key), data.tobytes())
    return DenseResourceAttr.from_params(used, TensorType(_element(onnx_type_of(array.dtype)), list(data.shape)))


def _single(array: np.ndarray) -> np.ndarray:
    """Doubles become float32: snowir computes floats in fp32 at most (docs/frontend.md)."""
    return array.astype(np.float32) if array.dtype == np.float64 else array


def _element(onnx_type: int):
    return F32 if onnx_type == onnx.TensorProto.DOUBLE else element_type(onnx_type)


def _elem_of(value: SSAValue):
    return value.type.get_element_type()


def _value_types(graph: onnx.GraphProto) -> dict[str, TensorType]:
    """Static tensor types the model declares or shape inference found (None-free only)."""
    out = {}
    for info in list(graph.input) + list(graph.value_info) + list(graph.output):
        if not info.type.HasField("tensor_type"):
            continue
        tt = info.type.tensor_type
        if not tt.HasField("shape") or not all(d.HasField("dim_value") for d in tt.shape.dim):
            continue
        try:
            out[info.name] = TensorType(_element(tt.elem_type), [d.dim_value for d in tt.shape.dim])
        except OnnxTypeError:
            continue
    return out


def _identifier(name: str) -> str:
    ident = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return ident if ident and not ident[0].isdigit() else "v" + ident


def _tensor_type(shape: Sequence[int]) -> TensorType:
    return TensorType(F32, list(shape))


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _load(path: str | Path) -> onnx.ModelProto:
    path = Path(path)
    try:
        model = onnx.load(str(path))
    except FileNotFoundError:
        raise OnnxImportError(f"{path}: no such file") from None
    except Exception as e:  # noqa: BLE001 - protobuf errors vary
        raise OnnxImportError(f"{path}: not an ONNX model ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    return model


def prepare(model: onnx.ModelProto, source: str) -> onnx.ModelProto:
    """checker, opset upgrade, shape inference."""
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        raise OnnxImportError(f"{source}: invalid ONNX model: {str(e).splitlines()[0]}") from None
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), TARGET_OPSET)
    if opset < TARGET_OPSET:
        try:
            model = onnx.version_converter.convert_version(model, TARGET_OPSET)
        except Exception:  # noqa: BLE001 - keep the old opset; handlers read old attributes too
            pass
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception as e:  # noqa: BLE001
        raise OnnxImportError(f"{source}: shape inference failed: {str(e).splitlines()[0]}") from None
    return model


class Importer:
    """Walks an ONNX graph once, folding constants and building nn ops."""

    def __init__(self, model: onnx.ModelProto, source: str, input_shapes: dict[str, list[int]] | None = None):
        self.model = model
        self.source = source
        self.graph = model.graph
        self.input_shapes = input_shapes or {}
        self.consts: dict[str, np.ndarray] = {t.name: _single(numpy_helper.to_array(t)) for t in self.graph.initializer}
        self.value_types = _value_types(self.graph)
        self.consumed = {i for n in self.graph.node for i in n.input} | {o.name for o in self.graph.output}
        self.values: dict[str, SSAValue] = {}
        self.const_ops: dict[tuple[str, str], SSAValue] = {}
        self.ops: list[Operation] = []

    # ------------------------------------------------------------------ helpers
    def fail(self, node: onnx.NodeProto, why: str) -> OnnxImportError:
        name = node.name or (node.output[0] if node.output else "?")
        return OnnxImportError(f"{self.source}: node '{name}' ({node.op_type}): {why}")

    def emit(self, op: Operation) -> Operation:
        self.ops.append(op)
        return op

    def const_value(self, name: str, keep_dtype: bool = False) -> SSAValue:
        """An nn.constant for a folded constant (one per name and kind): float32, or with
        `keep_dtype` (operands of nn.host) in its own element type (doubles become float32)."""
        array = np.asarray(self.consts[name])
        if not keep_dtype or array.dtype.kind == "f":
            array = array.astype(np.float32)
        key = (name, array.dtype.str)
        if key not in self.const_ops:
            op = self.emit(nn.ConstantOp(typed_resource(name, array)))
            op.results[0].name_hint = _identifier(name)[:40]
            self.const_ops[key] = op.results[0]
        return self.const_ops[key]

    def new_const(self, name: str, array: np.ndarray) -> SSAValue:
        key = name
        i = 0
        while key in self.consts:
            i += 1
            key = f"{name}_{i}"
        self.consts[key] = array.astype(np.float32)
        return self.const_value(key)

    def value(self, node: onnx.NodeProto, name: str) -> SSAValue:
        if name in self.values:
            return self.values[name]
        if name in self.consts:
            return self.const_value(name)
        raise self.fail(node, f"input '{name}' is not produced by any earlier node")

    def const(self, node: onnx.NodeProto, index: int, what: str) -> np.ndarray:
        if index >= len(node.input) or not node.input[index]:
            raise self.fail(node, f"missing {what}")
        name = node.input[index]
        if name not in self.consts:
            raise Unmapped(f"{what} is computed at run time")
        return self.consts[name]

    def shape(self, value: SSAValue) -> list[int]:
        ty = value.type
        assert isinstance(ty, TensorType)
        return list(ty.get_shape())

    def set_output(self, node: onnx.NodeProto, op: Operation, index: int = 0) -> None:
        result = op.results[0]
        result.name_hint = _identifier(node.output[index])[:40]
        self.values[node.output[index]] = result
        if node.name:
            op.attributes["onnx_node"] = nn.StringAttr(node.name)

    # ------------------------------------------------------------------ the walk
    def run(self) -> ModuleOp:
        init_names = set(self.consts)
        inputs = [i for i in self.graph.input if i.name not in init_names]
        if not inputs:
            raise OnnxImportError(f"{self.source}: the graph has no non-constant input")
        arg_types = []
        for inp in inputs:
            if not inp.type.HasField("tensor_type"):
                raise OnnxImportError(f"{self.source}: input '{inp.name}' is not a tensor (sequences, maps and "
                                      f"optionals are not supported)")
            tt = inp.type.tensor_type
            try:
                elem = _element(tt.elem_type)
            except OnnxTypeError as e:
                raise OnnxImportError(f"{self.source}: input '{inp.name}': {e}") from None
            dims = [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None for d in tt.shape.dim]
            if "" in self.input_shapes and len(inputs) == 1:
                self.input_shapes = {inp.name: self.input_shapes[""]}
            if inp.name in self.input_shapes:
                given = self.input_shapes[inp.name]
                if len(given) != len(dims) or any(d is not None and d != g for d, g in zip(dims, given)):
                    raise OnnxImportError(f"{self.source}: --input-shape {given} does not fit input '{inp.name}' {dims}")
                dims = given
            if any(d is None for d in dims):
                raise OnnxImportError(f"{self.source}: input '{inp.name}' has a dynamic dimension {dims}; "
                                      f"give it with --input-shape")
            arg_types.append(TensorType(elem, dims))
        block = Block(arg_types=arg_types)
        for inp, arg in zip(inputs, block.args):
            arg.name_hint = _identifier(inp.name)[:40]
            self.values[inp.name] = arg
        for node in self.graph.node:
            self.node(node)
        results = []
        for out in self.graph.output:
            if not out.type.HasField("tensor_type"):
                raise OnnxImportError(f"{self.source}: output '{out.name}' is not a tensor (sequences, maps and "
                                      f"optionals are not supported)")
            if out.name in self.values:
                results.append(self.values[out.name])
            elif out.name in self.consts:
                results.append(self.const_value(out.name, keep_dtype=True))
            else:
                raise OnnxImportError(f"{self.source}: graph output '{out.name}' is never produced")
        for op in self.ops:
            block.add_op(op)
        block.add_op(func.ReturnOp(*results))
        fn = func.FuncOp("main", ([a.type for a in block.args], [r.type for r in results]), Region(block))
        module = ModuleOp([fn])
        try:
            module.verify()
        except Exception as e:  # noqa: BLE001
            raise OnnxImportError(f"{self.source}: imported module does not verify: {str(e).splitlines()[0]}") from None
        return module

    def node(self, node: onnx.NodeProto) -> None:
        ins = [i for i in node.input if i]
        if node.domain not in ("", "ai.onnx"):
            raise self.fail(node, f"operator domain '{node.domain}' not supported")
        if node.op_type in FOLDABLE or (ins and all(i in self.consts for i in ins)
                                        and not node.op_type.startswith("Random")):
            self.fold(node)
            return
        handler = HANDLERS.get(node.op_type)
        # device-mappable forms take non-empty float32 tensors; anything else is the host's
        floats = all(i in self.consts or (i in self.values and isinstance(_elem_of(self.values[i]), Float32Type)
                                          and 0 not in self.shape(self.values[i])) for i in ins)
        if handler is not None and floats:
            try:
                handler(self, node)
                return
            except Unmapped:
                pass
        self.host(node)

    def host(self, node: onnx.NodeProto) -> None:
        """The node as it is, for the host CPU: nn.host with the node's opset and attributes."""
        operands, slots = [], []
        for slot, name in enumerate(node.input):
            if name:
                operands.append(self.value(node, name) if name in self.values else self.const_value(name, keep_dtype=True))
                slots.append(slot)
        try:
            attrs = to_mlir_attrs(node)
        except OnnxTypeError as e:
            raise self.fail(node, str(e)) from None
        outs = list(node.output)
        while outs and not outs[-1]:  # absent optional outputs at the end: not computed
            outs.pop()
        types = self.output_types(node, operands, outs)
        op = self.emit(nn.HostOp(node.op_type, self.opset, attrs, operands, types, slots, len(node.input)))
        for i, name in enumerate(outs):
            if name:
                op.results[i].name_hint = _identifier(name)[:40]
                self.values[name] = op.results[i]
        if node.name:
            op.attributes["onnx_node"] = nn.StringAttr(node.name)

    def output_types(self, node: onnx.NodeProto, operands: list[SSAValue], outs: list[str]) -> list[TensorType]:
        """From the model's shape inference; else from inferring this node alone with its constant
        inputs known (a Reshape to a folded shape); an output whose shape depends on data is refused."""
        known = [self.value_types.get(o) for o in outs]
        if all(t is not None for t in known):
            return known
        from onnx import helper

        inputs, inits = [], []
        for name, value in zip([n for n in node.input if n], operands):
            if name in self.consts:
                inits.append(numpy_helper.from_array(np.asarray(self.consts[name]), name))
            else:
                ty = value.type
                inputs.append(helper.make_tensor_value_info(name, onnx_type_of(numpy_dtype(ty.get_element_type())),
                                                            list(ty.get_shape())))
        graph = helper.make_graph([node], "one", inputs, [helper.make_empty_tensor_value_info(o) for o in node.output if o],
                                  inits)
        model = helper.make_model(graph, opset_imports=list(self.model.opset_import))
        try:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
        except Exception as e:  # noqa: BLE001
            raise self.fail(node, f"cannot infer the output shape: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        found = _value_types(inferred.graph)
        types = []
        for i, name in enumerate(outs):
            if not name:
                raise self.fail(node, f"output {i} is left out before a present one; not supported")
            t = known[i] if known[i] is not None else found.get(name)
            if t is None:
                raise self.fail(node, f"output '{name}' has no static shape (it depends on the data); not supported")
            types.append(t)
        return types

    @property
    def opset(self) -> int:
        return next((o.version for o in self.model.opset_import if o.domain in ("", "ai.onnx")), TARGET_OPSET)

    def fold(self, node: onnx.NodeProto) -> None:
        from onnx.reference import ReferenceEvaluator

        feeds = {}
        for name in node.input:
            if not name:
                continue
            if name not in self.consts:
                raise self.fail(node, f"input '{name}' must be constant here")
            feeds[name] = self.consts[name]
        try:
            outs = ReferenceEvaluator(node).run(None, feeds)
        except Exception as e:  # noqa: BLE001
            raise self.fail(node, f"cannot evaluate constant node: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        for name, value in zip(node.output, outs):
            self.consts[name] = _single(np.asarray(value))


# ---------------------------------------------------------------- handlers
def _conv(imp: Importer, node: onnx.NodeProto) -> None:
    a = _attrs(node)
    x = imp.value(node, node.input[0])
    w = imp.const(node, 1, "weight")
    if w.ndim != 4:
        raise Unmapped(f"only 2-D convolution is supported (weight rank {w.ndim})")
    b = imp.const(node, 2, "bias") if len(node.input) > 2 and node.input[2] else np.zeros(w.shape[0], np.float32)
    if len(imp.shape(x)) != 4:
        raise Unmapped(f"input of rank {len(imp.shape(x))}")
    n, c, h, wd = imp.shape(x)
    strides = list(a.get("strides", [1, 1]))
    dil = list(a.get("dilations", [1, 1]))
    pads = _pads(imp, node, a, (h, wd), w.shape[2:], strides, dil)
    groups = int(a.get("group", 1))
    oh = nn.window_out(h, w.shape[2], strides[0], pads[0], pads[2], dil[0])
    ow = nn.window_out(wd, w.shape[3], strides[1], pads[1], pads[3], dil[1])
    wv = imp.const_value(node.input[1])
    if len(node.input) > 2 and node.input[2]:
        bv = imp.const_value(node.input[2])
    else:
        bv = imp.new_const(f"{node.output[0]}_bias", b)
    op = imp.emit(nn.Conv2dOp(x, wv, bv, _tensor_type([n, w.shape[0], oh, ow]), strides, pads, dil, groups))
    imp.set_output(node, op)


def _pads(imp: Importer, node: onnx.NodeProto, a: dict, size: Sequence[int], kernel: Sequence[int],
          strides: Sequence[int], dil: Sequence[int]) -> list[int]:
    auto = a.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("NOTSET", ""):
        pads = list(a.get("pads", [0, 0, 0, 0]))
        if len(pads) != 4:
            raise imp.fail(node, f"pads {pads} must have 4 entries")
        return pads
    if auto == "VALID":
        return [0, 0, 0, 0]
    out = []
    for i in range(2):
        o = -(-size[i] // strides[i])
        total = max(0, (o - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - size[i])
        lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
        out.append((lo, total - lo))
    return [out[0][0], out[1][0], out[0][1], out[1][1]]


def _pool(imp: Importer, node: onnx.NodeProto) -> None:
    a = _attrs(node)
    x = imp.value(node, node.input[0])
    if len(imp.shape(x)) != 4:
        raise Unmapped(f"input of rank {len(imp.shape(x))}")
    n, c, h, w = imp.shape(x)
    k = list(a["kernel_shape"])
    s = list(a.get("strides", [1, 1]))
    if any(d != 1 for d in a.get("dilations", [1, 1])):
        raise Unmapped("dilated pooling is not supported")
    pads = _pads(imp, node, a, (h, w), k, s, (1, 1))
    ceil = bool(a.get("ceil_mode", 0))
    oh = nn.window_out(h, k[0], s[0], pads[0], pads[2], 1, ceil)
    ow = nn.window_out(w, k[1], s[1], pads[1], pads[3], 1, ceil)
    ty = _tensor_type([n, c, oh, ow])
    if node.op_type == "MaxPool":
        if len(node.output) > 1 and node.output[1]:
            raise Unmapped("MaxPool indices output is not supported")
        op = nn.MaxPoolOp(x, ty, k, s, pads, ceil)
    else:
        extra = {"count_include_pad": nn.UnitAttr()} if a.get("count_include_pad", 0) else {}
        op = nn.AvgPoolOp(x, ty, k, s, pads, ceil, extra)
    imp.set_output(node, imp.emit(op))


def _global_avg(imp: Importer, node: onnx.NodeProto) -> None:
    x = imp.value(node, node.input[0])
    shape = imp.shape(x)
    if len(shape) != 4:
        raise Unmapped("only NCHW inputs are supported")
    imp.set_output(node, imp.emit(nn.GlobalAvgPoolOp(x, _tensor_type(shape[:2] + [1, 1]))))


def _gemm(imp: Importer, node: onnx.NodeProto) -> None:
    a = _attrs(node)
    if a.get("transA", 0):
        raise Unmapped("transA=1 is not supported")
    x = imp.value(node, node.input[0])
    if len(imp.shape(x)) != 2:
        raise Unmapped(f"input must be 2-D, got {imp.shape(x)}")
    w = imp.const(node, 1, "weight B").astype(np.float32) * float(a.get("alpha", 1.0))
    w = w if a.get("transB", 0) else w.T
    m = w.shape[0]
    if len(node.input) > 2 and node.input[2]:
        c = imp.const(node, 2, "bias C").astype(np.float32) * float(a.get("beta", 1.0))
        if c.size not in (1, m):
            raise Unmapped(f"bias of shape {list(c.shape)} does not broadcast to {m} outputs")
        c = np.broadcast_to(c.reshape(-1), (m,)).copy()
    else:
        c = np.zeros(m, np.float32)
    _dense(imp, node, x, w, c)


def _matmul(imp: Importer, node: onnx.NodeProto) -> None:
    x = imp.value(node, node.input[0])
    if len(imp.shape(x)) != 2:
        raise Unmapped(f"only 2-D MatMul is supported, input is {imp.shape(x)}")
    w = imp.const(node, 1, "right operand").astype(np.float32)
    if w.ndim != 2:
        raise Unmapped("right operand must be 2-D")
    _dense(imp, node, x, w.T.copy(), np.zeros(w.shape[1], np.float32))


def _dense(imp: Importer, node: onnx.NodeProto, x: SSAValue, w: np.ndarray, b: np.ndarray) -> None:
    n, k = imp.shape(x)
    if w.shape[1] != k:
        raise imp.fail(node, f"weight expects {w.shape[1]} features, input has {k}")
    wv = imp.new_const(f"{node.output[0]}_w", w)
    bv = imp.new_const(f"{node.output[0]}_b", b)
    imp.set_output(node, imp.emit(nn.DenseOp(x, wv, bv, _tensor_type([n, w.shape[0]]))))


def _binary(cls: type) -> Callable[[Importer, onnx.NodeProto], None]:
    def handler(imp: Importer, node: onnx.NodeProto) -> None:
        operands = [imp.value(node, name) for name in node.input if name]
        if not operands:
            raise imp.fail(node, "needs inputs")
        acc = operands[0]
        for i, rhs in enumerate(operands[1:]):
            shape = list(np.broadcast_shapes(tuple(imp.shape(acc)), tuple(imp.shape(rhs))))
            op = imp.emit(cls(acc, rhs, _tensor_type(shape)))
            acc = op.results[0]
        if len(operands) == 1:
            imp.values[node.output[0]] = acc
            return
        imp.set_output(node, op)

    return handler


def _unary(build: Callable[[Importer, onnx.NodeProto, SSAValue], Operation]) -> Callable[[Importer, onnx.NodeProto], None]:
    def handler(imp: Importer, node: onnx.NodeProto) -> None:
        imp.set_output(node, imp.emit(build(imp, node, imp.value(node, node.input[0]))))

    return handler


def _clip(imp: Importer, node: onnx.NodeProto, x: SSAValue) -> Operation:
    a = _attrs(node)
    lo, hi = a.get("min", -3.4e38), a.get("max", 3.4e38)
    if len(node.input) > 1 and node.input[1]:
        lo = float(imp.const(node, 1, "min"))
    if len(node.input) > 2 and node.input[2]:
        hi = float(imp.const(node, 2, "max"))
    return nn.ClipOp(x, props={"min": nn.FloatAttr(float(lo), 32), "max": nn.FloatAttr(float(hi), 32)})


def _batch_norm(imp: Importer, node: onnx.NodeProto) -> None:
    a = _attrs(node)
    x = imp.value(node, node.input[0])
    for i, what in ((1, "scale"), (2, "bias"), (3, "mean"), (4, "var")):
        imp.const(node, i, what)
    params = [imp.const_value(node.input[i]) for i in range(1, 5)]
    if any(o for o in node.output[1:]):
        raise Unmapped("training-mode outputs (running mean/var) are not supported")
    imp.set_output(node, imp.emit(nn.BatchNormOp(x, *params, float(a.get("epsilon", 1e-5)))))


def _concat(imp: Importer, node: onnx.NodeProto) -> None:
    xs = [imp.value(node, name) for name in node.input]
    rank = len(imp.shape(xs[0]))
    axis = int(_attrs(node)["axis"]) % rank
    shape = imp.shape(xs[0])
    shape[axis] = sum(imp.shape(v)[axis] for v in xs)
    imp.set_output(node, imp.emit(nn.ConcatOp(xs, axis, _tensor_type(shape))))


def _flatten(imp: Importer, node: onnx.NodeProto) -> None:
    x = imp.value(node, node.input[0])
    shape = imp.shape(x)
    axis = int(_attrs(node).get("axis", 1))
    axis = axis + len(shape) if axis < 0 else axis
    out = [int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))]
    imp.set_output(node, imp.emit(nn.FlattenOp(x, axis, _tensor_type(out))))


def _reshape(imp: Importer, node: onnx.NodeProto) -> None:
    x = imp.value(node, node.input[0])
    shape = imp.shape(x)
    if node.op_type == "Reshape":
        target = [int(v) for v in imp.const(node, 1, "shape")]
        target = [shape[i] if v == 0 and not _attrs(node).get("allowzero", 0) else v for i, v in enumerate(target)]
        if target.count(-1) > 1:
            raise Unmapped("more than one -1 in the target shape")
        if -1 in target:
            known = int(np.prod([v for v in target if v != -1]))
            target[target.index(-1)] = int(np.prod(shape)) // max(known, 1)
    else:  # Unsqueeze / Squeeze of a run-time tensor
        axes = [int(v) for v in (imp.const(node, 1, "axes") if len(node.input) > 1 else _attrs(node).get("axes", []))]
        target = _squeeze_shape(shape, axes, node.op_type == "Unsqueeze")
    if int(np.prod(target)) != int(np.prod(shape)):
        raise imp.fail(node, f"cannot reshape {shape} into {target}")
    imp.set_output(node, imp.emit(nn.ReshapeOp(x, _tensor_type(target))))


def _squeeze_shape(shape: list[int], axes: list[int], unsqueeze: bool) -> list[int]:
    if unsqueeze:
        out = list(shape)
        rank = len(shape) + len(axes)
        for ax in sorted(a % rank for a in axes):
            out.insert(ax, 1)
        return out
    rank = len(shape)
    drop = {a % rank for a in axes} if axes else {i for i, d in enumerate(shape) if d == 1}
    return [d for i, d in enumerate(shape) if i not in drop]


def _shape_of(imp: Importer, node: onnx.NodeProto) -> None:
    """Shape of a run-time tensor is static here: it becomes a constant for later folding."""
    shape = np.array(imp.shape(imp.value(node, node.input[0])), np.int64)
    a = _attrs(node)
    start, end = a.get("start", 0), a.get("end", None)
    imp.consts[node.output[0]] = shape[start:end]


def _transpose(imp: Importer, node: onnx.NodeProto) -> None:
    x = imp.value(node, node.input[0])
    shape = imp.shape(x)
    perm = list(_attrs(node).get("perm", list(reversed(range(len(shape))))))
    imp.set_output(node, imp.emit(nn.TransposeOp(x, perm, _tensor_type([shape[p] for p in perm]))))


def _passthrough(imp: Importer, node: onnx.NodeProto) -> None:
    # inference Dropout is the identity; a mask someone reads, or training mode, is the host's
    if any(o in imp.consumed for o in node.output[1:] if o):
        raise Unmapped("its mask output is used")
    if len(node.input) > 2 and node.input[2] and not (node.input[2] in imp.consts and not imp.consts[node.input[2]].any()):
        raise Unmapped("training mode")
    x = imp.value(node, node.input[0])
    op = imp.emit(nn.IdentityOp(x, node.op_type.lower()))
    imp.set_output(node, op)


def _softmax(imp: Importer, node: onnx.NodeProto, x: SSAValue) -> Operation:
    rank = len(imp.shape(x))
    axis = int(_attrs(node).get("axis", -1)) % rank
    if axis != rank - 1 and any(d != 1 for d in imp.shape(x)[axis + 1:]):
        raise Unmapped("softmax over a non-last axis is not supported")
    return nn.SoftmaxOp(x, props={"axis": nn.IntegerAttr(axis, nn.i64)})


def _lrn(imp: Importer, node: onnx.NodeProto, x: SSAValue) -> Operation:
    a = _attrs(node)
    return nn.LrnOp(x, props={"size": nn.IntegerAttr(int(a["size"]), nn.i64),
                              "alpha": nn.FloatAttr(float(a.get("alpha", 1e-4)), 32),
                              "beta": nn.FloatAttr(float(a.get("beta", 0.75)), 32),
                              "bias": nn.FloatAttr(float(a.get("bias", 1.0)), 32)})


def _hard_sigmoid(imp: Importer, node: onnx.NodeProto, x: SSAValue) -> Operation:
    a = _attrs(node)
    return nn.HardSigmoidOp(x, props={"alpha": nn.FloatAttr(float(a.get("alpha", 0.2)), 32),
                                      "beta": nn.FloatAttr(float(a.get("beta", 0.5)), 32)})


HANDLERS: dict[str, Callable[[Importer, onnx.NodeProto], None]] = {
    "Conv": _conv,
    "Relu": _unary(lambda imp, n, x: nn.ReluOp(x)),
    "Clip": _unary(_clip),
    "MaxPool": _pool,
    "AveragePool": _pool,
    "GlobalAveragePool": _global_avg,
    "Gemm": _gemm,
    "MatMul": _matmul,
    "Add": _binary(nn.AddOp),
    "Sum": _binary(nn.AddOp),
    "Mul": _binary(nn.MulOp),
    "BatchNormalization": _batch_norm,
    "Concat": _concat,
    "Flatten": _flatten,
    "Reshape": _reshape,
    "Unsqueeze": _reshape,
    "Squeeze": _reshape,
    "Transpose": _transpose,
    "Shape": _shape_of,
    "Dropout": _passthrough,
    "Identity": _passthrough,
    "Softmax": _unary(_softmax),
    "LRN": _unary(_lrn),
    "HardSigmoid": _unary(_hard_sigmoid),
    "HardSwish": _unary(lambda imp, n, x: nn.HardSwishOp(x)),
}
FOLDABLE = {"Constant", "ConstantOfShape"}


def import_onnx(path: str | Path, input_shapes: dict[str, list[int]] | None = None) -> ModuleOp:
    model = _load(path)
    return import_model(model, str(path), input_shapes)


def import_model(model: onnx.ModelProto, source: str = "<onnx>",
                 input_shapes: dict[str, list[int]] | None = None) -> ModuleOp:
    model = prepare(model, source)
    return Importer(model, source, input_shapes).run()


def parse_input_shape(spec: str, default_name: str | None = None) -> dict[str, list[int]]:
    """`1,3,224,224` or `name:1,3,224,224[;name2:...]`."""
    out: dict[str, list[int]] = {}
    for part in filter(None, spec.split(";")):
        name, _, dims = part.rpartition(":")
        try:
            shape = [int(d) for d in dims.replace("x", ",").split(",") if d]
        except ValueError:
            raise OnnxImportError(f"--input-shape '{spec}': dimensions must be integers") from None
        if not shape or any(d <= 0 for d in shape):
            raise OnnxImportError(f"--input-shape '{spec}': dimensions must be positive")
        out[name or (default_name or "")] = shape
    return out
