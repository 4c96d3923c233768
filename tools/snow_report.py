"""
snow-report: read, compare and plot snow-run JSON reports.

    snow-report A.json                 the per-layer table (as snow-run prints it)
    snow-report A.json B.json          per-layer and total differences, B against A: cycles, ms,
                                       GB/s, utilisation, stall cycles, loop order, mode
    snow-report A.json --plot t.png    per device layer, its cycles split into CU work and each
                                       CU stall cause (where the time goes)

Layers are matched by name; a layer in one report only is listed as added / removed. Errors
are one line on stderr with exit code 1.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from snowir.errors import SnowError, one_line
from snowir.tools.snow_run import print_table

REQUIRED = ("model", "total", "layers")
LAYER_FIELDS = ("name", "op", "cycles", "ms", "mac_utilization", "gbps", "stall_cycles")


def load_report(path: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise SnowError(f"{path}: cannot read ({e.strerror or e})") from None
    except json.JSONDecodeError as e:
        raise SnowError(f"{path}: not JSON ({e.msg}, line {e.lineno})") from None
    if not isinstance(data, dict) or any(k not in data for k in REQUIRED):
        raise SnowError(f"{path}: not a snow-run report (needs {', '.join(REQUIRED)})")
    for i, layer in enumerate(data["layers"]):
        missing = [k for k in LAYER_FIELDS if k not in layer]
        if missing:
            raise SnowError(f"{path}: layer {i} lacks {', '.join(missing)}")
    return data


def _pct(a: float, b: float) -> str:
    if a == b:
        return "="
    if not a:
        return "new"
    return f"{100 * (b / a - 1):+.1f}%"


def print_diff(a: dict[str, Any], b: dict[str, Any], out=None) -> None:
    """B against A, layer by layer (by name), then the totals."""
    out = out or sys.stdout
    la = {layer["name"]: layer for layer in a["layers"]}
    lb = {layer["name"]: layer for layer in b["layers"]}
    names = list(la) + [n for n in lb if n not in la]
    wn = max(5, *(len(n) for n in names))
    head = (f"{'layer':<{wn}} {'cycles A':>12} {'cycles B':>12} {'diff':>8} {'ms B':>9} {'util% A':>7} {'util% B':>7} "
            f"{'GB/s A':>6} {'GB/s B':>6}  changes")
    print(f"B = {b['model']}  against  A = {a['model']}", file=out)
    print(head, file=out)
    print("-" * len(head), file=out)
    for n in names:
        x, y = la.get(n), lb.get(n)
        if x is None or y is None:
            kept = x or y
            print(f"{n:<{wn}} {'only in ' + ('A' if y is None else 'B'):>34} ({kept['op']}, {kept['cycles']:,} cycles)",
                  file=out)
            continue
        if x["cycles"] == y["cycles"] == 0 and x["op"] == y["op"]:
            continue
        changes = [f"{k} {x.get(k) or '-'} -> {y.get(k) or '-'}" for k in ("mode", "loop_order", "format", "where")
                   if x.get(k) != y.get(k)]
        stalls = sorted(set(x["stall_cycles"]) | set(y["stall_cycles"]))
        moved = [(c, y["stall_cycles"].get(c, 0) - x["stall_cycles"].get(c, 0)) for c in stalls]
        changes += [f"{c} {d:+,}" for c, d in sorted(moved, key=lambda t: -abs(t[1]))[:2] if d]
        print(f"{n:<{wn}} {x['cycles']:>12,} {y['cycles']:>12,} {_pct(x['cycles'], y['cycles']):>8} {y['ms']:>9.4f} "
              f"{100 * x['mac_utilization']:>7.1f} {100 * y['mac_utilization']:>7.1f} {x['gbps']:>6.2f} {y['gbps']:>6.2f}  "
              f"{'; '.join(changes)}", file=out)
    ta, tb = a["total"], b["total"]
    print("-" * len(head), file=out)
    print(f"{'total':<{wn}} {ta['cycles']:>12,} {tb['cycles']:>12,} {_pct(ta['cycles'], tb['cycles']):>8} "
          f"{tb['ms']:>9.4f} {100 * ta['mac_utilization']:>7.1f} {100 * tb['mac_utilization']:>7.1f} "
          f"{ta['gbps']:>6.2f} {tb['gbps']:>6.2f}", file=out)


def plot_breakdown(report: dict[str, Any], path: str) -> None:
    """Stacked bars: each device layer's cycles as CU work plus each CU stall cause."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from snowir.tools.io import Outputs

    layers = [layer for layer in report["layers"] if layer["cycles"]]
    if not layers:
        raise SnowError(f"{report['model']}: no device layers to plot")
    causes = sorted({c for layer in layers for c in layer["stall_cycles"] if c.startswith("cu_")})
    fig, ax = plt.subplots(figsize=(max(6.0, 0.18 * len(layers) + 2), 3.6))
    xs = range(len(layers))
    work = [layer["cycles"] - sum(layer["stall_cycles"].get(c, 0) for c in causes) for layer in layers]
    ax.bar(xs, work, label="CU work", color="0.55")
    bottom = work
    for c in causes:
        v = [layer["stall_cycles"].get(c, 0) for layer in layers]
        ax.bar(xs, v, bottom=bottom, label=c)
        bottom = [p + q for p, q in zip(bottom, v)]
    ax.set_ylabel("cycles")
    ax.set_xticks(list(xs), [layer["name"] for layer in layers], rotation=90, fontsize=6)
    ax.set_title(f"{report['model']}: where each layer's cycles go")
    ax.legend(fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    outs = Outputs()
    outs.add(path, buf.getvalue())
    outs.commit()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="snow-report", description="Print, compare and plot snow-run reports.")
    p.add_argument("reports", nargs="+", help="one report (table) or two (B against A)")
    p.add_argument("--plot", help="write a PNG of the first report's per-layer cycle breakdown here")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if len(args.reports) > 2:
            raise SnowError("give one report (its table) or two (B against A)")
        reports = [load_report(r) for r in args.reports]
        if len(reports) == 1:
            print_table(reports[0])
        else:
            print_diff(*reports)
        if args.plot:
            plot_breakdown(reports[0], args.plot)
        return 0
    except BaseException as e:  # noqa: BLE001 - the one place errors become one line
        if isinstance(e, SystemExit | KeyboardInterrupt):
            raise
        if isinstance(e, BrokenPipeError):  # `snow-report r.json | head`
            return 0
        print(f"snow-report: error: {one_line(e)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
