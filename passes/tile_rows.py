"""
tile-rows{rows=N}: re-tile every conv (plain, residual) and every max pool `tile.layer` into
maps tiles of at most N output rows.

A maps tile of more than N rows is cut into pieces of N (the last may be shorter); tiles of
N rows or fewer are kept, so the pass only ever splits. The new tiles are written with an
empty body: tile-to-asm derives their `in_rows`, `overlap`, loads and windows from `out_rows`
(snowir/tile_edit.py), and refuses in one line a tile the configuration cannot hold. Smaller
tiles take less of the maps buffer but re-load the rows their neighbours share (`overlap`),
and each costs its own loads: `snow-report` shows which way a layer goes.

INDP convs are left alone: their maps tiles are row groups, one strip of rows per CU, and
their size follows the CU count, not a strip height. A conv that computes a fused max pool
is left alone too (its row groups feed the pool's ring).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from snowir.dialects import tile
from snowir.tile_edit import maps_rows, set_maps_rows, split_rows


@dataclass(frozen=True)
class TileRowsPass(ModulePass):
    name = "tile-rows"

    rows: int
    """The most output rows a maps tile keeps (>= 1)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.rows < 1:
            raise PassFailedException(f"tile-rows: rows must be >= 1, not {self.rows}")
        for layer in op.ops:
            if isinstance(layer, tile.LayerOp) and self._retiled(layer):
                old = maps_rows(layer)
                new = split_rows(old, self.rows)
                if new != old:
                    set_maps_rows(layer, new)

    @staticmethod
    def _retiled(layer: tile.LayerOp) -> bool:
        """Max pools, and convs that run COOP without a fused pool."""
        if layer.kind.data == tile.LayerKind.MAXPOOL:
            return True
        return (layer.kind.data == tile.LayerKind.CONV and layer.mode is not None
                and layer.mode.data == tile.ComputeMode.COOP and layer.pool is None)
