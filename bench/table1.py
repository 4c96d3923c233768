"""
C17 Table 1 calibration: the four AlexNet conv layers compiled by snowir (each as an ONNX
conv + ReLU through the whole pipeline) and run on the machine model (default SnowflakeConfig), against the paper's hand / auto times and the
padding-free compute bound. Also reports each layer's outputs bit-exact vs the golden
arithmetic. Prints a table, writes table1.json:

    python bench/table1.py [--hw HW.json] [--out DIR | --update-results]   # build/bench/ or bench/results/
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from onnx import helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from onnx_util import model, rand  # noqa: E402

from snowir.hw import SnowflakeConfig  # noqa: E402

from _output import add_output_options, machine_speed, output_file, speed_line, with_speed  # noqa: E402

LAYERS = [  # (C, H, W, K, kh, kw, stride, pad), paper hand / auto ms
    ((64, 27, 27, 192, 5, 5, 1, 2), 3.256, 3.261),
    ((192, 13, 13, 384, 3, 3, 1, 1), 1.627, 1.624),
    ((384, 13, 13, 256, 3, 3, 1, 1), 2.188, 2.187),
    ((256, 13, 13, 256, 3, 3, 1, 1), 1.462, 1.458),
]


def layer_model(shape: tuple[int, ...]):
    """A Table 1 layer as an ONNX conv + ReLU (c, h, w, k, kh, kw, stride, pad), random weights."""
    c, h, w, k, kh, kw, s, pad = shape
    return model([helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[kh, kw], strides=[s, s],
                                   pads=[pad] * 4), helper.make_node("Relu", ["y"], ["o"])],
                 {"x": [1, c, h, w]}, {"o": None},
                 {"w": rand(k, c, kh, kw, seed=1, scale=1 / np.sqrt(c * kh * kw)), "b": rand(k, seed=2, scale=0.1)})


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--hw")
    add_output_options(p, "table1.json")
    args = p.parse_args()
    if args.hw and args.update_results:
        p.error("--update-results records the default machine only: a --hw run is a what-if")
    speed = machine_speed()  # the machine, in the run whose seconds it qualifies
    hw = SnowflakeConfig.load(args.hw)
    import tempfile

    import onnx

    from snowir.plan.shapes import ConvShape
    from snowir.driver.model_api import run_model_on_device

    rows = []
    for shape, hand, auto in LAYERS:
        t0 = time.perf_counter()
        c, h, w, k, kh, kw, s, pad = shape
        # the layer as the compiler sees it (an ONNX conv + ReLU through the whole pipeline, so
        # split-kernels' cost decision applies); its device parts' cycles add up
        m = layer_model(shape)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "layer.onnx"
            onnx.save(m, path)
            run = run_model_on_device(path, check=True, hw=hw)
        parts = [layer for layer in run.report["layers"] if layer["op"] == "conv2d"]
        cycles = sum(layer["cycles"] for layer in parts)
        bound = ConvShape(c, h, w, k, kh, kw, s, s, pad, pad, pad, pad, True, 8).valid_macs() / hw.macs
        ms = hw.cycles_to_ms(cycles)
        rows.append({"layer": f"{h}x{w},{kh}x{kw},{c}->{k},s{s},p{pad}", "ms": ms, "paper_hand_ms": hand,
                     "paper_auto_ms": auto, "vs_hand_pct": 100 * (ms / hand - 1), "bound_ms": hw.cycles_to_ms(bound),
                     "of_bound_pct": 100 * bound / cycles, "paper_of_bound_pct": 100 * hw.cycles_to_ms(bound) / hand,
                     "bit_exact": bool(run.report["check"]["golden_bit_exact"]), "parts": len(parts),
                     "loop_order": parts[0]["loop_order"], "stalls": {k_: sum(layer["stall_cycles"].get(k_, 0)
                                                                             for layer in parts)
                                                                     for k_ in parts[0]["stall_cycles"]},
                     "seconds": time.perf_counter() - t0})
    head = f"{'layer':<26} {'snowir ms':>9} {'hand ms':>8} {'diff':>7} {'bound ms':>8} {'of bound':>8} {'paper':>6} {'parts':>5} {'exact':>5}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['layer']:<26} {r['ms']:>9.3f} {r['paper_hand_ms']:>8.3f} {r['vs_hand_pct']:>+6.1f}% {r['bound_ms']:>8.3f} "
              f"{r['of_bound_pct']:>7.1f}% {r['paper_of_bound_pct']:>5.1f}% {r['parts']:>5} {str(r['bit_exact']):>5}")
    speed = machine_speed(speed)  # again at the end: a load that came or went shows
    print(speed_line(speed))
    output_file(args, "table1.json").write_text(
        json.dumps(with_speed({"hw": hw.to_json(), "rows": rows}, speed), indent=2) + "\n")


if __name__ == "__main__":
    main()
