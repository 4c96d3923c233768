"""
A conv layer's DRAM image: its regions (maps at 0, then weights, output, bypass) and its weight
image packed for COOP (kernel after kernel, each with its bias block) or INDP (16 kernels
interleaved per vMAC).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from snowir.hw import SnowflakeConfig
from snowir.plan.shapes import (BIAS_BLOCK, ConvPlan, ConvShape, LoweringError, align, bias_block_words, coop_kernels,
                                indp_kernel_words, kernels_per_tile)


@dataclass(frozen=True)
class ConvLayout:
    """DRAM regions of a conv layer's program image: maps at 0, then weights, output, bypass."""

    in_bytes: int
    w_addr: int
    w_bytes: int
    out_addr: int
    out_bytes: int
    r_addr: int | None
    out_first: int = 0
    """A channel slice of a wider output tensor (a device concat's, snowir/segments.py `Slot`): the
    layer's first channel there; `out_addr` is the tensor's, `out_bytes` the whole tensor's."""
    out_pixel: int = 0
    """Words between the output's pixels: the wider tensor's channels (0: the layer's own K), times
    the interleave's column step for an interleave's phase."""
    out_row: int = 0
    """Words between the output's rows when not `ow · out_pixel` (an interleave's phase: its
    result's row, times the row step); `out_first` is then the phase's first word in the tensor."""
    cu_stride: int = 0
    """Bytes between CU c's write-back and CU c + 1's when not the COOP default (2V): a merged
    conv's phases written in place (`merged`), one result row."""
    per_cu: int = 0
    """Kernels a CU takes when not V (a merged conv's phase row's sx·M, `merged`)."""
    out_tile: int = 0
    """Bytes between kernel tile t's output and tile t + 1's when not its K channels' 2K (a
    channel-tile-major output, `tiled`: one block, OH·OW·w words)."""
    in_addr: int = 0
    """The maps region's byte address (0 in a layer's own image, where the maps come first)."""
    in_first: int = 0
    """Words from the maps region to the input the layer reads: its block of a channel-tile-major
    tensor (`block_offset`), or a crop's window's first pixel in a wider input tensor (the maps
    region's `crop`; `in_row` the tensor's row, 0: an input of its own); 0 for an input as it lies."""
    in_row: int = 0
    bypass_first: int = 0
    """The same of a residual input that is a crop's window (the bypass region's `crop`)."""
    bypass_row: int = 0
    bypass_tile: int = 0
    """Bytes between kernel tile t's bypass block and tile t + 1's when the residual input is stored
    channel-tile-major (the bypass region's `channel_tiles`), 0 when it is read as whole pixels."""


def interleaved(first: int, total: int, pixels: tuple[int, ...]) -> tuple[int, int, int, int]:
    """An interleave's phase written in place (`pixels` = (oy, ox, sy, sx, height, width) of the
    result, a tensor of `total` channels, the phase's channels from `first`): the tensor's bytes,
    the phase's first word in it, and the words between its pixels and between its rows."""
    oy, ox, sy, sx, h, w = pixels
    return 2 * h * w * total, (oy * w + ox) * total + first, sx * total, sy * w * total


def merged(k: int, phases: tuple[int, ...]) -> tuple[int, int, int, int, int]:
    """A merged conv of `k` channels, its phases written in place (`phases` = (sy, sx, height,
    width) of the result, a tensor of its own of M = k / (sy·sx) channels): the tensor's bytes, the
    words between the conv's pixels (sx·M) and between its rows (sy result rows), the CU stride in
    bytes (one result row: phase row a on CU a) and the kernels a CU takes (the row's sx·M)."""
    sy, sx, h, w = phases
    m = k // (sy * sx)
    return 2 * h * w * m, sx * m, sy * w * m, 2 * w * m, sx * m


def phases_refusal(plan: ConvPlan, phases: tuple[int, ...], hw: SnowflakeConfig) -> str | None:
    """Why a planned conv cannot write its channels as the phases of a (sy, sx, height, width)
    result in place (the output region's `phases`): each phase row's sx·M channels must sit on one
    CU's vMACs (the write-back writes a CU's vMACs contiguously, CUs one CU stride apart), so
    sx·M <= V and sy <= CUs, its grid must be exactly the result's, and the conv one COOP kernel
    tile by rows (its loads and mask place each kernel once)."""
    s = plan.shape
    sy, sx, h, w = phases
    if s.k % (sy * sx):
        return f"its {s.k} channels are not {sy}x{sx} phases of whole pixels"
    m = s.k // (sy * sx)
    if sx * m > hw.vmacs_per_cu:
        return f"a phase row's {sx}x{m} channels exceed a CU's {hw.vmacs_per_cu} vMACs"
    if sy > hw.cus:
        return f"its {sy} phase rows exceed the {hw.cus} CUs"
    if (sy * s.oh, sx * s.ow) != (h, w):
        return f"its {s.oh}x{s.ow} phase grid is not the {h}x{w} result's"
    why = "INDP" if plan.indp else "column-tiled" if plan.column_tiled else \
        "residual" if plan.bypass_addr is not None else "a fused pool's" if plan.pool is not None else \
        "grouped" if s.groups > 1 else f"{plan.tiles} kernel tiles" if plan.tiles != 1 else \
        "larger than the weights buffer" if s.kernel_words > hw.weights_buffer_elements else None
    return None if why is None else f"{why}: only a COOP conv of one kernel tile, by rows, spreads its kernels over the CUs"


def tiled(oh: int, ow: int, tiles: tuple[int, ...]) -> tuple[int, int, int, int, int]:
    """An oh x ow tensor stored channel-tile-major (`tiles` = (w, block, blocks): the output
    region's `channel_tiles`, a conv writing blocks block, block + 1, ... one per kernel tile of w
    kernels): the tensor's bytes, the conv's first word in it, the words between its pixels (w) and
    rows (OW·w), and the bytes between its kernel tiles' outputs (one block)."""
    w, block, blocks = tiles
    return 2 * oh * ow * w * blocks, block * oh * ow * w, w, ow * w, 2 * oh * ow * w


def block_offset(h: int, w: int, tiles: tuple[int, ...] | None) -> int:
    """The byte a block reader's input starts at in its channel-tile-major tensor (the maps region's
    `channel_tiles` = (w, block, blocks) of an h x w input), 0 when it reads a tensor as it lies."""
    return 0 if tiles is None else 2 * tiles[1] * h * w * tiles[0]


def channel_tiles_refusal(plan: ConvPlan, width: int, hw: SnowflakeConfig) -> str | None:
    """Why a planned conv cannot write its output channel-tile-major in blocks of `width` channels,
    one block per kernel tile through the write-back's address steps (pixels `width` words apart,
    tiles a block apart): it needs COOP kernel tiles of `width` kernels (an INDP vMAC writes 16
    kernels 16 words apart, its tile 64 kernels: 4 blocks the write-back cannot reach), K a
    multiple of them (a last partial tile would leave its block's other channels unwritten), and
    the row-by-row COOP code (no column bands, fused pool or streamed kernel; a residual input only
    when it is channel-tile-major too: its slices' block then steps with the output's)."""
    s = plan.shape
    if plan.indp:
        return "an INDP conv's vMACs write 16 kernels 16 words apart, 64 a tile: it runs COOP"
    if plan.kernels != width:
        return f"a kernel tile of {plan.kernels} kernels is not one {width}-channel block (COOP tiles of {width})"
    if s.k % width:
        return f"its {s.k} channels are not whole {width}-channel blocks"
    # a residual conv steps its bypass slices by R_TO: only a channel-tile-major bypass's blocks step as its output's
    if plan.column_tiled:
        why = "column-tiled"
    elif plan.bypass_addr is not None and not plan.bypass_tile:
        why = "residual with a bypass of whole pixels"
    elif plan.pool is not None:
        why = "a fused pool's"
    elif s.kernel_words > hw.weights_buffer_elements:
        why = "larger than the weights buffer"
    else:
        return None
    return f"{why}: only a COOP conv by rows steps its tiles' outputs a block apart"


def bypass_tiles_refusal(plan: ConvPlan, width: int) -> str | None:
    """Why a planned residual conv cannot read its bypass channel-tile-major in blocks of `width`
    channels: kernel tile t's slice is block t's rows, one LD a strip, so it needs COOP bypass
    slices of one kernel tile of `width` kernels, K whole blocks, and a bypass of its own pixels
    (no crop's window); the block step is a MULI of R_TO by OH·OW."""
    s = plan.shape
    if not plan.bypass_slices or plan.indp:
        return "a channel-tile-major bypass is read by a COOP conv's bypass slices (add bypass_slices, mode COOP)"
    if plan.slice_tiles != 1 or plan.kernels != width:
        return (f"a bypass slice of {plan.slice_tiles} tile(s) of {plan.kernels} kernels is not one {width}-channel "
                f"block (slice_tiles 1, COOP tiles of {width})")
    if s.k % width:
        return f"its {s.k} channels are not whole {width}-channel blocks"
    if plan.bypass_row:
        return "a crop's window of a channel-tile-major tensor is not read in place (remove one)"
    if s.oh * s.ow >= 1 << 16:
        return f"its {s.oh * s.ow} pixels a block are past a MULI's immediate"
    return None


def cropped(window: tuple[int, ...] | None, pixel: int) -> tuple[int, int]:
    """A crop's window (y0, x0, height, width) of a tensor of `pixel` words a pixel: the words before
    its first pixel and between its rows; (0, 0) for none."""
    if window is None:
        return 0, 0
    y0, x0, _, w = window
    return (y0 * w + x0) * pixel, w * pixel


def conv_layout(s: ConvShape, bypass: bool, mode: str = "COOP", hw: SnowflakeConfig | None = None,
                out_slice: tuple[int, int] = (0, 0), pixels: tuple[int, ...] | None = None,
                phases: tuple[int, ...] | None = None, tiles: tuple[int, ...] | None = None,
                in_tiles: tuple[int, ...] | None = None, maps_crop: tuple[int, ...] | None = None,
                bypass_crop: tuple[int, ...] | None = None) -> ConvLayout:
    """`out_slice` = (first channel, total channels) of the tensor the output is a slice of, (0, 0)
    for an output of its own; `pixels`: an interleave's phase (`interleaved`); `phases`: a merged
    conv's interleave result (`merged`); `tiles`: a channel-tile-major output (`tiled`);
    `in_tiles`: a block of a channel-tile-major input (the maps region spans its whole tensor);
    `maps_crop` / `bypass_crop`: the input / residual input a crop's window (y0, x0, height, width)
    of a wider tensor, the region that tensor (`cropped`)."""
    if in_tiles is not None and maps_crop is not None:
        raise LoweringError("a crop's window of a channel-tile-major tensor is not read in place")
    if maps_crop is not None:
        in_bytes = maps_crop[2] * maps_crop[3] * s.cin * 2
    else:
        in_bytes = s.h * s.w * s.cin * 2 * (in_tiles[2] if in_tiles is not None else 1)
    (in_first, in_row), (bypass_first, bypass_row) = cropped(maps_crop, s.cin), cropped(bypass_crop, s.k)
    reads = {"in_first": in_first, "in_row": in_row, "bypass_first": bypass_first, "bypass_row": bypass_row}
    lay = _conv_layout(s, bypass, mode, hw, in_bytes, out_slice, pixels, phases, tiles, reads)
    return replace(lay, in_first=block_offset(s.h, s.w, in_tiles) // 2) if in_tiles is not None else lay


def _conv_layout(s: ConvShape, bypass: bool, mode: str, hw: SnowflakeConfig | None, in_bytes: int,
                 out_slice: tuple[int, int], pixels: tuple[int, ...] | None, phases: tuple[int, ...] | None,
                 tiles: tuple[int, ...] | None, reads: dict[str, int]) -> ConvLayout:
    w_addr = align(in_bytes)
    hw = hw or SnowflakeConfig()
    w_bytes = 2 * packed_words(s, mode, packed_kernels(s, mode, hw), hw)
    out_addr = align(w_addr + w_bytes)
    first, total = out_slice
    if pixels is not None:
        out_bytes, word, step, row = interleaved(first, total or s.k, pixels)
        return ConvLayout(in_bytes, w_addr, w_bytes, out_addr, out_bytes, None, word, step, row, **reads)
    if phases is not None:
        out_bytes, step, row, cu, per_cu = merged(s.k, phases)
        return ConvLayout(in_bytes, w_addr, w_bytes, out_addr, out_bytes, None, 0, step, row, cu, per_cu, **reads)
    if tiles is not None:
        out_bytes, word, step, row, tile = tiled(s.oh, s.ow, tiles)
        return ConvLayout(in_bytes, w_addr, w_bytes, out_addr, out_bytes, align(out_addr + out_bytes) if bypass else None,
                          word, step, row, out_tile=tile, **reads)
    out_bytes = s.oh * s.ow * (total or s.k) * 2
    return ConvLayout(in_bytes, w_addr, w_bytes, out_addr, out_bytes, align(out_addr + out_bytes) if bypass else None,
                      first, total if total != s.k else 0, **reads)


LANE_GROUPS = "lane_groups"
"""nn.conv2d attribute (depthwise-to-grouped): a depthwise conv whose channel count is not a
multiple of the lanes, run as block-diagonal groups of 16 lanes, the last padded past C; its
packed image holds the block-diagonal kernels (`block_diagonal`)."""


def block_diagonal(w: np.ndarray, lanes: int) -> np.ndarray:
    """A depthwise conv's (C, 1, kh, kw) kernels as groups of `lanes` channels: kernel i reads
    its group's `lanes` channels, zero but on its own (channel i mod lanes)."""
    c, _, kh, kw = w.shape
    out = np.zeros((c, lanes, kh, kw), w.dtype)
    out[np.arange(c), np.arange(c) % lanes] = w[:, 0]
    return out


def pack_weights(w: np.ndarray, b: np.ndarray, tiles: int, kernels: int, biases: str = "kernel") -> np.ndarray:
    """(K, C, kh, kw) int16 weights + (K,) bias -> the DRAM weight image (tiles x `kernels`
    kernels, each followed by its bias block; or, `biases` maps, kernels alone, then the bias
    block and the layout's stamp)."""
    k, c, kh, kw = w.shape
    words = kh * kw * c + (BIAS_BLOCK if biases == "kernel" else 0)
    words += words % 2
    out = np.zeros((tiles * kernels, words), np.int16)
    out[:k, :kh * kw * c] = w.transpose(0, 2, 3, 1).reshape(k, -1)
    if biases == "kernel":
        out[:k, kh * kw * c] = b
        return out.ravel()
    return np.concatenate([out.ravel(), bias_block(b, kernels), layout_stamp("COOP", kernels)])


def bias_block(b: np.ndarray, kernels: int) -> np.ndarray:
    """The `maps` layout's bias block of (K,) biases, `kernels` a tile (plan/shapes.bias_block_words):
    per tile its biases (zeros past K), then as many zeros."""
    tiles = -(-b.size // kernels)
    padded = np.zeros(tiles * kernels, np.int16)
    padded[:b.size] = b
    out = np.zeros((tiles, 2, kernels), np.int16)
    out[:, 0] = padded.reshape(tiles, kernels)
    return out.ravel()


STAMP_WORDS = 2
"""A `maps` layout image ends with its layout (mode, kernels a tile), which no load reads: its size
alone does not tell the layouts apart (an INDP image over 256 channels is as long as a COOP one of
64 kernels a tile, and a COOP one's bias block is read by its tile), so a recorded `packing` or
`packed_kernels` that is not the image's is refused (tile/build.unpack_weights) rather than followed
as other weights."""


def layout_stamp(mode: str, kernels: int) -> np.ndarray:
    return np.array([int(mode == "INDP"), kernels], np.int16)


def pack_indp(w: np.ndarray, b: np.ndarray, hw: SnowflakeConfig, biases: str = "kernel") -> np.ndarray:
    """(K, C, kh, kw) weights + (K,) bias -> per tile, per vMAC: taps (ky, kx, c) x 16 kernels
    interleaved, then the 16 biases (`biases` maps: the kernels alone, then the bias block and the
    layout's stamp)."""
    k, c, kh, kw = w.shape
    lanes, tile = hw.lanes, kernels_per_tile(hw)
    tiles = -(-k // tile)
    taps = kh * kw * c
    s_words = lanes * (taps + (biases == "kernel"))
    s_words += s_words % 2
    full = np.zeros((tiles * tile, taps), np.int16)
    full[:k] = w.transpose(0, 2, 3, 1).reshape(k, taps)
    bias = np.zeros(tiles * tile, np.int16)
    bias[:k] = b
    out = np.zeros((tiles * hw.vmacs_per_cu, s_words), np.int16)
    groups = full.reshape(tiles * hw.vmacs_per_cu, lanes, taps)
    out[:, :taps * lanes] = groups.transpose(0, 2, 1).reshape(-1, taps * lanes)
    if biases == "kernel":
        out[:, taps * lanes:taps * lanes + lanes] = bias.reshape(-1, lanes)
        return out.ravel()
    return np.concatenate([out.ravel(), bias_block(b, tile), layout_stamp("INDP", tile)])


def packed_kernels(s: ConvShape, mode: str, hw: SnowflakeConfig) -> int:
    """Kernels per kernel tile of the weight image packed for `mode` (the planner's tile)."""
    return kernels_per_tile(hw) if mode == "INDP" else coop_kernels(hw, s)


def kernel_image_words(s: ConvShape, mode: str, kernels: int, hw: SnowflakeConfig) -> int:
    """Words of the weight image's kernels (with their bias blocks when `s.bias_at` is kernel)."""
    if mode == "INDP":
        return -(-s.k // kernels_per_tile(hw)) * hw.vmacs_per_cu * indp_kernel_words(s, hw)
    return -(-s.k // kernels) * kernels * s.kernel_words


def packed_words(s: ConvShape, mode: str, kernels: int, hw: SnowflakeConfig) -> int:
    """Words of the weight image of a conv packed for `mode` with `kernels` a tile, its biases
    where `s.bias_at` says (maps: the bias block and the layout stamp after the kernels)."""
    words = kernel_image_words(s, mode, kernels, hw)
    if s.bias_at == "maps":
        words += bias_block_words(s.k, kernels_per_tile(hw) if mode == "INDP" else kernels) + STAMP_WORDS
    return words


def pack_for(w: np.ndarray, b: np.ndarray, mode: str, kernels: int, hw: SnowflakeConfig,
             biases: str = "kernel") -> np.ndarray:
    """The weight image packed for `mode`, `kernels` a tile (INDP: the hardware's tile), its biases
    where `biases` says (dialects/tile/decisions.py BIAS_LAYOUTS)."""
    if mode == "INDP":
        return pack_indp(w, b, hw, biases)
    return pack_weights(w, b, -(-w.shape[0] // kernels), kernels, biases)


def bias_block_load(s: ConvShape, mode: str, kernels: int, w_addr: int, hw: SnowflakeConfig) -> tuple[int, int, int]:
    """A `maps` layout's bias block as its one load: (DRAM byte address, maps-buffer word, words)
    on the machine `hw` its plan sees (plan/shapes.plan_machine: the block right above its banks)."""
    words = bias_block_words(s.k, kernels_per_tile(hw) if mode == "INDP" else kernels)
    return w_addr + 2 * kernel_image_words(s, mode, kernels, hw), hw.maps_buffer_elements, words


def image_layout(image: np.ndarray, s: ConvShape) -> tuple[str, int] | None:
    """The (mode, kernels a tile) a `maps` layout image records in its stamp (None: `s` keeps the
    biases with the kernels, which records none)."""
    if s.bias_at != "maps" or image.size < STAMP_WORDS:
        return None
    code, kernels = (int(v) for v in image[-STAMP_WORDS:])
    return ("INDP" if code else "COOP"), kernels


def unpack_kernels(image: np.ndarray, s: ConvShape, mode: str, hw: SnowflakeConfig) -> tuple[np.ndarray, int]:
    """(K, C, kh, kw) weights from an image packed for `mode`, its biases where `s.bias_at` says,
    and the words the kernels take (a `maps` layout's bias block and stamp follow them: a COOP image
    of T kernel slots is T x (kernel words + 2) + 2 words, so its kernels' part follows from its size)."""
    taps = s.kh * s.kw * s.c
    maps = s.bias_at == "maps"
    if mode == "INDP":
        words = indp_kernel_words(s, hw)
        body = -(-s.k // kernels_per_tile(hw)) * hw.vmacs_per_cu * words if maps else image.size
        w = image[:body].reshape(-1, words)[:, :taps * hw.lanes].reshape(-1, taps, hw.lanes).transpose(0, 2, 1)
    else:
        words = s.kernel_words
        body = (image.size - STAMP_WORDS) // (words + 2) * words if maps else image.size
        w = image[:body].reshape(-1, words)[:, :taps]
    w = w.reshape(-1, taps)[:s.k]
    return w.reshape(s.k, s.kh, s.kw, s.c).transpose(0, 3, 1, 2).copy(), body


def unpack(image: np.ndarray, s: ConvShape, mode: str, hw: SnowflakeConfig,
           kernels: int) -> tuple[np.ndarray, np.ndarray]:
    """(K, C, kh, kw) weights and (K,) biases from an image packed for `mode` with `kernels` a
    tile, its biases where `s.bias_at` says (the inverse of `pack_for`; the image's size and, maps,
    its stamp are the caller's to check with `packed_words` and `image_layout`)."""
    w, body = unpack_kernels(image, s, mode, hw)
    taps = s.kh * s.kw * s.c
    if s.bias_at == "maps":  # the block after the kernels: per tile its biases, then as many zeros
        tile = kernels_per_tile(hw) if mode == "INDP" else kernels
        b = image[body:image.size - STAMP_WORDS].reshape(-1, 2, tile)[:, 0].reshape(-1)[:s.k]
    elif mode == "INDP":
        b = image.reshape(-1, indp_kernel_words(s, hw))[:, taps * hw.lanes:taps * hw.lanes + hw.lanes].reshape(-1)[:s.k]
    else:
        b = image.reshape(-1, s.kernel_words)[:s.k, taps]
    return w, b.copy()
