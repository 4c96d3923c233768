"""
Counted loops over a conv's kernel tiles, shared by the code generators (codegen/conv.py, the
fully connected generator): one loop body an icache bank can hold, or unrolled.
"""

from __future__ import annotations

from collections.abc import Callable

from snowir.codegen.builder import AsmBuilder
from snowir.codegen.traces import R_TK
from snowir.dialects import snowflake_asm as sf
from snowir.hw import SnowflakeConfig


def ktiles(first: int, last: int) -> str:
    """The part of a layer that computes kernel tiles first..last (a counted loop covers several)."""
    return f"ktile{first}" if first == last else f"ktiles{first}to{last}"


def kloop_budget(hw: SnowflakeConfig) -> int:
    """Instructions a counted K loop may take: one icache bank less room for the bank-load
    prologue icache-banking puts before it (448 of 512)."""
    return hw.icache_bank_instructions * 7 // 8


def repeat(b: AsmBuilder, hw: SnowflakeConfig, n: int, body: Callable[[AsmBuilder], None],
           advance: Callable[[], list]) -> None:
    """`body` then `advance` n times: one counted loop (counter R_TK from 1-n up to r0, the
    advance in the branch's delay slots) when it fits an icache bank, else unrolled."""
    if n >= 2:
        loop = b.child()
        loop.const(R_TK, 1 - n)
        top = loop.label("ktiles")
        body(loop)
        loop.loop_end(R_TK, 0, top, advance())
        if sum(1 for op in loop.ops if not isinstance(op, sf.LabelOp)) <= kloop_budget(hw):
            b.emit(*loop.ops)
            return
    for _ in range(n):
        body(b)
        b.emit(*advance())
