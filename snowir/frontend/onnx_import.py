"""
The ONNX frontend: an ONNX model -> an `nn`-level module (`func.func @main`).

Steps: load, `onnx.checker`, upgrade old opsets with `onnx.version_converter` (the onnx
wheel's light models are opset 9), shape inference, then one pass over the nodes in
order. Nodes whose inputs are all constant (Constant, ConstantOfShape, shape arithmetic,
Unsqueeze of weights, ...) are folded with onnx's own reference evaluator. A node with an
nn mapping (conv, pools, gemm, add, ...) on float32 inputs becomes that nn op; every other
node, and a mapped one whose form the mapping does not cover (a 1-D or 3-D conv, a dilated
pool, a Gemm whose B is computed, ...), becomes `nn.host`: the node as it is, for the host.
Doubles become float32. An If whose condition is constant (exporters' If on a shape) is
its taken branch, inlined; any other node with sub-graphs (If, Loop, Scan) is an nn.host
node, whose operands include the outer-scope values its sub-graphs read. What cannot be
carried (an operator neither onnxruntime nor onnx's reference evaluator runs, outputs whose
shape depends on the data, a dynamic dimension without an explicit input shape) is an
`OnnxImportError` naming the node, its op type and why.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper
from xdsl.dialects import func
from xdsl.dialects.builtin import DenseResourceAttr, Float32Type, ModuleOp, TensorType
from xdsl.ir import Block, Operation, Region, SSAValue

from snowir.dialects import nn
from snowir.frontend.onnx_handlers import HANDLERS, Unmapped
from snowir.frontend.onnx_dequantize import dequantize
from snowir.frontend.onnx_prepare import OnnxImportError, prepare_apart
from snowir.frontend.onnx_host import (DEFAULT_DOMAINS, REFERENCE_DOMAINS, TARGET_OPSET, OnnxTypeError,
                                      element_type, has_onnxruntime, numpy_dtype, onnx_type_of, ort_operators, ort_session,
                                      outer_names, reference_evaluator, subgraphs, to_mlir_attrs)
from snowir.resources import f32_resource, identifier, put_blob

F32 = Float32Type()


def typed_resource(key: str, array: np.ndarray) -> DenseResourceAttr:
    """A blob in the array's own element type (nn.host operands: int64 shapes, bool masks, ...)."""
    if array.dtype == np.float32:
        return f32_resource(key, array)
    data = np.asarray(array, dtype=array.dtype.newbyteorder("<"), order="C")
    used = put_blob(identifier(key), data)
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


def _load(path: str | Path) -> onnx.ModelProto:
    path = Path(path)
    try:
        model = onnx.load(str(path))
    except FileNotFoundError:
        raise OnnxImportError(f"{path}: no such file") from None
    except Exception as e:  # noqa: BLE001 - protobuf errors vary
        raise OnnxImportError(f"{path}: not an ONNX model ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    return model


class Importer:
    """Walks an ONNX graph once, folding constants and building nn ops."""

    def __init__(self, model: onnx.ModelProto, source: str, input_shapes: dict[str, list[int]] | None = None,
                 weights: dict[str, onnx.TensorProto] | None = None):
        self.model = model
        self.source = source
        self.graph = model.graph
        self.input_shapes = input_shapes or {}
        self.consts: dict[str, np.ndarray] = {}
        for t in [*self.graph.initializer, *(weights or {}).values()]:
            try:
                self.consts[t.name] = _single(numpy_helper.to_array(t))
            except Exception as e:  # noqa: BLE001 - protobuf / numpy errors vary
                raise OnnxImportError(f"{source}: initializer '{t.name}' is malformed: {str(e).splitlines()[0]}") from None
        self.value_types = _value_types(self.graph)
        self.consumed = {i for n in self.graph.node for i in [*n.input, *outer_names(n)]} | \
            {o.name for o in self.graph.output}
        self.values: dict[str, SSAValue] = {}
        self.const_ops: dict[tuple[str, str], SSAValue] = {}
        self.host_side: set[str] = set()
        """Values of the host's own arithmetic (`host_side_inputs`), by ONNX name."""
        self.host_side_values: set[SSAValue] = set()
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
            op.results[0].name_hint = identifier(name)[:40]
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
        result.name_hint = identifier(node.output[index])[:40]
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
        unknown = sorted(set(self.input_shapes) - {inp.name for inp in inputs} - ({""} if len(inputs) == 1 else set()))
        if unknown:
            names = ", ".join(f"'{inp.name}'" for inp in inputs)
            raise OnnxImportError(f"{self.source}: --input-shape names input '{unknown[0]}', which the model does not "
                                  f"have (its inputs: {names})")
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
                                      f"give it with --input-shape (snow-run also takes it from --input; the "
                                      f"backend: input_shapes=, or the first run's input)")
            arg_types.append(TensorType(elem, dims))
        block = Block(arg_types=arg_types)
        for inp, arg in zip(inputs, block.args):
            arg.name_hint = identifier(inp.name)[:40]
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
            bad = next((op for op in block.ops if not _verifies(op)), None)
            node = bad.attributes.get("onnx_node") if bad is not None else None
            where = f" (node '{node.data}')" if isinstance(node, nn.StringAttr) else ""
            raise OnnxImportError(f"{self.source}: imported module does not verify{where}: "
                                  f"{str(e).splitlines()[0]}") from None
        return module

    def node(self, node: onnx.NodeProto) -> None:
        try:
            self._node(node)
        except ValueError as e:  # numpy's, naming no node: shapes that do not fit (a wrong input size)
            raise self.fail(node, self._shape_message(node, e)) from None

    def _shape_message(self, node: onnx.NodeProto, e: ValueError) -> str:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        if "broadcast" not in first:
            return first
        shapes = [list(self.shape(self.values[i])) if i in self.values else list(np.shape(self.consts[i]))
                  for i in node.input if i and (i in self.values or i in self.consts)]
        return (f"inputs of shapes {' and '.join(map(str, shapes))} do not broadcast (an input size the network "
                f"cannot take?)")

    def _node(self, node: onnx.NodeProto) -> None:
        ins = [i for i in node.input if i]
        if node.domain not in DEFAULT_DOMAINS:
            self.check_runnable(node)
            self.host(node)  # a contrib op: onnxruntime runs it on the host
            return
        if subgraphs(node):
            for inner in _inner_nodes(node):
                self.check_runnable(inner)
            self.control_flow(node, ins)
            return
        if node.op_type in FOLDABLE or (ins and all(i in self.consts for i in ins)
                                        and not node.op_type.startswith("Random")):
            self.fold(node)
            return
        if node.op_type != "Shape" and self.host_side_inputs(node):  # a shape is static here, whatever made the tensor
            self.host(node)
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

    def check_runnable(self, node: onnx.NodeProto) -> None:
        """Refuses an operator of another domain that neither onnxruntime nor the reference evaluator runs."""
        if node.domain in REFERENCE_DOMAINS:
            return
        if not has_onnxruntime():
            raise self.fail(node, f"operator domain '{node.domain}' needs onnxruntime, which is not installed "
                                  f"(onnx's reference evaluator runs ONNX's own operators only)")
        if (node.domain, node.op_type) not in ort_operators():
            raise self.fail(node, f"operator domain '{node.domain}' has no operator {node.op_type} that "
                                  f"onnxruntime runs, nor does onnx's reference evaluator")

    def control_flow(self, node: onnx.NodeProto, ins: list[str]) -> None:
        """If, Loop, Scan: an If on a constant condition is its taken branch; a node whose inputs
        and outer-scope reads are all constant is folded; any other runs on the host as it is."""
        for g in subgraphs(node):
            for out in g.output:
                kind = out.type.WhichOneof("value")
                if kind not in (None, "tensor_type"):
                    raise self.fail(node, f"sub-graph '{g.name}' output '{out.name}' is of {kind.removesuffix('_type')} "
                                          f"type, not a tensor (sequences, maps and optionals are not supported)")
        if node.op_type == "If" and ins and ins[0] in self.consts:
            self.inline_branch(node)
        elif all(i in self.consts for i in [*ins, *outer_names(node)]):
            self.fold(node)
        else:
            self.host(node)

    def inline_branch(self, node: onnx.NodeProto) -> None:
        """The branch a constant condition takes, its nodes walked here; the If's outputs are the
        branch's outputs (branch names are unique in the model, as ONNX requires)."""
        taken = "then_branch" if bool(np.asarray(self.consts[node.input[0]]).reshape(-1)[0]) else "else_branch"
        branch = next(a.g for a in node.attribute if a.name == taken)
        for t in branch.initializer:
            self.consts[t.name] = _single(numpy_helper.to_array(t))
        self.value_types.update(_value_types(branch))
        self.consumed |= {i for n in branch.node for i in [*n.input, *outer_names(n)]} | {o.name for o in branch.output}
        for inner in branch.node:
            self.node(inner)
        for out, result in zip(node.output, branch.output):
            if not out:
                continue
            if result.name in self.values:
                self.values[out] = self.values[result.name]
            elif result.name in self.consts:
                self.consts[out] = self.consts[result.name]
            else:
                raise self.fail(node, f"{taken} output '{result.name}' is never produced")

    def host_side_inputs(self, node: onnx.NodeProto) -> bool:
        """Whether every computed input is the host's own arithmetic: a float made from integers
        (Cast of ConvInteger's int32 sums, reaching 10^6) or a scalar a host node computed
        (DynamicQuantizeLinear's scale, ~10^-4). onnx.quantize's models rescale with these; in
        16-bit fixed point the sums saturate and the scales round to zero, so the node stays on
        the host in float, and so does what it computes."""
        computed = [i for i in node.input if i and i not in self.consts]
        return bool(computed) and all(i in self.host_side for i in computed)

    def mark_host_side(self, node: onnx.NodeProto, operands: list[SSAValue], results: list[SSAValue]) -> None:
        computed = [v for name, v in zip([n for n in node.input if n], operands) if name not in self.consts]
        whole = not any(isinstance(_elem_of(v), Float32Type) and v not in self.host_side_values for v in computed)
        for name, value in zip([o for o in node.output if o], results):
            scalar = math.prod(value.type.get_shape()) == 1
            if whole or scalar:
                self.host_side.add(name)
                self.host_side_values.add(value)

    def host(self, node: onnx.NodeProto) -> None:
        """The node as it is, for the host CPU: nn.host with the node's opset and attributes."""
        operands, slots = [], []
        for slot, name in enumerate(node.input):
            if name:
                operands.append(self.operand(node, name))
                slots.append(slot)
        captures = outer_names(node)
        operands += [self.operand(node, name) for name in captures]
        try:
            attrs = to_mlir_attrs(node)
        except OnnxTypeError as e:
            raise self.fail(node, str(e)) from None
        outs = list(node.output)
        while outs and not outs[-1]:  # absent optional outputs at the end: not computed
            outs.pop()
        types = self.output_types(node, operands, outs)
        domain = "" if node.domain in DEFAULT_DOMAINS else node.domain
        op = self.emit(nn.HostOp(node.op_type, self.opset_of(domain), attrs, operands, types, slots, len(node.input),
                                 domain, captures))
        for i, name in enumerate(outs):
            if name:
                op.results[i].name_hint = identifier(name)[:40]
                self.values[name] = op.results[i]
        self.mark_host_side(node, operands, [op.results[i] for i, name in enumerate(outs) if name])
        if node.name:
            op.attributes["onnx_node"] = nn.StringAttr(node.name)

    def operand(self, node: onnx.NodeProto, name: str) -> SSAValue:
        return self.value(node, name) if name in self.values or name not in self.consts else \
            self.const_value(name, keep_dtype=True)

    def output_types(self, node: onnx.NodeProto, operands: list[SSAValue], outs: list[str]) -> list[TensorType]:
        """From the model's shape inference; else from inferring this node alone with its constant
        inputs known (a Reshape to a folded shape); an output whose shape depends on data is refused."""
        known = [self.value_types.get(o) for o in outs]
        if all(t is not None for t in known):
            return known
        from onnx import helper

        inputs, inits = [], []
        named = dict(zip([*(n for n in node.input if n), *outer_names(node)], operands))  # a capture may be an input too
        for name, value in named.items():
            if name in self.consts:
                inits.append(numpy_helper.from_array(np.asarray(self.consts[name]), name))
            else:
                ty = value.type
                inputs.append(helper.make_tensor_value_info(name, onnx_type_of(numpy_dtype(ty.get_element_type())),
                                                            list(ty.get_shape())))
        graph = helper.make_graph([node], "one", inputs, [helper.make_empty_tensor_value_info(o) for o in node.output if o],
                                  inits)
        model = helper.make_model(graph, opset_imports=list(self.model.opset_import))
        scans = len(node.output) > len(node.input) - 2  # a Loop's outputs: N carried values, then K scan outputs
        if node.op_type == "Loop" and scans and (not node.input[0] or node.input[0] not in self.consts):
            raise self.fail(node, "its scan outputs are as long as a trip count that is computed or absent (it "
                                  "depends on the data); not supported")
        try:
            if node.domain not in DEFAULT_DOMAINS or node.op_type in ("Loop", "Scan"):
                # onnx cannot infer a contrib op, nor a loop's scan outputs: run it once on zeros
                found = _run_for_types(model, node, inputs)
            else:
                found = _value_types(onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True).graph)
        except Exception as e:  # noqa: BLE001
            raise self.fail(node, f"cannot infer the output shape: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
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
        return next((o.version for o in self.model.opset_import if o.domain in DEFAULT_DOMAINS), TARGET_OPSET)

    def opset_of(self, domain: str) -> int:
        if not domain:
            return self.opset
        return next((o.version for o in self.model.opset_import if o.domain == domain), 1)

    def fold(self, node: onnx.NodeProto) -> None:
        feeds = {}
        for name in [*node.input, *outer_names(node)]:
            if not name:
                continue
            if name not in self.consts:
                raise self.fail(node, f"input '{name}' must be constant here")
            feeds[name] = self.consts[name]
        proto: onnx.NodeProto | onnx.ModelProto = node
        if subgraphs(node):  # its sub-graphs read outer names: a graph around it declares them
            graph = helper.make_graph([node], "fold", [helper.make_tensor_value_info(n, onnx_type_of(a.dtype), a.shape)
                                                       for n, a in feeds.items()],
                                      [helper.make_empty_tensor_value_info(o) for o in node.output if o])
            proto = helper.make_model(graph, opset_imports=list(self.model.opset_import))
        try:
            outs = reference_evaluator(proto).run(None, feeds)
        except Exception as e:  # noqa: BLE001
            raise self.fail(node, f"cannot evaluate constant node: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        for name, value in zip(node.output, outs):
            self.consts[name] = _single(np.asarray(value))


FOLDABLE = {"Constant", "ConstantOfShape"}


def _inner_nodes(node: onnx.NodeProto) -> list[onnx.NodeProto]:
    """The nodes of a node's sub-graphs, at any depth."""
    return [m for g in subgraphs(node) for n in g.node for m in [n, *_inner_nodes(n)]]


def import_onnx(path: str | Path, input_shapes: dict[str, list[int]] | None = None) -> ModuleOp:
    model = _load(path)
    return import_model(model, str(path), input_shapes)


def import_model(model: onnx.ModelProto, source: str = "<onnx>",
                 input_shapes: dict[str, list[int]] | None = None) -> ModuleOp:
    prepared, weights, _ = prepare_apart(dequantize(model), source)
    return Importer(prepared, source, input_shapes, weights).run()


def _verifies(op: Operation) -> bool:
    try:
        op.verify()
    except Exception:  # noqa: BLE001 - which op fails is all that is asked
        return False
    return True


def parse_input_shape(spec: str, default_name: str | None = None) -> dict[str, list[int]]:
    """`1,3,224,224`, or per input `name=1,3,224,224[;name2=...]` (as `--input NAME=X.npy` names
    inputs; `name:...` also, and a name may hold ':' as TensorFlow exports' `x:0` do)."""
    out: dict[str, list[int]] = {}
    for part in filter(None, spec.split(";")):
        name, _, dims = part.rpartition("=") if "=" in part else part.rpartition(":")
        try:
            shape = [int(d) for d in dims.replace("x", ",").split(",") if d]
        except ValueError:
            raise OnnxImportError(f"--input-shape '{spec}': dimensions must be integers "
                                  f"(1,3,224,224, or NAME=1,3,224,224;NAME2=... per input)") from None
        if not shape or any(d <= 0 for d in shape):
            raise OnnxImportError(f"--input-shape '{spec}': dimensions must be positive")
        out[name or (default_name or "")] = shape
    return out


def _run_for_types(model: onnx.ModelProto, node: onnx.NodeProto, inputs: list) -> dict[str, TensorType]:
    """The output types of a node onnx cannot infer, from running it on zeros (its constant inputs
    as they are): by onnxruntime, else (absent, or it cannot) by onnx's reference evaluator."""
    feeds = {}
    for info in inputs:
        tt = info.type.tensor_type
        shape = [d.dim_value for d in tt.shape.dim]
        feeds[info.name] = np.zeros(shape, helper.tensor_dtype_to_np_dtype(tt.elem_type))
    model.ir_version = min(model.ir_version, 8)
    outs = None
    if has_onnxruntime():
        try:
            outs = ort_session(model).run(None, feeds)
        except Exception:  # noqa: BLE001 - e.g. an opset onnxruntime does not run yet: the reference evaluator may
            if node.domain not in REFERENCE_DOMAINS:
                raise
    if outs is None:
        outs = reference_evaluator(model).run(None, feeds)
    return {name: TensorType(element_type(onnx_type_of(np.asarray(v).dtype)), list(np.asarray(v).shape))
            for name, v in zip([o for o in node.output if o], outs)}
