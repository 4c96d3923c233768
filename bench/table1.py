"""
C17 Table 1 calibration: the four AlexNet conv layers compiled by snowir and run on the
machine model (default SnowflakeConfig), against the paper's hand / auto times and the
padding-free compute bound. Also reports each layer's outputs bit-exact vs the golden
arithmetic. `python bench/table1.py [--hw HW.json]` prints a table, writes bench/results/table1.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_lowering import conv_case  # noqa: E402 - one layer = the same harness the tests use

from snowir.hw import SnowflakeConfig  # noqa: E402

OUT = Path(__file__).parent / "results" / "table1.json"
LAYERS = [  # (C, H, W, K, kh, kw, stride, pad), paper hand / auto ms
    ((64, 27, 27, 192, 5, 5, 1, 2), 3.256, 3.261),
    ((192, 13, 13, 384, 3, 3, 1, 1), 1.627, 1.624),
    ((384, 13, 13, 256, 3, 3, 1, 1), 2.188, 2.187),
    ((256, 13, 13, 256, 3, 3, 1, 1), 1.462, 1.458),
]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--hw")
    args = p.parse_args()
    hw = SnowflakeConfig.load(args.hw)
    import test_lowering

    test_lowering.HW = hw
    rows = []
    for shape, hand, auto in LAYERS:
        t0 = time.perf_counter()
        run, got, want, plan, image = conv_case(*shape)
        c, h, w, k, kh, kw, s, pad = shape
        bound = plan.shape.valid_macs() / hw.macs
        ms = hw.cycles_to_ms(run.cycles)
        rows.append({"layer": f"{h}x{w},{kh}x{kw},{c}->{k},s{s},p{pad}", "ms": ms, "paper_hand_ms": hand,
                     "paper_auto_ms": auto, "vs_hand_pct": 100 * (ms / hand - 1), "bound_ms": hw.cycles_to_ms(bound),
                     "of_bound_pct": 100 * bound / run.cycles, "paper_of_bound_pct": 100 * hw.cycles_to_ms(bound) / hand,
                     "bit_exact": bool(np.array_equal(got, want)), "loop_order": plan.loop_order,
                     "strips": len(plan.strips), "weights_double_buffered": plan.double_buffer_weights,
                     "stalls": {k_: int(v) for k_, v in run.timing.stalls.items()}, "instructions": len(image.code),
                     "seconds": time.perf_counter() - t0})
    head = f"{'layer':<26} {'snowir ms':>9} {'hand ms':>8} {'diff':>7} {'bound ms':>8} {'of bound':>8} {'paper':>6} {'dbl-buf W':>9} {'exact':>5}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['layer']:<26} {r['ms']:>9.3f} {r['paper_hand_ms']:>8.3f} {r['vs_hand_pct']:>+6.1f}% {r['bound_ms']:>8.3f} "
              f"{r['of_bound_pct']:>7.1f}% {r['paper_of_bound_pct']:>5.1f}% {str(r['weights_double_buffered']):>9} {str(r['bit_exact']):>5}")
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps({"hw": hw.to_json(), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
