"""
A conv layer's mode, residual convs included: plan/indp.choose_mode decides by lane occupancy;
a residual conv the CUs can run column-split in INDP (plan/indp_columns.py) runs INDP when that
plan's estimate (`columns_cycles`) beats the COOP residual plans' (`residual_cycles`), the two
cost models counting the same DRAM bytes (maps, bypass, output, kernels re-sent) and the CUs'
traces and bypass VMOVs. Where it does not pay (long COOP traces, kernel tiles that cannot be
double-buffered) the layer stays COOP.
"""

from __future__ import annotations

from snowir.hw import SnowflakeConfig
from snowir.plan.conv import plan_conv, residual_cycles
from snowir.plan.indp import choose_mode
from snowir.plan.indp_columns import columns_cycles, columns_refusal, plan_indp_columns
from snowir.plan.shapes import ConvShape


def conv_mode(s: ConvShape, hw: SnowflakeConfig, bypass: bool, mode: str | None = None) -> str:
    """`mode` if given (refused when the layer cannot run it), else the cheaper by estimate."""
    chosen = choose_mode(s, hw, bypass, mode)
    if mode is not None or not bypass or columns_refusal(s, hw) is not None:
        return chosen
    # addresses do not enter the estimates: any regions do
    coop = residual_cycles(plan_conv(s, hw, 0, 0, 0, None, 0, "COOP"), hw)
    return "INDP" if columns_cycles(plan_indp_columns(s, hw, 0, 0, 0, 0), hw) < coop else "COOP"
