"""
Running a prepared (quantised) nn model on the Snowflake machine model, layer by layer.

The host walks `@main`: every device conv2d / max_pool is lowered to its own snowflake_asm
program (conv_codegen / pool_codegen, then icache-banking), assembled and run on the machine
with its input, weights and output in DRAM (channel-innermost); reshapes are views; host ops
(softmax, LRN, ...) run on the host as in the golden model. Each device layer's output is
compared bit for bit with the golden model's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue

from snowir.conv_codegen import generate_conv
from snowir.conv_plan import (ConvLayout, ConvPlan, ConvShape, LoweringError, align, conv_layout, pack_weights,
                              plan_conv)
from snowir.dialects import nn
from snowir.dialects import snowflake_asm as sf
from snowir.golden import Golden, Q, _ints
from snowir.indp_codegen import choose_mode, pack_indp
from snowir.hw import SnowflakeConfig
from snowir.nn_util import conv_shape, layer_name
from snowir.machine.image import ProgramImage, assemble, segments_of
from snowir.machine.run import imbalance, run_image, stall_breakdown
from snowir.passes.icache_banking import IcacheBankingPass
from snowir.pool_codegen import PoolShape, generate_pool, plan_pool
from snowir.resources import int16_resource

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


@dataclass
class DeviceRun:
    outputs: list[np.ndarray]
    layers: list[LayerResult] = field(default_factory=list)
    logits: np.ndarray | None = None  # what the final softmax reads (or the output)
    events: list = field(default_factory=list)  # timing events of every layer, on one time line


def _hwc(words: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(words[0].transpose(1, 2, 0)).ravel()


def conv_segments(op: nn.Conv2dOp, w: np.ndarray, bias: np.ndarray, shift: int, name: str,
                  hw: SnowflakeConfig) -> tuple[ConvShape, str, ConvLayout, list[sf.SegmentOp]]:
    """The DRAM side of a conv layer's program image (input `x`, weights `w` packed for the
    layer's mode, output `y`, residual input `r`) and the mode."""
    if any(d != 1 for d in _ints(op.dilations)):
        raise LoweringError(f"{name}: dilated convolution is not lowered yet")
    shape = replace(conv_shape(op), shift=shift)
    if isinstance(op.input.owner, nn.ChannelSliceOp):  # read the slice in place: a strided view
        shape = replace(shape, cin_total=op.input.owner.input.type.get_shape()[1],
                        c_base=op.input.owner.start.value.data)
    mode = choose_mode(shape, hw, op.bypass is not None)
    wimg = pack_indp(w, bias, hw) if mode == "INDP" else pack_weights(w, bias, -(-shape.k // 16))
    lay = conv_layout(shape, op.bypass is not None, mode, hw)
    segments = [
        sf.SegmentOp("x", sf.SegmentKind.INPUT, 0, lay.in_bytes),
        sf.SegmentOp("w", sf.SegmentKind.DATA, lay.w_addr, wimg.size * 2, int16_resource(f"{name}_w", wimg)),
        sf.SegmentOp("y", sf.SegmentKind.OUTPUT, lay.out_addr, lay.out_bytes),
    ]
    if lay.r_addr is not None:
        segments.append(sf.SegmentOp("r", sf.SegmentKind.INPUT, lay.r_addr, lay.out_bytes))
    return shape, mode, lay, segments


def conv_code(shape: ConvShape, mode: str, lay: ConvLayout, hw: SnowflakeConfig) -> tuple[list[Operation], ConvPlan]:
    plan = plan_conv(shape, hw, 0, lay.w_addr, lay.out_addr, bypass_addr=lay.r_addr, mode=mode)
    return generate_conv(plan, hw).ops, plan


def pool_segments(op: nn.MaxPoolOp) -> tuple[PoolShape, int, list[sf.SegmentOp]]:
    n, c, h, w = op.input.type.get_shape()
    _, _, oh, ow = op.output.type.get_shape()
    kh, kw = _ints(op.kernel)
    sy, sx = _ints(op.strides)
    pt, pl, _, _ = _ints(op.pads)
    shape = PoolShape(c, h, w, kh, kw, sy, sx, pt, pl, oh, ow)
    in_b = h * w * c * 2
    out_addr = align(in_b)
    out_b = oh * ow * c * 2
    return shape, out_addr, [
        sf.SegmentOp("x", sf.SegmentKind.INPUT, 0, in_b),
        sf.SegmentOp("y", sf.SegmentKind.OUTPUT, out_addr, out_b),
        sf.SegmentOp("slack", sf.SegmentKind.SCRATCH, out_addr + out_b, 64),  # partial-CU lanes
    ]


def pool_code(shape: PoolShape, out_addr: int, hw: SnowflakeConfig) -> tuple[list[Operation], None]:
    plan_pool(shape, hw)
    return generate_pool(shape, hw, 0, out_addr).ops, None


class ProgramCache:
    """Layers of the same shape get the same program (only their DRAM data differ): generate,
    bank and encode it once, reuse the instruction words (ResNet-50: 58 device layers, 31 programs)."""

    def __init__(self) -> None:
        self._images: dict[Hashable, tuple[ProgramImage, ConvPlan | None]] = {}

    def image(self, key: Hashable, name: str, segments: list[sf.SegmentOp],
              code: Callable[[], tuple[list[Operation], ConvPlan | None]],
              keep_module: bool) -> tuple[ProgramImage, ConvPlan | None, ModuleOp | None]:
        """The layer's image; `keep_module`: also its snowflake_asm module (never from the cache)."""
        hit = None if keep_module else self._images.get(key)
        if hit is not None:
            image, plan = hit
            return replace(image, name=_sym(name), segments=segments_of(ModuleOp(segments))), plan, None
        ops, plan = code()
        prog = ModuleOp([*segments, sf.ProgramOp(_sym(name), ops)])
        IcacheBankingPass().apply(None, prog)
        image = assemble(prog)
        self._images[key] = (image, plan)
        return image, plan, prog


def _sym(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name) or "layer"


def _compiled(op) -> bool:
    """Layers compiled to a Snowflake program: convs and max pools partition-host left on the device."""
    place = op.attributes.get("place")
    return isinstance(op, nn.Conv2dOp | nn.MaxPoolOp) and not (place is not None and place.data == "host")


def run_device(module: ModuleOp, x: np.ndarray, hw: SnowflakeConfig | None = None, engine: str = "fast",
               progress=None, record: bool = False) -> DeviceRun:
    hw = hw or SnowflakeConfig()
    golden = Golden(module)
    block = golden.main.body.block
    if len(block.args) != 1:
        raise LoweringError("only single-input models run on the device")
    from snowir.golden import element_frac, quantize

    frac = element_frac(block.args[0])
    if frac is None:
        raise LoweringError("the model is not quantised: run nn-prepare (or quantize) first")
    env: dict[SSAValue, Any] = {block.args[0]: Q(quantize(x, frac), frac)}
    result = DeviceRun([])
    programs = ProgramCache()
    device_ops = [op for op in block.ops if _compiled(op)]
    for op in block.ops:
        if isinstance(op, func.ReturnOp):
            result.outputs = [golden._float(env[v]) for v in op.arguments]
            if result.logits is None:
                result.logits = result.outputs[0]
            return result
        if isinstance(op, nn.SoftmaxOp):
            result.logits = golden._float(env[op.input])
        if _compiled(op):
            name = layer_name(op, op.name)
            if progress:
                progress(f"layer {device_ops.index(op) + 1}/{len(device_ops)}: {name}")
            expected = golden._op(op, env)
            t0 = time.perf_counter()
            src = op.input.owner.input if isinstance(op, nn.Conv2dOp) and isinstance(op.input.owner, nn.ChannelSliceOp) \
                else op.input
            words = golden._q(env[src], frac)
            mode = order = None
            try:
                if isinstance(op, nn.Conv2dOp):
                    wq = env[op.weight]
                    bq = golden._q(env[op.bias], frac)
                    shape, cmode, lay, segments = conv_segments(op, wq.words, bq, wq.frac, name, hw)
                    key = ("conv", shape, cmode, lay)
                    code = lambda shape=shape, cmode=cmode, lay=lay: conv_code(shape, cmode, lay, hw)  # noqa: E731
                else:
                    pshape, out_addr, segments = pool_segments(op)
                    key, code = ("pool", pshape), lambda s=pshape, a=out_addr: pool_code(s, a, hw)
                image, plan, prog = programs.image(key, name, segments, code, engine == "reference")
                if plan is not None:
                    mode, order = plan.mode, plan.loop_order
            except LoweringError as e:
                raise LoweringError(f"layer '{name}' ({op.name}): {str(e).removeprefix(name + ': ')}") from None
            compile_s = time.perf_counter() - t0
            inputs = {"x": _hwc(words)}
            if isinstance(op, nn.Conv2dOp) and op.bypass is not None:
                inputs["r"] = _hwc(golden._q(env[op.bypass], frac))
            run = run_image(image, hw, engine, inputs, record, module=prog if engine == "reference" else None)
            if record:
                from snowir.machine.timing import Event

                start = sum(layer.cycles for layer in result.layers)
                result.events.append(Event("control", f"layer {name}", start, start + run.cycles))
                result.events.extend(Event(e.track, e.name, e.start + start, e.end + start) for e in run.timing.events)
            n, k, oh, ow = op.results[0].type.get_shape()
            got = run.outputs["y"].reshape(oh, ow, k).transpose(2, 0, 1)[None]
            exact = bool(np.array_equal(got, expected.words))
            t = run.timing
            result.layers.append(LayerResult(
                op, name, op.name.removeprefix("nn."), run.cycles, t.macs, t.lane_macs, t.dram_bytes,
                len(image.code), run.machine.dynamic, stall_breakdown(t.stalls), mode, order,
                imbalance(t.unit_bytes), exact, run.simulate_s, compile_s))
            env[op.results[0]] = Q(got.astype(np.int16), frac)
            continue
        # reshapes are views and a channel concat is placement (its producers write side by
        # side in DRAM): no device work; any other device op must have been lowered above
        if op.name.startswith("nn.") and "place" in op.attributes and op.attributes["place"].data == "snowflake" \
                and not isinstance(op, nn.ConstantOp | nn.ReshapeOp | nn.FlattenOp | nn.IdentityOp
                                   | nn.ChannelSliceOp) \
                and not (isinstance(op, nn.ConcatOp) and op.axis.value.data == 1):
            name = layer_name(op, "?")
            raise LoweringError(f"layer '{name}' ({op.name}) is not lowered to Snowflake yet")
        env[op.results[0]] = golden._op(op, env)
    raise LoweringError("@main has no func.return")


def device_report(run: DeviceRun, hw: SnowflakeConfig, model: str, host_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The DESIGN.md report: device layers with their machine numbers, host layers with their
    estimated host time; `total.ms` is the device time (as C17 Table 2), `total.host_ms` beside it."""
    layers = []
    by_op = {id(layer.op_ref): layer for layer in run.layers}
    for row in host_rows:
        layer = by_op.get(id(row.pop("_op", None)))
        if layer is None:
            layers.append(row)
            continue
        ms = hw.cycles_to_ms(layer.cycles)
        row.update({"cycles": layer.cycles, "ms": ms, "macs": layer.macs, "lane_macs": layer.lane_macs,
                    "mac_utilization": layer.macs / (layer.cycles * hw.macs) if layer.cycles else 0.0,
                    "dram_bytes": layer.dram_bytes, "gbps": layer.dram_bytes / (ms * 1e6) if ms else 0.0,
                    "stall_cycles": layer.stalls, "mode": layer.mode, "loop_order": layer.loop_order,
                    "load_imbalance_pct": layer.imbalance})
        layers.append(row)
    cycles = sum(layer.cycles for layer in run.layers)
    macs = sum(layer.macs for layer in run.layers)
    dram = sum(layer.dram_bytes for layer in run.layers)
    ms = hw.cycles_to_ms(cycles)
    stalls = stall_breakdown({})
    for layer in run.layers:
        for k, v in layer.stalls.items():
            stalls[k] += v
    total = {"cycles": cycles, "ms": ms, "host_ms": sum(r["host_ms"] or 0.0 for r in layers), "macs": macs,
             "lane_macs": sum(layer.lane_macs for layer in run.layers),
             "mac_utilization": macs / (cycles * hw.macs) if cycles else 0.0,
             "dram_bytes": dram, "gbps": dram / (ms * 1e6) if ms else 0.0,
             "static_instructions": sum(layer.instructions for layer in run.layers),
             "dynamic_instructions": sum(layer.dynamic for layer in run.layers), "stall_cycles": stalls,
             "compile_s": sum(layer.compile_s for layer in run.layers),
             "simulate_s": sum(layer.simulate_s for layer in run.layers)}
    return {"model": model, "hw": hw.to_json(), "total": total, "layers": layers, "check": None}
