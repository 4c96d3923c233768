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


def writeback(acc: np.ndarray, bias: np.ndarray | int, bypass: np.ndarray | int,
              frac: int, relu: bool) -> np.ndarray:
    """Accumulator (int64, scale 2^(n+frac)) -> int16 Qm.n output, exactly as the hardware;
    `frac` is the write-back shift (the weights' fraction bits)."""
    total = acc.astype(np.int64) + (np.asarray(bias, np.int64) << frac) + (
        np.asarray(bypass, np.int64) << frac)
    rounded = (total + (1 << (frac - 1))) >> frac
    out = np.clip(rounded, INT16_MIN, INT16_MAX)
    if relu:
        out = np.maximum(out, 0)
    return out.astype(np.int16)


def accumulator_overflows(acc: np.ndarray) -> bool:
    return bool(acc.size) and (int(acc.max()) >= ACC_LIMIT or int(acc.min()) < -ACC_LIMIT)


def frac_for(peak: float, most: int = 15) -> int:
    """Most fraction bits (0..`most`) of a 16-bit word that still hold `peak`."""
    if peak <= 0.0:
        return most
    return int(max(0, min(most, math.floor(math.log2(INT16_MAX / peak)))))


def quantize(x: np.ndarray, frac: int) -> np.ndarray:
    """float -> int16 Qm.n: round half away from zero, saturate."""
    x = np.asarray(x)
    out = np.empty(x.shape, np.int16)
    flat, dst = x.reshape(-1), out.reshape(-1)
    step = 1 << 20  # in chunks: a few MB of float64 temporaries, not 8 bytes per weight of VGG-19
    for lo in range(0, flat.size, step):
        scaled = flat[lo:lo + step].astype(np.float64) * (1 << frac)
        rounded = np.floor(np.abs(scaled) + 0.5)
        np.copysign(rounded, scaled, out=rounded)
        np.clip(rounded, INT16_MIN, INT16_MAX, out=rounded)
        dst[lo:lo + step] = rounded
    return out


def dequantize(q: np.ndarray, frac: int) -> np.ndarray:
    return np.asarray(q, np.float64).astype(np.float32) / np.float32(1 << frac)


def wrap32(value: int) -> int:
    """Scalar register arithmetic wraps to signed 32 bits."""
    return ((value + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
