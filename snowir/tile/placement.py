"""
Where a tile layer's DRAM regions put its output and find its inputs: the `tile.dram_region`
placements (a concat's channel slice `channels`, an interleave's phase `pixels`, a merged conv's
interleave result `phases`, a channel-tile-major tensor `channel_tiles`; a crop's window `crop` on a
maps or bypass region), read as the write-back's first word, pixel, row and kernel-tile steps and CU
spread, or the loads' first word and row step, and checked against where the graph places the nn
op's result and finds its inputs (snowir/segments.py `slot_of`); and where a block reader's maps
region finds its block (`channel_tiles` on 'maps'). Shared by nn-to-tile's builder, the reader, the verifier and
tile-to-asm, so the four agree.
"""

from __future__ import annotations

from snowir.dialects import nn, tile
from snowir.dialects.tile.decisions import CHANNEL_TILES, CHANNELS, CROP, HOST_READ, PHASES, PIXELS
from snowir.hw import SnowflakeConfig
from snowir.plan.conv import BLOCKS_MLOOP
from snowir.plan.layout import block_offset, bypass_tiles_refusal, channel_tiles_refusal, cropped, interleaved, merged, tiled
from snowir.plan.shapes import ConvPlan, ConvShape
from snowir.segments import host_read_layout, host_read_of, slot_of


def regions_of(layer: tile.LayerOp) -> dict[str, tile.DramRegionOp]:
    return {op.label.data: op for op in layer.body.block.ops if isinstance(op, tile.DramRegionOp)}


def output_channels(region: tile.DramRegionOp) -> tuple[int, int, int]:
    """An output region's `channels` (first, count, total): a channel slice of a wider tensor (a
    device concat's) the layer writes whole pixels of; (0, 0, 0) for an output of its own."""
    return CHANNELS.value(region) or (0, 0, 0)  # type: ignore[return-value]


def output_pixels(region: tile.DramRegionOp) -> tuple[int, ...] | None:
    """An output region's `pixels` (oy, ox, sy, sx, height, width): an interleave's phase, written
    at every sy-th row's every sx-th pixel of a height x width tensor; None for whole pixels."""
    return PIXELS.value(region)


def output_phases(region: tile.DramRegionOp) -> tuple[int, ...] | None:
    """An output region's `phases` (sy, sx, height, width): a merged conv's interleave result,
    every phase written in place through the CU stride; None otherwise."""
    return PHASES.value(region)


def output_host_read(region: tile.DramRegionOp) -> tuple[int, ...] | None:
    """An output region's `host_read` (sy, sx, oy, ox, height, width): a merged conv's phase grid,
    which the host reads through its interleave; None: the host reads the output as it is."""
    return HOST_READ.value(region)


def host_read_refusal(region: tile.DramRegionOp, layer: tile.LayerOp) -> str | None:
    """Why the layer's output cannot be read by the host through the region's `host_read`: a conv's
    own whole pixels (no fused pool, concat slice, interleave phase or result, channel-tile-major
    blocks), its channels sy·sx phases of whole pixels, and the window inside the phase grid."""
    read = output_host_read(region)
    if read is None:
        return None
    what = f"tile.dram_region @{region.sym_name.data}: host_read {list(read)}"
    if layer.pool is not None or not isinstance(layer.shape, tile.ConvShapeAttr):
        return f"{what}: the host reads a conv's own grid, not a max pool's output (remove host_read)"
    if CHANNELS.value(region) or PIXELS.value(region) or PHASES.value(region) or CHANNEL_TILES.value(region):
        return f"{what}: the host reads whole pixels of the conv's own (remove host_read, or channels, pixels, " \
               "phases or channel_tiles)"
    v = layer.shape.values()
    shape = ConvShape(**{**{f: v[f] for f in tile.ConvShapeAttr.FIELDS}, "relu": bool(v["relu"])})
    k, oh, ow = shape.k, shape.oh, shape.ow
    sy, sx, oy, ox, height, width = read
    if k % (sy * sx):
        return f"{what}: the conv's {k} channels are not {sy}x{sx} phases of whole pixels"
    if oy + height > sy * oh or ox + width > sx * ow:
        return f"{what}: the window passes the {sy * oh}x{sx * ow} grid of phases"
    return None


def region_tiles(region: tile.DramRegionOp) -> tuple[int, int, int] | None:
    """A region's `channel_tiles` (block width, block, blocks): its tensor stored channel-tile-major,
    written from that block on ('output') or read at that block ('maps'); None: channel-innermost."""
    return CHANNEL_TILES.value(region)


def input_offset(region: tile.DramRegionOp, s: ConvShape) -> int:
    """The bytes from a conv's maps region to the input it reads: its block of a channel-tile-major
    tensor (`channel_tiles`), else 0."""
    return block_offset(s.h, s.w, region_tiles(region))


def output_tile_step(region: tile.DramRegionOp, s: ConvShape) -> int:
    """Bytes between a conv's kernel tiles' outputs when not their channels' (a channel-tile-major
    output: one block), 0 otherwise."""
    tiles = region_tiles(region)
    return tiled(s.oh, s.ow, tiles)[4] if tiles is not None else 0


def bypass_blocks(region: tile.DramRegionOp | None, s: ConvShape) -> tuple[int, int]:
    """A conv's channel-tile-major bypass (the bypass region's `channel_tiles`): the bytes from the
    region to its first block, and between kernel tile t's block and tile t + 1's; (0, 0) for a
    bypass read as whole pixels."""
    tiles = region_tiles(region) if region is not None else None
    return (0, 0) if tiles is None else (block_offset(s.oh, s.ow, tiles), tiled(s.oh, s.ow, tiles)[4])


def input_crop(region: tile.DramRegionOp | None) -> tuple[int, ...] | None:
    """An input region's `crop` (y0, x0, height, width): a crop's window of the height x width tensor
    the region spans; None for an input of its own."""
    return None if region is None else CROP.value(region)


def input_placement(region: tile.DramRegionOp | None, pixel: int) -> tuple[int, int]:
    """Where an input region's loads find the layer's input of `pixel` words a pixel: (first word,
    words between rows) of a crop's window; (0, 0) for an input of its own (rows as wide as the
    layer's)."""
    return cropped(input_crop(region), pixel)


def input_bytes(region: tile.DramRegionOp | None, pixels: int, pixel: int) -> int:
    """The bytes an input region of `pixels` pixels of `pixel` words spans: its crop's whole tensor,
    or the whole channel-tile-major tensor it reads a block of."""
    window = input_crop(region)
    tiles = region_tiles(region) if region is not None else None
    return 2 * pixel * (pixels if window is None else window[2] * window[3]) * (tiles[2] if tiles is not None else 1)


def output_placement(region: tile.DramRegionOp, s: ConvShape) -> tuple[int, int, int]:
    """Where a conv's output region puts its words: (first word, words between pixels, words between
    rows); (0, 0, 0) for an output of its own (K words a pixel, OW pixels a row)."""
    first, _, total = output_channels(region)
    pixels, phases, tiles = output_pixels(region), output_phases(region), region_tiles(region)
    if tiles is not None:
        return tiled(s.oh, s.ow, tiles)[1:4]
    if pixels is not None:
        return interleaved(first, total or s.k, pixels)[1:]
    if phases is not None:
        return (0, *merged(s.k, phases)[1:3])
    return (first, total, s.ow * total) if total else (0, 0, 0)


def output_cus(region: tile.DramRegionOp, s: ConvShape) -> tuple[int, int]:
    """How a conv's output region spreads its kernels over the CUs: (CU stride in bytes, kernels a
    CU); (0, 0) for the COOP default (kernel j on vMAC j, CUs 2V bytes apart)."""
    phases = output_phases(region)
    return merged(s.k, phases)[3:] if phases is not None else (0, 0)


def output_bytes(region: tile.DramRegionOp, s: ConvShape) -> int:
    """The bytes a conv's output region spans: the whole tensor it is a slice or phase of."""
    first, _, total = output_channels(region)
    pixels, phases, tiles = output_pixels(region), output_phases(region), region_tiles(region)
    if tiles is not None:
        return tiled(s.oh, s.ow, tiles)[0]
    if phases is not None:
        return merged(s.k, phases)[0]
    return interleaved(first, total or s.k, pixels)[0] if pixels is not None else s.oh * s.ow * (total or s.k) * 2


def placement_refusal(layer: tile.LayerOp, op: nn.Conv2dOp | nn.MaxPoolOp,
                      reader: nn.Conv2dOp | nn.MaxPoolOp | None = None) -> str | None:
    """Why the layer's regions disagree with where the graph places the nn op's result (a device
    concat's channel slice, an interleave's phase or result, `slot_of`) or finds its inputs (a
    device crop's window): the readers, the host and the reports find the result there and the
    producers wrote the inputs there, so an edited `channels`, `pixels`, `phases` or `crop` is
    refused, not followed. `reader`: the op whose inputs the layer reads (a fused pool's conv; `op`
    when None)."""
    regions = regions_of(layer)
    reader = reader or op
    source = reader.input.owner.input if isinstance(reader.input.owner, nn.ChannelSliceOp) else reader.input
    inputs = [("maps", source)]
    if isinstance(reader, nn.Conv2dOp) and reader.bypass is not None:
        inputs.append(("bypass", reader.bypass))
    for label, value in inputs:
        have, want = input_crop(regions.get(label)), slot_of(value).window
        if label in regions and have != want:
            return (f"tile.dram_region @{regions[label].sym_name.data}: crop {list(have or [])} where the graph finds "
                    f"its {label} at {list(want or [])} ([y0, x0, height, width] of its crop's source; none: a tensor "
                    "of its own): edit the crop in @main (or place it on the host) instead")
    if isinstance(reader, nn.Conv2dOp) and reader.bypass is not None and "bypass" in regions \
            and region_tiles(regions["bypass"]) != slot_of(reader.bypass).blocks:
        return _tiles_disagree(regions["bypass"], slot_of(reader.bypass).blocks, "its bypass")
    region = regions.get("output")
    slot = slot_of(op.results[0])
    want = (0, 0, 0) if slot.channels == slot.total or slot.phases or slot.tiles else \
        (slot.first, slot.channels, slot.total)
    if region is not None and region_tiles(region) != slot.blocks:
        return _tiles_disagree(region, slot.blocks, "its output")
    if region is not None and output_phases(region) != slot.phases:
        return (f"tile.dram_region @{region.sym_name.data}: phases {list(output_phases(region) or [])} where the graph "
                f"places its output at {list(slot.phases or [])} ([sy, sx, height, width] of its merged interleave's "
                "result; none: whole pixels of its own): edit the interleave in @main (or place it on the host) instead")
    reader = host_read_of(op.results[0])
    want_read = host_read_layout(reader) if reader is not None else None
    if region is not None and output_host_read(region) != want_read:
        return (f"tile.dram_region @{region.sym_name.data}: host_read {list(output_host_read(region) or [])} where the "
                f"graph's interleave reads its output as {list(want_read or [])} ([sy, sx, oy, ox, height, width]; "
                "none: read as it is): edit the interleave in @main (or place it on the host) instead")
    if region is not None and output_pixels(region) != slot.pixels:
        return (f"tile.dram_region @{region.sym_name.data}: pixels {list(output_pixels(region) or [])} where the graph "
                f"places its output at {list(slot.pixels or [])} ([oy, ox, sy, sx, height, width] of its interleave's "
                "result; none: whole pixels of its own): edit the interleave in @main (or place it on the host) instead")
    if region is None or output_channels(region) == want:
        return None
    return (f"tile.dram_region @{region.sym_name.data}: channels {list(output_channels(region))} where the graph places "
            f"its output at {list(want)} ([first, count, total] of its concat's tensor; [0, 0, 0]: a tensor of its own): "
            "edit the concat in @main (or place it on the host) instead")


def _tiles_disagree(region: tile.DramRegionOp, want: tuple[int, int, int] | None, what: str) -> str:
    return (f"tile.dram_region @{region.sym_name.data}: channel_tiles {list(region_tiles(region) or [])} where the "
            f"graph places {what} at {list(want or [])} ([width, block, blocks] of a channel-tile-major tensor; none: "
            "channel-innermost): edit the producer's channel_tiles or the channel slices in @main instead")


def maps_refusal(layer: tile.LayerOp, op: nn.Conv2dOp | nn.MaxPoolOp) -> str | None:
    """Why the layer's maps region disagrees with where the graph places the input the nn op reads:
    a block of a channel-tile-major tensor (a conv over a channel slice of whole blocks) or not."""
    region = regions_of(layer).get("maps")
    source = op.input.owner.input if isinstance(op, nn.Conv2dOp) and isinstance(op.input.owner, nn.ChannelSliceOp) \
        else op.input
    want = slot_of(op.input).blocks if isinstance(op, nn.Conv2dOp) and slot_of(source).tiles else None
    if region is None or region_tiles(region) == want:
        return None
    return _tiles_disagree(region, want, "the input it reads")


def tiles_refusal(layer: tile.LayerOp, s: ConvShape | None, plan: ConvPlan | None, hw: SnowflakeConfig) -> str | None:
    """Why the layer cannot follow its regions' `channel_tiles` (`s`, `plan`: a conv's shape and
    plan, None for a max pool): the output's needs a COOP conv by rows whose kernel tiles are the blocks
    (`channel_tiles_refusal`), and whole blocks; the maps' a conv reading its whole input as the
    block, as it lies (no gather), or a grouped conv whose groups are blocks, inside the tensor,
    run Mloop (`ConvShape.block_maps`)."""
    regions = regions_of(layer)
    for label in ("maps", "output", "bypass"):
        region = regions.get(label)
        tiles = region_tiles(region) if region is not None else None
        if tiles is None:
            continue
        what = f"tile.dram_region @{region.sym_name.data}: channel_tiles {list(tiles)}"  # type: ignore[union-attr]
        if s is None or plan is None or (label == "output" and layer.pool is not None):
            return f"{what}: a max pool reads and writes channel-innermost tensors (remove channel_tiles)"
        width, block, blocks = tiles
        if label == "bypass":
            if (why := bypass_tiles_refusal(plan, width)) is not None:
                return f"{what}: {why}"
            if block + s.k // width > blocks:
                return f"{what}: its {s.k // width} blocks from block {block} pass the tensor's {blocks}"
            continue
        if label == "maps":
            if input_crop(region) is not None:  # the nn level refuses the pair too (plan/layout.conv_layout)
                return f"{what}: a crop's window of a channel-tile-major tensor is not read in place (remove one)"
            if plan.gather is not None or s.cin_total or s.c != width:
                return (f"{what}: a conv reading a block reads its {width} channels whole, as its input "
                        f"({s.c} channels{' a group' if s.groups > 1 else ''}"
                        f"{', gathered' if plan.gather is not None else ''} here)")
            if block + s.groups > blocks:
                return f"{what}: its {s.groups} groups' blocks from block {block} pass the tensor's {blocks}"
            if s.groups > 1 and plan.loop_order != "Mloop":
                return f"{what}: {BLOCKS_MLOOP}"
            if s.groups > 1 and plan.column_tiled:
                return f"{what}: a grouped conv over blocks is not column-tiled (remove out_cols)"
            continue
        if output_channels(region) != (0, 0, 0) or output_pixels(region) or output_phases(region):  # type: ignore[arg-type]
            return f"{what}: a concat slice's or an interleave's placement is of a channel-innermost tensor (remove one)"
        if (why := channel_tiles_refusal(plan, width, hw)) is not None:
            return f"{what}: {why}"
        if block + s.k // width > blocks:
            return f"{what}: its {s.k // width} blocks from block {block} pass the tensor's {blocks}"
    return None

