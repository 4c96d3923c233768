"""
snowir as an ONNX backend (`onnx.backend.base.Backend`): the standard way to run a model,
and the way the ONNX backend test suite drives a runtime.

    from snowir.backend import SnowflakeBackend, FloatBackend
    rep = SnowflakeBackend.prepare(model, engine="machine", format="Q8.8")
    (y,) = rep.run([x])            # float32 outputs (the graph's own output types)
    rep = SnowflakeBackend.prepare(model, format="auto", calibration=images)   # N x the input, or a .npy

  * `FloatBackend`: the imported nn module executed in float by the golden model (nn ops in
    numpy, `nn.host` nodes by onnx's reference evaluator). The frontend's reference.
  * `SnowflakeBackend`: compiled once by `prepare` (nn-prepare, quantize, the whole lowering);
    `run` then executes the device layers on the machine model (`engine="machine"`, the fast
    engine) or the fixed-point golden model (`engine="golden"`), host layers as the host does.
    `rep.report` holds the last run's typed `snowir.Report` (cycles, ms, stalls; saturated values
    per layer), and a run whose values saturate warns (`SaturationWarning`), as snow-run does.
    Built on `snowir.compile` (snowir/driver/model_api.py).

Dynamic input dimensions (`[None, 3, None, None]`, as exporters write them): `input_shapes=`
fixes them at `prepare` (a shape for a one-input model, a list in graph-input order, or a dict
by name); left dynamic, the model compiles for each new input shape at its first `run`, and
the compiled model is kept for that shape. A dynamic batch dimension runs N images, as
`snow-run --input` with N images does.

Outputs come back in the element types the graph declares (a double model computes in fp32
and returns doubles). Inputs may be a list in graph-input order, a dict by name, or one array.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from snowir.dialects import nn
from snowir.driver.model_api import (Compiled, SyntheticCalibrationWarning, check_calibration, compile,
                                     dynamic_inputs)
from snowir.driver.saturation import saturation_warning
from snowir.errors import SnowError
from snowir.frontend.onnx_host import numpy_dtype
from snowir.frontend.onnx_import import import_model
from snowir.frontend.onnx_prepare import LegacyInitializersWarning, check_model
from snowir.golden import Golden
from snowir.hw import SnowflakeConfig

ENGINES = ("machine", "golden")


def _graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def _output_dtypes(model: onnx.ModelProto) -> list[np.dtype | None]:
    out = []
    for o in model.graph.output:
        tt = o.type.tensor_type if o.type.HasField("tensor_type") else None
        out.append(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type) if tt is not None and tt.elem_type else None)
    return out


class SaturationWarning(UserWarning):
    """A run's fixed-point values saturated: more than 0.1% of a layer's (or an input's) results
    clipped, which silently wrecks a model; the message names the worst and what to try."""


class SnowirRep(BackendRep):
    """A model compiled once (or once per input shape, when its input dims are dynamic); `run` as
    often as wanted."""

    def __init__(self, model: onnx.ModelProto, module, engine: str, compiled=None,
                 build: Callable[[dict[str, list[int]]], tuple[Any, Any]] | None = None):
        self.engine = engine
        self.input_names = [i.name for i in _graph_inputs(model)]
        self.output_dtypes = _output_dtypes(model)
        self.build = build
        """Dynamic dims: the model for a {name: shape}, as (module, `Compiled` or None)."""
        self.shapes: dict[tuple[tuple[int, ...], ...], tuple[Any, Any]] = {}
        """Dynamic dims: (module, compiled) per input shapes seen, each compiled at its first run."""
        self.module = self.compiled = self.golden = None
        self.input_types: list = []
        if module is not None:
            self._use(module, compiled)
        self.report = None
        """The last run's `snowir.Report` (typed; `.to_json()` is snow-run's JSON), on either engine
        (the golden model's has no cycles); None for FloatBackend."""
        self.progress: Callable[[str], None] | None = None
        """verbose=True: each layer as the machine reaches it, with the share done and time left."""

    def _use(self, module, compiled) -> None:
        self.module, self.compiled = module, compiled
        self.golden = Golden(module)
        self.input_types = [a.type for a in self.golden.main.body.block.args]

    def _for_shapes(self, xs: list[np.ndarray]) -> None:
        """Dynamic dims: the model compiled for these inputs' shapes (cached)."""
        key = tuple(tuple(np.shape(x)) for x in xs)
        if key not in self.shapes:
            self.shapes[key] = self.build({n: list(k) for n, k in zip(self.input_names, key)})
        self._use(*self.shapes[key])

    def _inputs(self, inputs: Any) -> list[np.ndarray]:
        if isinstance(inputs, dict):
            missing = [n for n in self.input_names if n not in inputs]
            if missing:
                raise SnowError(f"run: no value for input '{missing[0]}'")
            inputs = [inputs[n] for n in self.input_names]
        elif isinstance(inputs, np.ndarray):
            inputs = [inputs]
        inputs = [np.asarray(x) for x in inputs]
        if len(inputs) != len(self.input_names):
            raise SnowError(f"run: the model takes {len(self.input_names)} inputs, got {len(inputs)}")
        if self.build is not None:
            self._for_shapes(inputs)
        out = []
        for name, ty, x in zip(self.input_names, self.input_types, inputs):
            if list(x.shape) != list(ty.get_shape()):
                raise SnowError(f"run: input '{name}' has shape {list(x.shape)}, the model expects {list(ty.get_shape())}")
            elem = ty.get_element_type()
            # a fixed-point argument takes real numbers (the golden model quantises them)
            out.append(x.astype(np.float32 if isinstance(elem, nn.FixedType) else numpy_dtype(elem), copy=False))
        return out

    def _outputs(self, outputs: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
        return tuple(np.asarray(y).astype(dt, copy=False) if dt is not None else np.asarray(y)
                     for y, dt in zip(outputs, self.output_dtypes))

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:  # noqa: ARG002
        """The outputs; a compiled model's run also sets `report` and warns, as snow-run does, when
        fixed point saturates (a SaturationWarning naming the worst layers and what to try)."""
        xs = self._inputs(inputs)
        if self.compiled is None:  # FloatBackend: the imported model in float, nothing to report
            return self._outputs(self.golden.run(*xs))
        result = self.compiled.run(xs, engine="fast" if self.engine == "machine" else "golden",
                                   progress=self.progress)
        self.report = result.report
        warning = saturation_warning(result.report.to_json(), result.outputs, api=True)
        if warning:
            warnings.warn(warning.removeprefix("warning: "), SaturationWarning, stacklevel=2)
        return self._outputs(result.outputs)


def _no_other_options(kwargs: dict[str, Any], known: str) -> None:
    """An option `prepare` does not know is refused, not ignored (a misspelt `calibraton=`)."""
    if kwargs:
        raise SnowError(f"prepare: unknown option '{next(iter(kwargs))}' (this backend takes: {known})")


def _shapes_by_name(model: onnx.ModelProto, input_shapes: Any) -> dict[str, list[int]] | None:
    """`input_shapes=` as {name: shape}: a dict by name, a list of shapes in graph-input order, or
    one shape (a one-input model)."""
    if input_shapes is None:
        return None
    names = [i.name for i in _graph_inputs(model)]
    if isinstance(input_shapes, dict):
        unknown = [n for n in input_shapes if n not in names]
        if unknown:
            raise SnowError(f"prepare: input_shapes names '{unknown[0]}', not an input of the model ({', '.join(names)})")
        given = dict(input_shapes)
    else:
        shapes = list(input_shapes)
        if shapes and all(isinstance(d, int | np.integer) for d in shapes):
            shapes = [shapes]
        if len(shapes) != len(names):
            raise SnowError(f"prepare: input_shapes gives {len(shapes)} shapes, the model has {len(names)} inputs")
        given = dict(zip(names, shapes))
    out = {}
    for name, shape in given.items():
        try:
            dims = [int(d) for d in shape]
        except (TypeError, ValueError):
            raise SnowError(f"prepare: input_shapes['{name}'] = {shape!r} is not a list of integers") from None
        if not dims or any(d <= 0 for d in dims):
            raise SnowError(f"prepare: input_shapes['{name}'] = {dims}: dimensions must be positive")
        out[name] = dims
    return out


class FloatBackend(Backend):
    """The imported model in float: nn ops in numpy, host nodes by onnx's reference evaluator."""

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> SnowirRep:
        input_shapes = _shapes_by_name(model, kwargs.pop("input_shapes", None))
        _no_other_options(kwargs, "input_shapes")
        _checked(model, device)
        if _still_dynamic(model, input_shapes):
            return SnowirRep(model, None, "float", build=lambda shapes: (import_model(model, "<model>", shapes), None))
        return SnowirRep(model, import_model(model, "<model>", input_shapes), "float")

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device == "CPU"

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)


class SnowflakeBackend(FloatBackend):
    """Compiled for Snowflake once (`format`, `hw`); run on the machine model or the
    fixed-point golden model (`engine`)."""

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", engine: str = "machine", format: str = "Q8.8",
                hw: SnowflakeConfig | None = None, verbose: bool = False, calibration: np.ndarray | str | None = None,
                input_shapes: Any = None, **kwargs: Any) -> SnowirRep:
        """`verbose`: lowering and each layer's progress on stderr. `calibration` (format="auto"):
        calibration inputs, an array (N x the input) or a `.npy` path. `input_shapes`: shapes for
        dynamic input dims; dims left dynamic compile per input shape at the first run."""
        _no_other_options(kwargs, "engine, format, hw, verbose, calibration, input_shapes")
        _checked(model, device)
        if engine not in ENGINES:
            raise SnowError(f"prepare: engine '{engine}' is not one of {', '.join(ENGINES)}")
        say = _say if verbose else None
        shapes = _shapes_by_name(model, input_shapes)
        check_calibration(format, calibration, "prepare: ")

        def build(by_name: dict[str, list[int]]) -> Compiled:
            spec = ";".join(f"{name}:{','.join(map(str, dims))}" for name, dims in by_name.items())
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SyntheticCalibrationWarning)  # said once, above
                return compile(model, hw=hw, format=format, progress=say, calibration=calibration,
                               input_shape=spec or None)

        def per_shape(given: dict[str, list[int]]) -> tuple[Any, Compiled]:
            compiled = build({**(shapes or {}), **given})
            return compiled.module, compiled

        if _still_dynamic(model, shapes):
            rep = SnowirRep(model, None, engine, build=per_shape)
        else:
            compiled = build(shapes or {})
            rep = SnowirRep(model, compiled.module, engine, compiled)
        rep.progress = say
        return rep


def _checked(model: onnx.ModelProto, device: str) -> None:  # noqa: ARG001
    """`Backend.prepare`'s check (onnx's checker), accepting what onnxruntime accepts: the checker
    refuses an IR version 3 model whose initializers are not graph inputs, which onnxruntime runs
    (the importer reads it as IR version 4 and says so once, a LegacyInitializersWarning)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LegacyInitializersWarning)  # the import says it
        check_model(model, "<model>")


def _still_dynamic(model: onnx.ModelProto, shapes: dict[str, list[int]] | None) -> bool:
    """Some input keeps a dynamic dimension after `input_shapes`."""
    return any(name not in (shapes or {}) for name in dynamic_inputs(model))


def _say(message: str) -> None:
    print(f"snowir: {message}", file=sys.stderr, flush=True)


prepare = SnowflakeBackend.prepare
run_model = SnowflakeBackend.run_model
supports_device = SnowflakeBackend.supports_device
