"""
The model-level Python API: compile once, run many times, typed reports.

    import snowir
    compiled = snowir.compile("model.onnx", hw=None, pipeline=None, format="Q8.8",
                              calibration=None, input_shape=None)
    result = compiled.run(x, engine="fast", check=True, progress=print)
    result.report.total.ms, result.report.layers[0].stall_cycles, result.report.to_json()

`Report.to_json()` is exactly the JSON report of `snow-run --report` (docs/machine.md, "Report fields"); `Report.from_json`
reads one back. The ONNX backend (snowir/backend.py) is built on this.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import PassFailedException

from snowir.driver.check import check_outputs, check_summary, golden_checked, ort_checked
from snowir.driver.device_run import device_report, run_device
from snowir.driver.timeline import on_timeline
from snowir.driver.model_run import (Inputs, ModelRun, Provenance, file_sha256, golden_report, graph_names, io_names,
                                     layer_filter, layer_rows, load_model, lower, main_of, model_inputs)
from snowir.pass_steps import gc_paused
from snowir.errors import SnowError
from snowir.frontend.onnx_import import import_model, parse_input_shape
from snowir.golden import Golden
from snowir.hw import SnowflakeConfig
from snowir.machine.run import DEFAULT_MAX_INSTRUCTIONS
from snowir.machine.trace import write_trace

Progress = Callable[[str], None]
ENGINES = ("fast", "reference", "golden")


@dataclass(frozen=True, kw_only=True)
class BoundFields:
    """The bound on the machine (snowir/driver/bound.py) of a layer, or of the device layers
    summed: compulsory bytes (weights, inputs, outputs once), compute and traffic time, the
    larger, its share of `ms` and the resource that binds (for a total: binding most layers).
    None where no device time was measured (host layers, the golden model, older reports)."""

    compulsory_bytes: int | None = None
    bound_compute_ms: float | None = None
    bound_bus_ms: float | None = None
    bound_ms: float | None = None
    bound_share: float | None = None
    bound_by: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The fields as the report prints them: the bound fields after the row's own."""
        data = dataclasses.asdict(self)
        return data | {key: data.pop(key) for key in BOUND_KEYS}


BOUND_KEYS = tuple(f.name for f in dataclasses.fields(BoundFields))


@dataclass(frozen=True)
class LayerReport(BoundFields):
    name: str
    op: str
    where: str
    cycles: int
    ms: float
    host_ms: float | None
    macs: int
    lane_macs: int
    mac_utilization: float
    dram_bytes: int
    gbps: float
    stall_cycles: dict[str, int]
    mode: str | None
    loop_order: str | None
    load_imbalance_pct: float | None
    format: str | None
    # only where a max pool ran in its conv's program (snowir/plan/fused_pool.py): the conv's row
    # names the pool it `computes`, the pool's row (0 cycles) the conv it is `computed_by`
    computes: str | None = None
    computed_by: str | None = None
    # a host layer's `host_reason` (partition-host and the graph passes that leave it there say why
    # it is not on the device)
    host_reason: str | None = None
    # values of the layer's fixed-point results that saturation changed (write-back clipped to
    # int16, host result or format conversion out of range), and their share of the results
    saturated: int = 0
    saturated_share: float = 0.0
    # on the end-to-end timeline (docs/machine.md "End-to-end time"); None from the golden model
    start_ms: float | None = None
    end_ms: float | None = None
    # a device layer's output, given the machine's own inputs, equals the golden model's (None:
    # not a device layer, or a report written before this field)
    golden_bit_exact: bool | None = None

    def to_json(self) -> dict[str, Any]:
        data = super().to_json()
        for key in ("computes", "computed_by", "host_reason", "golden_bit_exact"):
            if data[key] is None:
                del data[key]
        return data


@dataclass(frozen=True)
class TotalReport(BoundFields):
    cycles: int
    ms: float
    host_ms: float
    macs: int
    lane_macs: int
    mac_utilization: float
    dram_bytes: int
    gbps: float
    static_instructions: int
    dynamic_instructions: int
    stall_cycles: dict[str, int]
    compile_s: float
    simulate_s: float
    # end to end (docs/machine.md "End-to-end time"): `ms` (device) + `host_ms` + `round_trip_ms`,
    # in order on one timeline; None from the golden model (no device time) and older reports
    round_trip_ms: float | None = None
    round_trip_bytes: int | None = None
    end_to_end_ms: float | None = None
    device_share: float | None = None
    # the device layers' bound were they to overlap perfectly (bound.overlap_bound_ms); None in older reports
    overlap_bound_ms: float | None = None


@dataclass(frozen=True)
class RoundTrip:
    """The host converting tensors between its fp32 arrays and the device's words in DRAM."""

    name: str
    """The tensors copied, comma-separated."""
    direction: str
    """to_device (before a segment or layer that reads them) or to_host (before a host layer or
    at the end, for the model's outputs)."""
    bytes: int
    """Of device words (2 per element)."""
    ms: float
    start_ms: float
    end_ms: float


@dataclass(frozen=True)
class OutputCheck:
    """One output against the reference: what is compared is the logits (a Softmax's input) of an
    output a Softmax produces, else the output itself."""

    name: str
    snr_db: float
    max_abs_err: float
    top1_match: bool | None
    """None where top-1 means nothing: the output is not a classifier's ([N, classes])."""
    constant_output: bool = False


@dataclass(frozen=True)
class CheckReport:
    """Every output checked; the summary fields are the worst output's SNR, the largest error,
    top-1 over the classifier outputs (None without one)."""

    reference: str
    max_abs_err: float
    snr_db: float
    golden_bit_exact: bool
    top1_match: bool | None
    constant_output: bool = False
    """An output checked is (nearly: spread under 1% of the reference's) one value throughout
    while the reference's is not: a format too narrow, saturating, typically (docs/machine.md)."""
    worst_output: str | None = None
    outputs: tuple[OutputCheck, ...] = ()
    failed: str | None = None
    """snow-run --check's reason for failing (the report of a failed check is written too)."""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CheckReport:
        return cls(**{**data, "outputs": tuple(OutputCheck(**o) for o in data.get("outputs", ()))})

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self) | {"outputs": [dataclasses.asdict(o) for o in self.outputs]}
        if data["failed"] is None:
            del data["failed"]
        return data


@dataclass(frozen=True)
class InputReport:
    """A model input: its format and the values quantising it saturated."""

    name: str
    format: str | None
    saturated: int
    saturated_share: float


@dataclass(frozen=True)
class Report:
    model: str
    hw: SnowflakeConfig
    total: TotalReport
    layers: tuple[LayerReport, ...]
    check: CheckReport | None = None
    provenance: Provenance | None = None
    inputs: tuple[InputReport, ...] = ()
    round_trips: tuple[RoundTrip, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data = {"model": self.model, "hw": self.hw.to_json(), "total": self.total.to_json(),
                "layers": [layer.to_json() for layer in self.layers],
                "check": self.check.to_json() if self.check else None,
                "inputs": [dataclasses.asdict(i) for i in self.inputs],
                "round_trips": [dataclasses.asdict(t) for t in self.round_trips]}
        if self.provenance is not None:
            data["provenance"] = dataclasses.asdict(self.provenance)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Report:
        try:
            return cls(data["model"], SnowflakeConfig.from_json(data["hw"], "report hw"),
                       TotalReport(**data["total"]), tuple(LayerReport(**layer) for layer in data["layers"]),
                       CheckReport.from_json(data["check"]) if data.get("check") else None,
                       Provenance(**data["provenance"]) if data.get("provenance") else None,
                       tuple(InputReport(**i) for i in data.get("inputs", ())),
                       tuple(RoundTrip(**t) for t in data.get("round_trips") or ()))
        except (KeyError, TypeError) as e:
            raise SnowError(f"not a snowir report: {e}") from None

    def layer(self, name: str) -> LayerReport:
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise KeyError(name)


@dataclass
class Result:
    outputs: list[np.ndarray]
    report: Report
    events: list = field(default_factory=list)
    """Timing events of the recorded layers (`record=True`) and a span per host layer and round
    trip (track `host`), on the end-to-end timeline (in device cycles)."""


@dataclass
class Compiled:
    """A model lowered for one machine: `module` holds every device layer's program image."""

    module: ModuleOp
    hw: SnowflakeConfig
    source: str
    onnx_model: onnx.ModelProto | str | None
    compile_s: float
    pipeline: str = ""
    """The passes applied after import (Provenance.pipeline)."""
    model_sha256: str | None = None
    _images: dict = field(default_factory=dict, repr=False)
    _names: tuple[list[str], list[str]] | None = field(default=None, repr=False)

    def provenance(self, engine: str) -> Provenance:
        return Provenance.of(self.module, self.source, self.model_sha256, self.pipeline, engine)

    @property
    def input_shapes(self) -> list[list[int]]:
        return [list(a.type.get_shape()) for a in main_of(self.module).body.block.args]

    def run(self, x: Inputs = None, engine: str = "fast", check: bool = False,
            progress: Progress | None = None, record: bool = False, trace_layers: str | None = None,
            seed: int = 0, jobs: int = 1, max_instructions: int | None = DEFAULT_MAX_INSTRUCTIONS) -> Result:
        """Run on the machine model (`fast` / `reference` engine) or the fixed-point golden model
        (`golden`); `x` is the input: one array, a list in input order or a dict by input name
        (default: seeded N(0, 1) for every input); `check` compares with the golden model bit for
        bit and every output with onnxruntime fp32 (an ONNX source); `jobs`: device layers
        simulated in that many processes at once (same outputs and report); `max_instructions`:
        a program that executes more stops with a fault naming pc and instruction."""
        if engine not in ENGINES:
            raise SnowError(f"engine '{engine}' is not one of {', '.join(ENGINES)}")
        in_names, out_names = self.names
        xs = model_inputs(x, self.module, in_names, self.source, seed)
        if engine == "golden":
            t0 = time.perf_counter()
            golden = Golden(self.module)
            outputs = golden.run(*xs)
            data = golden_report(self.module, self.source, self.hw, self.compile_s, time.perf_counter() - t0, golden,
                                 in_names)
            events, logits, exact = [], None, True
        else:
            wanted = layer_filter(trace_layers)
            if wanted is not None:  # a pattern that matches nothing would silently trace nothing
                names = [row["name"] for row in layer_rows(self.module) if row["where"] == "device"]
                if not any(wanted(n) for n in names):
                    raise SnowError(f"--trace-layers '{trace_layers}' matches no device layer "
                                    f"(they are {', '.join(names[:6])}{', ...' if len(names) > 6 else ''})")
            try:
                run = run_device(self.module, xs, self.hw, engine, progress, record=record,
                                 record_layer=layer_filter(trace_layers), assembled=self._images, jobs=jobs,
                                 max_instructions=max_instructions)
            except SnowError as e:
                raise SnowError(f"{self.source}: {e}") from None
            data = device_report(run, self.hw, self.source, layer_rows(self.module))
            for row, name in zip(data.get("inputs") or (), in_names):
                row["name"] = name
            data["total"]["compile_s"] += self.compile_s
            outputs, logits = run.outputs, run.logits
            events = on_timeline(run.events, data, self.hw) if run.events else []
            exact = all(layer.bit_exact for layer in run.layers)
        if check:
            got, golden_last = golden_checked(self.module, xs)
            if logits is not None:  # the machine's logits (or first output) are the golden model's
                exact = exact and bool(np.array_equal(golden_last, logits))
            if self.onnx_model is not None:
                ref, reference = ort_checked(self.onnx_model, xs), "onnxruntime"
            else:
                ref, reference = got, "golden"
            data["check"] = check_summary(reference, check_outputs(ref, got, out_names), exact)
        data["provenance"] = dataclasses.asdict(self.provenance(engine))
        return Result(outputs, Report.from_json(data), events)

    @property
    def names(self) -> tuple[list[str], list[str]]:
        """The model's input and output names (the ONNX model's spelling: `input.1`)."""
        if self._names is None:
            self._names = io_names(self.module, graph_names(self.onnx_model))
        return self._names


def compile(model: str | Path | onnx.ModelProto | ModuleOp, pipeline: str | None = None,
            hw: SnowflakeConfig | None = None, format: str = "Q8.8", input_shape: str | None = None,
            progress: Progress | None = None, calibration: np.ndarray | str | Path | None = None) -> Compiled:
    """An ONNX file or model, an nn-level `.mlir` file, or an nn module, lowered for `hw`:
    `pipeline` first if given, then the rest of the default lowering (snowflake-lower).
    `calibration` (format="auto"): calibration inputs, an array (N x the model's input, or N
    images of a batch-B model) or a `.npy` path; without it auto's formats come from synthetic
    inputs (a `SyntheticCalibrationWarning`)."""
    hw = hw or SnowflakeConfig()
    if calibration is not None or not pipeline:  # a pipeline may quantise with its own calibration
        check_calibration(format, calibration)
    t0 = time.perf_counter()
    with gc_paused(), calibration_file(calibration) as cal:  # the importer and the passes build 10^5 IR objects (pass_steps.py)
        digest = None
        if isinstance(model, onnx.ModelProto):
            module = import_model(model, "<model>", parse_input_shape(input_shape) if input_shape else None)
            source, onnx_model = "<model>", model
            digest = hashlib.sha256(model.SerializeToString()).hexdigest()
        elif isinstance(model, ModuleOp):
            module, source, onnx_model = model, "<module>", None
        else:
            module, onnx_model = load_model(model, input_shape)
            source = str(model)
            digest = file_sha256(Path(model))
        if progress:
            progress(f"{source}: lowering")
        try:
            applied = lower(module, pipeline, hw, format=format, calibration=cal)
        except PassFailedException as e:
            if cal is None:
                raise
            # an array's temporary file means nothing to the caller
            raise SnowError(f"{source}: {str(e) if cal == str(calibration) else str(e).replace(cal, 'calibration data')}") \
                from None
    return Compiled(module, hw, source, onnx_model, time.perf_counter() - t0, applied, digest)


SYNTHETIC_WARNING = ("format='auto' without calibration data: synthetic inputs say nothing of real ranges, so the "
                     "formats are Q8.8's (give calibration= / --calibration with inputs like the real ones)")


def check_calibration(format: str, calibration: object, where: str = "") -> None:
    """The rule every API shares: calibration data only with format='auto', and auto without it
    warns (SyntheticCalibrationWarning, pointed at the API's caller). `where`: the API's name,
    as the error's prefix."""
    auto = format.strip().lower() == "auto"
    if calibration is not None and not auto:
        raise SnowError(f"{where}calibration data is for format='auto', not {format}")
    if auto and calibration is None:
        warnings.warn(SYNTHETIC_WARNING, SyntheticCalibrationWarning, stacklevel=3)


class SyntheticCalibrationWarning(UserWarning):
    """format='auto' chose its formats without the user's calibration data."""


@contextlib.contextmanager
def calibration_file(calibration: np.ndarray | str | Path | None) -> Iterator[str | None]:
    """The `.npy` path quantize{calibration=...} reads: the given path, or an array written to a
    temporary file for the duration of the compile (the IR records its sha256, not the path)."""
    if calibration is None or isinstance(calibration, str | Path):
        yield None if calibration is None else str(calibration)
        return
    x = np.asarray(calibration)
    if not np.issubdtype(x.dtype, np.number) or np.iscomplexobj(x):
        raise SnowError(f"calibration data has element type {x.dtype}; give real numbers")
    with tempfile.TemporaryDirectory(prefix="snowir-cal-") as tmp:
        path = Path(tmp) / "calibration.npy"
        np.save(path, x.astype(np.float32, copy=False))
        yield str(path)


def dynamic_inputs(model: onnx.ModelProto) -> dict[str, list[int | None]]:
    """The graph inputs with a dynamic (symbolic or unknown) dimension, by name, with their dims
    (None where dynamic)."""
    inits = {t.name for t in model.graph.initializer}
    out = {}
    for inp in model.graph.input:
        if inp.name in inits or not inp.type.HasField("tensor_type"):
            continue
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None
                for d in inp.type.tensor_type.shape.dim]
        if any(d is None for d in dims):
            out[inp.name] = dims
    return out


def run(model: str | Path | onnx.ModelProto | ModuleOp, x: Inputs = None,
        hw: SnowflakeConfig | None = None, engine: str = "fast", check: bool = False, pipeline: str | None = None,
        format: str = "Q8.8", progress: Progress | None = None,
        calibration: np.ndarray | str | Path | None = None) -> Result:
    """`compile(model, ...)` then `.run(x, ...)`, for one run."""
    return compile(model, pipeline, hw, format, progress=progress, calibration=calibration).run(x, engine, check,
                                                                                               progress)


def run_model_on_device(path: str | Path, x: Inputs = None, pipeline: str | None = None,
                        check: bool = False, input_shape: str | None = None, hw: SnowflakeConfig | None = None,
                        engine: str = "fast", seed: int = 0, progress=None, trace: str | None = None,
                        record: bool = False, trace_layers: str | None = None, jobs: int = 1,
                        max_instructions: int | None = DEFAULT_MAX_INSTRUCTIONS) -> ModelRun:
    """Lower (the remaining passes of the default pipeline, after `pipeline` if given), run every
    device layer's image on the machine model, compare with golden and onnxruntime: what
    snow-run does, as `snowir.compile(...).run(...)` with the report as its JSON dict."""
    compiled = compile(path, pipeline, hw, input_shape=input_shape)
    result = compiled.run(x, engine, check, progress, record or trace is not None, trace_layers, seed, jobs,
                          max_instructions)
    if trace is not None:
        write_trace(trace, None, compiled.hw, result.events)
    return ModelRun(compiled.module, result.outputs, result.report.to_json(), result.events)
