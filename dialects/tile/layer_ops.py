"""
The ops of one layer, the paper's Figure 2 data structure (C17 §5.1, steps 2-5): `tile.layer`
with its DRAM regions, kernel tiles and maps tiles, and inside the tiles the loads (LD) and
windows (the MAC traces) they run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    I64,
    DenseArrayBase,
    DenseResourceAttr,
    IntegerAttr,
    StringAttr,
    SymbolNameConstraint,
    UnitAttr,
)
from xdsl.ir import Attribute, Block, Operation, Region
from xdsl.irdl import irdl_op_definition, opt_prop_def, prop_def, region_def, traits_def
from xdsl.traits import HasParent, NoTerminator, SymbolOpInterface

from snowir.dialects.tile.abstract_ops import (LayerScope, TileBodyOperation, TileOperation, body_ops, i64_array,
                                               i64_attr, to_derive)
from snowir.dialects.tile.attributes import (
    BufferKind,
    BufferKindAttr,
    ComputeMode,
    ComputeModeAttr,
    ConvShapeAttr,
    CuSplitAttr,
    GatherAttr,
    LayerKind,
    LayerKindAttr,
    LoopOrder,
    LoopOrderAttr,
    MapsBufferingAttr,
    PoolShapeAttr,
)
from snowir.dialects.tile.decisions import DRAM_REGION, KERNEL_TILE, LAYER, MAPS_TILE, declare_on, verify_decisions
from snowir.hw import ISA_CUS, ISA_LOAD_UNITS, MAX_MAPS_BUFFER_ELEMENTS, MAX_WEIGHTS_BUFFER_ELEMENTS


@irdl_op_definition
@declare_on(LAYER)
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
    # the schedule decisions a layer records: declared in decisions.py, added by `declare_on`
    body = region_def("single_block")
    traits = traits_def(NoTerminator(), SymbolOpInterface(), LayerScope())
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
        kind = self.kind.data
        if kind == LayerKind.CONV and self.mode is None:
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
        if self.shape is not None and isinstance(self.shape, ConvShapeAttr) and self.relu is not None \
                and not self.shape.relu.data:
            self._fail("relu: the ReLU is #tile.conv_shape's `relu` field (relu = 1); the layer's `relu` mirrors it")
        if self.shape is not None and isinstance(self.shape, ConvShapeAttr) and self.relu is None \
                and self.shape.relu.data:
            self._fail("relu: #tile.conv_shape has relu = 1, the layer has no `relu` (edit both: the shape's field decides)")
        if (why := verify_decisions(self)) is not None:
            self._fail(why)
        if self.shape is not None:
            want = PoolShapeAttr if kind == LayerKind.MAXPOOL else ConvShapeAttr
            if not isinstance(self.shape, want):
                self._fail(f"a {kind.value} layer's shape is a #{want.name}")


@irdl_op_definition
@declare_on(DRAM_REGION)
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
    """The weight image's layout: COOP (kernel after kernel) or INDP (16 kernels interleaved per
    vMAC), each with its bias block or, `biases` maps (decisions.py), the layer's bias block after
    them; `packed_kernels` kernels per kernel tile."""
    packed_kernels = opt_prop_def(IntegerAttr[I64])
    tensor = opt_prop_def(StringAttr)
    """The `tile.tensor` of the model's `tile.dram_plan` the region is (allocate-dram): the
    region then sits at the tensor's offset, shared with the layers that also read or write it."""
    # channels, pixels: declared in decisions.py (CHANNELS, PIXELS), a concat slice's / interleave phase's placement;
    # biases: declared there too (BIASES), where the weight image keeps the layer's biases
    traits = traits_def(HasParent(LayerOp), SymbolOpInterface())
    assembly_format = "$sym_name attr-dict"

    LABELS: ClassVar[tuple[str, ...]] = ("maps", "output", "weights", "bias", "bypass", "scratch", "conv_output")

    def __init__(self, name: str, offset: int, size: int, label: str, value: DenseResourceAttr | None = None):
        props: dict[str, Attribute] = {"sym_name": StringAttr(name), "offset": i64_attr(offset),
                                       "size": i64_attr(size), "label": StringAttr(label)}
        if value is not None:
            props["value"] = value
        super().__init__(properties=props)

    def verify_(self) -> None:
        self._nonneg("offset")
        self._positive("size")
        if (self.packing is None) != (self.packed_kernels is None):
            self._fail("packing and packed_kernels go together")
        if self.packing is not None and self.label.data != "weights":
            self._fail("packing describes a 'weights' region")
        if self.label.data not in self.LABELS:
            self._fail(f"label '{self.label.data}' is not one of {', '.join(self.LABELS)}")
        if (why := verify_decisions(self)) is not None:
            self._fail(why)


@irdl_op_definition
@declare_on(KERNEL_TILE)
class KernelTileOp(TileBodyOperation):
    """Kernels [first, first+count) at single-kernel granularity, processed `repeat` times."""

    name = "tile.kernel_tile"
    first = prop_def(IntegerAttr[I64])
    count = prop_def(IntegerAttr[I64])
    repeat = prop_def(IntegerAttr[I64])
    # how the tiles are held in the weights buffer: declared in decisions.py
    body = region_def()
    """Its loads; written empty (`{}`, on one line), they are derived from the attributes (at
    tile-to-asm); braces on separate lines with no op between are a body with no loads."""
    traits = traits_def(NoTerminator(), HasParent(LayerOp))

    def __init__(self, first: int, count: int, repeat: int = 1, ops: Sequence[Operation] = ()):
        super().__init__(properties={"first": i64_attr(first), "count": i64_attr(count),
                                     "repeat": i64_attr(repeat)}, regions=[Region(Block(ops))])

    def verify_(self) -> None:
        self._nonneg("first")
        self._positive("count", "repeat")
        if (why := verify_decisions(self)) is not None:
            self._fail(why)
        if sum(x is not None for x in (self.slot, self.stagger, self.resident)) > 1:
            self._fail("slot, stagger and resident are three ways to hold kernel tiles: at most one")
        for op in body_ops(self):
            if not isinstance(op, LoadOp):
                self._fail("a kernel tile holds only loads (windows belong to maps tiles)")


@irdl_op_definition
@declare_on(MAPS_TILE)
class MapsTileOp(TileBodyOperation):
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
    # INDP rows per CU, a pool's ring: declared in decisions.py
    out_cols = opt_prop_def(DenseArrayBase[I64])
    """Column tiling: the tile computes output columns [out_cols) only (absent: all). Tiles of
    one band of columns follow each other, covering the rows; the bands cover the columns in order."""
    in_cols = opt_prop_def(DenseArrayBase[I64])
    """The input columns out_cols read, padding excluded (derived with out_cols; the kernel's
    halo is shared with the neighbouring bands and re-loaded)."""
    body = region_def()
    """Its loads and windows; written empty (`{}`, on one line), they are derived from the
    attributes; braces on separate lines with no op between are a body with none."""
    traits = traits_def(NoTerminator(), HasParent(LayerOp))

    def __init__(self, out_rows: tuple[int, int], in_rows: tuple[int, int], overlap: int,
                 cu: int = -1, ops: Sequence[Operation] = ()):
        super().__init__(properties={"out_rows": i64_array(out_rows), "in_rows": i64_array(in_rows),
                                     "overlap": i64_attr(overlap), "cu": i64_attr(cu)},
                         regions=[Region(Block(ops))])

    def verify_(self) -> None:
        if (why := verify_decisions(self)) is not None:
            self._fail(why)
        if self.in_cols is not None and self.out_cols is None:
            self._fail("in_cols without out_cols: in_cols are the input columns out_cols read")
        if self.out_cols is not None and self.in_cols is None and not to_derive(self):
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
            "buffer": BufferKindAttr(buffer), "length": i64_attr(length), "dram_addr": i64_attr(dram_addr),
            "buf_addr": i64_attr(buf_addr), "unit": i64_attr(unit), "select": i64_attr(select),
        }
        if load_id is not None:
            props["load_id"] = i64_attr(load_id)
        super().__init__(properties=props)

    def verify_(self) -> None:
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
            "trace_length": i64_attr(trace_length), "rows": i64_attr(rows), "repeat_x": i64_attr(repeat_x),
            "repeat_y": i64_attr(repeat_y), "offset_x": i64_attr(offset_x), "offset_y": i64_attr(offset_y),
            "start": i64_attr(start), "out_addr": i64_attr(out_addr),
        }
        if bias_vmov:
            props["bias_vmov"] = UnitAttr()
        if bypass_vmov:
            props["bypass_vmov"] = UnitAttr()
        super().__init__(properties=props)

    def verify_(self) -> None:
        self._positive("trace_length", "rows", "repeat_x", "repeat_y")
        self._nonneg("start", "out_addr")

