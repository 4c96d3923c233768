"""Chrome / Perfetto trace-event JSON of a run: a track per CU, per load unit, and the control pipeline."""

from __future__ import annotations

import json
from typing import Any

from snowir.hw import SnowflakeConfig
from snowir.machine.timing import Timing


def trace_events(timing: Timing | None, hw: SnowflakeConfig, source: list | None = None) -> dict[str, Any]:
    """`source`: events to draw instead of `timing.events` (a whole model's layers on one time line)."""
    us_per_cycle = 1.0 / hw.clock_mhz
    tracks = ["control"] + [f"CU {c}" for c in range(hw.cus)] + [f"load unit {u}" for u in range(hw.load_units)] \
        + ["write-back"]
    tid = {name: i for i, name in enumerate(tracks)}
    events: list[dict[str, Any]] = [
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": i, "args": {"name": name}}
        for name, i in tid.items()
    ]
    events.append({"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "Snowflake"}})
    for e in (timing.events if source is None else source):
        targets = [f"CU {c}" for c in range(hw.cus)] if e.track == "CUs" else [e.track]
        for track in targets:
            events.append({"name": e.name, "ph": "X", "pid": 0, "tid": tid[track],
                           "ts": e.start * us_per_cycle, "dur": max(e.end - e.start, 0) * us_per_cycle})
    meta = {"clock_mhz": hw.clock_mhz, "events_dropped": timing.events_dropped if timing else 0}
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": meta}


def trace_bytes(timing: Timing | None, hw: SnowflakeConfig, events: list | None = None) -> bytes:
    return json.dumps(trace_events(timing, hw, events)).encode()


def write_trace(path: str, timing: Timing | None, hw: SnowflakeConfig, events: list | None = None) -> None:
    from snowir.tools.io import write_bytes_atomic

    write_bytes_atomic(path, trace_bytes(timing, hw, events))
