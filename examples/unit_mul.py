"""
A model for the tutorial's drop-unit-mul pass (docs/tutorial.md sections 2-4): Conv, then a Mul
by a constant of ones, then Conv, as an exporter leaves a scaling behind. The ones are one per
element (1x4x8x8), not one per channel, so fold-batch-norm cannot fold them into the first
conv: the mul runs on the host CPU between the two convs until drop-unit-mul removes it.
(digits_cnn.onnx has no Mul: the pass changes nothing there.)

    python examples/unit_mul.py [OUT.onnx]      (default: unit_mul.onnx)
"""

from __future__ import annotations

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def unit_mul_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    weights = {
        "w1": (rng.standard_normal((4, 1, 3, 3)) * 0.5).astype(np.float32),
        "b1": (rng.standard_normal(4) * 0.1).astype(np.float32),
        "ones": np.ones((1, 4, 8, 8), np.float32),
        "w2": (rng.standard_normal((2, 4, 3, 3)) * 0.3).astype(np.float32),
        "b2": (rng.standard_normal(2) * 0.1).astype(np.float32),
    }
    conv = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", **conv),
             helper.make_node("Mul", ["c1", "ones"], ["m"], name="scale"),
             helper.make_node("Conv", ["m", "w2", "b2"], ["y"], name="conv2", **conv)]
    graph = helper.make_graph(nodes, "unit_mul",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])],
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "unit_mul.onnx"
    onnx.save(unit_mul_model(), out)
    print(out)
