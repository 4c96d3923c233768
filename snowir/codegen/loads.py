"""
Maps loads of the conv and pool code: one LD per run, broadcast to every CU, all on load unit 0
(`balance-loads` splits them and assigns units, C17 §6.3).
"""

from __future__ import annotations

from snowir.codegen.builder import AsmBuilder
from snowir.codegen.traces import R_LEN, R_SRC, R_TMP
from snowir.dialects import snowflake_asm as sf
from snowir.hw import SnowflakeConfig


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
