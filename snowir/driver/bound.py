"""
The bound of a device layer on one machine (issue 38 item 4): the fewest cycles any compiler
could run the layer in, so that a report row or a snow-dse sweep says where the compiler, not
the hardware, is the limit.

* **Compute**: the useful (padding-free) MACs over the machine's MACs per cycle, the bound
  of C17 Table 1 (bench/table1.py's `ConvShape.valid_macs() / hw.macs`, docs' "padding-free
  bound"): the report row's `macs` is that count (`host_model.useful_macs`, and the machine
  counts the same work), so the bound is `macs / hw.macs`, not a second count.
* **Compulsory traffic**: the layer's weights (and bias), inputs (bypass included) and outputs
  crossing the bus once, at `element_bytes` a value; all of it shares `dram_gbps`, and what is
  read also goes through the load units' ports (`load_units` × `unit_gbps`), so the traffic
  takes at least max(all bytes / bus rate, read bytes / port rate). What the compiler
  made counts as its choice, not as compulsory: a channel part's partial sum (split-kernels,
  the `split` chain's bypass), the zeros a block-diagonal or ungrouped conv's weights carry,
  the rows unfold-rows / pad-rows lay out on the host (the layer reads the tensor they came
  from). A conv whose program computes a max pool (`computes`) writes the pool's output.
* The bound is the larger of the two, `bound_by` names it (`compute`, `bus`, or `ports` when the
  load units' ports, not the shared bus, limit the reads); `bound_share` = bound / measured
  cycles, at most 1 unless the bound or the machine model is wrong (tests/test_bound.py).

A model's bound is the sum of its device layers' (they run one after another), its `bound_by`
the resource that binds the largest part of that sum. Its `overlap_bound_ms` is lower: the
larger of all the layers' MACs and all their compulsory bytes on the bus, as if one layer's
traffic could run under another's MACs (ports left out, so it stays a lower bound). No program
of these layers beats it; one that gets below `bound_ms` overlaps layers (a next conv's kernels
preloaded), and the gap between the two is the most any cross-layer schedule could gain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from xdsl.ir import Operation, SSAValue

from snowir.dialects import nn
from snowir.hw import SnowflakeConfig

RESOURCES = ("compute", "bus", "ports")


@dataclass(frozen=True)
class Traffic:
    """A layer's compulsory bytes: what it must read (weights, inputs) and write (outputs) once."""

    weights: int
    inputs: int
    outputs: int

    @property
    def read(self) -> int:
        return self.weights + self.inputs

    @property
    def total(self) -> int:
        return self.read + self.outputs


def _elements(value: SSAValue) -> int:
    return int(math.prod(value.type.get_shape())) if hasattr(value.type, "get_shape") else 0


def _partial(value: SSAValue) -> bool:
    """A channel part's partial sum: the result of a `split` conv that a `split` conv reads as
    its bypass (split-kernels' chain), a round trip the compiler chose."""
    owner = value.owner
    return isinstance(owner, nn.Conv2dOp) and "split" in owner.attributes and any(
        isinstance(use.operation, nn.Conv2dOp) and "split" in use.operation.attributes
        and use.operation.bypass is value for use in value.uses)


def _weight_elements(op: Operation, value: SSAValue) -> int:
    """The weights' values, zeros the lowering added left out: a block-diagonal conv's kernel
    (depthwise-to-grouped) has one non-zero channel, an ungrouped conv's (`dense_groups`) the
    group's."""
    if isinstance(op, nn.Conv2dOp) and value is op.weight:
        k, cg, kh, kw = value.type.get_shape()
        if "block_diagonal" in op.attributes:
            cg = 1
        elif "dense_groups" in op.attributes:
            cg //= op.attributes["dense_groups"].value.data
        return k * cg * kh * kw
    return _elements(value)


def _input_elements(value: SSAValue) -> int:
    """An activation's values, as the model holds them: the tensor a host layout (unfold-rows'
    rows as channels, pad-rows' zero rows) was made from."""
    owner = value.owner
    if isinstance(owner, nn.UnfoldRowsOp | nn.PadRowsOp):
        return _elements(owner.input)
    return _elements(value)


def _touched(size: int, out: int, k: int, stride: int, dilation: int, pad: int) -> int:
    """How many of an axis's `size` input positions any output's window reads: all of them
    unless the stride skips some (a 1x1 stride-2 conv reads every other row and column)."""
    return len({o * stride + i * dilation - pad for o in range(out) for i in range(k)} & set(range(size)))


def _conv_input_elements(op: nn.Conv2dOp) -> int:
    """A conv's input values its windows read: a strided 1x1 (ResNet's downsample) reads a
    quarter of its input, which a compiler need never load (the machine measured ResNet-50's
    three 1x1 stride-2 convs at up to 130% of a bound that counted the whole input)."""
    n, c, h, w = op.input.type.get_shape()
    _, _, kh, kw = op.weight.type.get_shape()
    _, _, oh, ow = op.results[0].type.get_shape()
    s = nn.int_values(op.strides)
    p = nn.int_values(op.pads)
    d = nn.int_values(op.dilations)
    return n * c * _touched(h, oh, kh, s[0], d[0], p[0]) * _touched(w, ow, kw, s[1], d[1], p[1])


def compulsory(op: Operation, element_bytes: int, computes: Operation | None = None) -> Traffic:
    """The bytes layer `op` must move once (module docstring); `computes`: the max pool its
    program computes, whose output it writes instead of its own."""
    weights = inputs = 0
    for value in op.operands:
        if isinstance(value.owner, nn.ConstantOp):
            if isinstance(op, nn.Conv2dOp) and value is op.bias and op.bypass is not None and _partial(op.bypass):
                continue  # a later channel part's zero bias: the first part carries the conv's
            weights += _weight_elements(op, value)
        elif not _partial(value):
            direct = isinstance(op, nn.Conv2dOp) and value is op.input and not isinstance(
                value.owner, nn.UnfoldRowsOp | nn.PadRowsOp)
            inputs += _conv_input_elements(op) if direct else _input_elements(value)
    outs = (computes or op).results
    outputs = sum(_elements(r) for r in outs if not _partial(r))
    return Traffic(weights * element_bytes, inputs * element_bytes, outputs * element_bytes)


def layer_bound(macs: int, traffic: Traffic, hw: SnowflakeConfig) -> dict[str, Any]:
    """The bound's report fields, in cycles of `hw` (module docstring): `compute_cycles`,
    `bus_cycles` (traffic: the bus or the ports, whichever is slower), `cycles`, `by`."""
    compute = macs / hw.macs
    bus = traffic.total / hw.dram_bytes_per_cycle
    ports = traffic.read / (hw.load_units * hw.unit_bytes_per_cycle)
    traffic_cycles = max(bus, ports)
    by = "compute" if compute >= traffic_cycles else "bus" if bus >= ports else "ports"
    return {"compute_cycles": compute, "bus_cycles": traffic_cycles, "cycles": max(compute, traffic_cycles), "by": by}


def row_fields(cycles: int, macs: int, traffic: Traffic, hw: SnowflakeConfig) -> dict[str, Any]:
    """A device layer row's bound fields: `compulsory_bytes`, `bound_compute_ms`, `bound_bus_ms`,
    `bound_ms`, `bound_share` (bound / measured) and `bound_by`."""
    b = layer_bound(macs, traffic, hw)
    return {"compulsory_bytes": traffic.total, "bound_compute_ms": hw.cycles_to_ms(b["compute_cycles"]),
            "bound_bus_ms": hw.cycles_to_ms(b["bus_cycles"]), "bound_ms": hw.cycles_to_ms(b["cycles"]),
            "bound_share": b["cycles"] / cycles if cycles else None, "bound_by": b["by"]}


NO_BOUND = {"compulsory_bytes": None, "bound_compute_ms": None, "bound_bus_ms": None, "bound_ms": None,
            "bound_share": None, "bound_by": None}
"""A row without a bound (host layers); a total has `overlap_bound_ms` None beside these."""


def overlap_bound_ms(rows: list[dict[str, Any]], hw: SnowflakeConfig) -> float | None:
    """The rows' bound were their layers to overlap perfectly (module docstring): the larger of
    their summed compute bounds and their summed compulsory bytes at the bus rate."""
    bounded = [r for r in rows if r.get("bound_ms") is not None]
    if not bounded:
        return None
    bus_ms = hw.cycles_to_ms(sum(r["compulsory_bytes"] for r in bounded) / hw.dram_bytes_per_cycle)
    return max(sum(r["bound_compute_ms"] for r in bounded), bus_ms)


def total_fields(rows: list[dict[str, Any]], ms: float, hw: SnowflakeConfig) -> dict[str, Any]:
    """The bound of the rows that have one, summed (they run one after another), its share of
    `ms` (their measured time), the resource binding most of it, and `overlap_bound_ms`."""
    bounded = [r for r in rows if r.get("bound_ms") is not None]
    if not bounded:
        return dict(NO_BOUND) | {"overlap_bound_ms": None}
    bound = sum(r["bound_ms"] for r in bounded)
    by = {res: sum(r["bound_ms"] for r in bounded if r["bound_by"] == res) for res in RESOURCES}
    return {"compulsory_bytes": sum(r["compulsory_bytes"] for r in bounded),
            "bound_compute_ms": sum(r["bound_compute_ms"] for r in bounded),
            "bound_bus_ms": sum(r["bound_bus_ms"] for r in bounded), "bound_ms": bound,
            "bound_share": bound / ms if ms else None, "bound_by": max(RESOURCES, key=by.__getitem__),
            "overlap_bound_ms": overlap_bound_ms(bounded, hw)}
