"""
ONNX nodes kept as they are: what `nn.host` needs to carry an ONNX node through the IR and
to run it on the host CPU.

  * element types: ONNX tensor types <-> MLIR element types <-> numpy dtypes (f32, f64, f16,
    bf16, signless iN for ONNX's signed ints, ui8..ui64, i1 for bool);
  * node attributes <-> an MLIR dictionary (ints -> i64, floats -> f32, strings, int / float
    arrays -> `array<i64: ...>` / `array<f32: ...>`, string lists, tensors as `dense<...>`,
    sub-graphs (If's branches, Loop's and Scan's body) as `#nn.onnx_graph<"base64">`, their
    serialised GraphProto: run as it is, never rewritten, so carried as it is);
  * evaluation: a one-node ONNX model at the node's own opset, run by onnxruntime (one session
    per node and input signature, built once), or by onnx's reference evaluator (the ONNX
    specification's own executable semantics) where onnxruntime is absent or cannot run it.

A sub-graph may read values of the graph around it (ONNX's outer scope) by name: `outer_names`
finds them, the nn.host node takes them as its last operands (`captures`, by those names), and
the one-node model declares them as graph inputs of the same names, so the sub-graph reads them
unchanged. Lists of sub-graphs, type protos and sparse tensors as attributes are refused.
"""

from __future__ import annotations

import base64
from functools import cache

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from xdsl.dialects.builtin import (
    ArrayAttr,
    BFloat16Type,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    Signedness,
    StringAttr,
    TensorType,
    f32,
    i64,
)
from xdsl.ir import Attribute

from snowir import recurrence
from snowir.dialects import nn
from snowir.errors import SnowError

_SIGNED = {TensorProto.INT8: 8, TensorProto.INT16: 16, TensorProto.INT32: 32, TensorProto.INT64: 64}
_UNSIGNED = {TensorProto.UINT8: 8, TensorProto.UINT16: 16, TensorProto.UINT32: 32, TensorProto.UINT64: 64}


class OnnxTypeError(SnowError):
    pass


def element_type(onnx_type: int) -> Attribute:
    """The MLIR element type of an ONNX tensor element type."""
    if onnx_type == TensorProto.FLOAT:
        return Float32Type()
    if onnx_type == TensorProto.DOUBLE:
        return Float64Type()
    if onnx_type == TensorProto.FLOAT16:
        return Float16Type()
    if onnx_type == TensorProto.BFLOAT16:
        return BFloat16Type()
    if onnx_type == TensorProto.BOOL:
        return IntegerType(1)
    if onnx_type in _SIGNED:
        return IntegerType(_SIGNED[onnx_type])
    if onnx_type in _UNSIGNED:
        return IntegerType(_UNSIGNED[onnx_type], Signedness.UNSIGNED)
    raise OnnxTypeError(f"element type {TensorProto.DataType.Name(onnx_type)} is not supported")


def numpy_dtype(elem: Attribute) -> np.dtype:
    """The numpy dtype holding values of an MLIR element type (fixed point: int16 words)."""
    if isinstance(elem, nn.FixedType):
        return np.dtype(np.int16)
    if isinstance(elem, Float32Type):
        return np.dtype(np.float32)
    if isinstance(elem, Float64Type):
        return np.dtype(np.float64)
    if isinstance(elem, Float16Type):
        return np.dtype(np.float16)
    if isinstance(elem, BFloat16Type):
        return np.dtype(np.float32)  # numpy has no bfloat16: values are held widened
    if isinstance(elem, IntegerType):
        width = elem.width.data
        if width == 1:
            return np.dtype(np.bool_)
        unsigned = elem.signedness.data == Signedness.UNSIGNED
        return np.dtype(f"{'u' if unsigned else ''}int{width}")
    raise OnnxTypeError(f"no array type for element type {elem}")


def onnx_type_of(dtype: np.dtype) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


# ---------------------------------------------------------------- attributes
def to_mlir_attrs(node: onnx.NodeProto) -> DictionaryAttr:
    out: dict[str, Attribute] = {}
    for a in node.attribute:
        out[a.name] = _to_mlir(a, node)
    return DictionaryAttr(out)


def _to_mlir(a: onnx.AttributeProto, node: onnx.NodeProto) -> Attribute:
    A = onnx.AttributeProto
    if a.type == A.INT:
        return IntegerAttr(int(a.i), i64)
    if a.type == A.FLOAT:
        return FloatAttr(float(a.f), f32)
    if a.type == A.STRING:
        return StringAttr(a.s.decode("utf-8", "replace"))
    if a.type == A.INTS:
        return DenseArrayBase.from_list(i64, [int(v) for v in a.ints])
    if a.type == A.FLOATS:
        return DenseArrayBase.from_list(f32, [float(v) for v in a.floats])
    if a.type == A.STRINGS:
        return ArrayAttr([StringAttr(s.decode("utf-8", "replace")) for s in a.strings])
    if a.type == A.TENSOR:
        arr = numpy_helper.to_array(a.t)
        ty = TensorType(element_type(a.t.data_type), list(arr.shape))
        values = arr.reshape(-1).tolist()
        return DenseIntOrFPElementsAttr.from_list(ty, [int(v) for v in values] if arr.dtype.kind in "iub" else values)
    if a.type == A.GRAPH:
        return nn.OnnxGraphAttr(base64.b64encode(a.g.SerializeToString()).decode("ascii"))
    kind = A.AttributeType.Name(a.type)
    raise OnnxTypeError(f"attribute '{a.name}' of kind {kind} (lists of sub-graphs, type or sparse attributes) "
                        f"cannot be carried by nn.host")


def to_onnx_attrs(attrs: DictionaryAttr) -> list[onnx.AttributeProto]:
    A = onnx.AttributeProto
    out = []
    for key, value in attrs.data.items():
        if isinstance(value, IntegerAttr):
            out.append(helper.make_attribute(key, int(value.value.data), attr_type=A.INT))
        elif isinstance(value, FloatAttr):
            out.append(helper.make_attribute(key, float(value.value.data), attr_type=A.FLOAT))
        elif isinstance(value, StringAttr):
            out.append(helper.make_attribute(key, value.data, attr_type=A.STRING))
        elif isinstance(value, DenseArrayBase):
            values = list(value.get_values())
            is_int = isinstance(value.elt_type, IntegerType)
            out.append(helper.make_attribute(key, [int(v) for v in values] if is_int else [float(v) for v in values],
                                             attr_type=A.INTS if is_int else A.FLOATS))
        elif isinstance(value, ArrayAttr):
            out.append(helper.make_attribute(key, [s.data for s in value.data], attr_type=A.STRINGS))
        elif isinstance(value, nn.OnnxGraphAttr):
            graph = onnx.GraphProto()
            graph.ParseFromString(base64.b64decode(value.data.data))
            out.append(helper.make_attribute(key, graph, attr_type=A.GRAPH))
        elif isinstance(value, DenseIntOrFPElementsAttr):
            ty = value.get_type()
            dtype = numpy_dtype(ty.get_element_type())
            arr = np.asarray(value.get_values(), dtype).reshape(list(ty.get_shape()))
            out.append(helper.make_attribute(key, numpy_helper.from_array(arr), attr_type=A.TENSOR))
        else:
            raise OnnxTypeError(f"nn.host attribute '{key}' = {value} has no ONNX spelling")
    return out


def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    A = onnx.AttributeProto
    return [a.g for a in node.attribute if a.type == A.GRAPH] + [g for a in node.attribute if a.type == A.GRAPHS
                                                                  for g in a.graphs]


def outer_names(node: onnx.NodeProto) -> list[str]:
    """The values of the enclosing graph that the node's sub-graphs read (at any depth), in
    first-use order: ONNX lets a sub-graph name any value in scope where the node sits."""
    found: list[str] = []
    for g in subgraphs(node):
        found += [name for name in _free(g) if name not in found]
    return found


def _free(graph: onnx.GraphProto) -> list[str]:
    """The names a graph (its sub-graphs included) reads but does not define."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    free: list[str] = []
    for n in graph.node:
        for name in [*n.input, *(name for g in subgraphs(n) for name in _free(g))]:
            if name and name not in defined and name not in free:
                free.append(name)
        defined |= set(n.output)
    free += [o.name for o in graph.output if o.name not in defined and o.name not in free]
    return free


def _nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    return [m for n in graph.node for m in [n, *(k for g in subgraphs(n) for k in _nodes(g))]]


def all_names(graph: onnx.GraphProto) -> set[str]:
    """Every value name a graph and its sub-graphs define or read."""
    names = {i.name for i in graph.input} | {o.name for o in graph.output} | {t.name for t in graph.initializer}
    for n in graph.node:
        names |= {*n.input, *n.output}
        for g in subgraphs(n):
            names |= all_names(g)
    return names


# ---------------------------------------------------------------- evaluation
TARGET_OPSET = 13
DEFAULT_DOMAINS = ("", "ai.onnx")


class NodeRunner:
    """One ONNX node as a callable on numpy arrays, for any operator domain: through onnxruntime
    (one InferenceSession per input signature, built at the first call and kept), else through
    onnx's reference evaluator (ONNX's own operators as ONNX defines them) where onnxruntime is
    absent or cannot run the node (an operator at an opset it no longer implements). `cached`
    shares runners between equal nodes and between golden models of one module, so a model run
    N times builds its sessions once."""

    def __init__(self, op_type: str, domain: str, opset: int, attrs: DictionaryAttr,
                 slots: Sequence[int], n_inputs: int, n_outputs: int, captures: Sequence[str] = ()):
        attributes = to_onnx_attrs(attrs)
        taken = set(captures)
        for a in attributes:
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else []):
                taken |= all_names(g)
        prefix = ""
        while taken & {*(f"{prefix}in{i}" for i in range(len(slots))), *(f"{prefix}out{i}" for i in range(n_outputs))}:
            prefix += "_"  # the node's own names must not be names its sub-graphs use
        names = [""] * n_inputs
        for i, slot in enumerate(slots):
            names[slot] = f"{prefix}in{i}"
        self.outs = [f"{prefix}out{i}" for i in range(n_outputs)]
        self.node = helper.make_node(op_type, names, self.outs, domain=domain or None)
        self.node.attribute.extend(attributes)
        self.inputs = [f"{prefix}in{i}" for i in range(len(slots))] + list(captures)
        self.domain = domain or ""
        self.opsets = [helper.make_opsetid(self.domain, opset)]
        if self.domain not in DEFAULT_DOMAINS:
            # contrib ops sit on top of an ONNX opset too
            self.opsets.append(helper.make_opsetid("", TARGET_OPSET))
        inner = {n.domain for a in attributes if a.type == onnx.AttributeProto.GRAPH for n in _nodes(a.g)}
        # a sub-graph's contrib ops: their domains have one version each in onnxruntime
        self.opsets += [helper.make_opsetid(d, 1) for d in sorted(inner - {*DEFAULT_DOMAINS, self.domain})]
        self.sessions: dict[tuple, Any] = {}
        """Input signature -> onnxruntime session, or None where the reference evaluator runs it."""
        self.evaluator = None

    _cache: dict[tuple, "NodeRunner"] = {}

    @classmethod
    def cached(cls, op_type: str, domain: str, opset: int, attrs: DictionaryAttr,
               slots: Sequence[int], n_inputs: int, n_outputs: int, captures: Sequence[str] = ()) -> "NodeRunner":
        if domain == recurrence.DOMAIN:  # snowir's own kinds (what a pass left of an ONNX node): numpy kernels
            plain = {k: v.data if isinstance(v, StringAttr) else v.value.data for k, v in attrs.data.items()
                     if isinstance(v, StringAttr | IntegerAttr)}
            return recurrence.SnowirKernel(op_type, plain, slots, n_outputs)  # type: ignore[return-value]
        key = (op_type, domain, opset, str(attrs), tuple(slots), n_inputs, n_outputs, tuple(captures))
        runner = cls._cache.get(key)
        if runner is None:
            if len(cls._cache) > 1000:  # a long-lived process compiling many models: bounded
                cls._cache.clear()
            runner = cls._cache[key] = cls(op_type, domain, opset, attrs, slots, n_inputs, n_outputs, captures)
        return runner

    def _model(self, arrays: Sequence[np.ndarray] | None) -> onnx.ModelProto:
        ins = [helper.make_empty_tensor_value_info(n) for n in self.inputs] if arrays is None else \
            [helper.make_tensor_value_info(n, onnx_type_of(a.dtype), list(a.shape)) for n, a in zip(self.inputs, arrays)]
        graph = helper.make_graph([self.node], self.node.op_type, ins,
                                  [helper.make_empty_tensor_value_info(n) for n in self.outs])
        model = helper.make_model(graph, opset_imports=self.opsets)
        model.ir_version = min(model.ir_version, 8)  # what the pinned onnxruntime reads
        return model

    def _reference(self) -> Any:
        if self.evaluator is None:
            self.evaluator = reference_evaluator(self._model(None))
        return self.evaluator

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        feeds = dict(zip(self.inputs, arrays))
        key = tuple((a.dtype.str, a.shape) for a in arrays)
        if key not in self.sessions:
            self.sessions[key] = None
            if has_onnxruntime():
                try:
                    self.sessions[key] = ort_session(self._model(arrays))
                except Exception:  # noqa: BLE001 - onnxruntime cannot build it: the reference evaluator may
                    if self.domain not in REFERENCE_DOMAINS:
                        raise
        session = self.sessions[key]
        if session is not None:
            try:
                return [np.asarray(v) for v in session.run(None, feeds)]
            except Exception:  # noqa: BLE001 - e.g. a kernel missing for these types
                if self.domain not in REFERENCE_DOMAINS:
                    raise
                self.sessions[key] = None
        return [np.asarray(v) for v in self._reference().run(None, feeds)]


def reference_evaluator(proto: onnx.ModelProto | onnx.NodeProto) -> Any:
    """onnx's reference evaluator, its Loop stacking scan outputs as ONNX does (`_stacking_loop`)."""
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(proto, new_ops=[_stacking_loop()])


@cache
def _stacking_loop() -> type:
    from onnx.reference.ops.op_loop import Loop as _Loop

    class Loop(_Loop):
        """Loop whose scan outputs gain a leading axis, one entry per iteration, as onnx's shape
        inference and onnxruntime have them: onnx 1.23's reference Loop joins them with np.vstack,
        which turns three [1, 16, 8, 8] iterations into [3, 16, 8, 8], not [3, 1, 16, 8, 8]."""

        op_domain = ""

        def __init__(self, onnx_node: onnx.NodeProto, run_params: dict):
            super().__init__(onnx_node, run_params)
            self.scanned: list[list[tuple[int, ...]]] = []
            body = self._run_body

            def counted(*args: Any, **kwargs: Any) -> Any:
                outs = body(*args, **kwargs)
                self.scanned.append([np.shape(o) for o in outs[len(outs) - self.K:]])
                return outs

            self._run_body = counted

        def _run(self, *args: Any, **kwargs: Any) -> tuple:
            self.scanned = []
            results = list(super()._run(*args, **kwargs))
            for k in range(self.K if self.scanned else 0):
                results[self.N + k] = np.asarray(results[self.N + k]).reshape(
                    [len(self.scanned), *self.scanned[0][k]])
            return tuple(results)

    return Loop


REFERENCE_DOMAINS = (*DEFAULT_DOMAINS, "ai.onnx.ml")
"""Domains onnx's reference evaluator implements: the fallback where onnxruntime is absent."""


def has_onnxruntime() -> bool:
    """Whether onnxruntime can be imported (the host's first choice for every node)."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


@cache
def ort_operators() -> frozenset[tuple[str, str]]:
    """(domain, operator) of every operator the installed onnxruntime has a schema for: its contrib
    domains (com.microsoft, com.microsoft.nchwc, ...) and ai.onnx.ml; empty without onnxruntime."""
    if not has_onnxruntime():
        return frozenset()
    from onnxruntime.capi import _pybind_state

    return frozenset((s.domain, s.name) for s in _pybind_state.get_all_operator_schema())


def ort_session(model: onnx.ModelProto):
    """An onnxruntime session on the CPU, quiet."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
