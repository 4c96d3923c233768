"""Tiny ONNX graphs for frontend tests, built with onnx.helper."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def model(nodes, inputs: dict[str, list[int]], outputs: dict[str, list[int] | None], inits: dict[str, np.ndarray] | None = None,
          opset: int = 13) -> onnx.ModelProto:
    g = helper.make_graph(
        nodes, "t",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in inputs.items()],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in outputs.items()],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    if any(v is None for v in outputs.values()):
        # let ONNX fill in the output shapes (the checker wants one)
        inferred = onnx.shape_inference.infer_shapes(m)
        for out, inf in zip(m.graph.output, inferred.graph.output):
            if not out.type.tensor_type.HasField("shape"):
                out.type.tensor_type.shape.CopyFrom(inf.type.tensor_type.shape)
                if not inf.type.tensor_type.HasField("shape"):
                    out.type.tensor_type.shape.SetInParent()
    return m


def rand(*shape, seed=0, scale=1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


class GraphBuilder:
    """An exporter-style graph under construction (onnx.helper nodes and initializers): convs with
    biases and optional ReLUs, BN-ReLU, channel concats, H/W Slices and any other node by name.
    `same_pad` pads a conv by k // 2 unless told; without it a conv is unpadded unless told."""

    def __init__(self, same_pad: bool = True) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: dict[str, np.ndarray] = {}
        self.seed = 0
        self.same_pad = same_pad

    def conv(self, x: str, cin: int, cout: int, k: int, name: str, pad: int | None = None, stride: int = 1,
             relu: bool = True) -> str:
        self.seed += 1
        self.inits[f"{name}_w"] = rand(cout, cin, k, k, seed=self.seed, scale=0.7 * np.sqrt(2 / (cin * k * k)))
        self.inits[f"{name}_b"] = rand(cout, seed=100 + self.seed, scale=0.05)
        if pad is None:
            pad = k // 2 if self.same_pad else 0
        out = f"{name}_c" if relu else name
        self.nodes.append(helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [out], name=name,
                                           pads=[pad] * 4, strides=[stride, stride]))
        if relu:
            self.nodes.append(helper.make_node("Relu", [out], [name], name=f"{name}_relu"))
        return name

    def bn_relu(self, x: str, c: int, name: str) -> str:
        self.seed += 1
        g = np.random.default_rng(self.seed)
        self.inits |= {f"{name}_s": (1 + 0.1 * g.standard_normal(c)).astype(np.float32),
                       f"{name}_t": (0.1 * g.standard_normal(c)).astype(np.float32),
                       f"{name}_m": (0.1 * g.standard_normal(c)).astype(np.float32),
                       f"{name}_v": (1 + 0.1 * g.random(c)).astype(np.float32)}
        self.nodes.append(helper.make_node("BatchNormalization", [x, f"{name}_s", f"{name}_t", f"{name}_m",
                                                                  f"{name}_v"], [f"{name}_bn"], name=name))
        self.nodes.append(helper.make_node("Relu", [f"{name}_bn"], [f"{name}_r"], name=f"{name}_relu"))
        return f"{name}_r"

    def concat(self, xs: list[str], name: str) -> str:
        return self.op("Concat", xs, name, axis=1)

    def crop(self, x: str, starts: list[int], ends: list[int], name: str, axes: tuple[int, ...] = (2, 3),
             steps: list[int] | None = None) -> str:
        """An ONNX Slice with constant starts / ends / axes (and steps) initializers."""
        self.inits |= {f"{name}_s": np.array(starts, np.int64), f"{name}_e": np.array(ends, np.int64),
                       f"{name}_a": np.array(axes, np.int64)}
        ins = [x, f"{name}_s", f"{name}_e", f"{name}_a"]
        if steps is not None:
            self.inits[f"{name}_t"] = np.array(steps, np.int64)
            ins.append(f"{name}_t")
        return self.op("Slice", ins, name)

    def op(self, kind: str, xs: list[str], name: str, **attrs) -> str:
        self.nodes.append(helper.make_node(kind, xs, [name], name=name, **attrs))
        return name

    def model(self, inputs: dict[str, list[int]], y: str, shape: list[int] | None = None) -> onnx.ModelProto:
        """The graph with output `y` (its shape inferred unless given)."""
        return model(self.nodes, inputs, {y: shape}, self.inits)


def three_layer_net(tmp_path) -> str:
    """Conv, max pool, a 1x1 conv with a residual add: three device layers of different kinds
    (test_snow_dse's sweeps, test_bound's shares), saved as net.onnx under `tmp_path`."""
    n = helper.make_node
    nodes = [n("Conv", ["x", "w1", "b1"], ["a"], name="c1", pads=[1, 1, 1, 1]), n("Relu", ["a"], ["r"]),
             n("MaxPool", ["r"], ["p"], name="p1", kernel_shape=[2, 2], strides=[2, 2]),
             n("Conv", ["p", "w2", "b2"], ["c"], name="c2"), n("Add", ["c", "p"], ["y"])]
    inits = {"w1": rand(32, 8, 3, 3, seed=1, scale=0.2), "b1": rand(32, seed=2, scale=0.1),
             "w2": rand(32, 32, 1, 1, seed=3, scale=0.1), "b2": rand(32, seed=4, scale=0.1)}
    path = tmp_path / "net.onnx"
    onnx.save(model(nodes, {"x": [1, 8, 24, 24]}, {"y": None}, inits), path)
    return path


def ort_run(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    o = ort.SessionOptions()
    o.log_severity_level = 3
    sess = ort.InferenceSession(m.SerializeToString(), o, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def snow_run(argv: list[str]) -> int:
    """snow-run's exit code as the shell would see it (argparse and the CLI exit via SystemExit)."""
    from snowir.tools.snow_run import main

    try:
        return main(argv)
    except SystemExit as e:
        return int(e.code or 0)


def tile_level(m: onnx.ModelProto, tmp_path) -> str:
    """`m` lowered to the tile level with its DRAM plan (nn-prepare .. allocate-dram), as text to edit."""
    from snowir.tools.snow_opt import main

    path, out = tmp_path / "m.onnx", tmp_path / "t.mlir"
    onnx.save(m, path)
    assert main([str(path), "-p", "nn-prepare,nn-to-tile,tile-loop-order,allocate-dram", "-o", str(out)]) in (0, None)
    return out.read_text()


def tile_to_asm(text: str, tmp_path, capsys) -> tuple[int, str]:
    """tile-to-asm over (edited) tile-level text: snow-opt's exit code and its stderr."""
    from snowir.tools.snow_opt import main

    path = tmp_path / "e.mlir"
    path.write_text(text)
    try:
        code = main([str(path), "-p", "tile-to-asm", "-o", str(tmp_path / "o.mlir")]) or 0
    except SystemExit as e:
        code = int(e.code or 0)
    return code, capsys.readouterr().err


def run_checked(m: onnx.ModelProto, engine: str = "fast"):
    """Compile and run `m` on a seeded random input, checked against the golden model (bit-exact
    asserted): (the compiled model, the run's result)."""
    from snowir.driver.model_api import compile as compile_model

    compiled = compile_model(m)
    x = rand(*[d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim], seed=7)
    result = compiled.run(x, engine=engine, check=True)
    check = result.report.check
    assert check is not None and check.golden_bit_exact, check
    return compiled, result
