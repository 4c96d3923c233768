"""
Whether the lowering can put an nn op on Snowflake: one predicate, asked by partition-host
(which sends what cannot be lowered to the host, labelled with the reason) and answered by the
planners nn-to-tile uses, so the two never disagree.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects import func
from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Block, Operation, SSAValue

from snowir.dialects import nn
from snowir.device_layers import DEVICE_OPS, kind_of
from snowir.golden import int_values
from snowir.hw import SnowflakeConfig
from snowir.plan.conv import plan_conv
from snowir.plan.residual_mode import conv_mode
from snowir.plan.layout import bypass_tiles_refusal, channel_tiles_refusal, conv_layout, phases_refusal
from snowir.plan.shapes import ConvPlan, LoweringError
from snowir.segments import channel_tiles, concat_inputs, concat_of, placed_concat, placed_interleave, slot_of
from snowir.tile.build import bypass_tiles, layer_conv_shape, pool_shape, tiled_mode


def device_refusal(op: Operation, hw: SnowflakeConfig | None = None) -> str | None:
    """Why the lowering cannot run `op` on Snowflake; None when it can (or the op needs no lowering)."""
    hw = hw or SnowflakeConfig()
    if isinstance(op, nn.ConcatOp):
        return concat_refusal(op, hw)
    if isinstance(op, nn.DepthToSpaceOp):
        return interleave_refusal(op, hw)
    if isinstance(op, nn.CropOp):
        return crop_refusal(op, hw)
    kind = kind_of(op)
    if kind is not None:  # a device layer kind: its planner says
        try:
            kind.function("planner")(op, hw)
        except LoweringError as e:
            return str(e)
    return None


def planned_conv(op: nn.Conv2dOp, hw: SnowflakeConfig, sliced: bool | None = None) -> ConvPlan:
    """The plan the lowering would make for `op` (mode and loop order as nn-to-tile and
    tile-loop-order choose them); LoweringError when it cannot place it. `sliced`: as if its
    output were a device concat's channel slice (None: as the graph places it now, `slot_of`)."""
    if any(d != 1 for d in int_values(op.dilations)):
        raise LoweringError("dilated convolution (traces need contiguous taps)")

    s = layer_conv_shape(op)
    bypass = op.bypass is not None
    slot = slot_of(op.output)
    if sliced is None:
        sliced = not slot.whole
    cropped = bypass and slot_of(op.bypass).window is not None  # a device crop's window: no bypass slices
    mode = conv_mode(s, hw, bypass, tiled_mode(op, None), sliced=sliced, bypass_crop=cropped)
    lay = conv_layout(s, bypass, mode, hw)
    plan = plan_conv(s, hw, 0, lay.w_addr, lay.out_addr, None, lay.r_addr, mode, bypass_crop=cropped,
                     bypass_tiles=bypass_tiles(op) is not None)
    if slot.tiles and (why := channel_tiles_refusal(plan, slot.tiles, hw)) is not None:
        raise LoweringError(f"its output is stored channel-tile-major in {slot.tiles}-channel blocks: {why}")
    if (r_tiles := bypass_tiles(op)) is not None and (why := bypass_tiles_refusal(plan, r_tiles[0])) is not None:
        raise LoweringError(f"its bypass is stored channel-tile-major in {r_tiles[0]}-channel blocks: {why}")
    return plan


def _placed(op: Operation, where: str) -> bool:
    place = op.attributes.get("place")
    return isinstance(place, StringAttr) and place.data == where


def concat_refusal(op: nn.ConcatOp, hw: SnowflakeConfig) -> str | None:
    """Why a concat cannot be placed (snowir/segments.py: `slot_of`): its inputs become channel
    slices of its one DRAM tensor, each written in place by its device producer (a conv writing
    whole pixels `total` channels apart) or by the host, and read in place by their other readers.
    Asked in graph order, once its producers are placed."""
    axis = op.axis.value.data
    if axis != 1 or len(op.results[0].type.get_shape()) != 4:
        return f"concat on axis {axis} (a device layer writes whole pixels, channel-innermost)"
    inputs = [v for v, _ in concat_inputs(op)]
    if len(set(inputs)) != len(inputs):
        return "channel concat of one tensor twice: the host copies it (one producer writes one slice)"
    device = 0
    for v in inputs:
        why = _member_refusal(v, op, hw)
        if why is not None:
            return f"channel concat: the host copies its inputs side by side ({why})"
        device += isinstance(v.owner, Operation) and not _placed(v.owner, "host")
    if not device and not any(isinstance(use.operation, DEVICE_OPS) and not _placed(use.operation, "host")
                              for use in op.results[0].uses):
        return "channel concat of host tensors only host layers read: the host copies them"
    return _reader_refusal(op, inputs, hw)


def _reader_refusal(op: nn.ConcatOp, inputs: list[SSAValue], hw: SnowflakeConfig) -> str | None:
    """Why a device reader of an input could not read it in place once the concat is placed: its
    rows become whole pixels of the concat's tensor (a 13x13 SPP pool over 768-channel pixels no
    longer fits the maps buffer), and it was asked before, with a tensor of its own."""
    before = op.attributes.get("place")
    op.attributes["place"] = StringAttr("snowflake")  # slot_of then answers as after the placement
    try:
        for v in inputs:
            for use in v.uses:
                reader = use.operation
                if reader is op or _placed(reader, "host") or not isinstance(reader, DEVICE_OPS):
                    continue
                why = device_refusal(reader, hw)
                if why is not None:
                    node = reader.attributes.get("onnx_node")
                    name = node.data if isinstance(node, StringAttr) else reader.name
                    return f"channel concat: the host copies its inputs side by side ('{name}' cannot read its " \
                           f"slice in place: {why})"
    finally:
        if before is None:
            del op.attributes["place"]
        else:
            op.attributes["place"] = before
    return None


CROP_COPY = "crop: the host copies the window ({why})"
"""The reason a crop stays on the host; `why`: what keeps it from being read in place."""


def crop_refusal(op: nn.CropOp, hw: SnowflakeConfig) -> str | None:
    """Why a crop cannot be placed (snowir/segments.py `slot_of`: its window of its source's DRAM
    tensor, rows the source's width apart): every reader must load the window in place, so each is
    a device conv reading it as its maps or its residual input (the tile IR's `crop` on that
    region), able to with the crop placed (a residual conv then reads bypass rows, not slices);
    and the source is a tensor of its own (not a constant, nor a concat's slice, an interleave's
    phase or another crop's window). Asked once its readers are placed (partition-host)."""
    outer = slot_of(op.input)
    why = None
    if isinstance(op.input.owner, nn.ConstantOp):
        why = "a constant's window"
    elif not outer.whole:
        why = "its source is a concat's channel slice, an interleave's phase or another crop's window"
    elif not op.output.uses:
        why = "read by nothing"
    for use in op.output.uses:
        reader = use.operation
        if why is not None:
            break
        node = reader.attributes.get("onnx_node")
        name = node.data if isinstance(node, StringAttr) else reader.name
        if not isinstance(reader, nn.Conv2dOp) or reader.weight is op.output or reader.bias is op.output:
            why = f"'{name}' ({reader.name}) reads the window as a tensor of its own" + \
                (" (a max pool loads whole rows of its input)" if isinstance(reader, nn.MaxPoolOp) else "")
        elif _placed(reader, "host"):
            why = f"'{name}' runs on the host"
    if why is None:
        before = op.attributes.get("place")
        op.attributes["place"] = StringAttr("snowflake")  # slot_of then answers as after the placement
        try:
            for reader in {id(u.operation): u.operation for u in op.output.uses}.values():
                refusal = device_refusal(reader, hw)
                if refusal is not None:
                    node = reader.attributes.get("onnx_node")
                    why = f"'{node.data if isinstance(node, StringAttr) else reader.name}' cannot read it in place: " \
                          f"{refusal}"
                    break
        finally:
            if before is None:
                del op.attributes["place"]
            else:
                op.attributes["place"] = before
    return None if why is None else CROP_COPY.format(why=why)


def _writes_whole_pixels_only(plan: ConvPlan) -> str | None:
    """Why a planned conv cannot write its output at a wider stride than its own (a concat's
    channel slice, an interleave's phase): only COOP by rows steps its write-back so."""
    why = "INDP" if plan.indp else "column-tiled" if plan.column_tiled else \
        "a residual conv with bypass slices (their code steps the output by its own channels)" \
        if plan.bypass_slices else None
    return None if why is None else f"{why}: it writes whole pixels of its own only"


def interleave_refusal(op: nn.DepthToSpaceOp, hw: SnowflakeConfig) -> str | None:
    """Why an interleave (conv-transpose-to-conv's) cannot be placed: each input must be the conv of
    one result phase (offsets 0, row-major, exactly that phase's pixels), which then writes its
    pixels into the result's one DRAM tensor in place (output pixel stride sx, row stride sy; the
    tile IR's `pixels`). Asked in graph order, once the phase convs are placed."""
    by, bx = int_values(op.block)
    _, _, oh, ow = op.output.type.get_shape()
    if len(op.inputs) == 1:
        return merged_refusal(op, hw)
    if len(op.inputs) != by * bx:
        return f"interleave of {len(op.inputs)} inputs into {by}x{bx} phases: the host interleaves"
    if any(int_values(op.offsets)):
        return "interleave of phases computed past the result (cropped): the host interleaves"
    for p, v in enumerate(op.inputs):
        ry, rx = divmod(p, bx)
        conv = v.owner
        if not isinstance(conv, nn.Conv2dOp) or _placed(conv, "host") or not v.has_one_use() \
                or conv.bypass is not None or channel_tiles(conv):
            return f"interleave: phase {p} is not a device conv read only by it; the host interleaves"
        if tuple(v.type.get_shape()[2:]) != (-(-(oh - ry) // by), -(-(ow - rx) // bx)):
            return f"interleave: phase {p} computes pixels the result crops; the host interleaves"
        try:
            why = _writes_whole_pixels_only(planned_conv(conv, hw, sliced=True))
        except LoweringError as e:
            why = str(e)
        if why is not None:
            return f"interleave: phase {p}'s conv is {why}; the host interleaves"
    return None


MERGED = ("interleave of one merged conv's phases (method sub-pixel): its write-back writes a pixel's "
          "{by}x{bx} phases together, which land in different pixels; the host interleaves ({why})")
"""The reason a merged conv's interleave stays on the host; `why`: what keeps its phases from
being written in place through the CU stride (method cu-stride)."""


def merged_refusal(op: nn.DepthToSpaceOp, hw: SnowflakeConfig) -> str | None:
    """Why one merged conv (conv-transpose-to-conv's sub-pixel conv) cannot write its interleave's
    result in place: with phase row a's kernels on CU a and the CU stride one result row
    (`Slot.phases`, plan/shapes.phases_refusal), every phase lands in its pixel, but only for a
    device conv read only by the interleave, offsets 0, one group, and a result of its own."""
    by, bx = int_values(op.block)
    conv, value = op.inputs[0].owner, op.inputs[0]
    why = None
    if any(int_values(op.offsets)):
        why = "phases computed past the result (cropped)"
    elif op.groups.value.data != 1:
        why = f"{op.groups.value.data} groups"
    elif not isinstance(conv, nn.Conv2dOp) or _placed(conv, "host") or not value.has_one_use() \
            or conv.bypass is not None or channel_tiles(conv):
        why = "not a device conv read only by it"
    if why is None:
        _, _, oh, ow = op.output.type.get_shape()
        try:
            why = phases_refusal(planned_conv(conv, hw, sliced=True), (by, bx, oh, ow), hw)
        except LoweringError as e:
            why = str(e)
    return None if why is None else MERGED.format(by=by, bx=bx, why=why)


def host_read_refusal(op: nn.DepthToSpaceOp, on_host: Callable[[Operation], bool]) -> str | None:
    """Why a merged conv's interleave cannot be read in place by the host (`place = "host-read"`,
    snowir/segments.py `placed_host_read`): the conv writes its phase grid as it is (whole pixels of
    its own) and the host, which copies the result back anyway, reads each result word from the
    grid through the permutation and crop. Only for one device conv read only by the interleave,
    one group, and a result only the host reads: the model's outputs, or ops `on_host` says run on
    the host (no device layer can read through the permutation). Asked before its readers are
    placed, so `on_host` answers for every placement they may get."""
    conv, value = op.inputs[0].owner, op.inputs[0]
    if len(op.inputs) != 1:
        return f"interleave of {len(op.inputs)} phase convs"
    if op.groups.value.data != 1:
        return f"{op.groups.value.data} groups"
    if not isinstance(conv, nn.Conv2dOp) or _placed(conv, "host") or not value.has_one_use() or channel_tiles(conv):
        return "not a device conv read only by it"
    for use in op.output.uses:
        reader = use.operation
        if not isinstance(reader, func.ReturnOp) and not on_host(reader):
            node = reader.attributes.get("onnx_node")
            name = node.data if isinstance(node, StringAttr) else reader.name
            return f"'{name}' ({reader.name}) may run on the device, which cannot read through the interleave"
    return None


def _member_refusal(v: SSAValue, concat: nn.ConcatOp, hw: SnowflakeConfig) -> str | None:
    """Why `v` cannot be a channel slice of `concat`'s tensor."""
    other = concat_of(v)
    if other is not None and other[0] is not concat:
        return "an input is already a slice of another concat"
    owner = v.owner
    if channel_tiles(owner):
        return "an input is stored channel-tile-major (channel_tiles), not whole pixels of a tensor"
    if isinstance(owner, Operation):
        if isinstance(owner, nn.ConstantOp) or (not _placed(owner, "host") and not placed_concat(owner)
                                                and not placed_interleave(owner)
                                                and not isinstance(owner, DEVICE_OPS)):
            return f"an input comes from {owner.name}, which writes no channel slice"
        if placed_interleave(owner) and len(owner.operands) == 1:
            return "an input is a merged conv's interleave, whose CU stride writes whole pixels of its own"
        if isinstance(owner, nn.MaxPoolOp) and not _placed(owner, "host") and pool_shape(owner).c % 16:
            return "an input's max pool has channels not a multiple of 16 (a partial CU writes past them)"
        if isinstance(owner, nn.Conv2dOp) and not _placed(owner, "host"):
            try:  # as the slice's writer: its plan is chosen knowing its output is one (conv_mode)
                planned_conv(owner, hw, sliced=True)
            except LoweringError as e:
                return str(e)
    elif not isinstance(v, SSAValue) or not isinstance(owner, Block):
        return "an input is not a tensor"
    for use in v.uses:
        reader = use.operation
        if reader is concat or _placed(reader, "host"):
            continue
        if isinstance(reader, nn.Conv2dOp) and "lane_groups" not in reader.attributes and use.index == 0 or \
                isinstance(reader, nn.MaxPoolOp):
            continue  # reads its channels in place (layer_conv_shape, pool_shape); a bypass is read whole
        if isinstance(reader, nn.ChannelSliceOp) and all(isinstance(u.operation, nn.Conv2dOp) or u.operation is concat
                                                         or placed_concat(u.operation) for u in reader.results[0].uses):
            continue
        return f"an input is read by {reader.name}, which reads no channel slice in place"
    return None
