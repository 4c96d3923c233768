"""
End-to-end time on one timeline: device layers, host layers and the round trips between them, in
the order the runner executes them (docs/machine.md, "End-to-end time").

The device time of a layer is the machine's (its report row's `ms`), a host layer's is the host
model's estimate (`host_ms`, snowir/host_model.py). A round trip is the host converting a tensor
between its fp32 arrays and the device's 16-bit words in the DRAM image: before a device segment
(a whole-model lowering) the host writes every tensor the segment reads that is not in the DRAM
yet (model inputs, host layers' results); before a host layer it reads every device tensor it
needs that it has not read yet, and so for the model's outputs at the end. A layer-by-layer
lowering (whole-model=false) gives each layer its own program and DRAM segments: its inputs are
written before it and its output read back after it. Constants (weights) are in the DRAM image
already. A copy moves its words (2 bytes an element) at the host's memory rate (`HostCPU.gbps`),
as partition-host prices a round trip (host_model.round_trip_ms). Nothing overlaps: the host
waits for the device, the device for the host, as the runner does.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.dialects.builtin import StringAttr
from xdsl.ir import BlockArgument, Operation, SSAValue

from snowir.dialects import nn
from snowir.device_layers import DEVICE_OPS
from snowir.host_model import HOST, HostCPU, copy_ms
from snowir.hw import SnowflakeConfig
from snowir.machine.timing import Event
from snowir.nn_util import layer_name
from snowir.segments import (host_read_of, is_view, layer_of, members_of, placed_concat, placed_crop, placed_host_read,
                             placed_interleave, read_rearrangement, read_sources, root, segments_of)
from snowir.tile.build import device_input

WORD_BYTES = 2
"""A device tensor element: one 16-bit fixed-point word."""
HOST_TRACK = "host"


def _bytes(value: SSAValue) -> int:
    shape = value.type.get_shape() if hasattr(value.type, "get_shape") else ()
    return int(np.prod(shape)) * WORD_BYTES


def _tensor_name(value: SSAValue) -> str:
    if isinstance(value, BlockArgument):
        return value.name_hint or f"input{value.index}"
    assert isinstance(value.owner, Operation)
    return layer_name(value.owner, value.owner.name)


def _device_layer(op: Operation, row: dict[str, Any]) -> bool:
    return row["where"] == "device" and isinstance(op, DEVICE_OPS)


def _reads(op: Operation) -> list[SSAValue]:
    """The tensors (roots) the host may have to write for a device layer: its input, a conv's
    residual and its kernels when computed at run time (an SE gate, se-gate), unless constant (in
    the DRAM image with the weights)."""
    values = [device_input(op)]
    if isinstance(op, nn.Conv2dOp) and op.bypass is not None:
        values.append(op.bypass)
    if isinstance(op, nn.Conv2dOp) and not isinstance(op.weight.owner, nn.ConstantOp):
        values.append(op.weight)  # the host packs them into the weights region: as many words
    return [r for r in (root(v) for v in values) if not isinstance(r.owner, nn.ConstantOp)]


def _stored(value: SSAValue) -> SSAValue:
    """The tensor whose DRAM words the host reads for `value`: its root (through views), and
    through device reshapes that are no view in the device's byte order (an (N, C, H, W) tensor
    flattened to (N, C, H·W) and read by the host): the host reorders the words it copies back."""
    value = root(value)
    owner = value.owner
    if isinstance(owner, nn.ReshapeOp | nn.FlattenOp) and owner.attributes.get("place") == StringAttr("snowflake"):
        return _stored(owner.operands[0])
    return value


def _leaves(value: SSAValue) -> list[SSAValue]:
    """The tensors whose bytes `value` (a root) is: a device concat's inputs, which their
    producers (or the host) write into its one DRAM tensor (snowir/segments.py: slot_of), else
    itself; a device interleave's phases, which their convs write into its tensor in place."""
    if placed_interleave(value.owner):
        return list(value.owner.operands)  # type: ignore[union-attr]
    if not placed_concat(value.owner):
        return [value]
    return [leaf for m, _ in members_of(value.owner) if not placed_concat(m.owner)  # type: ignore[arg-type]
            for leaf in _leaves(m)]


def _held(values, where: set[SSAValue], unless: set[SSAValue]) -> list[SSAValue]:
    """The leaves of `values` that are in `where` and not in `unless`, once each, in order."""
    return [v for v in dict.fromkeys(leaf for r in values for leaf in _leaves(r)) if v in where and v not in unless]


@dataclass
class _Clock:
    """Where the timeline has got to, and the round trips placed on it so far."""

    now: float = 0.0
    trips: list[dict[str, Any]] = field(default_factory=list)

    def copy(self, values: Sequence[SSAValue], direction: str, cpu: HostCPU) -> None:
        """One round trip moving `values` (none: nothing), starting now."""
        if not values:
            return
        size = sum(_bytes(v) for v in values)
        ms = copy_ms(size, cpu)
        self.trips.append({"name": ", ".join(_tensor_name(v) for v in values), "direction": direction,
                           "bytes": size, "ms": ms, "start_ms": self.now, "end_ms": self.now + ms})
        self.now += ms


def place_on_timeline(rows: list[dict[str, Any]], ops: list[Operation], linked: bool,
                      cpu: HostCPU = HOST) -> list[dict[str, Any]]:
    """Set every row's `start_ms` / `end_ms` (rows and `ops` in @main's order, rows already timed:
    a device row's `ms`, a host row's `host_ms`); returns the round trips, in order, each
    {name (the tensors), direction (to_device / to_host), bytes, ms, start_ms, end_ms}."""
    clock = _Clock()
    on_device: set[SSAValue] = set()  # tensors in the DRAM image
    on_host: set[SSAValue] = set()  # tensors the host holds as arrays
    computed: set[SSAValue] = set(ops[0].parent_block().args) if ops and ops[0].parent_block() else set()
    segment_of: dict[str, int] = {}  # device layer -> its segment (a whole-model lowering)
    members: dict[int, list[Operation]] = {}
    if linked and ops and ops[0].parent_block() is not None:
        for k, segment in enumerate(segments_of(ops[0].parent_block()).segments):
            segment_of.update((name, k) for name in segment.layers)
        for op, row in zip(ops, rows):
            if _device_layer(op, row) and layer_of(op) in segment_of:
                members.setdefault(segment_of[layer_of(op)], []).append(op)
    for op, row in zip(ops, rows):
        computed.update(op.results)  # a segment's own outputs are `inside` it, not written
        if _device_layer(op, row):
            k = segment_of.get(layer_of(op) or "")
            if k is not None:
                if k in members:  # the segment's first layer: the host writes what it reads
                    group = members.pop(k)
                    inside = {r for m in group for r in m.results}
                    # what exists and is not in DRAM yet: a device concat's slices its later
                    # producers write are theirs to write
                    wanted = _held([r for m in group for r in _reads(m)], computed, inside | on_device)
                    wanted = [v for v in wanted if not isinstance(v.owner, nn.ConstantOp)]
                    clock.copy(wanted, "to_device", cpu)
                    on_device.update(wanted)
                on_device.update(op.results)
                on_device.update(_read_through(op))
                _span(row, clock, row.get("ms") or 0.0)
            elif row.get("computed_by"):  # computed by its conv's program: its output read after it
                _span(row, clock, 0.0)
                clock.copy(list(op.results), "to_host", cpu)
                on_host.update(op.results)
            else:  # its own program: its inputs written before it, its output read after it
                clock.copy(list(dict.fromkeys(_reads(op))), "to_device", cpu)
                _span(row, clock, row.get("ms") or 0.0)
                if not row.get("computes"):  # a fused pool's output is read after the pool
                    read = _read_through(op) or list(op.results)  # a grid: the interleave the host reads from it
                    clock.copy(read, "to_host", cpu)
                    on_host.update(read)
            continue
        if row["where"] == "host" and not _free(op):
            # through host-read rearrangements: the device tensors they move, copied back once each
            needed = _held([_stored(s) for v in op.operands for s in read_sources(v)], on_device, on_host)
            clock.copy(needed, "to_host", cpu)
            on_host.update(needed)
            on_host.update(op.results)
        _span(row, clock, row.get("host_ms") or 0.0)
    block = ops[-1].parent_block() if ops else None
    ret = block.last_op if block is not None else None
    if ret is not None:
        # a host-read rearrangement's output: the device tensors it reads, copied back once each
        clock.copy(_held([_stored(s) for v in ret.operands for s in read_sources(v)], on_device, on_host), "to_host", cpu)
    return clock.trips


def _read_through(op: Operation) -> list[SSAValue]:
    """The interleaves the host reads from `op`'s grid (`host-read`): in the DRAM once `op` ran,
    copied back as their own words (the result's, each once), not the grid's."""
    readers = [host_read_of(r) for r in op.results]
    return [d2s.output for d2s in readers if d2s is not None]


def _free(op: Operation) -> bool:
    """No host work: a view, a device concat, interleave or crop, a merged conv's interleave the host
    applies as it reads the grid back (host-read), or a channel slice only device convs or device
    concats read (in place; snowir/segments.py's free ops)."""
    if is_view(op) or placed_concat(op) or placed_interleave(op) or placed_crop(op) or placed_host_read(op) \
            or read_rearrangement(op):
        return True
    return isinstance(op, nn.ChannelSliceOp) and all(
        isinstance(use.operation, nn.Conv2dOp) and layer_of(use.operation) is not None or placed_concat(use.operation)
        for use in op.results[0].uses)


def _span(row: dict[str, Any], clock: _Clock, ms: float) -> None:
    row["start_ms"] = clock.now
    clock.now += ms
    row["end_ms"] = clock.now


def totals(total: dict[str, Any], trips: list[dict[str, Any]]) -> None:
    """`total`'s end-to-end fields: device + host + round trips, and the device's share."""
    total["round_trip_ms"] = sum(t["ms"] for t in trips)
    total["round_trip_bytes"] = sum(t["bytes"] for t in trips)
    end = total["ms"] + total["host_ms"] + total["round_trip_ms"]
    total["end_to_end_ms"] = end
    total["device_share"] = total["ms"] / end if end else 0.0


def host_spans(report: dict[str, Any]) -> list[tuple[str, float, float]]:
    """(label, start_ms, end_ms) of every host layer with time and every round trip, in order."""
    spans = [(f"{r['name']} ({r['op']})", r["start_ms"], r["end_ms"]) for r in report["layers"]
             if r.get("where") == "host" and r.get("start_ms") is not None and r["end_ms"] > r["start_ms"]]
    spans += [(f"copy {t['direction'].replace('_', ' ')}: {t['name']}", t["start_ms"], t["end_ms"])
              for t in report.get("round_trips") or ()]
    return sorted(spans, key=lambda s: s[1])


def on_timeline(events: list[Event], report: dict[str, Any], hw: SnowflakeConfig) -> list[Event]:
    """The machine's events (device cycles, every device layer after the previous one) moved onto
    the end-to-end timeline, in device cycles still, with a span per host layer and round trip
    on the host track. Without a timeline in the report (the golden model), as they are."""
    device = [r for r in report["layers"] if r.get("where") == "device" and r.get("cycles")]
    if any(r.get("start_ms") is None for r in device):
        return events
    per_ms = hw.clock_mhz * 1e3
    starts, shifts, cycles = [], [], 0
    for r in device:  # device rows run in report order: cycle `cycles` of the device-only line
        starts.append(cycles)
        shifts.append(r["start_ms"] * per_ms - cycles)
        cycles += r["cycles"]
    out = []
    for e in events:
        i = max(bisect.bisect_right(starts, e.start) - 1, 0)
        shift = shifts[i] if shifts else 0.0
        out.append(Event(e.track, e.name, e.start + shift, e.end + shift, e.count, e.mix, e.part))
    out += [Event(HOST_TRACK, label, a * per_ms, b * per_ms) for label, a, b in host_spans(report)]
    return out
