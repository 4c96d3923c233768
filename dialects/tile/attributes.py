"""
The `tile` dialect's attributes: the enums a layer's decisions are written in (`#tile<mode COOP>`,
`#tile<loop_order Kloop>`, `#tile<buffering double>`, ...), and a layer's geometry as named
integers (`#tile.conv_shape<c = 64, h = 27, ...>`, `#tile.pool_shape`, `#tile.gather`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import DictionaryAttr, IntAttr
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import Attribute, ParametrizedAttribute, SpacedOpaqueSyntaxAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.str_enum import StrEnum

from snowir import writeback


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
    """What a layer computes on Snowflake: a conv (fully connected and average-pool layers are
    convs, a residual add is a conv's bypass) or a max pool."""

    CONV = "conv"
    MAXPOOL = "maxpool"


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
    OPTIONAL: ClassVar[tuple[str, ...]] = ()
    """Fields that are 0 unless written (and printed only when not 0)."""

    @classmethod
    def _open_field(cls, key: str) -> bool:
        """Whether `key`, not one of FIELDS, names an integer of the attribute's open part
        (ConvShapeAttr: a write-back unit's word)."""
        return False

    @classmethod
    def _open(cls, values: dict[str, int]) -> tuple[Attribute, ...]:
        """The parameters after FIELDS holding the open part's `values`."""
        return ()

    def _open_values(self) -> dict[str, int]:
        return {}

    @classmethod
    def get(cls, **values: int):
        extra = {k: values.pop(k) for k in list(values) if k not in cls.FIELDS}
        unknown = [k for k in extra if not cls._open_field(k)]
        if unknown:
            raise ValueError(f"{cls.name}: no field {', '.join(unknown)}")
        values = {**{f: 0 for f in cls.OPTIONAL}, **values}
        missing = [f for f in cls.FIELDS if f not in values]
        if missing:
            raise ValueError(f"{cls.name}: missing {', '.join(missing)}")
        return cls(*(IntAttr(int(values[f])) for f in cls.FIELDS), *cls._open(extra))

    def values(self) -> dict[str, int]:
        return {**{f: p.data for f, p in zip(self.FIELDS, self.parameters)}, **self._open_values()}

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        values: dict[str, int] = {}
        extra: dict[str, int] = {}

        def field() -> None:
            key = parser.parse_identifier()
            if key not in cls.FIELDS and not cls._open_field(key):
                parser.raise_error(f"{cls.name} has no field '{key}' (fields: {', '.join(cls.FIELDS)})")
            parser.parse_punctuation("=")
            (values if key in cls.FIELDS else extra)[key] = parser.parse_integer(allow_boolean=False)

        parser.parse_comma_separated_list(parser.Delimiter.ANGLE, field)
        values = {**{f: 0 for f in cls.OPTIONAL}, **values}
        missing = [f for f in cls.FIELDS if f not in values]
        if missing:
            parser.raise_error(f"{cls.name} needs {', '.join(missing)}")
        return (*(IntAttr(values[f]) for f in cls.FIELDS), *cls._open(extra))

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string("<" + ", ".join(f"{k} = {v}" for k, v in self.values().items()
                                             if v or k not in self.OPTIONAL) + ">")


@irdl_attr_definition
class ConvShapeAttr(_NamedInts):
    """A conv layer's geometry: C per group, input H x W, K kernels of kh x kw, strides, pads
    (top, left, bottom, right), the weights' fraction bits (`shift`), fused ReLU, groups, and
    for a channel slice read in place, the producer's channel count and the slice's start. Then
    the 32-bit word of each write-back unit the layer uses, named by the unit (snowir/writeback.py),
    printed after the other fields when not 0."""

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
    units: DictionaryAttr
    """Write-back unit name -> its word (IntAttr), in the registry's order; 0 words left out."""

    @classmethod
    def _open_field(cls, key: str) -> bool:
        return writeback.unit(key) is not None

    @classmethod
    def _open(cls, values: dict[str, int]) -> tuple[Attribute, ...]:
        order = [u.name for u in writeback.units()]
        return (DictionaryAttr({k: IntAttr(int(values[k])) for k in sorted(values, key=order.index) if values[k]}),)

    def _open_values(self) -> dict[str, int]:
        return self.unit_words()

    def unit_words(self) -> dict[str, int]:
        """The layer's write-back unit words by unit name (nonzero)."""
        return {k: v.data for k, v in self.units.data.items()}  # type: ignore[attr-defined]


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
    """A max pool's geometry: C channels of H x W, a kh x kw window, strides, top/left pads, output size,
    and for channels read in place from a wider tensor (a device concat's), its channel count and
    the first channel (printed when not 0)."""

    name = "tile.pool_shape"
    FIELDS = ("c", "h", "w", "kh", "kw", "sy", "sx", "pt", "pl", "oh", "ow", "cin_total", "c_base")
    OPTIONAL = ("cin_total", "c_base")
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
    cin_total: IntAttr
    c_base: IntAttr
