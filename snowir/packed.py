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

import weakref

import numpy as np
from xdsl.dialects.builtin import DenseResourceAttr, DictionaryAttr, ModuleOp, StringAttr
from xdsl.ir import Operation

from snowir.dialects import nn, snowflake_asm as sf, tile
from snowir.errors import SnowError
from snowir.hw import SnowflakeConfig
from snowir.dialects.tile.decisions import BIASES
from snowir.plan.layout import LANE_GROUPS, unpack_kernels
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
    image, mode, biases = packed_images(_root(const)).image(conv, layer)
    k, cg, kh, kw = value.type.get_shape()
    lanes = SnowflakeConfig().lanes if LANE_GROUPS in conv.attributes else 0  # the image is block-diagonal
    # unpacking reads only the kernel's geometry and where the image keeps the biases
    kernel = ConvShape(lanes or cg, 1, 1, k, kh, kw, 1, 1, 0, 0, 0, 0, False, 0, bias_at=biases)
    weights, _ = unpack_kernels(image, kernel, mode, SnowflakeConfig())
    if lanes:  # each kernel's own channel of its group
        return weights[np.arange(k), np.arange(k) % lanes][:, None]
    return weights


def _root(op: Operation) -> ModuleOp:
    top = op.get_toplevel_object()
    if not isinstance(top, ModuleOp):
        raise PackedWeightsError("nn.constant #nn.packed: not inside a module")
    return top


class PackedImages:
    """Where each layer's packed weights are in one module, found in one walk.

    Looking a layer up by walking the module (and a segment's whole program for its marker)
    once per packed conv is quadratic: a 2.36 M-instruction program with ~100 convs spent 60 of
    its 64 golden seconds there (issue 40). The index holds the ops, not their values, so an
    image rewritten in place reads fresh; an op the index holds that is no longer where it was
    (a pass moved or erased it), or a name it does not know, rebuilds it once (`walks` counts
    the builds)."""

    def __init__(self, module: ModuleOp):
        self.module = module
        self.walks = 0
        self._layers: dict[str, tile.LayerOp] = {}
        self._images: dict[str, sf.ImageOp] = {}
        self._markers: dict[sf.ImageOp, dict[str, sf.LabelOp]] = {}
        self._built = False

    def _build(self) -> None:
        """One pass over the module's top level; a segment image's markers are indexed on first use."""
        self.walks += 1
        self._layers = {op.sym_name.data: op for op in self.module.ops if isinstance(op, tile.LayerOp)}
        self._images = {op.sym_name.data: op for op in self.module.ops if isinstance(op, sf.ImageOp)}
        self._markers = {}
        self._built = True

    def _marker(self, image: sf.ImageOp, layer: str) -> sf.LabelOp | None:
        markers = self._markers.get(image)
        if markers is None:  # one walk of the segment's program, for all its layers
            markers = {m.label.data: m for m in image.program.body.block.ops
                       if isinstance(m, sf.LabelOp) and isinstance(m.attributes.get("layer"), DictionaryAttr)}
            self._markers[image] = markers
        return markers.get(layer)

    def _current(self, conv: nn.Conv2dOp, layer: str) -> tile.LayerOp | tuple[sf.ImageOp, sf.LabelOp | None] | None:
        """What holds `layer`'s weights per the index, None if the index does not know it or is stale."""
        tile_name, image_name = conv.attributes.get("tile"), conv.attributes.get("image")
        if isinstance(tile_name, StringAttr) and (op := self._layers.get(tile_name.data)) is not None:
            if op.parent is not self.module.body.block or op.sym_name.data != tile_name.data:
                return None
            return op
        if isinstance(image_name, StringAttr) and (img := self._images.get(image_name.data)) is not None:
            if img.parent is not self.module.body.block or img.sym_name.data != image_name.data:
                return None
            if "segment" not in img.attributes:
                return img, None
            marker = self._marker(img, layer)
            if marker is None or marker.parent is not img.program.body.block or marker.label.data != layer:
                return None
            return img, marker
        return None

    def image(self, conv: nn.Conv2dOp, layer: str) -> tuple[np.ndarray, str, str]:
        """(packed image words, mode, where it keeps the biases) of `layer`: its tile layer's weights
        region, else its image's weights segment (a layer's own image, or a segment's, where its
        marker names the segment; the layout as the image's `biases` fact says, absent: kernel)."""
        if not self._built:
            self._build()
        holder = self._current(conv, layer)
        if holder is None:
            self._build()
            holder = self._current(conv, layer)
        found = _read(holder, layer) if holder is not None else None
        if found is None:
            raise PackedWeightsError(f"nn.constant #nn.packed<\"{layer}\">: the layer's packed weights are not in the "
                                     f"module (no tile.layer or image holds them)")
        return found


_INDEX: weakref.WeakKeyDictionary[ModuleOp, PackedImages] = weakref.WeakKeyDictionary()


def packed_images(module: ModuleOp) -> PackedImages:
    """The module's index, shared by every reader of its packed weights (a golden run, `--check`'s)."""
    index = _INDEX.get(module)
    if index is None:
        index = _INDEX[module] = PackedImages(module)
    return index


def _read(holder: tile.LayerOp | tuple[sf.ImageOp, sf.LabelOp | None], layer: str) -> tuple[np.ndarray, str, str] | None:
    if isinstance(holder, tile.LayerOp):
        region = next((r for r in holder.body.block.ops if isinstance(r, tile.DramRegionOp)
                       and r.label.data == "weights"), None)
        if region is None or region.value is None or region.packing is None:
            return None
        return int16_array(region.value), region.packing.data.value, BIASES.value(region)
    image, marker = holder
    facts: dict = dict(marker.attributes["layer"].data) if marker is not None else dict(image.attributes)  # type: ignore[union-attr]
    segment = facts.get("w", StringAttr("w"))
    mode = facts.get("mode")
    seg = next((s for s in image.body.block.ops if isinstance(s, sf.SegmentOp)
                and isinstance(segment, StringAttr) and s.sym_name.data == segment.data), None)
    if seg is None or not isinstance(seg.value, DenseResourceAttr) or not isinstance(mode, StringAttr):
        return None
    biases = facts.get(BIASES.name)
    return int16_array(seg.value), mode.data, biases.data if isinstance(biases, StringAttr) else BIASES.default
