"""
SE blocks with the gate multiply on the host vs on the device (issue 36 item 6), on exporter-style
models built with onnx.helper: a 3x3 conv 16 -> C, a 3x3 conv C -> C, an SE block over its output
(GlobalAveragePool, 1x1 C -> C/4, ReLU, 1x1 C/4 -> C, Sigmoid, Mul) and a 1x1 projection, at
MobileNetV3 / PP-LCNet / CUNet-like widths and sizes. "before" runs nn-prepare with se-gate off
(the Mul on the host), "after" with it on (the Mul a 1x1 depthwise conv whose kernels the host
writes). Machine model, fast engine, whole-model programs, seeded weights; each run checked
bit-exact with the golden model and against onnxruntime.

    python bench/se_blocks.py [--out DIR | --update-results]   # table + se_blocks.json in build/bench/
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from snowir.driver.model_api import compile as compile_model

from _output import add_output_options, forget_blobs, output_file

SHAPES = [(32, 20), (64, 40), (72, 28), (128, 14), (240, 14)]
"""(C, H = W) of the SE block's input."""


def se_model(c: int, size: int, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def conv(x: str, cin: int, cout: int, k: int, name: str, relu: bool = True) -> str:
        w = (rng.standard_normal((cout, cin, k, k)) * 0.7 * np.sqrt(2 / (cin * k * k))).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, f"{name}_w"),
                      numpy_helper.from_array((0.05 * rng.standard_normal(cout)).astype(np.float32), f"{name}_b")])
        out = f"{name}_c" if relu else name
        nodes.append(helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [out], name=name, pads=[k // 2] * 4))
        if relu:
            nodes.append(helper.make_node("Relu", [out], [name], name=f"{name}_relu"))
        return name

    y = conv(conv("x", 16, c, 3, "stem"), c, c, 3, "body")
    nodes.append(helper.make_node("GlobalAveragePool", [y], ["gap"], name="gap"))
    s = conv(conv("gap", c, c // 4, 1, "fc1"), c // 4, c, 1, "fc2", relu=False)
    nodes += [helper.make_node("Sigmoid", [s], ["gate"], name="gate"),
              helper.make_node("Mul", [y, "gate"], ["scaled"], name="scale")]
    out = conv("scaled", c, c, 1, "proj")
    g = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, size, size])],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, c, size, size])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def measure(m: onnx.ModelProto, x: np.ndarray, se_gate: bool) -> dict:
    pipeline = None if se_gate else "nn-prepare{se-gate=false}"
    result = compile_model(m, pipeline=pipeline).run(x, check=True)
    report = result.report.to_json()
    scale = next(layer for layer in report["layers"] if layer["name"] == "scale")
    total, check = report["total"], result.report.check
    return {"scale": {k: scale[k] for k in ("op", "where", "ms", "host_ms")},
            "device_ms": total["ms"], "host_ms": total["host_ms"], "round_trip_ms": total["round_trip_ms"],
            "end_to_end_ms": total["end_to_end_ms"], "golden_bit_exact": check.golden_bit_exact,
            "snr_db": check.snr_db}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    add_output_options(parser, "se_blocks.json")
    args = parser.parse_args()
    rows = []
    print(f"{'C x H x W':14} {'run':7} {'scale':9} {'scale ms':>9} {'device ms':>10} {'host ms':>8} {'trips ms':>9} "
          f"{'e2e ms':>8} {'exact':>6} {'SNR':>6}")
    for c, size in SHAPES:
        m = se_model(c, size)
        x = np.random.default_rng(1).standard_normal((1, 16, size, size)).astype(np.float32)
        row = {"c": c, "size": size}
        for name, on in (("before", False), ("after", True)):
            r = row[name] = measure(m, x, on)
            forget_blobs()
            print(f"{f'{c} x {size} x {size}':14} {name:7} {r['scale']['where']:9} "
                  f"{r['scale']['ms'] or r['scale']['host_ms'] or 0.0:9.3f} {r['device_ms']:10.3f} {r['host_ms']:8.3f} "
                  f"{r['round_trip_ms']:9.3f} {r['end_to_end_ms']:8.3f} {str(r['golden_bit_exact']):>6} "
                  f"{r['snr_db']:6.1f}")
        rows.append(row)
    path = output_file(args, "se_blocks.json")
    path.write_text(json.dumps(rows, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
