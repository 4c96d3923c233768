"""The machine run's host layers equal the golden engine's, bit for bit (issue 40 kind).

A device layer's output comes back from the machine channel-innermost and is transposed to
NCHW as a strided view; a host node's float sums (MatMul's BLAS blocking, a reduction's
pairwise order) depend on the memory layout of their operand, so the machine path and the
golden engine (contiguous NumPy arrays) rounded the SVTR neck's matmuls / softmaxes
differently (PP-OCRv4 rec: 6.1e-05 apart). Both paths must hand host ops the same layout.
"""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from snowir.backend import SnowflakeBackend


def _svtr_like() -> onnx.ModelProto:
    """conv (device) -> reshape/transpose to tokens -> MatMul, LayerNorm-ish, Softmax (host)."""
    rng = np.random.default_rng(3)
    c, h, w, d = 48, 1, 40, 64
    inits = [
        numpy_helper.from_array((rng.standard_normal((c, 16, 1, 3)) * 0.2).astype(np.float32), "w"),
        numpy_helper.from_array((rng.standard_normal(c) * 0.1).astype(np.float32), "b"),
        numpy_helper.from_array(np.array([1, c, h * w], np.int64), "shape"),
        numpy_helper.from_array((rng.standard_normal((c, d)) * 0.3).astype(np.float32), "m"),
        numpy_helper.from_array((rng.standard_normal((d, 1000)) * 0.3).astype(np.float32), "m2"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[0, 1, 0, 1]),
        helper.make_node("Relu", ["y"], ["r"]),
        helper.make_node("Reshape", ["r", "shape"], ["flat"]),
        helper.make_node("Transpose", ["flat"], ["tok"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["tok", "m"], ["q"]),
        helper.make_node("ReduceMean", ["q"], ["mu"], axes=[-1]),
        helper.make_node("Sub", ["q", "mu"], ["qc"]),
        helper.make_node("MatMul", ["qc", "m2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["out"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "svtr_like",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, h, w])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, h * w, 1000])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_machine_host_layers_equal_golden_engine() -> None:
    model = _svtr_like()
    rep = SnowflakeBackend.prepare(model, engine="golden")
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((1, 16, 1, 40)).astype(np.float32)
        golden = rep.run(x)
        machine = rep.compiled.run(x, engine="fast").outputs
        for got, want in zip(machine, golden):
            assert np.array_equal(np.asarray(got), np.asarray(want)), \
                f"seed {seed}: max diff {np.abs(np.asarray(got, float) - np.asarray(want, float)).max()}"
