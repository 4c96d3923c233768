"""
The model's DRAM plan (allocate-dram): `tile.dram_plan` holds a `tile.tensor` per buffer the
device layers use, placed by liveness, and checks the layers' `tile.dram_region`s against it.
"""

from __future__ import annotations

import math

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import I64, DenseArrayBase, IntegerAttr, StringAttr, SymbolNameConstraint
from xdsl.ir import Block, Region
from xdsl.irdl import irdl_op_definition, prop_def, region_def, traits_def
from xdsl.traits import NoTerminator, SymbolOpInterface
from xdsl.utils.exceptions import VerifyException

from snowir.dialects.tile.abstract_ops import TileOperation, i64_array, i64_attr
from snowir.dialects.tile.attributes import LayerKind
from snowir.dialects.tile.decisions import CHANNELS, FENCE, PIXELS, WEIGHTS_BEFORE_FENCE
from snowir.dialects.tile.layer_ops import DramRegionOp, LayerOp


@irdl_op_definition
class TensorOp(TileOperation):
    """A DRAM buffer of the model's plan: an activation (a tensor the device reads or writes),
    a layer's weights, or a layer's scratch, live from layer `live[0]` to layer `live[1]`
    (positions of the module's `tile.layer`s) inclusive."""

    name = "tile.tensor"
    sym_name = prop_def(SymbolNameConstraint())
    offset = prop_def(IntegerAttr[I64])
    size = prop_def(IntegerAttr[I64])
    live = prop_def(DenseArrayBase[I64])
    role = prop_def(StringAttr)
    traits = traits_def(SymbolOpInterface())
    assembly_format = "$sym_name attr-dict"

    ROLES: ClassVar[tuple[str, ...]] = ("activation", "weights", "scratch")

    def __init__(self, name: str, offset: int, size: int, live: tuple[int, int], role: str):
        super().__init__(properties={"sym_name": StringAttr(name), "offset": i64_attr(offset), "size": i64_attr(size),
                                     "live": i64_array(live), "role": StringAttr(role)})

    def verify_(self) -> None:
        self._nonneg("offset")
        self._positive("size")
        live = self._ints("live")
        if len(live) != 2 or not 0 <= live[0] <= live[1]:
            self._fail(f"@{self.sym_name.data}: live must be [first, last] layer positions, first <= last")
        if self.role.data not in self.ROLES:
            self._fail(f"@{self.sym_name.data}: role '{self.role.data}' is not one of {', '.join(self.ROLES)}")


@irdl_op_definition
class DramPlanOp(TileOperation):
    """The model's DRAM plan (allocate-dram): every buffer the device layers use, by liveness.
    Two tensors live at the same layer never overlap; a layer's `tile.dram_region` naming a
    tensor sits at its offset, fits it, and is used while it is live; two layers' 'output' regions
    of one tensor (a device concat's) write disjoint channel ranges (`channels`)."""

    name = "tile.dram_plan"
    body = region_def("single_block")
    traits = traits_def(NoTerminator())
    assembly_format = "attr-dict-with-keyword $body"

    def __init__(self, tensors: Sequence[TensorOp]):
        super().__init__(regions=[Region(Block(tensors))])

    def tensors(self) -> dict[str, TensorOp]:
        return {op.sym_name.data: op for op in self.body.block.ops if isinstance(op, TensorOp)}

    def verify_(self) -> None:
        for op in self.body.block.ops:
            if not isinstance(op, TensorOp):
                raise VerifyException(f"tile.dram_plan: '{op.name}' cannot appear in a DRAM plan")
        tensors = sorted(self.tensors().values(), key=lambda t: t._int("offset"))
        for i, a in enumerate(tensors):
            a_end, (a0, a1) = a._int("offset") + a._int("size"), a._ints("live")
            for b in tensors[i + 1:]:
                if b._int("offset") >= a_end:
                    break
                b0, b1 = b._ints("live")
                if a0 <= b1 and b0 <= a1:
                    raise VerifyException(
                        f"tile.dram_plan: tensors @{a.sym_name.data} and @{b.sym_name.data} overlap in DRAM "
                        f"and are both live at layer {max(a0, b0)}")
        self._check_layers()

    def _check_layers(self) -> None:
        module = self.parent_op()
        if module is None:
            return
        tensors = self.tensors()
        layers = [op for op in module.regions[0].block.ops if isinstance(op, LayerOp)]
        written: dict[str, list[tuple[int, int, str]]] = {}  # a tensor's channel ranges and their writers
        for position, layer in enumerate(layers):
            if WEIGHTS_BEFORE_FENCE.value(layer) and not (
                    position and (weights_free(layers[position - 1])
                                  or layers[position - 1].kind.data == LayerKind.CONV)):
                raise VerifyException(f"tile.layer @{layer.sym_name.data}: weights_before_fence needs a fenced max "
                                      "pool or a conv before it in the stream (other vector ops may still read the "
                                      "weights buffer; after a conv tile-to-asm checks its last kernel slot)")
            for region in layer.body.block.ops:
                if not isinstance(region, DramRegionOp) or region.tensor is None:
                    continue
                where = f"tile.layer @{layer.sym_name.data}: tile.dram_region @{region.sym_name.data}"
                t = tensors.get(region.tensor.data)
                if t is None:
                    raise VerifyException(f"{where}: tensor @{region.tensor.data} is not in the tile.dram_plan")
                if region.offset.value.data != t._int("offset"):
                    raise VerifyException(f"{where}: offset {region.offset.value.data} is not its tensor "
                                          f"@{t.sym_name.data}'s {t._int('offset')} (edit the plan's tensor, "
                                          "or write the region's offset to match)")
                if region.size.value.data > t._int("size"):
                    raise VerifyException(f"{where}: {region.size.value.data} bytes do not fit its tensor "
                                          f"@{t.sym_name.data} of {t._int('size')}")
                first, last = t._ints("live")
                if not first <= position <= last:
                    raise VerifyException(f"{where}: its tensor @{t.sym_name.data} is live at layers "
                                          f"[{first}, {last}], not at this one ({position})")
                if region.label.data == "output":
                    c0, n = (CHANNELS.value(region) or (0, 1 << 40))[:2]
                    px = (PIXELS.value(region) or (0, 0, 1, 1))[:4]
                    for o0, o1, opx, other in written.get(t.sym_name.data, []):
                        if c0 < o1 and o0 < c0 + n and _pixels_meet(px, opx):
                            what = "" if px == opx == (0, 0, 1, 1) else f" at pixels {list(px)}"
                            raise VerifyException(f"{where}: writes channels [{c0}, {c0 + n}){what} of tensor "
                                                  f"@{t.sym_name.data}, which layer @{other} writes too ([{o0}, {o1})"
                                                  + (f" at pixels {list(opx)})" if what else ")"))
                    written.setdefault(t.sym_name.data, []).append((c0, c0 + n, px, layer.sym_name.data))


def _pixels_meet(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Two interleave phases' pixel lattices (oy + sy·i, ox + sx·j) share a pixel (ignoring the
    tensor's bounds: a conservative answer); whole pixels are (0, 0, 1, 1)."""
    return all((a[k] - b[k]) % math.gcd(a[k + 2], b[k + 2]) == 0 for k in (0, 1))


def weights_free(layer: LayerOp) -> bool:
    """No vector op of the stream is reading the weights buffer once `layer`'s code starts and until
    it ends: a max pool (the pool unit reads maps only) whose fence waited for every earlier op."""
    return layer.kind.data == LayerKind.MAXPOOL and FENCE.value(layer)
