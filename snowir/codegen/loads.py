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


LOOP_UNROLL = 4
"""LDs per iteration of a looped gather (`load_runs` with `loop`): one per load unit, so
`balance-loads` spreads each iteration's group over the units."""
LOOP_MIN = 4 * LOOP_UNROLL
"""Runs of one arithmetic sequence that `load_runs` loops rather than unrolls."""


def _progressions(runs: list[tuple[int, int, int, int]]) -> list[tuple[int, int]]:
    """[first, end) index ranges of maximal stretches of `runs` with one length and select whose
    buffer and DRAM addresses step by constants an ADDI holds."""
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(runs):
        j = i + 1
        if j < len(runs):
            d, e = runs[j][0] - runs[i][0], runs[j][1] - runs[i][1]
            if -(1 << 16) <= d < (1 << 16) and -(1 << 16) <= e < (1 << 16):
                while j < len(runs) and runs[j][2:] == runs[i][2:] and runs[j][0] - runs[j - 1][0] == d \
                        and runs[j][1] - runs[j - 1][1] == e:
                    j += 1
        spans.append((i, j))
        i = j
    return spans


def load_runs(b: AsmBuilder, hw: SnowflakeConfig, runs: list[tuple[int, int, int, int]],
              loop: tuple[int, int] | None = None) -> None:
    """One maps LD per (buffer element, DRAM byte, elements, select) run, all on load unit 0
    (`balance-loads` assigns units); the buffer address and length registers are set only
    when they change. `loop`: two registers free here (counter, limit); a stretch of at least
    LOOP_MIN runs stepping by constants (a gathered strip's pixels) is then a counted loop of
    LOOP_UNROLL LDs an iteration rather than three instructions a run: a layer's cold start
    gathering a 14² channel part was ~600 straight-line instructions, which crossed
    instruction-cache banks, and the next bank's load queued behind the LDs it had issued
    (3.8 k cycles of icache stall at ResNet-18's layer3.1.conv2.part0)."""
    at = _Pointers()
    for i, j in _progressions(runs) if loop is not None else [(0, len(runs))]:
        if loop is None or j - i < LOOP_MIN:
            for dst, src, n, select in runs[i:j]:
                at.point(b, dst, src, n)
                b.emit(sf.LdOp(sf.LoadTarget.MAPS, R_TMP, R_SRC, R_LEN, 0, select))
            continue
        dst, src, n, select = runs[i]
        d, e = runs[i + 1][0] - dst, runs[i + 1][1] - src
        at.point(b, dst, src, n)
        count, rest = divmod(j - i, LOOP_UNROLL)
        counter, limit = loop
        b.const(counter, 1)
        b.const(limit, count)
        top = b.label("gather")
        for _ in range(LOOP_UNROLL):
            b.emit(sf.LdOp(sf.LoadTarget.MAPS, R_TMP, R_SRC, R_LEN, 0, select),
                   sf.AddiOp(R_TMP, R_TMP, d), sf.AddiOp(R_SRC, R_SRC, e))
        b.loop_end(counter, limit, top)
        for _ in range(rest):
            b.emit(sf.LdOp(sf.LoadTarget.MAPS, R_TMP, R_SRC, R_LEN, 0, select),
                   sf.AddiOp(R_TMP, R_TMP, d), sf.AddiOp(R_SRC, R_SRC, e))
        at.dst, at.src = dst + (j - i) * d, src + (j - i) * e


class _Pointers:
    """What R_TMP (buffer element), R_SRC (DRAM byte) and R_LEN hold between `load_runs`' LDs, so
    each is set only when it changes."""

    def __init__(self) -> None:
        self.dst: int | None = None
        self.src: int | None = None
        self.length: int | None = None

    def point(self, b: AsmBuilder, dst: int, src: int, n: int) -> None:
        b.set_reg(R_TMP, dst, self.dst)
        b.set_reg(R_SRC, src, self.src)
        self.dst, self.src = dst, src
        if n != self.length:
            b.const(R_LEN, n)
            self.length = n


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


def preload_next_kernels(b: AsmBuilder, plan: ConvPlan, src: int) -> None:
    """The next conv's kernel tile 0 (`plan.preload`: DRAM byte, words, vMAC, weights word per
    kernel; its `kernels_preloaded`), a prefetch of this conv's last kernel tile; `src` the register
    walking the DRAM addresses (free at that point in the calling generator)."""
    with b.at("preload_next"):
        length = at = dst = None
        for addr, words, vmac, word in plan.preload:
            if word != dst:  # the next conv's first_slot
                b.const(R_TMP, word)
                dst = word
            if words != length:
                b.const(R_LEN, words)
                length = words
            b.set_reg(src, addr, at)
            at = addr
            b.emit(sf.LdOp(sf.LoadTarget.WEIGHTS, R_TMP, src, R_LEN, 0, vmac))
