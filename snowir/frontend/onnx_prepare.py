"""
Preparing an ONNX model for import and for onnxruntime: onnx's checker (accepting what
onnxruntime accepts), the opset upgrade and shape inference, with the large weights kept out of
all three (they only read types and shapes).
"""

from __future__ import annotations

import math
import warnings

import onnx

from snowir.errors import SnowError
from snowir.frontend.onnx_host import TARGET_OPSET


class OnnxImportError(SnowError):
    pass


def prepare(model: onnx.ModelProto, source: str) -> onnx.ModelProto:
    """checker, opset upgrade, shape inference: the whole model (what onnxruntime is given), as a
    new ModelProto (shape inference always returns one; the caller's model is not changed)."""
    light, weights, added = prepare_apart(model, source)
    if not weights:
        return light
    graph = light.graph
    kept = [i for i in graph.input if i.name not in added]
    del graph.input[:]
    graph.input.extend(kept)
    graph.initializer.extend(weights.values())
    return light


def prepare_apart(model: onnx.ModelProto, source: str) -> tuple[onnx.ModelProto, dict[str, onnx.TensorProto], set[str]]:
    """`prepare` with the weights kept out of the model: (the prepared model, in which each weight
    is a graph input of its type and shape; the weights by name; the inputs that are weights only)."""
    unlisted = unlisted_initializers(model)  # before the weights become inputs
    model, weights, added = _without_weights(model)
    model = check_model(model, source, copied=bool(weights), unlisted=unlisted)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), TARGET_OPSET)
    if opset < TARGET_OPSET:
        try:
            converted = onnx.version_converter.convert_version(model, TARGET_OPSET)
            # an adapter that changes the model's inputs or outputs (Scan 8 -> 9 drops the batch
            # axis from them) makes another model: the old opset is kept, as where one fails
            if _signature(converted) == _signature(model):
                model = converted
        except Exception:  # noqa: BLE001 - keep the old opset; handlers read old attributes too
            pass
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception as e:  # noqa: BLE001
        raise OnnxImportError(f"{source}: shape inference failed: {str(e).splitlines()[0]}") from None
    return model, weights, added


class LegacyInitializersWarning(UserWarning):
    """An IR version 3 model whose initializers are not graph inputs, read as onnxruntime reads it."""


def unlisted_initializers(model: onnx.ModelProto) -> list[str]:
    """An IR version < 4 model's initializers that are not graph inputs: the IR then required
    every initializer to be one, old exporters (Caffe2, early PyTorch) did not list them all, and
    onnxruntime runs such models (IR 4 dropped the rule)."""
    if model.ir_version >= 4:
        return []
    inputs = {i.name for i in model.graph.input}
    return [t.name for t in model.graph.initializer if t.name not in inputs]


def check_model(model: onnx.ModelProto, source: str, copied: bool = False,
                unlisted: list[str] | None = None) -> onnx.ModelProto:
    """onnx's checker, accepting what onnxruntime accepts: an IR version 3 model whose
    initializers are not graph inputs is read as IR version 4 (a copy, unless `copied`: the model
    is one already), with a one-line LegacyInitializersWarning naming them (`unlisted`: as the
    original model had them, when `model` is its copy with the weights as inputs). Returns the
    model checked."""
    unlisted = unlisted_initializers(model) if unlisted is None else unlisted
    if unlisted:
        if not copied:
            model = _light_copy(model)
        model.ir_version = 4
        warnings.warn(f"{source}: IR version 3 model whose initializers are not graph inputs ('{unlisted[0]}'"
                      f"{f' and {len(unlisted) - 1} more' if len(unlisted) > 1 else ''}): read as IR version 4, "
                      "as onnxruntime does", LegacyInitializersWarning, stacklevel=3)
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        raise OnnxImportError(f"{source}: invalid ONNX model: {str(e).splitlines()[0]}") from None
    return model


def _light_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """A new ModelProto with the same fields (the graph copied field by field)."""
    copy = onnx.ModelProto()
    _copy_fields(model, copy, skip="graph")
    _copy_fields(model.graph, copy.graph, skip="")
    return copy


def _signature(model: onnx.ModelProto) -> list[bytes]:
    return [v.type.SerializeToString() for v in [*model.graph.input, *model.graph.output]]


LIGHT_TENSOR = 10_000
"""Initializers above this many elements are weights: no checker rule, opset adapter or shape
function needs their values (shape operands are small), so the checker, the converter and
shape inference see them as graph inputs of their type and shape. VGG-19: 17 s and 2.5 GB of
copying 548 MB through protobuf -> 0.1 s."""


def _without_weights(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, onnx.TensorProto], set[str]]:
    """A copy of `model` (without copying the weights) whose large initializers are inputs."""
    graph = model.graph
    weights = {t.name: t for t in graph.initializer
               if math.prod(t.dims) > LIGHT_TENSOR and t.data_location != onnx.TensorProto.EXTERNAL}
    if not weights:
        return model, {}, set()
    light = onnx.ModelProto()
    _copy_fields(model, light, skip="graph")
    _copy_fields(graph, light.graph, skip="initializer")
    light.graph.initializer.extend(t for t in graph.initializer if t.name not in weights)
    inputs = {i.name for i in graph.input}
    added = {name for name in weights if name not in inputs}
    for name in sorted(added):
        t = weights[name]
        light.graph.input.append(onnx.helper.make_tensor_value_info(name, t.data_type, list(t.dims)))
    return light, weights, added


def _copy_fields(src, dst, skip: str) -> None:
    for field, value in src.ListFields():
        if field.name == skip:
            continue
        repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
        if repeated:
            getattr(dst, field.name).extend(value)
        elif field.type == field.TYPE_MESSAGE:
            getattr(dst, field.name).CopyFrom(value)
        else:
            setattr(dst, field.name, value)
