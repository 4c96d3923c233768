"""
Code generation for a convolution layer on Snowflake (C17 §5.1-5.2, Figure 3).

Data layout in DRAM: tensors channel-innermost (H, W, C) int16, so one kernel row is one
trace of kw*C elements. Weights: per kernel, kh*kw*C words in (ky, kx, c) order, then a
16-word bias block (lane 0 = bias), padded to an even count.

Decisions (a `ConvPlan`): COOP mode with maps broadcast, so the 16 vMACs of the 4 CUs take
16 kernels (a kernel tile) and every MAC writes 16 output channels of one pixel; maps tiles
are output-row strips whose input rows fit one 32K-element maps bank, strips alternate
banks (double buffering); kernel tiles alternate weights banks when a kernel fits one bank;
loop order Kloop (all kernel tiles per maps strip). Padding taps are never computed: border
rows clamp the kernel-row range, border columns get their own shorter traces.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from snowir.asm_builder import NOP, AsmBuilder
from snowir.dialects import snowflake_asm as sf
from snowir.errors import SnowError
from snowir.hw import SnowflakeConfig

TRACE_CHUNK = 1008  # longest trace we emit: a multiple of 16 below the 1023 limit
COOP = sf.VectorMode.COOP

# register plan (static, as the paper's compiler: "register assignment is statically defined")
R_OUT, R_MAPS, R_W, R_KY, R_KYEND, R_X, R_XEND, R_Y, R_YEND = 1, 2, 3, 4, 5, 6, 7, 8, 9
R_ROWBASE, R_OUTROW, R_T, R_TEND, R_WBASE, R_OUTT, R_TMP, R_TMP2, R_LEN, R_SRC = 10, 11, 12, 13, 14, 15, 16, 17, 18, 19
R_BYP, R_BYPROW = 22, 23
# the kernel tile being computed: its weights bank base, 16*t (its first output channel), 32*t
# (the same in output bytes), the DRAM address of the next weights LD, the K-loop counter.
# r30/r31 stay free for icache-banking.
R_TW, R_TT, R_TO, R_WSRC, R_TK = 27, 28, 21, 29, 20


class LoweringError(SnowError):
    pass


@dataclass(frozen=True)
class ConvShape:
    c: int
    h: int
    w: int
    k: int
    kh: int
    kw: int
    sy: int
    sx: int
    pt: int
    pl: int
    pb: int
    pr: int
    relu: bool
    shift: int
    groups: int = 1  # c is the channels per group; kernel tile t reads group 16t // (k / groups)
    cin_total: int = 0  # > 0: the input is channels [c_base, c_base + c) of a cin_total-channel tensor
    c_base: int = 0

    @property
    def cin(self) -> int:
        """Input channels (the pixel stride of the maps)."""
        return self.cin_total or self.c * self.groups

    @property
    def oh(self) -> int:
        return (self.h + self.pt + self.pb - self.kh) // self.sy + 1

    @property
    def ow(self) -> int:
        return (self.w + self.pl + self.pr - self.kw) // self.sx + 1

    @property
    def kernel_words(self) -> int:
        n = self.kh * self.kw * self.c + 16
        return n + n % 2

    def valid_macs(self) -> int:
        """Multiply-accumulates without padding taps."""
        rows = sum(self._valid(y * self.sy - self.pt, self.kh, self.h) for y in range(self.oh))
        cols = sum(self._valid(x * self.sx - self.pl, self.kw, self.w) for x in range(self.ow))
        return rows * cols * self.c * self.k

    @staticmethod
    def _valid(start: int, k: int, size: int) -> int:
        return max(0, min(start + k, size) - max(start, 0))


@dataclass(frozen=True)
class Strip:
    y0: int
    y1: int  # output rows [y0, y1)
    r0: int
    r1: int  # input rows held [r0, r1)
    bank: int


@dataclass(frozen=True)
class ConvPlan:
    shape: ConvShape
    strips: tuple[Strip, ...]
    tiles: int
    double_buffer_weights: bool
    in_addr: int
    w_addr: int
    out_addr: int
    mode: str = "COOP"
    loop_order: str = "Kloop"
    bypass_addr: int | None = None  # residual input (H', W', K) added at write-back
    cu_rows: tuple[int, ...] = ()  # INDP: output rows per CU of each strip (a strip = one row group)

    @property
    def indp(self) -> bool:
        return self.mode == "INDP"

    @property
    def vector_mode(self) -> sf.VectorMode:
        return sf.VectorMode.INDP if self.indp else sf.VectorMode.COOP

    @property
    def weight_step(self) -> int:
        """Weights-buffer words per maps word of a trace: 16 interleaved kernels in INDP."""
        return 16 if self.indp else 1

    def dram_bytes(self, hw: SnowflakeConfig | None = None) -> dict[str, int]:
        s = self.shape
        if self.indp:  # every CU loads its own rows; a tile is 4 vMACs of 16 interleaved kernels
            from snowir.indp_codegen import indp_kernel_words

            hw = hw or SnowflakeConfig()
            rows = sum(r1 - r0 for st, r in zip(self.strips, self.cu_rows) for y in range(st.y0, st.y1, r)
                       for r0, r1 in [input_rows(s.h, s.kh, s.sy, s.pt, y, y + r)])
            maps = rows * s.w * s.cin * 2
            weights = self.tiles * hw.vmacs_per_cu * indp_kernel_words(s, hw) * 2
        else:
            maps = sum((st.r1 - st.r0) * s.w * s.cin for st in self.strips) * 2
            weights = self.tiles * 16 * s.kernel_words * 2
        kloop = maps + weights * (len(self.strips) if self.tiles > 1 else 1)
        mloop = maps * self.tiles + weights
        return {"Kloop": kloop, "Mloop": mloop}


def plan_conv(shape: ConvShape, hw: SnowflakeConfig, in_addr: int, w_addr: int, out_addr: int,
              loop_order: str | None = None, bypass_addr: int | None = None, mode: str | None = None) -> ConvPlan:
    """The layer's decisions; `mode`/`loop_order` None = chosen here (indp_codegen.choose_mode,
    fewer DRAM bytes)."""
    from snowir.indp_codegen import choose_mode, plan_indp

    s = shape
    if choose_mode(s, hw, bypass_addr is not None, mode) == "INDP":
        return plan_indp(s, hw, in_addr, w_addr, out_addr)
    row = s.w * s.c
    if s.groups > 1 and (s.k // s.groups) % 16:
        raise LoweringError(f"grouped conv with {s.k // s.groups} output channels per group: only multiples of 16 "
                            f"are lowered (depthwise convs are not)")
    row = s.w * s.cin
    if bypass_addr is not None:
        return _plan_bypass(s, hw, in_addr, w_addr, out_addr, bypass_addr)
    if s.kernel_words > hw.weights_buffer_elements:
        fc = s.oh == 1 and s.ow == 1 and (s.pt, s.pl, s.pb, s.pr) == (0, 0, 0, 0) and s.kh == s.h and s.kw == s.w \
            and s.groups == 1
        if not fc:
            raise LoweringError(f"kernel of {s.kernel_words} words does not fit the {hw.weights_buffer_elements}-word "
                                f"weights buffer (channel splitting is implemented for fully connected layers only)")
        if s.h * row > hw.maps_buffer_elements:
            raise LoweringError(f"fully connected input of {s.h * row} words does not fit the maps buffer")
        strip = Strip(0, 1, 0, s.h, 0)
        return ConvPlan(s, (strip,), math.ceil(s.k / 16), True, in_addr, w_addr, out_addr, "COOP", "Kloop")
    bank = hw.maps_bank_elements
    max_rows = bank // row
    whole = False  # strips spanning both banks: loaded one after the other, not double-buffered
    if max_rows < s.kh:
        max_rows = hw.maps_buffer_elements // row
        whole = True
        if max_rows < s.kh:
            raise LoweringError(f"{s.kh} input rows of {row} words do not fit the {hw.maps_buffer_elements}-word "
                                f"maps buffer (column tiling is not implemented yet)")
    if s.h * row <= hw.maps_buffer_elements:
        # the whole input fits the maps buffer (both banks): one strip, loaded once
        max_rows = s.h
    rows = lambda y0, y1: _rows(s, y0, y1)  # noqa: E731
    strips = row_strips(s.oh, rows, lambda y0, y1: rows(y0, y1)[1] - rows(y0, y1)[0] <= max_rows,
                        lambda i: -1 if whole else i % 2, "conv")
    tiles = math.ceil(s.k / 16)
    double = s.kernel_words <= hw.weights_bank_elements
    plan = ConvPlan(s, tuple(strips), tiles, double, in_addr, w_addr, out_addr)
    cost = plan.dram_bytes()
    order = loop_order or ("Kloop" if cost["Kloop"] <= cost["Mloop"] else "Mloop")
    return ConvPlan(s, tuple(strips), tiles, double, in_addr, w_addr, out_addr, "COOP", order)


def _plan_bypass(s: ConvShape, hw: SnowflakeConfig, in_addr: int, w_addr: int, out_addr: int,
                 bypass_addr: int) -> ConvPlan:
    """A conv with a residual bypass holds two inputs at once (C17 §5.1): its maps strip at the
    bottom of the maps buffer and the bypass rows of the same output rows right above it, laid
    out like the output (a `vmov bypass` hands vMAC v of CU c channel 4c + v of a 16-channel
    block, as the write-back stores them); Kloop, strips loaded in turn (not double-buffered)."""
    if s.kernel_words > hw.weights_buffer_elements:
        raise LoweringError(f"kernel of {s.kernel_words} words does not fit the weights buffer")
    row = s.w * s.cin
    out_row = s.ow * s.k
    room = hw.maps_buffer_elements

    def fits(y0: int, y1: int) -> bool:
        r0, r1 = _rows(s, y0, y1)
        return (r1 - r0) * row + (y1 - y0) * out_row <= room

    if not fits(0, 1) and not any(fits(y, y + 1) for y in range(s.oh)):
        raise LoweringError(f"a residual conv needs {s.kh} input rows of {row} words and an output row of "
                            f"{out_row} words in the {hw.maps_buffer_elements}-word maps buffer")
    strips = row_strips(s.oh, lambda y0, y1: _rows(s, y0, y1), fits, lambda i: 0, "a residual conv")
    return ConvPlan(s, tuple(strips), math.ceil(s.k / 16), s.kernel_words <= hw.weights_bank_elements,
                    in_addr, w_addr, out_addr, "COOP", "Kloop", bypass_addr)


def input_rows(h: int, kh: int, sy: int, pt: int, y0: int, y1: int) -> tuple[int, int]:
    """Input rows [r0, r1) that output rows [y0, y1) of a window op read (padding rows excluded)."""
    return max(0, y0 * sy - pt), min(h, (y1 - 1) * sy - pt + kh)


def _rows(s: ConvShape, y0: int, y1: int) -> tuple[int, int]:
    return input_rows(s.h, s.kh, s.sy, s.pt, y0, y1)


def row_strips(oh: int, rows: Callable[[int, int], tuple[int, int]], fits: Callable[[int, int], bool],
               bank: Callable[[int], int], what: str) -> list[Strip]:
    """Maps tiles: output-row strips grown greedily while `fits(y0, y1)`; strip i gets `bank(i)`."""
    strips: list[Strip] = []
    y0 = 0
    while y0 < oh:
        y1 = y0 + 1
        if not fits(y0, y1):
            raise LoweringError(f"{what}: rows {y0}..{y1} do not fit the maps buffer")
        while y1 < oh and fits(y0, y1 + 1):
            y1 += 1
        r0, r1 = rows(y0, y1)
        strips.append(Strip(y0, y1, r0, r1, bank(len(strips))))
        y0 = y1
    return strips


def interior_columns(ow: int, sx: int, pl: int, kw: int, w: int) -> tuple[int, int]:
    """Output columns [xl, xr) whose whole window is inside the input (the rest are border pixels)."""
    interior = [x for x in range(ow) if x * sx - pl >= 0 and x * sx - pl + kw <= w]
    return (interior[0], interior[-1] + 1) if interior else (ow, ow)


ALIGN = 256  # bytes between the DRAM regions of a layer's program image


def align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


@dataclass(frozen=True)
class ConvLayout:
    """DRAM regions of a conv layer's program image: maps at 0, then weights, output, bypass."""

    in_bytes: int
    w_addr: int
    w_bytes: int
    out_addr: int
    out_bytes: int
    r_addr: int | None


def conv_layout(s: ConvShape, bypass: bool, mode: str = "COOP", hw: SnowflakeConfig | None = None) -> ConvLayout:
    in_bytes = s.h * s.w * s.cin * 2
    w_addr = align(in_bytes)
    if mode == "INDP":
        from snowir.indp_codegen import indp_kernel_words, kernels_per_tile

        hw = hw or SnowflakeConfig()
        w_bytes = math.ceil(s.k / kernels_per_tile(hw)) * hw.vmacs_per_cu * indp_kernel_words(s, hw) * 2
    else:
        w_bytes = math.ceil(s.k / 16) * 16 * s.kernel_words * 2
    out_addr = align(w_addr + w_bytes)
    out_bytes = s.oh * s.ow * s.k * 2
    return ConvLayout(in_bytes, w_addr, w_bytes, out_addr, out_bytes, align(out_addr + out_bytes) if bypass else None)


def pack_weights(w: np.ndarray, b: np.ndarray, tiles: int) -> np.ndarray:
    """(K, C, kh, kw) int16 weights + (K,) bias -> the DRAM weight image (tiles*16 kernels)."""
    k, c, kh, kw = w.shape
    words = kh * kw * c + 16
    words += words % 2
    out = np.zeros((tiles * 16, words), np.int16)
    out[:k, :kh * kw * c] = w.transpose(0, 2, 3, 1).reshape(k, -1)
    out[:k, kh * kw * c] = b
    return out.ravel()


def _chunks(length: int) -> list[tuple[int, int]]:
    return [(o, min(TRACE_CHUNK, length - o)) for o in range(0, length, TRACE_CHUNK)]


def generate_conv(plan: ConvPlan, hw: SnowflakeConfig, bypass_addr: int | None = None) -> AsmBuilder:
    """The layer program: Kloop (kernel tiles inside each maps strip) or Mloop (strips inside
    each kernel tile); maps and weights banks alternate so the next strip / tile loads while
    the current one computes."""
    s = plan.shape
    b = AsmBuilder()
    b.const(R_TMP, s.shift)
    b.emit(sf.VmovOp(COOP, sf.VmovSelect.SHIFT, R_TMP))
    mask_last = (1 << (s.k - 16 * (plan.tiles - 1))) - 1
    if s.kernel_words > hw.weights_buffer_elements:
        _fully_connected(b, plan, hw, mask_last)
        return b
    if plan.bypass_addr is not None:
        _residual(b, plan, hw, mask_last)
        return b
    if plan.indp:
        from snowir.indp_codegen import generate_indp

        generate_indp(b, plan, hw)
        return b
    if plan.loop_order == "Kloop" and s.groups == 1:
        _kloop(b, plan, hw, mask_last)
        return b
    n_strips = len(plan.strips)
    if plan.loop_order == "Kloop":
        items = [(si, t) for si in range(n_strips) for t in range(plan.tiles)]
    else:
        items = [(si, t) for t in range(plan.tiles) for si in range(n_strips)]
    # running slot numbers: a new strip / tile takes the other bank
    maps_slot, w_slot = [0], [0]
    for (psi, pt_), (si, t) in zip(items, items[1:]):
        maps_slot.append(maps_slot[-1] + (si != psi))
        w_slot.append(w_slot[-1] + (t != pt_))
    wbank = lambda i: (w_slot[i] % 2) * hw.weights_bank_elements if plan.double_buffer_weights else 0
    _load_maps(b, plan, hw, plan.strips[items[0][0]], 0)
    _load_weights(b, plan, hw, items[0][1], wbank(0))
    for i, (si, t) in enumerate(items):
        prefetch: list[Prefetch] = []
        nxt = i + 1
        whole = plan.strips[si].bank < 0
        if nxt < len(items):
            nsi, nt = items[nxt]
            if maps_slot[nxt] != maps_slot[i] and not whole:
                prefetch.append(lambda bb, nsi=nsi, nxt=nxt: _load_maps(bb, plan, hw, plan.strips[nsi], maps_slot[nxt] % 2))
            if w_slot[nxt] != w_slot[i] and plan.double_buffer_weights:
                prefetch.append(lambda bb, nt=nt, nxt=nxt: _load_weights(bb, plan, hw, nt, wbank(nxt)))
        if whole and i and maps_slot[i] != maps_slot[i - 1]:
            # the strip fills both banks: every earlier MAC must be done before it is replaced
            b.flush_vector_queue(hw.vector_queue_depth, R_TMP)
            _load_maps(b, plan, hw, plan.strips[si], 0)
        base = 0 if whole else (maps_slot[i] % 2) * hw.maps_bank_elements
        c_off = s.c_base + (16 * t) // (s.k // s.groups) * s.c  # this tile's group's input channels
        b.const(R_TW, wbank(i))
        b.const(R_TT, 16 * t)
        b.const(R_TO, 32 * t)
        _kernel_tile(b, plan, hw, plan.strips[si], base, c_off, mask_last if t == plan.tiles - 1 else 0xFFFF,
                     prefetch)
        if nxt < len(items) and w_slot[nxt] != w_slot[i] and not plan.double_buffer_weights:
            # the next kernels overwrite this tile's bank: wait for every pending MAC first
            b.flush_vector_queue(hw.vector_queue_depth, R_TMP)
            _load_weights(b, plan, hw, items[nxt][1], 0)
    return b


Prefetch = Callable[[AsmBuilder], None]
KLOOP_BUDGET = 448  # a K-loop body must fit one icache bank with room for the bank-load prologue


def _kloop(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, mask_last: int) -> None:
    """Kloop order, ungrouped: per maps strip, every kernel tile (C17 Figure 3); the next strip
    is prefetched into the other maps bank during the strip's last tile."""
    s = plan.shape
    _load_maps(b, plan, hw, plan.strips[0], 0)
    b.const(R_TW, 0)
    _load_weights(b, plan, hw, 0, 0)
    for si, strip in enumerate(plan.strips):
        whole = strip.bank < 0
        if whole and si:
            # the strip fills both banks: every earlier MAC must be done before it is replaced
            b.flush_vector_queue(hw.vector_queue_depth, R_TMP)
            _load_maps(b, plan, hw, strip, 0)
        more = si + 1 < len(plan.strips)
        last_prefetch: list[Prefetch] = []
        if more and not whole:
            nxt = plan.strips[si + 1]
            last_prefetch.append(lambda bb, nxt=nxt, bank=(si + 1) % 2: _load_maps(bb, plan, hw, nxt, bank))
        base = 0 if whole else (si % 2) * hw.maps_bank_elements
        _strip_tiles(b, plan, hw, strip, base, mask_last, more, last_prefetch)


def _strip_tiles(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, strip: Strip, base: int, mask_last: int,
                 more: bool, last_prefetch: list[Prefetch], bypass_base: int | None = None) -> None:
    """Every kernel tile over one maps strip, tile 0's weights already loaded into bank R_TW.
    Tiles 0..T-2 are one counted K loop when its body fits an icache bank (else unrolled): the
    tile registers R_TW/R_TT/R_TO advance in its delay slots, R_WSRC walks the weights. The
    last tile is peeled: the write-back mask of a partial tile, the next strip's data (`more`:
    a strip follows, whose tile 0 it loads)."""
    s = plan.shape
    tiles = plan.tiles
    b.const(R_TT, 0)
    b.const(R_TO, 0)
    if tiles > 1:
        b.const(R_WSRC, plan.w_addr + 2 * 16 * s.kernel_words)

    def tile(bb: AsmBuilder, mask: int, prefetch: list[Prefetch], load_next: bool) -> None:
        """One tile; `load_next`: then load the weights at R_WSRC (the next tile's)."""
        if load_next and plan.double_buffer_weights:
            prefetch = [*prefetch, lambda bb_: _load_next_weights(bb_, plan, hw)]
        _kernel_tile(bb, plan, hw, strip, base, s.c_base, mask, prefetch, bypass_base)
        if load_next and not plan.double_buffer_weights:
            # the next kernels overwrite this tile's bank: wait for every pending MAC first
            bb.flush_vector_queue(hw.vector_queue_depth, R_TMP)
            _load_next_weights(bb, plan, hw)

    advance = _advance_tile(plan, hw)
    body_tiles = tiles - 1
    if body_tiles >= 2:
        loop = AsmBuilder(_labels=b._labels)
        loop.const(R_TK, 1 - body_tiles)
        top = loop.label("K")
        tile(loop, 0xFFFF, [], True)
        loop.loop_end(R_TK, 0, top, advance)
        if sum(1 for op in loop.ops if not isinstance(op, sf.LabelOp)) <= KLOOP_BUDGET:
            b.emit(*loop.ops)
            body_tiles = 0
    for _ in range(body_tiles):
        tile(b, 0xFFFF, [], True)
        b.emit(*_advance_tile(plan, hw))
    reload = more and tiles > 1  # a single kernel tile stays in its bank for every strip
    if reload:
        b.const(R_WSRC, plan.w_addr)  # the next strip starts again at tile 0
    tile(b, mask_last, last_prefetch, reload)
    if reload and plan.double_buffer_weights:
        b.emit(*_advance_tile(plan, hw)[:2])  # the next strip's tile 0 is in the other bank


def _advance_tile(plan: ConvPlan, hw: SnowflakeConfig) -> list:
    """R_TW to the other weights bank (double-buffered), R_TT += 16, R_TO += 32: four
    instructions, one RAW pair, so they fill a K-loop branch's delay slots."""
    toggle = [sf.MuliOp(R_TMP, R_TW, -1), sf.AddiOp(R_TW, R_TMP, hw.weights_bank_elements)] \
        if plan.double_buffer_weights else [NOP(), NOP()]
    return [*toggle, sf.AddiOp(R_TT, R_TT, 16), sf.AddiOp(R_TO, R_TO, 32)]


def _load_next_weights(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig) -> None:
    """The 16 kernels at R_WSRC into the bank R_TW does not use (double-buffered) or bank 0;
    R_WSRC moves on to the tile after."""
    s = plan.shape
    if plan.double_buffer_weights:
        b.emit(sf.MuliOp(R_TMP, R_TW, -1), sf.AddiOp(R_TMP, R_TMP, hw.weights_bank_elements))
    else:
        b.emit(sf.MoviOp(R_TMP, 0))
    b.const(R_LEN, s.kernel_words)
    for j in range(16):
        b.emit(sf.LdOp(sf.LoadTarget.WEIGHTS, R_TMP, R_WSRC, R_LEN, j % hw.load_units, j),
               sf.AddiOp(R_WSRC, R_WSRC, 2 * s.kernel_words))


def _fully_connected(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, mask_last: int) -> None:
    """A kernel larger than the weights buffer on a 1x1 output (an FC layer): stream each kernel
    tile in chunks that alternate weights banks, accumulate across chunks, write back on the last
    (its load also brings the bias block). FC layers are bandwidth-bound (C17 §6.1)."""
    s = plan.shape
    total = s.kh * s.kw * s.c  # the whole input, in the same (y, x, c) order as the kernel
    chunk = (hw.weights_bank_elements - 16) // 16 * 16
    chunks = [(o, min(chunk, total - o)) for o in range(0, total, chunk)]
    _load_maps(b, plan, hw, plan.strips[0], 0)
    bank = 0
    for t in range(plan.tiles):
        b.const(R_TMP, mask_last if t == plan.tiles - 1 else 0xFFFF)
        b.emit(sf.VmovOp(COOP, sf.VmovSelect.MASK, R_TMP))
        for ci, (off, n) in enumerate(chunks):
            last = ci == len(chunks) - 1
            wbuf = bank * hw.weights_bank_elements
            b.flush_vector_queue(hw.vector_queue_depth, R_TMP)
            b.const(R_LEN, n + (16 if last else 0))
            b.const(R_TMP, wbuf)
            for j in range(16):
                b.const(R_SRC, plan.w_addr + 2 * ((t * 16 + j) * s.kernel_words + off))
                b.emit(sf.LdOp(sf.LoadTarget.WEIGHTS, R_TMP, R_SRC, R_LEN, j % hw.load_units, j))
            if last:
                b.const(R_TMP, wbuf + n)
                b.emit(sf.VmovOp(COOP, sf.VmovSelect.BIAS, R_TMP))
                b.const(R_OUT, plan.out_addr + 2 * t * 16)
            b.const(R_MAPS, off)
            b.const(R_W, wbuf)
            pieces = _chunks(n)
            for pi, (po, pn) in enumerate(pieces):
                if po:
                    b.emit(sf.AddiOp(R_MAPS, R_MAPS, TRACE_CHUNK), sf.AddiOp(R_W, R_W, TRACE_CHUNK))
                wb = last and pi == len(pieces) - 1
                b.emit(sf.MacOp(COOP, R_OUT, R_MAPS, R_W, pn, wb=wb, relu=wb and s.relu))
            bank ^= 1


def _residual(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, mask_last: int) -> None:
    """Kloop over strips; per strip: maps at the bottom of the buffer, the strip's bypass rows
    right above, both broadcast to every CU."""
    s = plan.shape
    out_row = s.ow * s.k
    row = s.w * s.cin
    b.const(R_TW, 0)
    for si, strip in enumerate(plan.strips):
        byp = (strip.r1 - strip.r0) * row  # right above this strip's maps
        if si:
            b.flush_vector_queue(hw.vector_queue_depth, R_TMP)
        _load_maps(b, plan, hw, strip, 0)
        _load_broadcast(b, hw, byp, plan.bypass_addr + 2 * strip.y0 * out_row, (strip.y1 - strip.y0) * out_row)
        if si == 0:
            _load_weights(b, plan, hw, 0, 0)
        _strip_tiles(b, plan, hw, strip, 0, mask_last, si + 1 < len(plan.strips), [],
                     bypass_base=byp - strip.y0 * out_row)


def _load_maps(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, strip: Strip, bank: int) -> None:
    """One maps strip, broadcast to every CU."""
    s = plan.shape
    row = s.w * s.cin
    _load_broadcast(b, hw, bank * hw.maps_bank_elements, plan.in_addr + 2 * strip.r0 * row,
                    (strip.r1 - strip.r0) * row)


def _load_broadcast(b: AsmBuilder, hw: SnowflakeConfig, dst: int, src: int, words: int) -> None:
    """`words` elements from DRAM `src` to maps-buffer element `dst` of every CU, split over the
    load units (C17 §6.3: one big load on one unit leaves the others idle)."""
    parts = min(hw.load_units, max(1, words // 512))
    step = -(-words // parts)
    for p in range(parts):
        lo, n = p * step, min(step, words - p * step)
        if n <= 0:
            continue
        b.const(R_TMP, dst + lo)
        b.const(R_SRC, src + 2 * lo)
        b.const(R_LEN, n)
        b.emit(sf.LdOp(sf.LoadTarget.MAPS, R_TMP, R_SRC, R_LEN, p % hw.load_units, sf.SELECT_ALL))


def _load_weights(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, t: int, wbuf: int) -> None:
    s = plan.shape
    b.const(R_LEN, s.kernel_words)
    b.const(R_TMP, wbuf)
    for j in range(16):
        b.const(R_SRC, plan.w_addr + 2 * (t * 16 + j) * s.kernel_words)
        b.emit(sf.LdOp(sf.LoadTarget.WEIGHTS, R_TMP, R_SRC, R_LEN, j % hw.load_units, j))


R_ROWSTEP, R_OUTSTEP, R_BYPSTEP = 24, 25, 26


def _kernel_tile(b: AsmBuilder, plan: ConvPlan, hw: SnowflakeConfig, strip: Strip, base: int, c_off: int,
                 mask: int, prefetch: list[Prefetch], bypass_base: int | None = None) -> None:
    """Compute the kernel tile of the tile registers (R_TW weights bank, R_TT/R_TO its first
    output channel) over one maps strip, reading input channels from `c_off`; emit `prefetch`
    once 16 vector ops are queued (the loads then overwrite banks only older, finished vector
    ops read)."""
    s = plan.shape
    b.emit(sf.AddiOp(R_TMP, R_TW, s.kh * s.kw * s.c * plan.weight_step))
    b.emit(sf.VmovOp(plan.vector_mode, sf.VmovSelect.BIAS, R_TMP))
    b.const(R_TMP, mask)
    b.emit(sf.VmovOp(COOP, sf.VmovSelect.MASK, R_TMP))
    issued = 2
    row = s.w * s.cin
    b.const(R_ROWSTEP, s.sy * row)
    b.const(R_OUTSTEP, 2 * s.ow * s.k)
    if bypass_base is not None:
        b.const(R_BYPSTEP, s.ow * s.k)
    chunks = len(_chunks(s.kw * s.c))
    y = strip.y0
    while y < strip.y1:
        if prefetch and issued >= hw.vector_queue_depth:
            for load in prefetch:
                load(b)
            prefetch = []
        iy = y * s.sy - s.pt
        ky0, ky1 = max(0, -iy), min(s.kh, s.h - iy)
        y_end = y + 1
        if (ky0, ky1) == (0, s.kh):
            while y_end < strip.y1 and y_end * s.sy - s.pt + s.kh <= s.h:
                y_end += 1
        b.const(R_ROWBASE, base + (iy + ky0 - strip.r0) * row + c_off)
        b.const(R_OUTROW, plan.out_addr + 2 * y * s.ow * s.k)
        b.emit(sf.AddOp(R_OUTROW, R_OUTROW, R_TO))
        bypass = bypass_base is not None
        if bypass:
            b.const(R_BYPROW, bypass_base + y * s.ow * s.k)
            b.emit(sf.AddOp(R_BYPROW, R_BYPROW, R_TT))
        if y_end - y > 1:
            b.const(R_Y, y)
            b.const(R_YEND, y_end - 1)
            top = b.label("Y")
            _row(b, plan, ky0, ky1 - ky0, bypass)
            b.emit(sf.AddiOp(R_Y, R_Y, 1), NOP(), NOP())
            b.emit(sf.BleOp(R_Y, R_YEND, top), sf.AddOp(R_ROWBASE, R_ROWBASE, R_ROWSTEP),
                   sf.AddOp(R_OUTROW, R_OUTROW, R_OUTSTEP),
                   sf.AddOp(R_BYPROW, R_BYPROW, R_BYPSTEP) if bypass else NOP(), NOP())
        else:
            _row(b, plan, ky0, ky1 - ky0, bypass)
        issued += (y_end - y) * s.ow * (ky1 - ky0) * chunks * (s.kw if s.cin != s.c else 1)
        y = y_end
    if prefetch:
        b.flush_vector_queue(hw.vector_queue_depth, R_TMP)
        for load in prefetch:
            load(b)


def _row(b: AsmBuilder, plan: ConvPlan, ky0: int, rows: int, bypass: bool = False) -> None:
    """One output row: R_ROWBASE = maps address of its first used input row, R_OUTROW = output address."""
    s = plan.shape
    row = s.w * s.cin
    xl, xr = interior_columns(s.ow, s.sx, s.pl, s.kw, s.w)
    border = [x for x in range(s.ow) if not xl <= x < xr]
    for x in border:
        ix = x * s.sx - s.pl
        kx0, kx1 = max(0, -ix), min(s.kw, s.w - ix)
        _offset(b, R_MAPS, R_ROWBASE, (ix + kx0) * s.cin)
        _offset(b, R_OUT, R_OUTROW, 2 * x * s.k)
        if bypass:
            _offset(b, R_BYP, R_BYPROW, x * s.k)
        _offset(b, R_W, R_TW, (ky0 * s.kw + kx0) * s.c * plan.weight_step)
        _macs(b, plan, rows, kx1 - kx0, row, bypass)
    short = s.kh == 1 and s.kw == 1 and s.cin == s.c and s.c <= TRACE_CHUNK and not bypass and not plan.indp
    if short and xr - xl >= 2 * UNROLL:
        xl = _unrolled_pixels(b, plan, xl, xr)
    if xr - xl >= 1:
        _offset(b, R_MAPS, R_ROWBASE, (xl * s.sx - s.pl) * s.cin)
        _offset(b, R_OUT, R_OUTROW, 2 * xl * s.k)
        if bypass:
            _offset(b, R_BYP, R_BYPROW, xl * s.k)
        _offset(b, R_W, R_TW, ky0 * s.kw * s.c * plan.weight_step)
        b.const(R_X, xl)
        b.const(R_XEND, xr - 1)
        top = b.label("X")
        b.emit(sf.AddiOp(R_X, R_X, 1))
        back = _macs(b, plan, rows, s.kw, row, bypass)
        b.emit(sf.BleOp(R_X, R_XEND, top))
        b.emit(sf.AddiOp(R_MAPS, R_MAPS, s.sx * s.cin - back),
               sf.AddiOp(R_W, R_TW, ky0 * s.kw * s.c * plan.weight_step),
               sf.AddiOp(R_OUT, R_OUT, 2 * s.k),
               sf.AddiOp(R_BYP, R_BYP, s.k) if bypass else NOP())


UNROLL = 4
R_MAPS_U = (2, 4, 5, 12)  # free registers: one maps / output address per unrolled pixel
R_OUT_U = (1, 13, 14, 15)


def _unrolled_pixels(b: AsmBuilder, plan: ConvPlan, xl: int, xr: int) -> int:
    """1x1 convs have short traces (C/16 cycles), shorter than the loop bookkeeping of one pixel:
    run UNROLL pixels per X-loop iteration, each with its own address registers, so the CUs see
    a MAC every ~3.5 issue slots. Returns the first pixel left for the ordinary loop."""
    s = plan.shape
    n = (xr - xl) // UNROLL
    for j in range(UNROLL):
        _offset(b, R_MAPS_U[j], R_ROWBASE, ((xl + j) * s.sx - s.pl) * s.cin)
        _offset(b, R_OUT_U[j], R_OUTROW, 2 * (xl + j) * s.k)
    b.emit(sf.AddiOp(R_W, R_TW, 0))
    b.const(R_X, 1)
    b.const(R_XEND, n)
    top = b.label("XU")
    b.emit(sf.AddiOp(R_X, R_X, 1))
    for j in range(UNROLL):
        b.emit(sf.MacOp(COOP, R_OUT_U[j], R_MAPS_U[j], R_W, s.c, wb=True, relu=s.relu))
    step_maps, step_out = UNROLL * s.sx * s.cin, 2 * UNROLL * s.k
    b.emit(*(sf.AddiOp(r, r, step_maps) for r in R_MAPS_U))
    b.emit(sf.BleOp(R_X, R_XEND, top))
    b.emit(*(sf.AddiOp(r, r, step_out) for r in R_OUT_U))
    return xl + n * UNROLL


def _offset(b: AsmBuilder, dst: int, base_reg: int, offset: int) -> None:
    if -(1 << 16) <= offset < (1 << 16):
        b.emit(sf.AddiOp(dst, base_reg, offset))
    else:
        b.const(R_TMP2, offset)
        b.emit(sf.AddOp(dst, base_reg, R_TMP2))


def _macs(b: AsmBuilder, plan: ConvPlan, rows: int, taps: int, row: int, bypass: bool = False) -> int:
    """The MACs of one pixel from R_MAPS / R_W (`rows` kernel rows of `taps` columns), write-back
    on the last (preceded by the bypass VMOV of a residual conv, one per write-back MAC as in C17
    §5.2); returns how far R_MAPS moved. Ungrouped: one trace per kernel row (taps x C contiguous
    words); grouped: one trace per tap (the group's channels), stepping a pixel between taps."""
    s = plan.shape
    ws = plan.weight_step
    if s.cin == s.c and 1 < rows and taps * s.c <= TRACE_CHUNK \
            and (rows - 1) * max(row, s.kw * s.c * ws) < IMM17:
        return _macs_pipelined(b, plan, rows, taps, row, bypass)
    per_row = [(taps * s.c, 0)] if s.cin == s.c else [(s.c, j) for j in range(taps)]
    moved = 0
    for r in range(rows):
        for j, (trace, _) in enumerate(per_row):
            chunks = _chunks(trace)
            for ci, (off, n) in enumerate(chunks):
                last = r == rows - 1 and j == len(per_row) - 1 and ci == len(chunks) - 1
                if off:
                    b.emit(sf.AddiOp(R_MAPS, R_MAPS, TRACE_CHUNK), sf.AddiOp(R_W, R_W, TRACE_CHUNK * ws))
                    moved += TRACE_CHUNK
                if last and bypass:
                    b.emit(sf.VmovOp(plan.vector_mode, sf.VmovSelect.BYPASS, R_BYP))
                b.emit(sf.MacOp(plan.vector_mode, R_OUT, R_MAPS, R_W, n, wb=last, relu=last and s.relu))
            back = (len(chunks) - 1) * TRACE_CHUNK
            if j != len(per_row) - 1:  # next tap of a grouped conv: one pixel on
                b.emit(sf.AddiOp(R_MAPS, R_MAPS, s.cin - back), sf.AddiOp(R_W, R_W, s.c - back))
                moved += s.cin - back
        if r != rows - 1:
            back = (len(_chunks(per_row[-1][0])) - 1) * TRACE_CHUNK
            tap_back = (len(per_row) - 1) * s.cin if s.cin != s.c else 0
            w_step = s.kw * s.c - (len(per_row) - 1) * s.c if s.cin != s.c else s.kw * s.c
            b.emit(sf.AddiOp(R_MAPS, R_MAPS, row - tap_back - back), sf.AddiOp(R_W, R_W, (w_step - back) * ws))
            moved += row - tap_back - back
    return moved


IMM17 = 1 << 16
ROW_PAIRS = ((R_MAPS, R_W), (4, 5), (12, 13))  # (maps, weights) address of kernel row 0, odd rows, even rows


def _macs_pipelined(b: AsmBuilder, plan: ConvPlan, rows: int, taps: int, row: int, bypass: bool) -> int:
    """One trace per kernel row, each row's addresses in a register pair of its own set before
    the previous row's MAC: a MAC never waits on the ADDI just before it (up to 2 RAW cycles a
    row, as long as a 2-3 cycle trace: AlexNet's 11x11x3 conv1 was bookkeeping-bound). R_MAPS
    and R_W stay at the pixel's first row; returns 0 (R_MAPS did not move)."""
    s = plan.shape
    w_row = s.kw * s.c * plan.weight_step
    pair = lambda r: ROW_PAIRS[0] if r == 0 else ROW_PAIRS[1 if r % 2 else 2]  # noqa: E731
    for r in range(rows):
        if r + 1 < rows:
            m, w = pair(r + 1)
            b.emit(sf.AddiOp(m, R_MAPS, (r + 1) * row), sf.AddiOp(w, R_W, (r + 1) * w_row))
        last = r == rows - 1
        if last and bypass:
            b.emit(sf.VmovOp(plan.vector_mode, sf.VmovSelect.BYPASS, R_BYP))
        m, w = pair(r)
        b.emit(sf.MacOp(plan.vector_mode, R_OUT, m, w, taps * s.c, wb=last, relu=last and s.relu))
    return 0
