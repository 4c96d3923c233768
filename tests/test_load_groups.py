"""
balance-loads' groups across a layer's start: the weights of its first kernel tile, the VMOVs
that set its write-back masks, stride and shift, then its first maps rows (issue 38, SqueezeNet's
n5 / n12: +121 / +113 cycles against 72eef3b, whose start set the masks before the weights).
"""

from __future__ import annotations

import numpy as np

from snowir import api
from snowir.dialects import snowflake_asm as sf
from snowir.hw import SnowflakeConfig
from snowir.machine.image import assemble
from snowir.machine.run import run_image
from snowir.passes.asm.balance_loads import BalanceLoadsPass

HW = SnowflakeConfig()
SEG = "snowflake_asm.segment input @x at 0 size 65536\nsnowflake_asm.segment output @y at 65536 size 8192\n"
ROWS = 880  # the first rows' elements (SqueezeNet n5's rows0_1)


def _start(rows_after: int) -> str:
    """16 kernel LDs of 32 elements, the masks, the first rows, `rows_after` more rows of 3960
    elements (a first strip in pieces), then a MAC on the first rows."""
    lines = ["snowflake_asm.movi r18, 32", "snowflake_asm.movi r16, 0"]
    for k in range(16):
        lines += [f"snowflake_asm.movi r19, {64 * k}", f"snowflake_asm.ld weights r16, r19, r18 unit 0 to {k}"]
    lines += ["snowflake_asm.movi r17, 65535", *["snowflake_asm.vmov coop mask r17"] * 4,
              "snowflake_asm.movi r17, 8", "snowflake_asm.vmov coop stride r17",
              f"snowflake_asm.movi r18, {ROWS}", "snowflake_asm.movi r19, 2048",
              "snowflake_asm.ld maps r16, r19, r18 unit 0 to all"]
    for k in range(rows_after):
        lines += [f"snowflake_asm.movi r16, {ROWS + 3960 * k}", f"snowflake_asm.movi r19, {4096 + 7920 * k}",
                  "snowflake_asm.movi r18, 3960", "snowflake_asm.ld maps r16, r19, r18 unit 0 to all"]
    lines += ["snowflake_asm.movi r1, 65536", "snowflake_asm.movi r2, 0", "snowflake_asm.movi r3, 0",
              "snowflake_asm.mac coop r1, r2, r3 trace 55 wb"]
    return SEG + "snowflake_asm.program @p {\n" + "\n".join(lines) + "\n}\n"


def _balanced(text: str):
    module = api.parse_text(text)
    BalanceLoadsPass(guard=False).apply(api.context(), module)
    return module


def _lds(module) -> list[sf.LdOp]:
    program = next(op for op in module.ops if isinstance(op, sf.ProgramOp))
    return [op for op in program.body.block.ops if type(op) is sf.LdOp]


def _cycles(module) -> int:
    return run_image(assemble(module), HW, "fast", {"x": np.zeros(32768, np.int16)}).cycles


def test_the_first_rows_after_the_masks_get_a_unit_no_weights_use() -> None:
    """The masks read no buffer and wait for no load: the first rows after them join the
    weights' group, so the rows go to a unit of their own instead of queueing behind four kernel
    LDs on unit 0; the program runs faster than with the two groups spread apart (the rows and
    the weights each from unit 0, as on main before)."""
    for rows_after in (0, 3):
        module = _balanced(_start(rows_after))
        lds = _lds(module)
        weights = {ld.unit.data for ld in lds if ld.target.data == sf.LoadTarget.WEIGHTS}
        rows = next(ld for ld in lds if ld.target.data == sf.LoadTarget.MAPS)
        assert rows.unit.data not in weights, (rows.unit.data, weights)
        if rows_after:
            continue  # the program's end is then the strip's last rows
        apart = module.clone()
        apart_lds = _lds(apart)
        for k, ld in enumerate(ld for ld in apart_lds if ld.target.data == sf.LoadTarget.WEIGHTS):
            ld.properties["unit"] = type(ld.unit)(k % 4)
        next(ld for ld in apart_lds if ld.target.data == sf.LoadTarget.MAPS).properties["unit"] = type(rows.unit)(0)
        assert _cycles(module) < _cycles(apart), (_cycles(module), _cycles(apart))


def test_only_the_first_load_after_the_masks_joins() -> None:
    """The rest of a first strip loaded in pieces stays a group of its own, spread from unit 0 in
    the order the rows are needed (joined whole, SqueezeNet's n37 / n44 ran +204 cycles)."""
    lds = _lds(_balanced(_start(3)))
    rest = [ld for ld in lds if ld.target.data == sf.LoadTarget.MAPS][1:]
    assert [ld.unit.data for ld in rest][:3] == [0, 1, 2]


def test_a_small_first_piece_stays_with_the_loads_after_it() -> None:
    """A first piece smaller than a unit's fair share of the kernels' group goes behind them
    whichever unit it takes; joined, the loads after it started from unit 0 again and met it there
    (ResNet-18's layer2.0.down: 8 kernel parts of 520 elements, then 68 pieces of 64, +8 cycles).
    It stays the first of its own group: the next piece takes the next unit."""
    lines = ["snowflake_asm.movi r18, 520", "snowflake_asm.movi r16, 0"]
    for k in range(16):
        lines += [f"snowflake_asm.movi r19, {1040 * k}", f"snowflake_asm.ld weights r16, r19, r18 unit 0 to {k}"]
    lines += ["snowflake_asm.movi r17, 65535", "snowflake_asm.vmov coop mask r17", "snowflake_asm.movi r18, 64"]
    for k in range(5):
        lines += [f"snowflake_asm.movi r16, {64 * k}", f"snowflake_asm.movi r19, {20000 + 128 * k}",
                  "snowflake_asm.ld maps r16, r19, r18 unit 0 to all"]
    lines += ["snowflake_asm.movi r1, 65536", "snowflake_asm.mac coop r1, r0, r0 trace 4 wb"]
    module = _balanced(SEG + "snowflake_asm.program @p {\n" + "\n".join(lines) + "\n}\n")
    maps = [ld.unit.data for ld in _lds(module) if ld.target.data == sf.LoadTarget.MAPS]
    assert maps == [0, 1, 2, 3, 0], maps
