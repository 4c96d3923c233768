"""
The write-back activation unit's accuracy (snowir/activation.py) against the exact function:
for every input an output format Qm.f holds (all 2^16 int16 values at f fraction bits), the
unit's result against the real function's value, in LSBs of Qm.f, after the 16-bit saturation
both get. docs/machine.md ("Write-back activation unit") quotes this table.

    python bench/activation_accuracy.py [--frac 8 12]
"""

from __future__ import annotations

import argparse

import numpy as np

from snowir.activation import Activation, apply
from snowir.fixedpoint import INT16_MAX, INT16_MIN

FUNCTIONS = (Activation("leaky_relu", (0.1,)), Activation("clip", (0, 6)), Activation("hard_sigmoid", (0.2, 0.5)),
             Activation("hard_swish", (1 / 6, 0.5)), Activation("sigmoid"), Activation("silu"), Activation("tanh"))
EXACT = {"leaky_relu": lambda x: np.where(x >= 0, x, 0.1 * x), "clip": lambda x: np.clip(x, 0, 6),
         "hard_sigmoid": lambda x: np.clip(0.2 * x + 0.5, 0, 1), "hard_swish": lambda x: x * np.clip(x / 6 + 0.5, 0, 1),
         "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "silu": lambda x: x / (1 + np.exp(-x)), "tanh": np.tanh}
"""In float64 from the exact parameters (not the unit's quantised ones: their error counts)."""


def errors(act: Activation, frac: int) -> tuple[float, float, float]:
    """(max abs error in LSBs, the input where it is, mean abs error in LSBs)."""
    v = np.arange(INT16_MIN, INT16_MAX + 1, dtype=np.int64)
    got = np.clip(apply(act.word(frac), v), INT16_MIN, INT16_MAX)
    want = np.clip(EXACT[act.kind](v / 2.0 ** frac) * 2.0 ** frac, INT16_MIN, INT16_MAX)
    err = np.abs(got - want)
    i = int(np.argmax(err))
    return float(err.max()), float(v[i] / 2.0 ** frac), float(err.mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--frac", type=int, nargs="+", default=[8, 12])
    args = ap.parse_args()
    print("| function | " + " | ".join(f"Q{16 - f}.{f} max (at x) | mean" for f in args.frac) + " |")
    print("|---|" + "---|---|" * len(args.frac))
    for act in FUNCTIONS:
        cells = []
        for f in args.frac:
            worst, at, mean = errors(act, f)
            cells += [f"{worst:.2f} ({at:g})", f"{mean:.3f}"]
        print(f"| {act} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
