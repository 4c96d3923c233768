"""
Weights stored once. From the tile level on, a device conv's weights live in its layer's packed
weight image (the tile layer's `weights` region; after tile-to-asm the image's data segment),
and the nn constant the conv reads says so (`#nn.packed<"conv1", tensor<...>>`) instead of
keeping a second copy: a lowered ResNet is its weights once, not twice.

`refer_to_packed` makes the reference (nn-to-tile, once the layer holds the packed image);
`packed_weights` reads the weights back, unpacked, for whoever evaluates the nn op (the golden
model), from wherever the lowering has put the image by now.
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import DenseResourceAttr, DictionaryAttr, ModuleOp, StringAttr
from xdsl.ir import Operation

from snowir.dialects import nn, snowflake_asm as sf, tile
from snowir.errors import SnowError
from snowir.hw import SnowflakeConfig
from snowir.plan.layout import LANE_GROUPS, unpack
from snowir.plan.shapes import ConvShape
from snowir.resources import int16_array


class PackedWeightsError(SnowError):
    """The packed image an `#nn.packed` constant refers to is not in the module."""


def refer_to_packed(conv: nn.Conv2dOp, layer: str, hw: SnowflakeConfig) -> None:
    """The conv's weight constant, when only this conv reads it, becomes a reference to the
    layer's packed image. (INDP images interleave by the vMAC width: only the default machine's
    are read back, so another width keeps its constant.)"""
    const = conv.weight.owner
    if not isinstance(const, nn.ConstantOp) or isinstance(const.value, nn.PackedWeightsAttr):
        return
    if hw.lanes != SnowflakeConfig().lanes or any(use.operation is not conv for use in const.result.uses):
        return
    ty = const.result.type
    const.properties["value"] = nn.PackedWeightsAttr(layer, ty)  # type: ignore[arg-type]


def packed_weights(const: nn.ConstantOp) -> np.ndarray:
    """The int16 weights (K, C, kh, kw) an `#nn.packed` constant refers to."""
    value = const.value
    assert isinstance(value, nn.PackedWeightsAttr)
    layer = value.layer.data
    convs = [use.operation for use in const.result.uses if isinstance(use.operation, nn.Conv2dOp)]
    if not convs:
        raise PackedWeightsError(f"nn.constant #nn.packed<\"{layer}\">: no nn.conv2d reads it")
    conv = convs[0]
    image, mode = _packed_image(_root(const), conv, layer)
    k, cg, kh, kw = value.type.get_shape()
    lanes = SnowflakeConfig().lanes if LANE_GROUPS in conv.attributes else 0  # the image is block-diagonal
    kernel = ConvShape(lanes or cg, 1, 1, k, kh, kw, 1, 1, 0, 0, 0, 0, False, 0)  # unpacking reads only the kernel's geometry
    weights, _ = unpack(image, kernel, mode, SnowflakeConfig())
    if lanes:  # each kernel's own channel of its group
        return weights[np.arange(k), np.arange(k) % lanes][:, None]
    return weights


def _root(op: Operation) -> ModuleOp:
    top = op.get_toplevel_object()
    if not isinstance(top, ModuleOp):
        raise PackedWeightsError("nn.constant #nn.packed: not inside a module")
    return top


def _packed_image(module: ModuleOp, conv: nn.Conv2dOp, layer: str) -> tuple[np.ndarray, str]:
    """(packed image words, mode) of `layer`: its tile layer's weights region, else its image's
    weights segment (a layer's own image, or a segment's, where its marker names the segment)."""
    tile_name = conv.attributes.get("tile")
    image_name = conv.attributes.get("image")
    for op in module.ops:
        if isinstance(op, tile.LayerOp) and isinstance(tile_name, StringAttr) and op.sym_name.data == tile_name.data:
            region = next((r for r in op.body.block.ops if isinstance(r, tile.DramRegionOp)
                           and r.label.data == "weights"), None)
            if region is None or region.value is None or region.packing is None:
                break
            return int16_array(region.value), region.packing.data.value
        if isinstance(op, sf.ImageOp) and isinstance(image_name, StringAttr) and op.sym_name.data == image_name.data:
            facts: dict = dict(op.attributes)
            if "segment" in op.attributes:  # a segment's program: the layer's marker holds its facts
                marker = next((m for m in op.program.body.block.ops if isinstance(m, sf.LabelOp)
                               and m.label.data == layer and isinstance(m.attributes.get("layer"), DictionaryAttr)),
                              None)
                if marker is None:
                    break
                facts = dict(marker.attributes["layer"].data)  # type: ignore[union-attr]
            segment = facts.get("w", StringAttr("w"))
            mode = facts.get("mode")
            seg = next((s for s in op.body.block.ops if isinstance(s, sf.SegmentOp)
                        and isinstance(segment, StringAttr) and s.sym_name.data == segment.data), None)
            if seg is None or not isinstance(seg.value, DenseResourceAttr) or not isinstance(mode, StringAttr):
                break
            return int16_array(seg.value), mode.data
    raise PackedWeightsError(f"nn.constant #nn.packed<\"{layer}\">: the layer's packed weights are not in the module "
                             f"(no tile.layer or image holds them)")
