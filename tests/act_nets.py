"""A small mobile-style exporter net for the write-back activation unit (tests and docs/dse.md):
3x3 convs each followed by one of the activations the unit applies, spelled as exporters write
them (LeakyRelu, Clip(0, 6), HardSigmoid, HardSwish, x * Sigmoid(x), Sigmoid, Tanh)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ACTIVATIONS = ("leaky_relu", "relu6", "hard_sigmoid", "hard_swish", "silu", "sigmoid", "tanh")


def _act(kind: str, x: str, y: str, i: int) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """Nodes computing y = kind(x), and their constants."""
    if kind == "none":
        return [helper.make_node("Identity", [x], [y])], []
    if kind == "leaky_relu":
        return [helper.make_node("LeakyRelu", [x], [y], alpha=0.1)], []
    if kind == "relu6":
        lo, hi = f"lo{i}", f"hi{i}"
        return [helper.make_node("Clip", [x, lo, hi], [y])], [
            numpy_helper.from_array(np.array(0, np.float32), lo), numpy_helper.from_array(np.array(6, np.float32), hi)]
    if kind == "hard_sigmoid":
        return [helper.make_node("HardSigmoid", [x], [y], alpha=0.2, beta=0.5)], []
    if kind == "hard_swish":
        return [helper.make_node("HardSwish", [x], [y])], []
    if kind == "silu":
        return [helper.make_node("Sigmoid", [x], [f"s{i}"]), helper.make_node("Mul", [x, f"s{i}"], [y])], []
    if kind == "sigmoid":
        return [helper.make_node("Sigmoid", [x], [y])], []
    if kind == "tanh":
        return [helper.make_node("Tanh", [x], [y])], []
    raise ValueError(kind)


def act_net(kinds: tuple[str, ...] = ACTIVATIONS, size: int = 12, width: int = 8, seed: int = 0) -> onnx.ModelProto:
    """Conv(3x3, pad 1) + activation per entry of `kinds`, on a 1x3xsize x size input; weights
    seeded, scaled so the pre-activations span about +-4 (where the functions bend)."""
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    x, c = "input", 3
    for i, kind in enumerate(kinds):
        w = (rng.standard_normal((width, c, 3, 3)) * 2.0 / np.sqrt(9 * c)).astype(np.float32)
        b = (rng.standard_normal(width) * 0.3).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1], name=f"conv{i}"))
        act_nodes, consts = _act(kind, f"c{i}", f"a{i}", i)
        nodes += act_nodes
        inits += consts
        x, c = f"a{i}", width
    g = helper.make_graph(nodes, "act_net",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, width, size, size])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def act_input(size: int = 12, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (1, 3, size, size)).astype(np.float32)


def mobile_net(size: int = 64, seed: int = 0) -> onnx.ModelProto:
    """A small mobile-style classifier as exporters write one (MobileNetV3 / YOLOv8 / waifu2x
    activations): stem 3x3/2 conv + SiLU, two inverted-residual blocks (1x1 expand + HardSwish,
    3x3 depthwise + HardSwish, 1x1 project, residual add), a 3x3 conv + LeakyReLU(0.1), a 1x1
    head + SiLU, global average pool and a linear classifier. BN already folded into the convs."""
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    count = [0]

    def conv(x: str, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> str:
        i = count[0] = count[0] + 1
        w = (rng.standard_normal((cout, cin // groups, k, k)) * np.sqrt(2.0 / (k * k * cin // groups))).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.1).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")])
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[k // 2] * 4, strides=[stride] * 2,
                                      group=groups, name=f"conv{i}"))
        return f"c{i}"

    def act(kind: str, x: str) -> str:
        i = count[0] = count[0] + 1
        more, consts = _act(kind, x, f"a{i}", i)
        nodes.extend(more)
        inits.extend(consts)
        return f"a{i}"

    x = act("silu", conv("input", 3, 16, 3, 2))
    for expand in (48, 64):
        y = act("hard_swish", conv(x, 16, expand, 1))
        y = act("hard_swish", conv(y, expand, expand, 3, groups=expand))
        y = conv(y, expand, 16, 1)
        i = count[0] = count[0] + 1
        nodes.append(helper.make_node("Add", [x, y], [f"r{i}"]))
        x = f"r{i}"
    x = act("leaky_relu", conv(x, 16, 32, 3, 2))
    x = act("silu", conv(x, 32, 64, 1))
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pool"]))
    nodes.append(helper.make_node("Flatten", ["pool"], ["flat"]))
    fc = (rng.standard_normal((64, 10)) * 0.2).astype(np.float32)
    inits += [numpy_helper.from_array(fc, "fc_w"), numpy_helper.from_array(np.zeros(10, np.float32), "fc_b")]
    nodes.append(helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"]))
    g = helper.make_graph(nodes, "mobile_act",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m
