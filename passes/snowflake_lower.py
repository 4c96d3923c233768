"""
snowflake-lower{format=Q8.8|auto calibration=x.npy mode=auto loop-order=auto hw=path.json}: the default lowering
from an nn module to one `snowflake_asm.image` per device layer, as the pass list `PIPELINE`:

    nn-prepare, nn-to-tile, tile-loop-order, tile-to-asm,
    balance-loads, schedule-asm, fill-delay-slots, icache-banking

Spelled out with `-p` (options given to the pass they belong to), the same list gives the
same module. Every pass skips what is already done (a quantised module is not re-quantised,
layers with a tile or image keep it, set loop orders stay, balanced or banked programs stay
as they are), so running it on a partly lowered module finishes the lowering.
"""

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from snowir.dialects import nn
from snowir.passes.balance_loads import BalanceLoadsPass
from snowir.passes.fill_delay_slots import FillDelaySlotsPass
from snowir.passes.icache_banking import IcacheBankingPass
from snowir.passes.nn_prepare import NNPreparePass
from snowir.passes.nn_to_tile import NNToTilePass
from snowir.passes.schedule_asm import ScheduleAsmPass
from snowir.passes.tile_loop_order import TileLoopOrderPass
from snowir.passes.tile_to_asm import TileToAsmPass
from snowir.pass_steps import run_steps

PIPELINE = ("nn-prepare", "nn-to-tile", "tile-loop-order", "tile-to-asm", "balance-loads", "schedule-asm",
            "fill-delay-slots", "icache-banking")


def quantised(op: ModuleOp) -> bool:
    return "nn.format" in op.attributes or any(isinstance(getattr(v.type, "element_type", None), nn.FixedType)
               for f in op.walk() if f.name == "func.func" for v in f.body.block.args)


@dataclass(frozen=True)
class SnowflakeLowerPass(ModulePass):
    name = "snowflake-lower"
    format: str = "Q8.8"
    calibration: str = ""
    """format=auto: a .npy of calibration inputs (quantize)."""
    loop_order: str = "auto"
    mode: str = "auto"
    hw: str = ""

    def passes(self, quantised_already: bool) -> list[ModulePass]:
        steps: list[ModulePass] = [] if quantised_already else \
            [NNPreparePass(self.format, calibration=self.calibration, hw=self.hw)]
        return steps + [NNToTilePass(self.mode, self.hw), TileLoopOrderPass(self.loop_order, self.hw),
                        TileToAsmPass(self.hw), BalanceLoadsPass(hw=self.hw), ScheduleAsmPass(self.hw),
                        FillDelaySlotsPass(self.hw), IcacheBankingPass(self.hw)]

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        run_steps(ctx, op, self.passes(quantised(op)))
