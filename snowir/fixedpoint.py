"""
The fixed-point arithmetic of Snowflake, defined once.

The machine model's MAC write-back and the golden model both call these functions,
so "bit-exact with the golden model" compares two uses of one definition of rounding,
saturation and accumulator width (docs/machine.md, "Arithmetic").

  * data: signed 16-bit Qm.n (m + n = 16), n = `frac` fraction bits (Q8.8: frac = 8);
  * products: 16 x 16 -> 32-bit Q(2m).(2n), exact;
  * accumulator: 48-bit signed (DSP48-style); the model keeps int64 and faults on
    overflow of 48 bits instead of wrapping silently;
  * write-back: acc + (bias << n) + (bypass << n), round half up to n fraction bits
    ((x + 2^(n-1)) >> n, arithmetic shift), saturate to int16, then ReLU.

Saturation is counted, never silent: `clipped` marks the write-back values the saturation
changed (a value below the range that ReLU makes 0 anyway is not one), `quantize_counted` the
inputs that do not fit; the golden model and the machine report these counts per layer.
"""

from __future__ import annotations

import math

import numpy as np

ACC_BITS = 48
ACC_LIMIT = 1 << (ACC_BITS - 1)
# [choice] the write-back shift (`vmov shift`) takes 1..30: input + weight - output fraction
# bits when each tensor has its own format (docs/isa.md); a 5-bit barrel shift of the 48-bit sum
MAX_WB_SHIFT = 30
INT16_MIN = -(1 << 15)
INT16_MAX = (1 << 15) - 1


def writeback_rounded(acc: np.ndarray, bias: np.ndarray | int, bypass: np.ndarray | int,
                      frac: int) -> np.ndarray:
    """The write-back's sum rounded to the output's fraction bits, before saturation (int64)."""
    total = acc.astype(np.int64) + (np.asarray(bias, np.int64) << frac) + (
        np.asarray(bypass, np.int64) << frac)
    return (total + (1 << (frac - 1))) >> frac


def saturate(rounded: np.ndarray, relu: bool) -> np.ndarray:
    """Saturate to int16, then ReLU: the value written back."""
    out = np.clip(rounded, INT16_MIN, INT16_MAX)
    if relu:
        out = np.maximum(out, 0)
    return out.astype(np.int16)


def clipped(rounded: np.ndarray, relu: bool | np.ndarray) -> np.ndarray:
    """Where saturation changed the written value: above INT16_MAX, or below INT16_MIN without
    ReLU (ReLU writes 0 there whatever the range). `relu` broadcasts against `rounded`."""
    high = rounded > INT16_MAX
    if relu is True:
        return high
    low = rounded < INT16_MIN
    if relu is not False:
        low &= ~np.asarray(relu, bool)
    return high | low


def clipped_count(rounded: np.ndarray, relu: bool) -> int:
    """How many values `clipped` marks; two reductions when none is out of range (the usual case)."""
    if not rounded.size or (int(rounded.max()) <= INT16_MAX and (relu or int(rounded.min()) >= INT16_MIN)):
        return 0
    return int(np.count_nonzero(clipped(rounded, relu)))


def writeback(acc: np.ndarray, bias: np.ndarray | int, bypass: np.ndarray | int,
              frac: int, relu: bool) -> np.ndarray:
    """Accumulator (int64, scale 2^(n+frac)) -> int16 Qm.n output, exactly as the hardware;
    `frac` is the write-back shift (the weights' fraction bits)."""
    return saturate(writeback_rounded(acc, bias, bypass, frac), relu)


def accumulator_overflows(acc: np.ndarray) -> bool:
    return bool(acc.size) and (int(acc.max()) >= ACC_LIMIT or int(acc.min()) < -ACC_LIMIT)


def frac_for(peak: float, most: int = 15) -> int:
    """Most fraction bits (0..`most`) of a 16-bit word that still hold `peak`."""
    if peak <= 0.0:
        return most
    return int(max(0, min(most, math.floor(math.log2(INT16_MAX / peak)))))


def quantize(x: np.ndarray, frac: int) -> np.ndarray:
    """float -> int16 Qm.n: round half away from zero, saturate."""
    return quantize_counted(x, frac)[0]


def quantize_counted(x: np.ndarray, frac: int) -> tuple[np.ndarray, int]:
    """`quantize`, and how many values it saturated."""
    x = np.asarray(x)
    saturated = 0
    out = np.empty(x.shape, np.int16)
    flat, dst = x.reshape(-1), out.reshape(-1)
    step = 1 << 20  # in chunks: a few MB of float64 temporaries, not 8 bytes per weight of VGG-19
    for lo in range(0, flat.size, step):
        scaled = flat[lo:lo + step].astype(np.float64) * (1 << frac)
        rounded = np.floor(np.abs(scaled) + 0.5)
        np.copysign(rounded, scaled, out=rounded)
        if rounded.size and (rounded.max() > INT16_MAX or rounded.min() < INT16_MIN):
            saturated += int(np.count_nonzero((rounded > INT16_MAX) | (rounded < INT16_MIN)))
        np.clip(rounded, INT16_MIN, INT16_MAX, out=rounded)
        dst[lo:lo + step] = rounded
    return out, saturated


def dequantize(q: np.ndarray, frac: int) -> np.ndarray:
    return np.asarray(q, np.float64).astype(np.float32) / np.float32(1 << frac)


def wrap32(value: int) -> int:
    """Scalar register arithmetic wraps to signed 32 bits."""
    return ((value + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
