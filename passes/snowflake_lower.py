"""
snowflake-lower{format=Q8.8 loop-order=auto}: the default lowering from an nn module to
snowflake_asm: nn-prepare (unless already quantised), nn-to-tile, tile-to-asm, icache-banking.
"""

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from snowir.dialects import nn
from snowir.passes.icache_banking import IcacheBankingPass
from snowir.passes.nn_prepare import NNPreparePass
from snowir.passes.nn_to_tile import NNToTilePass
from snowir.passes.tile_to_asm import TileToAsmPass


@dataclass(frozen=True)
class SnowflakeLowerPass(ModulePass):
    name = "snowflake-lower"
    format: str = "Q8.8"
    loop_order: str = "auto"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        quantised = any(isinstance(getattr(v.type, "element_type", None), nn.FixedType)
                        for f in op.walk() if f.name == "func.func" for v in f.body.block.args)
        if not quantised:
            NNPreparePass(self.format).apply(ctx, op)
        NNToTilePass(self.loop_order).apply(ctx, op)
        TileToAsmPass().apply(ctx, op)
        IcacheBankingPass().apply(ctx, op)
