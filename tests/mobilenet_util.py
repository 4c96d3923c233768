"""A MobileNetV3-style test network built with onnx.helper: hard-swish spelled as ONNX exporters
write it (x * Clip(x + 3, 0, 6) / 6) and as the HardSwish op, ReLU6, depthwise convs, a
squeeze-excite block (HardSigmoid scale), a residual, shape arithmetic and a MatMul head."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

N = helper.make_node


def mobilenet(seed: int = 0, size: int = 32) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits: dict[str, np.ndarray] = {}
    nodes: list[onnx.NodeProto] = []

    def const(name: str, value) -> str:
        inits[name] = np.asarray(value)
        return name

    def conv(name: str, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1, bn: bool = True) -> str:
        fan = cin // group * k * k
        const(f"{name}.w", (rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / fan)).astype(np.float32))
        const(f"{name}.b", (rng.standard_normal(cout) * 0.05).astype(np.float32))
        nodes.append(N("Conv", [x, f"{name}.w", f"{name}.b"], [name], name=name, kernel_shape=[k, k],
                       strides=[stride, stride], pads=[k // 2] * 4, group=group))
        if not bn:
            return name
        for p, v in (("s", 1 + 0.1 * rng.standard_normal(cout)), ("t", 0.1 * rng.standard_normal(cout)),
                     ("m", 0.1 * rng.standard_normal(cout)), ("v", 1 + 0.2 * rng.random(cout))):
            const(f"{name}.bn.{p}", v.astype(np.float32))
        nodes.append(N("BatchNormalization", [name] + [f"{name}.bn.{p}" for p in "stmv"], [f"{name}.bn"],
                       name=f"{name}.bn"))
        return f"{name}.bn"

    def hswish_exported(x: str) -> str:
        nodes.extend([N("Add", [x, const("three", np.float32(3))], [f"{x}.hs_add"]),
                      N("Clip", [f"{x}.hs_add", const("zero", np.float32(0)), const("six", np.float32(6))], [f"{x}.hs_clip"]),
                      N("Mul", [x, f"{x}.hs_clip"], [f"{x}.hs_mul"]),
                      N("Div", [f"{x}.hs_mul", "six"], [f"{x}.hs"], name=f"{x}.hswish")])
        return f"{x}.hs"

    x = hswish_exported(conv("stem", "x", 3, 16, 3, stride=2))
    # inverted residual block with squeeze-excite
    e = conv("expand", x, 16, 32, 1)
    nodes.append(N("Clip", [e, "zero", "six"], ["expand.relu6"], name="expand.relu6"))
    d = conv("dw", "expand.relu6", 32, 32, 3, group=32)
    nodes.append(N("HardSwish", [d], ["dw.hs"], name="dw.hswish"))
    nodes.append(N("GlobalAveragePool", ["dw.hs"], ["se.pool"], name="se.pool"))
    nodes.append(N("Relu", [conv("se.fc1", "se.pool", 32, 8, 1, bn=False)], ["se.relu"], name="se.relu"))
    nodes.append(N("HardSigmoid", [conv("se.fc2", "se.relu", 8, 32, 1, bn=False)], ["se.gate"], name="se.gate",
                   alpha=1 / 6, beta=0.5))
    nodes.append(N("Mul", ["dw.hs", "se.gate"], ["se.out"], name="se.scale"))
    p = conv("project", "se.out", 32, 16, 1)
    nodes.append(N("Add", [x, p], ["block.out"], name="block.add"))
    h = hswish_exported(conv("head", "block.out", 16, 64, 1))
    nodes.append(N("GlobalAveragePool", [h], ["pool"], name="pool"))
    # the exporter's flatten: Shape -> Gather(0) -> Unsqueeze -> Concat(n, -1) -> Reshape
    nodes.extend([N("Shape", ["pool"], ["pool.shape"]),
                  N("Gather", ["pool.shape", const("idx0", np.int64(0))], ["batch"], axis=0),
                  N("Unsqueeze", ["batch", const("ax0", np.array([0], np.int64))], ["batch1"]),
                  N("Concat", ["batch1", const("minus1", np.array([-1], np.int64))], ["flat.shape"], axis=0),
                  N("Reshape", ["pool", "flat.shape"], ["flat"], name="flatten")])
    const("fc.w", (rng.standard_normal((64, 10)) * 0.2).astype(np.float32))
    const("fc.b", (rng.standard_normal(10) * 0.05).astype(np.float32))
    nodes.extend([N("MatMul", ["flat", "fc.w"], ["fc"], name="fc"), N("Add", ["fc", "fc.b"], ["logits"], name="fc.bias")])
    graph = helper.make_graph(nodes, "mobilenet_v3_style",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
