"""
tile-rows{rows=N}: re-tile every COOP conv (plain, residual) and every max pool into maps
tiles of at most N output rows (a column-tiled conv's: each band's, keeping its columns).

A maps tile of more than N rows is cut into tiles of N (the last may be shorter); tiles of N
rows or fewer are kept, so the pass only splits. The new tiles are written with an empty body `{}`
(snowir/tile/edit.py): tile-to-asm derives their `in_rows`, `overlap`, loads and windows from
`out_rows`, checks the layer for the hardware configuration, and refuses in one line a tile
it cannot hold. Smaller tiles need less of the maps buffer, but each loads again the input
rows it shares with its neighbour and, in Kloop, the kernels: `snow-report` shows which way
a layer goes.

INDP and coop_rows convs keep their tiles (one line on stderr says so): those are row groups,
`cu_rows` rows on each CU, and a group cut below `cu_rows` x the CU count leaves CUs idle. A max pool
fused into a conv stays in that conv's program (a COOP conv's shorter strips leave its ring
`pool_slots` the room it had).

A rewrite pattern (`RowsPattern`): it changes the rows per strip only; every other decision of the
layer (kernel tile, mode, order, buffering, an edited `cu_rows` of an INDP layer) is left as it is.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern
from xdsl.utils.exceptions import PassFailedException

from snowir.dialects import tile
from snowir.tile.edit import maps_cols, maps_rows, set_maps_tiles, split_rows
from snowir.tile.read import tile_layers


@dataclass
class RowsPattern(RewritePattern):
    """Cuts one layer's maps tiles of more than `rows` output rows (the rows per strip only)."""

    rows: int

    @op_type_rewrite_pattern
    def match_and_rewrite(self, layer: tile.LayerOp, rewriter: PatternRewriter) -> None:
        rows = maps_rows(layer)
        if all(y1 - y0 <= self.rows for y0, y1 in rows):
            return  # nothing to split: the layer stays as it is
        kind = layer.kind.data
        if kind == tile.LayerKind.CONV and layer.mode is not None and layer.mode.data == tile.ComputeMode.INDP:
            print(f"tile-rows: layer @{layer.sym_name.data} keeps its maps tiles: an INDP layer's tiles are "
                  "row groups (cu_rows rows on each CU)", file=sys.stderr)
        elif kind == tile.LayerKind.CONV and layer.coop_rows is not None:
            print(f"tile-rows: layer @{layer.sym_name.data} keeps its maps tiles: a coop_rows layer's tiles are "
                  "row groups (cu_rows rows on each CU)", file=sys.stderr)
        elif kind in (tile.LayerKind.CONV, tile.LayerKind.MAXPOOL):  # a column band's tiles keep its columns
            set_maps_tiles(layer, [(r, c) for rr, c in zip(rows, maps_cols(layer)) for r in split_rows([rr], self.rows)])
            rewriter.notify_op_modified(layer)


@dataclass(frozen=True)
class TileRowsPass(ModulePass):
    name = "tile-rows"

    rows: int
    """The most output rows a maps tile keeps (at least 1)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.rows < 1:
            raise PassFailedException(f"tile-rows: rows must be >= 1, not {self.rows}")
        pattern = RowsPattern(self.rows)
        for layer in tile_layers(op, self.name):  # each layer once (a walker would enter the tiles it replaces)
            pattern.match_and_rewrite(layer, PatternRewriter(layer))
