"""
allocate-dram: the model's DRAM plan (C17 §5.1: "different regions in CMA are allocated
according to layer dependencies"), as a `tile.dram_plan` the tile verifier checks.

Before it, every `tile.layer` has a DRAM of its own (its regions from address 0) and the host
would copy each layer's output into the next layer's input. After it, the layers share one DRAM:

  * a tensor the device reads or writes is one `tile.tensor`: a layer's output region is its
    consumers' maps (or bypass) region, through reshapes that keep the bytes in place, channel
    slices read in place and device crops (their readers' region the whole tensor, with `crop`);
    a residual input stays where its producer wrote it; a device concat is
    one tensor, each input a channel slice of it (snowir/segments.py `slot_of`), written by its
    producer's output region (`channels`) and read in place;
  * weights are laid out once, at the bottom, live for the whole model; a layer's scratch lives
    for that layer;
  * tensors the host writes (model inputs, host layers' outputs) are live from the start of the
    segment that first reads them, and a device concat the host writes a slice of from the start
    of the segment after that host layer (its device slices may come much later); tensors the
    host reads stay live until the segment before it ends (snowir/segments.py says where the host
    steps in);
  * addresses are first-fit by liveness, page aligned: two tensors live at the same layer
    never overlap (`tile.dram_plan` refuses a plan where they do).

Every region moves to its tensor's offset, and the loads and windows that address it move with
it (their DRAM addresses are the only ones in the tile IR), so the generated code reads and
writes the plan's addresses. The pass also decides `fence` (see `needs_fence`): a layer whose
first loads could land on buffer words the previous layer's last vector ops still read waits
for them; the others overlap the previous layer's drain. A conv after a fenced max pool also gets
`weights_before_fence`: the pool unit reads no weights, so the conv's cold-start kernel loads issue
at once and only its maps loads wait (`tile.weights_free`). So does a conv after a conv whose last
kernel tile sits in its second weights slot, above every word the conv's first kernels load
(snowir/plan/weights_end.py; tile-to-asm refuses the attribute where that does not hold); after
such a conv, `kernels_preloaded` too where the conv loads its kernel tile 0 once: the previous
conv's last kernel tile then loads it, thousands of cycles before this layer's code starts,
where that tile's MACs hide the loads' issue (`preload_pays`: a conv whose control pipeline is
already its limit would run slower by them). After a conv whose last kernel tile sits in slot 0
(a serpentine conv, `kernel_order`), a plain Kloop conv starts its kernel tiles in the second
slot (`first_slot`), so the same holds.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr, i64
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from snowir.dialects import tile
from snowir.dialects.tile.decisions import FENCE, FIRST_SLOT, KERNELS_PRELOADED, MAPS_PRELOADED, WEIGHTS_BEFORE_FENCE
from snowir.device_layers import DEVICE_OPS
from snowir.hw import DRAM_PAGE_BYTES, SnowflakeConfig
from snowir.nn_util import layer_name
from snowir.segments import main_of, placed_concat, read_sources, segments_of, slot_of
from snowir.errors import SnowError
from snowir.tile.build import device_input, regions_of
from snowir.plan.shapes import LoweringError
from snowir.plan.weights_end import (first_slot_after, kernels_preloaded_refusal, maps_preloaded_refusal,
                                     preload_pays, weights_before_fence_refusal)
from snowir.tile.derive import derive_layer
from snowir.tile.read import TileError, conv_plan_of, tile_layers

PAGE = DRAM_PAGE_BYTES
"""Tensors start on a DRAM page (the page interlock then never couples two tensors)."""


@dataclass
class _Tensor:
    name: str
    role: str
    first: int
    last: int
    size: int = 0
    regions: list[tile.DramRegionOp] = field(default_factory=list)
    offset: int = -1


def _page(n: int) -> int:
    return -(-n // PAGE) * PAGE


def _place(tensors: list[_Tensor]) -> None:
    """First fit by liveness: each tensor at the lowest page-aligned address where it overlaps no
    placed tensor live at the same time (weights first: they are live throughout)."""
    placed: list[_Tensor] = []
    for t in sorted(tensors, key=lambda t: (t.role != "weights", t.first, -t.size)):
        busy = sorted((p.offset, p.offset + p.size) for p in placed if p.first <= t.last and t.first <= p.last)
        at = 0
        for lo, hi in busy:
            if at + t.size <= lo:
                break
            at = max(at, _page(hi))
        t.offset = at
        placed.append(t)


def _move(layer: tile.LayerOp, moves: list[tuple[int, int, int]]) -> None:
    """Shift every load's and window's DRAM address by the move of the region it falls in."""

    def moved(addr: int, what: str) -> int:
        for lo, hi, delta in moves:
            if lo <= addr < hi:
                return addr + delta
        raise PassFailedException(f"allocate-dram: layer @{layer.sym_name.data}: {what} address {addr} is in "
                                  "none of the layer's tile.dram_regions")

    for op in layer.walk():
        if isinstance(op, tile.LoadOp):
            op.properties["dram_addr"] = IntegerAttr(moved(op._int("dram_addr"), "a load's DRAM"), i64)
        elif isinstance(op, tile.WindowOp):
            op.properties["out_addr"] = IntegerAttr(moved(op._int("out_addr"), "a window's output"), i64)


def needs_fence(previous: tile.LayerOp, layer: tile.LayerOp) -> bool:
    """Whether `layer`'s first loads may land on buffer words `previous`'s last vector ops read.

    Every layer's code starts on buffer word 0 of its maps and weights buffers and its last
    tiles read wherever they were; which words those are follows from the tiles, but only after
    code generation places them. Until the tile IR records each layer's buffer footprint, every
    layer but a segment's first waits (the fence costs a vector queue's depth of cycles and the
    previous layer's last vector ops; the write-backs, icache loads and program start still overlap)."""
    return True


def _holds(refusal, previous: tile.LayerOp, layer: tile.LayerOp, hw: SnowflakeConfig) -> bool:
    """A conv after a conv, where the weights_end rule `refusal` of the pair's plans has no
    objection: `weights_before_fence_refusal` (the previous conv's last kernel tile reads none of
    the words the conv's first kernels load: they load before the fence) or
    `kernels_preloaded_refusal` (that tile may load them itself, while it computes).
    snowir/plan/weights_end.py."""
    if previous.kind.data != tile.LayerKind.CONV:
        return False
    try:
        return refusal(conv_plan_of(previous), conv_plan_of(layer), hw) is None
    except (SnowError, LoweringError):
        return False


def _first_slot(previous: tile.LayerOp, layer: tile.LayerOp, hw: SnowflakeConfig) -> int:
    """The conv's `first_slot` after the conv `previous` (snowir/plan/weights_end.first_slot_after)."""
    try:
        return first_slot_after(conv_plan_of(previous), conv_plan_of(layer), hw)
    except (SnowError, LoweringError):
        return 0


@dataclass(frozen=True)
class AllocateDramPass(ModulePass):
    name = "allocate-dram"
    hw: str = ""
    per_layer_if_too_big: bool = True
    """A plan larger than the machine's DRAM (every weight resident: VGG-19's 287 MB against
    256 MB): leave the layers unplanned, one program per layer whose weights the host writes in
    turn, and say so on stderr; false: refuse."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if any(isinstance(o, tile.DramPlanOp) for o in op.ops):
            return  # planned already
        layers = tile_layers(op, self.name)
        if not layers:
            return
        hw = SnowflakeConfig.load(self.hw or None)
        for layer in layers:  # bodies written empty, weights repacked: the sizes the plan must hold
            try:
                derive_layer(layer, hw)
            except (TileError, LoweringError) as e:
                raise PassFailedException(f"allocate-dram: {e}") from None
        by_name = {layer.sym_name.data: layer for layer in layers}
        main = main_of(op)
        segs = segments_of(main.body.block)
        order = [name for s in segs.segments for name in s.layers]
        if sorted(order) != sorted(by_name):
            missing = sorted(set(by_name) - set(order))
            raise PassFailedException(f"allocate-dram: tile layers {missing[:3]} are named by no op of @main")
        position = segs.position
        # graph order is the layers' order: module order must follow it for positions to mean time
        for name, layer in zip(order, [by_name[n] for n in order]):
            layer.detach()
            op.body.block.add_op(layer)
        ops: dict[str, list[Operation]] = {}
        for inner in main.body.block.ops:
            name = inner.attributes.get("tile")
            if isinstance(inner, DEVICE_OPS) and isinstance(name, StringAttr):
                ops.setdefault(name.data, []).append(inner)
        tensors: dict[SSAValue | str, _Tensor] = {}
        taken = {region.sym_name.data for layer in layers for region in regions_of(layer).values()}
        last_layer = len(order) - 1

        def activation(value: SSAValue, name: str) -> _Tensor:
            value = slot_of(value).root  # a device concat's inputs are slices of its one tensor
            if value not in tensors:
                if placed_concat(value.owner):  # named after the concat, not its first region
                    name = base = layer_name(value.owner, "concat")  # type: ignore[arg-type]
                    while name in taken:
                        name = f"{base}_{len(taken)}"
                    taken.add(name)
                tensors[value] = _Tensor(name, "activation", last_layer + 1, -1)
            return tensors[value]

        for name in order:
            layer, at = by_name[name], position[name]
            conv = ops[name][0]
            out = ops[name][-1]  # a fused pool's, after its conv
            for label, region in regions_of(layer).items():
                if label == "maps" or label == "bypass":
                    value = device_input(conv) if label == "maps" else conv.bypass  # type: ignore[union-attr]
                    t = activation(value, region.sym_name.data)
                    t.last = max(t.last, at)
                    if t.first > at:  # written by the host: from the start of the segment reading it
                        t.first = segs.first_position(segs.segment_of(name))
                elif label == "output":
                    t = activation(out.results[0], region.sym_name.data)
                    t.first = min(t.first, at)
                    t.last = max(t.last, at)
                else:
                    role = "weights" if label == "weights" else "scratch"
                    t = tensors[region.sym_name.data] = _Tensor(
                        region.sym_name.data, role, 0 if role == "weights" else at, last_layer if role == "weights" else at)
                t.regions.append(region)
                t.size = max(t.size, region.size.value.data)
        # a host layer (or the model input) that writes a slice of a device concat makes the concat's
        # one tensor live from the start of the segment after it: a device layer of that segment may
        # write the concat's other slices only later, and nothing else may sit there meanwhile
        written = [(0, arg) for arg in main.body.block.args]
        written += [(index, result) for index, s in enumerate(segs.segments) for host in s.host_before
                    for result in host.results]
        for index, value in written:
            root = slot_of(value).root
            if root is not value and root in tensors:  # a slice of a concat's tensor, not a tensor of its own
                tensors[root].first = min(tensors[root].first, segs.first_position(index))
        # the host reads a device tensor once the segment that wrote it has ended
        for index, s in enumerate(segs.segments):
            for host in s.host_before:
                for operand in (r for v in host.operands for r in read_sources(v)):  # through host-read rearrangements
                    t = tensors.get(slot_of(operand).root)
                    if t is not None and index:
                        t.last = max(t.last, segs.last_position(index - 1))
        ret = list(main.body.block.ops)[-1]
        outputs = [s for v in ret.operands for s in read_sources(v)]  # through host-read rearrangements
        for operand in [*outputs, *(r for h in segs.host_after for o in h.operands for r in read_sources(o))]:
            t = tensors.get(slot_of(operand).root)
            if t is not None:
                t.last = last_layer
        planned = list(tensors.values())
        _place(planned)
        needed = max((t.offset + t.size for t in planned), default=0)
        if needed > hw.dram_bytes:
            why = f"allocate-dram: the model needs {needed:,} bytes of DRAM, the machine has {hw.dram_bytes:,}"
            if not self.per_layer_if_too_big:
                raise PassFailedException(why)
            print(f"warning: {why}: one program per layer instead (per-layer-if-too-big=false refuses)",
                  file=sys.stderr)
            return
        moves: dict[str, list[tuple[int, int, int]]] = {}
        for t in planned:
            for region in t.regions:
                layer = region.parent_op()
                assert isinstance(layer, tile.LayerOp)
                old = region.offset.value.data
                moves.setdefault(layer.sym_name.data, []).append((old, old + region.size.value.data, t.offset - old))
                region.properties["offset"] = IntegerAttr(t.offset, i64)
                region.properties["tensor"] = StringAttr(t.name)
        previous = None
        for name in order:
            layer = by_name[name]
            _move(layer, moves[name])
            same_segment = previous is not None and segs.segment_of(previous.sym_name.data) == segs.segment_of(name)
            if same_segment and needs_fence(previous, layer):
                FENCE.write(layer, True)
                if layer.kind.data == tile.LayerKind.CONV and previous.kind.data == tile.LayerKind.CONV \
                        and not tile.weights_free(previous):
                    FIRST_SLOT.write(layer, _first_slot(previous, layer, hw))
                if layer.kind.data == tile.LayerKind.CONV and (tile.weights_free(previous)
                                                               or _holds(weights_before_fence_refusal, previous, layer, hw)):
                    WEIGHTS_BEFORE_FENCE.write(layer, True)
                    if _holds(kernels_preloaded_refusal, previous, layer, hw) \
                            and preload_pays(conv_plan_of(previous), conv_plan_of(layer), hw):
                        KERNELS_PRELOADED.write(layer, True)
                if layer.kind.data == tile.LayerKind.CONV and _holds(maps_preloaded_refusal, previous, layer, hw):
                    MAPS_PRELOADED.write(layer, True)
            previous = layer
        plan = tile.DramPlanOp([tile.TensorOp(t.name, t.offset, t.size, (max(t.first, 0), max(t.last, t.first)), t.role)
                                for t in sorted(planned, key=lambda t: t.offset)])
        op.body.block.insert_op_before(plan, by_name[order[0]])
