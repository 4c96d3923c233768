"""
The data a layer's decisions are made of, below the planners that make them and the code
generators that follow them: a conv's shape, maps strips and plan (`ConvPlan`, with the cost
figures its planners compare), a max pool's shape (its maps tiles and a fused pool's row ring are
snowir/plan/pool_shapes.py's), and the small facts about the hardware's tiles they share (kernels per COOP / INDP tile, weights
slots, staggering, bypass slices).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from snowir.dialects import snowflake_asm as sf
from snowir.dialects.tile.decisions import ConvDecisions, kernel_tile_sends
from snowir.errors import SnowError
from snowir.hw import DEFAULT, SnowflakeConfig


class LoweringError(SnowError):
    pass


BIAS_BLOCK = DEFAULT.lanes
"""Words after each kernel when its bias lives with it (`ConvShape.bias_at` "kernel"): its bias in
lane 0 of a block `vmov bias` reads whole, one word per MAC lane (`macs_per_vmac` is [S] 16 on
every configuration, hw.RANGES)."""


TRACE_CHUNK = 1008  # longest trace the code emits: a multiple of 16 below the 1023 limit

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
    per_group = s.group_kernels if s is not None and s.groups > 1 else 0
    if 0 < per_group < hw.vmacs and per_group % hw.lanes == 0:
        return per_group
    return hw.vmacs


def full_mask(plan: ConvPlan) -> int:
    """The write-back mask of a whole COOP kernel tile: its kernels' vMACs."""
    return (1 << plan.kernels) - 1


def kernel_vmacs(plan: ConvPlan, hw: SnowflakeConfig, count: int) -> list[int]:
    """The vMAC (c·V + v) each of a COOP kernel tile's first `count` kernels loads into: kernel j
    on vMAC j, or with `per_cu` (a merged conv's phases in place) kernel j on CU j div per_cu's
    vMAC j mod per_cu, so that the write-back's CU stride puts each phase row in its own row."""
    if not plan.per_cu:
        return list(range(count))
    return [j // plan.per_cu * hw.vmacs_per_cu + j % plan.per_cu for j in range(count)]


def vmac_mask(vmacs: list[int]) -> int:
    """The write-back mask enabling exactly these vMACs."""
    return sum(1 << v for v in vmacs)


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
    groups: int = 1  # c is the channels per group; kernel tile t of K kernels reads group Kt // group_kernels
    cin_total: int = 0  # > 0: the input is channels [c_base, c_base + c) of a cin_total-channel tensor
    c_base: int = 0
    units: tuple[tuple[str, int], ...] = ()
    """(write-back unit name, its 32-bit word) of each unit the layer uses (snowir/writeback.py)."""
    bias_at: str = "kernel"
    """Where the weight image keeps the biases (decisions.BIAS_LAYOUTS): what a kernel's words are. The
    weights region's `biases` decision, carried here for the planners and generators (not a field
    of #tile.conv_shape: tile/read.shape_of puts the region's value in)."""
    block_maps: bool = False
    """A grouped conv over a channel-tile-major input whose blocks are its groups (the maps region's
    `channel_tiles` on a grouped conv): group g's c channels are block g, an (H, W, c) run of their
    own, so a pixel is c words in the maps (`cin` = c) and each kernel tile loads its group's block.
    Not a field of #tile.conv_shape either: tile/build.shape_of puts the maps region's value in."""

    @property
    def cin(self) -> int:
        """Input channels (the pixel stride of the maps): a block's own c over blocks (`block_maps`)."""
        return self.cin_total or (self.c if self.block_maps else self.c * self.groups)

    @property
    def group_kernels(self) -> int:
        """Kernels per group: K / groups, or c for a depthwise conv with its channels padded to
        whole groups of c lanes (`padded`), one kernel per channel of its group."""
        return self.c if self.padded else self.k // self.groups

    @property
    def padded(self) -> bool:
        """A depthwise conv in block-diagonal groups of c lanes, the last group past the input's
        channels: its lanes there read the next pixel's words against zero weights."""
        return not self.block_maps and self.c * self.groups > self.cin

    @property
    def overread(self) -> int:
        """Words a maps tile's traces read past its last pixel (a padded last group's lanes): room
        the tile needs above it in its bank."""
        return self.c * self.groups - self.cin if self.padded else 0

    @property
    def oh(self) -> int:
        return (self.h + self.pt + self.pb - self.kh) // self.sy + 1

    @property
    def ow(self) -> int:
        return (self.w + self.pl + self.pr - self.kw) // self.sx + 1

    @property
    def kernel_words(self) -> int:
        """Words of one COOP kernel in the weight image and a weights buffer: its taps, then its
        bias block when the biases live with the kernels; padded to an even count."""
        n = self.kh * self.kw * self.c + (BIAS_BLOCK if self.bias_at == "kernel" else 0)
        return n + n % 2

    def valid_macs(self) -> int:
        """Multiply-accumulates without padding taps."""
        rows = sum(self._valid(y * self.sy - self.pt, self.kh, self.h) for y in range(self.oh))
        cols = sum(self._valid(x * self.sx - self.pl, self.kw, self.w) for x in range(self.ow))
        return rows * cols * self.c * self.k

    @property
    def empty_windows(self) -> bool:
        """Some output pixel's window covers padding alone (a pad as large as the kernel, or a
        1x1 conv's padding): its output is the bias (+ bypass, ReLU), the write-back of a MAC
        that adds nothing (codegen/pixels._bias_only)."""
        return any(self._valid(y * self.sy - self.pt, self.kh, self.h) == 0 for y in (0, self.oh - 1)) \
            or any(self._valid(x * self.sx - self.pl, self.kw, self.w) == 0 for x in (0, self.ow - 1))

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
    # column tiling (snowir/plan/columns.py): output columns [x0, x1) from input columns [c0, c1)
    # (padding excluded); (0, 0, 0, 0): every column
    x0: int = 0
    x1: int = 0
    c0: int = 0
    c1: int = 0

    @property
    def cols(self) -> tuple[int, int] | None:
        """The tile's output columns when the layer is column-tiled, else None."""
        return (self.x0, self.x1) if self.x1 else None


@dataclass(frozen=True)
class ConvPlan(ConvDecisions):
    """A conv's decisions as the code generators follow them. The ones the tile IR records one to
    one are declared once, in snowir/dialects/tile/decisions.py (`ConvDecisions`, keyword-only
    fields); the rest are the plan's own, below."""

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
    cu_rows: tuple[int, ...] = ()  # row groups (INDP, coop_rows): output rows per CU of each strip (a strip = one group)
    # a residual 1x1 conv with its bypass in per-kernel-tile slices (snowir/codegen/bypass_slices.py)
    bypass_slices: bool = False
    # the max pool reading this conv's output, run in the same program (snowir/plan/fused_pool.py):
    # its shape and the DRAM byte address of the pooled output; `out_addr` is then scratch
    pool: PoolShape | None = None
    pool_out_addr: int = 0
    # the second weights slot's word when double-buffered (FC: its chunk slot; `settle` decides it)
    w_slot: int = 0
    # DRAM words between input rows, 0 = the shape's own (w·cin): a column band's (plan/columns.band_plans,
    # never recorded: it follows from the maps tiles' out_cols) or a crop's, its source's width (the maps
    # region's `crop`; `in_addr` is then the window's first pixel); between output rows (a band's, a slice's)
    in_row: int = 0
    out_row: int = 0
    # DRAM words between bypass rows, 0 = OW·K: a crop's window of a wider tensor (the bypass region's
    # `crop`; `bypass_addr` is then the window's first pixel)
    bypass_row: int = 0
    # bytes between kernel tile t's bypass and tile t + 1's when the bypass is stored channel-tile-major
    # in blocks of the tile's K channels (the bypass region's `channel_tiles`: a slice is one run of its
    # block's rows), 0 = the tile's K channels of one pixel (2K bytes, one LD a pixel)
    bypass_tile: int = 0
    # words between output pixels: a channel slice of a wider tensor's (a device concat, recorded on the
    # output region as `channels`), 0 = the shape's K; `out_addr` is then the slice's first channel's
    out_pixel: int = 0
    # a merged conv's phases written in place (the output region's `phases`): bytes between CU c's
    # write-back and CU c + 1's (one result row; 0 = the COOP default, 2V) and kernels a CU takes
    # (phase row a's sx·M kernels on CU a's first vMACs; 0 = V, kernel j on vMAC j: `kernel_vmacs`)
    cu_stride: int = 0
    per_cu: int = 0
    # bytes between kernel tile t's output and tile t + 1's: a channel-tile-major output's block (the output
    # region's `channel_tiles`, plan/layout.tiled), 0 = the tile's K channels of one pixel (2K bytes)
    out_tile: int = 0
    # the next conv's kernel tile 0 when it is `kernels_preloaded` (plan/weights_end.preload_loads: DRAM
    # byte, words, vMAC, weights word per kernel): this conv's last kernel tile loads it as a prefetch; set by tile-to-asm
    # from the next layer's tile IR, never recorded on this one
    preload: tuple[tuple[int, int, int, int], ...] = ()
    # the next conv's first maps strip when it is `maps_preloaded` (plan/weights_end.preload_maps_loads: after
    # which of this conv's pixels, maps word, DRAM byte, words per row): this conv's last kernel tile loads
    # it; set by tile-to-asm from the next layer's tile IR, never recorded on this one
    preload_maps: tuple[tuple[int, int, int, int], ...] = ()
    # of this conv's first strip under `maps_preloaded`, the rows the previous conv's last tile leaves to this
    # one's cold start (plan/weights_end.preload_maps_split, the same form); set by tile-to-asm like `preload_maps`
    maps_left: tuple[tuple[int, int, int, int], ...] = ()

    @property
    def column_tiled(self) -> bool:
        return any(st.cols is not None for st in self.strips)

    @property
    def indp(self) -> bool:
        return self.mode == "INDP"

    @property
    def row_groups(self) -> bool:
        """Its strips are row groups, each CU its own `cu_rows` output rows from its own maps load:
        INDP's (unless its CUs split columns) and COOP's `coop_rows`."""
        return (self.indp and self.cu_split != "cols") or self.coop_rows

    @property
    def tile_step(self) -> int:
        """Bytes between kernel tile t's output and tile t + 1's (`out_tile`, else 2K)."""
        return self.out_tile or 2 * self.kernels

    @property
    def vector_mode(self) -> sf.VectorMode:
        return sf.VectorMode.INDP if self.indp else sf.VectorMode.COOP

    @property
    def weight_step(self) -> int:
        """Weights-buffer words per maps word of a trace: 16 interleaved kernels in INDP."""
        return DEFAULT.lanes if self.indp else 1

    def dram_bytes(self, hw: SnowflakeConfig | None = None) -> dict[str, int]:
        """DRAM bytes of each loop order: maps, kernels (and a `maps` layout's bias block, once)."""
        moved = self._dram_bytes(hw)
        if self.shape.bias_at == "maps":
            block = 2 * bias_block_words(self.shape.k, self.kernels)
            moved = {order: n + block for order, n in moved.items()}
        return moved

    def _dram_bytes(self, hw: SnowflakeConfig | None = None) -> dict[str, int]:
        if self.column_tiled:
            per_band = [p._dram_bytes(hw) for _, p in band_plans(self)]
            return {k: sum(d[k] for d in per_band) for k in ("Kloop", "Mloop")}
        s = self.shape
        if self.indp and self.cu_split == "cols":  # every CU its own segment of each input row read
            hw = hw or SnowflakeConfig()
            q = s.ow // hw.cus
            # a CU's row: the span its q pixels cover, or (strided) those pixels (ColumnLayout.seg)
            maps = s.oh * hw.cus * (q if s.sx > 1 else (q - 1) * s.sx + 1) * s.cin * 2
            tile = hw.vmacs_per_cu * indp_kernel_words(s, hw) * 2
            sends = kernel_tile_sends(self)
            return {"Kloop": maps + tile * sends, "Mloop": maps * self.tiles + tile * self.tiles}
        elif self.row_groups:  # every CU loads its own rows; an INDP tile is 4 vMACs of 16 interleaved kernels
            hw = hw or SnowflakeConfig()
            rows = sum(r1 - r0 for st, r in zip(self.strips, self.cu_rows) for y in range(st.y0, st.y1, r)
                       for r0, r1 in [input_rows(s.h, s.kh, s.sy, s.pt, y, y + r)])
            maps = rows * s.w * s.cin * 2
            weights = self.tiles * (hw.vmacs_per_cu * indp_kernel_words(s, hw) if self.indp
                                    else self.kernels * s.kernel_words) * 2
        else:
            maps = sum((st.r1 - st.r0) * s.w * s.cin for st in self.strips) * 2
            weights = self.tiles * self.kernels * s.kernel_words * 2
            if self.tiles > 1 and not self.resident_weights:  # re-sent per strip, but as kernel_order keeps them
                return {"Kloop": maps + weights // self.tiles * kernel_tile_sends(self), "Mloop": maps * self.tiles + weights}
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
            weights = weights // self.tiles * kernel_tile_sends(self)
        per_strip = 1
        if self.in_row:  # a column band: one LD per input row
            per_strip = sum(st.r1 - st.r0 for st in self.strips) / strips
        if self.gather is not None:
            sy, sx, _, cin_in, _ = self.gather
            rows = sum(st.r1 - st.r0 for st in self.strips)
            per_strip = (rows * (1 if sx == 1 and cin_in == s.cin else s.w)) / strips
        maps = strips * per_strip * (self.tiles if self.loop_order == "Mloop" else 1)
        return int(weights + maps + (s.bias_at == "maps"))  # a `maps` layout's bias block: one LD

    def flush_cycles(self, hw: SnowflakeConfig) -> float:
        """CU time lost to the flush each kernel tile over a one-row strip starts with: its
        prefetch has no later row boundary with a queue's depth of ops issued, so it goes first,
        behind a flush of the vector queue (codegen/pixels.kernel_tile)."""
        if self.indp or self.coop_rows or len(self.strips) * self.tiles < 2:
            return 0.0
        short = sum(1 for st in self.strips if st.y1 - st.y0 == 1)
        return short * self.tiles * FLUSH_COST * hw.vector_queue_depth

    def estimated_cycles(self, hw: SnowflakeConfig) -> float:
        """The loop-order / tiling cost model: the larger of the padding-free compute and the
        DRAM traffic of this loop order at the shared bandwidth, plus the loads nothing overlaps
        (the first strip; every strip that fills the whole buffer; kernel tiles that are not
        double-buffered). A column-tiled plan: its bands' in turn."""
        if self.column_tiled:
            return sum(p.estimated_cycles(hw) for _, p in band_plans(self))
        s = self.shape
        bw = hw.dram_bytes_per_cycle
        strip_bytes = [(st.r1 - st.r0) * s.w * s.cin * 2 for st in self.strips]
        repeats = self.tiles if self.loop_order == "Mloop" else 1
        exposed = sum(strip_bytes) * repeats if self.strips[0].bank < 0 else strip_bytes[0]
        if self.strips[0].bank < 0 and self.loop_order == "Kloop":
            # a whole-buffer strip loads as the last kernel tile of the one before frees its rows
            # (codegen/strip_loads.replacing_rows): exposed only for what that tile's MACs do not cover
            tile = s.valid_macs() / hw.macs / self.tiles / s.oh
            # the next strip's first kernel tile loads in that tile too, ahead of the rows, unless
            # it is the tile already there (kernel_order serpentine)
            ahead = 0 if self.kernel_order == "serpentine" or self.tiles == 1 or self.resident_weights \
                else self.kernels * s.kernel_words * 2 / bw
            exposed = strip_bytes[0] + sum(self._replacing_exposed(prev, nxt, tile, bw, ahead)
                                           for prev, nxt in zip(self.strips, self.strips[1:]))
        elif self.kernel_order == "serpentine" and self.loop_order == "Kloop":
            # banks whose next strip loads whole in a strip's last kernel tile (gathered, or
            # load_next_whole): that tile's window no longer carries the next strip's first kernels,
            # whatever of them its MACs did not cover is not exposed
            tile = s.valid_macs() / hw.macs / self.tiles / s.oh
            kernels = self.kernels * s.kernel_words * 2
            exposed -= sum(min(kernels, max(0.0, kernels + nb - (prev.y1 - prev.y0) * tile * bw))
                           for prev, nb in zip(self.strips, strip_bytes[1:])) / 1.0
        if not self.double_buffer_weights and not self.resident_weights:
            loads = self.tiles * (len(self.strips) if self.loop_order == "Kloop" else 1)
            # Kloop staggers kernel tiles (weights_stagger): only the overlapping part waits
            hidden = weights_stagger(s, hw) if self.loop_order == "Kloop" and s.groups == 1 else 0
            exposed += loads * self.kernels * (s.kernel_words - hidden) * 2
        traffic = self.dram_bytes(hw)[self.loop_order]
        return max(s.valid_macs() / hw.macs, load_cycles(hw, traffic, self.load_count())) + exposed / bw \
            + self.flush_cycles(hw)


    def _replacing_exposed(self, prev: Strip, nxt: Strip, tile: float, bw: float, ahead: float = 0.0) -> float:
        """Cycles of the next whole-buffer strip's load that the previous strip's last kernel tile
        (`tile` cycles an output row) does not cover: its row j replaces the previous strip's row j
        once the last output row reading that row is done (codegen/strip_loads.replacing_rows), the
        rows one after the other on the bus. (Counting the whole strip against the whole tile took
        a 2-row strip's 3-row load as hidden: 256 -> 12 2x2 at 130², whole strips of 2 rows, was
        estimated 1,077 k cycles and ran 1,390 k; its double-buffered column bands ran 1,080 k.)
        `ahead`: cycles the bus is busy with other loads as the tile starts (the next strip's first
        kernel tile)."""
        s = self.shape
        row_bytes = s.w * s.cin * 2
        last: dict[int, int] = {}  # the previous strip's row (from r0) -> the last output row reading it
        for y in range(prev.y0, prev.y1):
            lo, hi = input_rows(s.h, s.kh, s.sy, s.pt, y, y + 1)
            for r in range(lo, hi):
                last[r - prev.r0] = y
        done = ahead
        for j in range(nxt.r1 - nxt.r0):
            done = max(done, (last.get(j, prev.y0 - 1) - prev.y0 + 1) * tile) + row_bytes / bw
        return max(0.0, done - (prev.y1 - prev.y0) * tile)


def load_cycles(hw: SnowflakeConfig, nbytes: float, lds: int) -> float:
    """Cycles the load units need for `lds` LDs moving `nbytes`: the shared bus's rate, or the
    units' own when that is slower — each LD waits its start-up on its unit and moves at one
    port's rate (timing.py), the units working side by side. Short LDs (a bypass slice's 32
    bytes per pixel, one row of kernels per strip) are start-up-bound, not bandwidth-bound."""
    per_unit = (lds * hw.ld_startup_cycles + nbytes / hw.unit_bytes_per_cycle) / hw.load_units
    return max(nbytes / hw.dram_bytes_per_cycle, per_unit)


def input_rows(h: int, kh: int, sy: int, pt: int, y0: int, y1: int) -> tuple[int, int]:
    """Input rows [r0, r1) that output rows [y0, y1) of a window op read (padding rows excluded;
    empty, r0 = r1, when every window is padding alone)."""
    r0 = min(h, max(0, y0 * sy - pt))
    return r0, max(r0, min(h, (y1 - 1) * sy - pt + kh))


def row_runs(r0: int, r1: int, row: int, in_row: int) -> list[tuple[int, int, int]]:
    """Input rows [r0, r1) of `row` words, `in_row` words apart in DRAM, as contiguous runs
    (buffer word from the first row, DRAM word, words): one run when the rows are contiguous (an
    input of its own, or a crop as wide as its source), else one a row (a crop's window)."""
    if in_row == row:
        return [(0, r0 * row, (r1 - r0) * row)]
    return [((r - r0) * row, r * in_row, row) for r in range(r0, r1)]


def interior_columns(ow: int, sx: int, pl: int, kw: int, w: int) -> tuple[int, int]:
    """Output columns [xl, xr) whose whole window is inside the input (the rest are border pixels)."""
    interior = [x for x in range(ow) if x * sx - pl >= 0 and x * sx - pl + kw <= w]
    return (interior[0], interior[-1] + 1) if interior else (ow, ow)


def weights_slot_elements(hw: SnowflakeConfig) -> int:
    """Where the code generator double-buffers kernel tiles: two slots of half the weights
    buffer each. A layout choice, not a hardware bank: the buffer interlocks by region."""
    return hw.weights_buffer_elements // 2


def weights_stagger(s: ConvShape, hw: SnowflakeConfig) -> int:
    """A COOP kernel's stagger (`stagger_words`)."""
    return stagger_words(s.kernel_words, hw)


def stagger_words(words: int, hw: SnowflakeConfig) -> int:
    """For a kernel tile of `words` per vMAC too large for a weights slot but within the buffer:
    F = buffer - words. Kernel tiles then alternate between bases 0 and F, and the F words of the
    next tile that miss the current one stream in while it computes (the buffers interlock by
    region, docs/machine.md); only the words - F overlapping ones load after it. 0 when not
    applicable, or when F is less than a vMAC's lanes."""
    if words <= weights_slot_elements(hw) or words > hw.weights_buffer_elements:
        return 0
    f = hw.weights_buffer_elements - words
    f -= f % 2
    return f if f >= hw.lanes else 0


ALIGN = 256  # bytes between the DRAM regions of a layer's program image


def align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def indp_kernel_words(s: ConvShape, hw: SnowflakeConfig) -> int:
    """Weights-buffer words of one vMAC's 16 interleaved kernels, plus their 16 biases when the
    biases live with the kernels."""
    n = hw.lanes * (s.kh * s.kw * s.c + (s.bias_at == "kernel"))
    return n + n % 2


def bias_block_words(k: int, kernels: int) -> int:
    """Words of a `maps` layout's bias block (K kernels, `kernels` a kernel tile): per tile, its
    kernels' biases and as many zero words, so that tile t's biases sit at 2 x its first output
    channel, the tile's output byte offset the generators keep in a register (R_TO): one ADDI gives
    the `vmov mbias` address in every generator, none needs a register of its own."""
    return 2 * -(-k // kernels) * kernels


def bias_room(hw: SnowflakeConfig, words: int) -> SnowflakeConfig:
    """The machine a `maps` layout layer is planned and generated for: every maps bank shortened
    so that `words` are free at the top of the buffer, where the bias block sits from the cold start
    on (its base: the result's `maps_buffer_elements`). Banks set the buffer's capacity, not its
    interlocks (docs/machine.md), so the layer's code, made for these banks, runs on `hw`."""
    per_bank = -(-words // hw.maps_banks)
    per_bank += per_bank % 2
    return replace(hw, maps_bank_bytes=hw.maps_bank_bytes - per_bank * hw.element_bytes)


def plan_machine(plan: ConvPlan, hw: SnowflakeConfig) -> SnowflakeConfig:
    """`hw` as the plan's maps tiles see it: with room for its bias block when its biases live in
    the maps buffer (`bias_room`), else `hw` itself. Applied once, where a plan meets the machine
    (the planner, the tile builder, tile-to-asm's check and generators), never to its result."""
    if plan.shape.bias_at != "maps":
        return hw
    return bias_room(hw, bias_block_words(plan.shape.k, plan.kernels))


def kernels_per_tile(hw: SnowflakeConfig) -> int:
    return hw.vmacs_per_cu * hw.lanes


def group_of(plan: ConvPlan, gi: int) -> tuple[int, int, list[tuple[int, int]]]:
    """(rows per CU, CUs, each CU's input rows) of row group `gi`."""
    s, strip, r = plan.shape, plan.strips[gi], plan.cu_rows[gi]
    cus = (strip.y1 - strip.y0) // r
    rows = [input_rows(s.h, s.kh, s.sy, s.pt, strip.y0 + c * r, strip.y0 + (c + 1) * r) for c in range(cus)]
    return r, cus, rows


@dataclass(frozen=True)
class PoolShape:
    c: int
    h: int
    w: int
    kh: int
    kw: int
    sy: int
    sx: int
    pt: int
    pl: int
    oh: int
    ow: int
    cin_total: int = 0  # > 0: the input is channels [c_base, c_base + c) of a cin_total-channel tensor
    c_base: int = 0

    @property
    def cin(self) -> int:
        """Words between the input's pixels (the maps rows are w x cin words)."""
        return self.cin_total or self.c


def gather_of(s: ConvShape) -> tuple[int, int, int, int, int] | None:
    """Whether a conv gathers its maps pixel by pixel, and how (`ConvPlan.gather`): a conv over a
    channel slice gathers the slice's channels (and, strided 1x1, its pixels); a strided 1x1 conv
    gathers its pixels. None: it reads its input as it lies."""
    strided_1x1 = s.kh == s.kw == 1 and (s.sy, s.sx) != (1, 1) and (s.pt, s.pl, s.pb, s.pr) == (0, 0, 0, 0)
    if s.cin != s.c and s.groups == 1:
        return (s.sy, s.sx, s.w, s.cin, s.c_base) if strided_1x1 else (1, 1, s.w, s.cin, s.c_base)
    if strided_1x1 and s.groups == 1:
        return (s.sy, s.sx, s.w, s.cin, 0)
    return None


def compact_shape(s: ConvShape, gather: tuple[int, int, int, int, int]) -> ConvShape:
    """The conv over what a gathering layer loads: a channel slice's own channels, and a strided
    1x1's pixels (each kept pixel a unit step)."""
    sy, sx = gather[:2]
    c = replace(s, cin_total=0, c_base=0)
    if (sy, sx) != (1, 1):
        c = replace(c, h=c.oh, w=c.ow, sy=1, sx=1)
    return c


def input_columns(s: ConvShape, x0: int, x1: int) -> tuple[int, int]:
    """Input columns [c0, c1) that output columns [x0, x1) read (padding columns excluded); for
    stride s and kernel k, neighbouring bands share k - s of them (the halo, re-loaded)."""
    return max(0, x0 * s.sx - s.pl), min(s.w, (x1 - 1) * s.sx - s.pl + s.kw)


def band_shape(s: ConvShape, x0: int, x1: int) -> ConvShape:
    """The conv over one column band: its input columns, the padding only the edge bands have."""
    c0, c1 = input_columns(s, x0, x1)
    pl = c0 - (x0 * s.sx - s.pl)
    pr = (x1 - 1) * s.sx - s.pl + s.kw - c1
    return replace(s, w=c1 - c0, pl=pl, pr=pr)


def bands_of(plan: ConvPlan) -> list[tuple[int, int]]:
    """The output column bands [x0, x1) of a column-tiled plan, in order (its strips' `cols`)."""
    out: list[tuple[int, int]] = []
    for st in plan.strips:
        if st.cols is not None and (not out or out[-1] != st.cols):
            out.append(st.cols)
    return out


def band_plans(plan: ConvPlan) -> list[tuple[tuple[int, int], ConvPlan]]:
    """A column-tiled plan as one plan per column band, in order: the conv over the band's input
    columns (`band_shape`), its maps tiles, reading input rows W·C words apart (a crop's source's
    width: `in_row`) from its first input column and writing output rows OW·K words apart from its first output column. The code
    generators run the bands in turn; nothing of this is a decision (the maps tiles' out_cols are)."""
    s = plan.shape
    pixel = plan.out_pixel or s.k  # words between output pixels: a concat's channels when a slice of it
    out = []
    for x0, x1 in bands_of(plan):
        c0, _ = input_columns(s, x0, x1)
        mine = [i for i, st in enumerate(plan.strips) if st.cols == (x0, x1)]
        strips = tuple(replace(plan.strips[i], x0=0, x1=0, c0=0, c1=0) for i in mine)
        cu_rows = tuple(plan.cu_rows[i] for i in mine) if plan.cu_rows else ()  # a coop_rows band's row groups
        out.append(((x0, x1), replace(plan, shape=band_shape(s, x0, x1), strips=strips, cu_rows=cu_rows,
                                      in_addr=plan.in_addr + 2 * c0 * s.cin, out_addr=plan.out_addr + 2 * x0 * pixel,
                                      in_row=plan.in_row or s.w * s.cin, out_row=s.ow * pixel)))
    return out
