"""
Weight loads of the conv programs (codegen/conv.py): a kernel tile's kernels into its slot, the next
tile's into the other slot while the current computes (double-buffered), or in the two pieces a
staggered tile's region allows (the words that miss the current tile's region while it computes,
the rest after it drains), and resident tiles behind tile 0 or one tile ahead in the first strip. Every kernel goes to its own vMAC
(select j), one LD each, so `balance-loads` spreads them over the load units.
"""

from __future__ import annotations

from snowir.codegen.builder import AsmBuilder
from snowir.codegen.loops import repeat
from snowir.codegen.traces import R_LEN, R_SRC, R_TMP, R_TMP2, R_TW, R_WSRC
from snowir.dialects import snowflake_asm as sf
from snowir.hw import SnowflakeConfig
from snowir.plan.shapes import ConvPlan, kernel_vmacs


# staggered kernel tiles (weights_stagger): 1 while the current tile sits at base 0, else 0.
# r14 is otherwise only an unrolled 1x1's, whose kernels always fit a slot.
R_PAR = 14


def load_resident_weights(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig) -> None:
    """Kernel tiles 1..T-1 behind tile 0, tile t at weights word t x K (one counted loop); each
    tile's MACs wait only for their own region."""
    k = plan.shape.kernel_words
    with b.at("load_weights.resident"):
        b.const(R_WSRC, plan.w_addr + 2 * plan.kernels * k)
        b.const(R_TMP, k)
        b.const(R_LEN, k)
        repeat(b, hw, plan.tiles - 1, lambda bb: _resident_tile(bb, plan), lambda: [sf.AddiOp(R_TMP, R_TMP, k)])


def load_next_resident(b: AsmBuilder, plan: ConvPlan) -> None:
    """The next resident kernel tile's kernels at R_WSRC into their own place, weights word R_TW + K
    (the current tile's base plus a kernel: tile t + 1 at (t + 1) x K), a prefetch of the current
    tile's MACs in the first strip; R_WSRC moves on to the tile after. Each tile's MACs wait only
    for their own region, and a tile's worth at a time leaves the units' queues to the strip's
    other loads (issued all at once behind tile 0, ResNet-50's 16-CU 3x3 parts queued their next
    maps pieces, bypass slices and instruction-cache bank loads behind 338 KB of kernels)."""
    k = plan.shape.kernel_words
    with b.at("load_weights.resident"):
        b.emit(sf.AddiOp(R_TMP, R_TW, k))
        b.const(R_LEN, k)
        _resident_tile(b, plan)


def _resident_tile(b: AsmBuilder, plan: ConvPlan) -> None:
    """One resident tile's kernels, R_LEN words each from R_WSRC on, into weights word R_TMP of
    vMAC j (kernel j); R_WSRC moves past them."""
    k = plan.shape.kernel_words
    for j in range(plan.kernels):
        b.emit(sf.LdOp(sf.LoadTarget.WEIGHTS, R_TMP, R_WSRC, R_LEN, 0, j), sf.AddiOp(R_WSRC, R_WSRC, 2 * k))


def load_next_free(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, f: int) -> None:
    """Staggered tiles, while the current one computes: the F words of each of the tile's kernels
    at R_WSRC that miss the current tile's region. Current base 0 (R_PAR = 1): the next tile
    sits at F and its last F words go to [K, K + F); current base F (R_PAR = 0): the next sits
    at 0 and its first F words go to [0, F). R_WSRC stays."""
    k = plan.shape.kernel_words
    b.emit(sf.MuliOp(R_TMP, R_PAR, k), sf.MuliOp(R_SRC, R_PAR, 2 * (k - f)), sf.AddOp(R_SRC, R_SRC, R_WSRC))
    b.const(R_LEN, f)
    for j in range(plan.kernels):
        b.emit(sf.LdOp(sf.LoadTarget.WEIGHTS, R_TMP, R_SRC, R_LEN, 0, j), sf.AddiOp(R_SRC, R_SRC, 2 * k))


def load_next_overlap(b: AsmBuilder, plan: ConvPlan, f: int) -> None:
    """Staggered tiles, after the current one drained: the K - F words of each next kernel that
    overlap the current tile, always at [F, K): kernel words from R_TW (0 or F) on. R_WSRC moves
    to the tile after."""
    k = plan.shape.kernel_words
    b.emit(sf.MoviOp(R_TMP, f), sf.MovOp(R_SRC, R_TW, 1), sf.AddOp(R_SRC, R_SRC, R_WSRC))
    b.const(R_LEN, k - f)
    for j in range(plan.kernels):
        b.emit(sf.LdOp(sf.LoadTarget.WEIGHTS, R_TMP, R_SRC, R_LEN, 0, j), sf.AddiOp(R_SRC, R_SRC, 2 * k))
    b.const(R_TMP2, 2 * plan.kernels * k)
    b.emit(sf.AddOp(R_WSRC, R_WSRC, R_TMP2))


def load_next_weights(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig) -> None:
    """The tile's kernels at R_WSRC into the bank R_TW does not use (double-buffered) or bank 0;
    R_WSRC moves on to the tile after."""
    s = plan.shape
    with b.at("load_weights.next"):
        if plan.double_buffer_weights:
            b.emit(sf.MuliOp(R_TMP, R_TW, -1), sf.AddiOp(R_TMP, R_TMP, plan.w_slot))
        else:
            b.emit(sf.MoviOp(R_TMP, 0))
        b.const(R_LEN, s.kernel_words)
        for j in range(plan.kernels):
            b.emit(sf.LdOp(sf.LoadTarget.WEIGHTS, R_TMP, R_WSRC, R_LEN, 0, j),
                   sf.AddiOp(R_WSRC, R_WSRC, 2 * s.kernel_words))


def load_weights(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, t: int, wbuf: int) -> None:
    s = plan.shape
    with b.at(f"load_weights.ktile{t}"):
        b.const(R_LEN, s.kernel_words)
        b.const(R_TMP, wbuf)
        for j, vmac in enumerate(kernel_vmacs(plan, hw, s.k if plan.per_cu else plan.kernels)):
            b.const(R_SRC, plan.w_addr + 2 * (t * plan.kernels + j) * s.kernel_words)
            b.emit(sf.LdOp(sf.LoadTarget.WEIGHTS, R_TMP, R_SRC, R_LEN, 0, vmac))
