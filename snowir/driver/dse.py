"""
Design-space exploration: one model over the cross product of hardware configurations
(`snow-dse`, tools/snow_dse.py).

Each configuration is one task: the model lowered for that machine and run on the machine
model (`run_model_on_device`, exactly what `snow-run --hw` does), summarised as one row. Tasks
run on Ray (a local runtime by default, an existing cluster by address) or, with one worker,
in this process. Every row is cached under `DIR/cache/` by (model hash, configuration,
pipeline, format), so a re-run computes only what is new.

The resource proxy of the plot is ours, written down: MACs x on-chip buffer bytes (maps banks
of every CU plus the weights buffer of every vMAC). Area grows with both; the proxy ranks
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

from snowir.driver.files import write_text_atomic
from snowir.driver.model_api import run_model_on_device
from snowir.errors import SnowError
from snowir.hw import ConfigError, SnowflakeConfig

STALLS = ("raw", "load_wait", "icache", "cu_starved", "cu_load_wait", "cu_drain")
CACHE_VERSION = 2


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


def resource_proxy(hw: SnowflakeConfig) -> float:
    """MACs x on-chip buffer bytes (our proxy for area, module docstring)."""
    buffers = hw.cus * hw.maps_banks * hw.maps_bank_bytes + hw.vmacs * hw.weights_buffer_bytes
    return float(hw.macs * buffers)


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
    row.update({"cycles": total["cycles"], "ms": total["ms"], "conv_ms": sum(layer["ms"] for layer in conv),
                "gbps": total["gbps"],
                "mac_utilization": total["mac_utilization"], "dram_bytes": total["dram_bytes"],
                "host_ms": total["host_ms"], "resource_proxy": resource_proxy(hw),
                "compile_s": total["compile_s"], "simulate_s": total["simulate_s"]})
    for cause in STALLS:
        row[f"stall_{cause}"] = int(stalls.get(cause, 0))
    return row


def run_one(model: str, hw_json: dict[str, Any], pipeline: str | None, fmt: str,
            input_shape: str | None) -> dict[str, Any]:
    """One configuration, as `snow-run MODEL --hw` runs it (also the Ray task's body)."""
    hw = SnowflakeConfig.from_json(hw_json)
    if pipeline is None and fmt != "Q8.8":
        pipeline = f"nn-prepare{{format={fmt}}}"
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
            if path.exists():
                rows[i] = {**json.loads(path.read_text()), "cached": True}
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


def pareto(rows: list[dict[str, Any]]) -> list[bool]:
    """Rows no other row beats on both resource proxy and ms."""
    front = []
    for r in rows:
        dominated = any((o["resource_proxy"] <= r["resource_proxy"] and o["ms"] <= r["ms"])
                        and (o["resource_proxy"] < r["resource_proxy"] or o["ms"] < r["ms"]) for o in rows)
        front.append(not dominated)
    return front


def csv_text(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def plot(rows: list[dict[str, Any]], fields: Sequence[str], model: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    front = pareto(rows)
    fig, ax = plt.subplots(figsize=(7.5, 5))
    xs = [r["resource_proxy"] for r in rows]
    ys = [r["ms"] for r in rows]
    ax.scatter(xs, ys, c=["tab:red" if f else "tab:gray" for f in front], zorder=3)
    pts = sorted((x, y) for x, y, f in zip(xs, ys, front) if f)
    ax.step([p[0] for p in pts], [p[1] for p in pts], where="post", color="tab:red", lw=1, label="Pareto front")
    for r in rows:
        ax.annotate(", ".join(f"{f}={r[f]}" for f in fields), (r["resource_proxy"], r["ms"]), fontsize=7,
                    xytext=(4, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("resource proxy: MACs x on-chip buffer bytes (log)")
    ax.set_ylabel("simulated ms (device layers)")
    ax.set_title(f"{Path(model).name}: {len(rows)} configurations")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    return buf.getvalue()
