"""
snow-run: compile (when needed), assemble and run a model on the Snowflake machine model.

    snow-run MODEL [--input [NAME=]X.npy ...] [--output Y.npy] [--report R.json] [--hw HW.json]
             [--pipeline P] [--engine fast|reference|golden] [--trace T.json] [--check]
    snow-opt ... | snow-run - ...

MODEL is an ONNX model, an nn / tile / lowered `.mlir` module, a `.sfb` model image
(snow-opt ... -t snowflake-bin of a whole-model lowering), a snowflake_asm-level `.mlir`
program or a `.sfb` program image. Prints a per-layer
table; every error is one line on stderr with exit code 1; output files are written
atomically and only after a successful run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from snowir.api import load_npy
from snowir.version import __version__
from snowir.driver.table import print_table
from snowir.errors import SnowError, run_cli
from snowir.hw import SnowflakeConfig
from snowir.machine.run import DEFAULT_MAX_INSTRUCTIONS


def _positive(text: str) -> int:
    """An argparse type: an integer >= 1 (`--jobs 0` would otherwise mean something odd)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="snow-run", description="Run a model on the Snowflake machine model.")
    p.add_argument("model", help="ONNX model, nn/tile/lowered or snowflake_asm .mlir, .sfb model or program image; "
                                 "'-': .mlir text on standard input (snow-opt ... | snow-run -)")
    p.add_argument("--input", action="append", metavar="[NAME=]X.npy",
                   help=".npy input (float: quantised to the program's Qm.n; integer: raw words); a model with "
                        "several inputs takes one --input each, in the model's input order or as NAME=X.npy")
    p.add_argument("--output", help=".npy of the output (float), .npz when there are several outputs")
    p.add_argument("--report", help="write the JSON report here ('-': standard output)")
    p.add_argument("--hw", help="hardware description JSON (SnowflakeConfig fields)")
    p.add_argument("--pipeline", help="lowering pipeline for nn/tile-level models")
    p.add_argument("--format", help="fixed-point format of an ONNX / float nn model: Qm.n (default Q8.8) or auto "
                                    "(per-tensor formats from calibration, docs/accuracy.md)")
    p.add_argument("--calibration", help="--format auto: .npy of calibration inputs (N x the model's input, or N "
                                         "images; without it the formats are Q8.8's)")
    p.add_argument("--engine", choices=("fast", "reference", "golden"), default=None,
                   help="fast (default; closed-form loop timing), reference (the xDSL interpreter, one "
                        "instruction at a time; --profile's default) or golden (the numpy golden model)")
    p.add_argument("--trace", help="write a Chrome/Perfetto trace-event JSON here (.json.gz: gzip-compressed); "
                   "identical back-to-back events are one span with a count")
    p.add_argument("--trace-layers", metavar="PATTERNS",
                   help="--trace the machine's detail of only these layers: comma-separated names or shell "
                        "patterns (conv1,layer4.*); the host's spans and round trips stay")
    p.add_argument("--jobs", type=_positive, default=os.cpu_count() or 1,
                   help="a per-layer lowering (snowflake-lower{whole-model=false}): layers simulated in parallel "
                        "processes (default: one per core; same results). A whole-model program is one "
                        "instruction stream per segment and runs in one process")
    p.add_argument("--plot", help="write the report's plots here (PNG): cycle breakdown, roofline, Mloop vs Kloop")
    p.add_argument("--check", action="store_true", help="compare with onnxruntime and the golden model")
    p.add_argument("--quiet", action="store_true", help="no table, no progress")
    p.add_argument("--max-instructions", type=_positive, default=DEFAULT_MAX_INSTRUCTIONS, metavar="N",
                   help=f"stop a program after N dynamic instructions with a fault naming the instruction "
                        f"(default {DEFAULT_MAX_INSTRUCTIONS:,}: an endless loop stops within about a minute)")
    p.add_argument("--profile", nargs="?", const="*", default=None, metavar="PARTS",
                   help="print where the cycles go, by layer part and instruction (runs the reference engine; "
                        "not for a .sfb, which holds no locations); "
                        "PARTS: a pattern over the parts, e.g. 'conv2*' for one layer (default: all)")
    p.add_argument("--version", action="version", version=f"snow-run (snowir {__version__})")
    p.add_argument("--traceback", action="store_true",
                   help="on an error, print the full Python traceback too (or set SNOWIR_TRACEBACK=1)")
    p.add_argument("--input-shape", help="static shape for ONNX inputs with dynamic dimensions: 1,3,224,224 or NAME=1,3,224,224[;NAME2=...]")
    p.add_argument("--min-snr", type=float, default=30.0,
                   help="--check fails when an output's SNR (dB; a classifier's logits) against the reference "
                        "is below this (default 30)")
    p.add_argument("--check-top1", action="store_true",
                   help="--check passes on top-1 agreement with the reference instead of --min-snr, for models "
                        "whose outputs are a classifier's ([N, classes]; bit-exactness against golden is always "
                        "required)")
    return p


class Progress:
    """At most one progress line per second on stderr while a long simulation runs."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.last = self.start

    def __call__(self, instructions: int, cycles: int) -> None:
        now = time.perf_counter()
        if now - self.last >= 1.0:
            self.last = now
            print(f"snow-run: ... {instructions:,} instructions, {cycles:,} cycles simulated "
                  f"({now - self.start:.0f} s)", file=sys.stderr, flush=True)


def _is_nn_level(path: str) -> bool:
    """ONNX, or a module with a graph (`func.func @main`: nn, tile or lowered to images);
    otherwise a snowflake_asm program (or .sfb image)."""
    if path.endswith(".onnx"):
        return True
    if path.endswith(".sfb"):
        from snowir.model_image import is_model_image

        try:
            with open(path, "rb") as f:
                return is_model_image(f.read(4))
        except OSError:
            return False
    if path.endswith(".mlir"):
        try:
            text = Path(path).read_text()
        except OSError:
            return False
        return "func.func" in text
    return False


def _check_failure(args: argparse.Namespace, report: dict[str, Any]) -> str | None:
    """Why --check fails, or None; an SNR failure says what to try."""
    c = report["check"]
    if not args.check or c is None:
        return None
    if not c["golden_bit_exact"]:
        first = next((r["name"] for r in report["layers"] if r.get("golden_bit_exact") is False), None)
        return "machine output differs from the golden model" + (
            f", first at layer '{first}' (its own inputs given)" if first is not None else "")
    if args.check_top1:
        if c.get("top1_match") is None:
            return "--check-top1: no output is a classifier's ([N, classes]): top-1 means nothing here; use --min-snr"
        return None if c["top1_match"] else f"top-1 differs from {c['reference']}"
    if c["snr_db"] < args.min_snr:
        rows = c.get("outputs") or []
        where = f" (output '{c['worst_output']}', the worst of {len(rows)})" if len(rows) > 1 else ""
        return f"SNR {c['snr_db']:.1f} dB < {args.min_snr} dB against {c['reference']}{where}; {_accuracy_hint(report)}"
    return None


def _accuracy_hint(report: dict[str, Any]) -> str:
    """What to try when fixed point loses to float (docs/accuracy.md): per-tensor formats from
    calibration data, or the uniform format two bits wider where values saturate (two bits finer
    where none do)."""
    from snowir.driver.saturation import saturating

    fmt = (report.get("provenance") or {}).get("format") or "Q8.8"
    if fmt == "auto":
        return "calibrate with more inputs like the real ones (--calibration X.npy)"
    m, _, n = fmt.removeprefix("Q").partition(".")
    try:
        m, n = int(m), int(n)
    except ValueError:
        return "try --format auto --calibration X.npy (inputs like the real ones)"
    worst = saturating(report)
    wider = f"Q{m + 2}.{n - 2}" if n >= 2 else None
    finer = f"Q{m - 2}.{n + 2}" if m > 2 else None
    if worst and wider:
        other = f", or, as values saturate ({worst[0][0]} the most), a wider format: --format {wider}"
    else:
        other = ", or another uniform format: " + " or ".join(
            f"--format {f} ({why})" for f, why in ((wider, f"to {2 ** (m + 1)}"), (finer, "finer")) if f)
    return f"try --format auto --calibration X.npy (inputs like the real ones){other}; docs/accuracy.md"


def _print_check(c: dict[str, Any]) -> None:
    """The check's line, and one line per output when there are several."""
    rows = c.get("outputs") or []
    top1 = "" if c.get("top1_match") is None else f", top-1 {'match' if c['top1_match'] else 'MISMATCH'}"
    worst = f" (worst output '{c['worst_output']}')" if len(rows) > 1 else ""
    print(f"check vs {c['reference']}: SNR {c['snr_db']:.1f} dB{worst}, max abs err {c['max_abs_err']:.4g}{top1}, "
          f"golden bit-exact {c['golden_bit_exact']}")
    if len(rows) > 1:
        for r in rows:
            top = "" if r["top1_match"] is None else f", top-1 {'match' if r['top1_match'] else 'MISMATCH'}"
            print(f"  output '{r['name']}': SNR {r['snr_db']:.1f} dB, max abs err {r['max_abs_err']:.4g}{top}")


def _inputs(args: argparse.Namespace) -> list[np.ndarray] | dict[str, np.ndarray] | None:
    """--input, once per model input: files in the model's input order, or NAME=X.npy (a path
    with `=` in it that exists is a path)."""
    if not args.input:
        return None
    named: dict[str, np.ndarray] = {}
    ordered: list[np.ndarray] = []
    for given in args.input:
        name, eq, path = given.partition("=")
        if eq and name and not Path(given).exists():
            if name in named:
                raise SnowError(f"--input {given}: input '{name}' given twice")
            named[name] = load_npy(path)
        else:
            ordered.append(load_npy(given))
    if named and ordered:
        raise SnowError("--input: give every input by order or every one as NAME=X.npy, not both")
    return named or ordered


def _dynamic_shapes(model: str, given: list[np.ndarray] | dict[str, np.ndarray] | None) -> str | None:
    """An ONNX model whose inputs have dynamic dims takes their shapes from --input."""
    if given is None or not model.endswith(".onnx"):
        return None
    import onnx

    from snowir.driver.model_api import dynamic_inputs

    try:
        graph = onnx.load(model, load_external_data=False)
    except Exception:  # noqa: BLE001 - the loader reports an unreadable model in its own words
        return None
    dynamic = dynamic_inputs(graph)
    if not dynamic:
        return None
    inits = {t.name for t in graph.graph.initializer}
    names = [i.name for i in graph.graph.input if i.name not in inits]
    by_name = given if isinstance(given, dict) else dict(zip(names, given))
    spec = [f"{name}:{','.join(map(str, np.shape(by_name[name])))}" for name in dynamic
            if name in by_name and np.ndim(by_name[name])]
    return ";".join(spec) or None


def run_nn(args: argparse.Namespace) -> int:
    """ONNX / nn / tile / lowered modules: lowered (the rest of the default pipeline) and run
    on the machine model, or on the golden model with --engine golden."""
    from snowir.driver.model_run import run_model

    hw = SnowflakeConfig.load(args.hw)
    if args.format or args.calibration:
        if args.pipeline:
            raise SnowError("give the format in --pipeline (nn-prepare{format=...}) or with --format, not both")
        fmt = args.format or "auto"
        if fmt.lower() != "auto" and args.calibration:
            raise SnowError(f"--calibration is for --format auto, not {fmt}")
        cal = f" calibration={json.dumps(args.calibration)}" if args.calibration else ""  # quoted: a path may hold spaces
        # the machine's own nn-prepare: partition-host, fuse-activation and the other hw-aware passes decide for
        # --hw, as snowflake-lower does after it (without hw= they decided for the ZC706 build)
        machine = f" hw={json.dumps(str(args.hw))}" if args.hw else ""
        args.pipeline = f"nn-prepare{{format={fmt}{cal}{machine}}}"
        if fmt.lower() == "auto" and not args.calibration:
            from snowir.driver.model_api import SYNTHETIC_WARNING

            print(f"snow-run: warning: {SYNTHETIC_WARNING.replace('calibration= / ', '')}", file=sys.stderr)
    x = _inputs(args)
    args.input_shape = args.input_shape or _dynamic_shapes(args.model, x)
    if not args.quiet:
        print(f"snow-run: {args.shown}: {'golden model' if args.engine == 'golden' else 'machine model, engine ' + args.engine}",
              file=sys.stderr)
    if args.engine == "golden":
        result = run_model(args.model, x, args.pipeline, args.check, args.input_shape, hw)
    else:
        from snowir.driver.model_api import run_model_on_device

        say = None if args.quiet else (lambda msg: print(f"snow-run: ... {msg}", file=sys.stderr, flush=True))
        result = run_model_on_device(args.model, x, args.pipeline, args.check, args.input_shape, hw, args.engine,
                                     progress=say, record=bool(args.trace), trace_layers=args.trace_layers,
                                     jobs=args.jobs, max_instructions=args.max_instructions)
    report = _named(result.report, args)
    if not args.quiet:
        print_table(report)
        if report["check"]:
            _print_check(report["check"])
    _warn_saturation(report, result.outputs)
    failure = _check_failure(args, report)
    from snowir.driver.files import Outputs, npy_bytes, npz_bytes

    if failure:  # the report says what failed; the outputs are not written
        if args.report:
            report["check"]["failed"] = failure
            failed = Outputs()
            failed.add(args.report, (json.dumps(report, indent=2) + "\n").encode())
            failed.commit()
        kept = f"{args.report} written, nothing else" if args.report else "nothing written"
        print(f"snow-run: {args.shown}: check failed: {failure} ({kept})", file=sys.stderr)
        return 1
    out = Outputs()
    if args.output:
        if len(result.outputs) == 1 and not args.output.endswith(".npz"):
            out.add(args.output, npy_bytes(result.outputs[0]))
        else:
            out.add(args.output, npz_bytes({f"output{i}": o for i, o in enumerate(result.outputs)}))
    if args.report:
        out.add(args.report, (json.dumps(report, indent=2) + "\n").encode())
    if args.trace:
        from snowir.machine.trace import trace_bytes

        out.add(args.trace, trace_bytes(None, hw, result.events, gz=args.trace.endswith(".gz")))
    out.commit()
    if args.plot:
        from snowir.tools.snow_report import plot_report

        plot_report(report, args.plot, _loop_bytes(result.module))
    return 0


def _named(report: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The report with the model named as the user gave it (`<stdin>`, not a temporary file)."""
    if args.shown != args.model:
        report["model"] = args.shown
        if report.get("provenance"):
            report["provenance"]["model"] = args.shown
    return report


def _warn_saturation(report: dict[str, Any], outputs) -> None:
    """One line on stderr (even with --quiet) when a layer saturates more than 0.1% of its values."""
    from snowir.driver.saturation import saturation_warning

    warning = saturation_warning(report, outputs)
    if warning:
        print(f"snow-run: {warning}", file=sys.stderr)


def _loop_bytes(module) -> dict[str, tuple[int, int]]:
    """Per conv layer, the planner's DRAM bytes for Mloop and for Kloop (on its image)."""
    from xdsl.dialects.builtin import IntegerAttr

    from snowir.dialects import snowflake_asm as sf

    out = {}
    for image in module.ops:
        if not isinstance(image, sf.ImageOp):
            continue
        # a layer's image, or in a segment's program the layers' markers (link-segments)
        holders = [(image.attributes.get("layer"), image.attributes)]
        holders += [(op.label, op.attributes["layer"].data) for op in image.program.body.block.ops
                    if isinstance(op, sf.LabelOp) and "layer" in op.attributes]
        for layer, facts in holders:
            m, k = facts.get("mloop_bytes"), facts.get("kloop_bytes")
            if isinstance(m, IntegerAttr) and isinstance(k, IntegerAttr) and layer is not None:
                out[layer.data] = (m.value.data, k.value.data)
    return out


MODEL_SUFFIXES = (".onnx", ".mlir", ".sfb")


def run(args: argparse.Namespace) -> int:
    from snowir import api

    if not str(args.model).endswith(MODEL_SUFFIXES):
        raise SnowError(f"{args.shown}: not a model: give an ONNX file (.onnx), an nn / tile / lowered module or a "
                        "snowflake_asm program (.mlir), or a program or model image (.sfb)")

    if args.trace_layers and not args.trace:
        raise SnowError("--trace-layers selects the layers of a --trace: give --trace FILE too")
    if _is_nn_level(args.model):
        return run_nn(args)
    if args.trace_layers:
        raise SnowError("--trace-layers is for models (a program is one layer)")
    from snowir.driver.model_api import Provenance, file_sha256
    from snowir.fixedpoint import dequantize
    from snowir.machine.run import program_report

    hw = SnowflakeConfig.load(args.hw)
    t0 = time.perf_counter()
    image, module = api.load_program(args.model, hw)
    compile_s = time.perf_counter() - t0
    if args.engine == "golden":
        raise SnowError(f"{args.shown}: --engine golden runs nn-level models; this is a snowflake_asm program")
    if args.check:
        raise SnowError(f"{args.shown}: --check compares against the float model; a snowflake_asm program has none")
    if args.input and len(args.input) > 1:
        raise SnowError(f"{args.shown}: a snowflake_asm program takes one --input (its input segment), "
                        f"not {len(args.input)}")
    inputs = api.read_input(args.input[0], image) if args.input else None
    if not args.quiet:
        print(f"snow-run: {args.shown}: {len(image.code)} instructions, engine {args.engine}", file=sys.stderr)
    result = api.run_program(image, module, hw, args.engine, inputs, record=bool(args.trace),
                             progress=None if args.quiet else Progress(), max_instructions=args.max_instructions)
    report = program_report(result, hw, str(args.model), compile_s)
    report["provenance"] = dataclasses.asdict(Provenance(
        __version__, str(args.model), file_sha256(Path(args.model)), "", f"Q{16 - image.frac_bits}.{image.frac_bits}",
        None, args.engine))
    report = _named(report, args)
    if not args.quiet:
        print_table(report)
    _warn_saturation(report, None)
    from snowir.machine.trace import trace_bytes
    from snowir.driver.files import Outputs, npy_bytes, npz_bytes

    out = Outputs()
    if args.output:
        outs = {k: dequantize(v, image.frac_bits) for k, v in result.outputs.items()}
        if len(outs) == 1 and not args.output.endswith(".npz"):
            out.add(args.output, npy_bytes(next(iter(outs.values()))))
        else:
            out.add(args.output, npz_bytes(outs))
    if args.report:
        out.add(args.report, (json.dumps(report, indent=2) + "\n").encode())
    if args.trace:
        out.add(args.trace, trace_bytes(result.timing, hw, gz=args.trace.endswith(".gz")))
    out.commit()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args.shown = "<stdin>" if args.model == "-" else args.model  # the model as messages and reports name it
    if args.model == "-":
        return run_cli("snow-run", lambda: _from_stdin(args), "<stdin>")
    return run_cli("snow-run", lambda: _warning_lines(lambda: _started(args)), args.model)


def _from_stdin(args: argparse.Namespace) -> int:
    """`snow-opt ... | snow-run -`: the module text (or a .sfb image's bytes) read from standard
    input into a temporary file, named `<stdin>` in what snow-run says."""
    import tempfile

    from snowir.machine.image import MAGIC
    from snowir.model_image import is_model_image

    data = sys.stdin.buffer.read()
    if not data.strip():
        raise SnowError("<stdin>: empty: pipe a module in (snow-opt model.onnx -p snowflake-lower | snow-run -)")
    suffix = ".sfb" if data[:4] == MAGIC or is_model_image(data[:4]) else ".mlir"
    with tempfile.TemporaryDirectory(prefix="snowir-stdin-") as tmp:
        path = str(Path(tmp) / f"stdin{suffix}")
        Path(path).write_bytes(data)
        args.model = path
        try:
            return _warning_lines(lambda: _started(args))
        except SnowError as e:
            raise SnowError(str(e).replace(path, "<stdin>")) from None
        except Exception as e:  # noqa: BLE001 - a parse error names the temporary file: say <stdin>
            from snowir.errors import one_line

            raise SnowError(one_line(e, "<stdin>").replace(path, "<stdin>")) from None


def _warning_lines(body) -> int:
    """Python warnings the library gives (saturation, an old ONNX IR version) as snow-run's
    one-line warnings on stderr."""
    import warnings

    said: set[str] = set()

    def show(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ARG001
        if str(message) not in said:  # the import and the check's onnxruntime each read the model
            said.add(str(message))
            print(f"snow-run: warning: {message}", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.showwarning = show
        return body()


def _started(args: argparse.Namespace) -> int:
    """What can be refused without running is refused first: a run can take minutes."""
    from snowir.driver.files import missing_directories

    if not Path(args.model).exists():  # before the banner a run prints
        raise SnowError(f"{args.shown}: no such file")
    targets = {"--output": args.output, "--report": args.report, "--trace": args.trace, "--plot": args.plot}
    bad = set(missing_directories(targets.values()))
    if bad:
        raise SnowError(f"no such directory for {', '.join(f'{k} {v}' for k, v in targets.items() if v in bad)} "
                        "(nothing run, nothing written)")
    if args.profile:
        return profiled(args)
    args.engine = args.engine or "fast"
    return run(args)


def profiled(args: argparse.Namespace) -> int:
    """The run on the reference engine (it steps one instruction at a time), then the profile."""
    from snowir.machine.profile import collecting, profile_table

    if args.engine == "golden":
        raise SnowError("--profile times instructions: not with --engine golden")
    if args.engine == "fast":
        raise SnowError("--profile steps the reference engine; the fast engine times loops in closed form: "
                        "drop --engine fast")
    if str(args.model).endswith(".sfb"):
        raise SnowError(f"{args.shown}: --profile names the parts by their source locations and a .sfb holds "
                        "none: profile the .onnx or the lowered .mlir")
    args.engine, args.jobs = "reference", 1  # profiles are collected in this process
    with collecting() as profiles:
        rc = run(args)
    if rc == 0:
        print()
        print(profile_table(profiles, None if args.profile == "*" else args.profile), end="")
    return rc


if __name__ == "__main__":
    sys.exit(main())
