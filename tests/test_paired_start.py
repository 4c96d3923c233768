"""
`paired_start` (snowir/plan/paired_start.py): a conv of resident kernel tiles over banked maps
strips computes its first two strips kernel tile by kernel tile, strip 1 loading right behind
strip 0 ahead of kernel tiles 1..T-1, so both strips' MACs run while the later tiles arrive
(ResNet-50's 14², 1x1 1024 -> 256 on 16 CUs, whose four 131 KB tiles outweigh its 57 KB strips).
Chosen by its price, followed bit-exact on both engines, undone by an edit (slower), refused in
one line where the code cannot follow it.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from xdsl.dialects.builtin import UnitAttr
from xdsl.utils.exceptions import PassFailedException

from snowir.hw import SnowflakeConfig
from snowir.plan.conv import plan_conv
from snowir.plan.paired_start import start_cycles
from snowir.plan.shapes import ConvShape
from test_lowering import conv_case

SMALL = SnowflakeConfig(maps_bank_bytes=4096, weights_buffer_bytes=2048)
"""2048-word banks, a 1024-word weights buffer: a 1x1 128 -> 64 over 8 x 8 holds its four kernel
tiles resident and takes four strips of 2 rows."""


def _unpaired(layer) -> None:
    layer.properties.pop("paired_start", None)


def _paired(layer) -> None:
    layer.properties["paired_start"] = UnitAttr()


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_paired_start_is_chosen_followed_and_undone(engine) -> None:
    """The planner records paired_start on a resident 1x1 whose kernel tiles outweigh its strips;
    both orders run bit-exact with the same cycles on both engines, the paired one faster."""
    runs = {}
    for name, edit in (("paired", None), ("up", _unpaired)):
        run, got, want, plan, _ = conv_case(128, 8, 8, 64, 1, 1, 1, 0, hw=SMALL, shift=12, edit=edit, engine=engine)
        assert np.array_equal(got, want)
        assert plan.resident_weights and plan.tiles == 4 and len(plan.strips) == 4
        assert plan.paired_start == (name == "paired")
        runs[name] = run.cycles
    assert runs == {"paired": 3396, "up": 3520}


def test_resnet50_reduce_1x1_on_16_cus() -> None:
    """ResNet-50's 14², 1x1 1024 -> 256 on 16 CUs (n90 ... n130): paired, 2.3 k cycles faster; the
    price sees it (start_cycles, the paired start 1.9 k lower) where the loop-order estimate cannot
    (it counts the resident tiles' bytes, not when they land)."""
    hw = SnowflakeConfig(cus=16)
    plan = plan_conv(ConvShape(1024, 14, 14, 256, 1, 1, 1, 1, 0, 0, 0, 0, True, 12), hw, 0, 1 << 24, 1 << 25)
    assert plan.paired_start and plan.resident_weights and plan.tiles == 4 and len(plan.strips) == 7
    assert start_cycles(plan, hw, False) - start_cycles(plan, hw, True) > 1_500
    runs = {}
    for name, edit in (("paired", None), ("up", _unpaired)):
        run, got, want, plan, _ = conv_case(1024, 14, 14, 256, 1, 1, 1, 0, hw=hw, shift=12, edit=edit)
        assert np.array_equal(got, want) and plan.paired_start == (name == "paired")
        runs[name] = run.cycles
    assert runs["up"] - runs["paired"] > 2_000


def test_not_chosen_where_the_strips_outweigh_the_kernels() -> None:
    """A 3x3 whose strips carry the bus (the default machine's ResNet-50 56² 3x3, resident): the
    paired start saves nothing by the price, and the planner leaves it out."""
    hw = SnowflakeConfig()
    plan = plan_conv(ConvShape(64, 56, 56, 64, 3, 3, 1, 1, 1, 1, 1, 1, True, 12), hw, 0, 1 << 24, 1 << 25)
    assert plan.resident_weights and len(plan.strips) > 2 and not plan.paired_start
    assert start_cycles(plan, hw, True) >= start_cycles(plan, hw, False)


@pytest.mark.parametrize("args, kw, says", [
    # double-buffered kernel tiles, re-sent per strip
    ((256, 6, 6, 96, 1, 1, 1, 0), {}, "paired_start True: its kernel tiles not resident"),
    # a residual conv (its bypass slices)
    ((128, 8, 8, 64, 1, 1, 1, 0), {"bypass": True}, "paired_start True: not a plain COOP Kloop conv"),
])
def test_paired_start_where_the_code_cannot_follow_is_refused(args, kw, says) -> None:
    with pytest.raises(PassFailedException, match=re.escape(says)) as refused:
        conv_case(*args, hw=SMALL, shift=12, edit=_paired, **kw)
    assert "\n" not in str(refused.value).strip() and "remove it" in str(refused.value)
