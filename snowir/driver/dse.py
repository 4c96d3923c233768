"""
Design-space exploration: one model over the cross product of hardware configurations
(`snow-dse`, tools/snow_dse.py).

Each configuration is one task: the model lowered for that machine and run on the machine
model (`run_model_on_device`, exactly what `snow-run --hw` does), summarised as one row. Tasks
run on Ray (a local runtime by default, an existing cluster by address) or, with one worker,
in this process. Every row is cached under `DIR/cache/` by (model hash, configuration,
pipeline, format), so a re-run computes only what is new.

The resource proxy of the plot is ours, written down (`PRICES`, docs/dse.md): every hardware
resource a sweep can change, each at a price per unit in MAC-equivalents (the MAC array scaled
by the clock, on-chip SRAM, load units and their ports, shared DRAM bandwidth), summed. It ranks
configurations, it does not cost them.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import hashlib
import io
import itertools
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snowir import writeback
from snowir.driver import bound
from snowir.driver.files import write_text_atomic
from snowir.driver.model_api import run_model_on_device
from snowir.driver.model_run import hw_file
from snowir.errors import SnowError
from snowir.hw import ConfigError, SnowflakeConfig

STALLS = ("raw", "load_wait", "icache", "cu_starved", "cu_load_wait", "cu_drain")
CACHE_VERSION = 6  # 5: the bound columns; 6: a strided conv's compulsory input (bound.py)
# what the Pareto front ranks by (`--objective`), as the row's column
OBJECTIVES = {"end-to-end": "end_to_end_ms", "device": "ms"}


@dataclass(frozen=True)
class Sweep:
    field: str
    values: tuple[Any, ...]


def parse_sweep(text: str) -> Sweep:
    """`FIELD=v1,v2,...` with values typed as the SnowflakeConfig field is."""
    field, eq, values = text.partition("=")
    field = field.strip().replace("-", "_")
    fields = {f.name for f in dataclasses.fields(SnowflakeConfig)}
    if not eq or not values.strip():
        raise SnowError(f"--sweep '{text}': give FIELD=v1,v2,...")
    if field not in fields:
        raise SnowError(f"--sweep '{text}': unknown hardware parameter '{field}'")
    kind = type(getattr(SnowflakeConfig(), field))
    out = []
    for v in values.split(","):
        try:
            out.append(kind(float(v)) if kind is float else int(v))
        except ValueError:
            raise SnowError(f"--sweep '{text}': '{v}' is not a {kind.__name__}") from None
    return Sweep(field, tuple(dict.fromkeys(out)))


def configs(base: SnowflakeConfig, sweeps: Sequence[Sweep]) -> list[SnowflakeConfig]:
    """The cross product, each validated and checked against the code generator, before
    anything runs: the first that cannot be used is one line naming its field."""
    names = [s.field for s in sweeps]
    if len(set(names)) != len(names):
        raise SnowError(f"--sweep: parameter '{next(n for n in names if names.count(n) > 1)}' swept twice")
    out = []
    for values in itertools.product(*(s.values for s in sweeps)):
        data = {**base.to_json(), **dict(zip(names, values))}
        label = ", ".join(f"{n}={v}" for n, v in zip(names, values))
        try:
            hw = SnowflakeConfig.from_json(data, f"config {label}")
        except ConfigError as e:
            raise SnowError(str(e)) from None
        out.append(hw)
    return out


# The resource proxy's prices in MAC-equivalents: the area of one 16-bit MAC (one DSP slice of
# the ZC706's XC7Z045) at the ZC706 build's 250 MHz. Our choices, each argued in docs/dse.md.
PRICES: dict[str, float] = {
    "mac": 1.0,          # per MAC of the array at 250 MHz; a faster clock is priced as more MACs
    "sram_kib": 0.37,    # per KiB of on-chip SRAM: the XC7Z045's 900 DSP slices against its 2,452 KiB of BRAM
    "load_unit": 8.0,    # per load unit: its DMA engine, ~1.8 k of the device's 218 k LUTs (0.8%, 7 DSPs' share)
    "port_gbps": 4.0,    # per GB/s of one load unit's port: its data path and FIFO widen with it
    "dram_gbps": 24.0,   # per GB/s of shared DRAM bandwidth: the build's 4.2 GB/s ~ 100, a sixth of it
}
# A write-back unit prices itself per vMAC (`WritebackUnit.area_per_vmac`, snowir/writeback.py).
REFERENCE_MHZ = SnowflakeConfig().clock_mhz  # the ZC706 build's clock: the default machine's
KIB = 1 << 10
ICACHE_INSTRUCTION_BYTES = 4
QUEUE_ENTRY_BYTES = 8  # one queued vector op (a 32-bit instruction and its operands)
# The fields the proxy does not price, and why: a sweep over one of them puts its
# configurations at one x position (snow-dse says so).
UNPRICED: dict[str, str] = {
    "scalar_latency": "a latency", "result_latency": "a latency", "vmov_cycles": "a latency",
    "ld_startup_cycles": "a latency", "branch_delay_slots": "fixed by the ISA", "registers": "fixed by the ISA",
    "element_bytes": "fixed by the ISA", "dram_bytes": "off-chip capacity: it decides what fits, not how fast",
}


def resource_breakdown(hw: SnowflakeConfig) -> dict[str, float]:
    """The proxy's terms, in MAC-equivalents (PRICES)."""
    sram = (hw.cus * hw.maps_banks * hw.maps_bank_bytes + hw.vmacs * hw.weights_buffer_bytes
            + hw.icache_instructions * ICACHE_INSTRUCTION_BYTES + hw.vector_queue_depth * QUEUE_ENTRY_BYTES)
    terms = {"macs": PRICES["mac"] * hw.macs * hw.clock_mhz / REFERENCE_MHZ,
             "sram": PRICES["sram_kib"] * sram / KIB,
             "load_units": hw.load_units * (PRICES["load_unit"] + PRICES["port_gbps"] * hw.unit_gbps),
             "dram_bandwidth": PRICES["dram_gbps"] * hw.dram_gbps}
    for unit in writeback.units():  # each unit the machine has, per vMAC, at the MAC array's clock
        if unit.machine_has(hw):
            terms[f"{unit.title}_unit"] = unit.area_per_vmac * hw.vmacs * hw.clock_mhz / REFERENCE_MHZ
    return terms


def resource_proxy(hw: SnowflakeConfig) -> float:
    """The configuration's resources at PRICES, summed: MAC-equivalents (module docstring)."""
    return round(sum(resource_breakdown(hw).values()), 3)


def unpriced(fields: Sequence[str]) -> list[str]:
    """The swept fields the proxy does not see, as `field (why)`."""
    return [f"{f} ({UNPRICED[f]})" for f in fields if f in UNPRICED]


def model_hash(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@functools.cache
def compiler_fingerprint() -> str:
    """A digest of the compiler's and machine model's sources: a cached row was computed by this
    very code, so a changed planner or timing rule recomputes it rather than serving stale rows."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parent.parent  # snowir/
    for path in sorted(root.rglob("*.py")):  # with dialects/ and passes/ when installed as one
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    for extra in ("dialects", "passes"):  # a source checkout keeps them beside snowir/
        for path in sorted((root.parent / extra).rglob("*.py")):
            digest.update(path.relative_to(root.parent).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def cache_key(model_sha: str, hw: SnowflakeConfig, pipeline: str | None, fmt: str) -> str:
    key = json.dumps({"v": CACHE_VERSION, "model": model_sha, "hw": hw.to_json(), "pipeline": pipeline,
                      "format": fmt, "compiler": compiler_fingerprint()}, sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def summarise(report: dict[str, Any], hw: SnowflakeConfig) -> dict[str, Any]:
    """One results row: every config field, then what the machine did."""
    total = report["total"]
    stalls = total.get("stall_cycles", {})
    row: dict[str, Any] = dict(hw.to_json())
    conv = [layer for layer in report["layers"] if layer["where"] == "device" and layer["op"] != "dense"]
    conv_ms = sum(layer["ms"] for layer in conv)
    conv_bound = [layer["bound_ms"] for layer in conv if layer.get("bound_ms") is not None]
    row.update({"cycles": total["cycles"], "ms": total["ms"], "conv_ms": conv_ms,
                # the bound on this machine (snowir/driver/bound.py): the device layers', its share
                # of `ms` and the resource binding most of it; conv_*: over conv_ms's layers
                "bound_ms": total.get("bound_ms"), "bound_share": total.get("bound_share"),
                "bound_by": total.get("bound_by"), "conv_bound_ms": sum(conv_bound) if conv_bound else None,
                "conv_bound_share": sum(conv_bound) / conv_ms if conv_bound and conv_ms else None,
                # below conv_bound_ms: the conv layers overlapping perfectly (bound.overlap_bound_ms)
                "conv_overlap_bound_ms": bound.overlap_bound_ms(conv, hw),
                "gbps": total["gbps"],
                # traffic, named apart from the config's `dram_bytes` (capacity) it used to overwrite
                "mac_utilization": total["mac_utilization"], "dram_traffic_bytes": total["dram_bytes"],
                "host_ms": total["host_ms"],
                # device + host + round trips: what a feature that moves host work (a write-back unit) changes
                "end_to_end_ms": total.get("end_to_end_ms"), "resource_proxy": resource_proxy(hw),
                "compile_s": total["compile_s"], "simulate_s": total["simulate_s"]})
    for cause in STALLS:
        row[f"stall_{cause}"] = int(stalls.get(cause, 0))
    return row


def run_one(model: str, hw_json: dict[str, Any], pipeline: str | None, fmt: str,
            input_shape: str | None) -> dict[str, Any]:
    """One configuration, as `snow-run MODEL --hw` runs it (also the Ray task's body)."""
    hw = SnowflakeConfig.from_json(hw_json)
    if pipeline is None and fmt != "Q8.8":  # the machine's own nn-prepare (partition-host, its write-back units' passes)
        with hw_file(hw) as path:
            result = run_model_on_device(model, pipeline=f"nn-prepare{{format={fmt} hw={json.dumps(str(path))}}}",
                                         input_shape=input_shape, hw=hw)
    else:
        result = run_model_on_device(model, pipeline=pipeline, input_shape=input_shape, hw=hw)
    return summarise(result.report, hw)


@dataclass
class Explorer:
    model: str
    out: Path
    pipeline: str | None = None
    format: str = "Q8.8"
    input_shape: str | None = None
    workers: int = 0
    """0: one per core (Ray); 1: in this process, without Ray."""
    address: str | None = None
    progress: Callable[[str], None] | None = None

    def run(self, hws: list[SnowflakeConfig]) -> list[dict[str, Any]]:
        cache = self.out / "cache"
        cache.mkdir(parents=True, exist_ok=True)
        sha = model_hash(self.model)
        rows: list[dict[str, Any] | None] = [None] * len(hws)
        paths = [cache / f"{cache_key(sha, hw, self.pipeline, self.format)}.json" for hw in hws]
        todo = []
        for i, (hw, path) in enumerate(zip(hws, paths)):
            if path.exists():  # the proxy is priced afresh: a change of PRICES needs no re-run
                rows[i] = {**json.loads(path.read_text()), "resource_proxy": resource_proxy(hw), "cached": True}
            else:
                todo.append((i, hw, path))
        done = len(hws) - len(todo)
        self._say(done, len(hws), f"{done} cached, {len(todo)} to run"
                  + ("" if not todo else " in this process" if self.workers == 1 else " on Ray"))
        t0 = time.perf_counter()

        for i, row in self._execute(todo):
            write_text_atomic(paths[i], json.dumps(row, sort_keys=True))
            rows[i] = {**row, "cached": False}
            done += 1
            self._say(done, len(hws), f"{_label(hws[i], hws)}: {row['ms']:.3f} ms")
        self.wall_s = time.perf_counter() - t0
        return [r for r in rows if r is not None]

    def _execute(self, todo):
        args = (self.pipeline, self.format, self.input_shape)
        labels = {i: _label(hw, [h for _, h, _ in todo]) for i, hw, _ in todo}
        if not todo:
            return
        if self.workers == 1:
            for i, hw, _ in todo:
                try:
                    yield i, run_one(self.model, hw.to_json(), *args)
                except SnowError as e:
                    raise SnowError(f"config {labels[i]}: {e}") from None
            return
        import ray

        started = not ray.is_initialized()
        if started:
            if self.address:
                ray.init(address=self.address, log_to_driver=False, logging_level="ERROR")
            else:
                ray.init(num_cpus=self.workers or os.cpu_count(), include_dashboard=False, log_to_driver=False,
                         logging_level="ERROR")
        try:
            # one task per worker process: xDSL's resource-blob table is process-wide, so a fresh
            # process per configuration keeps memory flat over a long sweep
            task = ray.remote(max_calls=1)(run_one)
            model = str(Path(self.model).resolve())
            pending = {task.remote(model, hw.to_json(), *args): i for i, hw, _ in todo}
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                i = pending.pop(ready[0])
                try:
                    yield i, ray.get(ready[0])
                except ray.exceptions.RayTaskError as e:
                    cause = e.cause if isinstance(e.cause, BaseException) else e
                    raise SnowError(f"config {labels[i]}: {str(cause).splitlines()[0]}") from None
        finally:
            if started:
                ray.shutdown()

    def _say(self, done: int, total: int, what: str) -> None:
        if self.progress:
            width = 24
            filled = width * done // max(total, 1)
            self.progress(f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {what}")


def _label(hw: SnowflakeConfig, hws: Sequence[SnowflakeConfig]) -> str:
    """The fields that vary across the sweep, as `field=value`."""
    base = hws[0].to_json()
    varying = [k for k in base if any(h.to_json()[k] != base[k] for h in hws)]
    return ", ".join(f"{k}={hw.to_json()[k]}" for k in varying) or "default"


def objective(rows: list[dict[str, Any]], name: str | None) -> str:
    """The row column the front ranks by: `name` (`--objective`), or by default end to end where
    some configuration runs layers on the host (its time and the round trips are then part of
    what a user waits for), else device ms. Refused in one line when unknown or not measured."""
    if name is None:
        name = "end-to-end" if any(r.get("host_ms") for r in rows) else "device"
    if name not in OBJECTIVES:
        raise SnowError(f"--objective '{name}': not one of {', '.join(OBJECTIVES)}")
    key = OBJECTIVES[name]
    if any(r.get(key) is None for r in rows):
        raise SnowError(f"--objective {name}: the runs have no {key} (no end-to-end timeline); use --objective device")
    return key


def pareto(rows: list[dict[str, Any]], key: str = "ms") -> list[bool]:
    """Rows no other row beats on both resource proxy and `key` (device `ms` or `end_to_end_ms`)."""
    front = []
    for r in rows:
        dominated = any((o["resource_proxy"] <= r["resource_proxy"] and o[key] <= r[key])
                        and (o["resource_proxy"] < r["resource_proxy"] or o[key] < r[key]) for o in rows)
        front.append(not dominated)
    return front


def csv_text(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def pareto_figure(rows: list[dict[str, Any]], fields: Sequence[str], model: str, dpi: int = 120, key: str = "ms"):
    """`key` (device `ms` or `end_to_end_ms`) against the resource proxy, the Pareto front marked
    and its points labelled first; other points are labelled where a label fits without
    overlapping (`place_labels`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    front = pareto(rows, key)
    fig, ax = plt.subplots(figsize=(7.5, 5), dpi=dpi)
    xs = [r["resource_proxy"] for r in rows]
    ys = [r[key] for r in rows]
    ax.scatter(xs, ys, c=["tab:red" if f else "tab:gray" for f in front], zorder=3)
    pts = sorted((x, y) for x, y, f in zip(xs, ys, front) if f)
    ax.step([p[0] for p in pts], [p[1] for p in pts], where="post", color="tab:red", lw=1, label="Pareto front")
    steps = [q for p, n in zip(pts, pts[1:] + pts[-1:]) for q in (p, (n[0], p[1]))]  # the drawn staircase
    wide = max(xs) > 4 * min(xs)  # a log axis only pays when the proxy spans a wide range
    if wide:
        ax.set_xscale("log")
    ax.set_xlabel(f"resource proxy: MAC-equivalents (docs/dse.md){' (log)' if wide else ''}")
    ax.set_ylabel("simulated ms (device layers)" if key == "ms" else "simulated ms end to end (device + host + round trips)")
    ax.set_title(f"{Path(model).name}: {len(rows)} configurations")
    ax.grid(alpha=0.3)
    ax.legend()
    ax.margins(0.12)  # room for the labels of the outermost points
    fig.tight_layout()
    order = sorted(range(len(rows)), key=lambda i: (not front[i], xs[i]))  # the front's labels first
    texts = [", ".join(f"{f}={rows[i][f]}" for f in fields) for i in order]
    place_labels(ax, [(xs[i], ys[i]) for i in order], texts, lines=[steps])
    return fig


def plot(rows: list[dict[str, Any]], fields: Sequence[str], model: str, key: str = "ms") -> bytes:
    import matplotlib.pyplot as plt

    fig = pareto_figure(rows, fields, model, key=key)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")  # the figure's dpi: the one its labels were placed at
    plt.close(fig)
    return buf.getvalue()


# Label offsets tried around a point, in points: right, left, above, below, the diagonals, each
# nearer first; beyond the first ring a leader line joins label and point.
DIRECTIONS = ((1, 0), (-1, 0), (0, 1), (0, -1), (1, 1), (-1, 1), (1, -1), (-1, -1))
RADII = (5, 14, 26, 40, 56)


def place_labels(ax, points: Sequence[tuple[float, float]], texts: Sequence[str],
                 lines: Sequence[Sequence[tuple[float, float]]] = (), fontsize: float = 7,
                 marker_px: float = 5.0) -> list[Any]:
    """Annotate each point (in priority order) at the nearest offset where its text stays inside
    the axes and covers no placed label, no point's marker, none of `lines` (polylines in data
    coordinates) and not the legend; a label with no such place is left out (None in the
    returned list). Call once the figure's layout is final: placement is in display pixels."""
    import numpy as np
    from matplotlib.text import Text

    renderer = ax.figure.canvas.get_renderer()
    ax.autoscale_view()
    frame = ax.get_window_extent(renderer)
    boxes = [np.array([[px - marker_px, py - marker_px, px + marker_px, py + marker_px]
                       for px, py in ax.transData.transform(points)]).reshape(-1, 4)]
    boxes += [_polyline_boxes(ax.transData.transform(line)) for line in lines if len(line) > 1]
    if ax.get_legend() is not None:
        boxes.append(np.array([_freeze_legend(ax, renderer)]))
    taken = np.concatenate(boxes)
    placed: list[Any] = []
    for xy, text in zip(points, texts):
        ann = _place_one(ax, renderer, xy, text, fontsize, frame, taken)
        placed.append(ann)
        if ann is not None:
            taken = np.vstack([taken, Text.get_window_extent(ann, renderer).padded(1).extents])
    return placed


def _freeze_legend(ax, renderer) -> tuple[float, float, float, float]:
    """The legend's box in pixels, pinned there: a `loc="best"` legend would otherwise move
    when the figure is drawn with the labels, onto one of them."""
    legend = ax.get_legend()
    box = legend.get_window_extent(renderer)
    corner = ax.transAxes.inverted().transform((box.x0, box.y0))
    legend.set_loc((float(corner[0]), float(corner[1])))
    return tuple(box.extents)


def _polyline_boxes(pixels, step: float = 3.0):
    """A polyline in display pixels as small boxes every `step` pixels along it: obstacles that
    a label must not cover, without a box per segment (a diagonal's box would cover its corner)."""
    import numpy as np

    out = []
    for (x0, y0), (x1, y1) in zip(pixels[:-1], pixels[1:]):
        n = max(2, int(np.hypot(x1 - x0, y1 - y0) / step) + 1)
        t = np.linspace(0.0, 1.0, n)
        xs, ys = x0 + t * (x1 - x0), y0 + t * (y1 - y0)
        out.append(np.stack([xs - 1, ys - 1, xs + 1, ys + 1], axis=1))
    return np.concatenate(out)


def _place_one(ax, renderer, xy, text: str, fontsize: float, frame, taken) -> Any:
    import numpy as np
    from matplotlib.text import Text

    for r in RADII:
        for dx, dy in DIRECTIONS:
            arrow = {"arrowstyle": "-", "color": "0.4", "lw": 0.6, "shrinkA": 0, "shrinkB": 3} if r > RADII[0] else None
            ann = ax.annotate(text, xy, xytext=(dx * r, dy * r), textcoords="offset points", fontsize=fontsize,
                              ha="left" if dx > 0 else "right" if dx < 0 else "center",
                              va="bottom" if dy > 0 else "top" if dy < 0 else "center", arrowprops=arrow)
            ann.update_positions(renderer)
            x0, y0, x1, y1 = Text.get_window_extent(ann, renderer).extents
            inside = frame.x0 <= x0 and x1 <= frame.x1 and frame.y0 <= y0 and y1 <= frame.y1
            if inside and not np.any((taken[:, 0] < x1) & (taken[:, 2] > x0) & (taken[:, 1] < y1) & (taken[:, 3] > y0)):
                return ann
            ann.remove()
    return None
