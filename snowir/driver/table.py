"""
The per-layer table snow-run prints and snow-report reprints from a saved report: cycles, ms,
MACs, utilisation, traffic, the bound on the machine (its ms, the share of the layer's time it
is and whether compute, the bus or the load units' ports bind; snowir/driver/bound.py), mode and loop order, the share of the layer's values saturation
changed (`sat%`, "-" where none), the end-to-end time (device + host + round trips) and the
device's share of it, then the stall cycles by cause.
"""

from __future__ import annotations

import sys
from typing import Any

_STALL_HEADS = {"raw": "raw", "vector_queue": "vq", "load_wait": "ldwait", "icache": "icache", "dram_raw": "dramraw",
                "cu_starved": "cu:starved", "cu_load_wait": "cu:ldwait", "cu_drain": "cu:drain"}


def _saturated(row: dict[str, Any]) -> str:
    """The saturated share in percent, enough digits to show it is not 0; "-" where none."""
    if not row.get("saturated"):
        return "-"
    share = 100 * row.get("saturated_share", 0.0)
    return f"{share:.1f}" if share >= 1 else f"{share:.2g}"


def _bound(row: dict[str, Any]) -> str:
    """The layer's bound on the machine (snowir/driver/bound.py), the share of its time that is,
    and what binds it; dashes where there is none (host layers, older reports)."""
    if row.get("bound_ms") is None:
        return f"{'-':>9} {'-':>6} {'-':>7}"
    return f"{row['bound_ms']:>9.4f} {100 * row['bound_share']:>6.1f} {row['bound_by']:>7}"


def bound_line(total: dict[str, Any]) -> str | None:
    """The device layers' bound and the share of the device time it is; None without one."""
    if total.get("bound_ms") is None:
        return None
    return (f"bound {total['bound_ms']:.4f} ms (each device layer's larger of compute and compulsory traffic; "
            f"summed: compute {total['bound_compute_ms']:.4f}, traffic {total['bound_bus_ms']:.4f} ms, "
            f"{total['compulsory_bytes']:,} bytes) = {100 * total['bound_share']:.1f}% of the device time; "
            f"mostly {total['bound_by']}-bound" + (f"; layers overlapped, at least {total['overlap_bound_ms']:.4f} ms"
                                                   if total.get("overlap_bound_ms") is not None else ""))


def end_to_end_line(total: dict[str, Any]) -> str | None:
    """The run's end-to-end time (docs/machine.md "End-to-end time") and the device's share of
    it; None without a timeline (the golden model, older reports)."""
    if total.get("end_to_end_ms") is None:
        return None
    return (f"end to end {total['end_to_end_ms']:.4f} ms = device {total['ms']:.4f} + host {total['host_ms']:.4f} "
            f"+ round trips {total['round_trip_ms']:.4f} ({total['round_trip_bytes']:,} bytes); "
            f"device share {100 * total['device_share']:.1f}%")


def host_reason_lines(layers: list[dict], shown: int = 3) -> list[str]:
    """Why the host layers are there (their `host_reason`, as partition-host and the passes wrote
    it), one line per reason with the layers it holds for: the JSON report has each row's."""
    by_reason: dict[str, list[str]] = {}
    for r in layers:
        if r.get("where") == "host" and r.get("host_reason"):
            by_reason.setdefault(r["host_reason"], []).append(r["name"])
    if not by_reason:
        return []
    lines = ["on the host, and why:"]
    for reason, names in by_reason.items():
        more = f" and {len(names) - shown} more" if len(names) > shown else ""
        lines.append(f"  {', '.join(names[:shown])}{more}: {reason}")
    return lines


def print_table(report: dict[str, Any], out=None) -> None:
    """The per-layer table, then the stall cycles by cause of every device layer. Columns are
    as wide as their longest entry: names and ops are never cut."""
    out = out or sys.stdout
    total = dict(report["total"], name="total", op="", where="", mode=None, loop_order=None)
    rows = report["layers"] + [total]
    # a max pool its conv's program computed: "in <conv>" (its cycles are the conv's)
    where = [f"in {r['computed_by']}" if r.get("computed_by") else r.get("where", "") for r in rows]
    wn = max(5, *(len(r["name"]) for r in rows))
    wo = max(2, *(len(r["op"]) for r in rows))
    ww = max(6, *(len(w) for w in where))
    head = (f"{'layer':<{wn}} {'op':<{wo}} {'where':<{ww}} {'cycles':>12} {'ms':>9} {'host ms':>8} {'MACs':>14} "
            f"{'util%':>6} {'DRAM MB':>9} {'GB/s':>6} {'bound ms':>9} {'bound%':>6} {'by':>7} {'mode':>5} {'order':>6} "
            f"{'sat%':>6}")
    print(head, file=out)
    print("-" * len(head), file=out)
    # the golden model computes values, not time: its device layers have no cycles to show
    timed = (report.get("provenance") or {}).get("engine") != "golden"
    for r, w in zip(rows, where):
        host = f"{r['host_ms']:>8.3f}" if r.get("host_ms") else f"{'-':>8}"
        if timed:
            timing = (f"{r['cycles']:>12,} {r['ms']:>9.4f} {host} {r['macs']:>14,} {100 * r['mac_utilization']:>6.1f} "
                      f"{r['dram_bytes'] / 1e6:>9.3f} {r['gbps']:>6.2f} {_bound(r)}")
        else:
            timing = f"{'-':>12} {'-':>9} {host} {r['macs']:>14,} {'-':>6} {'-':>9} {'-':>6} {_bound({})}"
        print(f"{r['name']:<{wn}} {r['op']:<{wo}} {w:<{ww}} {timing} "
              f"{(r.get('mode') or '-'):>5} {(r.get('loop_order') or '-'):>6} {_saturated(r):>6}", file=out)
    for line in (end_to_end_line(report["total"]), bound_line(report["total"])):
        if line:
            print(line, file=out)
    for line in host_reason_lines(report["layers"]):
        print(line, file=out)
    for i in report.get("inputs") or ():  # quantising a model input saturates too
        if i.get("saturated"):
            print(f"input '{i['name']}' ({i['format']}): {i['saturated']:,} values saturated "
                  f"({100 * i['saturated_share']:.2f}%)", file=out)
    if not timed:
        print("(golden model: values only; device layers are not simulated, so they have no cycles)", file=out)
    stalled = [r for r in rows if any(r.get("stall_cycles", {}).values())]
    if not stalled:
        return
    causes = [c for c in _STALL_HEADS if any(r["stall_cycles"].get(c, 0) for r in stalled)]
    print(f"\nstall cycles by cause (pipeline: {', '.join(c for c in causes if not c.startswith('cu_')) or '-'}; "
          "CU idle: cu:*)", file=out)
    head = f"{'layer':<{wn}} " + " ".join(f"{_STALL_HEADS[c]:>11}" for c in causes)
    print(head, file=out)
    print("-" * len(head), file=out)
    for r in stalled:
        print(f"{r['name']:<{wn}} " + " ".join(f"{r['stall_cycles'].get(c, 0):>11,}" for c in causes), file=out)
