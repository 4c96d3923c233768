"""
INDP code generation for convolutions with few input channels (C17 §4, §5.3).

Why: with C < 16 input channels a COOP trace (kw·C words) fills few of a vMAC's 16 lanes and
lasts one or two cycles, shorter than a pixel's loop bookkeeping (ResNet's 7x7x3 conv1 ran at
24% MAC utilisation in COOP). In INDP the 16 MACs of a vMAC take 16 kernels and the map value
is broadcast: a trace of L words takes L cycles with every lane busy.

Mapping: weights broadcast across CUs (LD select 16+v), so a kernel tile is 64 kernels — vMAC v
holds kernels 64t+16v .. 64t+16v+15, interleaved (`w[16i + k]`, C17 §5.3 "in INDP we need to
group 16 kernels in one vMAC weight buffer") — and the four CUs work on different output rows
of a row group: CU c computes R rows starting c·R rows below the group's first, from its own
input rows (LD select c) stored at the same buffer address, and `vmov stride` puts its outputs
R rows further (S = 2·R·OW·K bytes). Row groups alternate maps banks (double buffering). Rows
whose kernel rows are clipped by padding form single-row groups on CU 0 alone, so padding taps
are still never computed.
"""

from __future__ import annotations

import math

import numpy as np

from snowir.asm_builder import AsmBuilder
from snowir.conv_codegen import load_runs
from snowir.conv_pixels import R_LEN, R_SRC, R_TMP, R_TO, R_TT, R_TW, Prefetch, _kernel_tile
from snowir.conv_plan import ConvPlan, ConvShape, LoweringError, Strip, input_rows, weights_slot_elements
from snowir.dialects import snowflake_asm as sf
from snowir.hw import SnowflakeConfig

INDP_GROUP_TARGET = 4  # aim for at least this many row groups, so the first (exposed) load is small


def indp_kernel_words(s: ConvShape, hw: SnowflakeConfig) -> int:
    """Weights-buffer words of one vMAC's 16 interleaved kernels plus their 16 biases."""
    n = hw.lanes * (s.kh * s.kw * s.c + 1)
    return n + n % 2


def kernels_per_tile(hw: SnowflakeConfig) -> int:
    return hw.vmacs_per_cu * hw.lanes


def indp_fits(s: ConvShape, hw: SnowflakeConfig, bypass: bool) -> bool:
    return (s.groups == 1 and s.cin == s.c and not bypass and s.k % hw.lanes == 0
            and indp_kernel_words(s, hw) <= hw.weights_buffer_elements)


def choose_mode(s: ConvShape, hw: SnowflakeConfig, bypass: bool, mode: str | None = None) -> str:
    """COOP, or INDP for few input channels (C < 16) when INDP keeps at least as many lanes busy
    (64 kernels per tile vs kw·C words per COOP trace) and 16 kernels fit a weights buffer."""
    if mode == "INDP" and not indp_fits(s, hw, bypass):
        why = [text for bad, text in (
            (s.groups != 1 or s.cin != s.c, "an ungrouped conv over its whole input"),
            (bypass, "no residual bypass"),
            (s.k % hw.lanes != 0, f"output channels a multiple of {hw.lanes} (not {s.k})"),
            (indp_kernel_words(s, hw) > hw.weights_buffer_elements,
             f"16 interleaved kernels within the weights buffer ({indp_kernel_words(s, hw)} words > "
             f"{hw.weights_buffer_elements})")) if bad]
        raise LoweringError(f"INDP needs {' and '.join(why)}")
    if mode in ("COOP", "INDP"):
        return mode
    if mode is not None:
        raise LoweringError(f"mode must be COOP, INDP or auto, not '{mode}'")
    if not indp_fits(s, hw, bypass) or s.c >= hw.lanes:
        return "COOP"
    trace = s.kw * s.c
    coop_lanes = trace / (hw.lanes * math.ceil(trace / hw.lanes))
    tile = kernels_per_tile(hw)
    indp_lanes = s.k / (tile * math.ceil(s.k / tile))
    return "INDP" if indp_lanes >= coop_lanes else "COOP"


def pack_indp(w: np.ndarray, b: np.ndarray, hw: SnowflakeConfig) -> np.ndarray:
    """(K, C, kh, kw) weights + (K,) bias -> per tile, per vMAC: taps (ky, kx, c) x 16 kernels
    interleaved, then the 16 biases."""
    k, c, kh, kw = w.shape
    lanes, tile = hw.lanes, kernels_per_tile(hw)
    tiles = -(-k // tile)
    taps = kh * kw * c
    s_words = lanes * (taps + 1)
    s_words += s_words % 2
    full = np.zeros((tiles * tile, taps), np.int16)
    full[:k] = w.transpose(0, 2, 3, 1).reshape(k, taps)
    bias = np.zeros(tiles * tile, np.int16)
    bias[:k] = b
    out = np.zeros((tiles * hw.vmacs_per_cu, s_words), np.int16)
    groups = full.reshape(tiles * hw.vmacs_per_cu, lanes, taps)
    out[:, :taps * lanes] = groups.transpose(0, 2, 1).reshape(-1, taps * lanes)
    out[:, taps * lanes:taps * lanes + lanes] = bias.reshape(-1, lanes)
    return out.ravel()


def rows_per_cu_fit(s: ConvShape, hw: SnowflakeConfig) -> int:
    """Output rows one CU's input rows for can hold in a maps bank."""
    row = s.w * s.cin
    bank = hw.maps_bank_elements
    fit = (bank // row - s.kh) // s.sy + 1
    if fit < 1:
        raise LoweringError(f"{s.kh} input rows of {row} words do not fit a {bank}-word maps bank "
                            f"(column tiling is not implemented yet)")
    return fit


def default_rows_per_cu(s: ConvShape, hw: SnowflakeConfig) -> int:
    """Output rows per CU of a row group: as many as fit a bank, at most a quarter of the
    interior rows per CU, so at least INDP_GROUP_TARGET groups."""
    top, bottom = interior_rows(s)
    return max(1, min(rows_per_cu_fit(s, hw), (bottom - top) // (hw.cus * INDP_GROUP_TARGET)))


def interior_rows(s: ConvShape) -> tuple[int, int]:
    """Output rows [top, bottom) whose kernel rows are not clipped by padding."""
    interior = [y for y in range(s.oh) if y * s.sy - s.pt >= 0 and y * s.sy - s.pt + s.kh <= s.h]
    return (interior[0], interior[-1] + 1) if interior else (s.oh, s.oh)


def indp_groups(s: ConvShape, hw: SnowflakeConfig, y0: int, y1: int, per_cu: int) -> list[tuple[int, int, int]]:
    """Output rows [y0, y1) as row groups (first row, rows per CU, CUs): up to `per_cu` rows on
    each of the CUs; rows whose kernel rows padding clips are single-row groups on CU 0 alone."""
    top, bottom = interior_rows(s)
    lo, hi = max(y0, min(top, y1)), min(y1, max(bottom, y0))
    groups: list[tuple[int, int, int]] = [(y, 1, 1) for y in range(y0, lo)]
    y = lo
    while y < hi:
        left = hi - y
        r = min(per_cu, left // hw.cus) or 1
        cus = min(hw.cus, left // r)
        groups.append((y, r, cus))
        y += r * cus
    return groups + [(y, 1, 1) for y in range(max(hi, lo), y1)]


def group_strips(s: ConvShape, groups: list[tuple[int, int, int]]) -> list[Strip]:
    """The maps tiles of row groups: rows [y0, y0 + r x CUs), the input rows of all its CUs."""
    strips = []
    for i, (y0, r, cus) in enumerate(groups):
        r0, _ = input_rows(s.h, s.kh, s.sy, s.pt, y0, y0 + r)
        _, r1 = input_rows(s.h, s.kh, s.sy, s.pt, y0 + (cus - 1) * r, y0 + cus * r)
        strips.append(Strip(y0, y0 + r * cus, r0, r1, i % 2))
    return strips


def plan_indp(s: ConvShape, hw: SnowflakeConfig, in_addr: int, w_addr: int, out_addr: int,
              rows_per_cu: int | None = None) -> ConvPlan:
    """Row groups of `rows_per_cu` output rows per CU (default_rows_per_cu), Kloop."""
    per_cu = default_rows_per_cu(s, hw) if rows_per_cu is None else max(1, min(rows_per_cu_fit(s, hw), rows_per_cu))
    groups = indp_groups(s, hw, 0, s.oh, per_cu)
    tiles = -(-s.k // kernels_per_tile(hw))
    double = indp_kernel_words(s, hw) <= weights_slot_elements(hw)
    return ConvPlan(s, tuple(group_strips(s, groups)), tiles, kernels_per_tile(hw), double, in_addr, w_addr, out_addr,
                    "INDP", "Kloop", cu_rows=tuple(r for _, r, _ in groups))


def group_of(plan: ConvPlan, gi: int) -> tuple[int, int, list[tuple[int, int]]]:
    """(rows per CU, CUs, each CU's input rows) of row group `gi`."""
    s, strip, r = plan.shape, plan.strips[gi], plan.cu_rows[gi]
    cus = (strip.y1 - strip.y0) // r
    rows = [input_rows(s.h, s.kh, s.sy, s.pt, strip.y0 + c * r, strip.y0 + (c + 1) * r) for c in range(cus)]
    return r, cus, rows


def _load_group(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, gi: int) -> None:
    """Each CU's input rows into its own maps buffer, same address (bank of the group)."""
    s = plan.shape
    row = s.w * s.cin
    _, _, rows = group_of(plan, gi)
    base = plan.strips[gi].bank * hw.maps_bank_elements
    load_runs(b, hw, [(base, plan.in_addr + 2 * r0 * row, (r1 - r0) * row, c) for c, (r0, r1) in enumerate(rows)])


def _load_tile(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, t: int, wbuf: int) -> None:
    """Kernel tile t: vMAC v's 16 interleaved kernels, broadcast to vMAC v of every CU."""
    words = indp_kernel_words(plan.shape, hw)
    b.const(R_LEN, words)
    b.const(R_TMP, wbuf)
    for v in range(hw.vmacs_per_cu):
        b.const(R_SRC, plan.w_addr + 2 * (t * hw.vmacs_per_cu + v) * words)
        b.emit(sf.LdOp(sf.LoadTarget.WEIGHTS, R_TMP, R_SRC, R_LEN, 0, hw.vmacs + v))


def generate_indp(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig) -> None:
    """Row groups in turn (maps double-buffered), every kernel tile per group (Kloop)."""
    s = plan.shape
    tile = kernels_per_tile(hw)
    wbank = plan.w_slot if plan.double_buffer_weights else 0
    items = [(gi, t) for gi in range(len(plan.strips)) for t in range(plan.tiles)]
    ring = None
    if plan.pool is not None:
        from snowir.fused_pool import load_rows, pool_rows, ring_of

        ring = ring_of(plan)
    _load_group(b, plan, hw, 0)
    _load_tile(b, plan, hw, 0, 0)
    slot = 0  # weights slot: a new tile takes the other bank when double-buffered
    for i, (gi, t) in enumerate(items):
        r, cus, rows = group_of(plan, gi)
        if t == 0:
            b.const(R_TMP, 2 * r * s.ow * s.k)
            b.emit(sf.VmovOp(sf.VectorMode.INDP, sf.VmovSelect.STRIDE, R_TMP))
        nxt = items[i + 1] if i + 1 < len(items) else None
        new_tile = nxt is not None and nxt[1] != t
        prefetch: list[Prefetch] = []
        if nxt is not None and nxt[0] != gi:
            prefetch.append(lambda bb, g=nxt[0]: _load_group(bb, plan, hw, g))
        if new_tile and plan.double_buffer_weights:
            prefetch.append(lambda bb, nt=nxt[1], buf=((slot + 1) % 2) * wbank: _load_tile(bb, plan, hw, nt, buf))
        vmacs = [v for v in range(hw.vmacs_per_cu) if t * tile + v * hw.lanes < s.k]
        mask = sum(1 << (c * hw.vmacs_per_cu + v) for c in range(cus) for v in vmacs)
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
        _kernel_tile(b, plan, hw, cu0, strip.bank * hw.maps_bank_elements, 0, mask, prefetch, mid_row=mid)
        if new_tile and not plan.double_buffer_weights:
            b.flush_vector_queue(hw, R_TMP)
            _load_tile(b, plan, hw, nxt[1], 0)
        slot += new_tile
    if ring is not None:
        # the last group's rows: their slots were last read halfway through it (flush: the
        # group may be short), and the MAXs wait for these loads
        a, b_, p, q = ring.tail
        b.flush_vector_queue(hw, R_TMP)
        load_rows(b, plan, ring, (a, b_), hw)
        pool_rows(b, plan, ring, (p, q), hw, None)
