"""
What a device run gives back: per-layer machine numbers (LayerResult) and the model's outputs
(DeviceRun), shared by the layer-by-layer runner (device_run.py) and the whole-model one
(segment_run.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from snowir.dialects import nn
from snowir.host_model import useful_macs


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


@dataclass
class DeviceRun:
    outputs: list[np.ndarray]
    layers: list[LayerResult] = field(default_factory=list)
    logits: np.ndarray | None = None  # what the final softmax reads (or the output)
    events: list = field(default_factory=list)  # timing events of every layer, on one time line



def useful(op, runs) -> int:
    """MACs the machine did that the layer needed: a block-diagonal conv (depthwise-to-grouped)
    keeps all lanes busy, 15 of 16 against zero weights, so its count is the depthwise one; an
    unfolded conv's first and last rows multiply the rows' padding (zero channels)."""
    if "block_diagonal" in op.attributes or "lane_groups" in op.attributes or isinstance(op.input.owner, nn.UnfoldRowsOp):
        return useful_macs(op)
    return sum(r.macs for r in runs)


