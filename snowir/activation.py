"""
The write-back activation unit ([P], `SnowflakeConfig.writeback_activation`): its functions,
their 32-bit `VMOV act` word, and their fixed-point arithmetic, defined once here for the
machine's write-back (machine/state.py, both engines) and the golden model.

The unit sits after bias, bypass and the write-back shift, before the 16-bit saturation and
ReLU: its input is the rounded sum, held as a signed 32-bit value (wider sums are clamped to it;
every function's result then saturates exactly as it would have from the wider value), so a
pre-activation beyond the output format's range (a sigmoid's input of 20 in Q0.15) still gives
the right output. The act word (docs/machine.md, "Write-back activation unit"):

    bits [2:0]  function: 0 none, 1 LeakyReLU, 2 clip, 3 hard-sigmoid, 4 hard-swish,
                5 sigmoid, 6 SiLU, 7 tanh
    bits [6:3]  f, the output's fraction bits (the unit works in the output's Qm.f)
    bits [31:7] parameters: LeakyReLU alpha in Q0.16 (16 bits); clip lo, hi as signed Q7.4
                (12 bits each); hard-sigmoid / hard-swish alpha, beta in Q0.12 (12 bits each)

Sigmoid, SiLU and tanh share one table: sigmoid at the 33 knots 0, 1/4, ..., 8 in Q0.16,
linear between them, 1 beyond 8, and sigmoid(-x) = 1 - sigmoid(x); tanh(x) = 2 sigmoid(2x) - 1.

This module is the unit's one declaration: `UNIT`, registered with snowir/writeback.py, is what
the machine, the golden model, the code generator, the DSE and nn-prepare read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from snowir import writeback
from snowir.errors import SnowError

FUNCTIONS = ("none", "leaky_relu", "clip", "hard_sigmoid", "hard_swish", "sigmoid", "silu", "tanh")
"""Function codes 0..7 of the act word's bits [2:0]."""
ACT_INPUT_BITS = 32
"""The unit's input: the rounded write-back sum, clamped to a signed 32-bit value."""
TABLE_STEP_LOG2 = 2
"""Knots 1/4 apart: the linear interpolation's error is below h^2/8 * max|sigmoid''| = 7.5e-4."""
TABLE_KNOTS = 33
"""0 .. 8 in steps of 1/4; beyond 8, sigmoid is 1 (1 - sigmoid(8) = 3.4e-4)."""
TABLE = np.array([round(2 ** 16 / (1 + math.exp(-k / 4))) for k in range(TABLE_KNOTS)], np.int64)
"""sigmoid(k/4) in Q0.16, k = 0..32."""
PIPELINE_CYCLES = 3
"""[P] the unit's pipeline: table read / gate, interpolation multiply, final multiply and round."""
LANES_PER_VMAC = 4
"""[P] unit lanes per vMAC: a write-back's values per vMAC (INDP 16, COOP 1) pass 4 a cycle."""
LANE_AREA = 3.0
"""MAC-equivalents per lane (the DSE's proxy, docs/dse.md): 2 multipliers (2 DSPs) + ~200 LUTs
of table and muxes."""
_SEG = 16 - TABLE_STEP_LOG2  # fraction bits of the position within a segment (Q.16 input)


@dataclass(frozen=True)
class Activation:
    """One function of the unit and its parameters (floats as the ONNX node gives them)."""

    kind: str
    params: tuple[float, ...] = ()

    def word(self, frac: int) -> int:
        """The VMOV act word for an output in Qm.`frac`; one line naming the function if a
        parameter does not fit its field."""
        if not 0 <= frac <= 15:
            raise SnowError(f"activation {self}: output fraction bits {frac} outside 0..15")
        code = FUNCTIONS.index(self.kind)
        word = code | frac << 3
        if self.kind == "leaky_relu":
            alpha = round(self.params[0] * 2 ** 16)
            if not 0 <= alpha < 1 << 16:
                raise SnowError(f"activation {self}: alpha outside [0, 1)")
            word |= alpha << 7
        elif self.kind == "clip":
            lo, hi = (round(p * 16) for p in self.params)
            if any(abs(p * 16 - q) > 1e-6 * max(1.0, abs(q)) for p, q in zip(self.params, (lo, hi))):
                raise SnowError(f"activation {self}: bounds off the unit's 1/16 grid")
            if not -(1 << 11) <= lo <= hi < 1 << 11:  # 12-bit signed fields
                raise SnowError(f"activation {self}: bounds outside [-128, 128) or lo > hi")
            word |= (lo & 0xFFF) << 7 | (hi & 0xFFF) << 19
        elif self.kind in ("hard_sigmoid", "hard_swish"):
            alpha, beta = (round(p * 2 ** 12) for p in self.params)
            if not (0 <= alpha < 1 << 12 and 0 <= beta < 1 << 12):  # 12-bit fields
                raise SnowError(f"activation {self}: alpha, beta outside [0, 1)")
            word |= alpha << 7 | beta << 19
        return word

    def __str__(self) -> str:
        return self.kind + (f"({', '.join(f'{p:.9g}' for p in self.params)})" if self.params else "")

    @staticmethod
    def parse(text: str) -> Activation:
        """`silu`, `leaky_relu(0.1)`, `clip(0, 6)`, `hard_sigmoid(0.2, 0.5)`: the nn conv's `act`."""
        kind, _, rest = text.partition("(")
        params = tuple(float(p) for p in rest.rstrip(")").split(",")) if rest else ()
        need = {"leaky_relu": 1, "clip": 2, "hard_sigmoid": 2, "hard_swish": 2}.get(kind, 0)
        if kind not in FUNCTIONS[1:] or len(params) != need:
            raise SnowError(f"activation '{text}': not one of the write-back unit's functions "
                            f"({', '.join(FUNCTIONS[1:])}) with its parameters")
        return Activation(kind, params)

    def float(self, x: np.ndarray) -> np.ndarray:
        """The function in float (the float model of a fused conv, and the accuracy reference)."""
        x = np.asarray(x, np.float64)
        if self.kind == "leaky_relu":
            y = np.where(x >= 0, x, x * self.params[0])
        elif self.kind == "clip":
            y = np.clip(x, *self.params)
        elif self.kind == "hard_sigmoid":
            y = np.clip(self.params[0] * x + self.params[1], 0, 1)
        elif self.kind == "hard_swish":
            y = x * np.clip(self.params[0] * x + self.params[1], 0, 1)
        elif self.kind == "sigmoid":
            y = 1 / (1 + np.exp(-x))
        elif self.kind == "silu":
            y = x / (1 + np.exp(-x))
        else:
            y = np.tanh(x)
        return y.astype(np.float32)


def _sigmoid_q16(a: np.ndarray, frac: int, scale_log2: int = 0) -> np.ndarray:
    """sigmoid(a * 2^scale_log2 / 2^frac) in Q0.16 for a >= 0 (int64), from the table."""
    x = a << (16 - frac + scale_log2)  # Q.16; a < 2^31, so x < 2^48
    k = x >> _SEG
    inside = k < TABLE_KNOTS - 1
    kk = np.where(inside, k, 0)
    r = x & ((1 << _SEG) - 1)
    lo, hi = TABLE[kk], TABLE[kk + 1]
    return np.where(inside, lo + (((hi - lo) * r + (1 << (_SEG - 1))) >> _SEG), 1 << 16)


def apply(word: int, v: np.ndarray) -> np.ndarray:
    """The unit's output (int64, before saturation and ReLU) for rounded write-back sums `v`
    (int64, output format Qm.f) under act word `word`; word 0 is the identity."""
    code = word & 7
    if code == 0:
        return v
    frac = word >> 3 & 15
    v = np.clip(np.asarray(v, np.int64), -(1 << (ACT_INPUT_BITS - 1)), (1 << (ACT_INPUT_BITS - 1)) - 1)
    half16 = 1 << 15
    if code == 1:  # LeakyReLU: x, or round(alpha * x)
        alpha = word >> 7 & 0xFFFF
        return np.where(v >= 0, v, (v * alpha + half16) >> 16)
    if code == 2:  # clip to [lo, hi], the Q7.4 bounds in Qm.f (floor when f < 4)
        lo, hi = _signed12(word >> 7), _signed12(word >> 19)
        lo = lo << (frac - 4) if frac >= 4 else lo >> (4 - frac)
        hi = hi << (frac - 4) if frac >= 4 else hi >> (4 - frac)
        return np.clip(v, lo, hi)
    if code in (3, 4):  # hard-sigmoid: clamp(alpha x + beta, 0, 1) in Q.(f+12); hard-swish: x times it
        alpha, beta = word >> 7 & 0xFFF, word >> 19 & 0xFFF
        gate = np.clip(v * alpha + (beta << frac), 0, 1 << (frac + 12))
        if code == 3:
            return (gate + (1 << 11)) >> 12
        return (v * gate + (1 << (frac + 11))) >> (frac + 12)
    a = np.abs(v)
    if code == 7:  # tanh(x) = 2 sigmoid(2x) - 1, odd
        t = 2 * _sigmoid_q16(a, frac, 1) - (1 << 16)
        mag = ((t << frac) + half16) >> 16
        return np.where(v < 0, -mag, mag)
    s = _sigmoid_q16(a, frac)
    s = np.where(v < 0, (1 << 16) - s, s)
    if code == 5:  # sigmoid
        return ((s << frac) + half16) >> 16
    return (v * s + half16) >> 16  # SiLU: x sigmoid(x)


def unit_cycles(lanes: int, indp: bool) -> int:
    """Cycles a write-back spends in the unit before the result pipeline (timing.py): its
    pipeline, and its values per vMAC (INDP: `lanes`, COOP: 1) through LANES_PER_VMAC lanes.
    Write-backs closer together than this are not held up by one another (not modelled: an
    INDP write-back's MAC takes at least its trace's cycles, as long as the unit's 4 for L >= 4)."""
    return PIPELINE_CYCLES + (-(-lanes // LANES_PER_VMAC) if indp else 1)


def _signed12(bits: int) -> int:
    bits &= 0xFFF
    return bits - (1 << 12) if bits & 0x800 else bits


def describe(word: int) -> str:
    """The act word as text (`silu, Q.8`), for traces and messages."""
    return f"{FUNCTIONS[word & 7]}, Q.{word >> 3 & 15}" if word & 7 else "none"


UNIT = writeback.register(writeback.WritebackUnit(
    name="act", switch="writeback_activation", title="activation",
    word=lambda text, frac: Activation.parse(text).word(frac),
    apply=apply,
    in_float=lambda text, x: Activation.parse(text).float(x),
    cycles=unit_cycles,
    area_per_vmac=LANE_AREA * LANES_PER_VMAC,
    describe=describe,
    nn_pass=writeback.UnitPass("fuse-activation",
                               writeback.lazy_class("snowir.passes.nn.fuse_activation", "FuseActivationPass")),
    absorbs=("Sigmoid", "LeakyRelu", "Tanh", "HardSigmoid", "HardSwish", "Elu", "Relu6",
             "nn.clip", "nn.hard_sigmoid", "nn.hard_swish"),
))
"""The write-back activation unit: `VMOV act`, `act = "silu"` on an nn.conv2d, `act = <word>` in
#tile.conv_shape; fuse-activation sets it."""
