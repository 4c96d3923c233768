"""
What a device run gives back: per-layer machine numbers (LayerResult) and the model's outputs
(DeviceRun), shared by the layer-by-layer runner (device_run.py) and the whole-model one
(segment_run.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from snowir.dialects import nn
from snowir.host_model import useful_macs


@dataclass
class Counts:
    """What the machine did over a program run or between two layer markers of a segment
    (`macs` as `useful` reads it)."""

    cycles: int
    stalls: dict[str, int]
    macs: int
    lane_macs: int
    dram_bytes: int
    unit_bytes: list[int]
    dynamic: int
    saturated: int


@dataclass
class LayerResult:
    op_ref: Any
    name: str
    op: str
    cycles: int
    macs: int
    lane_macs: int
    dram_bytes: int
    instructions: int
    dynamic: int
    stalls: dict[str, int]
    mode: str | None
    loop_order: str | None
    imbalance: float | None
    bit_exact: bool
    simulate_s: float
    compile_s: float
    fused: str | None = None  # the max pool this layer's program computed (its report row: `computes`)
    saturated: int = 0  # write-back values the machine saturated (equal to the golden model's count)


@dataclass
class DeviceRun:
    outputs: list[np.ndarray]
    layers: list[LayerResult] = field(default_factory=list)
    logits: np.ndarray | None = None  # what the final softmax reads (or the output)
    events: list = field(default_factory=list)  # timing events of every layer, on one time line
    saturated: dict = field(default_factory=dict)  # golden model's counts per op (host layers' come from here)
    input_saturated: dict = field(default_factory=dict)  # per argument of @main: quantising the input



def saturation(count: int, op) -> dict[str, Any]:
    """A report row's `saturated` (values its fixed-point results lost to saturation) and
    `saturated_share` (of the elements of its results)."""
    size = sum(int(np.prod(r.type.get_shape())) for r in getattr(op, "results", ()) if hasattr(r.type, "get_shape"))
    return {"saturated": int(count), "saturated_share": count / size if size else 0.0}


def inputs_report(counts: dict, names: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The report's `inputs`: per argument of @main, its format and the values quantising it
    saturated; named as `names` gives (the ONNX model's: `input.1`), else by the name hints."""
    out = []
    for i, (arg, count) in enumerate(counts.items()):
        elem = arg.type.get_element_type()
        fmt = f"Q{elem.int_bits.data}.{elem.frac_bits.data}" if isinstance(elem, nn.FixedType) else None
        size = int(np.prod(arg.type.get_shape()))
        name = names[i] if names is not None and i < len(names) else arg.name_hint or f"input{i}"
        out.append({"name": name, "format": fmt, "saturated": int(count),
                    "saturated_share": count / size if size else 0.0})
    return out


def useful(op, runs) -> int:
    """MACs the machine did that the layer needed: a block-diagonal conv (depthwise-to-grouped)
    keeps all lanes busy, 15 of 16 against zero weights, so its count is the depthwise one (a
    grouped conv run ungrouped, `dense_groups`: the grouped one); an
    unfolded conv's first and last rows multiply the rows' padding (zero channels), a conv over
    padded rows (pad-rows) its zero rows."""
    if "block_diagonal" in op.attributes or "lane_groups" in op.attributes or "dense_groups" in op.attributes or \
            isinstance(op.input.owner, nn.UnfoldRowsOp | nn.PadRowsOp):
        return useful_macs(op)
    return sum(r.macs for r in runs)


