"""
The `tile` dialect: a layer's workload broken down for one Snowflake configuration.

This is the Snowball paper's Figure 2 data structure as IR (C17 §5.1, steps 2-5):

    tile.layer @conv2 conv {mode = #tile<mode COOP>, loop_order = #tile<loop_order Kloop>, ...} {
      tile.dram_region @conv2.in {offset = 0 : i64, size = 186624 : i64, label = "maps"}
      tile.kernel_tile {first = 0 : i64, count = 16 : i64, repeat = 12 : i64} { tile.load ... }
      tile.maps_tile {out_rows = array<i64: 0, 4>, in_rows = array<i64: 0, 8>, overlap = 4 : i64, cu = -1 : i64} {
        tile.load {buffer = #tile<buffer maps>, length = ..., dram_addr = ..., buf_addr = ..., unit = 0 : i64, select = 127 : i64}
        tile.window {trace_length = 320 : i64, repeat_x = 27 : i64, repeat_y = 4 : i64, ...}
      }
    }

Every decision (mode, loop order, tile bounds, load placement, load unit) is an
attribute a researcher can read, edit and feed back into the lowering.
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Sequence
from functools import lru_cache
from typing import ClassVar

from xdsl.dialects.builtin import (
    I64,
    i64,
    DenseArrayBase,
    DenseResourceAttr,
    IntAttr,
    IntegerAttr,
    StringAttr,
    SymbolNameConstraint,
    UnitAttr,
)
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import Attribute, Block, Dialect, Operation, ParametrizedAttribute, Region, SpacedOpaqueSyntaxAttribute
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_attr_definition,
    irdl_op_definition,
    opt_prop_def,
    prop_def,
    region_def,
    traits_def,
)
from xdsl.traits import HasParent, NoTerminator, SymbolOpInterface
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum

from snowir.hw import ISA_CUS, ISA_LOAD_UNITS, MAX_MAPS_BUFFER_ELEMENTS, MAX_WEIGHTS_BUFFER_ELEMENTS


class ComputeMode(StrEnum):
    COOP = "COOP"
    INDP = "INDP"


@irdl_attr_definition
class ComputeModeAttr(EnumAttribute[ComputeMode], SpacedOpaqueSyntaxAttribute):
    """COOP: a vMAC's 16 MACs share one kernel. INDP: 16 kernels, map values broadcast."""

    name = "tile.mode"


class LoopOrder(StrEnum):
    MLOOP = "Mloop"
    KLOOP = "Kloop"


@irdl_attr_definition
class LoopOrderAttr(EnumAttribute[LoopOrder], SpacedOpaqueSyntaxAttribute):
    """Mloop: maps re-sent for every kernel tile. Kloop: kernels re-sent for every maps tile."""

    name = "tile.loop_order"


class LayerKind(StrEnum):
    CONV = "conv"
    MAXPOOL = "maxpool"
    AVGPOOL = "avgpool"
    FC = "fc"
    ADD = "add"


@irdl_attr_definition
class LayerKindAttr(EnumAttribute[LayerKind], SpacedOpaqueSyntaxAttribute):
    name = "tile.kind"


class BufferKind(StrEnum):
    MAPS = "maps"
    WEIGHTS = "weights"


@irdl_attr_definition
class BufferKindAttr(EnumAttribute[BufferKind], SpacedOpaqueSyntaxAttribute):
    name = "tile.buffer"


class MapsBuffering(StrEnum):
    DOUBLE = "double"
    WHOLE = "whole"
    SINGLE = "single"


@irdl_attr_definition
class MapsBufferingAttr(EnumAttribute[MapsBuffering], SpacedOpaqueSyntaxAttribute):
    """Where a layer's maps tiles sit in the maps buffer. double: tile i in bank i mod 2 (a
    residual conv: half i mod 2 of the buffer), the next loading while the current computes;
    whole: each tile may fill the whole buffer, loaded once the previous tile's MACs are done;
    single: a residual conv's tiles in turn at the bottom of the buffer, bypass rows above."""

    name = "tile.buffering"


class CuSplit(StrEnum):
    ROWS = "rows"
    COLS = "cols"


@irdl_attr_definition
class CuSplitAttr(EnumAttribute[CuSplit], SpacedOpaqueSyntaxAttribute):
    """How an INDP layer's CUs share a row group: rows (CU c its own output rows, `cu_rows`) or
    cols (CU c its quarter of every row's output columns, so a residual input lies as the
    write-back stores it; snowir/plan/indp_columns.py)."""

    name = "tile.cu_split"


class _NamedInts(ParametrizedAttribute):
    """A layer geometry as named integers: `#tile.conv_shape<c = 64, h = 27, ...>`."""

    FIELDS: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def get(cls, **values: int):
        missing = [f for f in cls.FIELDS if f not in values]
        if missing:
            raise ValueError(f"{cls.name}: missing {', '.join(missing)}")
        return cls(*(IntAttr(int(values[f])) for f in cls.FIELDS))

    def values(self) -> dict[str, int]:
        return {f: p.data for f, p in zip(self.FIELDS, self.parameters)}

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        values: dict[str, int] = {}

        def field() -> None:
            key = parser.parse_identifier()
            if key not in cls.FIELDS:
                parser.raise_error(f"{cls.name} has no field '{key}' (fields: {', '.join(cls.FIELDS)})")
            parser.parse_punctuation("=")
            values[key] = parser.parse_integer(allow_boolean=False)

        parser.parse_comma_separated_list(parser.Delimiter.ANGLE, field)
        missing = [f for f in cls.FIELDS if f not in values]
        if missing:
            parser.raise_error(f"{cls.name} needs {', '.join(missing)}")
        return tuple(IntAttr(values[f]) for f in cls.FIELDS)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string("<" + ", ".join(f"{k} = {v}" for k, v in self.values().items()) + ">")


@irdl_attr_definition
class ConvShapeAttr(_NamedInts):
    """A conv layer's geometry: C per group, input H x W, K kernels of kh x kw, strides, pads
    (top, left, bottom, right), the weights' fraction bits (`shift`), fused ReLU, groups, and
    for a channel slice read in place, the producer's channel count and the slice's start."""

    name = "tile.conv_shape"
    FIELDS = ("c", "h", "w", "k", "kh", "kw", "sy", "sx", "pt", "pl", "pb", "pr", "shift", "relu", "groups",
              "cin_total", "c_base")
    c: IntAttr
    h: IntAttr
    w: IntAttr
    k: IntAttr
    kh: IntAttr
    kw: IntAttr
    sy: IntAttr
    sx: IntAttr
    pt: IntAttr
    pl: IntAttr
    pb: IntAttr
    pr: IntAttr
    shift: IntAttr
    relu: IntAttr
    groups: IntAttr
    cin_total: IntAttr
    c_base: IntAttr


@irdl_attr_definition
class GatherAttr(_NamedInts):
    """Maps gathered pixel by pixel (a strided 1x1 conv's pixels, a channel slice's channels):
    compact input pixel (r, x) is DRAM pixel (r*sy, x*sx) of a `w`-wide, `cin`-channel tensor,
    channels from `c0`. Maps tiles, loads and windows are then over the compact input."""

    name = "tile.gather"
    FIELDS = ("sy", "sx", "w", "cin", "c0")
    sy: IntAttr
    sx: IntAttr
    w: IntAttr
    cin: IntAttr
    c0: IntAttr


@irdl_attr_definition
class PoolShapeAttr(_NamedInts):
    """A max pool's geometry: C channels of H x W, a kh x kw window, strides, top/left pads, output size."""

    name = "tile.pool_shape"
    FIELDS = ("c", "h", "w", "kh", "kw", "sy", "sx", "pt", "pl", "oh", "ow")
    c: IntAttr
    h: IntAttr
    w: IntAttr
    kh: IntAttr
    kw: IntAttr
    sy: IntAttr
    sx: IntAttr
    pt: IntAttr
    pl: IntAttr
    oh: IntAttr
    ow: IntAttr


@lru_cache(maxsize=1 << 16)
def _i64(v: int) -> IntegerAttr:
    # attributes are immutable: a network's tiles repeat a few hundred values 10^4 times
    return IntegerAttr(v, i64)


def _arr(values: Sequence[int]) -> DenseArrayBase:
    return DenseArrayBase.from_list(i64, list(values))


class TileOperation(IRDLOperation, ABC):
    irdl_options = (ParsePropInAttrDict(),)

    def _int(self, name: str) -> int:
        attr = self.properties[name]
        assert isinstance(attr, IntegerAttr)
        return attr.value.data

    def _ints(self, name: str) -> tuple[int, ...]:
        attr = self.properties[name]
        assert isinstance(attr, DenseArrayBase)
        return tuple(int(v) for v in attr.get_values())

    def _fail(self, message: str) -> None:
        layer = self if isinstance(self, LayerOp) else self.parent_op()
        while layer is not None and not isinstance(layer, LayerOp):
            layer = layer.parent_op()
        where = f"tile.layer @{layer.sym_name.data}: " if isinstance(layer, LayerOp) else ""
        what = "" if layer is self else f"{self.name}: "
        raise VerifyException(f"{where}{what}{message}")

    def _no_stray_attributes(self) -> None:
        """An attribute the op does not define would be silently ignored by every pass: refuse it."""
        for key in self.attributes:
            known = ", ".join(sorted(self.properties.keys() | {n for n in type(self).get_irdl_definition().properties}))
            self._fail(f"unknown attribute '{key}' (this op's attributes: {known})")

    def _nonneg(self, *names: str) -> None:
        for n in names:
            if self._int(n) < 0:
                self._fail(f"{n} must be >= 0, got {self._int(n)}")

    def _positive(self, *names: str) -> None:
        for n in names:
            if self._int(n) < 1:
                self._fail(f"{n} must be >= 1, got {self._int(n)}")


def body_ops(op: Operation) -> list[Operation]:
    """The ops of a tile's body; none when it was written empty (`{}`: to be derived)."""
    region = op.regions[0]
    if len(region.blocks) > 1:
        raise VerifyException(f"{op.name}: its body is one block")
    return list(region.blocks[0].ops) if region.blocks else []


@irdl_op_definition
class LayerOp(TileOperation):
    """One layer object of the paper: its DRAM regions, kernel tiles and maps tiles."""

    name = "tile.layer"
    sym_name = prop_def(SymbolNameConstraint())
    kind = prop_def(LayerKindAttr)
    mode = opt_prop_def(ComputeModeAttr)
    loop_order = opt_prop_def(LoopOrderAttr)
    mloop_bytes = opt_prop_def(IntegerAttr[I64])
    kloop_bytes = opt_prop_def(IntegerAttr[I64])
    relu = opt_prop_def(UnitAttr)
    shape = opt_prop_def(ConvShapeAttr | PoolShapeAttr)
    pool = opt_prop_def(PoolShapeAttr)
    """A conv layer's fused max pool: the pool reading its output runs in its program
    (snowir/plan/fused_pool.py); its `output` region is then the pool's, `conv_output` the conv's."""
    pool_slots = opt_prop_def(DenseArrayBase[I64])
    """A fused max pool's row ring: the maps-buffer words of its row slots (conv output row r
    goes to slot r mod N)."""
    maps_buffering = opt_prop_def(MapsBufferingAttr)
    gather = opt_prop_def(GatherAttr)
    bypass_slices = opt_prop_def(DenseArrayBase[I64])
    """A residual conv's bypass in per-kernel-tile slices (snowir/codegen/bypass_slices.py): the
    maps-buffer words of the two slices the kernel tiles take in turn."""
    cu_split = opt_prop_def(CuSplitAttr)
    """INDP: how the CUs share a row group (absent: rows)."""
    slice_tiles = opt_prop_def(IntegerAttr[I64])
    """With `bypass_slices` on a 1x1 conv: the kernel tiles a slice holds (absent: 1), each
    pixel's channels of all of them loaded by one LD."""
    fence = opt_prop_def(UnitAttr)
    """In a whole-model program: the layer's first loads wait until the previous layer's vector
    ops are done (a vector queue's depth of VMOVs), because they may overwrite buffer words those
    ops still read. Without it they issue while the previous layer drains (allocate-dram decides)."""
    weights_before_fence = opt_prop_def(UnitAttr)
    """With `fence`: the layer's cold-start kernel loads issue before the fence and only its maps
    loads wait, because the previous layer's vector ops read no weights-buffer word (a max pool)."""
    body = region_def("single_block")
    traits = traits_def(NoTerminator(), SymbolOpInterface())
    assembly_format = "$sym_name $kind attr-dict-with-keyword $body"

    def __init__(self, name: str, kind: LayerKind, ops: Sequence[Operation],
                 mode: ComputeMode | None = None, loop_order: LoopOrder | None = None,
                 extra: dict[str, Attribute] | None = None):
        props: dict[str, Attribute] = {"sym_name": StringAttr(name), "kind": LayerKindAttr(kind)}
        if mode is not None:
            props["mode"] = ComputeModeAttr(mode)
        if loop_order is not None:
            props["loop_order"] = LoopOrderAttr(loop_order)
        props.update(extra or {})
        super().__init__(properties=props, regions=[Region(Block(ops))])

    def verify_(self) -> None:
        self._no_stray_attributes()
        kind = self.kind.data
        if kind in (LayerKind.CONV, LayerKind.FC, LayerKind.AVGPOOL) and self.mode is None:
            self._fail(f"a {kind.value} layer needs a compute mode (COOP or INDP)")
        if kind == LayerKind.MAXPOOL and self.mode is not None:
            self._fail("maxpool runs on the pool unit; it has no COOP/INDP mode")
        for op in self.body.block.ops:
            if not isinstance(op, DramRegionOp | KernelTileOp | MapsTileOp):
                self._fail(f"'{op.name}' cannot appear directly in a layer")
        if self.relu is not None and kind == LayerKind.MAXPOOL:
            self._fail("relu is fused into MAC write-back; maxpool has none")
        if self.pool is not None:
            labels = {op.label.data for op in self.body.block.ops if isinstance(op, DramRegionOp)}
            if kind != LayerKind.CONV:
                self._fail("only a conv layer fuses the max pool that reads it")
            if "conv_output" not in labels:
                self._fail("a fused max pool needs a 'conv_output' dram_region for the conv's own output")
            if self.pool_slots is None:
                self._fail("a fused max pool needs `pool_slots` (its row ring in the maps buffer)")
        elif self.pool_slots is not None:
            self._fail("pool_slots belong to a fused max pool (`pool`)")
        if self.weights_before_fence is not None and (self.fence is None or kind != LayerKind.CONV):
            self._fail("weights_before_fence splits a conv layer's `fence` (set both)")
        if self.shape is not None and isinstance(self.shape, ConvShapeAttr) and self.relu is not None \
                and not self.shape.relu.data:
            self._fail("relu: the ReLU is #tile.conv_shape's `relu` field (relu = 1); the layer's `relu` mirrors it")
        if self.shape is not None and isinstance(self.shape, ConvShapeAttr) and self.relu is None \
                and self.shape.relu.data:
            self._fail("relu: #tile.conv_shape has relu = 1, the layer has no `relu` (edit both: the shape's field decides)")
        if self.bypass_slices is not None:
            labels = {op.label.data for op in self.body.block.ops if isinstance(op, DramRegionOp)}
            if "bypass" not in labels or len(self.bypass_slices.get_values()) != 2:
                self._fail("bypass_slices: two slice bases, on a layer with a 'bypass' dram_region")
        if self.cu_split is not None and (kind != LayerKind.CONV or self.mode is None
                                          or self.mode.data != ComputeMode.INDP):
            self._fail("cu_split: how an INDP conv's CUs share a row group (rows or cols)")
        if self.slice_tiles is not None and (self.bypass_slices is None or self.slice_tiles.value.data < 2):
            self._fail("slice_tiles: 2 or more kernel tiles a bypass slice holds, with `bypass_slices`")
        if self.gather is not None and kind != LayerKind.CONV:
            self._fail("gather: only a conv layer gathers its maps")
        if self.shape is not None:
            want = PoolShapeAttr if kind == LayerKind.MAXPOOL else ConvShapeAttr
            if not isinstance(self.shape, want):
                self._fail(f"a {kind.value} layer's shape is a #{want.name}")


@irdl_op_definition
class DramRegionOp(TileOperation):
    """A main-memory region the layer reads or writes, placed by the dependency labels."""

    name = "tile.dram_region"
    sym_name = prop_def(SymbolNameConstraint())
    offset = prop_def(IntegerAttr[I64])
    size = prop_def(IntegerAttr[I64])
    label = prop_def(StringAttr)
    value = opt_prop_def(DenseResourceAttr)
    """The region's initial contents (the weight image), when the layer carries them."""
    packing = opt_prop_def(ComputeModeAttr)
    """The weight image's layout: COOP (kernel after kernel, each with its bias block) or INDP
    (16 kernels interleaved per vMAC); `packed_kernels` kernels per kernel tile."""
    packed_kernels = opt_prop_def(IntegerAttr[I64])
    tensor = opt_prop_def(StringAttr)
    """The `tile.tensor` of the model's `tile.dram_plan` the region is (allocate-dram): the
    region then sits at the tensor's offset, shared with the layers that also read or write it."""
    traits = traits_def(HasParent(LayerOp), SymbolOpInterface())
    assembly_format = "$sym_name attr-dict"

    LABELS: ClassVar[tuple[str, ...]] = ("maps", "output", "weights", "bias", "bypass", "scratch", "conv_output")

    def __init__(self, name: str, offset: int, size: int, label: str, value: DenseResourceAttr | None = None):
        props: dict[str, Attribute] = {"sym_name": StringAttr(name), "offset": _i64(offset),
                                       "size": _i64(size), "label": StringAttr(label)}
        if value is not None:
            props["value"] = value
        super().__init__(properties=props)

    def verify_(self) -> None:
        self._no_stray_attributes()
        self._nonneg("offset")
        self._positive("size")
        if (self.packing is None) != (self.packed_kernels is None):
            self._fail("packing and packed_kernels go together")
        if self.packing is not None and self.label.data != "weights":
            self._fail("packing describes a 'weights' region")
        if self.label.data not in self.LABELS:
            self._fail(f"label '{self.label.data}' is not one of {', '.join(self.LABELS)}")


@irdl_op_definition
class KernelTileOp(TileOperation):
    """Kernels [first, first+count) at single-kernel granularity, processed `repeat` times."""

    name = "tile.kernel_tile"
    first = prop_def(IntegerAttr[I64])
    count = prop_def(IntegerAttr[I64])
    repeat = prop_def(IntegerAttr[I64])
    slot = opt_prop_def(IntegerAttr[I64])
    """Double-buffered kernel tiles: the weights-buffer word of the second slot (tiles
    alternate between words 0 and `slot`, the next loading while the current computes)."""
    stagger = opt_prop_def(IntegerAttr[I64])
    """A kernel too large for a slot: tiles alternate between bases 0 and F = `stagger`, the F
    words of the next tile that miss the current one loading while it computes."""
    resident = opt_prop_def(UnitAttr)
    """Every kernel tile held at once (tile t at t x kernel words), loaded once for the layer."""
    body = region_def()
    """Its loads; written empty (`{}`), they are derived from the attributes (at tile-to-asm)."""
    traits = traits_def(NoTerminator(), HasParent(LayerOp))
    assembly_format = "attr-dict-with-keyword $body"

    def __init__(self, first: int, count: int, repeat: int = 1, ops: Sequence[Operation] = ()):
        super().__init__(properties={"first": _i64(first), "count": _i64(count),
                                     "repeat": _i64(repeat)}, regions=[Region(Block(ops))])

    def verify_(self) -> None:
        self._no_stray_attributes()
        self._nonneg("first")
        self._positive("count", "repeat")
        if self.slot is not None:
            self._positive("slot")
        if self.stagger is not None:
            self._positive("stagger")
        if sum(x is not None for x in (self.slot, self.stagger, self.resident)) > 1:
            self._fail("slot, stagger and resident are three ways to hold kernel tiles: at most one")
        for op in body_ops(self):
            if not isinstance(op, LoadOp):
                self._fail("a kernel tile holds only loads (windows belong to maps tiles)")


@irdl_op_definition
class MapsTileOp(TileOperation):
    """
    An output-row strip [out_rows) computed from input rows [in_rows) (the overlap rows
    are re-loaded), on CU `cu` (-1: maps broadcast to every CU); column-tiled, a rectangle of
    output columns [out_cols) from input columns [in_cols) too.
    """

    name = "tile.maps_tile"
    out_rows = prop_def(DenseArrayBase[I64])
    in_rows = prop_def(DenseArrayBase[I64])
    overlap = prop_def(IntegerAttr[I64])
    cu = prop_def(IntegerAttr[I64])
    cu_rows = opt_prop_def(IntegerAttr[I64])
    """INDP: the tile is a row group, each CU `cu_rows` consecutive output rows of it."""
    ring = opt_prop_def(IntegerAttr[I64])
    """A max pool's tile run over a ring of `ring` input-row slots (each input row loaded
    once, into slot r mod N, when the row it replaces is no longer read) instead of loaded whole."""
    out_cols = opt_prop_def(DenseArrayBase[I64])
    """Column tiling: the tile computes output columns [out_cols) only (absent: all). Tiles of
    one band of columns follow each other, covering the rows; the bands cover the columns in order."""
    in_cols = opt_prop_def(DenseArrayBase[I64])
    """The input columns out_cols read, padding excluded (derived with out_cols; the kernel's
    halo is shared with the neighbouring bands and re-loaded)."""
    body = region_def()
    """Its loads and windows; written empty (`{}`), they are derived from the attributes."""
    traits = traits_def(NoTerminator(), HasParent(LayerOp))
    assembly_format = "attr-dict-with-keyword $body"

    def __init__(self, out_rows: tuple[int, int], in_rows: tuple[int, int], overlap: int,
                 cu: int = -1, ops: Sequence[Operation] = ()):
        super().__init__(properties={"out_rows": _arr(out_rows), "in_rows": _arr(in_rows),
                                     "overlap": _i64(overlap), "cu": _i64(cu)},
                         regions=[Region(Block(ops))])

    def verify_(self) -> None:
        self._no_stray_attributes()
        if self.cu_rows is not None:
            self._positive("cu_rows")
        if self.ring is not None:
            self._positive("ring")
        if self.in_cols is not None and self.out_cols is None:
            self._fail("in_cols without out_cols: in_cols are the input columns out_cols read")
        if self.out_cols is not None and self.in_cols is None and body_ops(self):
            self._fail("out_cols without in_cols: write the body empty `{}` to derive them")
        for name in ("out_rows", "in_rows", "out_cols", "in_cols"):
            if name not in self.properties:
                continue
            rows = self._ints(name)
            if len(rows) != 2 or not 0 <= rows[0] < rows[1]:
                self._fail(f"{name} must be [start, end) with 0 <= start < end")
        self._nonneg("overlap")
        if not -1 <= self._int("cu") < ISA_CUS:
            self._fail(f"cu must be -1 (broadcast) or a CU index < {ISA_CUS}")
        for op in body_ops(self):
            if not isinstance(op, LoadOp | WindowOp):
                self._fail(f"'{op.name}' cannot appear in a maps tile")


@irdl_op_definition
class LoadOp(TileOperation):
    """One LD: `length` elements from DRAM byte address to buffer address, on a load unit."""

    name = "tile.load"
    buffer = prop_def(BufferKindAttr)
    length = prop_def(IntegerAttr[I64])
    dram_addr = prop_def(IntegerAttr[I64])
    buf_addr = prop_def(IntegerAttr[I64])
    unit = prop_def(IntegerAttr[I64])
    select = prop_def(IntegerAttr[I64])
    load_id = opt_prop_def(IntegerAttr[I64])
    """The layer's number for this load (C17 §5: load IDs are tracked); the tile it feeds is
    the one it sits in."""
    traits = traits_def(HasParent(KernelTileOp, MapsTileOp))
    assembly_format = "attr-dict"

    def __init__(self, buffer: BufferKind, length: int, dram_addr: int, buf_addr: int,
                 unit: int, select: int, load_id: int | None = None):
        props: dict[str, Attribute] = {
            "buffer": BufferKindAttr(buffer), "length": _i64(length), "dram_addr": _i64(dram_addr),
            "buf_addr": _i64(buf_addr), "unit": _i64(unit), "select": _i64(select),
        }
        if load_id is not None:
            props["load_id"] = _i64(load_id)
        super().__init__(properties=props)

    def verify_(self) -> None:
        self._no_stray_attributes()
        self._positive("length")
        self._nonneg("dram_addr", "buf_addr", "unit", "select")
        if self.load_id is not None:
            self._nonneg("load_id")
        # what any valid configuration allows: the configuration in use is tile-to-asm's to check
        # (a tile module does not say which machine it is for)
        if self._int("unit") >= ISA_LOAD_UNITS:
            self._fail(f"unit {self._int('unit')} >= {ISA_LOAD_UNITS} load units (the encoding's)")
        if self.buffer.data == BufferKind.MAPS:
            limit = MAX_MAPS_BUFFER_ELEMENTS
        else:
            limit = MAX_WEIGHTS_BUFFER_ELEMENTS
        if self._int("buf_addr") + self._int("length") > limit:
            self._fail(f"[{self._int('buf_addr')}, +{self._int('length')}) overflows the "
                       f"{limit}-element {self.buffer.data.value} buffer")


@irdl_op_definition
class WindowOp(TileOperation):
    """
    A compute object: one trace of `trace_length` elements per kernel row (`rows`
    rows), repeated `repeat_x` x `repeat_y` times with buffer offsets offset_x/offset_y;
    `bias_vmov` loads the bias before each kernel iteration, `bypass_vmov` one bypass
    VMOV per write-back MAC (residual add).
    """

    name = "tile.window"
    trace_length = prop_def(IntegerAttr[I64])
    rows = prop_def(IntegerAttr[I64])
    repeat_x = prop_def(IntegerAttr[I64])
    repeat_y = prop_def(IntegerAttr[I64])
    offset_x = prop_def(IntegerAttr[I64])
    offset_y = prop_def(IntegerAttr[I64])
    start = prop_def(IntegerAttr[I64])
    out_addr = prop_def(IntegerAttr[I64])
    bias_vmov = opt_prop_def(UnitAttr)
    bypass_vmov = opt_prop_def(UnitAttr)
    traits = traits_def(HasParent(MapsTileOp))
    assembly_format = "attr-dict"

    def __init__(self, trace_length: int, rows: int, repeat_x: int, repeat_y: int,
                 offset_x: int, offset_y: int, start: int, out_addr: int,
                 bias_vmov: bool = True, bypass_vmov: bool = False):
        props: dict[str, Attribute] = {
            "trace_length": _i64(trace_length), "rows": _i64(rows), "repeat_x": _i64(repeat_x),
            "repeat_y": _i64(repeat_y), "offset_x": _i64(offset_x), "offset_y": _i64(offset_y),
            "start": _i64(start), "out_addr": _i64(out_addr),
        }
        if bias_vmov:
            props["bias_vmov"] = UnitAttr()
        if bypass_vmov:
            props["bypass_vmov"] = UnitAttr()
        super().__init__(properties=props)

    def verify_(self) -> None:
        self._no_stray_attributes()
        self._positive("trace_length", "rows", "repeat_x", "repeat_y")
        self._nonneg("start", "out_addr")


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
        super().__init__(properties={"sym_name": StringAttr(name), "offset": _i64(offset), "size": _i64(size),
                                     "live": _arr(live), "role": StringAttr(role)})

    def verify_(self) -> None:
        self._no_stray_attributes()
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
    tensor sits at its offset, fits it, and is used while it is live."""

    name = "tile.dram_plan"
    body = region_def("single_block")
    traits = traits_def(NoTerminator())
    assembly_format = "attr-dict-with-keyword $body"

    def __init__(self, tensors: Sequence[TensorOp]):
        super().__init__(regions=[Region(Block(tensors))])

    def tensors(self) -> dict[str, TensorOp]:
        return {op.sym_name.data: op for op in self.body.block.ops if isinstance(op, TensorOp)}

    def verify_(self) -> None:
        self._no_stray_attributes()
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
        for position, layer in enumerate(layers):
            if layer.weights_before_fence is not None and not (
                    position and weights_free(layers[position - 1])):
                raise VerifyException(f"tile.layer @{layer.sym_name.data}: weights_before_fence needs a fenced max "
                                      "pool before it in the stream (other vector ops may still read the weights "
                                      "buffer)")
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


def weights_free(layer: LayerOp) -> bool:
    """No vector op of the stream is reading the weights buffer once `layer`'s code starts and until
    it ends: a max pool (the pool unit reads maps only) whose fence waited for every earlier op."""
    return layer.kind.data == LayerKind.MAXPOOL and layer.fence is not None


FIELD_DOCS: dict[str, str] = {
    # what each attribute means for the code tile-to-asm generates (docs/dialects.md is generated
    # from this table; tests/test_dialects.py checks every property of every tile op is in it)
    "tile.layer.sym_name": "The layer's name; the nn ops it computes name it (`tile = \"...\"`).",
    "tile.layer.kind": "conv or maxpool are lowered (FC layers are convs).",
    "tile.layer.mode": "COOP: a vMAC's 16 MACs share one kernel, maps broadcast; INDP: 16 kernels per vMAC, each CU "
                       "its own output rows. Followed; the weights are repacked when tiles are derived.",
    "tile.layer.loop_order": "Kloop: every kernel tile over a maps tile; Mloop: every maps tile over a kernel tile "
                             "(ungrouped and grouped COOP layers; INDP, residual and FC layers run Kloop).",
    "tile.layer.mloop_bytes": "Estimated DRAM traffic of Mloop (a report figure, C17 Figure 4; no effect on code).",
    "tile.layer.kloop_bytes": "Estimated DRAM traffic of Kloop (a report figure; no effect on code).",
    "tile.layer.relu": "Mirrors #tile.conv_shape's relu field (the write-back applies ReLU); must agree with it.",
    "tile.layer.shape": "The layer's geometry (#tile.conv_shape / #tile.pool_shape): every trace, window and address.",
    "tile.layer.pool": "A fused max pool: its MAX traces run in the conv's program, halfway through each row group.",
    "tile.layer.pool_slots": "Maps-buffer words of the fused pool's row ring (conv output row r in slot r mod N).",
    "tile.layer.maps_buffering": "double: maps tile i in bank i mod 2 (a residual conv: half i mod 2), the next loading "
                                 "while the current computes; whole: a tile may fill the buffer, its rows loaded "
                                 "as the previous tile's last kernel tile frees them; single: a residual conv's "
                                 "tiles in turn at the bottom.",
    "tile.layer.gather": "Maps loaded pixel by pixel (#tile.gather<sy, sx, w, cin, c0>): a strided 1x1's pixels or a "
                         "channel slice's channels; tiles, loads and windows are over the compact input.",
    "tile.layer.bypass_slices": "A residual conv's bypass in two per-kernel-tile slices at these maps-buffer words, "
                                "the next tile's slice loading pixel by pixel beside the current one.",
    "tile.layer.cu_split": "INDP: rows (absent; CU c its own output rows, cu_rows) or cols (CU c output columns "
                           "[c OW/4, (c+1) OW/4) of every row of a tile, vmov stride OW/4 x K words: a residual 1x1 "
                           "conv's bypass read where the write-back stores it). Followed.",
    "tile.layer.slice_tiles": "A residual 1x1 conv's kernel tiles per bypass slice (absent: 1): each pixel's channels "
                              "of the next group of tiles load with one LD, during the group's first tile.",
    "tile.dram_region.sym_name": "The region's name.",
    "tile.dram_region.offset": "Byte address in the layer's image (segments @x @w @y @r @slack @t).",
    "tile.dram_region.size": "Bytes; checked against what the layer moves there, and against overlaps.",
    "tile.dram_region.label": "maps, weights, output, bypass, scratch or conv_output (a fused pool's conv output).",
    "tile.dram_region.value": "The region's initial contents: the packed weight image.",
    "tile.dram_region.packing": "The weight image's layout (COOP: kernel after kernel with a 16-word bias block; "
                                "INDP: 16 kernels interleaved per vMAC); must match the layer's mode.",
    "tile.dram_region.packed_kernels": "Kernels per kernel tile in the weight image; must match the kernel tile's count.",
    "tile.kernel_tile.first": "0: the kernel tile op stands for every tile (count x repeat kernels).",
    "tile.kernel_tile.count": "Kernels a tile: one per vMAC in COOP (at most the vMACs; fewer masks the rest), "
                              "16 per vMAC of a CU in INDP (derived). Followed.",
    "tile.kernel_tile.repeat": "Kernel tiles: ceil(K / count) (derived).",
    "tile.kernel_tile.slot": "Double-buffered tiles alternate between weights words 0 and `slot`, the next loading "
                             "while the current computes (a kernel larger than the buffer: its chunks do).",
    "tile.kernel_tile.stagger": "Tiles alternate between bases 0 and F = stagger; the F words of the next tile that "
                                "miss the current one load while it computes, the rest after a flush.",
    "tile.kernel_tile.resident": "Every tile held at once (tile t at t x kernel words), loaded once for the layer.",
    "tile.maps_tile.out_rows": "Output rows [y0, y1) the tile computes (tiles cover 0..OH in order). Followed.",
    "tile.maps_tile.in_rows": "Input rows the out_rows read, padding excluded (derived).",
    "tile.maps_tile.overlap": "Input rows shared with the previous tile, re-loaded (derived).",
    "tile.maps_tile.cu": "-1: maps broadcast to every CU (an INDP row group spreads rows by cu_rows).",
    "tile.maps_tile.cu_rows": "INDP: each CU computes cu_rows consecutive rows of the row group.",
    "tile.maps_tile.ring": "A max pool's tile over a ring of N input-row slots, each row loaded once, instead of a "
                           "strip loaded whole.",
    "tile.maps_tile.out_cols": "Column tiling: output columns [x0, x1) the tile computes (absent: all); a band's "
                               "tiles follow each other and cover the rows, bands cover 0..OW in order; each band "
                               "loads its rows W x C words apart and writes rows OW x K apart. The planner sets it "
                               "only when the kernel's input rows do not fit the maps buffer. Followed.",
    "tile.maps_tile.in_cols": "Input columns the out_cols read, padding excluded; neighbouring bands share kw - sx "
                              "(the halo, re-loaded) (derived).",
    "tile.load.buffer": "maps or weights.", "tile.load.length": "Elements.",
    "tile.load.dram_addr": "Byte address.", "tile.load.buf_addr": "Buffer element address.",
    "tile.load.unit": "Load unit: balance-loads' decision (0 before it runs).",
    "tile.load.select": "LD select: vMAC j, CU c, broadcast 16+v, or 127 = all.",
    "tile.load.load_id": "The layer's number for the load (a label).",
    "tile.window.trace_length": "Elements a MAC trace reads per kernel row.",
    "tile.window.rows": "Kernel rows a window runs (padding rows clipped).",
    "tile.window.repeat_x": "Windows along a row.", "tile.window.repeat_y": "Rows of windows.",
    "tile.window.offset_x": "Buffer step between windows of a row.", "tile.window.offset_y": "Buffer step between rows.",
    "tile.window.start": "First window's buffer element, from the tile's base.",
    "tile.window.out_addr": "Output byte address of the first window.",
    "tile.window.bias_vmov": "A bias VMOV before each kernel iteration.",
    "tile.window.bypass_vmov": "A bypass VMOV per write-back MAC (residual add).",
    "tile.layer.fence": "Whole-model programs: the layer's loads wait for the previous layer's vector ops (set where "
                        "its first loads could overwrite buffer words those still read); absent: they overlap.",
    "tile.layer.weights_before_fence": "With fence: the first kernel loads issue before it, the maps loads after (the "
                                       "previous layer reads no weights; allocate-dram decides, the verifier checks).",
    "tile.dram_region.tensor": "The tile.dram_plan tensor the region is (allocate-dram); its offset must be the tensor's.",
    "tile.tensor.sym_name": "The buffer's name (segment name in the lowered program).",
    "tile.tensor.offset": "Byte address in the model's DRAM.", "tile.tensor.size": "Bytes.",
    "tile.tensor.live": "[first, last] positions of the module's tile.layers that use it; no live neighbour overlaps.",
    "tile.tensor.role": "activation (written by a layer or the host, read by later ones), weights, or scratch.",
}
"""Loads and windows are derived from the attributes: written out, they must be the ones the
attributes imply (an edit of one alone is refused); written empty `{}`, they are derived."""


Tile = Dialect(
    "tile",
    [LayerOp, DramRegionOp, KernelTileOp, MapsTileOp, LoadOp, WindowOp, DramPlanOp, TensorOp],
    [ComputeModeAttr, LoopOrderAttr, LayerKindAttr, BufferKindAttr, MapsBufferingAttr, CuSplitAttr, ConvShapeAttr,
     GatherAttr, PoolShapeAttr],
)
