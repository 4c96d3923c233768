"""
snow-report: read, compare and plot snow-run JSON reports.

    snow-report A.json                 the per-layer table (as snow-run prints it)
    snow-report A.json B.json          what differs in the runs' provenance (pipeline, format,
                                       calibration, model, engine) and machine (hw), then
                                       per-layer and total differences, B against A: cycles, ms,
                                       GB/s, utilisation, stall cycles, loop order, mode; then
                                       end to end: device, host and round-trip ms, their sum
                                       and the device's share
    snow-report A.json --plot t.png    per device layer, its cycles split into CU work and each
                                       CU stall cause (where the time goes), and a per-layer
                                       roofline; `snow-run MODEL --plot t.png` adds the DRAM
                                       traffic of Mloop against Kloop per conv (C17 Figure 4)
    snow-report A B --plot t.png       the two runs side by side: per-layer cycles of A and B as
                                       grouped bars split by cause, B's change per layer, both
                                       rooflines; each run labelled with what differs in its
                                       provenance and hw

Layers are matched by name (a second layer of the same name, e.g. a dense layer's reshape, by
name and op); a layer in one report only is listed as added / removed. Errors are one line on
stderr with exit code 1.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Sequence
from os.path import commonprefix
from pathlib import Path
from typing import Any

from snowir.driver.dse import place_labels
from snowir.driver.files import Outputs
from snowir.driver.table import print_table
from snowir.errors import SnowError, report_failure, wants_traceback

REQUIRED = ("model", "total", "layers")
LAYER_FIELDS = ("name", "op", "cycles", "ms", "mac_utilization", "gbps", "stall_cycles")
DPI = 110
ROOFLINE_LABELS = 8  # the layers labelled on a roofline: those losing the most time under the roof


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


def _show(v: Any) -> str:
    """A provenance or hw value as one short word: digests cut to 12 hex digits."""
    if v is None:
        return "none"
    text = str(v)
    digest = text.removeprefix("sha256:")
    if len(digest) >= 40 and all(c in "0123456789abcdef" for c in digest):
        return text[: len(text) - len(digest) + 12] + "…"
    return text


def _differing(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return [k for k in list(a) + [k for k in b if k not in a] if a.get(k) != b.get(k)]


def provenance_lines(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """What differs between the runs, `key: A value -> B value` a line: provenance first (how
    the model was compiled and run), then the machine (`hw.` keys)."""
    out = []
    for part, prefix in (("provenance", ""), ("hw", "hw.")):
        pa, pb = a.get(part), b.get(part)
        missing = [side for side, p in (("A", pa), ("B", pb)) if not isinstance(p, dict)]
        if missing:
            out += [f"{side} has no {part}" for side in missing]
            continue
        keys = _differing(pa, pb)
        out += [f"{prefix}{k}: {_show(pa.get(k))} -> {_show(pb.get(k))}" for k in keys] or [f"same {part}"]
    return out


def _by_name(layers: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Layers keyed by name; a repeated name (a dense layer and its reshape share one) keyed by
    name and op, so it neither hides the first nor goes unmatched."""
    out: dict[str, dict[str, Any]] = {}
    for layer in layers:
        key = layer["name"] if layer["name"] not in out else f"{layer['name']} ({layer['op']})"
        out[key] = layer
    return out


def print_diff(a: dict[str, Any], b: dict[str, Any], out=None) -> None:
    """What differs in provenance and hw, then B against A layer by layer (by name), then the totals."""
    out = out or sys.stdout
    for line in provenance_lines(a, b):
        print(line, file=out)
    print(file=out)
    la, lb = _by_name(a["layers"]), _by_name(b["layers"])
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
        if x["cycles"] == y["cycles"] == 0 and x["op"] == y["op"] and x.get("saturated") == y.get("saturated"):
            continue
        changes = [f"{k} {x.get(k) or '-'} -> {y.get(k) or '-'}" for k in ("mode", "loop_order", "format", "where")
                   if x.get(k) != y.get(k)]
        if x.get("saturated", 0) != y.get("saturated", 0):  # e.g. Q8.8 against auto
            changes.append(f"saturated {x.get('saturated', 0):,} -> {y.get('saturated', 0):,}")
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
    for line in end_to_end_lines(ta, tb):
        print(line, file=out)


E2E_ROWS = (("device ms", "ms"), ("host ms", "host_ms"), ("round trip ms", "round_trip_ms"),
            ("end_to_end_ms", "end_to_end_ms"))


def end_to_end_lines(ta: dict[str, Any], tb: dict[str, Any]) -> list[str]:
    """The two runs end to end (docs/machine.md "End-to-end time"): device, host and round-trip
    ms, their sum and the device's share, A and B; "-" where a report has none (the golden
    model, an older report)."""
    def ms(t: dict[str, Any], key: str) -> str:
        return f"{t[key]:.4f}" if t.get(key) is not None else "-"

    lines = ["", f"{'end to end':<14} {'A':>12} {'B':>12} {'diff':>8}"]
    for label, key in E2E_ROWS:
        a, b = ta.get(key), tb.get(key)
        diff = _pct(a, b) if a is not None and b is not None else "-"
        lines.append(f"{label:<14} {ms(ta, key):>12} {ms(tb, key):>12} {diff:>8}")
    share = [f"{100 * t['device_share']:.1f}%" if t.get("device_share") is not None else "-" for t in (ta, tb)]
    moved = f"{100 * (tb['device_share'] - ta['device_share']):+.1f}pt" \
        if None not in (ta.get("device_share"), tb.get("device_share")) else "-"
    lines.append(f"{'device share':<14} {share[0]:>12} {share[1]:>12} {moved:>8}")
    return lines


# ---------------------------------------------------------------------------------- plots

def _figure(panels: int, width: float, heights: Sequence[float]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # the figure's dpi is the saved one: labels are placed in its pixels
    return plt.subplots(panels, 1, figsize=(width, sum(heights)), dpi=DPI, gridspec_kw={"height_ratios": heights})


def _save(fig, path: str) -> None:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    outs = Outputs()
    outs.add(path, buf.getvalue())
    outs.commit()


def _device(report: dict[str, Any]) -> list[dict[str, Any]]:
    layers = [layer for layer in report["layers"] if layer["cycles"]]
    if not layers:
        raise SnowError(f"{report['model']}: no device layers to plot")
    return layers


def plot_report(report: dict[str, Any], path: str, loop_bytes: dict[str, tuple[int, int]] | None = None) -> None:
    """The report's plots in one PNG (`report_figure`)."""
    _save(report_figure(report, loop_bytes), path)


def report_figure(report: dict[str, Any], loop_bytes: dict[str, tuple[int, int]] | None = None):
    """Where each device layer's cycles go (CU work and each CU stall cause), a per-layer
    roofline (attained MAC/s against MACs per DRAM byte, under the bus and the MAC-array
    roofs), and, given the planner's estimates (`snow-run --plot`), the DRAM traffic of Mloop
    against Kloop per conv (C17 Figure 4)."""
    layers = _device(report)
    panels = 3 if loop_bytes else 2
    width = max(7.0, 0.18 * len(layers) + 2)
    fig, axes = _figure(panels, width, [3.8] * panels)
    _breakdown(axes[0], report, layers)
    labels = _roofline(axes[1], [(report, layers, "o", "")])
    if loop_bytes:
        _loop_orders(axes[2], layers, loop_bytes, width)
    fig.tight_layout()
    place_labels(axes[1], *labels)  # in pixels: after the layout
    return fig


def _causes(runs: Sequence[list[dict[str, Any]]]) -> list[str]:
    return sorted({c for layers in runs for layer in layers for c in layer["stall_cycles"] if c.startswith("cu_")})


def _split(layer: dict[str, Any] | None, causes: list[str]) -> list[int]:
    """A layer's cycles as CU work, then each CU stall cause (zeros for a layer not there)."""
    if layer is None:
        return [0] * (len(causes) + 1)
    stalls = [layer["stall_cycles"].get(c, 0) for c in causes]
    return [layer["cycles"] - sum(stalls), *stalls]


def _stack(ax, xs: Sequence[float], splits: list[list[int]], width: float, colours: list, hatch: str | None,
           labels: list[str] | None) -> None:
    bottom = [0] * len(xs)
    for j, colour in enumerate(colours):
        v = [s[j] for s in splits]
        ax.bar(xs, v, width=width, bottom=bottom, color=colour, hatch=hatch, edgecolor="white" if hatch else None,
               linewidth=0, label=labels[j] if labels else None)
        bottom = [p + q for p, q in zip(bottom, v)]


def _cause_colours(causes: list[str]) -> list:
    import matplotlib

    cycle = matplotlib.colormaps["tab10"].colors
    return ["0.55", *(cycle[i % len(cycle)] for i in range(len(causes)))]


def _breakdown(ax, report: dict[str, Any], layers: list[dict[str, Any]]) -> None:
    causes = _causes([layers])
    _stack(ax, range(len(layers)), [_split(layer, causes) for layer in layers], 0.8, _cause_colours(causes), None,
           ["CU work", *causes])
    ax.set_ylabel("cycles")
    _layer_ticks(ax, [layer["name"] for layer in layers])
    ax.set_title(f"{report['model']}: where each layer's cycles go")
    ax.legend(fontsize=7)


def _layer_ticks(ax, names: list[str]) -> None:
    ax.set_xticks(range(len(names)), names, rotation=90, fontsize=6)
    ax.set_xlim(-0.6, len(names) - 0.4)


def _roofs(hw: dict[str, Any]) -> tuple[float, float]:
    """The MAC array's peak (MAC/s) and the bus (bytes/s)."""
    return hw["cus"] * hw["vmacs_per_cu"] * hw["macs_per_vmac"] * hw["clock_mhz"] * 1e6, hw["dram_gbps"] * 1e9


Run = tuple[dict[str, Any], list[dict[str, Any]], str, str]  # report, its device layers, marker, label


def _roofline(ax, runs: Sequence[Run]) -> tuple[list, list[str], list]:
    """The runs' layers under their roofs; returns what to label (`place_labels`' points, texts
    and lines), to be placed once the figure's layout is final: the layers losing the most time
    under the roof, each once."""
    colours = {"COOP": "tab:blue", "INDP": "tab:orange"}
    lost: dict[str, tuple[float, tuple[float, float]]] = {}
    roofs, styles = [], ("-", "--")
    for k, (report, layers, marker, label) in enumerate(runs):
        peak, bus = _roofs(report["hw"])
        pts = [(layer["macs"] / layer["dram_bytes"], layer["macs"] / (layer["ms"] * 1e-3), layer)
               for layer in layers if layer["dram_bytes"] and layer["ms"] and layer["macs"]]
        for x, y, layer in pts:
            ax.scatter(x, y, s=16, marker=marker, color=colours.get(layer["mode"], "tab:green"), zorder=3)
            # time the layer would save at the roof: far below it and long-running first
            gap = layer["ms"] * (1 - y / min(peak, bus * x))
            if gap > lost.get(layer["name"], (0.0,))[0]:
                lost[layer["name"]] = (gap, (x, y))
        if pts:
            roofs.append((peak, bus, min(p[0] for p in pts), max(p[0] for p in pts), styles[k % 2],
                          f"{label + ' ' if label else ''}roofs: {report['hw']['dram_gbps']} GB/s, "
                          f"{peak / 1e9:.0f} GMAC/s"))
    if not roofs:
        ax.set_title("roofline: no layer with MACs")
        return [], [], []
    lo, hi = min(r[2] for r in roofs) / 2, max(max(r[3] for r in roofs) * 2, *(2 * r[0] / r[1] for r in roofs))
    xs = [lo * (hi / lo) ** (i / 100) for i in range(101)]
    lines = []
    for peak, bus, _, _, style, text in roofs:
        lines.append([(x, min(peak, bus * x)) for x in xs])
        ax.plot(xs, [p[1] for p in lines[-1]], color="k", lw=1.2, ls=style, label=text)
    for mode, c in colours.items():
        ax.scatter([], [], color=c, label=mode, s=14)
    for _, _, marker, label in runs if len(runs) > 1 else ():
        ax.scatter([], [], color="0.4", marker=marker, label=label, s=16)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity: useful MACs per DRAM byte")
    ax.set_ylabel("attained useful MAC/s")
    ax.set_title(f"per-layer roofline (labelled: up to {ROOFLINE_LABELS} layers, those losing the most time "
                 "under their roof)", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper left")  # above the bandwidth roof: no layer is there
    top = sorted(lost.items(), key=lambda kv: -kv[1][0])[:ROOFLINE_LABELS]
    return [xy for _, (_, xy) in top], [name for name, _ in top], lines


# What the measured marker counts that the estimates do not (issue 29: it sat 2-4.5x above both
# on some layers; same unit, bytes, on both). The estimates (ConvPlan.dram_bytes) are the maps and
# weights LDs of each order; the report's dram_bytes is everything that crossed the bus while the
# layer ran (Timing.dram_bytes). Split by kind on digits, ResNet-18 and AlexNet-OWT, the chosen
# order's LDs equal its estimate to the byte once the residual and partial-sum loads (bypass)
# and a fused pool's re-reads of the conv output are taken out; the rest is write-backs and
# icache loads. E.g. ResNet-18 conv1: estimate 1.06 MB, measured 4.72 MB = 1.05 maps + 0.02
# weights + 1.61 pool re-reads + 2.01 write-backs (conv output and pooled) + 0.04 icache.
MEASURED_NOTE = ("estimates: the maps and weights LDs of each order; measured: every DRAM byte the layer "
                 "moved, i.e. the chosen order's LDs plus its output write-backs, residual (bypass) and "
                 "partial-sum loads, a fused max pool's re-reads and writes, and its code's icache loads")


def _loop_orders(ax, layers: list[dict[str, Any]], loop_bytes: dict[str, tuple[int, int]], width: float) -> None:
    import textwrap

    convs = [layer for layer in layers if layer["name"] in loop_bytes]
    xs = range(len(convs))
    m = [loop_bytes[layer["name"]][0] / 1e6 for layer in convs]
    k = [loop_bytes[layer["name"]][1] / 1e6 for layer in convs]
    ax.bar([x - 0.2 for x in xs], m, width=0.4, label="Mloop (estimated LDs)", color="tab:purple")
    ax.bar([x + 0.2 for x in xs], k, width=0.4, label="Kloop (estimated LDs)", color="tab:olive")
    chosen = [(x + (-0.2 if layer["loop_order"] == "Mloop" else 0.2), layer["dram_bytes"] / 1e6)
              for x, layer in zip(xs, convs)]
    ax.scatter([c[0] for c in chosen], [c[1] for c in chosen], marker="_", s=80, color="k", zorder=3,
               label="measured, all bus bytes (chosen order)")
    _layer_ticks(ax, [layer["name"] for layer in convs])
    ax.set_ylabel("DRAM MB per layer")
    note = "\n".join(textwrap.wrap(MEASURED_NOTE, int(width * 15)))
    ax.set_title(f"Mloop against Kloop (C17 Figure 4)\n{note}", fontsize=8)
    ax.legend(fontsize=7)


# ------------------------------------------------------------------------ two runs, compared

def _shorten(va: str, vb: str, width: int = 36) -> tuple[str, str]:
    """Two differing strings cut to where they differ, with some context, when long (two
    pipelines differ in one option, not in their first 36 characters)."""
    pre = len(commonprefix([va, vb]))
    suf = len(commonprefix([va[pre:][::-1], vb[pre:][::-1]]))
    lo = max(0, pre - 8)

    def cut(v: str) -> str:
        if len(v) <= width:
            return v
        hi = min(len(v), max(len(v) - suf + 8, pre + 1))
        mid = v[lo:hi] if hi - lo <= width else v[lo:lo + width - 1] + "…"
        return ("…" if lo else "") + mid + ("…" if hi < len(v) else "")

    return cut(va), cut(vb)


def run_labels(a: dict[str, Any], b: dict[str, Any], names: Sequence[str] = ("A", "B")) -> tuple[str, str]:
    """A and B named by what differs between them (provenance, then hw; at most 3 items),
    rather than by the model they share; by file name if nothing recorded differs."""
    items: list[tuple[str, str, str]] = []
    for part in ("provenance", "hw"):
        pa, pb = a.get(part), b.get(part)
        if not (isinstance(pa, dict) and isinstance(pb, dict)):
            continue
        keys = _differing(pa, pb)
        if "model" in keys and "model_sha256" in keys:
            keys.remove("model_sha256")  # another file: its digest says nothing more
        elif "model" in keys and part == "provenance":
            keys.remove("model")  # the same bytes by another path
        items += [(k, *_shorten(_show(pa.get(k)), _show(pb.get(k)))) for k in keys]
    if not items:
        return f"A: {Path(names[0]).name}", f"B: {Path(names[1]).name}"
    more = f"; +{len(items) - 3} more" if len(items) > 3 else ""
    return tuple(f"{side}: " + "; ".join(f"{k}={v[i]}" for k, *v in items[:3]) + more  # type: ignore[return-value]
                 for i, side in enumerate(("A", "B")))


def merged_order(a: list[str], b: list[str]) -> list[str]:
    """A's layers in order, each of B's own after the layer it follows in B: a conv split into
    parts in one run stays beside its whole in the other, not at the end of the plot."""
    out = list(a)
    at = 0
    for n in b:
        if n in a:
            at = out.index(n) + 1
        else:
            out.insert(at, n)
            at += 1
    return out


def compare_figure(a: dict[str, Any], b: dict[str, Any], labels: tuple[str, str]):
    """A and B side by side: per layer, their cycles as grouped bars split by cause; B's change
    per layer; both rooflines. The suptitle names A and B by `labels`."""
    da, db = _by_name(_device(a)), _by_name(_device(b))
    names = merged_order(list(da), list(db))
    width = max(8.0, 0.22 * len(names) + 2.5)
    fig, axes = _figure(3, width, [4.2, 2.4, 4.2])
    _grouped(axes[0], names, da, db)
    _change(axes[1], names, da, db, a, b)
    roof = _roofline(axes[2], [(a, list(da.values()), "o", "A"), (b, list(db.values()), "^", "B")])
    # the runs named once, by what differs between them; the panels say A and B
    model = Path(a["model"]).name if Path(a["model"]).name == Path(b["model"]).name else f"{a['model']} / {b['model']}"
    fig.suptitle(f"{model}, B against A\n{labels[0]}\n{labels[1]}", fontsize=9)
    fig.tight_layout()
    place_labels(axes[2], *roof)  # in pixels: after the layout
    return fig


def plot_compare(a: dict[str, Any], b: dict[str, Any], path: str, names: Sequence[str] = ("A", "B")) -> None:
    _save(compare_figure(a, b, run_labels(a, b, names)), path)


def _grouped(ax, names: list[str], da: dict, db: dict) -> None:
    """Per layer, A's cycles (left, plain) beside B's (right, hatched), each split by cause."""
    from matplotlib.patches import Patch

    causes = _causes([list(da.values()), list(db.values())])
    colours = _cause_colours(causes)
    xs = range(len(names))
    _stack(ax, [x - 0.2 for x in xs], [_split(da.get(n), causes) for n in names], 0.4, colours, None,
           ["CU work", *causes])
    _stack(ax, [x + 0.2 for x in xs], [_split(db.get(n), causes) for n in names], 0.4, colours, "////", None)
    handles, texts = ax.get_legend_handles_labels()
    handles += [Patch(facecolor="0.8"), Patch(facecolor="0.8", hatch="////", edgecolor="white")]
    # beside the axes: over the bars it would hide the tallest layers
    ax.legend(handles, texts + ["A (left)", "B (right, hatched)"], fontsize=7, loc="upper left",
              bbox_to_anchor=(1.005, 1.0))
    ax.set_ylabel("cycles")
    _layer_ticks(ax, names)
    ax.set_title("where each layer's cycles go: A (left) and B (right)")


def _change(ax, names: list[str], da: dict, db: dict, a: dict[str, Any], b: dict[str, Any]) -> None:
    """B's cycles against A's per layer, in percent: below zero B is faster."""
    xs, vs, lone = [], [], []
    for x, n in enumerate(names):
        if n in da and n in db and da[n]["cycles"]:
            xs.append(x)
            vs.append(100 * (db[n]["cycles"] / da[n]["cycles"] - 1))
        else:
            lone.append((x, "A only" if n in da else "B only"))
    ax.bar(xs, vs, color=["tab:red" if v > 0 else "tab:green" for v in vs], width=0.7)
    for x, text in lone:  # mid-height whatever the bars' range (x in data, y in axes coordinates)
        ax.text(x, 0.5, text, rotation=90, fontsize=6, ha="center", va="center", color="0.4",
                transform=ax.get_xaxis_transform())
    ax.axhline(0, color="k", lw=0.6)
    ax.set_ylabel("B cycles vs A, %")
    _layer_ticks(ax, names)
    ta, tb = a["total"]["cycles"], b["total"]["cycles"]
    ax.set_title(f"per-layer change, B against A (total {ta:,} -> {tb:,} cycles, {_pct(ta, tb)}; "
                 "red: B slower)", fontsize=9)
    ax.grid(alpha=0.3, axis="y")


def snowir_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("snowir")
    except PackageNotFoundError:
        return "unknown"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="snow-report", description="Print, compare and plot snow-run reports.")
    p.add_argument("reports", nargs="+", help="one report (table) or two (B against A)")
    p.add_argument("--plot", help="write a PNG here: of one report, its per-layer cycle breakdown and roofline "
                                  "(snow-run --plot adds Mloop against Kloop); of two, both side by side")
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
        if args.plot and len(reports) == 2:
            plot_compare(*reports, args.plot, args.reports)
        elif args.plot:
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
