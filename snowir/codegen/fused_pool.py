"""
A fused max pool's code inside its conv's program: the conv rows an INDP row group (a COOP
strip) completed loaded into the ring's slots at the next group's (strip's) start, pooled
halfway through it (codegen/indp.py; a COOP strip's last kernel tile, codegen/conv.py's Kloop).
plan/fused_pool.py decides the fusion, plan/shapes.py's `ring_schedule` the rows.
"""

from __future__ import annotations

from snowir.codegen.builder import AsmBuilder
from snowir.codegen.loads import load_broadcast
from snowir.codegen.pool import R_MASK, R_TMP, ring_output_row, set_up_max
from snowir.dialects import snowflake_asm as sf
from snowir.hw import SnowflakeConfig
from snowir.plan.shapes import ConvPlan
from snowir.plan.pool_shapes import PoolRing


def load_rows(b: AsmBuilder, plan: ConvPlan, ring: PoolRing, rows: tuple[int, int], hw: SnowflakeConfig) -> None:
    """Conv output rows [a, b) from DRAM into their ring slots, broadcast to every CU."""
    p = plan.pool
    assert p is not None
    row = p.w * p.c
    n = len(ring.slots)
    for r in range(*rows):
        load_broadcast(b, hw, ring.slots[r % n], plan.out_addr + 2 * r * row, row)


def pool_rows(b: AsmBuilder, plan: ConvPlan, ring: PoolRing, rows: tuple[int, int], hw: SnowflakeConfig,
              restore: tuple[int, int] | None) -> None:
    """The MAX traces of pool rows [p, q) from the ring, then (`restore`) the conv's CU stride
    and write-back mask again (r1-r9 are the pool's here: the conv sets them up afresh after)."""
    p = plan.pool
    assert p is not None
    if rows[0] >= rows[1]:
        return
    n = len(ring.slots)
    set_up_max(b, p)
    for y in range(*rows):
        ring_output_row(b, p, hw, y, lambda r: ring.slots[r % n], plan.pool_out_addr)
    if restore is not None:
        b.const(R_TMP, restore[0])
        b.emit(sf.VmovOp(plan.vector_mode, sf.VmovSelect.STRIDE, R_TMP))
        b.write_mask(hw, R_MASK, restore[1])
