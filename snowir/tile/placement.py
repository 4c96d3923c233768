"""
Where a tile layer's DRAM regions put its output: the `tile.dram_region` placements (a concat's
channel slice `channels`, an interleave's phase `pixels`, a merged conv's interleave result
`phases`), read as the write-back's first word, pixel and row steps and CU spread, and checked
against where the graph places the nn op's result (snowir/segments.py `slot_of`). Shared by
nn-to-tile's builder, the reader, the verifier and tile-to-asm, so the four agree.
"""

from __future__ import annotations

from snowir.dialects import nn, tile
from snowir.dialects.tile.decisions import CHANNELS, PHASES, PIXELS
from snowir.plan.layout import interleaved, merged
from snowir.plan.shapes import ConvShape
from snowir.segments import slot_of


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


def output_placement(region: tile.DramRegionOp, s: ConvShape) -> tuple[int, int, int]:
    """Where a conv's output region puts its words: (first word, words between pixels, words between
    rows); (0, 0, 0) for an output of its own (K words a pixel, OW pixels a row)."""
    first, _, total = output_channels(region)
    pixels, phases = output_pixels(region), output_phases(region)
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
    pixels, phases = output_pixels(region), output_phases(region)
    if phases is not None:
        return merged(s.k, phases)[0]
    return interleaved(first, total or s.k, pixels)[0] if pixels is not None else s.oh * s.ow * (total or s.k) * 2


def slice_refusal(layer: tile.LayerOp, op: nn.Conv2dOp | nn.MaxPoolOp) -> str | None:
    """Why the layer's output region disagrees with where the graph places the nn op's result (a
    device concat's channel slice, `slot_of`): the readers, the host and the reports find the result
    there, so an edited `channels` is refused, not followed."""
    region = regions_of(layer).get("output")
    slot = slot_of(op.results[0])
    want = (0, 0, 0) if slot.channels == slot.total or slot.phases else (slot.first, slot.channels, slot.total)
    if region is not None and output_phases(region) != slot.phases:
        return (f"tile.dram_region @{region.sym_name.data}: phases {list(output_phases(region) or [])} where the graph "
                f"places its output at {list(slot.phases or [])} ([sy, sx, height, width] of its merged interleave's "
                "result; none: whole pixels of its own): edit the interleave in @main (or place it on the host) instead")
    if region is not None and output_pixels(region) != slot.pixels:
        return (f"tile.dram_region @{region.sym_name.data}: pixels {list(output_pixels(region) or [])} where the graph "
                f"places its output at {list(slot.pixels or [])} ([oy, ox, sy, sx, height, width] of its interleave's "
                "result; none: whole pixels of its own): edit the interleave in @main (or place it on the host) instead")
    if region is None or output_channels(region) == want:
        return None
    return (f"tile.dram_region @{region.sym_name.data}: channels {list(output_channels(region))} where the graph places "
            f"its output at {list(want)} ([first, count, total] of its concat's tensor; [0, 0, 0]: a tensor of its own): "
            "edit the concat in @main (or place it on the host) instead")
