"""
The `tile` IR of a layer, built from the planner's decisions, and read back.

`nn-to-tile` builds a `tile.layer` per device conv / max pool (geometry as a typed
`#tile.conv_shape` / `#tile.pool_shape`, DRAM regions with the packed weight image, kernel
tile, maps tiles with their loads and windows: snowir/tile/bodies.py); `tile-loop-order` rebuilds
the maps tiles of a conv for the loop order it chooses; `tile-to-asm` reads the layer back
(`conv_shape_of`, `regions_of`). One module, so the three agree on what each attribute means.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from xdsl.dialects.builtin import IntegerAttr, UnitAttr, i64
from xdsl.ir import Attribute, Operation, SSAValue

from snowir.dialects import nn, tile
from snowir.dialects.tile.decisions import (BIAS_LAYOUTS, BIASES, CHANNEL_TILES, CHANNELS, CROP, HOST_READ, LAYER,
                                            MAPS_BUFFERING, PHASES, PIXELS, PLAN_DECISIONS, decisions_on,
                                            write_decisions)
from snowir.golden import Golden, Q, constant_array, element_frac, int_values
from snowir.hw import DEFAULT, SnowflakeConfig
from snowir.nn_util import conv_shape, on_host
from snowir.plan.conv import plan_conv
from snowir.plan.fused_pool import fuse, fusing_pays
from snowir.plan.residual_mode import conv_mode
from snowir.plan.layout import (LANE_GROUPS, ConvLayout, block_diagonal, bypass_tiles_refusal, channel_tiles_refusal,
                                conv_layout, image_layout, pack_for, packed_kernels, packed_words, unpack)
from snowir.plan.pool import plan_pool_tiles
from snowir.plan.shapes import ConvPlan, ConvShape, LoweringError, PoolShape, align, plan_machine
from snowir.resources import int16_array, int16_resource, int16_words
from snowir.segments import host_read_layout, host_read_of, slot_of
from snowir.tile.bodies import conv_tile_body, pool_tile_body
from snowir.tile.placement import (bypass_blocks, input_offset, input_placement, output_cus, output_placement, output_tile_step,
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
                      bypass_row=r_row, bypass_tile=bypass_blocks(r, s)[1])


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
    r_tiles = bypass_tiles(op)
    s = dataclasses.replace(s, bias_at=conv_biases(op, s, hw, mode, fuse_pool))
    in_tiles = block_input(op) if slot_of(device_input(op)).tiles else None
    lay = conv_layout(s, bypass, mode, hw, (0, 0) if slot.whole or slot.tiles else (slot.first, slot.total),
                      slot.pixels, slot.phases, slot.blocks, in_tiles, maps_crop, bypass_crop)
    plan = plan_conv(s, hw, 2 * lay.in_first, lay.w_addr, lay.out_addr, None, lay.r_addr, mode, s.bias_at,
                     bypass_crop=bypass_crop is not None, bypass_tiles=r_tiles is not None)
    if slot.tiles and (why := channel_tiles_refusal(plan, slot.tiles, hw)) is not None:
        raise LoweringError(f"its output is stored channel-tile-major in {slot.tiles}-channel blocks: {why}")
    if r_tiles is not None and (why := bypass_tiles_refusal(plan, r_tiles[0])) is not None:
        raise LoweringError(f"its bypass is stored channel-tile-major in {r_tiles[0]}-channel blocks: {why}")
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
        CHANNEL_TILES.write(ops[-1], r_tiles)
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
    tile writes one block; an INDP vMAC's 16 kernels cannot step a block apart) or its bypass is
    (a COOP kernel tile's bypass slice is one block's rows), else `mode` (None: by estimate). An
    INDP asked for there is refused."""
    if not slot_of(op.output).tiles and not bypass_tiles(op):
        return mode
    if mode == "INDP":
        what = "output" if slot_of(op.output).tiles else "bypass"
        raise LoweringError(f"its {what} is stored channel-tile-major (channel_tiles), which only a COOP conv's "
                            f"{'write-back steps a block apart' if what == 'output' else 'bypass slices read'}: "
                            "mode INDP refused")
    return "COOP"


def bypass_tiles(op: nn.Conv2dOp) -> tuple[int, int, int] | None:
    """The bypass region's `channel_tiles` (width, block, blocks) of a conv whose residual input is
    stored channel-tile-major (split-kernels' part chain: kernel tile t's bypass is block t's
    rows), None when it is read as whole pixels."""
    return slot_of(op.bypass).blocks if op.bypass is not None else None


def pool_shape(op: nn.MaxPoolOp) -> PoolShape:
    _, c, h, w = op.input.type.get_shape()
    _, _, oh, ow = op.output.type.get_shape()
    kh, kw = int_values(op.kernel)
    sy, sx = int_values(op.strides)
    pt, pl, _, _ = int_values(op.pads)
    slot = slot_of(op.input)  # a device concat's channels, read in place
    return PoolShape(c, h, w, kh, kw, sy, sx, pt, pl, oh, ow, 0 if slot.whole else slot.total, slot.first)


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
