"""
Row-group code: INDP's (C17 §4, §5.3) and COOP's `coop_rows` (snowir/plan/coop_rows.py). Weights
broadcast across CUs (LD select 16+v): an INDP kernel tile is 64 kernels, vMAC v holding 16
interleaved; a coop_rows tile is V kernels, vMAC v of every CU kernel v. The CUs work on different
output rows of a row group, each from its own input rows at the same buffer address, `vmov
stride` putting its outputs R rows further. Row groups alternate maps banks.
"""

from __future__ import annotations

from snowir.codegen.builder import AsmBuilder
from snowir.codegen.fused_pool import load_rows, pool_rows
from snowir.codegen.loads import load_biases, load_runs
from snowir.codegen.pixels import kernel_tile
from snowir.codegen.traces import R_LEN, R_SRC, R_TMP, R_TO, R_TT, R_TW, R_X, R_XEND, Prefetch
from snowir.dialects import snowflake_asm as sf
from snowir.hw import SnowflakeConfig
from snowir.plan.shapes import ConvPlan, Strip, group_of, indp_kernel_words, kernels_per_tile, row_runs
from snowir.plan.pool_shapes import ring_of


def _load_group(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, gi: int, loop: bool = False) -> None:
    """Each CU's input rows into its own maps buffer, same address (bank of the group): one LD a
    CU, or one a row when the rows are a crop's window of a wider tensor (`in_row`); a gathering
    plan's (`gather`: a strided 1x1's pixels, coop_rows) one LD a pixel, CU c's from its own
    compact rows. `loop`: R_X / R_XEND are free here (the cold start), so a CU's pixels may be a
    counted loop (`load_runs`)."""
    with b.at(f"load_maps.group{gi}"):
        _, _, rows = group_of(plan, gi)
        base = plan.strips[gi].bank * hw.maps_bank_elements
        load_runs(b, hw, group_runs(plan, rows, base), (R_X, R_XEND) if loop and plan.gather is not None else None)


def group_runs(plan: ConvPlan, rows: list[tuple[int, int]], base: int) -> list[tuple[int, int, int, int]]:
    """(buffer word, DRAM byte, words, select) of each LD loading CU c's input rows `rows[c]` at
    buffer word `base`: a run of rows (or one a row, a crop's), or a gathering plan's pixels from
    every sy-th row and sx-th column of the DRAM input, channels c0.. of each."""
    s = plan.shape
    row = s.w * s.cin
    if plan.gather is None:
        return [(base + at, plan.in_addr + 2 * src, n, c) for c, (r0, r1) in enumerate(rows)
                for at, src, n in row_runs(r0, r1, row, plan.in_row or row)]
    sy, sx, w_in, cin_in, c0 = plan.gather
    in_row = plan.in_row or w_in * cin_in  # DRAM words between the tensor's rows (a crop's source's)
    if sx == 1 and cin_in == s.cin:  # a compact row is contiguous
        return [(base + (r - r0) * row, plan.in_addr + 2 * r * sy * in_row, row, c)
                for c, (r0, r1) in enumerate(rows) for r in range(r0, r1)]
    return [(base + (r - r0) * row + x * s.cin, plan.in_addr + 2 * (r * sy * in_row + x * sx * cin_in + c0), s.cin, c)
            for c, (r0, r1) in enumerate(rows) for r in range(r0, r1) for x in range(s.w)]


def load_kernel_tile(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, t: int, wbuf: int,
                     part: tuple[int, int] | None = None) -> None:
    """Kernel tile t (words [o0, o1) of it: `part`) at weights word `wbuf`: vMAC v's 16
    interleaved kernels (coop_rows: kernel v), broadcast to vMAC v of every CU."""
    words = indp_kernel_words(plan.shape, hw) if plan.indp else plan.shape.kernel_words
    per_tile = hw.vmacs_per_cu if plan.indp else plan.kernels  # kernel blocks (INDP: 16 interleaved) a tile
    o0, o1 = part or (0, words)
    with b.at(f"load_weights.ktile{t}"):
        b.const(R_LEN, o1 - o0)
        b.const(R_TMP, wbuf + o0)
        for v in range(per_tile):
            b.const(R_SRC, plan.w_addr + 2 * ((t * per_tile + v) * words + o0))
            b.emit(sf.LdOp(sf.LoadTarget.WEIGHTS, R_TMP, R_SRC, R_LEN, 0, hw.vmacs + v))


def tile_mask(plan: ConvPlan, hw: SnowflakeConfig, t: int, cus: int) -> int:
    """The write-back mask of kernel tile t on the first `cus` CUs: the vMACs whose kernels (16
    each in INDP, one in coop_rows) a partial last tile still has."""
    tile, per_vmac = (kernels_per_tile(hw), hw.lanes) if plan.indp else (plan.kernels, 1)
    vmacs = [v for v in range(min(hw.vmacs_per_cu, tile)) if t * tile + v * per_vmac < plan.shape.k]
    return sum(1 << (c * hw.vmacs_per_cu + v) for c in range(cus) for v in vmacs)


def generate_indp(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig) -> None:
    """Row groups in turn (maps double-buffered), every kernel tile per group (Kloop): INDP's, or
    COOP's with `coop_rows`."""
    s = plan.shape
    tile = kernels_per_tile(hw) if plan.indp else plan.kernels
    wbank = plan.w_slot if plan.double_buffer_weights else 0
    items = [(gi, t) for gi in range(len(plan.strips)) for t in range(plan.tiles)]
    ring = None
    if plan.pool is not None:
        ring = ring_of(plan)
    if plan.weights_before_fence:  # after a max pool: the kernels load while it runs (codegen/conv._cold_start)
        load_kernel_tile(b, plan, hw, 0, 0)
        b.flush_vector_queue(hw, R_TMP)
        load_biases(b, plan, hw)
        _load_group(b, plan, hw, 0, loop=True)
    else:
        load_biases(b, plan, hw)
        _load_group(b, plan, hw, 0, loop=True)  # before any pixel loop
        load_kernel_tile(b, plan, hw, 0, 0)
    slot = 0  # weights slot: a new tile takes the other bank when double-buffered
    for i, (gi, t) in enumerate(items):
        with b.at(f"group{gi}.ktile{t}"):
            r, cus, rows = group_of(plan, gi)
            if t == 0:
                b.const(R_TMP, 2 * r * (plan.out_row or s.ow * s.k))  # CU c writes r rows on (a concat's rows)
                b.emit(sf.VmovOp(plan.vector_mode, sf.VmovSelect.STRIDE, R_TMP))
            nxt = items[i + 1] if i + 1 < len(items) else None
            new_tile = nxt is not None and nxt[1] != t
            prefetch: list[Prefetch] = []
            # the next group's maps: during the group's last tile (INDP), or its first (coop_rows: V kernels
            # a tile, so a group's tiles are short and its maps load in the time of all of them)
            last = plan.tiles - 1
            ahead = gi + 1 if t == (0 if plan.coop_rows else last) and gi + 1 < len(plan.strips) else None
            if ahead is not None:
                prefetch.append(lambda bb, g=ahead: _load_group(bb, plan, hw, g))
            if new_tile and plan.double_buffer_weights:  # coop_rows: ahead of the maps, which the next tile does not wait for
                at = 0 if plan.coop_rows else len(prefetch)
                prefetch.insert(at, lambda bb, nt=nxt[1], buf=((slot + 1) % 2) * wbank:
                                load_kernel_tile(bb, plan, hw, nt, buf))
            mask = tile_mask(plan, hw, t, cus)
            b.const(R_TW, (slot % 2) * wbank)
            b.const(R_TT, t * tile)
            b.const(R_TO, 2 * t * tile)
            strip = plan.strips[gi]
            cu0 = Strip(strip.y0, strip.y0 + r, rows[0][0], rows[0][1], strip.bank)
            mid = None
            if ring is not None and t == 0:
                a, b_, p, q = ring.steps[gi]
                load_rows(b, plan, ring, (a, b_), hw)
                if q > p:
                    mid = lambda bb, p=p, q=q, stride=2 * r * s.ow * s.k, mask=mask: \
                        pool_rows(bb, plan, ring, (p, q), hw, (stride, mask))  # noqa: E731
            kernel_tile(b, plan, hw, cu0, strip.bank * hw.maps_bank_elements, 0, mask, prefetch, mid_row=mid)
            if new_tile and not plan.double_buffer_weights:
                b.flush_vector_queue(hw, R_TMP)
                load_kernel_tile(b, plan, hw, nxt[1], 0)
            slot += new_tile
    if ring is not None:
        # the last group's rows: their slots were last read halfway through it (flush: the
        # group may be short), and the MAXs wait for these loads
        a, b_, p, q = ring.tail
        b.flush_vector_queue(hw, R_TMP)
        load_rows(b, plan, ring, (a, b_), hw)
        pool_rows(b, plan, ring, (p, q), hw, None)
