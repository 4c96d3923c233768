"""
Code generation for a convolution layer on Snowflake (C17 §5.1-5.2, Figure 3).

Data layout in DRAM: tensors channel-innermost (H, W, C) int16, so one kernel row is one
trace of kw*C elements. Weights: per kernel, kh*kw*C words in (ky, kx, c) order, then a
16-word bias block (lane 0 = bias), padded to an even count.

The decisions come as a `ConvPlan` (snowir/plan/shapes.py, read from the tile IR by tile-to-asm): COOP mode with maps broadcast, so
the vMACs of all CUs take one kernel each (a kernel tile of `plan.kernels`: 16 on 4 CUs x 4
vMACs, 64 on 16 CUs) and every MAC writes that many output channels of one pixel (INDP: codegen/indp.py); maps tiles are output-row strips whose
input rows fit one 32K-element maps bank, strips alternate banks (double buffering); kernel
tiles alternate weights slots (halves of the buffer) when a kernel fits one slot; loop order Kloop (all kernel tiles
per maps strip, as one counted loop) or Mloop. Padding taps are never computed: border rows
clamp the kernel-row range, border columns get their own shorter traces.
"""


from __future__ import annotations

from dataclasses import fields, replace

from snowir.codegen.builder import AsmBuilder
from snowir.codegen.bypass_slices import load_first_slice, strips_ahead, tiles_per_slice
from snowir.codegen.fully_connected import fully_connected
from snowir.codegen.fused_pool import load_rows, pool_rows
from snowir.codegen.loops import ktiles, repeat
from snowir.codegen.block_loop import looped_blocks, over_blocks_loop
from snowir.codegen.indp import generate_indp
from snowir.codegen.loads import load_biases, load_broadcast, preload_next_kernels
from snowir.codegen.strip_loads import (load_bypass_rows, load_first_strip, load_maps, replacing_pixels, replacing_rows,
                                        spread_piece, spreads)
from snowir.codegen.pixels import kernel_tile
from snowir.codegen.tile_steps import advance_channels, advance_tile, block_view, group_channels, next_resident, toggle
from snowir.codegen.traces import COOP, Prefetch, R_TMP, R_TMP2, R_TO, R_TT, R_TW, R_WSRC, set_writeback
from snowir.codegen.weight_loads import (R_PAR, load_next_free, load_next_overlap, load_next_resident,
                                         load_next_weights, load_resident_weights, load_weights)
from snowir.dialects import snowflake_asm as sf
from snowir.dialects.tile.decisions import kernel_tile_order
from snowir.hw import SnowflakeConfig
from snowir.plan.shapes import (ConvPlan, LoweringError, Strip, band_plans, full_mask, kernel_vmacs, plan_machine,
                                vmac_mask)
from snowir.plan.pool_shapes import ring_of
from snowir.plan.weights_end import preload_at_last_strip


FOLLOWED = ("prefetch_after", "load_next_whole")
"""Load-placement decisions of the plan that change the code wherever they mean anything: one
that leaves the layer's code as its default does is refused (an edit is followed, never ignored)."""


def generate_conv(plan: ConvPlan, hw: SnowflakeConfig) -> AsmBuilder:
    """The layer program: Kloop (kernel tiles inside each maps strip) or Mloop (strips inside
    each kernel tile); maps banks and weights slots alternate so the next strip / tile loads while
    the current one computes. (Its maps tiles see `hw` with room for a `maps` layout's bias
    block: plan_machine.)"""
    hw = plan_machine(plan, hw)
    b = _generate(plan, hw)
    for name in FOLLOWED:
        d = next(f for f in fields(plan) if f.name == name).metadata["decision"]
        value = getattr(plan, name)
        if value != d.default and _same(b, _generate(replace(plan, **{name: d.default}), hw)):
            raise LoweringError(f"{d.name}{'' if value is True else f' {value}'}: the layer's code is the same "
                                "without it (no load it moves here; remove it)")
    return b


def _same(a: AsmBuilder, b: AsmBuilder) -> bool:
    return len(a.ops) == len(b.ops) and all(x.is_structurally_equivalent(y) for x, y in zip(a.ops, b.ops))


def _generate(plan: ConvPlan, hw: SnowflakeConfig) -> AsmBuilder:
    s = plan.shape
    b = AsmBuilder()
    set_writeback(b, s, hw)
    mask_last = (1 << (s.k - plan.kernels * (plan.tiles - 1))) - 1
    if plan.cu_stride:  # a merged conv's phases in place: each CU's write-back one result row on
        mask_last = vmac_mask(kernel_vmacs(plan, hw, s.k))
        b.const(R_TMP, plan.cu_stride)
        b.emit(sf.VmovOp(COOP, sf.VmovSelect.STRIDE, R_TMP))
    if s.kernel_words > hw.weights_buffer_elements:
        fully_connected(b, plan, hw, mask_last)
        return b
    if plan.bypass_addr is not None:
        _residual(b, plan, hw, mask_last)
        return b
    if plan.column_tiled:
        for i, ((x0, x1), band) in enumerate(band_plans(plan)):
            with b.at(f"cols{x0}_{x1}"):
                if i:  # the band starts over in maps bank 0 and weights slot 0: the last band's MACs first
                    b.flush_vector_queue(hw, R_TMP)
                if band.coop_rows:  # each band's row groups
                    generate_indp(b, band, hw)
                else:
                    _coop(b, band, hw, mask_last)
        return b
    if plan.row_groups:  # INDP's, COOP's coop_rows
        generate_indp(b, plan, hw)
        return b
    _coop(b, plan, hw, mask_last)
    return b


def _coop(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, mask_last: int) -> None:
    """A COOP conv without a residual input: Kloop (ungrouped) or tile by tile."""
    s = plan.shape
    if plan.loop_order == "Kloop" and s.groups == 1:
        _kloop(b, plan, hw, mask_last)
        return
    n_strips = len(plan.strips)
    if looped_blocks(plan, hw):  # conv.py's own loads, passed in (block_loop.py does not import this module)
        over_blocks_loop(b, plan, hw, mask_last,
                         lambda bb: _cold_start(bb, plan, hw, 0, plan.first_slot, plan.strips[0]),
                         lambda: toggle(plan, hw),
                         (lambda bb: _preload(bb, plan)) if plan.preload else None)
        return
    if plan.loop_order == "Kloop":
        items = [(si, t) for si in range(n_strips) for t in range(plan.tiles)]
    else:
        items = [(si, t) for t in range(plan.tiles) for si in range(n_strips)]
    # running slot numbers: a new strip / tile takes the other bank (over blocks, a new tile a new
    # maps tile too: its group's block)
    maps_slot, w_slot = [0], [0]
    for (psi, pt_), (si, t) in zip(items, items[1:]):
        maps_slot.append(maps_slot[-1] + (si != psi or (s.block_maps and t != pt_)))
        w_slot.append(w_slot[-1] + (t != pt_))
    block = lambda t: block_view(plan, t)  # noqa: E731  (the plan whose maps are tile t's block)
    first = plan.first_slot != 0  # tile 0 in the second slot (after a conv ending in the first)
    wbank = lambda i: ((w_slot[i] + first) % 2) * plan.w_slot if plan.double_buffer_weights else 0  # noqa: E731
    _cold_start(b, block(items[0][1]), hw, items[0][1], wbank(0), plan.strips[items[0][0]])
    for i, (si, t) in enumerate(items):
        with b.at(f"strip{si}.ktile{t}"):
            prefetch: list[Prefetch] = []
            nxt = i + 1
            whole = plan.strips[si].bank < 0
            if nxt < len(items):
                nsi, nt = items[nxt]
                if maps_slot[nxt] != maps_slot[i] and not whole:
                    prefetch.append(lambda bb, nsi=nsi, nt=nt, nxt=nxt: load_maps(bb, block(nt), hw, plan.strips[nsi],
                                                                                  maps_slot[nxt] % 2))
                if w_slot[nxt] != w_slot[i] and plan.double_buffer_weights:
                    prefetch.append(lambda bb, nt=nt, nxt=nxt: load_weights(bb, plan, hw, nt, wbank(nxt)))
            if whole and i and maps_slot[i] != maps_slot[i - 1]:
                # the strip fills both banks: every earlier MAC must be done before it is replaced
                b.flush_vector_queue(hw, R_TMP)
                load_maps(b, block(t), hw, plan.strips[si], 0)
            base = 0 if whole else (maps_slot[i] % 2) * hw.maps_bank_elements
            c_off = group_channels(plan, t)
            b.const(R_TW, wbank(i))
            b.const(R_TT, plan.kernels * t)
            b.const(R_TO, plan.tile_step * t)
            if nxt == len(items) and plan.preload:
                prefetch.append(lambda bb: _preload(bb, plan))
            kernel_tile(b, plan, hw, plan.strips[si], base, c_off, mask_last if t == plan.tiles - 1 else full_mask(plan),
                         prefetch)
            if nxt < len(items) and w_slot[nxt] != w_slot[i] and not plan.double_buffer_weights:
                # the next kernels overwrite this tile's bank: wait for every pending MAC first
                b.flush_vector_queue(hw, R_TMP)
                load_weights(b, plan, hw, items[nxt][1], 0)


def _kloop(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, mask_last: int) -> None:
    """Kloop order, ungrouped: per maps strip, every kernel tile (C17 Figure 3); the next strip
    is prefetched into the other maps bank during the strip (`paired_start`: the first two strips
    tile by tile, `_paired_strips`)."""
    b.const(R_TW, plan.first_slot)  # tile 0's slot: 0, or the second after a conv ending in slot 0
    if plan.stagger:
        b.const(R_PAR, 1)
    paired = plan.paired_start
    _cold_start(b, plan, hw, 0, plan.first_slot, plan.strips[0], second=plan.strips[1] if paired else None)
    if paired:
        _paired_strips(b, plan, hw, mask_last)
    ring = ring_of(plan) if plan.pool is not None else None
    for si, strip in enumerate(plan.strips):
        if paired and si < 2:
            continue
        with b.at(f"strip{si}"):
            pool = None
            if ring is not None:  # a fused pool (codegen/fused_pool.py): the rows strip si - 1 completed
                a, b_, p, q = ring.steps[si]
                load_rows(b, plan, ring, (a, b_), hw)
                if q > p:  # pooled halfway through the strip's last tile, a tile after their loads
                    pool = lambda bb, p=p, q=q: pool_rows(bb, plan, ring, (p, q), hw,  # noqa: E731
                                                          (2 * hw.vmacs_per_cu, mask_last))
            whole = strip.bank < 0
            more = si + 1 < len(plan.strips)
            last_prefetch: list[Prefetch] = []
            spread: list[tuple[int, int, int]] = []
            row_loads = replacing_rows(plan, hw, strip, plan.strips[si + 1]) if more and whole else None
            if not more and plan.preload_maps:  # the next conv's first strip, each row once this conv wrote it
                row_loads = [(y, lambda bb, at=at, src=src, n=n: load_broadcast(bb, hw, at, src, n))
                             for y, at, src, n in plan.preload_maps]
            if more and not whole:
                nxt = plan.strips[si + 1]
                bank = (si + 1) % 2
                row = plan.shape.w * plan.shape.cin
                spread = [(bank * hw.maps_bank_elements, plan.in_addr + 2 * nxt.r0 * row, (nxt.r1 - nxt.r0) * row)]
                if not spreads(plan, spread):
                    spread = []
                    last_prefetch.append(lambda bb, nxt=nxt, bank=bank: load_maps(bb, plan, hw, nxt, bank))
            base = 0 if whole else (si % 2) * hw.maps_bank_elements
            if plan.kernel_order == "serpentine":
                assert not spread, "kernel_order serpentine loads the next strip in its last tile (kernel_order_refusal)"
                _serpentine_tiles(b, plan, hw, strip, si, base, mask_last, more, last_prefetch, row_loads)
            else:
                _strip_tiles(b, plan, hw, strip, base, mask_last, more, last_prefetch, spread=spread, pool=pool,
                             row_loads=row_loads)
    if ring is not None:
        # the last strip's rows: their slots were last read in its last tile (flush: the MAXs
        # must be done), and the MAXs wait for these loads
        a, b_, p, q = ring.tail
        b.flush_vector_queue(hw, R_TMP)
        load_rows(b, plan, ring, (a, b_), hw)
        pool_rows(b, plan, ring, (p, q), hw, None)


def _strip_tiles(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, strip: Strip, base: int, mask_last: int,
                 more: bool, last_prefetch: list[Prefetch], bypass_base: int | None = None,
                 spread: list[tuple[int, int, int]] | None = None, pool: Prefetch | None = None,
                 row_loads: list[tuple[int, Prefetch]] | None = None, ahead: Strip | None = None) -> None:
    """Every kernel tile over one maps strip, tile 0's weights already loaded into bank R_TW.
    Tiles 0..T-2 are one counted K loop when its body fits an icache bank (else unrolled): the
    tile registers R_TW/R_TT/R_TO advance in its delay slots, R_WSRC walks the weights. The
    last tile is peeled: the write-back mask of a partial tile, the next strip's data (`more`:
    a strip follows, whose tile 0 it loads). `spread` = the next strip's contiguous runs (buffer
    element, DRAM byte, words: its maps rows; a residual conv's bypass rows too): loaded in T
    pieces, one per tile beside its weights, rather than all during the last tile (where it held
    up the tile's own weights behind it on the bus). `pool`: a fused pool's MAXs, halfway
    through the last tile. `row_loads`: the next whole-buffer strip's rows, in the last tile as
    it frees them (`replacing_rows`, a bypass-slice 1x1's `replacing_pixels`). `ahead`: the
    next strip, whose first bypass slice the last group's first tile loads (`strips_ahead`)."""
    s = plan.shape
    tiles = plan.tiles
    b.const(R_TT, 0)  # bypass slices: R_TT is the tile's slice, 0 or one slice on
    b.const(R_TO, 0)
    if plan.resident_weights:
        _resident_tiles(b, plan, hw, strip, base, mask_last, last_prefetch, bypass_base, pool, row_loads)
        return
    if tiles > 1:
        b.const(R_WSRC, plan.w_addr + 2 * plan.kernels * s.kernel_words)

    stagger = plan.stagger
    piece: list[Prefetch] = [lambda bb: spread_piece(bb, plan, spread, False)] if spread else []

    def tile(bb: AsmBuilder, mask: int, prefetch: list[Prefetch], load_next: bool, same_strip: bool = True,
             mid: Prefetch | None = None, rows: list[tuple[int, Prefetch]] | None = None,
             next_slice: Strip | None = None, t: int = 0) -> None:
        """Tile t (of a grouped conv; any tile of an ungrouped one: the same code); `load_next`:
        then load the weights at R_WSRC (the next tile's); `same_strip`: the next tile is over
        this strip (its bypass slice loads meanwhile)."""
        if load_next and plan.double_buffer_weights:
            prefetch = [*prefetch, lambda bb_: load_next_weights(bb_, plan, hw)]
        if load_next and stagger:
            prefetch = [*prefetch, lambda bb_: load_next_free(bb_, plan, hw, stagger)]
        kernel_tile(bb, plan, hw, strip, base, group_channels(plan, t), mask, prefetch, bypass_base,
                    load_next and same_strip, mid_row=mid, row_loads=rows, next_slice=next_slice)
        if load_next and not plan.double_buffer_weights:
            # the next kernels overwrite this tile's region: wait for every pending MAC first
            bb.flush_vector_queue(hw, R_TMP)
            if stagger:
                load_next_overlap(bb, plan, stagger)
            else:
                load_next_weights(bb, plan, hw)

    group = tiles_per_slice(plan)  # bypass slices of `group` tiles: the next group's slice loads in a group's first

    def tiles_of_group(bb: AsmBuilder, last: bool, first: int = 0) -> None:
        """A group's tiles from tile `first` (the last group's but its last tile), the advances
        between them."""
        for j in range(group - 1 if last else group):
            tile(bb, full_mask(plan), piece, True, same_strip=j == 0 and not last,
                 next_slice=ahead if last and j == 0 else None, t=first + j)
            if j < group - 1:
                bb.emit(*advance_tile(plan, hw, in_group=True))

    per_tile = s.groups > 1  # each tile its own input channels (group_channels): unrolled
    if group == 1:
        with b.at(ktiles(0, tiles - 2)):
            if per_tile:
                for t in range(tiles - 1):
                    tile(b, full_mask(plan), piece, True, t=t)
                    b.emit(*advance_tile(plan, hw))
            else:
                repeat(b, hw, tiles - 1, lambda bb: tile(bb, full_mask(plan), piece, True),
                        lambda: advance_tile(plan, hw))
    else:
        with b.at(ktiles(0, tiles - group - 1)):
            if per_tile:
                for g in range(tiles // group - 1):
                    tiles_of_group(b, False, g * group)
                    b.emit(*advance_tile(plan, hw))
            else:
                repeat(b, hw, tiles // group - 1, lambda bb: tiles_of_group(bb, False), lambda: advance_tile(plan, hw))
        with b.at(ktiles(tiles - group, tiles - 2)):
            tiles_of_group(b, True, tiles - group)
    reload = more and tiles > 1  # a single kernel tile stays in its bank for every strip
    if reload:
        b.const(R_WSRC, plan.w_addr)  # the next strip starts again at tile 0
    if spread:
        last_prefetch = [lambda bb: spread_piece(bb, plan, spread, True), *last_prefetch]
    if not more and plan.preload:
        last_prefetch = [*last_prefetch, lambda bb: _preload(bb, plan)]
    with b.at(ktiles(tiles - 1, tiles - 1)):
        tile(b, mask_last, last_prefetch, reload, same_strip=False, mid=pool, rows=row_loads,
             next_slice=ahead if group == 1 else None, t=tiles - 1)
    if reload and (plan.double_buffer_weights or stagger):
        b.emit(*toggle(plan, hw))  # the next strip's tile 0 is at the other base


def _serpentine_tiles(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, strip: Strip, si: int, base: int,
                      mask_last: int, more: bool, last_prefetch: list[Prefetch],
                      row_loads: list[tuple[int, Prefetch]] | None) -> None:
    """Every kernel tile over maps strip `si` in `kernel_order` serpentine (`kernel_tile_order`: up in
    even strips, down in odd ones). A strip after the first starts with the tile the previous strip
    ended with and the one before it, both still in their weights slots (double-buffered): neither
    loads again, so across the strip change the bus carries the next strip's maps alone. Each tile
    but the first of a later strip prefetches the next tile of the order into the other slot, the
    last tile none (the next strip starts with it, in the same slot: R_TW does not toggle)."""
    s = plan.shape
    order = kernel_tile_order(plan, si)
    sign = 1 if order[0] < order[-1] else -1
    tile_bytes = 2 * plan.kernels * s.kernel_words
    b.const(R_TT, plan.kernels * order[0])
    b.const(R_TO, plan.tile_step * order[0])
    loaded = 1 if si == 0 else 2  # tiles of the order already in the buffer as the strip starts
    if loaded < plan.tiles:
        b.const(R_WSRC, plan.w_addr + tile_bytes * order[loaded])

    def load_next(bb: AsmBuilder) -> None:
        load_next_weights(bb, plan, hw)  # R_WSRC one tile on: up, the next tile's; down, two tiles back
        if sign < 0:
            bb.const(R_TMP2, -2 * tile_bytes)
            bb.emit(sf.AddOp(R_WSRC, R_WSRC, R_TMP2))

    def mask(t: int) -> int:
        return mask_last if t == plan.tiles - 1 else full_mask(plan)

    def advance() -> list:
        return [*toggle(plan, hw), *advance_channels(plan, sign=sign)]

    def tile(bb: AsmBuilder, t: int, prefetch: list[Prefetch], rows: list[tuple[int, Prefetch]] | None = None) -> None:
        kernel_tile(bb, plan, hw, strip, base, s.c_base, mask(t), prefetch, row_loads=rows)

    with b.at(ktiles(order[0], order[0])):
        tile(b, order[0], [load_next] if loaded == 1 else [])
        b.emit(*advance())
    middle = order[1:-1]
    if middle:
        with b.at(ktiles(middle[0], middle[-1])):
            repeat(b, hw, len(middle), lambda bb: tile(bb, middle[0], [load_next]), advance)
    prefetch = [*last_prefetch, *([lambda bb: _preload(bb, plan)] if not more and plan.preload else [])]
    with b.at(ktiles(order[-1], order[-1])):
        tile(b, order[-1], prefetch, row_loads)


def _paired_strips(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, mask_last: int) -> None:
    """`paired_start` (plan/paired_start.py): the first two strips (banks 0 and 1, both loaded by
    the cold start ahead of the resident kernel tiles 1..T-1) kernel tile by kernel tile, each
    tile over strip 0 then strip 1 (tiles 0..T-2 one counted loop), so both strips compute while
    the later tiles arrive. Strip 2 loads into bank 0 during the last tile over strip 1; strips
    2.. then run as `_kloop`'s others (an ungrouped conv without a pool or a bypass)."""
    s = plan.shape
    first, second, third = plan.strips[0], plan.strips[1], plan.strips[2]
    b.const(R_TW, 0)
    b.const(R_TT, 0)
    b.const(R_TO, 0)
    bank = hw.maps_bank_elements

    def pair(bb: AsmBuilder, mask: int, prefetch: list[Prefetch]) -> None:
        kernel_tile(bb, plan, hw, first, 0, s.c_base, mask, [])
        kernel_tile(bb, plan, hw, second, bank, s.c_base, mask, prefetch)

    with b.at("strips0_1"):
        with b.at(ktiles(0, plan.tiles - 2)):
            repeat(b, hw, plan.tiles - 1, lambda bb: pair(bb, full_mask(plan), []), lambda: next_resident(plan))
        with b.at(ktiles(plan.tiles - 1, plan.tiles - 1)):
            # bank 0 is free once strip 0's last MACs are done: strip 2's rows, each its own LD, so
            # its first row's MACs wait for that row alone (-0.2 k cycles on ResNet-50's n90)
            pair(b, mask_last, [lambda bb, r=r: load_maps(bb, plan, hw, third, 0, None, (r, r + 1))
                                for r in range(third.r0, third.r1)])


def _resident_tiles(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, strip: Strip, base: int, mask_last: int,
                    prefetch: list[Prefetch], bypass_base: int | None, pool: Prefetch | None = None,
                    row_loads: list[tuple[int, Prefetch]] | None = None) -> None:
    """Every kernel tile over one maps strip, the tiles resident (tile t at t x kernel words):
    no weight loads after the first strip (there, with `resident_ahead`, each tile first loads the
    next one, `load_next_resident`), so the next strip's data loads during tile 0, as soon as the
    previous strip's MACs are done with its bank, and has the whole strip to land. Tile 0 and the
    last tile (partial write-back mask; in the last strip the next conv's kernels when they are
    `kernels_preloaded`, into words below it: weights_end.last_kernel_slot; from the last strip's
    tile 0 where they land above every resident tile, weights_end.preload_at_last_strip) are
    peeled around a counted loop; a lone kernel tile is both (computed once, from word 0)."""
    s = plan.shape
    load_tiles = strip == plan.strips[0] and resident_ahead(plan)
    b.const(R_TW, 0)
    if plan.tiles == 1:
        with b.at(ktiles(0, 0)):
            kernel_tile(b, plan, hw, strip, base, s.c_base, mask_last, prefetch, bypass_base, mid_row=pool,
                        row_loads=row_loads)
        return
    if load_tiles:
        b.const(R_WSRC, plan.w_addr + 2 * plan.kernels * s.kernel_words)

    def tile(bb: AsmBuilder, c_off: int, ahead: list[Prefetch]) -> None:
        """Tiles 0..T-2 (the last is peeled): first the next tile's kernels, whose region no
        earlier op of the layer reads, where `load_tiles`."""
        if load_tiles:
            load_next_resident(bb, plan)
        kernel_tile(bb, plan, hw, strip, base, c_off, full_mask(plan), ahead, bypass_base, True)

    carried = [lambda bb: _preload(bb, plan)] if strip == plan.strips[-1] and plan.preload else []
    early = carried and preload_at_last_strip(plan)  # from tile 0: words no tile reads
    with b.at(ktiles(0, 0)):
        tile(b, group_channels(plan, 0), [*prefetch, *carried] if early else prefetch)
        b.emit(*next_resident(plan))
    with b.at(ktiles(1, plan.tiles - 2)):
        if s.groups > 1:  # each tile its own input channels (group_channels): unrolled
            for t in range(1, plan.tiles - 1):
                tile(b, group_channels(plan, t), [])
                b.emit(*next_resident(plan))
        else:
            repeat(b, hw, plan.tiles - 2, lambda bb: tile(bb, s.c_base, []), lambda: next_resident(plan))
    last = [] if early else carried
    with b.at(ktiles(plan.tiles - 1, plan.tiles - 1)):
        kernel_tile(b, plan, hw, strip, base, group_channels(plan, plan.tiles - 1), mask_last, last, bypass_base,
                    mid_row=pool, row_loads=row_loads)


def _residual(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, mask_last: int) -> None:
    """Kloop over strips; per strip: maps at the bottom of the buffer, the strip's bypass rows
    right above, both broadcast to every CU."""
    s = plan.shape
    out_row = s.ow * s.k
    row = s.w * s.cin
    b.const(R_TW, plan.first_slot)
    if plan.stagger:
        b.const(R_PAR, 1)
    if plan.bypass_slices:
        early = False  # this strip's maps and first slice loaded during the previous strip
        for si, strip in enumerate(plan.strips):
            with b.at(f"strip{si}"):
                nxt = plan.strips[si + 1] if si + 1 < len(plan.strips) else None
                if not si:  # the first slice right behind the first rows, the rest of the maps after it
                    _cold_start(b, plan, hw, 0, plan.first_slot, strip,
                                after_first=lambda bb, strip=strip: load_first_slice(bb, plan, hw, strip))
                elif not early:  # the strip replaces the maps every earlier MAC read
                    b.flush_vector_queue(hw, R_TMP)
                    load_maps(b, plan, hw, strip, 0)
                if si and not early:
                    load_first_slice(b, plan, hw, strip)
                ahead = nxt if nxt is not None and strips_ahead(plan, strip, nxt) else None
                rows, first_slice = None, []
                if nxt is None and plan.preload_maps:  # the next conv's first strip, as this tile frees its words
                    # (a 1x1's points are pixels, a k x k conv's output rows: plan/weights_end.preload_maps_loads)
                    rows = [(p, lambda bb, at=at, src=src, n=n: load_broadcast(bb, hw, at, src, n))
                            for p, at, src, n in plan.preload_maps]
                if ahead is not None and (s.kh, s.kw) == (1, 1):
                    rows = replacing_pixels(plan, hw, strip, ahead)
                elif ahead is not None:  # a k x k conv's last tile: rows as freed, the slice after 16 ops
                    rows = replacing_rows(plan, hw, strip, ahead)
                    first_slice = [lambda bb, nxt=ahead: load_first_slice(bb, plan, hw, nxt)]
                _strip_tiles(b, plan, hw, strip, 0, mask_last, nxt is not None, first_slice,
                             bypass_base=plan.slice_bases[0] - strip.y0 * s.ow * plan.kernels,
                             row_loads=rows, ahead=ahead if first_slice == [] else None)
                early = ahead is not None
        return
    double = len(plan.strips) > 1 and plan.strips[1].bank == 1  # halves of the buffer in turn
    half = hw.maps_buffer_elements // 2

    def load(bb: AsmBuilder, strip: Strip) -> None:
        base = strip.bank * half
        load_maps(bb, plan, hw, strip, strip.bank if double else 0, base)
        load_bypass_rows(bb, plan, hw, base + (strip.r1 - strip.r0) * row - strip.y0 * out_row, strip.y0, strip.y1)

    for si, strip in enumerate(plan.strips):
        with b.at(f"strip{si}"):
            base = strip.bank * half if double else 0
            byp = base + (strip.r1 - strip.r0) * row  # right above this strip's maps
            more = si + 1 < len(plan.strips)
            if si and not double:
                b.flush_vector_queue(hw, R_TMP)
                load(b, strip)
            if si == 0:
                _cold_start(b, plan, hw, 0, plan.first_slot, strip, byp - strip.y0 * out_row)
            prefetch: list[Prefetch] = []
            spread: list[tuple[int, int, int]] = []
            if more and double:  # the next strip's maps and bypass rows, in pieces beside the kernel tiles
                nxt = plan.strips[si + 1]
                at = nxt.bank * half
                spread = [(at, plan.in_addr + 2 * nxt.r0 * row, (nxt.r1 - nxt.r0) * row),
                          (at + (nxt.r1 - nxt.r0) * row, plan.bypass_addr + 2 * nxt.y0 * out_row,
                           (nxt.y1 - nxt.y0) * out_row)]
                if not spreads(plan, spread):
                    spread = []
                    prefetch = [lambda bb, nxt=nxt: load(bb, nxt)]
            _strip_tiles(b, plan, hw, strip, base, mask_last, more, prefetch, bypass_base=byp - strip.y0 * out_row,
                         spread=spread)


def resident_ahead(plan: ConvPlan) -> bool:
    """Whether a resident conv loads its kernel tiles 1..T-1 one tile ahead in its first strip
    (each tile's code first loads the next tile) rather than all at once behind the first strip:
    where that strip's MACs need the next bypass slices the program issues after it. The bus
    serves loads in the order they are requested, so behind all the tiles' kernels at once (338 KB
    for ResNet-50's 3x3/2 part on 16 CUs) those waited, and with them the instruction-cache bank
    loads queued on the same unit: n81.part1 -7.5 k cycles, the 14² 256 -> 1024 residual 1x1s
    -4.0 k each. Elsewhere the kernels go at once: a tile's kernels loaded beside the previous
    tile's short MACs leave the bus idle between them (ResNet-50's 14² 1x1 1024->256 on 16 CUs,
    +3.4 k), and so does a gathered conv without bypass slices: one ahead ResNet-50's 14² 1x1
    channel parts on 8 CUs at 4.2 GB/s ran +1.3 to +3.4 k each (the model +0.10 ms against stop 52;
    at once -0.09 ms), a strided 1x1 512->128 over 28² on 8 CUs +12%, 1024->64 on the default
    machine +6% (tests/test_resident_loads.py, tests/test_audit_s53.py)."""
    return plan.resident_weights and plan.tiles > 1 and plan.bypass_slices \
        and not plan.paired_start  # a paired start loads its two strips first, then every tile at once


def _cold_start(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, t: int, wbuf: int, strip: Strip,
                bypass_base: int | None = None, after_first: Prefetch | None = None,
                second: Strip | None = None) -> None:
    """The layer's first kernel tile and first maps strip, then a resident conv's other kernel
    tiles, all at once (or in its first strip, one tile ahead: `resident_ahead`). After a max pool or a
    conv in a whole-model program (`weights_before_fence`) the first kernels load while it runs and
    only the maps wait for its vector ops (the fence); either way the kernels load first so the
    first MACs wait for one maps piece, not the whole strip. `after_first`: more the first MACs
    need (a bypass-slice conv's first slice), loaded right after the first piece. `second`: the
    second strip, into bank 1 right behind the first, ahead of the resident tiles (`paired_start`)."""
    if not plan.kernels_preloaded:  # else the previous conv's last kernel tile loaded them (`_preload`)
        load_weights(b, plan, hw, t, wbuf)
    if plan.weights_before_fence:
        b.flush_vector_queue(hw, R_TMP)
    load_biases(b, plan, hw)
    _first_strip(b, plan, hw, strip, bypass_base, after_first)
    if second is not None:
        load_maps(b, plan, hw, second, 1)
    if plan.resident_weights and not resident_ahead(plan):
        load_resident_weights(b, plan, hw)


def _first_strip(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, strip: Strip, bypass_base: int | None,
                 after_first: Prefetch | None) -> None:
    """The first strip in pieces, or with `maps_preloaded` (the previous conv's last kernel tile
    loaded it) only what else the first MACs need (a bypass-slice conv's first slice) and then the
    rows that tile left to it (`maps_left`: the strip's last, behind this layer's fence)."""
    if not plan.maps_preloaded:
        load_first_strip(b, plan, hw, strip, bypass_base, after_first)
        return
    if after_first is not None:
        after_first(b)
    for _, at, src, n in plan.maps_left:
        load_broadcast(b, hw, at, src, n)


def _preload(b: AsmBuilder, plan: ConvPlan) -> None:
    """The next conv's kernel tile 0 (`plan.preload`, its `kernels_preloaded`), a prefetch of this
    conv's last kernel tile: into each vMAC's slot this tile does not read (the next conv's
    `first_slot`). R_WSRC walks nothing more in the last tile: the registers of the tiles' own
    next-weights prefetch (`load_next_weights`), which every kernel tile's code leaves free."""
    preload_next_kernels(b, plan, R_WSRC)
