"""
Edits of a `tile.layer` for passes that retile: the documented way to change a layer's maps
tiles or kernel tile without calling the planner or building loads and windows by hand.

Each helper rewrites the attributes and leaves the affected tiles with an empty body; tile-to-asm
(or `rederive`) derives their loads and windows, their `in_rows` and `overlap`, an INDP layer's
row groups, the kernel tile's `repeat`, and repacks the weights when the kernel count changes,
then checks the layer for the configuration (snowir/tile/check.py). A layer the edit makes
impossible (rows that do not fit a bank, say) is refused there in one line.

    from snowir.tile.edit import maps_rows, set_maps_rows, split_rows
    for layer in module.ops:
        if isinstance(layer, tile.LayerOp):
            set_maps_rows(layer, split_rows(maps_rows(layer), 4))

A column split (`set_maps_tiles(layer, split_columns(layer, [(0, 40), (40, 80)]))`) is honoured
on a COOP conv without a residual input, gather or fused pool, even one whose rows fit.

The feasibility call: `edit_refusal(layer, edit, hw)` tries any edit on a copy and returns the
one-line refusal tile-to-asm would give (None: followed); a pass asks it instead of copying
tile-to-asm's derive + check calls. Each decision's preconditions are written beside its
declaration (snowir/dialects/tile/decisions.py: `rule`, `needs`, `refuse`), and each root cause
is refused by one message (a kernel over the weights buffer is that, whatever slot it names).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects.builtin import DenseArrayBase, IntegerAttr, i64
from xdsl.rewriter import InsertPoint, Rewriter

from xdsl.utils.exceptions import VerifyException

from snowir.dialects import tile
from snowir.dialects.tile.decisions import RING
from snowir.errors import SnowError
from snowir.hw import SnowflakeConfig
from snowir.tile.check import check_conv, check_pool
from snowir.tile.derive import derive_layer
from snowir.tile.read import conv_plan_of, input_rows_of, pool_tiles_of


def maps_rows(layer: tile.LayerOp) -> list[tuple[int, int]]:
    """The output rows [y0, y1) of the layer's maps tiles, in order."""
    return [tuple(mt._ints("out_rows")) for mt in layer.body.block.ops  # type: ignore[misc]
            if isinstance(mt, tile.MapsTileOp)]


def split_rows(rows: Sequence[tuple[int, int]], most: int) -> list[tuple[int, int]]:
    """Each [y0, y1) cut into pieces of at most `most` rows."""
    return [(y, min(y + most, y1)) for y0, y1 in rows for y in range(y0, y1, most)]


def maps_cols(layer: tile.LayerOp) -> list[tuple[int, int] | None]:
    """The output columns [x0, x1) of the layer's maps tiles, in order (None: every column)."""
    return [tuple(mt._ints("out_cols")) if mt.out_cols is not None else None  # type: ignore[misc]
            for mt in layer.body.block.ops if isinstance(mt, tile.MapsTileOp)]


def split_columns(layer: tile.LayerOp, cols: Sequence[tuple[int, int]]) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Maps tiles for column bands `cols`: each band over the row ranges of the layer's first
    band (or of all its tiles), as `set_maps_tiles` takes them."""
    first = maps_cols(layer)[0]
    rows = [r for r, c in zip(maps_rows(layer), maps_cols(layer)) if c == first]
    return [(r, c) for c in cols for r in rows]


def set_maps_rows(layer: tile.LayerOp, rows: Sequence[tuple[int, int]]) -> None:
    """The layer's maps tiles become one empty-bodied tile per [y0, y1) of `rows` (which must
    cover the output rows in order). A tile keeps the `ring` of the first old tile it overlaps
    (a max pool's); an INDP layer's new tiles are split into row groups when derived."""
    set_maps_tiles(layer, [(r, None) for r in rows])


def set_maps_tiles(layer: tile.LayerOp, tiles: Sequence[tuple[tuple[int, int], tuple[int, int] | None]]) -> None:
    """`set_maps_rows` with columns: one empty-bodied tile per (rows, output columns or None);
    a column-tiled layer's tiles go band after band, each band's covering the rows."""
    old = [mt for mt in layer.body.block.ops if isinstance(mt, tile.MapsTileOp)]
    if not old:
        raise ValueError(f"layer @{layer.sym_name.data} has no maps tiles to retile")
    prev, band = 0, None
    for i, ((y0, y1), cols) in enumerate(tiles):
        source = next((mt for mt in old if mt._ints("out_rows")[0] < y1 and mt._ints("out_rows")[1] > y0), old[-1])
        r0, r1 = input_rows_of(layer, y0, y1)
        new = tile.MapsTileOp((y0, y1), (r0, r1), max(0, prev - r0) if i and cols == band else 0, -1)
        prev, band = r1, cols
        if cols is not None:  # in_cols derived with the body
            new.properties["out_cols"] = DenseArrayBase.from_list(i64, list(cols))
        _empty(new)  # written empty: derived at tile-to-asm
        RING.write(new, RING.value(source))  # a pool's ring keeps its slots
        Rewriter.insert_op(new, InsertPoint.before(old[0]))
    for mt in old:
        Rewriter.erase_op(mt)


def _empty(op: tile.KernelTileOp | tile.MapsTileOp) -> None:
    region = op.regions[0]
    for block in list(region.blocks):
        region.detach_block(block)


def set_kernel_count(layer: tile.LayerOp, count: int) -> None:
    """Kernels per kernel tile (COOP: at most one per vMAC); the kernel tile's body is emptied,
    so its `repeat` is derived and the weights are repacked."""
    (kt,) = [op for op in layer.body.block.ops if isinstance(op, tile.KernelTileOp)]
    kt.properties["count"] = IntegerAttr(count, i64)
    _empty(kt)


def empty_bodies(layer: tile.LayerOp) -> None:
    """Every kernel and maps tile of the layer written empty: all derived again (after a mode
    change, say)."""
    for op in layer.body.block.ops:
        if isinstance(op, tile.KernelTileOp | tile.MapsTileOp):
            _empty(op)


def rederive(layer: tile.LayerOp, hw: SnowflakeConfig | None = None) -> None:
    """Fill the layer's empty tiles now (tile-to-asm does it too), to print or inspect them."""
    derive_layer(layer, hw or SnowflakeConfig())


def check_layer(layer: tile.LayerOp, hw: SnowflakeConfig | None = None) -> None:
    """What tile-to-asm asks of a layer before generating its code: the op verifiers, then its
    empty tiles derived and every rule for `hw` checked (TileError / LoweringError /
    VerifyException, one line, when one is broken)."""
    hw = hw or SnowflakeConfig()
    layer.verify()
    derive_layer(layer, hw)
    if layer.kind.data == tile.LayerKind.CONV:
        check_conv(layer, conv_plan_of(layer), hw)
    else:
        check_pool(layer, *pool_tiles_of(layer), hw)


def edit_refusal(layer: tile.LayerOp, edit: Callable[[tile.LayerOp], None],
                 hw: SnowflakeConfig | None = None) -> str | None:
    """Whether the layer can take `edit`, asked without changing it: the edit is tried on a copy,
    which is then checked as tile-to-asm checks it (`check_layer`). None: tile-to-asm follows the
    edit; else its one-line refusal (the layer, the op, the rule). A pass asks this before it edits:

        if edit_refusal(layer, lambda l: set_maps_rows(l, split_rows(maps_rows(l), 2)), hw) is None:
            set_maps_rows(layer, split_rows(maps_rows(layer), 2))

    The edit may be any change of the copy's attributes (the declared decisions among them,
    snowir/dialects/tile/decisions.py) or tiles, with the helpers above or by hand."""
    trial = layer.clone()
    try:
        edit(trial)
        check_layer(trial, hw)
    except (SnowError, VerifyException) as e:
        return str(e)
    finally:
        trial.erase()
    return None
