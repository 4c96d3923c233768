"""
A lowered model's device segments, read from `@main`: the maximal runs of device layers in graph
order with no host layer between them (C17 §5.3: the host starts one instruction stream and
waits for it). Shared by allocate-dram (liveness), link-segments (one program per segment) and
the runner, so the three agree on where the host steps in.

An op of `@main` is one of:
  * a device layer: a conv2d / max_pool naming its tile layer (`tile`), its image (`image`) or,
    once linked, its layer marker (`layer`);
  * free: a constant, the return, a reshape or transpose (keeping the leading axis) that keeps
    the device's channel-innermost byte order (a view of the same DRAM bytes: sequence-gemm's
    1x1xTxK -> 1xKx1xT), a channel slice only convs read (in place), a channel concat placed on
    the device (its producers write their channel slices of its one DRAM tensor: `slot_of`), an
    interleave placed on the device (its phase convs write their pixels of its tensor in place), a
    crop placed on the device (its readers load its window of its source's tensor in place), a
    merged conv's interleave placed `host-read` (the host applies it as it reads the conv's grid
    back: `placed_host_read`);
  * a host layer: everything else (it reads and writes the device's DRAM between segments).

A tensor may be stored channel-tile-major (`CHANNEL_TILES` on the op writing it, NCHW[w]c: channels
[w·g, w·g + w) of every pixel an (H, W, w) run at word g·H·W·w; depthwise-to-grouped decides it for
a depthwise conv's input, which slices of whole blocks read): `Slot.tiles`, which the writer's
write-back (or the host's write), its readers' loads and the runner's reads follow.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from xdsl.dialects import func
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr
from xdsl.ir import Block, Operation, SSAValue

from snowir.dialects import nn
from snowir.device_layers import DEVICE_OPS
from snowir.errors import SnowError


CHANNEL_TILES = "channel_tiles"
"""Attribute of the op writing a tensor (depthwise-to-grouped: an nn.conv2d, or a host activation):
its result is stored channel-tile-major with blocks of this many channels (NCHW[w]c), written by
the conv in one layer (or by the host) and read block by block by convs over `nn.channel_slice`s of
whole blocks (docs/lowering.md, "Depthwise convs: the bound")."""


def main_of(module: ModuleOp) -> func.FuncOp:
    """`@main`, or the module's only function."""
    funcs = [op for op in _outside_code(module) if isinstance(op, func.FuncOp)]
    for op in funcs:
        if op.sym_name.data == "main":
            return op
    if len(funcs) == 1:
        return funcs[0]
    raise SnowError("the module has no func.func @main")


def _outside_code(op: Operation) -> Iterator[Operation]:
    """`op` and what it holds, not descending into snowflake_asm ops (images and programs hold
    only segments, programs, instructions and labels: 10^5 ops a lowered model)."""
    yield op
    if op.name.startswith("snowflake_asm."):
        return
    for region in op.regions:
        for block in region.blocks:
            for inner in block.ops:
                yield from _outside_code(inner)


def layer_of(op: Operation) -> str | None:
    """The device layer an nn op is computed by (a fused max pool names its conv's)."""
    for key in ("layer", "tile", "image"):
        value = op.attributes.get(key)
        if isinstance(value, StringAttr):
            return value.data
    return None


def _chw_order_kept(shape: tuple[int, ...]) -> bool:
    """NCHW and the device's N,H,W,C byte orders agree (one channel, or one pixel); a tensor of
    another rank is row-major on the device (segment_run's `device_order`)."""
    if len(shape) == 4:
        return shape[1] == 1 or shape[2] * shape[3] == 1
    return True


def _device_axes(rank: int) -> list[int]:
    """The logical axes of a tensor in the order the device lays them out: N, H, W, C for rank 4
    (channel-innermost), row-major otherwise (snowir/driver/segment_run.py: `device_order`)."""
    return [0, 2, 3, 1] if rank == 4 else list(range(rank))


def _flattens_pixels(op: Operation) -> bool:
    """A reshape of an (N, C, H, W) tensor to (N, C, H·W): with a (0, 2, 1) transpose after it
    (detector heads' outputs: Reshape then Transpose to (N, H·W, C)), the pair's result is the
    device's channel-innermost bytes as they are."""
    if not isinstance(op, nn.ReshapeOp):
        return False
    a, b = op.operands[0].type.get_shape(), op.results[0].type.get_shape()
    return len(a) == 4 and len(b) == 3 and (b[0], b[1], b[2]) == (a[0], a[1], a[2] * a[3])


def _pixel_major(op: Operation) -> bool:
    return isinstance(op, nn.TransposeOp) and [int(v) for v in op.perm.get_values()] == [0, 2, 1]


def transpose_is_view(op: nn.TransposeOp) -> bool:
    """The permutation moves no byte in the device's order: the non-unit axes, read in device order,
    come in the same order before and after (only axes of size one move), or it reads a flattened
    (N, C, H·W) tensor back pixel-major (`_flattens_pixels`). The leading axis stays: a device
    layer runs once per image of it, and its DRAM regions are per image."""
    shape = op.input.type.get_shape()
    perm = [int(v) for v in op.perm.get_values()]
    if not perm or perm[0] != 0:
        return False
    if _pixel_major(op) and isinstance(op.input.owner, Operation) and _flattens_pixels(op.input.owner):
        return True
    before = [a for a in _device_axes(len(shape)) if shape[a] != 1]
    after = [perm[a] for a in _device_axes(len(perm)) if shape[perm[a]] != 1]
    return before == after


def is_view(op: Operation) -> bool:
    """A reshape or transpose the device reads in place: same bytes in the same order."""
    if isinstance(op, nn.IdentityOp):
        return True
    if isinstance(op, nn.TransposeOp):
        return transpose_is_view(op)
    if not isinstance(op, nn.ReshapeOp | nn.FlattenOp):
        return False
    if _flattens_pixels(op) and op.results[0].uses and all(_pixel_major(u.operation) for u in op.results[0].uses):
        return True  # read only through a (0, 2, 1) transpose: the pair is a view
    a, b = op.operands[0].type.get_shape(), op.results[0].type.get_shape()
    return _chw_order_kept(tuple(a)) and _chw_order_kept(tuple(b))


def root(value: SSAValue) -> SSAValue:
    """The tensor whose DRAM bytes `value` is (through views), or holds as a window of its pixels
    (through device crops)."""
    while isinstance(value.owner, Operation) and (is_view(value.owner) or placed_crop(value.owner)):
        value = value.owner.operands[0]
    return value


@dataclass(frozen=True)
class Slot:
    """Where a tensor's channels lie in DRAM: channels [first, first + channels) of every pixel of
    `root`, a tensor of `total` channels (C17 §5.1 step 2: layers that share inputs and outputs
    share one pre-allocated region). A tensor no device concat places is its own root."""

    root: SSAValue
    first: int
    channels: int
    total: int
    pixels: tuple[int, int, int, int, int, int] | None = None
    """An interleave's phase (a device `nn.depth_to_space`, `interleave_of`): the tensor is root's
    pixels (oy + sy·i, ox + sx·j), as (oy, ox, sy, sx, root's height, root's width)."""
    phases: tuple[int, int, int, int] | None = None
    """A merged conv's phases interleaved in place (a device `nn.depth_to_space` of one input): the
    tensor's channel (a·sx + b)·M + m of pixel (i, j) is root's pixel (sy·i + a, sx·j + b) channel
    m, as (sy, sx, root's height, root's width)."""
    tiles: int = 0
    """root is stored channel-tile-major in blocks of `tiles` channels (`CHANNEL_TILES`; 0: channel-
    innermost): the tensor is channels [first, first + channels) of it, whole blocks."""
    window: tuple[int, int, int, int] | None = None
    """A device crop (`nn.crop`, `crop_of`): the tensor is root's pixels (y0 + i, x0 + j), read in
    place, as (y0, x0, root's height, root's width)."""
    read: tuple[int, int, int, int, int, int] | None = None
    """A merged conv's interleave the host reads in place (`placed_host_read`): the tensor's pixel
    (y, x) channel m is root's grid pixel ((y + oy) div sy, (x + ox) div sx) channel
    (((y + oy) mod sy)·sx + (x + ox) mod sx)·M + m, as (sy, sx, oy, ox, height, width): the output
    region's `host_read`."""

    @property
    def whole(self) -> bool:
        """Channel-innermost (H, W, C) bytes of a tensor of its own."""
        return self.channels == self.total and self.pixels is None and self.phases is None and not self.tiles \
            and self.window is None and self.read is None

    @property
    def blocks(self) -> tuple[int, int, int] | None:
        """A channel-tile-major placement as (block width, first block, blocks of root): the
        output region's or a block reader's maps region's `channel_tiles` (None: channel-innermost)."""
        return (self.tiles, self.first // self.tiles, self.total // self.tiles) if self.tiles else None


def placed_concat(op: Operation | None) -> bool:
    """A channel concat partition-host put on the device: no copy, its inputs are slices of it."""
    if not isinstance(op, nn.ConcatOp) or op.axis.value.data != 1:
        return False
    place = op.attributes.get("place")
    return isinstance(place, StringAttr) and place.data == "snowflake"


def placed_interleave(op: Operation | None) -> bool:
    """An interleave partition-host put on the device: no copy, each input one phase's conv, which
    writes its pixels in place (pixel stride sx, row stride sy of the result), or one merged conv
    writing every phase in place through its CU stride (`Slot.phases`)."""
    if not isinstance(op, nn.DepthToSpaceOp):
        return False
    place = op.attributes.get("place")
    return isinstance(place, StringAttr) and place.data == "snowflake"


HOST_READ = "host-read"
"""The `place` of a merged conv's interleave the host applies as it reads the conv's grid back
(partition-host: its result read by host layers or the model's outputs alone)."""


HOST_READ_FACT = "host_read"
"""The layer image's attribute (and its marker's fact) carrying its output region's `host_read`
(tile-to-asm sets it): how the runner's host reads the output back (segment_run.host_read_words)."""


def placed_host_read(op: Operation | None) -> bool:
    """A merged conv's interleave (`nn.depth_to_space` of one input) partition-host placed
    `host-read`: no copy and no host layer; the conv writes its phase grid as it is, and the host
    reads the interleave's result from it, each result word once, as it copies it back (the conv's
    output region's `host_read`)."""
    if not isinstance(op, nn.DepthToSpaceOp):
        return False
    place = op.attributes.get("place")
    return isinstance(place, StringAttr) and place.data == HOST_READ


READ_REARRANGEMENTS = (nn.ConcatOp, nn.TransposeOp)
"""Ops that only move values, which the host may apply as it copies device tensors back."""


def read_rearrangement(op: Operation | None) -> bool:
    """A concat or transpose partition-host placed `host-read`: its inputs are device tensors (or
    other such rearrangements of them) and only the model's outputs (or other such rearrangements)
    read it, so the host applies it as it copies the device's words back, each word once, as the
    copy it makes anyway (a YOLOv8 Detect head's Concat(axis 2) of the scales and its Transpose to
    (N, anchors, C)); no host layer."""
    if not isinstance(op, READ_REARRANGEMENTS):
        return False
    place = op.attributes.get("place")
    return isinstance(place, StringAttr) and place.data == HOST_READ


def read_sources(value: SSAValue) -> list[SSAValue]:
    """The tensors the host copies back to have `value`: through host-read rearrangements (and the
    reshapes between them, free on the host, which holds tensors in their logical order), their
    inputs' (each once, in order); else `value` itself."""
    owner = value.owner
    if isinstance(owner, nn.ReshapeOp | nn.FlattenOp) and _reads_rearranged(owner.operands[0]):
        return read_sources(owner.operands[0])
    if not read_rearrangement(owner):
        return [value]
    return list(dict.fromkeys(s for v in value.owner.operands for s in read_sources(v)))  # type: ignore[union-attr]


def _reads_rearranged(value: SSAValue) -> bool:
    """`value` is a host-read rearrangement's result, through reshapes."""
    owner = value.owner
    if isinstance(owner, nn.ReshapeOp | nn.FlattenOp):
        return _reads_rearranged(owner.operands[0])
    return read_rearrangement(owner)


def host_read_of(value: SSAValue) -> nn.DepthToSpaceOp | None:
    """The host-read interleave of a merged conv's output `value` (its one reader), else None."""
    for use in value.uses:
        if placed_host_read(use.operation):
            return use.operation  # type: ignore[return-value]
    return None


def host_read_layout(d2s: nn.DepthToSpaceOp) -> tuple[int, int, int, int, int, int]:
    """A host-read interleave as (sy, sx, oy, ox, height, width): the output region's `host_read`."""
    (sy, sx), (oy, ox) = nn.int_values(d2s.block), nn.int_values(d2s.offsets)
    _, _, h, w = d2s.output.type.get_shape()
    return sy, sx, oy, ox, h, w


def placed_crop(op: Operation | None) -> bool:
    """A crop partition-host put on the device: no copy, its readers load its window in place
    (rows its source's width apart)."""
    if not isinstance(op, nn.CropOp):
        return False
    place = op.attributes.get("place")
    return isinstance(place, StringAttr) and place.data == "snowflake"


def interleave_of(value: SSAValue) -> tuple[nn.DepthToSpaceOp, int, int] | None:
    """The device interleave `value` is a phase of, and the phase's first pixel (oy, ox) in its
    result (offsets 0, one input per phase, row-major: lowerable's `interleave_refusal`)."""
    for use in value.uses:
        if placed_interleave(use.operation):
            d2s = use.operation
            _, bx = nn.int_values(d2s.block)  # type: ignore[attr-defined]
            oy, ox = divmod(use.index, bx)
            return d2s, oy, ox  # type: ignore[return-value]
    return None


def concat_of(value: SSAValue) -> tuple[nn.ConcatOp, int] | None:
    """The device concat `value` is an input of (itself, or as the consecutive channel slices that
    cover it, a Split's outputs), and its first channel there."""
    users = [u.operation for u in value.uses]
    users += [u.operation for s in users if isinstance(s, nn.ChannelSliceOp) for u in s.results[0].uses]
    for op in users:
        if placed_concat(op):
            for member, first in concat_inputs(op):  # type: ignore[arg-type]
                if member is value:
                    return op, first  # type: ignore[return-value]
    return None


def concat_inputs(concat: nn.ConcatOp) -> list[tuple[SSAValue, int]]:
    """A concat's inputs and their first channels, a run of channel slices that covers one tensor
    in order (a Split's outputs, concatenated again) as that tensor."""
    out: list[tuple[SSAValue, int]] = []
    first = 0
    operands = list(concat.operands)
    i = 0
    while i < len(operands):
        v = operands[i]
        source = _sliced(v)
        if source is not None and isinstance(v.owner, nn.ChannelSliceOp) and v.owner.start.value.data == 0:
            covered, j = 0, i
            while j < len(operands) and _sliced(operands[j]) is source \
                    and operands[j].owner.start.value.data == covered:  # type: ignore[union-attr]
                covered += operands[j].type.get_shape()[1]
                j += 1
            if covered == source.type.get_shape()[1]:
                out.append((source, first))
                first += covered
                i = j
                continue
        out.append((v, first))
        first += v.type.get_shape()[1]
        i += 1
    return out


def _sliced(value: SSAValue) -> SSAValue | None:
    return value.owner.input if isinstance(value.owner, nn.ChannelSliceOp) else None


def channel_tiles(op: Operation | Block | None) -> int:
    """The block width an op's result is stored channel-tile-major in (`CHANNEL_TILES`: a device
    conv's, or a host activation's the host writes so), 0 if none."""
    attr = op.attributes.get(CHANNEL_TILES) if isinstance(op, Operation) else None
    return attr.value.data if isinstance(attr, IntegerAttr) else 0


def slot_of(value: SSAValue) -> Slot:
    """The DRAM slot of `value` (through views, channel slices and device concats)."""
    shape = value.type.get_shape()
    channels = shape[1] if len(shape) == 4 else 0
    if tiles := channel_tiles(value.owner):  # stored channel-tile-major: a tensor of its own
        return Slot(value, 0, channels, channels, tiles=tiles)
    if placed_host_read(value.owner):  # the merged conv's grid, which the host reads through the interleave
        grid = slot_of(value.owner.inputs[0])  # type: ignore[union-attr]
        return Slot(grid.root, 0, channels, grid.total, read=host_read_layout(value.owner))  # type: ignore[arg-type]
    if placed_crop(value.owner):  # a window of its source's pixels (a tensor of its own: lowerable's crop_refusal)
        outer = slot_of(value.owner.input)  # type: ignore[union-attr]
        (y0, x0), (_, _, h, w) = nn.int_values(value.owner.offsets), value.owner.input.type.get_shape()  # type: ignore[union-attr]
        return Slot(outer.root, outer.first, channels, outer.total, window=(y0, x0, h, w))
    if isinstance(value.owner, nn.ChannelSliceOp):
        outer = slot_of(value.owner.input)
        if outer.tiles:  # channels of a channel-tile-major tensor (a reader of whole blocks reads them in place)
            return Slot(outer.root, outer.first + value.owner.start.value.data, channels, outer.total, tiles=outer.tiles)
        if not outer.whole:  # a slice of a concat's slice: a view of the same bytes
            return Slot(outer.root, outer.first + value.owner.start.value.data, channels, outer.total)
    phase = interleave_of(value) if channels else None
    if phase is not None:  # an interleave's phase: every sy-th row's every sx-th pixel of its result
        d2s, oy, ox = phase
        outer = slot_of(d2s.output)  # which may be a concat's slice
        (sy, sx), (_, _, h, w) = nn.int_values(d2s.block), d2s.output.type.get_shape()
        if len(d2s.inputs) == 1:  # one merged conv: its channels are the phases (lowerable: interleave_refusal)
            return Slot(outer.root, outer.first, channels, outer.total, phases=(sy, sx, h, w))
        return Slot(outer.root, outer.first, channels, outer.total, (oy, ox, sy, sx, h, w))
    member = concat_of(value) if channels else None
    if member is None:  # a view's bytes are its source's (a device concat's inputs are no views)
        return Slot(root(value), 0, channels, channels)
    outer = slot_of(member[0].results[0])
    return Slot(outer.root, outer.first + member[1], channels, outer.total)


def members_of(concat: nn.ConcatOp) -> list[tuple[SSAValue, int]]:
    """The tensors a device concat's region holds, each with its first channel (nested concats'
    inputs too): what producers and the host write into it."""
    out: list[tuple[SSAValue, int]] = []
    for v, first in concat_inputs(concat):
        out.append((v, first))
        if placed_concat(v.owner):
            out += [(m, first + c) for m, c in members_of(v.owner)]  # type: ignore[arg-type]
    return out


def _free(op: Operation) -> bool:
    if isinstance(op, nn.ConstantOp | func.ReturnOp) or is_view(op) or placed_concat(op) or placed_interleave(op) \
            or placed_crop(op) or placed_host_read(op) or read_rearrangement(op):
        return True
    if isinstance(op, nn.ChannelSliceOp):
        return all(isinstance(use.operation, nn.Conv2dOp) and layer_of(use.operation) is not None
                   or placed_concat(use.operation) for use in op.results[0].uses)
    return False


@dataclass
class Segment:
    layers: list[str] = field(default_factory=list)
    """The device layers, in graph order (a fused pool's conv once)."""
    host_before: list[Operation] = field(default_factory=list)
    """The host layers that run before this segment (after the previous one)."""


@dataclass
class Segments:
    segments: list[Segment]
    host_after: list[Operation]
    """Host layers after the last segment."""
    position: dict[str, int]
    """Each device layer's position in graph order (over all segments)."""

    def segment_of(self, layer: str) -> int:
        for i, s in enumerate(self.segments):
            if layer in s.layers:
                return i
        raise KeyError(layer)

    def first_position(self, index: int) -> int:
        return self.position[self.segments[index].layers[0]]

    def last_position(self, index: int) -> int:
        return self.position[self.segments[index].layers[-1]]


def segments_of(block: Block) -> Segments:
    """The device segments of `@main`'s block."""
    segments: list[Segment] = []
    pending_host: list[Operation] = []
    position: dict[str, int] = {}
    current: Segment | None = None
    for op in block.ops:
        layer = layer_of(op) if isinstance(op, DEVICE_OPS) else None
        if layer is not None:
            if current is None:
                current = Segment(host_before=pending_host)
                pending_host = []
                segments.append(current)
            if layer not in position:
                position[layer] = len(position)
                current.layers.append(layer)
            continue
        if _free(op):
            continue
        pending_host.append(op)
        current = None
    return Segments(segments, pending_host, position)
