"""
The `tile` IR of a layer, built from the planner's decisions, and read back.

`nn-to-tile` builds a `tile.layer` per device conv / max pool (geometry as a typed
`#tile.conv_shape` / `#tile.pool_shape`, DRAM regions with the packed weight image, kernel
tile, maps tiles with their loads and windows); `tile-loop-order` rebuilds the maps tiles of
a conv for the loop order it chooses; `tile-to-asm` reads the layer back (`conv_shape_of`,
`regions_of`). One module, so the three agree on what each attribute means.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
from xdsl.dialects.builtin import DenseArrayBase, IntegerAttr, UnitAttr, i64
from xdsl.ir import Attribute, Operation, SSAValue

from snowir.dialects import nn, snowflake_asm as sf, tile
from snowir.dialects.tile.decisions import (BIAS_LAYOUTS, BIASES, CHANNEL_TILES, CHANNELS, CROP, CU_ROWS, KERNEL_TILE,
                                          HOST_READ, LAYER, MAPS_BUFFERING, PHASES, PIXELS, PLAN_DECISIONS, RING,
                                          SLOT, decisions_on, write_decisions)
from snowir.golden import Golden, Q, constant_array, element_frac, int_values
from snowir.hw import DEFAULT, SnowflakeConfig
from snowir.nn_util import conv_shape, on_host
from snowir.plan.conv import plan_conv
from snowir.plan.fused_pool import fuse, fusing_pays
from snowir.plan.indp_columns import column_layout
from snowir.plan.residual_mode import conv_mode
from snowir.plan.layout import (LANE_GROUPS, ConvLayout, bias_block_load, block_diagonal, channel_tiles_refusal,
                                conv_layout, image_layout, pack_for, packed_kernels, packed_words, unpack)
from snowir.plan.pool import plan_pool_tiles, ring_loads
from snowir.plan.shapes import (ConvPlan, ConvShape, LoweringError, PoolShape, PoolTile, Strip, align,
                                band_plans, indp_kernel_words, input_columns, input_rows, kernel_vmacs,
                                kernels_per_tile, plan_machine, row_runs)
from snowir.resources import int16_array, int16_resource, int16_words
from snowir.segments import host_read_layout, host_read_of, slot_of
from snowir.tile.placement import (input_offset, input_placement, output_cus, output_placement, output_tile_step,
                                   regions_of)

POOL_SLACK = 64  # bytes after a pool's output: the lanes of a partly used CU write there


def conv_shape_attr(s: ConvShape) -> tile.ConvShapeAttr:
    return tile.ConvShapeAttr.get(**{f: int(getattr(s, f)) for f in tile.ConvShapeAttr.FIELDS}, **dict(s.units))


def conv_shape_of(attr: tile.ConvShapeAttr) -> ConvShape:
    v = attr.values()
    return ConvShape(**{**{f: v[f] for f in tile.ConvShapeAttr.FIELDS}, "relu": bool(v["relu"])},
                     units=tuple(attr.unit_words().items()))


def shape_of(layer: tile.LayerOp) -> ConvShape:
    """A conv layer's shape with where its weight image keeps the biases (the weights region's
    `biases`): what a kernel's words are to the planners and generators."""
    s = conv_shape_of(layer.shape)  # type: ignore[arg-type]
    regions = regions_of(layer)
    w, maps = regions.get("weights"), regions.get("maps")
    if maps is not None and s.groups > 1 and CHANNEL_TILES.value(maps) is not None:
        s = dataclasses.replace(s, block_maps=True)  # its groups read their blocks (`block_input`)
    return s if w is None else dataclasses.replace(s, bias_at=BIASES.value(w))


def pool_shape_attr(p: PoolShape) -> tile.PoolShapeAttr:
    return tile.PoolShapeAttr.get(**dataclasses.asdict(p))


def pool_shape_of(attr: tile.PoolShapeAttr) -> PoolShape:
    return PoolShape(**attr.values())


def layout_of(layer: tile.LayerOp) -> ConvLayout:
    """The conv layer's DRAM layout as its `tile.dram_region`s record it."""
    regions = regions_of(layer)
    r = regions.get("bypass")
    out = regions.get("conv_output", regions["output"])  # a fused pool's layer: the conv's own output
    s = shape_of(layer)
    first, step, row = output_placement(out, s)
    (in_first, in_row), (r_first, r_row) = input_placement(regions["maps"], s.cin), input_placement(r, s.k)
    return ConvLayout(regions["maps"].size.value.data, regions["weights"].offset.value.data,
                      regions["weights"].size.value.data, out.offset.value.data,
                      out.size.value.data, r.offset.value.data if r is not None else None, first, step, row,
                      *output_cus(out, s), output_tile_step(out, s), in_addr=regions["maps"].offset.value.data,
                      in_first=in_first + input_offset(regions["maps"], s) // 2, in_row=in_row, bypass_first=r_first,
                      bypass_row=r_row)


def device_input(op: nn.Conv2dOp | nn.MaxPoolOp) -> SSAValue:
    """The tensor a device layer reads from DRAM: a conv over a channel slice reads the
    slice's source in place (a strided view), everything else its input; either may be a slice of
    a device concat's tensor (`slot_of`), read in place too."""
    value = op.input.owner.input if isinstance(op, nn.Conv2dOp) and isinstance(op.input.owner, nn.ChannelSliceOp) \
        else op.input
    slot = slot_of(value)
    # a tensor no device concat places is read as it is: its root may be a view's source of
    # another shape (a transpose or reshape), which holds the same bytes but not the same images
    return value if slot.whole else slot.root


def layer_conv_shape(op: nn.Conv2dOp) -> ConvShape:
    s = conv_shape(op)
    if LANE_GROUPS in op.attributes:  # channels padded to whole groups of a vMAC's lanes
        return dataclasses.replace(s, c=DEFAULT.lanes, groups=-(-s.k // DEFAULT.lanes), cin_total=s.k)
    if slot_of(op.input).tiles or slot_of(device_input(op)).tiles:
        block_input(op)  # a block of a channel-tile-major tensor, read whole: the conv over it as it is
        if s.groups > 1:  # or every block, one a group
            s = dataclasses.replace(s, block_maps=True)
    elif isinstance(op.input.owner, nn.ChannelSliceOp):
        slot = slot_of(op.input.owner.input)
        s = dataclasses.replace(s, cin_total=slot.total, c_base=slot.first + op.input.owner.start.value.data)
    elif (slot := slot_of(op.input)).channels != slot.total:  # a device concat's input, read in place
        s = dataclasses.replace(s, cin_total=slot.total, c_base=slot.first)
    return s


def block_input(op: nn.Conv2dOp) -> tuple[int, int, int]:
    """The block (width, block, blocks) of a channel-tile-major tensor a conv reads, as its maps
    region's `channel_tiles`: one whole block, or, for a grouped conv whose groups are the blocks
    (each group's channels one block: depthwise-to-grouped's grouped form over blocks), the first
    of its groups' blocks (group g reads block + g, `ConvShape.block_maps`); LoweringError where the
    conv reads anything else (a channel slice of other channels, the whole tensor as pixels: the
    blocks are not one tensor's pixels)."""
    slot = slot_of(op.input)
    groups, cg = op.groups.value.data, op.weight.type.get_shape()[1]  # type: ignore[attr-defined]
    if groups > 1 and cg == slot.tiles and slot.first % slot.tiles == 0 and slot.channels == groups * cg \
            and not isinstance(op.input.owner, nn.ChannelSliceOp):
        return slot.blocks  # type: ignore[return-value]
    if not isinstance(op.input.owner, nn.ChannelSliceOp) or slot.first % slot.tiles or slot.channels != slot.tiles:
        raise LoweringError(f"it reads channels [{slot.first}, {slot.first + slot.channels}) of a tensor stored "
                            f"channel-tile-major in {slot.tiles}-channel blocks: a conv reads one whole block of it")
    return slot.blocks  # type: ignore[return-value]


def _words(value: SSAValue, frac: int) -> np.ndarray:
    """The int16 words of a quantised constant in Qm.`frac`."""
    owner = value.owner
    assert isinstance(owner, nn.ConstantOp)
    return Golden._q(Q(constant_array(owner), element_frac(value)), frac)


RUNTIME_KERNELS = "runtime_kernels"
"""nn.conv2d attribute (se-gate): its weight operand is a tensor computed at run time (an SE
block's gate), not a constant; the host packs and writes it into the layer's weights region
before each run (`weight_image` with its words)."""


def weight_image(op: nn.Conv2dOp, s: ConvShape, mode: str, hw: SnowflakeConfig,
                 kernels: np.ndarray | None = None) -> np.ndarray:
    """The DRAM weight image of a quantised conv: kernels + biases packed for the mode. A conv
    whose kernels are computed at run time (an SE gate: no constant) packs `kernels`, the int16
    words the host writes before each run (snowir/driver/segment_run.py), and zeros at compile time."""
    if isinstance(op.weight.owner, nn.ConstantOp):
        w = constant_array(op.weight.owner)
    else:
        w = np.zeros(op.weight.type.get_shape(), np.int16) if kernels is None else kernels.reshape(op.weight.type.get_shape())
    if LANE_GROUPS in op.attributes:  # one channel of a 16-lane group per kernel
        w = block_diagonal(w, s.c)
    bias = _words(op.bias, element_frac(op.output))  # added at the write-back, in the output's format
    return pack_for(w, bias, mode, packed_kernels(s, mode, hw), hw, s.bias_at)


def weights_region(name: str, lay: ConvLayout, s: ConvShape, mode: str, image: np.ndarray,
                   hw: SnowflakeConfig) -> tile.DramRegionOp:
    """The layer's weights region carrying `image`, packed for `mode` with the planner's tile, its
    biases where `s.bias_at` says."""
    w = tile.DramRegionOp(f"{name}.weights", lay.w_addr, lay.w_bytes, "weights", int16_resource(f"{name}_w", image))
    w.properties["packing"] = tile.ComputeModeAttr(tile.ComputeMode(mode))
    w.properties["packed_kernels"] = IntegerAttr(packed_kernels(s, mode, hw), i64)
    BIASES.write(w, s.bias_at)
    return w


def tile_base(plan: ConvPlan, strip: Strip, hw: SnowflakeConfig) -> int:
    """The maps-buffer word a maps tile's input rows start at: its bank (a residual conv's
    half of the buffer), 0 when it fills the buffer or the layer's tiles take turns there."""
    if strip.bank <= 0:
        return 0
    return strip.bank * (hw.maps_buffer_elements // 2 if plan.bypass_addr is not None else hw.maps_bank_elements)


def conv_tile_body(s: ConvShape, plan: ConvPlan, lay: ConvLayout, hw: SnowflakeConfig) -> list[Operation]:
    """The kernel tile and the maps tiles (loads, windows) of a planned conv."""
    w_addr, out_addr, r_addr = lay.w_addr, lay.out_addr + 2 * lay.out_first, lay.r_addr
    if lay.out_pixel:  # a channel slice of a wider tensor, an interleave's phase, blocks: pixels `out_pixel` words apart
        if lay.out_row not in (0, s.ow * lay.out_pixel) and (plan.column_tiled or plan.indp or plan.pool is not None or plan.bypass_slices):
            raise LoweringError("a conv writing an interleave's phase (rows apart by more than its own) runs COOP, "
                                "by rows, without a fused pool or bypass slices")
        if (plan.cu_split == "cols" or plan.pool is not None) and not lay.out_tile:  # blocks: tile.placement.tiles_refusal
            raise LoweringError("a conv writing a channel slice of a concat runs without a fused pool and, in INDP, "
                                "with the CUs splitting rows (a column-split INDP conv's CU stride is its bypass's too)")
        plan = dataclasses.replace(plan, out_row=lay.out_row or s.ow * lay.out_pixel, out_pixel=lay.out_pixel,
                                   out_tile=lay.out_tile)
    if lay.in_row:  # the input a crop's window: loads from its first pixel, rows the tensor's width apart
        plan = dataclasses.replace(plan, in_addr=lay.in_addr + 2 * lay.in_first, in_row=lay.in_row)
    if lay.bypass_row:  # the residual input a crop's window: bypass slices cannot follow it
        if plan.bypass_slices:
            raise LoweringError("bypass_slices: a bypass that is a crop's window is read by rows (the slices' loads "
                                "step the bypass pixel by pixel through a strip, one run of the tensor's rows; "
                                "remove bypass_slices and slice_tiles)")
        plan = dataclasses.replace(plan, bypass_addr=(r_addr or 0) + 2 * lay.bypass_first, bypass_row=lay.bypass_row)
    if lay.cu_stride:  # a merged conv's phases in place: phase row a's kernels on CU a
        if plan.indp or plan.tiles != 1 or s.kernel_words > hw.weights_buffer_elements:
            raise LoweringError("a merged conv writing its phases in place runs COOP in one kernel tile")
        plan = dataclasses.replace(plan, cu_stride=lay.cu_stride, per_cu=lay.per_cu)
    if plan.indp:  # vMAC v of every CU: 16 interleaved kernels (weights broadcast)
        words = indp_kernel_words(s, hw)
        kernel_loads = [tile.LoadOp(tile.BufferKind.WEIGHTS, words, w_addr + 2 * v * words, 0, 0, hw.vmacs + v)
                        for v in range(hw.vmacs_per_cu)]
        per_tile = kernels_per_tile(hw)
    elif plan.coop_rows:  # vMAC v of every CU: kernel v of the tile (weights broadcast)
        per_tile = plan.kernels
        kernel_loads = [tile.LoadOp(tile.BufferKind.WEIGHTS, s.kernel_words, w_addr + 2 * j * s.kernel_words, 0, 0,
                                    hw.vmacs + j) for j in range(per_tile)]
    else:
        per_tile = plan.kernels
        vmacs = kernel_vmacs(plan, hw, s.k if plan.per_cu else per_tile)  # a merged conv in place: its kernels' vMACs
        kernel_loads = [tile.LoadOp(tile.BufferKind.WEIGHTS, s.kernel_words, w_addr + 2 * j * s.kernel_words, 0, 0, v)
                        for j, v in enumerate(vmacs)] if s.kernel_words <= hw.weights_buffer_elements else []
    if s.bias_at == "maps":  # the bias block after the kernels, once, to the top of the maps buffer
        src, base, words = bias_block_load(s, plan.mode, per_tile, w_addr, hw)
        kernel_loads.append(tile.LoadOp(tile.BufferKind.MAPS, words, src, base, 0, sf.SELECT_ALL))
    ktile = tile.KernelTileOp(0, per_tile, plan.tiles, kernel_loads)
    if plan.double_buffer_weights:
        SLOT.write(ktile, plan.w_slot)
    write_decisions(KERNEL_TILE, plan, ktile.properties)
    ops: list[Operation] = [ktile]
    ids = iter(range(1 << 30))
    for load in kernel_loads:
        load.properties["load_id"] = IntegerAttr(next(ids), i64)
    if plan.column_tiled:  # each column band's tiles: its input columns, rows of the whole width apart
        for (x0, x1), band in band_plans(plan):
            for mt in _maps_tiles(band, out_addr + 2 * x0 * (lay.out_pixel or s.k), r_addr, hw, ids):
                c0, c1 = input_columns(s, x0, x1)
                mt.properties["out_cols"] = DenseArrayBase.from_list(i64, [x0, x1])
                mt.properties["in_cols"] = DenseArrayBase.from_list(i64, [c0, c1])
                ops.append(mt)
        return ops
    return ops + _maps_tiles(plan, out_addr, r_addr, hw, ids)


BODY_RULES: dict[tuple[str, str], str] = {
    ("tile.load", "buffer"): "a kernel tile loads weights (and, biases maps, the bias block to the maps buffer), "
                             "a maps tile maps",
    ("tile.load", "length"): "a maps load's words are its rows' (in_rows, cu_rows in row groups) x the input row's "
                             "words; a kernel load's a kernel's (or 16 interleaved kernels' in INDP)",
    ("tile.load", "dram_addr"): "the maps (weights) region's offset + 2 x the words before its first row (kernel)",
    ("tile.load", "buf_addr"): "its tile's bank (maps_buffering) or the row's place in it; kernel loads at 0 "
                               "(the kernel tile's slot / stagger place them)",
    ("tile.load", "select"): "the mode: every CU (COOP maps), CU c its own rows (INDP, coop_rows), vMAC j kernel j "
                             "(row groups: broadcast 16+j)",
    ("tile.window", ""): "the layer's shape, the tile's out_rows, the mode and the output region",
}
"""What each field of a derived body follows from (the rule a body edit is refused by)."""


def body_difference(have: Operation, want: Operation) -> str | None:
    """The first field where a tile's written body differs from the one its attributes imply, with
    the rule it follows from: bodies are derived (conv_tile_body, pool_tile_body), so a body edit
    is refused naming what to edit instead. None: the bodies agree (NOT_SCHEDULE fields aside)."""
    a, b = tile.body_ops(have), tile.body_ops(want)
    if len(a) != len(b) or any(x.name != y.name for x, y in zip(a, b)):
        return (f"{len(a)} loads and windows ({', '.join(o.name for o in a) or 'none'}) where its attributes imply "
                f"{len(b)} ({', '.join(o.name for o in b)}): a tile's loads follow its rows and the mode")
    counts: dict[str, int] = {}
    for x, y in zip(a, b):
        i = counts[x.name] = counts.get(x.name, -1) + 1
        for k in sorted(x.properties.keys() | y.properties.keys()):
            if k in ("unit", "load_id") or x.properties.get(k) == y.properties.get(k):
                continue
            got, exp = (str(o.properties[k]).split(" : ")[0] if k in o.properties else "(absent)" for o in (x, y))
            rule = BODY_RULES.get((x.name, k)) or BODY_RULES.get((x.name, ""), "")
            return f"{x.name} {i}: {k} {got} where its attributes imply {exp} ({rule})"
    return None


def _maps_tiles(plan: ConvPlan, out_addr: int, r_addr: int | None, hw: SnowflakeConfig,
                ids: Iterator[int]) -> list[tile.MapsTileOp]:
    """The maps tiles (loads, windows) of a plan's strips; its shape is what the tiles load (a
    gathering conv's compact input, a column band's columns)."""
    s = plan.shape
    row = s.w * s.cin
    in_row, stride_rows, c_base = plan.in_row or row, 1, 0
    if plan.gather is not None:
        # the layer loads only what it reads (the plan's `gather` (plan/conv.py): a channel slice's channels,
        # a strided 1x1's pixels): strips, loads and windows are over the compact image the
        # plan was made for, compact row r being DRAM row r * sy from channel c0 on
        stride_rows, _, w_in, cin_row, c_base = plan.gather
        in_row = plan.in_row or w_in * cin_row  # a crop's source's rows, or the gathered tensor's own
    out_row = plan.out_row or s.ow * s.k
    if plan.indp and plan.cu_split == "cols":
        return _column_tiles(plan, out_addr, r_addr, hw, ids)
    ops: list[tile.MapsTileOp] = []
    prev_end = 0
    for si, strip in enumerate(plan.strips):
        words = (strip.r1 - strip.r0) * row
        base = tile_base(plan, strip, hw)
        if plan.row_groups:  # each CU its own rows of the row group, at the same buffer address
            r = plan.cu_rows[si]
            cu_rows = [input_rows(s.h, s.kh, s.sy, s.pt, y, y + r) for y in range(strip.y0, strip.y1, r)]
            loads = [tile.LoadOp(tile.BufferKind.MAPS, n, plan.in_addr + 2 * src, base + at, 0, c)
                     for c, (r0, r1) in enumerate(cu_rows) for at, src, n in row_runs(r0, r1, row, in_row)]
        elif in_row != row and plan.gather is None:  # a column band: one LD per row
            loads = [tile.LoadOp(tile.BufferKind.MAPS, row, plan.in_addr + 2 * r * in_row, base + (r - strip.r0) * row,
                                 0, sf.SELECT_ALL) for r in range(strip.r0, strip.r1)]
        else:
            loads = [tile.LoadOp(tile.BufferKind.MAPS, words, plan.in_addr + 2 * (strip.r0 * stride_rows * in_row + c_base), base, 0,
                                 sf.SELECT_ALL)]
        windows = []
        y = strip.y0
        while y < strip.y1:
            iy = y * s.sy - s.pt
            ky0, ky1 = max(0, -iy), min(s.kh, s.h - iy)
            y_end = y + 1
            while y_end < strip.y1 and (max(0, -(y_end * s.sy - s.pt)),
                                         min(s.kh, s.h - (y_end * s.sy - s.pt))) == (ky0, ky1):
                y_end += 1
            if ky1 <= ky0:  # rows of padding alone: a one-word MAC a pixel, its bias (codegen/pixels._bias_only)
                windows.append(tile.WindowOp(1, 1, s.ow, y_end - y, 0, 0, 0, out_addr + 2 * y * out_row,
                                             bias_vmov=True, bypass_vmov=r_addr is not None))
                y = y_end
                continue
            windows.append(tile.WindowOp(s.kw * s.c if s.groups == 1 or s.block_maps else s.c, ky1 - ky0, s.ow, y_end - y,
                                         s.sx * s.cin, s.sy * row,
                                         (iy + ky0 - strip.r0) * row if iy + ky0 >= strip.r0 else 0,
                                         out_addr + 2 * y * out_row, bias_vmov=True,
                                         bypass_vmov=r_addr is not None))
            y = y_end
        overlap = max(0, prev_end - strip.r0) if si else 0
        prev_end = strip.r1
        for load in loads:
            load.properties["load_id"] = IntegerAttr(next(ids), i64)
        mt = tile.MapsTileOp((strip.y0, strip.y1), (strip.r0, strip.r1), overlap, -1, [*loads, *windows])
        if plan.row_groups:
            CU_ROWS.write(mt, plan.cu_rows[si])
        ops.append(mt)
    return ops


def _column_tiles(plan: ConvPlan, out_addr: int, r_addr: int | None, hw: SnowflakeConfig,
                  ids: Iterator[int]) -> list[tile.MapsTileOp]:
    """A column-split INDP layer's row groups (snowir/plan/indp_columns.py): per output row, each
    CU's LD (select c) of its input row segment into the group's slot; one window per CU's row
    segment (q pixels, sx x C words apart), the output rows OW x K words apart."""
    s = plan.shape
    lay = column_layout(s, hw, max(st.y1 - st.y0 for st in plan.strips))
    ops: list[tile.MapsTileOp] = []
    prev_end = 0
    for si, st in enumerate(plan.strips):
        loads = [tile.LoadOp(tile.BufferKind.MAPS, n, src, lay.maps_at(si % 2, i) + at, 0, c)
                 for i, y in enumerate(range(st.y0, st.y1)) for c in range(hw.cus)
                 for at, src, n in lay.maps_loads(s, plan.in_addr, y, c, plan.in_row)]
        step = s.cin if lay.gathered else s.sx * s.cin
        window = tile.WindowOp(s.c, 1, lay.q, st.y1 - st.y0, step, lay.seg, lay.maps_at(si % 2, 0),
                               out_addr + 2 * st.y0 * s.ow * s.k, bias_vmov=True, bypass_vmov=r_addr is not None)
        for load in loads:
            load.properties["load_id"] = IntegerAttr(next(ids), i64)
        ops.append(tile.MapsTileOp((st.y0, st.y1), (st.r0, st.r1), max(0, prev_end - st.r0) if si else 0, -1,
                                   [*loads, window]))
        prev_end = st.r1
    return ops


def maps_buffering(plan: ConvPlan) -> tile.MapsBuffering:
    """Where the plan's maps tiles sit (tile.MapsBufferingAttr)."""
    strips = plan.strips
    if strips[0].bank < 0:
        return tile.MapsBuffering.WHOLE
    if plan.cu_split == "cols":  # row groups in two slots in turn (plan/indp_columns.ColumnLayout)
        return tile.MapsBuffering.DOUBLE
    if plan.bypass_addr is not None and not (len(strips) > 1 and strips[1].bank == 1):
        return tile.MapsBuffering.SINGLE
    return tile.MapsBuffering.DOUBLE


LAYER_DECISIONS = (MAPS_BUFFERING.name, "pool", *(d.name for d in decisions_on(LAYER, PLAN_DECISIONS) if d.planned))
"""The layer properties a (re)plan writes: the declared decisions the planner sets, the buffering, a fused pool."""


def layer_decisions(plan: ConvPlan) -> dict[str, Attribute]:
    """The layer-level decisions of a conv plan, as `tile.layer` properties."""
    props: dict[str, Attribute] = {}
    MAPS_BUFFERING.write(props, maps_buffering(plan))
    write_decisions(LAYER, plan, props)
    if plan.pool is None:
        return props
    slots = {"pool_slots": props.pop("pool_slots")} if "pool_slots" in props else {}
    return props | {"pool": pool_shape_attr(plan.pool)} | slots  # the pool beside its ring


def set_conv_plan(layer: tile.LayerOp, plan: ConvPlan, hw: SnowflakeConfig) -> None:
    """Write `plan` into the conv layer: its decisions, its weights packed for its mode and
    kernel tile, its kernel and maps tiles (rebuilt), its loop order and both orders' traffic."""
    w = regions_of(layer).get("weights")
    if w is not None:
        BIASES.write(w, plan.shape.bias_at)
    repack(layer, plan.mode, plan.kernels, hw)
    for key in LAYER_DECISIONS:
        layer.properties.pop(key, None)
    layer.properties.update(layer_decisions(plan))
    layer.properties["mode"] = tile.ComputeModeAttr(tile.ComputeMode(plan.mode))
    layer.properties["loop_order"] = tile.LoopOrderAttr(tile.LoopOrder(plan.loop_order))
    cost = plan.dram_bytes(hw)
    layer.properties["mloop_bytes"] = IntegerAttr(cost["Mloop"], i64)
    layer.properties["kloop_bytes"] = IntegerAttr(cost["Kloop"], i64)
    block = layer.body.block
    for old in [o for o in block.ops if isinstance(o, tile.KernelTileOp | tile.MapsTileOp)]:
        old.detach()
        old.erase()
    for new in conv_tile_body(shape_of(layer), plan, layout_of(layer), plan_machine(plan, hw)):
        block.add_op(new)


def with_layer_pool(layer: tile.LayerOp, plan: ConvPlan, hw: SnowflakeConfig) -> ConvPlan:
    """`plan` with the layer's fused max pool (`pool`, output region) in its program, if any."""
    if layer.pool is None:
        return plan
    fused = fuse(plan, pool_shape_of(layer.pool), regions_of(layer)["output"].offset.value.data, hw)
    if fused is None:
        raise LoweringError("its max pool cannot run in its program (an INDP conv's row groups or a plain COOP "
                            "conv's Kloop strips, and room beside them for the pool's rows, are needed)")
    return fused


def fusable_pool(op: nn.Conv2dOp, plan: ConvPlan, pool_addr: int,
                 hw: SnowflakeConfig) -> tuple[nn.MaxPoolOp, ConvPlan] | None:
    """The device max pool that is the only reader of this conv's output and `plan` with it in
    its program, when the conv can run it (snowir/plan/fused_pool.py: INDP row groups or COOP strips
    with room beside them) and the estimate says that is faster than the two layers apart
    (`fusing_pays`)."""
    uses = list(op.output.uses)
    if len(uses) != 1 or not isinstance(uses[0].operation, nn.MaxPoolOp) \
            or on_host(uses[0].operation) or not slot_of(uses[0].operation.results[0]).whole:
        return None
    pool_op = uses[0].operation
    p = pool_shape(pool_op)
    if plan.cu_split == "cols":  # its groups write every CU's columns of a row: no row per CU to pool
        return None
    if plan.indp:
        fused = fuse(plan, p, pool_addr, hw) if fusing_pays(plan, p, hw) else None
    else:  # rated with the strips that leave the ring room
        fused = fuse(plan, p, pool_addr, hw)
        fused = fused if fused is not None and fusing_pays(plan, p, hw, fused) else None
    return (pool_op, fused) if fused is not None else None


def conv_layer(op: nn.Conv2dOp, name: str, hw: SnowflakeConfig, mode: str | None,
               fuse_pool: bool = False) -> tuple[tile.LayerOp, nn.MaxPoolOp | None]:
    """The tile layer of a device conv: the mode chosen, the maps tiled for the cost model's
    loop order (`tile-loop-order` decides the order and re-tiles if it changes it). With
    `fuse_pool`, a max pool reading the conv may run in the same program (`fusable_pool`; it is
    returned beside the layer): the conv's output goes to a `conv_output` region, the pool's to
    `output`."""
    s = layer_conv_shape(op)
    bypass = op.bypass is not None
    slot = slot_of(op.output)
    # a device crop's window of a wider tensor, read in place
    maps_crop, bypass_crop = slot_of(op.input).window, slot_of(op.bypass).window if op.bypass is not None else None
    mode = conv_mode(s, hw, bypass, tiled_mode(op, mode), sliced=not slot.whole, bypass_crop=bypass_crop is not None)
    s = dataclasses.replace(s, bias_at=conv_biases(op, s, hw, mode, fuse_pool))
    in_tiles = block_input(op) if slot_of(device_input(op)).tiles else None
    lay = conv_layout(s, bypass, mode, hw, (0, 0) if slot.whole or slot.tiles else (slot.first, slot.total),
                      slot.pixels, slot.phases, slot.blocks, in_tiles, maps_crop, bypass_crop)
    plan = plan_conv(s, hw, 2 * lay.in_first, lay.w_addr, lay.out_addr, None, lay.r_addr, mode, s.bias_at,
                     bypass_crop=bypass_crop is not None)
    if slot.tiles and (why := channel_tiles_refusal(plan, slot.tiles, hw)) is not None:
        raise LoweringError(f"its output is stored channel-tile-major in {slot.tiles}-channel blocks: {why}")
    ops: list[Operation] = [tile.DramRegionOp(f"{name}.maps", 0, lay.in_bytes, "maps"),
                            weights_region(name, lay, s, mode, weight_image(op, s, mode, hw), hw)]
    CHANNEL_TILES.write(ops[0], in_tiles)
    CROP.write(ops[0], maps_crop)
    extra: dict = {}
    pool_addr = align(lay.out_addr + lay.out_bytes)
    fused = fusable_pool(op, plan, pool_addr, hw) if fuse_pool and s.bias_at == "kernel" and not slot.tiles else None
    pool_op = None
    if fused is None:
        ops.append(tile.DramRegionOp(f"{name}.output", lay.out_addr, lay.out_bytes, "output"))
        CHANNEL_TILES.write(ops[-1], slot.blocks)
        if slot.channels != slot.total and slot.phases is None and not slot.tiles:
            CHANNELS.write(ops[-1], (slot.first, slot.channels, slot.total))
        if slot.pixels is not None:  # an interleave's phase: its pixels of the result, in place
            PIXELS.write(ops[-1], tuple(slot.pixels))
        if slot.phases is not None:  # a merged conv's interleave: every phase in place (CU stride)
            PHASES.write(ops[-1], tuple(slot.phases))
        if (reader := host_read_of(op.output)) is not None:  # its grid, read by the host through the interleave
            HOST_READ.write(ops[-1], host_read_layout(reader))
    else:
        pool_op, plan = fused
        p = plan.pool
        assert p is not None
        pool_bytes = p.oh * p.ow * p.c * 2
        ops += [tile.DramRegionOp(f"{name}.conv_output", lay.out_addr, lay.out_bytes, "conv_output"),
                tile.DramRegionOp(f"{name}.output", pool_addr, pool_bytes, "output"),
                tile.DramRegionOp(f"{name}.slack", pool_addr + pool_bytes, POOL_SLACK, "scratch")]
    if lay.r_addr is not None:  # the residual input: the conv's own K channels a pixel (a crop's: its source's)
        pixels = s.oh * s.ow if bypass_crop is None else bypass_crop[2] * bypass_crop[3]
        ops.append(tile.DramRegionOp(f"{name}.bypass", lay.r_addr, pixels * s.k * 2, "bypass"))
        CROP.write(ops[-1], bypass_crop)
    ops += conv_tile_body(s, plan, lay, plan_machine(plan, hw))
    cost = plan.dram_bytes(hw)
    extra |= {"mloop_bytes": IntegerAttr(cost["Mloop"], i64), "kloop_bytes": IntegerAttr(cost["Kloop"], i64),
              "shape": conv_shape_attr(s), **layer_decisions(plan)}
    if s.relu:
        extra["relu"] = nn.UnitAttr()
    return tile.LayerOp(name, tile.LayerKind.CONV, ops, tile.ComputeMode(plan.mode), None, extra), pool_op


def conv_biases(op: nn.Conv2dOp, s: ConvShape, hw: SnowflakeConfig, mode: str, fuse_pool: bool) -> str:
    """Where the conv's weight image keeps its biases (decisions.BIAS_LAYOUTS): the planner's choice
    by cost (plan_conv's `choose_biases`), but the stock layout for a conv whose kernels the host writes at
    run time (an SE gate's: the host packs them as the stock image), whose output is a merged
    conv's phases in place (its kernels a result row apart over the CUs) or stored channel-tile-major,
    or whose max pool may run
    in its program (a fused pool's ring takes the banks' tops)."""
    if not isinstance(op.weight.owner, nn.ConstantOp) or slot_of(op.output).phases is not None \
            or slot_of(op.output).tiles or slot_of(op.input).window is not None \
            or (op.bypass is not None and slot_of(op.bypass).window is not None):
        return "kernel"  # a channel-tile-major writer, a crop's reader: not weighed together yet
    if fuse_pool and len(uses := list(op.output.uses)) == 1 and isinstance(uses[0].operation, nn.MaxPoolOp) \
            and not on_host(uses[0].operation):
        return "kernel"
    bypass = op.bypass is not None
    return plan_conv(s, hw, 0, 0, 0, None, 0 if bypass else None, mode).shape.bias_at


def tiled_mode(op: nn.Conv2dOp, mode: str | None) -> str | None:
    """The mode a conv must run in: COOP when its output is stored channel-tile-major (a kernel
    tile writes one block; an INDP vMAC's 16 kernels cannot step a block apart), else `mode`
    (None: by estimate). An INDP asked for there is refused."""
    if not slot_of(op.output).tiles:
        return mode
    if mode == "INDP":
        raise LoweringError("its output is stored channel-tile-major (depthwise-to-grouped's channel_tiles), which "
                            "only a COOP conv's write-back steps a block apart: mode INDP refused")
    return "COOP"


def pool_shape(op: nn.MaxPoolOp) -> PoolShape:
    _, c, h, w = op.input.type.get_shape()
    _, _, oh, ow = op.output.type.get_shape()
    kh, kw = int_values(op.kernel)
    sy, sx = int_values(op.strides)
    pt, pl, _, _ = int_values(op.pads)
    slot = slot_of(op.input)  # a device concat's channels, read in place
    return PoolShape(c, h, w, kh, kw, sy, sx, pt, pl, oh, ow, 0 if slot.whole else slot.total, slot.first)


def pool_tile_body(p: PoolShape, tiles: list[PoolTile], hw: SnowflakeConfig, in_addr: int = 0) -> list[Operation]:
    """A max pool's maps tiles with their loads (broadcast) from its input at DRAM `in_addr`: a
    strip's rows in one LD, a ring's LDs in the order `ring_loads` issues them, into slot (r - r0) mod N."""
    row = p.w * p.cin
    ops: list[Operation] = []
    for t in tiles:
        st = t.strip
        if t.ring:
            loads = [tile.LoadOp(tile.BufferKind.MAPS, rows * row, in_addr + 2 * r * row, ((r - st.r0) % t.ring) * row, 0,
                                 sf.SELECT_ALL) for _, r, rows in ring_loads(p, t)]
        else:
            loads = [tile.LoadOp(tile.BufferKind.MAPS, (st.r1 - st.r0) * row, in_addr + 2 * st.r0 * row,
                                 max(st.bank, 0) * hw.maps_bank_elements, 0, sf.SELECT_ALL)]
        mt = tile.MapsTileOp((st.y0, st.y1), (st.r0, st.r1), 0, -1, loads)
        if t.ring:
            RING.write(mt, t.ring)
        ops.append(mt)
    return ops


def pool_layer(op: nn.MaxPoolOp, name: str, hw: SnowflakeConfig) -> tile.LayerOp:
    """A max pool on the pool units: maps tiles (strips or a ring, loads broadcast), no kernels."""
    slot = slot_of(op.output)
    return bare_pool_layer(name, pool_shape(op), hw, (0, 0) if slot.whole else (slot.first, slot.total))


def bare_conv_layer(name: str, s: ConvShape, weights: np.ndarray, bias: np.ndarray, hw: SnowflakeConfig,
                    mode: str | None = None, bypass: bool = False, loop_order: str | None = None,
                    biases: str | None = None) -> tile.LayerOp:
    """A conv layer from int16 arrays ((K, C, kh, kw) weights, (K,) bias) rather than an nn op:
    its regions, packed weights and the planner's decisions, as nn-to-tile and tile-loop-order
    would write them (tests and benches lower it with tile-to-asm like any other layer);
    `biases` forces the weight image's bias layout (None: the planner's choice)."""
    mode = conv_mode(s, hw, bypass, mode)
    s = dataclasses.replace(s, bias_at=biases or plan_conv(s, hw, 0, 0, 0, loop_order, 0 if bypass else None,
                                                            mode).shape.bias_at)
    lay = conv_layout(s, bypass, mode, hw)
    image = pack_for(weights, bias, mode, packed_kernels(s, mode, hw), hw, s.bias_at)
    ops: list[Operation] = [tile.DramRegionOp(f"{name}.maps", 0, lay.in_bytes, "maps"),
                            weights_region(name, lay, s, mode, image, hw),
                            tile.DramRegionOp(f"{name}.output", lay.out_addr, lay.out_bytes, "output")]
    if lay.r_addr is not None:
        ops.append(tile.DramRegionOp(f"{name}.bypass", lay.r_addr, lay.out_bytes, "bypass"))
    extra: dict[str, Attribute] = {"shape": conv_shape_attr(s)}
    if s.relu:
        extra["relu"] = UnitAttr()
    layer = tile.LayerOp(name, tile.LayerKind.CONV, ops, tile.ComputeMode(mode), None, extra)
    set_conv_plan(layer, plan_conv(s, hw, 0, lay.w_addr, lay.out_addr, loop_order, lay.r_addr, mode, s.bias_at), hw)
    return layer


def bare_pool_layer(name: str, p: PoolShape, hw: SnowflakeConfig, out_slice: tuple[int, int] = (0, 0)) -> tile.LayerOp:
    """A max pool layer from its shape (as nn-to-tile writes it); `out_slice` = (first channel, total
    channels) of a device concat's tensor its output is a slice of."""
    tiles = plan_pool_tiles(p, hw)
    first, total = out_slice
    in_b, out_b = p.h * p.w * p.cin * 2, p.oh * p.ow * (total or p.c) * 2
    out_addr = align(in_b)
    ops: list[Operation] = [tile.DramRegionOp(f"{name}.maps", 0, in_b, "maps"),
                            tile.DramRegionOp(f"{name}.output", out_addr, out_b, "output"),
                            tile.DramRegionOp(f"{name}.slack", out_addr + out_b, POOL_SLACK, "scratch")]
    if total:
        CHANNELS.write(ops[1], (first, p.c, total))
    ops += pool_tile_body(p, tiles, hw)
    buffering = tile.MapsBuffering.WHOLE if tiles[0].strip.bank < 0 else tile.MapsBuffering.DOUBLE
    return tile.LayerOp(name, tile.LayerKind.MAXPOOL, ops, extra={"shape": pool_shape_attr(p),
                                                                  MAPS_BUFFERING.name: MAPS_BUFFERING.codec.write(buffering)})


def repack(layer: tile.LayerOp, mode_name: str, count: int, hw: SnowflakeConfig) -> None:
    """The weights region's image packed for `mode_name` with `count` kernels a tile and its biases
    where the region's `biases` says, when it is not (regions above the weights move up if the
    image grows)."""
    w = regions_of(layer).get("weights")
    if w is None or w.value is None or w.packing is None:
        return
    mode = tile.ComputeMode(mode_name)
    s = shape_of(layer)
    if w.packing.data == mode and w.packed_kernels.value.data == count \
            and int16_words(w.value) in (None, packed_words(s, mode.value, count, hw)):  # type: ignore[union-attr]
        return
    if mode == tile.ComputeMode.COOP and count < 1:
        return
    weights, bias = unpack_weights(s, w, hw)
    image = pack_for(weights, bias, mode.value, count, hw, s.bias_at)
    suffix = "" if s.bias_at == "kernel" else "_bm"
    w.properties["value"] = int16_resource(f"{layer.sym_name.data}_w_{mode.value}{count}{suffix}", image)
    w.properties["packing"] = tile.ComputeModeAttr(mode)
    w.properties["packed_kernels"] = IntegerAttr(count, i64)
    grow = image.size * 2 - w.size.value.data
    if grow > 0 and w.tensor is not None:  # the model's DRAM plan placed the region: it cannot move others
        raise LoweringError(f"tile.dram_region @{w.sym_name.data}: the weights repacked for {mode.value} x {count} "
                            f"need {image.size * 2} bytes, the DRAM plan gave them {w.size.value.data}: edit before "
                            "allocate-dram (it derives the layers first)")
    w.properties["size"] = IntegerAttr(image.size * 2, i64)
    if grow > 0:  # the regions above the weights move up to make room (a layer's own image layout)
        end = w.offset.value.data + image.size * 2
        for r in sorted(regions_of(layer).values(), key=lambda r: r.offset.value.data):
            if r.offset.value.data > w.offset.value.data:
                new = max(r.offset.value.data, align(end))
                r.properties["offset"] = IntegerAttr(new, i64)
                end = new + r.size.value.data


def unpack_weights(s: ConvShape, region: tile.DramRegionOp, hw: SnowflakeConfig) -> tuple[np.ndarray, np.ndarray]:
    """(K, C, kh, kw) weights and (K,) biases from a packed image (the inverse of the packers). The
    image is as `packing` and `packed_kernels` describe it, its biases where the region's `biases`
    says or, after an edit of `biases` the image is still to follow (`repack`), the other way."""
    image = int16_array(region.value)  # type: ignore[arg-type]
    mode, count = region.packing.data.value, region.packed_kernels.value.data  # type: ignore[union-attr]
    wanted = BIASES.value(region)
    for bias_at in (wanted, *(b for b in BIAS_LAYOUTS if b != wanted)):
        shaped = dataclasses.replace(s, bias_at=bias_at)
        stamp = image_layout(image, shaped)
        if image.size == packed_words(shaped, mode, count, hw) and stamp in (None, (mode, count)):
            return unpack(image, shaped, mode, hw, count)
    want = packed_words(dataclasses.replace(s, bias_at=wanted), mode, count, hw)
    raise LoweringError(f"tile.dram_region @{region.sym_name.data}: its image of {image.size} words is not "
                        f"{mode}-packed with {count} kernels a tile ({want} words, biases {wanted}): packing, "
                        "packed_kernels and biases describe the image as it is")
