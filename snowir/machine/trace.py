"""Chrome / Perfetto trace-event JSON of a run: a track per CU, per load unit, and the control
pipeline; a model run's also the host's (its layers and the round trips between host and device
DRAM, on the same end-to-end time axis: snowir/driver/timeline.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from snowir.hw import SnowflakeConfig
from snowir.machine.timing import Timing


CUS = "CUs (lock step)"
"""One track for the CUs: every vector op is broadcast to all of them (C17 §3), so one span
per op says what each CU does; per-CU copies only multiplied the trace's size."""


HOST = "host"
"""The host CPU's track (a process of its own beside the machine's): its layers and round trips."""


def _tracks(hw: SnowflakeConfig) -> dict[str, int]:
    names = ["control", CUS] + [f"load unit {u}" for u in range(hw.load_units)] + ["write-back"]
    return {name: i for i, name in enumerate(names)}


def _records(timing: Timing | None, hw: SnowflakeConfig, source: list | None) -> Iterator[dict[str, Any]]:
    us_per_cycle = 1.0 / hw.clock_mhz
    tid = _tracks(hw)
    events = timing.events if source is None else source
    for name, i in tid.items():
        yield {"name": "thread_name", "ph": "M", "pid": 0, "tid": i, "args": {"name": name}}
    yield {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "Snowflake"}}
    if any(e.track == HOST for e in events):
        yield {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "host (Cortex-A9, estimated)"}}
        yield {"name": "thread_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": HOST}}
    for e in events:
        host = e.track == HOST
        record = {"name": e.label, "ph": "X", "pid": 1 if host else 0,
                  "tid": 0 if host else tid[CUS if e.track == "CUs" else e.track],
                  "ts": round(e.start * us_per_cycle, 4), "dur": round(max(e.end - e.start, 0) * us_per_cycle, 4)}
        args: dict[str, Any] = {}
        if e.count > 1:
            args["count"] = e.count
        if e.part:
            args["part"] = e.part
        if args:
            record["args"] = args
        yield record


def _meta(timing: Timing | None, hw: SnowflakeConfig) -> dict[str, Any]:
    return {"clock_mhz": hw.clock_mhz, "events_dropped": timing.events_dropped if timing else 0}


def _chunks(timing: Timing | None, hw: SnowflakeConfig, source: list | None) -> Iterator[bytes]:
    """The trace JSON in pieces, one event at a time: memory stays bounded by the events, not
    by their text (a ResNet-50 trace's text was 4.5 GB of Python strings)."""
    yield b'{"displayTimeUnit": "ns", "otherData": ' + json.dumps(_meta(timing, hw)).encode() + b', "traceEvents": [\n'
    first = True
    for record in _records(timing, hw, source):
        yield (b"" if first else b",\n") + json.dumps(record, separators=(",", ":")).encode()
        first = False
    yield b"\n]}\n"


def trace_bytes(timing: Timing | None, hw: SnowflakeConfig, events: list | None = None, gz: bool = False) -> bytes:
    """The whole trace; `gz`: gzip-compressed (for a path ending in .gz)."""
    data = b"".join(_chunks(timing, hw, events))
    if gz:
        import gzip

        return gzip.compress(data, compresslevel=6)
    return data


def write_trace(path: str, timing: Timing | None, hw: SnowflakeConfig, events: list | None = None) -> None:
    """Streamed to a temporary file beside `path`, renamed into place at the end; a path ending
    in .gz is gzip-compressed (Perfetto and chrome://tracing open it as it is)."""
    import gzip
    import os

    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with (gzip.open(tmp, "wb", compresslevel=6) if str(path).endswith(".gz") else open(tmp, "wb")) as f:
            for chunk in _chunks(timing, hw, events):
                f.write(chunk)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
