"""
The decisions of a convolution layer (C17 §5.1 steps 3-4), shared by the code generators and
the tile passes: the layer's shape, its maps tiles (output-row strips), kernel tiles, compute
mode and loop order (`ConvPlan`), and its DRAM layout and weight image.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING
from dataclasses import dataclass, replace

import numpy as np

from snowir.dialects import snowflake_asm as sf
from snowir.errors import SnowError
from snowir.hw import DEFAULT, SnowflakeConfig

if TYPE_CHECKING:
    from snowir.pool_codegen import PoolShape


class LoweringError(SnowError):
    pass


BIAS_BLOCK = DEFAULT.lanes
"""Words after each kernel: its bias in lane 0 of a block `vmov bias` reads whole, one word per
MAC lane (`macs_per_vmac` is [S] 16 on every configuration, hw.RANGES)."""


FLUSH_COST = 4
"""[P] CU cycles lost per vector-queue slot when a kernel tile starts behind a flush (the
queue drains, the flush VMOVs run, the next MACs refill it): about 60 cycles per flush on the
16-deep queue, measured on ResNet-50's one-row strips (n39, n44 at 8.4 GB/s)."""


def coop_kernels(hw: SnowflakeConfig, s: ConvShape | None = None) -> int:
    """Kernels of a COOP kernel tile: one per vMAC of every CU, the maps broadcast (C17 §5.1;
    16 on the 4 x 4 machine). One MAC then writes that many output channels of a pixel. A
    tile never spans two groups of a grouped conv, whose kernels read other channels: groups
    narrower than the machine's vMACs take one tile each, the vMACs past them masked off, when
    they are whole multiples of 16 kernels (depthwise-to-grouped's; a depthwise conv's one
    kernel per group would leave 15 of 16 lanes and most vMACs idle, so it stays refused)."""
    per_group = s.k // s.groups if s is not None and s.groups > 1 else 0
    if 0 < per_group < hw.vmacs and per_group % hw.lanes == 0:
        return per_group
    return hw.vmacs


def full_mask(plan: ConvPlan) -> int:
    """The write-back mask of a whole COOP kernel tile: its kernels' vMACs."""
    return (1 << plan.kernels) - 1


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
    groups: int = 1  # c is the channels per group; kernel tile t of K kernels reads group Kt // (k / groups)
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
        n = self.kh * self.kw * self.c + BIAS_BLOCK
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
    kernels: int  # per kernel tile: one per vMAC (COOP, `coop_kernels`), 16 per vMAC of a CU (INDP)
    double_buffer_weights: bool
    in_addr: int
    w_addr: int
    out_addr: int
    mode: str = "COOP"
    loop_order: str = "Kloop"
    bypass_addr: int | None = None  # residual input (H', W', K) added at write-back
    cu_rows: tuple[int, ...] = ()  # INDP: output rows per CU of each strip (a strip = one row group)
    # maps gathered pixel by pixel, `shape` then being the compact conv over what is loaded: a
    # strided 1x1 conv planned on the pixels it reads, a conv over a channel slice on its
    # channels. (sy, sx, W, C, c0): pixel (r, x) of the compact input is DRAM pixel
    # (r*sy, x*sx) of a W-wide, C-channel tensor, channels from c0
    gather: tuple[int, int, int, int, int] | None = None
    # every kernel tile held in the weights buffer at once (tile t at t x kernel words): loaded
    # once for the layer, not once per maps strip (`weights_resident`)
    resident_weights: bool = False
    # a residual 1x1 conv with its bypass in per-kernel-tile slices (snowir/bypass_slices.py)
    bypass_slices: bool = False
    # the max pool reading this conv's output, run in the same program (snowir/fused_pool.py):
    # its shape and the DRAM byte address of the pooled output; `out_addr` is then scratch
    pool: PoolShape | None = None
    pool_out_addr: int = 0
    # the placements the code follows (`settle` decides them, the tile IR records them):
    # the second weights slot's word when double-buffered (FC: its chunk slot), staggered kernel
    # tiles' F, the bypass slices' bases, a fused pool's row-ring slots
    w_slot: int = 0
    stagger: int = 0
    slice_bases: tuple[int, ...] = ()
    pool_slots: tuple[int, ...] = ()

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
            weights = self.tiles * self.kernels * s.kernel_words * 2
        kloop = maps + weights * (len(self.strips) if self.tiles > 1 and not self.resident_weights else 1)
        mloop = maps * self.tiles + weights
        return {"Kloop": kloop, "Mloop": mloop}

    def load_count(self) -> int:
        """LDs of this plan's loop order, about (each one pays a load unit's start-up): one per
        kernel per kernel tile loaded, one per maps strip, or per pixel run when gathering."""
        s = self.shape
        strips = len(self.strips)
        weights = self.tiles * (self.kernels if not self.indp else 1)
        if self.loop_order == "Kloop" and self.tiles > 1 and not self.resident_weights:
            weights *= strips
        per_strip = 1
        if self.gather is not None:
            sy, sx, _, cin_in, _ = self.gather
            rows = sum(st.r1 - st.r0 for st in self.strips)
            per_strip = (rows * (1 if sx == 1 and cin_in == s.cin else s.w)) / strips
        maps = strips * per_strip * (self.tiles if self.loop_order == "Mloop" else 1)
        return int(weights + maps)

    def flush_cycles(self, hw: SnowflakeConfig) -> float:
        """CU time lost to the flush each kernel tile over a one-row strip starts with: its
        prefetch has no later row boundary with a queue's depth of ops issued, so it goes first,
        behind a flush of the vector queue (conv_pixels._kernel_tile)."""
        if self.indp or len(self.strips) * self.tiles < 2:
            return 0.0
        short = sum(1 for st in self.strips if st.y1 - st.y0 == 1)
        return short * self.tiles * FLUSH_COST * hw.vector_queue_depth

    def estimated_cycles(self, hw: SnowflakeConfig) -> float:
        """The loop-order / tiling cost model: the larger of the padding-free compute and the
        DRAM traffic of this loop order at the shared bandwidth, plus the loads nothing overlaps
        (the first strip; every strip that fills the whole buffer; kernel tiles that are not
        double-buffered)."""
        s = self.shape
        bw = hw.dram_bytes_per_cycle
        strip_bytes = [(st.r1 - st.r0) * s.w * s.cin * 2 for st in self.strips]
        repeats = self.tiles if self.loop_order == "Mloop" else 1
        exposed = sum(strip_bytes) * repeats if self.strips[0].bank < 0 else strip_bytes[0]
        if not self.double_buffer_weights and not self.resident_weights:
            loads = self.tiles * (len(self.strips) if self.loop_order == "Kloop" else 1)
            # Kloop staggers kernel tiles (weights_stagger): only the overlapping part waits
            hidden = weights_stagger(s, hw) if self.loop_order == "Kloop" and s.groups == 1 else 0
            exposed += loads * self.kernels * (s.kernel_words - hidden) * 2
        traffic = self.dram_bytes(hw)[self.loop_order]
        return max(s.valid_macs() / hw.macs, load_cycles(hw, traffic, self.load_count())) + exposed / bw \
            + self.flush_cycles(hw)


def load_cycles(hw: SnowflakeConfig, nbytes: float, lds: int) -> float:
    """Cycles the load units need for `lds` LDs moving `nbytes`: the shared bus's rate, or the
    units' own when that is slower — each LD waits its start-up on its unit and moves at one
    port's rate (timing.py), the units working side by side. Short LDs (a bypass slice's 32
    bytes per pixel, one row of kernels per strip) are start-up-bound, not bandwidth-bound."""
    per_unit = (lds * hw.ld_startup_cycles + nbytes / hw.unit_bytes_per_cycle) / hw.load_units
    return max(nbytes / hw.dram_bytes_per_cycle, per_unit)


def settle(plan: ConvPlan, hw: SnowflakeConfig) -> ConvPlan:
    """The plan with its buffer placements decided for `hw`: the weights slot of double-buffered
    (or chunked FC) kernel tiles, the stagger of kernel tiles too large for a slot (Kloop,
    ungrouped COOP), the bypass slices' bases. What the code generators follow, recorded in the
    tile IR (the generators never compute them)."""
    s = plan.shape
    fc = s.kernel_words > hw.weights_buffer_elements
    w_slot = weights_slot_elements(hw) if plan.double_buffer_weights or fc else 0
    stagger = 0
    if not (plan.double_buffer_weights or plan.resident_weights or plan.indp or s.groups != 1
            or plan.loop_order != "Kloop" or fc):
        stagger = weights_stagger(s, hw)
    bases: tuple[int, ...] = ()
    if plan.bypass_slices:
        from snowir.bypass_slices import slice_words

        n = slice_words(plan)
        bases = (hw.maps_buffer_elements - 2 * n, hw.maps_buffer_elements - n)
    return replace(plan, w_slot=w_slot, stagger=stagger, slice_bases=bases)


def plan_conv(shape: ConvShape, hw: SnowflakeConfig, in_addr: int, w_addr: int, out_addr: int,
              loop_order: str | None = None, bypass_addr: int | None = None, mode: str | None = None) -> ConvPlan:
    """The layer's decisions; `mode`/`loop_order` None = chosen here (indp_codegen.choose_mode,
    fewer DRAM bytes)."""
    return settle(_plan_conv(shape, hw, in_addr, w_addr, out_addr, loop_order, bypass_addr, mode), hw)


def _plan_conv(shape: ConvShape, hw: SnowflakeConfig, in_addr: int, w_addr: int, out_addr: int,
               loop_order: str | None = None, bypass_addr: int | None = None, mode: str | None = None) -> ConvPlan:
    from snowir.indp_codegen import choose_mode, plan_indp

    s = shape
    if choose_mode(s, hw, bypass_addr is not None, mode) == "INDP":
        return plan_indp(s, hw, in_addr, w_addr, out_addr)
    kernels = coop_kernels(hw, s)
    if s.groups > 1 and (s.k // s.groups) % kernels:
        raise LoweringError(f"grouped conv with {s.k // s.groups} output channels per group: only multiples of "
                            f"{kernels} (a kernel tile) are lowered (depthwise convs are not)")
    row = s.w * s.cin
    if s.cin != s.c and s.groups == 1:
        # a conv over a channel slice (split-kernels) read in place would load every channel of
        # its rows: gather the slice's channels pixel by pixel, so strips hold twice the rows and
        # traces span whole kernel rows
        compact = replace(s, cin_total=0, c_base=0)
        plan = _plan_conv(compact, hw, in_addr, w_addr, out_addr, loop_order, bypass_addr, mode)
        sy, sx, w_in = plan.gather[:3] if plan.gather else (1, 1, s.w)
        return replace(plan, gather=(sy, sx, w_in, s.cin, s.c_base))
    if s.kh == s.kw == 1 and (s.sy, s.sx) != (1, 1) and (s.pt, s.pl, s.pb, s.pr) == (0, 0, 0, 0) \
            and s.groups == 1 and s.cin == s.c:
        # a strided 1x1 conv reads 1/(sy*sx) of its input: load only those pixels, so more
        # output rows share a maps strip and the weights are re-sent for fewer strips
        compact = replace(s, h=s.oh, w=s.ow, sy=1, sx=1)
        plan = _plan_conv(compact, hw, in_addr, w_addr, out_addr, loop_order, bypass_addr, "COOP")
        return replace(plan, gather=(s.sy, s.sx, s.w, s.cin, 0))
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
        return ConvPlan(s, (strip,), math.ceil(s.k / kernels), kernels, True, in_addr, w_addr, out_addr, "COOP", "Kloop")
    rows = lambda y0, y1: _rows(s, y0, y1)  # noqa: E731

    def strips_of(max_rows: int, whole: bool) -> tuple[Strip, ...]:
        return tuple(row_strips(s.oh, rows, lambda y0, y1: rows(y0, y1)[1] - rows(y0, y1)[0] <= max_rows,
                                lambda i: -1 if whole else i % 2, "conv"))

    # maps tilings: the whole input in one strip if it fits the buffer; else bank-sized strips
    # (double-buffered) and buffer-sized strips (fewer, so weights are re-sent fewer times in
    # Kloop, but each is loaded while nothing computes)
    if s.h * row <= hw.maps_buffer_elements:
        tilings = [strips_of(s.h, False)]
    else:
        tilings = [strips_of(n, whole) for n, whole in ((hw.maps_bank_elements // row, False),
                                                        (hw.maps_buffer_elements // row, True)) if n >= s.kh]
    if not tilings:
        raise LoweringError(f"{s.kh} input rows of {row} words do not fit the {hw.maps_buffer_elements}-word "
                            f"maps buffer (column tiling is not implemented yet)")
    tiles = math.ceil(s.k / kernels)
    double = s.kernel_words <= weights_slot_elements(hw)
    plans = [with_residency(ConvPlan(s, strips, tiles, kernels, double, in_addr, w_addr, out_addr, "COOP", order), hw)
             for strips in tilings for order in ([loop_order] if loop_order else ["Kloop", "Mloop"])]
    return min(plans, key=lambda p: p.estimated_cycles(hw))


def with_residency(plan: ConvPlan, hw: SnowflakeConfig) -> ConvPlan:
    """The plan with `resident_weights` decided: in Kloop order over several maps strips, when
    all kernel tiles fit the weights buffer together, each kernel is loaded once for the layer
    (C17's Kloop otherwise re-sends every tile per strip), and the bus is left to the maps."""
    s = plan.shape
    resident = (not plan.indp and plan.loop_order == "Kloop" and s.groups == 1 and plan.tiles > 1
                and len(plan.strips) > 1 and plan.tiles * s.kernel_words <= hw.weights_buffer_elements)
    # resident tiles each have their own place: no slots to alternate
    return replace(plan, resident_weights=resident, double_buffer_weights=plan.double_buffer_weights and not resident)


def _plan_bypass(s: ConvShape, hw: SnowflakeConfig, in_addr: int, w_addr: int, out_addr: int,
                 bypass_addr: int) -> ConvPlan:
    """A conv with a residual bypass holds two inputs at once (C17 §5.1). Up to three plans,
    the fewest `residual_cycles` wins: its maps strips with the bypass per kernel tile in two
    slices at the top of the buffer (snowir/bypass_slices.py); its maps strip at the bottom of
    the buffer and the bypass rows of the same output rows right above it, laid out like the
    output (a `vmov bypass` hands vMAC v of CU c channel 4c + v of a 16-channel block, as the
    write-back stores them), strips loaded in turn; or those strips in the two halves of the
    buffer in turn, the next loading meanwhile. Kloop."""
    if s.kernel_words > hw.weights_buffer_elements:
        raise LoweringError(f"kernel of {s.kernel_words} words does not fit the weights buffer")
    row = s.w * s.cin
    out_row = s.ow * s.k
    room = hw.maps_buffer_elements
    rows = lambda y0, y1: _rows(s, y0, y1)  # noqa: E731

    def holds(per_output_row: int, limit: int) -> Callable[[int, int], bool]:
        """Output rows [y0, y1) fit `limit` words: their input rows plus `per_output_row` each."""
        return lambda y0, y1: (rows(y0, y1)[1] - rows(y0, y1)[0]) * row + (y1 - y0) * per_output_row <= limit

    kernels = coop_kernels(hw)
    tiles, double = math.ceil(s.k / kernels), s.kernel_words <= weights_slot_elements(hw)
    plan = lambda strips, **kw: with_residency(ConvPlan(s, tuple(strips), tiles, kernels, double, in_addr, w_addr,  # noqa: E731
                                                        out_addr, "COOP", "Kloop", bypass_addr, **kw), hw)
    candidates = []
    fits_slices, fits, half = holds(2 * kernels * s.ow, room), holds(out_row, room), holds(out_row, room // 2)
    if (s.kh == s.kw == 1 and (s.sy, s.sx, s.pt, s.pl, s.pb, s.pr) == (1, 1, 0, 0, 0, 0)
            or (s.kh, s.kw) != (1, 1)) and s.groups == 1 and s.cin == s.c and tiles > 1 \
            and fits_slices(0, 1):
        # strips as long as the maps alone allow, so the weights are re-sent for few strips
        candidates.append(plan(row_strips(s.oh, rows, fits_slices, lambda i: 0, "a residual conv"),
                               bypass_slices=True))
    if fits(0, 1) or any(fits(y, y + 1) for y in range(s.oh)):
        candidates.append(plan(row_strips(s.oh, rows, fits, lambda i: 0, "a residual conv")))
        if all(half(y, y + 1) for y in range(s.oh)):
            candidates.append(plan(row_strips(s.oh, rows, half, lambda i: i % 2, "a residual conv")))
    if not candidates:
        raise LoweringError(f"a residual conv needs {s.kh} input rows of {row} words and an output row of "
                            f"{out_row} words in the {hw.maps_buffer_elements}-word maps buffer")
    return min(candidates, key=lambda p: residual_cycles(p, hw))


# issue slots per output pixel of a residual conv's kernel tile: its bypass VMOV, MAC(s) and the
# maps / output / bypass address steps; a bypass slice adds its LD and two address steps
RESIDUAL_PIXEL_ISSUE, SLICE_PIXEL_ISSUE = 5, 3


def residual_cycles(plan: ConvPlan, hw: SnowflakeConfig) -> float:
    """The residual conv's cost model: the largest of the CUs' time (MAC traces and the bypass
    VMOV of each output pixel), the control pipeline's issue time and the DRAM traffic, plus
    the loads nothing overlaps (the first strip; every strip of a single-buffered plan)."""
    s = plan.shape
    bw = hw.dram_bytes_per_cycle
    pixels = s.oh * s.ow * plan.tiles
    trace = sum(-(-s.kw * s.c // hw.lanes) for _ in range(s.kh))
    # padding taps are not computed (border pixels clamp their traces): the padding-free MACs,
    # with a full window's lane rounding, plus the bypass VMOV of every write-back
    cu = s.valid_macs() / hw.macs * trace * hw.lanes / (s.kh * s.kw * s.c) + pixels * hw.vmov_cycles
    issue = pixels * (RESIDUAL_PIXEL_ISSUE + (SLICE_PIXEL_ISSUE if plan.bypass_slices else 0))
    row, out_row = s.w * s.cin, s.ow * s.k
    strip_bytes = [2 * ((st.r1 - st.r0) * row + (0 if plan.bypass_slices else (st.y1 - st.y0) * out_row))
                   for st in plan.strips]
    weights = plan.tiles * plan.kernels * s.kernel_words * 2
    traffic = sum(strip_bytes) + 2 * s.oh * out_row + weights * (1 if plan.resident_weights else len(plan.strips))
    # LDs: the plan's own, and the bypass: a row block per strip, or one per pixel per kernel tile
    lds = plan.load_count() + (s.oh * s.ow * plan.tiles if plan.bypass_slices else len(plan.strips))
    double = len(plan.strips) > 1 and plan.strips[1].bank == 1
    exposed = strip_bytes[0] if double else sum(strip_bytes)
    if not plan.double_buffer_weights and not plan.resident_weights:
        exposed += plan.tiles * len(plan.strips) * plan.kernels * (s.kernel_words - weights_stagger(s, hw)) * 2
    return max(cu, issue, load_cycles(hw, traffic, lds)) + exposed / bw + plan.flush_cycles(hw)


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


def weights_slot_elements(hw: SnowflakeConfig) -> int:
    """Where the code generator double-buffers kernel tiles: two slots of half the weights
    buffer each. A layout choice, not a hardware bank: the buffer interlocks by region."""
    return hw.weights_buffer_elements // 2


def weights_stagger(s: ConvShape, hw: SnowflakeConfig) -> int:
    """For a kernel too large for a weights slot but within the buffer: F = buffer - kernel
    words. Kernel tiles then alternate between bases 0 and F, and the F words of the next tile
    that miss the current one stream in while it computes (the buffers interlock by region,
    docs/machine.md); only the K - F overlapping words load after it. 0 when not applicable."""
    if s.kernel_words <= weights_slot_elements(hw) or s.kernel_words > hw.weights_buffer_elements:
        return 0
    f = hw.weights_buffer_elements - s.kernel_words
    f -= f % 2
    return f if f >= 16 else 0


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
        hw = hw or SnowflakeConfig()
        kernels = coop_kernels(hw, s)
        w_bytes = math.ceil(s.k / kernels) * kernels * s.kernel_words * 2
    out_addr = align(w_addr + w_bytes)
    out_bytes = s.oh * s.ow * s.k * 2
    return ConvLayout(in_bytes, w_addr, w_bytes, out_addr, out_bytes, align(out_addr + out_bytes) if bypass else None)


def pack_weights(w: np.ndarray, b: np.ndarray, tiles: int, kernels: int) -> np.ndarray:
    """(K, C, kh, kw) int16 weights + (K,) bias -> the DRAM weight image (tiles x `kernels`
    kernels, each followed by its bias block)."""
    k, c, kh, kw = w.shape
    words = kh * kw * c + BIAS_BLOCK
    words += words % 2
    out = np.zeros((tiles * kernels, words), np.int16)
    out[:k, :kh * kw * c] = w.transpose(0, 2, 3, 1).reshape(k, -1)
    out[:k, kh * kw * c] = b
    return out.ravel()
