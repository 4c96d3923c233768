"""
A grouped conv over channel-tile-major blocks (`ConvShape.block_maps`: depthwise-to-grouped's one
layer over the blocks) with its kernel tiles as one counted loop rather than unrolled: each tile's
block and kernels found from registers, so the layer's code is one tile's, not C/16 tiles' (which
crossed the bus as instruction-cache fills on layers the diagonal kernels' traffic already makes
DRAM-bound). Kept apart from conv.py, whose Mloop/Kloop tile loops it joins.
"""

from __future__ import annotations

from collections.abc import Callable

from snowir.codegen.builder import AsmBuilder
from snowir.codegen.loops import kloop_budget, ktiles, repeat
from snowir.codegen.pixels import kernel_tile, row_steps
from snowir.codegen.traces import Prefetch, R_BYP, R_LEN, R_TMP, R_TMP2, R_TO, R_TT, R_TW, R_WSRC
from snowir.dialects import snowflake_asm as sf
from snowir.hw import SnowflakeConfig
from snowir.host_nodes import valid_taps
from snowir.plan.issue import issue_cycles
from snowir.plan.shapes import ConvPlan, full_mask


R_MB = R_BYP
"""A grouped conv over blocks in a counted loop (`over_blocks_loop`): its tile's maps bank base
(0 or the bank size; r22 is otherwise a residual conv's, and a conv over blocks has no residual)."""


R_WSRC2, R_WLEN, R_WDST, R_NB = 15, 14, R_TT, 23
"""The loop's registers (free in a k x k conv over blocks: no residual's R_TT and bypass row, no
1x1's unrolled pixels, no staggered tiles' R_PAR): the odd kernels' DRAM address beside R_WSRC's
even ones, a kernel's words, and kept across the tiles, the weights slot the next tile's kernels
go to and the DRAM address of block t + 1's strip."""


def looped_blocks(plan: ConvPlan, hw: SnowflakeConfig) -> bool:
    """Whether the grouped conv over blocks (`ConvShape.block_maps`) runs its kernel tiles as one
    counted loop (`over_blocks_loop`): one maps strip a block, in a bank (not the whole buffer),
    double-buffered kernels, at least three tiles, an even number of kernels a tile (their DRAM
    addresses two registers in turn), and the next block on the bus for at most half a tile's
    MACs. (CenterFace's 30x40x576 3x3/2, a block's 38 KB on the bus for 85% of a tile's MACs, ran
    116.7 k cycles unrolled and 179.5 k looped: load waits; the unrolled tiles' loads lead more.)"""
    s = plan.shape
    if not s.block_maps or plan.loop_order != "Mloop" or len(plan.strips) != 1 or plan.strips[0].bank < 0 \
            or not plan.double_buffer_weights or plan.tiles < 3 or plan.stagger or plan.bypass_addr is not None:
        return False
    block = 2 * s.h * s.w * s.c
    tile_macs = s.oh * s.ow * s.kh * s.kw * -(-s.c // hw.lanes)  # a vMAC's trace cycles; the kernels run side by side
    if block / hw.dram_bytes_per_cycle > 0.5 * tile_macs:
        return False
    return plan.kernels == s.group_kernels and plan.kernels % 2 == 0 and plan.tile_step > 0


LEAD_MARGIN = 1.1
"""How far a tile's loads must outlast its MACs and issue on the bus (`loads_lead`): the issue
estimate (plan/issue.py) is a few percent off a 7² block's."""


def loads_lead(plan: ConvPlan, hw: SnowflakeConfig) -> bool:
    """Whether the looped tiles are bus-bound (the next tile's block and kernels on the bus longer,
    by `LEAD_MARGIN`, than a tile's useful MAC cycles and its estimated issue with a flush more), so
    that each tile issues the next one's loads first, behind a flush (`over_blocks_loop`).

    Why: after 16 of the tile's vector ops (kernel_tile's rule), the loads came one vector queue of
    issue and an LD startup after the bus drained, as those ops waited for the tile's own data: at
    14² x 256 5x5/2 the bus idled 91 cycles a tile (21,108 cycles; 20,128 leading, bit-exact). Where
    issue or the MACs bound the tile (7² x 960 3x3: 32,890 -> 33,876; 7² x 512 5x5, whose loop then
    outgrew its icache bank: 32,923 -> 34,605) the flush costs more than the loads gain."""
    s = plan.shape
    bus = 2 * (s.h * s.w * s.c + plan.kernels * s.kernel_words) / hw.dram_bytes_per_cycle
    macs = valid_taps(s.oh, s.kh, s.sy, s.pt, 1, s.h) * valid_taps(s.ow, s.kw, s.sx, s.pl, 1, s.w) * -(-s.c // hw.lanes)
    issue = issue_cycles(plan, hw) / plan.tiles + 1 + hw.vector_queue_depth
    return bus > LEAD_MARGIN * max(macs, issue)


def over_blocks_loop(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, mask_last: int, cold_start: Prefetch,
                     toggle: Callable[[], list], preload: Prefetch | None) -> None:
    """A grouped conv over blocks (`looped_blocks`), tiles 0..T-2 one counted loop (`repeat`) and
    the last peeled (its write-back mask): tile t reads maps bank t mod 2 (R_MB) and weights slot
    t mod 2 (R_TW; (t + 1) mod 2 under `first_slot`), and loads block t + 1 into the other bank
    (`next_block`) and its kernels into the other slot (`next_kernels`) beside its MACs. conv.py's
    pieces: `cold_start` (tile 0's kernels, the biases, block 0), `toggle` (its ops setting R_TW to
    the other slot), `preload` (the next conv's kernels, in the last tile).

    Why: unrolled, each tile's ~450 instructions cross the bus once as instruction-cache fills, on
    a layer the kernels' sixteen-fold traffic already makes DRAM-bound (PP-LCNet's 7²x512 5x5: 63 KB
    of its 575 KB; 34,825 cycles against a 34,233-cycle bus floor).

    The loads' addresses, lengths and destinations live in registers set once before the loop and
    stepped after each LD (R_WSRC2, R_WDST, R_NB), not recomputed in every tile: a tile's loads
    are 16 LD + ADDI pairs and an LD, its kernels' addresses two registers in turn,
    so an LD reads an address its register's ADDI wrote three instructions before (the scalar
    latency). One register stepped before each LD held each of the 16 LDs two cycles: at 7²
    x 960 3x3 a tile issued ~536 instructions and stalled ~44 cycles for 361 MAC cycles, issue-
    bound (docs/lowering.md, "Depthwise convs: the bound"). Where the tiles are bus-bound
    (`loads_lead`) each tile issues the next one's loads first, behind a flush of the vector queue
    (so the previous tile, whose bank and slot they fill, has finished), rather than after 16 of
    its own vector ops, unless the flush's 17 instructions push the loop's body past its bank."""
    s = plan.shape
    strip = plan.strips[0]
    bank = hw.maps_bank_elements
    row = s.w * s.cin
    block = 2 * s.h * s.w * s.c
    k = s.kernel_words
    cold_start(b)
    b.const(R_MB, 0)
    b.const(R_TW, plan.first_slot)  # tile 0's slot: 0, or the second after a conv ending in the first
    b.const(R_WDST, plan.w_slot - plan.first_slot)  # tile 1's
    b.const(R_TO, 0)  # (R_TT, the tile's first channel, is a residual conv's or a Kloop spread's: not read here)
    b.const(R_WSRC, plan.w_addr + 2 * plan.kernels * k)  # tile 1's kernels: the even ones
    b.const(R_WSRC2, plan.w_addr + 2 * plan.kernels * k + 2 * k)  # and the odd ones
    b.const(R_NB, plan.in_addr + block + 2 * strip.r0 * row)  # block 1's strip
    row_steps(b, plan)  # the same for every tile: set once, not in the loop's body

    def next_block(bb: AsmBuilder) -> None:
        """Block t + 1 into the bank R_MB does not hold; R_NB on to block t + 2. (The lengths are
        set where the loads are, so balance-loads sees them and gives the block a unit of its own.)"""
        with bb.at("load_maps.next_block"):
            bb.emit(sf.MoviOp(R_LEN, (strip.r1 - strip.r0) * row), sf.MuliOp(R_TMP, R_MB, -1),
                    sf.AddiOp(R_TMP, R_TMP, bank), sf.LdOp(sf.LoadTarget.MAPS, R_TMP, R_NB, R_LEN, 0, sf.SELECT_ALL),
                    sf.AddiOp(R_NB, R_NB, block))

    def next_kernels(bb: AsmBuilder) -> None:
        """Tile t + 1's kernels into slot R_WDST: kernel j from R_WSRC (j even) or R_WSRC2 (j odd),
        each stepped two kernels on after its LD, so both end at tile t + 2's (`plan.kernels` even)."""
        with bb.at("load_weights.next"):
            bb.const(R_WLEN, k)
            for j in range(plan.kernels):
                src = (R_WSRC, R_WSRC2)[j % 2]
                bb.emit(sf.LdOp(sf.LoadTarget.WEIGHTS, R_WDST, src, R_WLEN, 0, j), sf.AddiOp(src, src, 4 * k))

    def tile(bb: AsmBuilder, lead: bool) -> None:
        if lead:  # the next tile's loads first, behind a flush: the previous tile's reads of their region are over
            bb.flush_vector_queue(hw, R_TMP, full_mask(plan))
            next_block(bb)
            next_kernels(bb)
        kernel_tile(bb, plan, hw, strip, 0, 0, full_mask(plan), [] if lead else [next_block, next_kernels],
                    base_reg=R_MB, steps_set=True)

    def advance() -> list:  # the other weights slot and maps bank, the next tile's output
        return [sf.MuliOp(R_TMP2, R_MB, -1), sf.AddiOp(R_WDST, R_TW, 0), *toggle(), sf.AddiOp(R_TO, R_TO, plan.tile_step),
                sf.AddiOp(R_MB, R_TMP2, bank)]

    lead = loads_lead(plan, hw)
    if lead:  # not where the flush pushes a counted loop (`repeat`: its counter, body, step, branch, slots) past its bank
        plain = AsmBuilder()
        tile(plain, False)
        body = sum(1 for op in plain.ops if not isinstance(op, sf.LabelOp)) + len(advance()) + 3 + hw.branch_delay_slots
        lead = not body <= kloop_budget(hw) < body + 1 + hw.vector_queue_depth

    with b.at(ktiles(0, plan.tiles - 2)):
        repeat(b, hw, plan.tiles - 1, lambda bb: tile(bb, lead), advance)
    with b.at(ktiles(plan.tiles - 1, plan.tiles - 1)):
        kernel_tile(b, plan, hw, strip, 0, 0, mask_last, [preload] if preload is not None else [], base_reg=R_MB,
                    steps_set=True)
