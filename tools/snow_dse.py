"""
snow-dse MODEL --sweep FIELD=v1,v2,... [--sweep ...] [--out DIR] [--address ADDR] [--workers N]:
design-space exploration over hardware configurations on Ray (snowir/driver/dse.py).

Writes DIR/results.csv, DIR/results.json (one row per configuration: every config field, ms
(device), conv_ms (device layers but fully connected ones, as C17 Table 2), the bound on that
machine (bound_ms, bound_share, bound_by; conv_bound_ms, conv_bound_share), GB/s, useful-MAC
utilisation, stall cycles by cause, DRAM traffic bytes) and DIR/pareto.png (--objective: end-to-end
or device ms, against the resource proxy, every swept resource priced in MAC-equivalents as docs/dse.md says, Pareto
front marked); rows are cached in DIR/cache, so a re-run computes only new configurations.
Every row equals `snow-run MODEL --hw` of that configuration.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from snowir.errors import SnowError, run_cli


def snowir_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("snowir")
    except PackageNotFoundError:
        return "unknown"


def _parser() -> argparse.ArgumentParser:
    from snowir.hw import DEFAULT, RANGES

    fields = "\n".join(f"  {name:<26} {lo:.10g}..{hi:.10g} (default {getattr(DEFAULT, name)})"
                       for name, (lo, hi, _) in RANGES.items())
    p = argparse.ArgumentParser(prog="snow-dse", description=__doc__.split("\n\n")[0].strip(),
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="sweepable fields (--sweep FIELD=v1,v2,...), with their ranges:\n" + fields)
    p.add_argument("model", help="ONNX or nn-level .mlir model")
    p.add_argument("--sweep", action="append", default=[], metavar="FIELD=v1,v2,...",
                   help="a SnowflakeConfig field and its values (repeat for a cross product)")
    p.add_argument("--hw", help="base hardware description JSON (default: the ZC706 build)")
    p.add_argument("--version", action="version", version=f"snow-dse (snowir {snowir_version()})")
    p.add_argument("--traceback", action="store_true",
                   help="on an error, print the full Python traceback too (or set SNOWIR_TRACEBACK=1)")
    p.add_argument("--out", default="build/dse", help="output directory (default build/dse)")
    p.add_argument("--address", help="an existing Ray cluster (default: a local Ray runtime)")
    p.add_argument("--workers", type=int, default=0,
                   help="local Ray workers (default: one per core); 1 runs in this process without Ray")
    p.add_argument("--pipeline", help="lowering pipeline, as snow-run --pipeline")
    p.add_argument("--format", default="Q8.8", help="fixed-point format (Qm.n or auto), as snow-run --format")
    p.add_argument("--input-shape", help="static shape for ONNX inputs with dynamic dimensions: 1,3,224,224 or NAME=1,3,224,224[;NAME2=...]")
    p.add_argument("--objective", help="what the Pareto front ranks by, against the resource proxy: end-to-end "
                                       "(device + host + round trips) or device ms (default: end-to-end when "
                                       "some configuration runs layers on the host, else device)")
    p.add_argument("--quiet", action="store_true", help="no progress, no table")
    return p


def _preflight(args: argparse.Namespace) -> None:
    """What every configuration would fail on is refused once, without a configuration's name in
    front: the model's import and the pipeline's passes and options."""
    from snowir.driver.model_run import parse_pipeline
    from snowir.frontend.onnx_import import import_onnx, parse_input_shape

    if args.model.endswith(".onnx"):
        import_onnx(args.model, parse_input_shape(args.input_shape) if args.input_shape else None)
    parse_pipeline(args.pipeline or "")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from snowir.driver import dse
    from snowir.hw import SnowflakeConfig
    from snowir.driver.files import Outputs

    if not Path(args.model).is_file():
        raise SnowError(f"{args.model}: no such file")
    if not args.sweep:
        raise SnowError("give at least one --sweep FIELD=v1,v2,...")
    if args.workers < 0 or (args.address and args.workers == 1):
        raise SnowError("--workers must be >= 0 (1: no Ray, so not with --address)")
    if args.objective is not None and args.objective not in dse.OBJECTIVES:  # before anything runs
        raise SnowError(f"--objective '{args.objective}': not one of {', '.join(dse.OBJECTIVES)}")
    _preflight(args)
    sweeps = [dse.parse_sweep(s) for s in args.sweep]
    hws = dse.configs(SnowflakeConfig.load(args.hw), sweeps)
    out = Path(args.out)
    say = None if args.quiet else (lambda msg: print(f"snow-dse: {msg}", file=sys.stderr, flush=True))
    blind = dse.unpriced([s.field for s in sweeps])
    if blind and say:  # else a column of points at one x would look like a plotting fault
        say(f"the resource proxy does not price {', '.join(blind)}: configurations differing only there "
            "share an x position in pareto.png")
    made = [d for d in (out, out / "cache") if not d.exists()]  # what a failed run must not leave behind
    explorer = dse.Explorer(args.model, out, args.pipeline, args.format, args.input_shape, args.workers,
                            args.address, say)
    try:
        rows = explorer.run(hws)
    except BaseException:
        for d in reversed(made):
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()
        raise
    key = dse.objective(rows, args.objective)
    front = dse.pareto(rows, key)
    for row, f in zip(rows, front):
        row["pareto"] = f
    fields = [s.field for s in sweeps]
    files = Outputs()
    files.add(str(out / "results.csv"), dse.csv_text(rows).encode())
    files.add(str(out / "results.json"), (json.dumps({"model": args.model, "sweep": {s.field: list(s.values) for s in sweeps},
                                                      "objective": key, "wall_s": explorer.wall_s, "rows": rows},
                                                     indent=2) + "\n").encode())
    files.add(str(out / "pareto.png"), dse.plot(rows, fields, args.model, key))
    files.commit()
    if not args.quiet:
        head = fields + ["ms", "conv ms", "host ms", "e2e ms", "bound ms", "bound %", "bound by", "GB/s", "util",
                         "traffic MB", "pareto"]
        print("  ".join(f"{h:>12}" for h in head))
        for row in rows:
            e2e = row.get("end_to_end_ms")
            cells = [str(row[f]) for f in fields] + [f"{row['ms']:.3f}", f"{row['conv_ms']:.3f}", f"{row['host_ms']:.3f}",
                                                     "-" if e2e is None else f"{e2e:.3f}",
                                                     *_bound_cells(row), f"{row['gbps']:.2f}",
                                                     f"{100 * row['mac_utilization']:.1f}%",
                                                     f"{row['dram_traffic_bytes'] / 1e6:.2f}", "*" if row["pareto"] else ""]
            print("  ".join(f"{c:>12}" for c in cells))
        print(f"snow-dse: Pareto front by {'device ms' if key == 'ms' else 'end-to-end ms'} against the resource proxy",
              file=sys.stderr)
        print(f"snow-dse: {len(rows)} configurations in {explorer.wall_s:.1f} s; wrote {out}/results.csv, "
              f"results.json, pareto.png", file=sys.stderr)
    return 0


def _bound_cells(row: dict) -> list[str]:
    """The device layers' bound, the share of device ms it is, and what binds most of it."""
    if row.get("bound_ms") is None:
        return ["-", "-", "-"]
    return [f"{row['bound_ms']:.3f}", f"{100 * row['bound_share']:.1f}%", row["bound_by"]]


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return run_cli("snow-dse", lambda: run(args), args.model)


if __name__ == "__main__":
    sys.exit(main())
