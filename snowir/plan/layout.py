"""
A conv layer's DRAM image: its regions (maps at 0, then weights, output, bypass) and its weight
image packed for COOP (kernel after kernel, each with its bias block) or INDP (16 kernels
interleaved per vMAC).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from snowir.hw import SnowflakeConfig
from snowir.plan.shapes import BIAS_BLOCK, ConvShape, align, coop_kernels, indp_kernel_words, kernels_per_tile


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
    in_addr: int = 0
    """The maps region's byte address (0 in a layer's own image, where the maps come first)."""
    in_first: int = 0
    """A crop's window of a wider input tensor (the maps region's `crop`): the words before its first
    pixel; `in_row` the tensor's row (0: an input of its own)."""
    in_row: int = 0
    bypass_first: int = 0
    """The same of a residual input that is a crop's window (the bypass region's `crop`)."""
    bypass_row: int = 0


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


def cropped(window: tuple[int, ...] | None, pixel: int) -> tuple[int, int]:
    """A crop's window (y0, x0, height, width) of a tensor of `pixel` words a pixel: the words before
    its first pixel and between its rows; (0, 0) for none."""
    if window is None:
        return 0, 0
    y0, x0, _, w = window
    return (y0 * w + x0) * pixel, w * pixel


def conv_layout(s: ConvShape, bypass: bool, mode: str = "COOP", hw: SnowflakeConfig | None = None,
                out_slice: tuple[int, int] = (0, 0), pixels: tuple[int, ...] | None = None,
                phases: tuple[int, ...] | None = None, maps_crop: tuple[int, ...] | None = None,
                bypass_crop: tuple[int, ...] | None = None) -> ConvLayout:
    """`out_slice` = (first channel, total channels) of the tensor the output is a slice of, (0, 0)
    for an output of its own; `pixels`: an interleave's phase (`interleaved`); `phases`: a merged
    conv's interleave result (`merged`); `maps_crop` / `bypass_crop`: the input / residual input a
    crop's window (y0, x0, height, width) of a wider tensor, the region that tensor (`cropped`)."""
    in_bytes = (s.h * s.w if maps_crop is None else maps_crop[2] * maps_crop[3]) * s.cin * 2
    (in_first, in_row), (bypass_first, bypass_row) = cropped(maps_crop, s.cin), cropped(bypass_crop, s.k)
    reads = {"in_first": in_first, "in_row": in_row, "bypass_first": bypass_first, "bypass_row": bypass_row}
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


def packed_kernels(s: ConvShape, mode: str, hw: SnowflakeConfig) -> int:
    """Kernels per kernel tile of the weight image packed for `mode` (the planner's tile)."""
    return kernels_per_tile(hw) if mode == "INDP" else coop_kernels(hw, s)


def packed_words(s: ConvShape, mode: str, kernels: int, hw: SnowflakeConfig) -> int:
    """Words of the weight image of a conv packed for `mode` with `kernels` a tile."""
    if mode == "INDP":
        return -(-s.k // kernels_per_tile(hw)) * hw.vmacs_per_cu * indp_kernel_words(s, hw)
    return -(-s.k // kernels) * kernels * s.kernel_words


def pack_for(w: np.ndarray, b: np.ndarray, mode: str, kernels: int, hw: SnowflakeConfig) -> np.ndarray:
    """The weight image packed for `mode`, `kernels` a tile (INDP: the hardware's tile)."""
    return pack_indp(w, b, hw) if mode == "INDP" else pack_weights(w, b, -(-w.shape[0] // kernels), kernels)


def unpack(image: np.ndarray, s: ConvShape, mode: str, hw: SnowflakeConfig) -> tuple[np.ndarray, np.ndarray]:
    """(K, C, kh, kw) weights and (K,) biases from an image packed for `mode` (the inverse of
    `pack_for`; the image's size is the caller's to check with `packed_words`)."""
    taps = s.kh * s.kw * s.c
    if mode == "INDP":
        blocks = image.reshape(-1, indp_kernel_words(s, hw))
        w = blocks[:, :taps * hw.lanes].reshape(-1, taps, hw.lanes).transpose(0, 2, 1).reshape(-1, taps)[:s.k]
        b = blocks[:, taps * hw.lanes:taps * hw.lanes + hw.lanes].reshape(-1)[:s.k]
    else:
        rows = image.reshape(-1, s.kernel_words)
        w, b = rows[:s.k, :taps], rows[:s.k, taps]
    return w.reshape(s.k, s.kh, s.kw, s.c).transpose(0, 3, 1, 2).copy(), b.copy()
