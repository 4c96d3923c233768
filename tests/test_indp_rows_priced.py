"""
INDP rows per CU priced by the cost model (plan/indp.default_rows_per_cu) rather than the fixed
rule: on a 16-CU machine a stem-like 7x7/2 conv over 3 channels takes more rows per CU than the
rule's one (one row a CU reloads 7 input rows per output row and the loads outrun the MACs), the
choice is recorded as `cu_rows` and followed, bit-exact and faster than the rule's schedule; on
the default machine the rule's choice stands.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from snowir.hw import SnowflakeConfig
from snowir.plan.conv import settle
from snowir.plan.indp import default_rows_per_cu, plan_indp, rule_rows_per_cu
from snowir.plan.shapes import ConvShape
from snowir.tile.build import bare_conv_layer, set_conv_plan
from snowir.tile.read import conv_plan_of

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from stem_search import golden_case, simulate, stem_shape  # noqa: E402

# a stem as pad-rows leaves it, narrowed: 224 + 6 rows of 48 columns, 3 -> 64, 7x7/2, column padding 3
STEM = ConvShape(3, 230, 48, 64, 7, 7, 2, 2, 0, 3, 0, 3, True, 14, 1)
HW16 = SnowflakeConfig(cus=16)


def test_priced_rows_beat_the_rule_on_16_cus(tmp_path: Path) -> None:
    rule, priced = rule_rows_per_cu(STEM, HW16), default_rows_per_cu(STEM, HW16)
    assert rule == 1 and priced > 1, (rule, priced)
    x, wt, bias, want = golden_case(STEM)
    layer = bare_conv_layer("stem", STEM, wt, bias, HW16)
    plan = conv_plan_of(layer.clone())
    assert plan.mode == "INDP" and max(plan.cu_rows) == priced  # recorded as cu_rows
    hw_path = tmp_path / "hw.json"
    HW16.save(hw_path)
    cycles, exact = simulate(layer.clone(), HW16, hw_path, x, want)
    assert exact
    ruled = layer.clone()
    set_conv_plan(ruled, settle(plan_indp(STEM, HW16, plan.in_addr, plan.w_addr, plan.out_addr, rows_per_cu=rule),
                                HW16), HW16)
    assert set(conv_plan_of(ruled.clone()).cu_rows) == {1}
    rule_cycles, rule_exact = simulate(ruled, HW16, hw_path, x, want)
    assert rule_exact and cycles < 0.95 * rule_cycles, (cycles, rule_cycles)


def test_default_machine_keeps_the_rule() -> None:
    """Table 1's stems on the default machine: the priced choice is the rule's (no change)."""
    hw = SnowflakeConfig()
    for padded in (False, True):
        s = stem_shape(224, padded)
        assert default_rows_per_cu(s, hw) == rule_rows_per_cu(s, hw)
    assert np.all([default_rows_per_cu(stem_shape(224, p), HW16) > 1 for p in (False, True)])
