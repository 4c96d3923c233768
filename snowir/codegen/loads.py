"""
Maps loads of the conv and pool code: one LD per run, broadcast to every CU, all on load unit 0
(`balance-loads` splits them and assigns units, C17 §6.3).
"""

from __future__ import annotations

from snowir.codegen.builder import AsmBuilder
from snowir.codegen.traces import R_LEN, R_SRC, R_TMP
from snowir.dialects import snowflake_asm as sf
from snowir.hw import SnowflakeConfig
from snowir.plan.layout import bias_block_load
from snowir.plan.shapes import ConvPlan


def load_broadcast(b: AsmBuilder, hw: SnowflakeConfig, dst: int, src: int, words: int) -> None:
    """`words` elements from DRAM `src` to maps-buffer element `dst` of every CU: one LD
    (`balance-loads` splits it over the load units, C17 §6.3)."""
    load_runs(b, hw, [(dst, src, words, sf.SELECT_ALL)])


def load_runs(b: AsmBuilder, hw: SnowflakeConfig, runs: list[tuple[int, int, int, int]]) -> None:
    """One maps LD per (buffer element, DRAM byte, elements, select) run, all on load unit 0
    (`balance-loads` assigns units); the buffer address and length registers are set only
    when they change."""
    dst_now = src_now = length = None
    for dst, src, n, select in runs:
        b.set_reg(R_TMP, dst, dst_now)
        b.set_reg(R_SRC, src, src_now)
        dst_now, src_now = dst, src
        if n != length:
            b.const(R_LEN, n)
            length = n
        b.emit(sf.LdOp(sf.LoadTarget.MAPS, R_TMP, R_SRC, R_LEN, 0, select))


def load_biases(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig) -> None:
    """A `maps` layout's bias block (the weights region's `biases`), once at the layer's cold start,
    after any fence (it lands in the maps buffer) and before the first kernel tile's `vmov mbias`
    (which waits for it): from after the weight image's kernels to the top of the maps buffer of
    every CU. `hw` is the machine the plan's maps tiles see (plan/shapes.plan_machine)."""
    if plan.shape.bias_at != "maps":
        return
    src, dst, words = bias_block_load(plan.shape, plan.mode, plan.kernels, plan.w_addr, hw)
    with b.at("load_biases"):
        load_broadcast(b, hw, dst, src, words)
