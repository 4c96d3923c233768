"""
Which weights-buffer words a conv's last vector ops read, so that the next layer's first kernels
may load before the fence between them (allocate-dram's `weights_before_fence`).

The fence exists because every layer's code starts on buffer word 0 and the previous layer's
last MACs may still read there. A double-buffered COOP conv alternates its kernel tiles between
slot 0 and slot `w_slot` (codegen/tile_steps.py: `toggle`, one toggle per new kernel tile), so where
its last tile sits follows from the number of kernel-tile changes: S·T − 1 of them in Kloop (each
of the S strips runs the T tiles, the next strip's tile 0 in the other slot; under `kernel_order`
serpentine a strip starts with the tile the previous one ended with, in its slot: S − 1 fewer) and
in a residual conv (Kloop over strips), T − 1 in Mloop (each tile once, the strips inside it). When that slot is
`w_slot`, words [0, w_slot) are no longer read, and a next layer whose first kernel tile fits
there loads it at once (when it is slot 0, a plain Kloop conv after it starts in its second slot
instead, `first_slot`), overlapping the previous layer's tail (its maps loads still wait for
the fence). Layer starts were the largest CU-idle cause in ResNet-18 (5-6.6 k cycles each at
its 14² channel parts, of which the first kernels' load is about 2 k).

Loaded at the layer's start, those kernels still arrive after the previous layer's last MACs:
the control pipeline reaches the layer's code only a vector queue's depth of ops before the
previous layer ends, so a 37-51 KB kernel tile (2-3 k cycles on the bus) held up the first MAC
(ResNet-18's layer4.1.conv2.part0: kernels from its cycle 46 to 3,158, first MAC at 3,537).
`kernels_preloaded` moves that load into the previous conv's last kernel tile, as one more of
its prefetches (`preload_loads`): the words are free there for the same reason, and the tile
computes for thousands of cycles while they land.

Where that tile pays for it is allocate-dram's price (`preload_pays`): the preload's LDs and
their address steps are issued by the control pipeline, between the tile's MACs. A tile whose
MACs outlast the issue of its pixel loops (CU-bound) hides them; one whose control pipeline is
the limit already (short traces: a 1x1 conv over 16-32 channels, a block-diagonal group's
16-word taps) runs them on top, and the CUs wait: the previous layer runs slower by about the
LDs' issue (SqueezeNet's 1x1 squeezes +47-103 cycles, DenseNet-121's grouped 1x1s +50-345).

A resident conv reads none of the words above its T resident tiles, so where the preload lands
there it is issued from the last strip's first tile, not its last (`preload_at_last_strip`): a last
tile shorter than the preload's bus time otherwise ran longer by the rest of it (AlexNet-OWT's
conv1: +2,009 cycles carrying conv2's 52 KB in its last tile, +66 from the strip's first).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from snowir.dialects.tile.decisions import kernel_tile_order
from snowir.dialects.tile.refusals import first_slot_refusal
from snowir.hw import SnowflakeConfig
from snowir.plan.issue import issue_cycles
from snowir.plan.shapes import TRACE_CHUNK, ConvPlan, indp_kernel_words, input_rows, kernel_vmacs, plan_machine

PRELOAD_ISSUE_PER_LD = 4
"""Control-pipeline cycles a preload LD takes in the previous conv's last tile: its address
step (an ADDI), the LD, and the step's result latency the LD waits for (measured 61 cycles for
SqueezeNet's 16 LDs and their 2 constants, `--profile`'s `preload_next` part)."""


def last_kernel_slot(plan: ConvPlan, hw: SnowflakeConfig) -> tuple[int, int] | None:
    """The weights words [lo, hi) of every vMAC the conv's last kernel tile occupies, when its
    code generator's slot sequence is the plain one (COOP, kernels loaded tile by tile or resident,
    not staggered, not in chunks, one column band); None otherwise (read as: any word).
    A fused max pool changes nothing here: its ring sits in the maps buffer and the MAXs after the
    last kernel tile read no weights (AlexNet's conv3 then loads its kernels early)."""
    s = plan.shape
    if plan.indp and plan.cu_split == "cols" and plan.double_buffer_weights and not plan.resident_weights \
            and not plan.stagger and plan.tiles > 1:
        # codegen/indp_columns.py: a new slot whenever the next item's tile is another
        items = [t for g in range(len(plan.strips)) for t in kernel_tile_order(plan, g)]
        lo = (sum(a != b for a, b in zip(items, items[1:])) % 2) * plan.w_slot
        return lo, lo + indp_kernel_words(s, hw)
    if plan.resident_weights and plan.loop_order == "Kloop" and plan.tiles > 1 \
            and not (plan.indp or plan.row_groups or plan.column_tiled):
        # codegen/conv._resident_tiles: every strip runs tiles 0..T-1 from word 0, tile t at t x K
        return (plan.tiles - 1) * s.kernel_words, plan.tiles * s.kernel_words
    if plan.indp or plan.resident_weights or plan.stagger or plan.column_tiled \
            or s.kernel_words > hw.weights_buffer_elements:
        return None
    if plan.tiles == 1 or not plan.double_buffer_weights:  # one tile stays where it starts (first_slot)
        return plan.first_slot, plan.first_slot + s.kernel_words
    mloop = plan.loop_order == "Mloop" and plan.bypass_addr is None  # a residual conv is Kloop over strips
    toggles = plan.tiles - 1 if mloop else len(plan.strips) * plan.tiles - 1
    if plan.kernel_order == "serpentine":  # a strip starts in the slot the previous one ended in
        toggles -= len(plan.strips) - 1
    lo = ((toggles + (plan.first_slot != 0)) % 2) * plan.w_slot
    return lo, lo + s.kernel_words


def first_kernel_words(plan: ConvPlan, hw: SnowflakeConfig) -> int:
    """The weights words [0, n) of each vMAC a conv's cold start loads before the fence: its kernel
    tile 0 (resident tiles 1..T-1 load after the fence, behind the first strip or in it:
    codegen/conv._cold_start, `resident_ahead`)."""
    if plan.indp:
        return indp_kernel_words(plan.shape, hw)
    return plan.shape.kernel_words


def weights_before_fence_refusal(previous: ConvPlan, plan: ConvPlan, hw: SnowflakeConfig) -> str | None:
    """Why `plan`'s first kernels may not load before the fence behind the conv `previous`
    (None: they may): the words they load must lie below every word `previous`'s last tile reads."""
    if plan.shape.kernel_words > hw.weights_buffer_elements:
        return "its kernels stream in chunks (nothing loads before the fence)"
    last = last_kernel_slot(previous, hw)
    if last is None:
        return "the previous conv's last kernel tile is not in a known slot (INDP, resident, staggered, chunked, " \
               "column bands or a fused pool)"
    n = first_kernel_words(plan, hw)
    first = plan.first_slot
    if first < last[1] and last[0] < first + n:
        return f"its first kernels load weights words [{first}, {first + n}), which the previous conv's last kernel " \
               f"tile still reads ([{last[0]}, {last[1]}))"
    return None


def first_slot_after(previous: ConvPlan, plan: ConvPlan, hw: SnowflakeConfig) -> int:
    """The `first_slot` under which `plan`'s first kernels may load before the fence behind the conv
    `previous`: 0 (as it is) unless the previous conv's last kernel tile reads slot 0 and `plan` can
    start in its second slot, which the previous tile leaves free."""
    second = replace(plan, first_slot=plan.w_slot)
    if weights_before_fence_refusal(previous, plan, hw) is None or not plan.w_slot \
            or first_slot_refusal(second) is not None or weights_before_fence_refusal(previous, second, hw) is not None:
        return plan.first_slot
    return plan.w_slot


def kernels_preloaded_refusal(previous: ConvPlan, plan: ConvPlan, hw: SnowflakeConfig) -> str | None:
    """Why the previous conv's last kernel tile may not load `plan`'s first kernel tile (None: it
    may): weights_before_fence's rule, a previous conv whose last tile is a kernel_tile prefetch
    point of codegen/conv.py (not a row-group program), and a conv whose cold start is the only
    load of its tile 0 (COOP, not in column bands, which load tile 0 per band; a resident conv's
    other tiles load after its fence)."""
    why = weights_before_fence_refusal(previous, plan, hw)
    if why is not None:
        return why
    if previous.row_groups:
        return "the previous conv's CUs split rows (its program places no prefetch for another layer)"
    if plan.indp or plan.row_groups or plan.column_tiled or plan.tiles < 1:
        return "only a COOP conv that loads its kernel tile 0 once (not INDP, row groups or column bands) has it " \
               "preloaded"
    return None


def preload_loads(plan: ConvPlan, hw: SnowflakeConfig) -> tuple[tuple[int, int, int, int], ...]:
    """`plan`'s kernel tile 0 as the previous conv loads it: (DRAM byte, words, vMAC, weights word)
    per kernel, into its `first_slot` of the vMAC (codegen/weight_loads.load_weights' loads)."""
    k = plan.shape.kernel_words
    return tuple((plan.w_addr + 2 * j * k, k, vmac, plan.first_slot)
                 for j, vmac in enumerate(kernel_vmacs(plan, hw, plan.shape.k if plan.per_cu else plan.kernels)))


def preload_pays(previous: ConvPlan, plan: ConvPlan, hw: SnowflakeConfig) -> bool:
    """Whether the pair gains from the preload and `previous`'s last kernel tile issues it without
    running longer. The tile: its CU cycles (its MACs over the last strip) exceed the issue of its
    pixel loops (plan/issue.py, the same tile's share) by a quarter more (the issue count is an
    estimate: SqueezeNet's 3x3 over 16 channels, 10% over it, ran 61 cycles slower) and twice the
    preload's issue (`PRELOAD_ISSUE_PER_LD` a vMAC it loads, two constants), and it queues a vector
    queue's depth of ops before the prefetch point, so the loads need no flush (which drains the
    queue). A tile that is issue bound runs the LDs on top of its own instructions and delays the
    next layer's marker by them. The pair: `plan`'s kernel tile 0 takes longer on the bus than
    twice that issue; a smaller one (DenseNet-121's 1 KB block-diagonal tiles) lands behind the
    fence anyway at weights_before_fence, and preloaded it gained nothing (-100 to +937 cycles).
    Where the price says no, the pair stays at weights_before_fence."""
    s = previous.shape
    strip = previous.strips[-1]
    share = (strip.y1 - strip.y0) / s.oh  # the last strip's part of the output rows
    macs = s.valid_macs() / (s.k * hw.lanes) * share  # the tile's CU cycles: its kernels' MACs run side by side
    issue = issue_cycles(previous, hw) / previous.tiles * share
    loads = preload_loads(plan, hw)
    cost = 2 + PRELOAD_ISSUE_PER_LD * len(loads)
    bus = hw.ld_startup_cycles + 2 * sum(words for _, words, *_ in loads) / hw.dram_bytes_per_cycle
    traces = (strip.y1 - strip.y0) * s.ow
    return traces > hw.vector_queue_depth and macs >= 1.25 * issue + 2 * cost and bus >= 2 * cost


def preload_at_last_strip(plan: ConvPlan) -> bool:
    """Whether a resident conv (codegen/conv._resident_tiles: tile t at t x K words, none loaded
    again after its first strip) issues the next conv's kernel tile 0 (`plan.preload`) from its
    last strip's tile 0 rather than its last tile: where every word the preload lands on lies above
    the resident tiles' T x K, no op of the conv reads them, so the loads have the last strip's T
    tiles of MACs to land in instead of one (AlexNet-OWT's conv1: conv2's 52 KB tile is 3.1 k cycles
    on the bus against a 1.2 k-cycle last tile; loaded there, its pool's last ring loads queued
    behind it, conv1 +2,009 cycles against no preload, +66 from its first tile). Not in a first
    strip that loads the tiles one ahead (`resident_ahead`: R_WSRC walks them there)."""
    s = plan.shape
    return bool(plan.preload) and plan.resident_weights and plan.tiles > 1 and len(plan.strips) > 1 \
        and all(word >= plan.tiles * s.kernel_words for *_, word in plan.preload)


def _plain_kloop(plan: ConvPlan) -> bool:
    """A COOP conv of codegen/conv.py's plain Kloop program (`_kloop`): its last kernel tile runs
    the last strip's output rows in order and takes row loads (`kernel_tile`'s `row_loads`)."""
    s = plan.shape
    return not (plan.indp or plan.row_groups or plan.bypass_addr is not None or s.groups > 1 or plan.column_tiled
                or plan.pool is not None or plan.loop_order != "Kloop" or s.kernel_words > 2 * plan.w_slot > 0)


def _sliced_1x1(previous: ConvPlan) -> bool:
    """A bypass-slice 1x1 conv of one strip: its last tile reads its maps pixel by pixel from word 0
    (`codegen/bypass_slices.slice_tile`), its preloads keyed by pixel."""
    p = previous.shape
    return previous.bypass_slices and (p.kh, p.kw) == (1, 1) and len(previous.strips) == 1 \
        and previous.gather is None and not p.c_base and not previous.indp and p.c <= TRACE_CHUNK


def maps_preloaded_refusal(previous: ConvPlan, plan: ConvPlan, hw: SnowflakeConfig) -> str | None:
    """Why the previous conv's last kernel tile may not load `plan`'s first maps strip (None: it
    may). The previous conv: a bypass-slice 1x1 conv of one strip (its last tile frees its maps pixel
    by pixel from word 0), a bypass-slice k x k conv of one strip (row by row: `kernel_tile`'s row loads), each
    with `plan`'s strip below its slices and bias block; or a plain Kloop conv whose last strip sits
    in maps bank 1 (bank 0 is free). `plan`: a COOP conv whose cold start loads its first strip
    whole rows from word 0 (not gathered, banded, grouped over blocks, pooling or row groups; a
    residual conv only with bypass slices, whose first slice it still loads), reading the previous
    conv's output row for row or another tensor."""
    s = plan.shape
    if plan.indp or plan.row_groups or plan.column_tiled or plan.gather is not None or plan.in_row \
            or s.block_maps or (plan.bypass_addr is not None and not plan.bypass_slices) or plan.pool is not None \
            or s.kernel_words > hw.weights_buffer_elements:
        return "only a COOP conv loading whole rows of its own input from word 0 (a residual one: with bypass " \
               "slices) has its first strip preloaded"
    first = plan.strips[0]
    words = (first.r1 - first.r0) * s.w * s.cin + s.overread
    # [fix] one strip: after a bypass-slice conv of several strips (CenterFace's 960 -> 160 residual
    # 1x1, five strips) the preload made that conv's own result wrong (tests/test_strip_changes.py)
    sliced = previous.bypass_slices and not previous.indp and previous.bypass_row == 0 and len(previous.strips) == 1
    p = previous.shape
    if sliced and (p.kh, p.kw) == (1, 1) and not _sliced_1x1(previous):
        # [fix] a 1x1's last tile frees its maps pixel by pixel only when it reads whole pixels of its own
        # input, one pipelined trace each (`_sliced_1x1`): over a channel slice (gathered pixels) the
        # preload's loads, keyed by row, ran as if by pixel and overwrote maps the tile still read (a
        # Split's second half, a 1x1 taking the first half's as its bypass: wrong result); over more
        # than one trace a pixel its pixels take no row loads (ResNet-50's 1024 -> 2048 downsample taking
        # the residual add, on one CU, failed in codegen)
        return ("a bypass-slice 1x1 over a channel slice or more than one trace a pixel frees its maps in no "
                "order the preload's loads can follow")
    if sliced:
        room = min(previous.slice_bases[0], plan_machine(previous, hw).maps_buffer_elements)
        if words > room:
            return f"its first strip's {words} words reach the previous conv's slices or bias block (word {room})"
    elif not _plain_kloop(previous) or previous.strips[-1].bank != 1:
        return "the previous conv is neither a bypass-slice conv nor a plain Kloop conv whose last strip sits in " \
               "maps bank 1 (its last tile frees no words in order)"
    elif words > plan_machine(previous, hw).maps_bank_elements:
        return f"its first strip's {words} words exceed the previous conv's maps bank 0"
    if not _sliced_1x1(previous) and (s.kh, s.kw) != (1, 1):
        # [choice] measured: ResNet-50's 3x3 convs after a 1x1 ran 0.7-2.2 k cycles slower with the
        # strip loading behind the previous conv's last tile than in pieces at their own start
        return "after a conv its last tile's rows free, only a 1x1 conv's first strip is preloaded"
    if _rows_of(previous, plan) is None:
        return "it reads the previous conv's output other than row for row"
    return None


def _rows_of(previous: ConvPlan, plan: ConvPlan) -> bool | None:
    """True: `plan` reads the previous conv's output row for row (input row r = output row r);
    False: another tensor (nothing of it the previous conv writes); None: neither."""
    s, p = plan.shape, previous.shape
    out_bytes = 2 * p.oh * p.ow * p.k
    in_bytes = 2 * s.h * s.w * s.cin
    if plan.in_addr + in_bytes <= previous.out_addr or previous.out_addr + out_bytes <= plan.in_addr:
        return False
    same = plan.in_addr == previous.out_addr and (s.h, s.w, s.cin) == (p.oh, p.ow, p.k) and not previous.out_row \
        and not previous.out_pixel and not previous.out_tile
    return True if same else None


def preload_maps_loads(previous: ConvPlan, plan: ConvPlan) -> tuple[tuple[int, int, int, int], ...]:
    """`plan`'s first maps strip as the previous conv's last tile loads it, per input row: (the
    point after which it may load, -1: at once; maps word; DRAM byte; words). A bypass-slice 1x1
    conv's point is its pixel whose maps words the row lands on last; another conv's, its output row
    that writes the row's data (reading the previous conv's output) or that last reads the maps words
    the row lands on (a bypass-slice k x k conv's strip from word 0), whichever comes later."""
    s, strip = plan.shape, plan.strips[0]
    row = s.w * s.cin
    own = _rows_of(previous, plan)
    if _sliced_1x1(previous):
        pixels = previous.shape.oh * previous.shape.ow
        out = []
        for j in range(strip.r1 - strip.r0):
            last = -(-(j + 1) * row // previous.shape.cin) - 1
            point = min(last, pixels - 1) if j * row < pixels * previous.shape.cin else -1
            if own:
                # [fix] the row's data: the last tile's pixels of its output row write it. A row past
                # the previous conv's maps words (its channels expanded, C -> 4C over 8 x 8 on 16 CUs)
                # was loaded at once, its last tile's channels not yet written back (wrong result)
                point = max(point, (strip.r0 + j + 1) * previous.shape.ow - 1)
            out.append((point, j * row, plan.in_addr + 2 * (strip.r0 + j) * row, row))
        return tuple(out)
    p, last_strip = previous.shape, previous.strips[-1]
    reads: list[tuple[int, int, int]] = []  # (first word, end word, last output row reading them)
    if previous.bypass_slices:  # its last strip's maps rows from word 0, each freed by its last reader
        prow = p.w * p.cin
        last_reader: dict[int, int] = {}
        for y in range(last_strip.y0, last_strip.y1):
            lo, hi = input_rows(p.h, p.kh, p.sy, p.pt, y, y + 1)
            for r in range(lo, hi):
                last_reader[r] = y
        reads = [((r - last_strip.r0) * prow, (r - last_strip.r0 + 1) * prow, y) for r, y in last_reader.items()]
    out = []
    for j in range(strip.r1 - strip.r0):
        lo, hi = j * row, (j + 1) * row
        point = strip.r0 + j if own else -1
        point = max([point, *(y for a, b, y in reads if a < hi and lo < b)])
        out.append((point, lo, plan.in_addr + 2 * (strip.r0 + j) * row, row))
    return tuple(out)


SLICE_PIXEL_OPS = 2
"""Vector ops a bypass-slice 1x1 pixel issues (a VMOV and a MAC: codegen/bypass_slices.py)."""


def _late(previous: ConvPlan, hw: SnowflakeConfig) -> Callable[[int], bool]:
    """Whether a preload row of point p (`preload_maps_loads`) comes among the last vector queue's
    depth of `previous`'s last kernel tile's ops, so that its code could issue it only behind a
    flush after the tile: the generators' own count (codegen/bypass_slices._tile_pixels: a row
    `lag` pixels after its point; codegen/pixels.kernel_tile: 16 ops after its point's row, each
    row one block, the ops `ops_per_row` counts; an estimate that errs only moves a row between
    the two loads, both correct)."""
    s, strip = previous.shape, previous.strips[-1]
    if _sliced_1x1(previous):
        n = (strip.y1 - strip.y0) * s.ow
        return lambda p: p + 1 + hw.vector_queue_depth // SLICE_PIXEL_OPS > n
    chunks = -(-s.kw * s.c // TRACE_CHUNK)
    done: dict[int, int] = {}
    issued = 2
    for y in range(strip.y0, strip.y1):
        iy = y * s.sy - s.pt
        rows = min(s.kh, s.h - iy) - max(0, -iy)
        issued += s.ow * max(1, rows * chunks * (s.kw if s.cin != s.c else 1))
        done[y] = issued
    return lambda p: p >= strip.y0 and done.get(p, issued) + hw.vector_queue_depth > issued


def preload_maps_split(previous: ConvPlan, plan: ConvPlan, hw: SnowflakeConfig) -> tuple[
        tuple[tuple[int, int, int, int], ...], tuple[tuple[int, int, int, int], ...]]:
    """`plan`'s first strip under `maps_preloaded` (`preload_maps_loads`), parted: the rows
    `previous`'s last kernel tile loads while it computes, and those whose point comes among its
    last vector queue's depth of ops (a k x k conv's last output row, whose data its last MACs
    write): those `plan`'s cold start loads, behind its fence. Loaded behind a flush at the end of
    `previous` instead, they held its next-layer marker back by the queue's drain, which the fence
    waits for anyway (ResNet-50's 14² 3x3 parts before the residual 1x1s: +311 cycles each against
    no preload, +55 now, the pair 343 cycles faster than with the flush)."""
    late = _late(previous, hw)
    loads = preload_maps_loads(previous, plan)
    return tuple(r for r in loads if not late(r[0])), tuple(r for r in loads if late(r[0]))
