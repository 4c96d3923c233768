"""
Running a whole-model lowering (allocate-dram + link-segments) on the machine model: one
program per device segment, on one DRAM per batch image that the host and every segment share.

Before a segment, the host writes into the DRAM the tensors its layers read that no layer of the
segment writes (model inputs, host layers' outputs; a tensor an earlier segment wrote is already
there and is written again with the same words); then the segment's program runs once, and the
machine marks each layer's start (snowir/machine/core.py: `Mark`), which gives the report its
per-layer cycles, stalls and bytes. At each marker the previous layer's output is read from the
DRAM (the plan keeps it live at least that long) and compared, bit for bit, with the golden
model's output of the same nn op on the machine's own inputs. The host layers between
segments run as in the golden model, on what the device left in DRAM.
"""

from __future__ import annotations

from dataclasses import replace

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Operation, SSAValue

from snowir.dialects import nn, snowflake_asm as sf
from snowir.device_layers import DEVICE_OPS
from snowir.driver.results import Counts, DeviceRun, LayerResult, useful
from snowir.golden import Golden, Q, depth_to_space, element_frac
from snowir.host_model import useful_macs
from snowir.hw import SnowflakeConfig
from snowir.machine.core import Machine, Mark
from snowir.machine.image import ProgramImage, assemble
from snowir.machine.run import DEFAULT_MAX_INSTRUCTIONS, imbalance, run_engine, stall_breakdown
from snowir.machine.timing import Event
from snowir.nn_util import layer_name
from snowir.plan.shapes import LoweringError
from snowir.segments import (HOST_READ_FACT, host_read_of, members_of, main_of, placed_concat, placed_host_read,
                             placed_interleave, root, segments_of, slot_of)
from snowir.tile.build import RUNTIME_KERNELS, device_input, layer_conv_shape, weight_image


def linked(module: ModuleOp) -> bool:
    """The module runs as whole-model programs (link-segments made segment images)."""
    return any(isinstance(op, sf.ImageOp) and "segment" in op.attributes for op in module.ops)


def device_order(image: np.ndarray, tiles: int = 0) -> np.ndarray:
    """One image of a tensor in the device's byte order: (C, H, W) channel-innermost, or channel-
    tile-major in blocks of `tiles` channels (`Slot.tiles`: block g an (H, W, tiles) run after
    block g - 1); a tensor of other rank is a view whose order the device shares
    (snowir/segments.py: is_view)."""
    if image.ndim == 3 and tiles:
        c, h, w = image.shape
        return np.ascontiguousarray(image.reshape(c // tiles, tiles, h, w).transpose(0, 2, 3, 1)).ravel()
    if image.ndim == 3:
        return np.ascontiguousarray(image.transpose(1, 2, 0)).ravel()
    return np.ascontiguousarray(image).ravel()


def _image_bytes(words: np.ndarray, images: int, i: int, tiles: int = 0) -> np.ndarray:
    """Image `i` of `images` of a tensor's words in the device's byte order. The tensor may be a
    view's source of another leading dimension (sequence-gemm's [T, K] read as one 1xKx1xT image):
    its bytes in order, split into the layer's images."""
    full = np.concatenate([device_order(w, tiles) for w in words]) if words.ndim else words.reshape(1)
    return full.reshape(images, -1)[i].astype("<i2").view(np.uint8)


def _between(a: Mark, b: Mark) -> Counts:
    return Counts(b.t - a.t, {k: b.stalls.get(k, 0) - a.stalls.get(k, 0) for k in set(a.stalls) | set(b.stalls)},
                   b.macs - a.macs, b.lane_macs - a.lane_macs, b.dram_bytes - a.dram_bytes,
                   [y - x for x, y in zip(a.unit_bytes, b.unit_bytes)], b.dynamic - a.dynamic,
                   b.saturated - a.saturated)


def _end_mark(machine: Machine) -> Mark:
    t = machine.timing
    machine.flush()
    return Mark("end", t.total_cycles(), machine.dynamic, dict(t.stalls), t.macs, t.lane_macs, t.dram_bytes,
                tuple(t.unit_bytes), machine.state.saturated)


def model_dram_bytes(images: Sequence[ProgramImage]) -> int:
    """The DRAM every segment program and the host share: up to the highest segment or code end."""
    end = max(max(image.code_end, max((s.end for s in image.segments), default=0)) for image in images)
    return end + end % 2


def run_segments(module: ModuleOp, x, hw: SnowflakeConfig, engine: str = "fast", progress=None,
                 record: bool = False, assembled: dict[str, ProgramImage] | None = None, record_layer=None,
                 max_instructions: int | None = DEFAULT_MAX_INSTRUCTIONS):
    """`run_device` for a linked module (same DeviceRun)."""
    golden = Golden(module)
    block = main_of(module).body.block
    images = {op.sym_name.data: op for op in module.ops if isinstance(op, sf.ImageOp)}
    assembled = {} if assembled is None else assembled
    t0 = time.perf_counter()
    for name, op in images.items():
        if name not in assembled:
            assembled[name] = assemble(op)
    compile_s = time.perf_counter() - t0
    for image in assembled.values():
        image.check_machine(hw)
    size = model_dram_bytes(list(assembled.values()))
    env: dict[SSAValue, Any] = golden.inputs([x] if isinstance(x, np.ndarray) else list(x))
    segs = segments_of(block)
    ops_of: dict[str, list[Operation]] = {}
    for op in block.ops:
        ref = op.attributes.get("layer")
        if isinstance(op, DEVICE_OPS) and isinstance(ref, StringAttr):
            ops_of.setdefault(ref.data, []).append(op)
    first_of = {s.layers[0]: k for k, s in enumerate(segs.segments)}
    eta = Eta([name for seg in segs.segments for name in seg.layers], ops_of, progress)
    result = DeviceRun([])
    drams: list[np.ndarray] = []
    host_reads: dict[SSAValue, Q] = {}  # a merged conv's interleave, as the host read it from the conv's grid
    start_cycle = 0
    ret = None
    for op in block.ops:
        if isinstance(op, func.ReturnOp):
            ret = op
            break
        if isinstance(op, nn.SoftmaxOp):
            result.logits = golden._float(env[op.input])
        ref = op.attributes.get("layer")
        if isinstance(op, DEVICE_OPS) and isinstance(ref, StringAttr):
            k = first_of.pop(ref.data, None)
            if k is None:
                continue  # ran with its segment
            segment = segs.segments[k]
            image_name = op.attributes["image"].data  # type: ignore[union-attr]
            if image_name not in assembled:
                raise LoweringError(f"layer '{ref.data}' names image @{image_name}, which the module lacks")
            image = assembled[image_name]
            n = op.results[0].type.get_shape()[0]
            while len(drams) < n:
                drams.append(np.zeros(size, np.uint8))
            say = None if progress is None else eta.layer_starts
            # a segment runs once per image of its own batch (a sequence GEMM's is one image, an
            # fc-to-conv dense over T rows T); the DRAMs of images beyond it keep what they hold
            start_cycle = _run_segment(result, golden, env, image, images[image_name], segment.layers, ops_of, drams[:n],
                                       hw, engine, record, compile_s * len(segment.layers) / len(ops_of),
                                       start_cycle, say, record_layer, max_instructions, host_reads)
            continue
        if placed_host_read(op) and op.results[0] in host_reads:  # no host layer: the host's read of the grid
            env[op.results[0]] = host_reads.pop(op.results[0])
            continue
        golden.step(op, env)
    if ret is None:
        raise LoweringError("@main has no func.return")
    result.outputs = [golden._float(env[v]) for v in ret.arguments]
    if result.logits is None:
        result.logits = result.outputs[0]
    result.saturated, result.input_saturated = golden.saturated, golden.input_saturated
    return result


class Eta:
    """Progress per layer with the share of the work done and an estimate of the time left:
    the simulator's time goes with a layer's MACs (a max pool: its output words)."""

    def __init__(self, order: list[str], ops_of: dict[str, list[Operation]], progress) -> None:
        self.order = order
        self.work = [max(useful_macs(ops_of[name][0]), _words(ops_of[name][-1])) if name in ops_of else 1
                     for name in order]
        self.total = sum(self.work) or 1
        self.progress = progress
        self.start = time.perf_counter()

    def layer_starts(self, _index: int, name: str) -> None:
        k = self.order.index(name)
        done = sum(self.work[:k]) / self.total
        elapsed = time.perf_counter() - self.start
        left = f", about {elapsed * (1 - done) / done:.0f} s left" if done > 0.02 and elapsed > 1 else ""
        self.progress(f"layer {k + 1}/{len(self.order)}: {name} ({100 * done:.0f}% of the work done{left})")


def _words(op: Operation) -> int:
    return int(np.prod(op.results[0].type.get_shape())) if op.results else 0


def _run_segment(result, golden: Golden, env: dict, image: ProgramImage, image_op: sf.ImageOp, layers: list[str],
                 ops_of: dict[str, list[Operation]], drams: list[np.ndarray], hw: SnowflakeConfig, engine: str,
                 record: bool, compile_s: float, start_cycle: int, say=None, record_layer=None,
                 max_instructions: int | None = DEFAULT_MAX_INSTRUCTIONS, host_reads: dict | None = None) -> int:
    markers = {m.name: m for m in image.markers}
    missing = [name for name in layers if name not in markers]
    if missing:
        raise LoweringError(f"image @{image.name} has no marker for layer '{missing[0]}'")
    inside = {ops_of[name][-1].results[0] for name in layers} | {ops_of[name][0].results[0] for name in layers}
    outs: dict[str, list[np.ndarray]] = {name: [] for name in layers}
    counts: dict[str, list[Counts]] = {name: [] for name in layers}
    simulate_s = 0.0
    for i, dram in enumerate(drams):
        for name in layers:  # the host's writes: what the segment reads and does not write
            conv = ops_of[name][0]
            facts = markers[name].facts
            for key, value in (("x", device_input(conv)), ("r", getattr(conv, "bypass", None))):
                if value is None or key not in facts or root(value) in inside:
                    continue
                seg = image.segment(facts[key])
                if placed_interleave(root(value).owner) and any(v in inside for v in root(value).owner.operands):
                    continue  # an interleave's phases, written by this segment's convs in place
                if placed_concat(root(value).owner):  # the slices the host wrote, not the segment's layers
                    _write_slices(dram, seg, root(value), golden, env, inside, len(drams), i)
                    continue
                words = golden._q(env[root(value)], element_frac(root(value)))
                raw = _image_bytes(words, len(drams), i, slot_of(root(value)).tiles)
                if raw.size != seg.size:
                    raise LoweringError(f"layer '{name}': segment @{seg.name} holds {seg.size} bytes, its input "
                                        f"has {raw.size}")
                dram[seg.address:seg.end] = raw
        machine = Machine(image, hw, record, dram)
        for name in layers:  # kernels computed at run time (an SE gate): the host packs and writes them
            conv = ops_of[name][0]
            if isinstance(conv, nn.Conv2dOp) and RUNTIME_KERNELS in conv.attributes:
                _ensure(golden, env, conv.weight)
                words = runtime_weight_image(conv, golden, env, markers[name].facts["mode"], hw,
                                             markers[name].facts.get("biases", "kernel"))
                seg = image.segment(markers[name].facts["w"])
                if 2 * words.size > seg.size:
                    raise LoweringError(f"layer '{name}': weights segment @{seg.name} holds {seg.size} bytes, its "
                                        f"run-time kernels {2 * words.size}")
                machine.state.dram[seg.address:seg.address + 2 * words.size] = \
                    np.ascontiguousarray(words, dtype="<i2").view(np.uint8).ravel()
        order = [m.name for m in image.markers]

        def read_output(index: int, machine=machine) -> None:
            if say is not None and i == 0:
                say(index, order[index])
            if index:  # the previous layer's output, while the plan still keeps it
                prev = order[index - 1]
                seg = image.segment(markers[prev].facts["y"])
                outs[prev].append(machine.state.dram[seg.address:seg.end].view("<i2").copy())

        machine.on_mark = read_output
        t = time.perf_counter()
        run_engine(machine, engine, lambda: image_op, max_instructions)
        machine.timing.finish()
        simulate_s += time.perf_counter() - t
        last = order[-1]
        seg = image.segment(markers[last].facts["y"])
        outs[last].append(machine.read_segment(seg.name))
        marks = [*machine.marks, _end_mark(machine)]
        for a, b in zip(marks, marks[1:]):
            counts[a.name].append(_between(a, b))
        if record:  # the chosen layers' spans (`record_layer`): events that start in them
            offset = start_cycle
            windows = [(a.t, b.t) for a, b in zip(marks, marks[1:]) if record_layer is None or record_layer(a.name)]
            for a, b in zip(marks, marks[1:]):
                if record_layer is None or record_layer(a.name):
                    result.events.append(Event("control", f"layer {a.name}" + (f" image {i}" if len(drams) > 1 else ""),
                                               offset + a.t, offset + b.t))
            result.events.extend(Event(e.track, e.name, e.start + offset, e.end + offset, e.count, e.mix, e.part)
                                 for e in machine.timing.events if any(lo <= e.start < hi for lo, hi in windows))
        start_cycle += marks[-1].t
    total_dynamic = sum(c.dynamic for name in layers for c in counts[name]) or 1
    for name in layers:
        conv, out_op = ops_of[name][0], ops_of[name][-1]
        for operand in conv.operands:  # constants, views and slices @main reaches after the segment's first op
            _ensure(golden, env, operand)
        expected = golden._op(conv, env)
        golden_saturated = golden.saturated[conv]
        if out_op is not conv:
            env[conv.results[0]] = expected
            expected = golden._op(out_op, env)
            golden_saturated += golden.saturated[out_op]
        got = np.stack([out_slice(y, out_op.results[0]) for y in outs[name]])
        env[out_op.results[0]] = Q(got.astype(np.int16), element_frac(out_op.results[0]))
        read_exact = True
        if HOST_READ_FACT in markers[name].facts:  # the host reads its grid back through its interleave
            read_exact = read_through_interleave(host_reads, out_op.results[0], outs[name],
                                                 markers[name].facts[HOST_READ_FACT], expected.words)
        runs = counts[name]
        stalls = stall_breakdown({})
        for r in runs:
            for cause, v in r.stalls.items():
                stalls[cause] = stalls.get(cause, 0) + v
        facts = markers[name].facts
        unit_bytes = [sum(r.unit_bytes[u] for r in runs) for u in range(hw.load_units)]
        dynamic = sum(r.dynamic for r in runs)
        pct = facts.get("load_imbalance_pct")
        saturated = sum(r.saturated for r in runs)
        result.layers.append(LayerResult(
            conv, layer_name(conv, conv.name), conv.name.removeprefix("nn."), sum(r.cycles for r in runs),
            useful(conv, runs), sum(r.lane_macs for r in runs), sum(r.dram_bytes for r in runs),
            _static(image, name), dynamic, stalls, facts.get("mode"), facts.get("loop_order"),
            float(pct) if pct is not None else imbalance(unit_bytes),
            bool(np.array_equal(got, expected.words)) and saturated == golden_saturated and read_exact,
            simulate_s * dynamic / total_dynamic, compile_s / len(layers),
            None if out_op is conv else layer_name(out_op, out_op.name), saturated))
    return start_cycle


def host_read_words(y: np.ndarray, layout: Sequence[int], k: int, oh: int, ow: int) -> np.ndarray:
    """The host's read of a merged conv's phase grid through its interleave (the output region's
    `host_read` = (sy, sx, oy, ox, height, width)), from the words of the conv's output region (K
    channels of an oh x ow grid, channel-innermost): result pixel (y, x) channel m is grid pixel
    ((y + oy) div sy, (x + ox) div sx) channel (((y + oy) mod sy)·sx + (x + ox) mod sx)·M + m; each
    result word read once. Returns (M, height, width)."""
    sy, sx, oy, ox, height, width = (int(v) for v in layout)
    m = k // (sy * sx)
    grid = y[:oh * ow * k].reshape(oh, ow, sy, sx, m).transpose(4, 0, 2, 1, 3).reshape(m, oh * sy, ow * sx)
    return np.ascontiguousarray(grid[:, oy:oy + height, ox:ox + width])


def read_through_interleave(host_reads: dict | None, grid: SSAValue, outs: list[np.ndarray], fact,
                            expected: np.ndarray) -> bool:
    """Read a merged conv's interleave from its grid words as the marker's `host_read` fact says
    (what the host does as it copies the result back), record it for the interleave's readers, and
    whether it equals the graph's interleave of the golden model's grid."""
    reader = host_read_of(grid)
    if reader is None:
        raise LoweringError(f"a layer's output is read through host_read {fact}, but no host-read interleave reads it")
    layout = [int(v) for v in str(getattr(fact, "data", fact)).split(",")]
    _, k, oh, ow = grid.type.get_shape()
    got = np.stack([host_read_words(y, layout, k, oh, ow) for y in outs])
    _, _, height, width = reader.output.type.get_shape()
    want = depth_to_space(expected, nn.int_values(reader.block), nn.int_values(reader.offsets),
                          reader.groups.value.data, height, width)
    if host_reads is not None:
        host_reads[reader.output] = Q(got.astype(np.int16), element_frac(reader.output))
    return got.shape == want.shape and bool(np.array_equal(got, want))


def runtime_weight_image(conv: nn.Conv2dOp, golden: Golden, env: dict, mode, hw: SnowflakeConfig,
                         biases="kernel") -> np.ndarray:
    """The packed weight image of a conv whose kernels are a run-time tensor (passes/nn/se_gate.py):
    the tensor's words in its own format, packed as tile/build.weight_image packs constants (its
    biases where the layer's image keeps them, `biases`)."""
    kernels = golden._q(env[conv.weight], element_frac(conv.weight))
    mode = mode.data if hasattr(mode, "data") else str(mode)
    biases = biases.data if hasattr(biases, "data") else str(biases)
    return weight_image(conv, replace(layer_conv_shape(conv), bias_at=biases), mode, hw, kernels)


def out_slice(y: np.ndarray, value: SSAValue) -> np.ndarray:
    """A layer's (C, H, W) output from the words of its output region: its channel slice of every
    pixel when it writes a device concat's tensor (`slot_of`), its blocks of a channel-tile-major
    one, else the region as it is."""
    _, k, oh, ow = value.type.get_shape()
    slot = slot_of(value)
    if slot.tiles:  # channel-tile-major: block g an (oh, ow, tiles) run, from the slot's first block
        t = slot.tiles
        blocks = y[:oh * ow * slot.total].reshape(slot.total // t, oh, ow, t)[slot.first // t:(slot.first + k) // t]
        return blocks.transpose(0, 3, 1, 2).reshape(k, oh, ow)
    if slot.pixels is not None:  # an interleave's phase: every sy-th row's every sx-th pixel
        oy, ox, sy, sx, h, w = slot.pixels
        full = y[:h * w * slot.total].reshape(h, w, slot.total)
        return full[oy::sy, ox::sx][:oh, :ow, slot.first:slot.first + k].transpose(2, 0, 1)
    if slot.phases is not None:  # a merged conv's phases: channel (a·sx + b)·M + m at pixel (sy·i + a, sx·j + b)
        sy, sx, h, w = slot.phases
        m = k // (sy * sx)
        full = y[:h * w * m].reshape(oh, sy, ow, sx, m)
        return full.transpose(1, 3, 4, 0, 2).reshape(k, oh, ow)
    return y[:oh * ow * slot.total].reshape(oh, ow, slot.total)[:, :, slot.first:slot.first + k].transpose(2, 0, 1)


def tensor_words(golden: Golden, env: dict, value: SSAValue) -> np.ndarray:
    """The int16 words of the tensor a layer reads: a device concat's from the slices computed so
    far (a layer reading its first channels runs before the later slices exist; the rest are 0)."""
    if value in env or not placed_concat(value.owner):
        return golden._q(env[value], element_frac(value))
    out = np.zeros(value.type.get_shape(), np.int16)
    for member, first in members_of(value.owner):  # type: ignore[arg-type]
        if member in env and not placed_concat(member.owner):
            out[:, first:first + member.type.get_shape()[1]] = golden._q(env[member], element_frac(member))
    return out


def _write_slices(dram: np.ndarray, seg, concat: SSAValue, golden: Golden, env: dict, inside: set,
                  images: int, i: int) -> None:
    """The host's part of a device concat's tensor: each input neither a layer of this segment nor
    a concat writes (a host layer's output, a model input, an earlier segment's), in its channel slice
    of every pixel; the inputs not computed yet are written by their own layers later."""
    _, total, h, w = concat.type.get_shape()
    pixels = dram[seg.address:seg.address + 2 * h * w * total].view("<i2").reshape(h * w, total)
    for member, first in members_of(concat.owner):  # type: ignore[arg-type]
        if member in inside or placed_concat(member.owner) or member not in env:
            continue
        c = member.type.get_shape()[1]
        words = golden._q(env[member], element_frac(member))
        pixels[:, first:first + c] = words.reshape(images, c, h * w)[i].T


def _ensure(golden: Golden, env: dict, value: SSAValue) -> None:
    """The golden model's value of `value`, stepping the ops it comes from if not yet there."""
    if value in env:
        return
    op = value.owner
    assert isinstance(op, Operation)
    for operand in op.operands:
        _ensure(golden, env, operand)
    golden.step(op, env)


def _static(image: ProgramImage, name: str) -> int:
    """Instructions of the layer's code: from its marker to the next one."""
    pcs = [m.pc for m in image.markers] + [len(image.code)]
    i = [m.name for m in image.markers].index(name)
    return pcs[i + 1] - pcs[i]
