"""
Running a lowered model on the Snowflake machine model, layer by layer.

The lowering (`snowflake-lower`, or any pipeline that ends in the same IR) leaves `@main`
as the host's sequence: every device conv2d / max_pool names its `snowflake_asm.image`
(`image = "..."`), whose program and DRAM segments (weights included) are what the device
runs; the other ops run on the host as in the golden model (a channel concat copies its
inputs side by side, or on the device its producers write their slices of one tensor: the host
then assembles the tensor a layer reads from the slices computed so far); reshapes are views. The host writes each device layer's input (channel-innermost) into the
image's `@x` (and the residual into `@r`), runs the program, reads `@y`, and compares it bit
for bit with the golden model's output of the same nn op. Nothing is compiled here.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import FloatAttr, ModuleOp, StringAttr
from xdsl.ir import SSAValue

from snowir.dialects import nn, snowflake_asm as sf
from snowir.driver import bound
from snowir.device_layers import DEVICE_OPS
from snowir.driver.results import Counts, DeviceRun, LayerResult, inputs_report, saturation, useful
from snowir.driver.segment_run import (device_order, linked, out_slice, read_through_interleave, run_segments,
                                       runtime_weight_image, tensor_words)
from snowir.driver.timeline import place_on_timeline, totals
from snowir.golden import Golden, Q, element_frac
from snowir.hw import SnowflakeConfig
from snowir.machine.image import ProgramImage, assemble
from snowir.machine.run import DEFAULT_MAX_INSTRUCTIONS, imbalance, run_image, stall_breakdown
from snowir.machine.timing import Event
from snowir.nn_util import layer_name, on_host
from snowir.passes.pipelines import quantised
from snowir.plan.shapes import LoweringError
from snowir.segments import HOST_READ_FACT, placed_host_read, slot_of
from snowir.tile.build import RUNTIME_KERNELS, device_input
from snowir.segments import root



def images_of(module: ModuleOp) -> dict[str, sf.ImageOp]:
    return {op.sym_name.data: op for op in module.ops if isinstance(op, sf.ImageOp)}


def _attr(image: sf.ImageOp, key: str) -> str | None:
    value = image.attributes.get(key)
    return value.data if isinstance(value, StringAttr) else None


def _load_imbalance(image: sf.ImageOp, unit_bytes: list[int]) -> float | None:
    """C17's C_L per tile as balance-loads measured it, else over the whole run's loads."""
    value = image.attributes.get("load_imbalance_pct")
    if isinstance(value, FloatAttr):
        return float(value.value.data)
    return imbalance(unit_bytes)


def _unlowered(op) -> bool:
    """A device conv / max pool the lowering has not turned into an image."""
    return isinstance(op, DEVICE_OPS) and "image" not in op.attributes and not on_host(op)


@dataclass
class ImageRun(Counts):
    """What one program run on the machine gave: small, so worker processes can return it."""

    y: np.ndarray
    simulate_s: float
    events: list


def _simulate(image: ProgramImage, hw: SnowflakeConfig, engine: str, inputs: dict[str, np.ndarray], keep: bool,
              image_op: sf.ImageOp | None, max_instructions: int | None = DEFAULT_MAX_INSTRUCTIONS) -> ImageRun:
    run = run_image(image, hw, engine, inputs, keep, module=image_op if engine == "reference" else None,
                    max_instructions=max_instructions)
    t = run.timing
    return ImageRun(run.cycles, {c: int(v) for c, v in t.stalls.items()}, t.macs, t.lane_macs, t.dram_bytes,
                    list(t.unit_bytes), run.machine.dynamic, run.machine.state.saturated,
                    y=run.outputs["y"], simulate_s=run.simulate_s, events=list(t.events) if keep else [])


_JOBS: list[tuple] = []
"""The pending image runs of a parallel run_device, inherited by forked workers (no pickling of
images or inputs; only the small ImageRun comes back)."""


def _job(i: int) -> ImageRun:
    return _simulate(*_JOBS[i])


def _parallel(jobs: list[tuple], workers: int) -> list[ImageRun]:
    import multiprocessing

    _JOBS[:] = jobs
    try:
        # reference-engine jobs hold xDSL ops (image_op), which only fork shares without pickling
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            return pool.map(_job, range(len(jobs)), chunksize=1)
    finally:
        _JOBS.clear()


def run_device(module: ModuleOp, x: np.ndarray | Sequence[np.ndarray], hw: SnowflakeConfig | None = None,
               engine: str = "fast", progress=None, record: bool = False, record_layer=None,
               assembled: dict[str, ProgramImage] | None = None, jobs: int = 1,
               max_instructions: int | None = DEFAULT_MAX_INSTRUCTIONS) -> DeviceRun:
    """`x`: the input, or one array per input of @main. `record`: keep every layer's timing
    events (a trace); `record_layer(name)`, if given, limits them to the layers it accepts (a
    ResNet-50 trace is hundreds of MB). `assembled`: program images by name, filled and reused
    across runs of the same module (the ONNX backend runs one module many times).

    `jobs` > 1: layers are independent programs, so they simulate in that many processes at
    once. Each device layer then reads the golden model's value of its input (what the machine
    computes when every earlier layer is bit-exact); if a layer is not bit-exact, the model is
    run again one layer after another, so outputs are always the machine's own. Reports are
    identical either way. `max_instructions`: a program that runs longer stops with a fault."""
    hw = hw or SnowflakeConfig()
    if linked(module):  # whole-model programs: one process, one DRAM (jobs do not apply)
        if not quantised(module):
            raise LoweringError("the model is not quantised: run nn-prepare (or quantize) first")
        return run_segments(module, x, hw, engine, progress, record, assembled, record_layer, max_instructions)
    if jobs > 1:
        result = _run_device(module, x, hw, engine, progress, record, record_layer, assembled, jobs, max_instructions)
        if all(layer.bit_exact for layer in result.layers):
            return result
    return _run_device(module, x, hw, engine, progress, record, record_layer, assembled, 1, max_instructions)


def _run_device(module: ModuleOp, x, hw: SnowflakeConfig, engine: str, progress, record: bool, record_layer,
                assembled: dict[str, ProgramImage] | None, jobs: int,
                max_instructions: int | None = DEFAULT_MAX_INSTRUCTIONS) -> DeviceRun:
    golden = Golden(module)
    block = golden.main.body.block
    if not quantised(module):
        raise LoweringError("the model is not quantised: run nn-prepare (or quantize) first")
    images = images_of(module)
    env: dict[SSAValue, Any] = golden.inputs([x] if isinstance(x, np.ndarray) else list(x))
    result = DeviceRun([])
    assembled = {} if assembled is None else assembled
    device_ops = [op for op in block.ops if "image" in op.attributes]
    # (op, name, image_op, image, (expected, its saturated count), compile_s, first job, images, output op)
    pending: list[tuple] = []
    jobs_list: list[tuple] = []
    computed: set[int] = set()  # max pools their conv's program computed
    host_reads: dict[SSAValue, Q] = {}  # a merged conv's interleave, as the host read it from the conv's grid
    for op in block.ops:
        if isinstance(op, func.ReturnOp):
            break
        if isinstance(op, nn.SoftmaxOp):
            result.logits = golden._float(env[op.input])
        ref = op.attributes.get("image")
        name = layer_name(op, op.name)
        if isinstance(ref, StringAttr):
            if id(op) in computed:
                continue
            if ref.data not in images:
                raise LoweringError(f"layer '{name}' ({op.name}) names image @{ref.data}, which the module lacks")
            image_op = images[ref.data]
            if progress:
                progress(f"layer {device_ops.index(op) + 1}/{len(device_ops)}: {name}")
            expected = golden._op(op, env)
            saturated = golden.saturated[op]
            out_op = _fused_pool(op, image_op) or op
            if out_op is not op:  # the image's @y is the pool's output; the conv's stays in its scratch
                env[op.results[0]] = expected
                expected = golden._op(out_op, env)
                saturated += golden.saturated[out_op]
                computed.add(id(out_op))
            t0 = time.perf_counter()
            if ref.data not in assembled:
                assembled[ref.data] = assemble(image_op)
            image = assembled[ref.data]
            compile_s = time.perf_counter() - t0
            # each tensor in its own format (one for all, or per tensor with quantize{format=auto})
            words = tensor_words(golden, env, device_input(op))
            residual = root(op.bypass) if isinstance(op, nn.Conv2dOp) and op.bypass is not None else None
            bypass = golden._q(env[residual], element_frac(residual)) if residual is not None else None  # a crop's: its source
            n = out_op.results[0].type.get_shape()[0]
            keep = record and (record_layer is None or record_layer(name))
            batch = []
            kernels = None
            if isinstance(op, nn.Conv2dOp) and RUNTIME_KERNELS in op.attributes:  # an SE gate: the host packs it
                kernels = runtime_weight_image(op, golden, env, image_op.attributes["mode"], hw,
                                               image_op.attributes.get("biases", "kernel"))
                kernels = np.concatenate([kernels, np.zeros(image.segment("w").size // 2 - kernels.size, np.int16)])
            for i in range(n):  # one program run per image of the batch
                inputs = {"x": device_order(words[i], slot_of(device_input(op)).tiles)}
                if kernels is not None:
                    inputs["w"] = kernels
                if bypass is not None:
                    inputs["r"] = device_order(bypass[i], slot_of(residual).tiles)  # a part's partial sums: blocks
                batch.append((image, hw, engine, inputs, keep, image_op, max_instructions))
            if jobs > 1:
                pending.append((op, name, image_op, image, (expected, saturated), compile_s, len(jobs_list), n,
                                out_op))
                jobs_list.extend(batch)
                env[out_op.results[0]] = expected  # the machine's value when it is bit-exact (checked below)
            else:
                runs = [_simulate(*job) for job in batch]
                got = _record_layer(result, op, name, image_op, image, (expected, saturated), compile_s, runs, hw,
                                    keep, out_op, host_reads)
                env[out_op.results[0]] = Q(got.astype(np.int16), element_frac(out_op.results[0]))
            continue
        if _unlowered(op):
            raise LoweringError(f"layer '{name}' ({op.name}) is on the device but not lowered: "
                                "run the lowering (snowflake-lower) first")
        # reshapes are views: no device work; any other device op must have been lowered above
        if op.name.startswith("nn.") and "place" in op.attributes and op.attributes["place"].data == "snowflake" \
                and not isinstance(op, nn.ConstantOp | nn.ReshapeOp | nn.FlattenOp | nn.IdentityOp
                                   | nn.ChannelSliceOp | nn.TransposeOp | nn.ConcatOp  # a device concat: a view
                                   | nn.DepthToSpaceOp  # a device interleave: its phases wrote it in place
                                   | nn.CropOp):  # a device crop: its readers load its window in place
            raise LoweringError(f"layer '{name}' ({op.name}) is not lowered to Snowflake yet")
        if placed_host_read(op) and op.results[0] in host_reads:  # no host layer: the host's read of the grid
            env[op.results[0]] = host_reads.pop(op.results[0])
            continue
        golden.step(op, env)
    else:
        raise LoweringError("@main has no func.return")
    ret = op
    if pending:
        runs = _parallel(jobs_list, jobs)
        for layer, name, image_op, image, expected, compile_s, first, n, out_op in pending:
            keep = record and (record_layer is None or record_layer(name))
            _record_layer(result, layer, name, image_op, image, expected, compile_s, runs[first:first + n], hw, keep,
                          out_op)
    result.outputs = [golden._float(env[v]) for v in ret.arguments]
    if result.logits is None:
        result.logits = result.outputs[0]
    result.saturated, result.input_saturated = golden.saturated, golden.input_saturated
    return result


def _fused_pool(op, image_op: sf.ImageOp):
    """The max pool whose output `op`'s image computes (tile-to-asm's `fused`), else None."""
    if _attr(image_op, "fused") != "max_pool":
        return None
    uses = list(op.results[0].uses)
    pool = uses[0].operation if len(uses) == 1 else None
    if not isinstance(pool, nn.MaxPoolOp) or pool.attributes.get("image") != op.attributes.get("image"):
        raise LoweringError(f"image @{op.attributes['image'].data} computes a fused max pool, but "
                            f"'{layer_name(op, op.name)}' is not read by one max pool naming it")
    return pool


def _record_layer(result: DeviceRun, op, name: str, image_op: sf.ImageOp, image: ProgramImage,
                  golden: tuple[Q, int], compile_s: float, runs: list[ImageRun], hw: SnowflakeConfig, keep: bool,
                  out_op=None, host_reads: dict | None = None) -> np.ndarray:
    """Add the layer's LayerResult (and its events, on the model's time line); its output (that
    of `out_op`, a max pool its program computed, if given). `golden`: the golden model's output
    and saturated-value count, which the machine's must equal to be bit-exact."""
    out_op = out_op or op
    expected, golden_saturated = golden
    saturated = sum(run.saturated for run in runs)
    n, k, oh, ow = out_op.results[0].type.get_shape()
    if keep:
        start = sum(layer.cycles for layer in result.layers)
        for i, run in enumerate(runs):
            result.events.append(Event("control", f"layer {name}" + (f" image {i}" if n > 1 else ""),
                                       start, start + run.cycles))
            result.events.extend(Event(e.track, e.name, e.start + start, e.end + start, e.count, e.mix, e.part)
                                 for e in run.events)
            start += run.cycles
    got = np.stack([out_slice(run.y, out_op.results[0]) for run in runs])
    read = image_op.attributes.get(HOST_READ_FACT)  # the host reads its grid back through its interleave
    read_exact = read is None or read_through_interleave(host_reads, out_op.results[0], [run.y for run in runs],
                                                         read, expected.words)
    stalls = stall_breakdown({})
    for r in runs:
        for cause, v in r.stalls.items():
            stalls[cause] += v
    unit_bytes = [sum(r.unit_bytes[u] for r in runs) for u in range(hw.load_units)]
    result.layers.append(LayerResult(
        op, name, op.name.removeprefix("nn."), sum(r.cycles for r in runs), useful(op, runs),
        sum(r.lane_macs for r in runs), sum(r.dram_bytes for r in runs), len(image.code),
        sum(r.dynamic for r in runs), stalls, _attr(image_op, "mode"), _attr(image_op, "loop_order"),
        _load_imbalance(image_op, unit_bytes),
        bool(np.array_equal(got, expected.words)) and saturated == golden_saturated and read_exact,
        sum(r.simulate_s for r in runs), compile_s, None if out_op is op else layer_name(out_op, out_op.name),
        saturated))
    return got


def device_report(run: DeviceRun, hw: SnowflakeConfig, model: str, host_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The report (docs/machine.md, "Report fields"): device layers with their machine numbers, host layers with their
    estimated host time; `total.ms` is the device time (as C17 Table 2), `total.host_ms` beside it,
    `total.end_to_end_ms` the two and the round trips between them on one timeline (timeline.py)."""
    layers = []
    ops = [row["_op"] for row in host_rows]
    op_named = {row["name"]: row["_op"] for row in host_rows}
    by_op = {id(layer.op_ref): layer for layer in run.layers}
    computed_by = {layer.fused: layer.name for layer in run.layers if layer.fused is not None}
    for row in host_rows:
        op = row.pop("_op", None)
        layer = by_op.get(id(op))
        # the machine's count for a device layer, the golden model's where it ran (host, views)
        row.update(saturation(layer.saturated if layer is not None else run.saturated.get(op, 0), op))
        if layer is None:
            if row["name"] in computed_by:  # 0 cycles of its own: in the conv's
                row["computed_by"] = computed_by[row["name"]]
            layers.append(row | bound.NO_BOUND)
            continue
        ms = hw.cycles_to_ms(layer.cycles)
        if layer.fused is not None:  # its program also computed the max pool reading it
            row["computes"] = layer.fused
        row.update({"cycles": layer.cycles, "ms": ms, "macs": layer.macs, "lane_macs": layer.lane_macs,
                    "mac_utilization": layer.macs / (layer.cycles * hw.macs) if layer.cycles else 0.0,
                    "dram_bytes": layer.dram_bytes, "gbps": layer.dram_bytes / (ms * 1e6) if ms else 0.0,
                    "stall_cycles": layer.stalls, "mode": layer.mode, "loop_order": layer.loop_order,
                    "load_imbalance_pct": layer.imbalance,
                    # given the machine's own inputs, its output equals the golden model's (the first
                    # layer without it is where a wrong result starts)
                    "golden_bit_exact": layer.bit_exact})
        if layer.cycles:  # the layer's bound on this machine (bound.py): 0 cycles, nothing ran
            traffic = bound.compulsory(op, hw.element_bytes, op_named.get(layer.fused))
            row.update(bound.row_fields(layer.cycles, layer.macs, traffic, hw))
        else:
            row.update(bound.NO_BOUND)
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
    total.update(bound.total_fields(layers, ms, hw))
    trips = place_on_timeline(layers, ops, any(linked(op.get_toplevel_object()) for op in ops[:1]
                                               if isinstance(op.get_toplevel_object(), ModuleOp)))
    totals(total, trips)
    return {"model": model, "hw": hw.to_json(), "total": total, "layers": layers, "check": None,
            "inputs": inputs_report(run.input_saturated), "round_trips": trips}
