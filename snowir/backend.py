"""
snowir as an ONNX backend (`onnx.backend.base.Backend`): the standard way to run a model,
and the way the ONNX backend test suite drives a runtime.

    from snowir.backend import SnowflakeBackend, FloatBackend
    rep = SnowflakeBackend.prepare(model, engine="machine", format="Q8.8")
    (y,) = rep.run([x])            # float32 outputs (the graph's own output types)

  * `FloatBackend`: the imported nn module executed in float by the golden model (nn ops in
    numpy, `nn.host` nodes by onnx's reference evaluator). The frontend's reference.
  * `SnowflakeBackend`: compiled once by `prepare` (nn-prepare, quantize, the whole lowering);
    `run` then executes the device layers on the machine model (`engine="machine"`, the fast
    engine) or the fixed-point golden model (`engine="golden"`), host layers as the host does.
    `rep.report` holds the last machine run's typed `snowir.Report` (cycles, ms, stalls).
    Built on `snowir.compile` (snowir/driver/model_api.py).

Outputs come back in the element types the graph declares (a double model computes in fp32
and returns doubles). Inputs may be a list in graph-input order, a dict by name, or one array.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from snowir.dialects import nn
from snowir.driver.model_api import compile
from snowir.errors import SnowError
from snowir.frontend.onnx_host import numpy_dtype
from snowir.frontend.onnx_import import import_model
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


class SnowirRep(BackendRep):
    """A model compiled once; `run` as often as wanted."""

    def __init__(self, model: onnx.ModelProto, module, engine: str, compiled=None):
        self.module = module
        self.engine = engine
        self.compiled = compiled
        self.golden = Golden(module)
        self.input_names = [i.name for i in _graph_inputs(model)]
        self.input_types = [a.type for a in self.golden.main.body.block.args]
        self.output_dtypes = _output_dtypes(model)
        self.report = None
        """The last machine run's `snowir.Report` (typed; `.to_json()` is snow-run's JSON)."""
        self.progress: Callable[[str], None] | None = None
        """verbose=True: each layer as the machine reaches it, with the share done and time left."""

    def _inputs(self, inputs: Any) -> list[np.ndarray]:
        if isinstance(inputs, dict):
            missing = [n for n in self.input_names if n not in inputs]
            if missing:
                raise SnowError(f"run: no value for input '{missing[0]}'")
            inputs = [inputs[n] for n in self.input_names]
        elif isinstance(inputs, np.ndarray):
            inputs = [inputs]
        inputs = list(inputs)
        if len(inputs) != len(self.input_types):
            raise SnowError(f"run: the model takes {len(self.input_types)} inputs, got {len(inputs)}")
        out = []
        for name, ty, x in zip(self.input_names, self.input_types, inputs):
            x = np.asarray(x)
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
        xs = self._inputs(inputs)
        if self.engine == "machine":
            result = self.compiled.run(xs, engine="fast", progress=self.progress)
            self.report = result.report
            return self._outputs(result.outputs)
        return self._outputs(self.golden.run(*xs))


class FloatBackend(Backend):
    """The imported model in float: nn ops in numpy, host nodes by onnx's reference evaluator."""

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> SnowirRep:
        super().prepare(model, device, **kwargs)
        return SnowirRep(model, import_model(model, "<model>"), "float")

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
                hw: SnowflakeConfig | None = None, verbose: bool = False, **kwargs: Any) -> SnowirRep:
        """`verbose`: lowering and each layer's progress on stderr."""
        Backend.prepare(model, device, **kwargs)
        if engine not in ENGINES:
            raise SnowError(f"prepare: engine '{engine}' is not one of {', '.join(ENGINES)}")
        say = _say if verbose else None
        compiled = compile(model, hw=hw, format=format, progress=say)
        rep = SnowirRep(model, compiled.module, engine, compiled)
        rep.progress = say
        return rep


def _say(message: str) -> None:
    print(f"snowir: {message}", file=sys.stderr, flush=True)


prepare = SnowflakeBackend.prepare
run_model = SnowflakeBackend.run_model
supports_device = SnowflakeBackend.supports_device
