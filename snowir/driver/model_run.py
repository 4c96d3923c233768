"""
Running nn-level models (an ONNX file or an nn `.mlir`): prepare (the nn pipeline, default
`nn-prepare`), execute with the golden model, compare with onnxruntime fp32. The report has
the report shape of docs/machine.md; the golden model has no hardware timing, so cycles are 0.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from xdsl.dialects.builtin import AnyFloat, ModuleOp, StringAttr
from xdsl.passes import PassPipeline

from snowir import api
from snowir.version import __version__
from snowir.dialects import nn, tile
from snowir.driver.bound import NO_BOUND
from snowir.driver.check import check_outputs, check_summary, golden_checked, ort_checked
from snowir.driver.results import inputs_report, saturation
from snowir.pass_steps import gc_paused
from snowir.driver.pipeline_spec import explain_pipeline, unwrap_pipeline
from snowir.errors import SnowError, pipeline_error, unreadable
from snowir.frontend.onnx_import import import_onnx, parse_input_shape
from snowir.golden import Golden
from snowir.host_model import host_ms, useful_macs
from snowir.hw import SnowflakeConfig
from snowir.nn_util import layer_name, on_host
from snowir.passes import all_passes
from snowir.passes.convert.nn_to_tile import device_layers
from snowir.passes.pipelines import quantised
from snowir.model_image import ModelImage, is_model_image, model_module
from snowir.segments import main_of, placed_host_read, read_rearrangement

DEFAULT_PIPELINE = "nn-prepare"


@dataclass
class ModelRun:
    module: ModuleOp
    outputs: list[np.ndarray]
    report: dict[str, Any]
    events: list | None = None  # timing events of every device layer (record=True)


def load_model(path: str | Path, input_shape: str | None = None) -> tuple[ModuleOp, str | None]:
    """An nn module from `.onnx` or `.mlir`, or a model image (`.sfb`, lowered); the ONNX path is
    returned for the reference."""
    path = Path(path)
    if path.suffix == ".onnx":
        return import_onnx(path, parse_input_shape(input_shape) if input_shape else None), str(path)
    if path.suffix == ".sfb":
        try:
            data = path.read_bytes()
        except OSError as e:
            raise unreadable(path, e) from None
        if not is_model_image(data):
            raise SnowError(f"{path}: a program image, not a model image (snow-run runs it as a program)")
        return model_module(ModelImage.from_bytes(data, str(path)), str(path)), None
    module = api.parse_mlir(path)
    return module, None


def is_quantized(module: ModuleOp) -> bool:
    args = main_of(module).body.block.args
    return "nn.format" in module.attributes or any(isinstance(a.type.get_element_type(), nn.FixedType) for a in args)


def parse_pipeline(pipeline: str) -> PassPipeline | None:
    """The passes of a `--pipeline` (None for an empty one), or its error in one line naming the
    pass and option."""
    spec = unwrap_pipeline(pipeline)
    if not spec:
        return None
    try:
        pipeline_passes = PassPipeline.parse_spec(all_passes(), spec)
        if (why := explain_pipeline(spec, all_passes())) is not None:  # built, but from a value of the wrong kind
            raise SnowError(f"--pipeline '{pipeline}': {why}")
        return pipeline_passes
    except (KeyboardInterrupt, SystemExit, SnowError):
        raise
    except BaseException as e:  # noqa: BLE001 - xDSL's ArgSpecParseError is a BaseException
        reason = pipeline_error(e) if type(e).__name__ == "ArgSpecParseError" else \
            explain_pipeline(spec, all_passes()) or str(e).splitlines()[0]
        raise SnowError(f"--pipeline '{pipeline}': {reason}") from None


def apply_pipeline(module: ModuleOp, pipeline: str, hw: str = "") -> None:
    """`hw`: a hardware JSON for the pipeline's passes that take a machine and name none (`hw=`
    unset): the machine the caller runs on, so `--hw` reaches a `--pipeline` as it reaches the
    default lowering (a program built for the default machine would be refused at run time)."""
    passes = parse_pipeline(pipeline)
    if passes is None:
        return
    if hw:
        passes = dataclasses.replace(passes, passes=tuple(
            dataclasses.replace(p, hw=hw) if getattr(p, "hw", None) == "" else p for p in passes.passes))
    with gc_paused():
        passes.apply(api.context(), module)


def _format(op) -> str | None:
    """The Qm.n of the layer's result, None for float."""
    if not op.results or not hasattr(op.results[0].type, "get_element_type"):
        return None
    elem = op.results[0].type.get_element_type()
    if isinstance(elem, nn.FixedType):
        return f"Q{elem.int_bits.data}.{elem.frac_bits.data}"
    return None


def graph_names(model: onnx.ModelProto | str | Path | None) -> tuple[list[str], list[str]] | None:
    """The ONNX model's input names (initializers aside) and output names, as the model spells
    them (`input.1`; the IR's name hints are identifiers, `input`), or None without a model."""
    if model is None:
        return None
    if not isinstance(model, onnx.ModelProto):
        try:
            model = onnx.load(str(model), load_external_data=False)
        except Exception:  # noqa: BLE001 - the importer has reported an unreadable model already
            return None
    inits = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits], [o.name for o in model.graph.output]


def io_names(module: ModuleOp, names: tuple[list[str], list[str]] | None) -> tuple[list[str], list[str]]:
    """@main's input and output names: the ONNX model's when they match in number, else the
    arguments' name hints (`input0`, ... without one) and `output0`, ..."""
    fn = main_of(module)
    args, outs = fn.body.block.args, fn.function_type.outputs.data
    inputs = [a.name_hint or f"input{i}" for i, a in enumerate(args)]
    outputs = [f"output{i}" for i in range(len(outs))]
    if names is not None:
        if len(names[0]) == len(args):
            inputs = list(names[0])
        if len(names[1]) == len(outs):
            outputs = list(names[1])
    return inputs, outputs


Inputs = np.ndarray | Sequence[np.ndarray] | Mapping[str, np.ndarray] | None


def model_inputs(x: Inputs, module: ModuleOp, names: list[str], source: str, seed: int = 0) -> list[np.ndarray]:
    """The inputs of @main in order, each checked (`check_input`): `x` is one array (a
    one-input model), a list in input order, or a dict by input name; None: seeded N(0, 1)
    for every input."""
    shapes = [list(a.type.get_shape()) for a in main_of(module).body.block.args]
    listed = ", ".join(f"'{n}'" for n in names)
    if x is None:
        rng = np.random.default_rng(seed)
        xs = [rng.standard_normal(shape).astype(np.float32) for shape in shapes]
    elif isinstance(x, Mapping):
        unknown = [k for k in x if k not in names]
        if unknown:
            raise SnowError(f"{source}: no input named '{unknown[0]}' (the inputs are {listed})")
        missing = [n for n in names if n not in x]
        if missing:
            raise SnowError(f"{source}: no value for input '{missing[0]}' (the inputs are {listed}; give one "
                            f"--input per input, in order or as name=file.npy)")
        xs = [x[n] for n in names]
    else:
        xs = [x] if isinstance(x, np.ndarray) else list(x)
        if len(xs) != len(names):
            raise SnowError(f"{source}: the model takes {len(names)} input{'s' if len(names) != 1 else ''} ({listed}), "
                            f"got {len(xs)} (give one --input per input, in order or as name=file.npy)")
    out = []
    for v, arg, shape, name in zip(xs, main_of(module).body.block.args, shapes, names):
        elem = arg.type.get_element_type()
        v = np.asarray(v)
        if isinstance(elem, nn.FixedType | AnyFloat):
            # an empty input beside others is data (a Reshape's allowzero); alone, nothing to run
            out.append(check_input(v, shape, source, module, name, empty_ok=len(names) > 1))
        elif list(v.shape) != shape:  # an integer or bool input (a host node's): taken as it is
            raise SnowError(f"{source}: input '{name}' has shape {list(v.shape)}, the model expects {shape}")
        else:
            out.append(v)
    return out


def check_input(x: np.ndarray, shape: list[int], source: str, module: ModuleOp, name: str | None = None,
                empty_ok: bool = False) -> np.ndarray:
    """The model input as float32, refused in one line when its shape is wrong, it holds
    NaN or infinity (quantising those would give plausible-looking garbage) or, unless
    `empty_ok`, it is empty."""
    name = name or main_of(module).body.block.args[0].name_hint or "input"
    if 0 in shape and not empty_ok:
        raise SnowError(f"{source}: input '{name}' has a zero-size dimension {shape}: nothing to run")
    if list(x.shape) != shape:
        raise SnowError(f"{source}: input '{name}' has shape {list(x.shape)}, the model expects {shape}")
    if not np.issubdtype(x.dtype, np.number) or np.iscomplexobj(x):
        raise SnowError(f"{source}: input '{name}' has element type {x.dtype}; give real numbers")
    x = np.asarray(x, np.float32)
    bad = ~np.isfinite(x)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        kind = "NaN" if np.isnan(x[first]) else "infinity"
        raise SnowError(f"{source}: input '{name}' holds {int(bad.sum())} NaN/infinite values (first: {kind} at "
                        f"index {list(first)}); refused rather than quantised")
    return x


def layer_rows(module: ModuleOp) -> list[dict[str, Any]]:
    """One report row per nn layer of @main (key "_op" holds the op, dropped from reports).
    `macs` is the useful work (padding taps excluded), as the machine counts it; a host layer
    carries its estimated Cortex-A9 time (snowir/host_model.py)."""
    rows = []
    for op in main_of(module).body.block.ops:
        if not op.name.startswith("nn.") or isinstance(op, nn.ConstantOp):
            continue
        host = on_host(op)
        kind = "dense" if "from_dense" in op.attributes else "add" if "from_add" in op.attributes \
            else op.name.removeprefix("nn.")
        if isinstance(op, nn.HostOp):
            kind = f"host:{op.op_type.data}"  # the ONNX node it carries
        rows.append({"name": layer_name(op, op.name), "op": kind,
                     "where": "host" if host else "host-read" if placed_host_read(op) or read_rearrangement(op)
                     else "device",
                     "cycles": 0, "ms": 0.0,
                     "host_ms": host_ms(op) if host else None, "macs": useful_macs(op), "lane_macs": 0,
                     "mac_utilization": 0.0, "dram_bytes": 0, "gbps": 0.0, "stall_cycles": {},
                     "mode": None, "loop_order": None, "load_imbalance_pct": None, "format": _format(op),
                     "saturated": 0, "saturated_share": 0.0, "_op": op,
                     **({"host_reason": op.attributes["host_reason"].data}
                        if host and "host_reason" in op.attributes else {})})
    return rows


def host_total_ms(rows: list[dict[str, Any]]) -> float:
    return sum(r["host_ms"] or 0.0 for r in rows)


def golden_report(module: ModuleOp, source: str, hw: SnowflakeConfig, compile_s: float,
                  simulate_s: float, golden: Golden, input_names: Sequence[str] | None = None) -> dict[str, Any]:
    """The report (docs/machine.md) of the golden-model run `golden`: the layers and their useful MACs,
    host estimates and saturated values, no hardware timing (cycles 0)."""
    rows = layer_rows(module)
    for row in rows:
        op = row.pop("_op")
        row.update(saturation(golden.saturated.get(op, 0), op), **NO_BOUND)
    total = {"cycles": 0, "ms": 0.0, "host_ms": host_total_ms(rows), "macs": sum(r["macs"] for r in rows),
             "lane_macs": 0, "mac_utilization": 0.0,
             "dram_bytes": 0, "gbps": 0.0, "static_instructions": 0, "dynamic_instructions": 0,
             "stall_cycles": {}, "compile_s": compile_s, "simulate_s": simulate_s,
             # no device time, so no end-to-end timeline (docs/machine.md "End-to-end time")
             "round_trip_ms": None, "round_trip_bytes": None, "end_to_end_ms": None, "device_share": None,
             **NO_BOUND}  # no device time: no share of a bound either
    for row in rows:
        row.update(start_ms=None, end_ms=None)
    return {"model": source, "hw": hw.to_json(), "total": total, "layers": rows, "check": None,
            "inputs": inputs_report(golden.input_saturated, input_names), "round_trips": []}


@dataclass(frozen=True)
class Provenance:
    """How a report was made: enough to tell two runs apart and to make one again."""

    snowir: str
    model: str
    model_sha256: str | None
    """Of the model file (or the ONNX model's bytes); None for a module built in memory."""
    pipeline: str
    """Every pass applied after import, as one pipeline (the rest of snowflake-lower included)."""
    format: str | None
    """The module's nn.format: Q8.8, another Qm.n, or auto."""
    calibration: str | None
    """format=auto: the digest and origin of the inputs the formats were chosen from."""
    engine: str

    @classmethod
    def of(cls, module: ModuleOp, model: str, model_sha256: str | None, pipeline: str, engine: str) -> Provenance:
        fmt = module.attributes.get("nn.format")
        cal = module.attributes.get("nn.calibration")
        return cls(__version__, model, model_sha256, pipeline, fmt.data if isinstance(fmt, StringAttr) else None,
                   cal.data if isinstance(cal, StringAttr) else None, engine)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def run_model(path: str | Path, x: Inputs = None, pipeline: str | None = None,
              check: bool = False, input_shape: str | None = None, hw: SnowflakeConfig | None = None,
              seed: int = 0) -> ModelRun:
    """The golden-model run of snow-run --engine golden: `x` one array, a list in input order or
    a dict by input name (None: seeded N(0, 1) inputs)."""
    hw = hw or SnowflakeConfig()
    t0 = time.perf_counter()
    module, onnx_path = load_model(path, input_shape)
    float_module = None
    if check and onnx_path is None and not is_quantized(module):
        float_module = module.clone()
    applied = ""
    if pipeline is not None:
        apply_pipeline(module, pipeline)
        applied = unwrap_pipeline(pipeline)
    elif not is_quantized(module):
        apply_pipeline(module, DEFAULT_PIPELINE)
        applied = DEFAULT_PIPELINE
    compile_s = time.perf_counter() - t0
    in_names, out_names = io_names(module, graph_names(onnx_path))
    xs = model_inputs(x, module, in_names, str(path), seed)
    t0 = time.perf_counter()
    golden = Golden(module)
    outputs = golden.run(*xs)
    report = golden_report(module, str(path), hw, compile_s, time.perf_counter() - t0, golden, in_names)
    report["provenance"] = dataclasses.asdict(Provenance.of(module, str(path), file_sha256(Path(path)), applied,
                                                            "golden"))
    if check:
        got, _ = golden_checked(module, xs)
        if onnx_path is not None:
            ref, reference = ort_checked(onnx_path, xs), "onnxruntime"
        elif float_module is not None:
            ref, reference = golden_checked(float_module, xs)[0], "golden-fp32"
        else:
            raise SnowError(f"{path}: --check needs a float model (ONNX or an unquantised nn module)")
        report["check"] = check_summary(reference, check_outputs(ref, got, out_names), True)
    return ModelRun(module, outputs, report)


def lowered(module: ModuleOp) -> bool:
    """Every device layer has its image and no tile.layer is left: nothing remains to lower."""
    return quantised(module) and not any(isinstance(op, tile.LayerOp) for op in module.ops) \
        and all("image" in op.attributes for op in device_layers(module))


@contextmanager
def hw_file(hw: SnowflakeConfig) -> Iterator[Path]:
    """`hw` as a JSON file for the length of the block: passes take their machine as `hw=` a path,
    as on the command line."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "hw.json"
        hw.save(path)
        yield path


def lower(module: ModuleOp, pipeline: str | None = None, hw: SnowflakeConfig | None = None,
          format: str = "Q8.8", calibration: str | None = None) -> str:
    """`pipeline` exactly as given (if any); then, unless every device layer already has its
    image, the rest of the default lowering: `snowflake-lower` skips what is done (a quantised
    module is not re-quantised, layers with a tile or image keep it, set loop orders stay,
    balanced or banked programs stay as they are). A lowered module runs as it is. A
    non-default `hw` reaches the passes as a JSON file, as `hw=` on the command line would, the
    given pipeline's too where they name no machine of their own.
    Returns the pipeline applied, as a report's provenance names it (`hw=<report hw>` for the
    temporary file). `calibration`: a `.npy` for format=auto, refused when `pipeline` already
    quantised the module (it would go unused)."""
    applied = [unwrap_pipeline(pipeline)] if pipeline else []
    default = hw is None or hw == SnowflakeConfig()
    if pipeline is not None and default:
        apply_pipeline(module, pipeline)
    elif pipeline is not None:
        with hw_file(hw) as path:  # its passes that name no machine lower for this one
            apply_pipeline(module, pipeline, str(path))
    if calibration and quantised(module):
        raise SnowError("calibration data given, but the module is already quantised (by the pipeline or the "
                        "model): give it in the pipeline's quantize / nn-prepare{calibration=...} instead")
    if lowered(module):
        return ",".join(applied)
    options = "" if format == "Q8.8" else f"format={format}"
    if calibration:
        options += f" calibration={json.dumps(str(calibration))}"  # quoted: a path may hold spaces
    if default:
        step = f"snowflake-lower{{{options}}}" if options else "snowflake-lower"
        apply_pipeline(module, step)
        return ",".join([*applied, step])
    with hw_file(hw) as path:
        apply_pipeline(module, f"snowflake-lower{{hw={path} {options}}}")
    return ",".join([*applied, f"snowflake-lower{{hw=<report hw> {options}}}".replace(" }", "}")])


def layer_filter(patterns: str | None):
    """`conv1,layer4.*`: a predicate over layer names (shell-style patterns), None for all."""
    if not patterns:
        return None
    import fnmatch

    wanted = [p.strip() for p in patterns.split(",") if p.strip()]
    return lambda name: any(fnmatch.fnmatchcase(name, p) for p in wanted)
