"""
snow-report: read, compare and plot snow-run JSON reports.

    snow-report A.json                 the per-layer table (as snow-run prints it)
    snow-report A.json B.json          per-layer and total differences, B against A: cycles, ms,
                                       GB/s, utilisation, stall cycles, loop order, mode
    snow-report A.json --plot t.png    per device layer, its cycles split into CU work and each
                                       CU stall cause (where the time goes), and a per-layer
                                       roofline; `snow-run MODEL --plot t.png` adds the DRAM
                                       traffic of Mloop against Kloop per conv (C17 Figure 4)

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

from snowir.errors import SnowError, report_failure, wants_traceback
from snowir.driver.table import print_table

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


def plot_report(report: dict[str, Any], path: str, loop_bytes: dict[str, tuple[int, int]] | None = None) -> None:
    """The report's plots in one PNG: where each device layer's cycles go (CU work and each CU
    stall cause), a per-layer roofline (attained MAC/s against MACs per DRAM byte, under the
    bus and the MAC-array roofs), and, given the planner's estimates (`snow-run --plot`), the
    DRAM traffic of Mloop against Kloop per conv (C17 Figure 4)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from snowir.driver.files import Outputs

    layers = [layer for layer in report["layers"] if layer["cycles"]]
    if not layers:
        raise SnowError(f"{report['model']}: no device layers to plot")
    panels = 3 if loop_bytes else 2
    width = max(7.0, 0.18 * len(layers) + 2)
    fig, axes = plt.subplots(panels, 1, figsize=(width, 3.8 * panels))
    _breakdown(axes[0], report, layers)
    _roofline(axes[1], report, layers)
    if loop_bytes:
        _loop_orders(axes[2], report, layers, loop_bytes)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    outs = Outputs()
    outs.add(path, buf.getvalue())
    outs.commit()


def _breakdown(ax, report: dict[str, Any], layers: list[dict[str, Any]]) -> None:
    causes = sorted({c for layer in layers for c in layer["stall_cycles"] if c.startswith("cu_")})
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


def _roofline(ax, report: dict[str, Any], layers: list[dict[str, Any]]) -> None:
    hw = report["hw"]
    peak = hw["cus"] * hw["vmacs_per_cu"] * hw["macs_per_vmac"] * hw["clock_mhz"] * 1e6  # MAC/s
    bus = hw["dram_gbps"] * 1e9  # bytes/s
    pts = [(layer["macs"] / layer["dram_bytes"], layer["macs"] / (layer["ms"] * 1e-3), layer)
           for layer in layers if layer["dram_bytes"] and layer["ms"] and layer["macs"]]
    if not pts:
        ax.set_title("roofline: no layer with MACs")
        return
    lo = min(p[0] for p in pts) / 2
    hi = max(max(p[0] for p in pts) * 2, 2 * peak / bus)
    xs = [lo * (hi / lo) ** (i / 100) for i in range(101)]
    ax.plot(xs, [min(peak, bus * x) for x in xs], color="k", lw=1.2,
            label=f"roofs: {hw['dram_gbps']} GB/s, {peak / 1e9:.0f} GMAC/s")
    colours = {"COOP": "tab:blue", "INDP": "tab:orange"}
    for x, y, layer in pts:
        ax.scatter(x, y, s=14, color=colours.get(layer["mode"], "tab:green"), zorder=3)
    for mode, c in colours.items():
        ax.scatter([], [], color=c, label=mode, s=14)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity: useful MACs per DRAM byte")
    ax.set_ylabel("attained useful MAC/s")
    ax.set_title("per-layer roofline")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)


def _loop_orders(ax, report: dict[str, Any], layers: list[dict[str, Any]],
                 loop_bytes: dict[str, tuple[int, int]]) -> None:
    convs = [layer for layer in layers if layer["name"] in loop_bytes]
    xs = range(len(convs))
    m = [loop_bytes[layer["name"]][0] / 1e6 for layer in convs]
    k = [loop_bytes[layer["name"]][1] / 1e6 for layer in convs]
    ax.bar([x - 0.2 for x in xs], m, width=0.4, label="Mloop (estimated)", color="tab:purple")
    ax.bar([x + 0.2 for x in xs], k, width=0.4, label="Kloop (estimated)", color="tab:olive")
    chosen = [(x + (-0.2 if layer["loop_order"] == "Mloop" else 0.2), layer["dram_bytes"] / 1e6)
              for x, layer in zip(xs, convs)]
    ax.scatter([c[0] for c in chosen], [c[1] for c in chosen], marker="_", s=80, color="k", zorder=3,
               label="measured, chosen order")
    ax.set_xticks(list(xs), [layer["name"] for layer in convs], rotation=90, fontsize=6)
    ax.set_ylabel("DRAM MB per layer")
    ax.set_title("Mloop against Kloop (C17 Figure 4)")
    ax.legend(fontsize=7)


def snowir_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("snowir")
    except PackageNotFoundError:
        return "unknown"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="snow-report", description="Print, compare and plot snow-run reports.")
    p.add_argument("reports", nargs="+", help="one report (table) or two (B against A)")
    p.add_argument("--plot", help="write a PNG of the first report's plots here: per-layer cycle breakdown "
                                  "and roofline (snow-run --plot adds Mloop against Kloop)")
    p.add_argument("--version", action="version", version=f"snow-report (snowir {snowir_version()})")
    p.add_argument("--traceback", action="store_true",
                   help="on an error, print the full Python traceback too (or set SNOWIR_TRACEBACK=1)")
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
            plot_report(reports[0], args.plot)
        return 0
    except BaseException as e:  # noqa: BLE001 - the one place errors become one line
        if isinstance(e, SystemExit | KeyboardInterrupt):
            raise
        if isinstance(e, BrokenPipeError):  # `snow-report r.json | head`
            return 0
        report_failure("snow-report", e, "snow-report", args.traceback or wants_traceback(argv))
        return 1


if __name__ == "__main__":
    sys.exit(main())
