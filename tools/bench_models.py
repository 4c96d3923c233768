"""
Benchmark models of C17 Table 2 built with onnx.helper (seeded He-initialised weights):
AlexNet-OWT in torchvision's layout ("one weird trick": 64-192-384-256-256 conv channels,
three FC layers) and ResNet-18 (torchvision layout, BN folded). ResNet-50 is the onnx
wheel's (tools/light_models.py). Written to build/models/ (not committed).

    python tools/bench_models.py [alexnet_owt|resnet18]
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = Path(__file__).resolve().parent.parent / "build" / "models"


class _Graph:
    """Seeded He-initialised layers appended to one ONNX graph."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.inits: list[onnx.TensorProto] = []
        self.nodes: list[onnx.NodeProto] = []

    def conv(self, name: str, x: str, cin: int, cout: int, k: int, s: int, p: int, relu: bool = True,
             scale: float = 1.0) -> str:
        w = (self.rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k)) * scale).astype(np.float32)
        b = (self.rng.standard_normal(cout) * 0.05).astype(np.float32)
        self.inits.extend([numpy_helper.from_array(w, f"{name}_w"), numpy_helper.from_array(b, f"{name}_b")])
        self.nodes.append(helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [name], name=name,
                                           kernel_shape=[k, k], strides=[s, s], pads=[p, p, p, p]))
        return self.relu(name) if relu else name

    def relu(self, x: str) -> str:
        self.nodes.append(helper.make_node("Relu", [x], [f"{x}_r"], name=f"{x}_relu"))
        return f"{x}_r"

    def model(self, name: str, output: str) -> onnx.ModelProto:
        self.nodes.append(helper.make_node("Softmax", [output], ["prob"], name="softmax", axis=1))
        graph = helper.make_graph(self.nodes, name,
                                  [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 224, 224])],
                                  [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 1000])], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="snowir bench_models")
        model.ir_version = 8
        return model


def alexnet_owt(seed: int = 0) -> onnx.ModelProto:
    g = _Graph(seed)

    def pool(name: str, x: str) -> str:
        g.nodes.append(helper.make_node("MaxPool", [x], [name], name=name, kernel_shape=[3, 3], strides=[2, 2]))
        return name

    def fc(name: str, x: str, cin: int, cout: int, relu: bool, scale: float = 1.0) -> str:
        w = (g.rng.standard_normal((cout, cin)) * np.sqrt(2.0 / cin) * scale).astype(np.float32)
        b = (g.rng.standard_normal(cout) * 0.05).astype(np.float32)
        g.inits.extend([numpy_helper.from_array(w, f"{name}_w"), numpy_helper.from_array(b, f"{name}_b")])
        g.nodes.append(helper.make_node("Gemm", [x, f"{name}_w", f"{name}_b"], [name], name=name, transB=1))
        return g.relu(name) if relu else name

    x = g.conv("conv1", "image", 3, 64, 11, 4, 2)
    x = pool("pool1", x)
    x = g.conv("conv2", x, 64, 192, 5, 1, 2)
    x = pool("pool2", x)
    x = g.conv("conv3", x, 192, 384, 3, 1, 1)
    x = g.conv("conv4", x, 384, 256, 3, 1, 1)
    x = g.conv("conv5", x, 256, 256, 3, 1, 1)
    x = pool("pool5", x)
    g.nodes.append(helper.make_node("Flatten", [x], ["flat"], name="flatten", axis=1))
    x = fc("fc6", "flat", 256 * 6 * 6, 4096, True)
    x = fc("fc7", x, 4096, 4096, True)
    x = fc("fc8", x, 4096, 1000, False, scale=0.1)
    return g.model("alexnet_owt", x)


def resnet18(seed: int = 0) -> onnx.ModelProto:
    """ResNet-18 (torchvision layout, BN folded into conv biases): basic blocks, projection
    shortcuts; the second conv of each block is scaled x0.2 (as a trained residual branch)."""
    g = _Graph(seed)
    x = g.conv("conv1", "image", 3, 64, 7, 2, 3)
    g.nodes.append(helper.make_node("MaxPool", [x], ["pool1"], name="pool1", kernel_shape=[3, 3], strides=[2, 2],
                                    pads=[1, 1, 1, 1]))
    x, cin = "pool1", 64
    for stage, cout in enumerate((64, 128, 256, 512), start=1):
        for block in range(2):
            stride = 2 if stage > 1 and block == 0 else 1
            name = f"layer{stage}.{block}"
            y = g.conv(f"{name}.conv1", x, cin, cout, 3, stride, 1)
            y = g.conv(f"{name}.conv2", y, cout, cout, 3, 1, 1, relu=False, scale=0.2)
            short = g.conv(f"{name}.down", x, cin, cout, 1, stride, 0, relu=False) if stride != 1 or cin != cout else x
            g.nodes.append(helper.make_node("Add", [y, short], [f"{name}.add"], name=f"{name}.add"))
            g.nodes.append(helper.make_node("Relu", [f"{name}.add"], [f"{name}.out"], name=f"{name}.relu"))
            x, cin = f"{name}.out", cout
    g.nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="avgpool"))
    g.nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1))
    w = (g.rng.standard_normal((1000, 512)) * np.sqrt(1.0 / 512) * 0.5).astype(np.float32)
    g.inits.extend([numpy_helper.from_array(w, "fc_w"), numpy_helper.from_array(np.zeros(1000, np.float32), "fc_b")])
    g.nodes.append(helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["fc"], name="fc", transB=1))
    return g.model("resnet18", "fc")


def build(name: str = "alexnet_owt") -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.onnx"
    if not path.exists():
        model = {"alexnet_owt": alexnet_owt, "resnet18": resnet18}[name]()
        onnx.checker.check_model(model)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        onnx.save(model, str(tmp))
        os.replace(tmp, path)
    return path


if __name__ == "__main__":
    import sys

    for model_name in sys.argv[1:] or ["alexnet_owt", "resnet18"]:
        print(build(model_name))
