"""
A conv layer's mode, residual convs included: plan/conv.choose_mode decides by lane occupancy
(priced for few input channels); a residual conv the CUs can run column-split in INDP
(plan/indp_columns.py) runs INDP when that plan's estimate (`columns_cycles`) beats the COOP
residual plans' (`residual_cycles`), the two cost models counting the same DRAM bytes (maps,
bypass, output, kernels re-sent) and the CUs' traces and bypass VMOVs. Where it does not pay
(long COOP traces, kernel tiles that cannot be double-buffered) the layer stays COOP.
"""

from __future__ import annotations

from dataclasses import replace

from snowir.hw import SnowflakeConfig
from snowir.plan.conv import choose_mode, maps_may_pay, plan_conv, residual_cycles
from snowir.plan.indp_columns import columns_cycles, columns_refusal
from snowir.plan.issue import UNROLL, issue_cycles
from snowir.plan.shapes import ConvPlan, ConvShape, LoweringError


def conv_mode(s: ConvShape, hw: SnowflakeConfig, bypass: bool, mode: str | None = None, sliced: bool = False,
              bypass_crop: bool = False) -> str:
    """`mode` if given (refused when the layer cannot run it), else the cheaper by estimate.
    `sliced`: the output is a channel slice of a device concat's tensor (whole pixels `total`
    channels apart): the column-split INDP plan is left out, its CU stride being both the output's
    and the bypass's (a CU's q·K words), which the bypass rows in the maps buffer cannot follow.
    `bypass_crop`: the bypass is a crop's window (plan_conv: no bypass slices)."""
    try:
        chosen = choose_mode(s, hw, bypass, mode)
    except LoweringError:  # a forced mode the stock layout cannot run may run with the biases out of the kernels
        if mode is None or not maps_may_pay(replace(s, bias_at="maps"), hw):
            raise
        chosen = choose_mode(replace(s, bias_at="maps"), hw, bypass, mode)
    if mode is not None or not bypass or sliced:
        return chosen
    columns = columns_plan(s, hw)
    if columns is None:
        return chosen
    # addresses do not enter the estimates: any regions do
    coop = coop_residual_cycles(plan_conv(s, hw, 0, 0, 0, None, 0, "COOP", bypass_crop=bypass_crop), hw)
    return "INDP" if columns_cycles(columns, hw) < coop else "COOP"


def columns_plan(s: ConvShape, hw: SnowflakeConfig) -> ConvPlan | None:
    """The column-split INDP plan of a residual conv (in the weight-image layout plan_conv
    chooses: 16 interleaved kernels over 256 channels fit a vMAC only without their biases), None
    when the CUs cannot split its columns."""
    if columns_refusal(s, hw) is not None and columns_refusal(replace(s, bias_at="maps"), hw) is not None:
        return None
    try:
        return plan_conv(s, hw, 0, 0, 0, None, 0, "INDP")
    except LoweringError:
        return None


def coop_residual_cycles(plan: ConvPlan, hw: SnowflakeConfig) -> float:
    """A COOP residual plan's estimate (`residual_cycles`), or its issue slots when more:
    residual_cycles counts 5 a pixel; the unrolled 1x1 pixel loop issues 5.5 (plan/issue.py),
    plus, per output row and kernel tile, its setup (an address register per unrolled pixel for
    maps, output and bypass, the counters, the Y loop's branch and delay slots), plus 3 per
    gathered pixel's LD. Short rows make that the bound: ResNet-18's 28-column strided
    layer2.0.down measured 47.3 k cycles (CUs starved 15.9 k) against residual_cycles' 35.2 k."""
    s = plan.shape
    issue = issue_cycles(plan, hw)
    if s.kh == s.kw == 1 and not plan.bypass_slices:
        row_setup = (3 if plan.bypass_addr is not None else 2) * UNROLL + 3 + 2 + hw.branch_delay_slots
        issue += plan.tiles * s.oh * row_setup
        if plan.gather is not None:
            issue += 3 * plan.load_count()
    return max(residual_cycles(plan, hw), issue)
