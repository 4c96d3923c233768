"""Where a model's conv time exceeds its bound, per layer class (issue 38): reads a `snow-run
--report` JSON and the ONNX model it ran, groups the device convs by kernel, channels and output
size (channel parts of one conv under their conv's class, marked "(parts)") and prints a
Markdown table of measured ms, bound ms (compute and traffic parts, snowir/driver/bound.py),
the excess and the share, largest excess first, then the model's per-layer bound (the sum of
each layer's max) against max(sum of compute, sum of traffic): how much a schedule that
overlapped one layer's loads with another's compute could gain at most.

    python bench/bound_classes.py report.json model.onnx
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

import onnx
from onnx import shape_inference

FIELDS = ("ms", "bound_ms", "bound_compute_ms", "bound_bus_ms", "dram_bytes")


def classes(report: dict, model: onnx.ModelProto) -> dict[str, list[float]]:
    """Per class: [layers, measured ms, bound ms, compute ms, traffic ms, bytes moved]."""
    m = shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*m.graph.value_info, *m.graph.input, *m.graph.output]}
    weights = {i.name: list(i.dims) for i in m.graph.initializer}
    nodes = {node.name: node for node in m.graph.node}
    out: dict[str, list[float]] = defaultdict(lambda: [0.0] * (1 + len(FIELDS)))
    for row in report["layers"]:
        if row["where"] != "device" or row["op"] != "conv2d" or row.get("bound_ms") is None:
            continue
        base, parts = row["name"].split(".part")[0], ".part" in row["name"]
        node = nodes.get(base)
        key = base
        if node is not None and node.input[1] in weights:
            k, c, kh, kw = weights[node.input[1]]
            key = f"{kh}x{kw} {c}->{k} @{shapes.get(node.output[0], [0, 0, 0])[2]}"
        key += " (parts)" if parts else ""
        acc = out[key]
        acc[0] += 1
        for i, f in enumerate(FIELDS, 1):
            acc[i] += row[f]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("report")
    p.add_argument("model")
    a = p.parse_args(argv)
    table = classes(json.load(open(a.report)), onnx.load(a.model))
    print("| class | layers | ms | bound ms | compute ms | traffic ms | excess ms | of bound | MB moved |")
    print("|---|---|---|---|---|---|---|---|---|")
    total = [0.0] * (1 + len(FIELDS))
    for key, (n, ms, b, c, t, by) in sorted(table.items(), key=lambda kv: kv[1][2] - kv[1][1]):
        print(f"| {key} | {n:.0f} | {ms:.3f} | {b:.3f} | {c:.3f} | {t:.3f} | {ms - b:.3f} | {b / ms:.1%} | {by / 1e6:.2f} |")
        total = [x + y for x, y in zip(total, (n, ms, b, c, t, by))]
    n, ms, b, c, t, by = total
    print(f"| total | {n:.0f} | {ms:.3f} | {b:.3f} | {c:.3f} | {t:.3f} | {ms - b:.3f} | {b / ms:.1%} | {by / 1e6:.2f} |")
    print(f"\nper-layer bound {b:.3f} ms; overlapped floor max(compute {c:.3f}, traffic {t:.3f}) = {max(c, t):.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
