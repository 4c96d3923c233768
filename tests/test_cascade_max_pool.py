"""YOLO's SPP block (one tensor max-pooled 5x5, 9x9 and 13x13, stride 1, and concatenated with
it) becomes a chain of 5x5 pools (cascade-max-pool): the same result as onnxruntime and, bit
for bit, as the golden model of the pools as written; on the machine with no host layer where
the 13x13 pool over the concat's rows had sent the pools and the concat to the host."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from snowir.dialects import nn
from snowir.frontend.onnx_import import import_model
from snowir.golden import Golden
from snowir.passes.nn.cascade_max_pool import CascadeMaxPoolPass
from snowir.passes.pipelines import NNPreparePass
from tests.onnx_util import model, ort_run, rand, snow_run

KERNELS = (13, 5, 9)  # as exporters write SPP's ModuleList, in any order


def spp_net(c: int = 192, size: int = 13, kernels=KERNELS) -> onnx.ModelProto:
    """1x1 conv c/2 -> c, SPP over its result, concat, 1x1 conv back to c/2 (YOLOX's SPP
    bottleneck at 416² input, channels as given)."""
    n = helper.make_node
    nodes = [n("Conv", ["x", "w1", "b1"], ["a"], name="Conv_cv1"), n("Relu", ["a"], ["r"], name="relu1")]
    for i, k in enumerate(kernels):
        nodes.append(n("MaxPool", ["r"], [f"p{i}"], kernel_shape=[k, k], strides=[1, 1], pads=[k // 2] * 4,
                       name=f"MaxPool_{i}"))
    nodes += [n("Concat", ["r", *(f"p{i}" for i in range(len(kernels)))], ["cat"], axis=1, name="Concat_spp"),
              n("Conv", ["cat", "w2", "b2"], ["y"], name="Conv_cv2")]
    cat = c * (len(kernels) + 1)
    inits = {"w1": rand(c, c // 2, 1, 1, scale=1 / (c // 2) ** 0.5), "b1": rand(c, seed=1, scale=0.1),
             "w2": rand(c // 2, cat, 1, 1, seed=2, scale=1 / cat ** 0.5), "b2": rand(c // 2, seed=3, scale=0.1)}
    return model(nodes, {"x": [1, c // 2, size, size]}, {"y": [1, c // 2, size, size]}, inits)


def _x(c: int = 192, size: int = 13, seed: int = 7) -> np.ndarray:
    return rand(1, c // 2, size, size, seed=seed)


def _pools(module) -> list[nn.MaxPoolOp]:
    return [op for op in module.walk() if isinstance(op, nn.MaxPoolOp)]


def test_spp_becomes_a_chain_of_5x5_pools_computing_what_onnxruntime_does() -> None:
    m = spp_net(c=32)
    module = import_model(m)
    CascadeMaxPoolPass().apply(None, module)
    pools = _pools(module)
    assert [list(p.kernel.get_values()) for p in pools] == [[5, 5]] * 3
    assert [p.input.owner for p in pools[1:]] == pools[:2]  # each link reads the one before
    (y,) = Golden(module).run(_x(32))
    np.testing.assert_allclose(y, ort_run(m, _x(32)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernels", [(5, 9, 13), (3, 5, 5), (5, 13)])
def test_the_chain_changes_no_bit_of_the_fixed_point_result(kernels, monkeypatch) -> None:
    """A max rounds nothing: the Q8.8 golden output of the chain equals the pools' as written,
    including a duplicate pool (5, 5: one result) and a gap (5 -> 13: a 9x9 link)."""
    chained = import_model(spp_net(c=32, size=11, kernels=kernels))
    NNPreparePass().apply(None, chained)
    monkeypatch.setattr(CascadeMaxPoolPass, "apply", lambda self, ctx, op: None)
    kept = import_model(spp_net(c=32, size=11, kernels=kernels))
    NNPreparePass().apply(None, kept)
    assert sorted(list(p.kernel.get_values()) for p in _pools(kept)) == sorted([k, k] for k in kernels)
    assert len(_pools(chained)) == len(set(kernels))
    for seed in (7, 8):
        (a,), (b,) = Golden(chained).run(_x(32, 11, seed)), Golden(kept).run(_x(32, 11, seed))
        assert np.array_equal(a, b)


def test_pools_that_do_not_nest_are_left_alone() -> None:
    """A stride-2 pool, or one whose window is taller but narrower than its sibling's, is not a
    link of a chain."""
    n = helper.make_node
    nodes = [n("MaxPool", ["x"], ["a"], kernel_shape=[5, 3], pads=[2, 1, 2, 1], name="a"),
             n("MaxPool", ["x"], ["b"], kernel_shape=[3, 5], pads=[1, 2, 1, 2], name="b"),
             n("MaxPool", ["x"], ["s"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], name="s")]
    module = import_model(model(nodes, {"x": [1, 16, 9, 9]}, {"a": None, "b": None, "s": None}))
    before = [(list(p.kernel.get_values()), p.input) for p in _pools(module)]
    CascadeMaxPoolPass().apply(None, module)
    assert [(list(p.kernel.get_values()), p.input) for p in _pools(module)] == before


def test_the_spp_block_runs_on_the_device_alone_bit_exact(tmp_path: Path, capsys) -> None:
    """YOLOX's shape: 192 channels at 13², the concat 768 wide. As written, the 13x13 pool reading
    its input in place needs 13 rows of 13 x 768 words, more than the maps buffer, so the pools
    and the concat ran on the host; chained, every layer runs on the device."""
    path, report = tmp_path / "spp.onnx", tmp_path / "r.json"
    onnx.save(spp_net(), path)
    np.save(tmp_path / "x.npy", _x())
    assert snow_run([str(path), "--check", "--quiet", "--report", str(report), "--input", str(tmp_path / "x.npy")]) == 0, \
        capsys.readouterr().err
    r = json.loads(report.read_text())
    assert r["check"]["golden_bit_exact"] is True
    assert [layer["op"] for layer in r["layers"] if layer["where"] == "host"] == []
    assert r["total"]["host_ms"] == 0
