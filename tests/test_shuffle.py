"""Channel shuffles folded into conv kernels (fold-channel-shuffle) and grouped convs whose groups
are not whole kernel tiles run as dense block-diagonal convs (depthwise-to-grouped,
`dense_groups`): a ShuffleNet unit in exporters' spellings, against onnxruntime, the golden
model and the machine (issue 36 item 3)."""

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
from snowir.host_model import useful_macs
from snowir.passes.nn import depthwise_to_grouped
from snowir.passes.nn.fold_batch_norm import FoldBatchNormPass
from snowir.passes.nn.fold_channel_shuffle import FoldChannelShufflePass
from snowir.passes.nn.fuse_relu import FuseReluPass
from snowir.passes.pipelines import NNPreparePass
from tests.onnx_util import model, ort_run, rand, snow_run

G, C_IN, C_MID, HW = 4, 24, 48, 8
SPELLINGS = ("reshape5d", "reshape4d", "flatten", "minus_one", "shape_ops")


def _shuffle(n, spelling: str, x: str, y: str, inits: dict) -> list[onnx.NodeProto]:
    """The channel shuffle of `x` (1 x C_MID x HW x HW, G groups) as exporters write it."""
    def const(name: str, values: list[int]) -> str:
        inits[name] = np.array(values, np.int64)
        return name

    k = C_MID // G
    if spelling == "reshape4d":  # the spatial dims flattened: [N, g, C/g, H*W]
        return [n("Reshape", [x, const("s0", [1, G, k, HW * HW])], ["r"]), n("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3]),
                n("Reshape", ["t", const("s1", [1, C_MID, HW, HW])], [y])]
    if spelling == "flatten":  # Flatten to [N, C*H*W], then back to NCHW
        return [n("Reshape", [x, const("s0", [1, G, k, HW, HW])], ["r"]), n("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3, 4]),
                n("Flatten", ["t"], ["f"], axis=1), n("Reshape", ["f", const("s1", [1, C_MID, HW, HW])], [y])]
    if spelling == "minus_one":  # 0 copies the batch dim, -1 infers the channels
        return [n("Reshape", [x, const("s0", [0, G, -1, HW, HW])], ["r"]), n("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3, 4]),
                n("Reshape", ["t", const("s1", [0, -1, HW, HW])], [y])]
    if spelling == "shape_ops":  # PyTorch's view(b, g, c // g, h, w) with the dims read by Shape
        dims = [n("Shape", [x], ["shape"])] + [n("Gather", ["shape", const(f"i{d}", d)], [f"d{d}"], axis=0) for d in range(4)]
        dims += [n("Unsqueeze", [f"d{d}", const(f"ax{d}", [0])], [f"u{d}"]) for d in range(4)]
        dims += [n("Div", ["d1", const("g", G)], ["cg"]), n("Unsqueeze", ["cg", "ax0"], ["ucg"])]
        return dims + [n("Concat", ["u0", const("ug", [G]), "ucg", "u2", "u3"], ["s0"], axis=0),
                       n("Reshape", [x, "s0"], ["r"]), n("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3, 4]),
                       n("Concat", ["u0", const("m1", [-1]), "u2", "u3"], ["s1"], axis=0), n("Reshape", ["t", "s1"], [y])]
    return [n("Reshape", [x, const("s0", [1, G, k, HW, HW])], ["r"]), n("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3, 4]),
            n("Reshape", ["t", const("s1", [1, C_MID, HW, HW])], [y])]


def _bn(n, name: str, x: str, y: str, c: int, inits: dict, seed: int) -> onnx.NodeProto:
    inits |= {f"{name}_s": 1 + rand(c, seed=seed, scale=0.1), f"{name}_b": rand(c, seed=seed + 1, scale=0.1),
              f"{name}_m": rand(c, seed=seed + 2, scale=0.1), f"{name}_v": 1 + np.abs(rand(c, seed=seed + 3, scale=0.1))}
    return n("BatchNormalization", [x, f"{name}_s", f"{name}_b", f"{name}_m", f"{name}_v"], [y], name=name)


def shuffle_unit(spelling: str = "reshape5d") -> onnx.ModelProto:
    """A ShuffleNet v1 unit: grouped 1x1 conv (4 groups of 12 kernels: not whole 16-kernel tiles),
    BN, ReLU, channel shuffle, depthwise 3x3, BN, grouped 1x1 conv, BN, residual add, ReLU."""
    n, inits = helper.make_node, {}
    nodes = [n("Conv", ["x", "w1"], ["c1"], name="gconv1", group=G), _bn(n, "bn1", "c1", "b1", C_MID, inits, 10),
             n("Relu", ["b1"], ["a1"], name="relu1"), *_shuffle(n, spelling, "a1", "sh", inits),
             n("Conv", ["sh", "w2"], ["c2"], name="dwconv", group=C_MID, pads=[1, 1, 1, 1]),
             _bn(n, "bn2", "c2", "b2", C_MID, inits, 20),
             n("Conv", ["b2", "w3"], ["c3"], name="gconv2", group=G), _bn(n, "bn3", "c3", "b3", C_IN, inits, 30),
             n("Add", ["b3", "x"], ["s"], name="add"), n("Relu", ["s"], ["y"], name="relu2")]
    inits |= {"w1": rand(C_MID, C_IN // G, 1, 1, seed=1, scale=0.4), "w2": rand(C_MID, 1, 3, 3, seed=2, scale=0.3),
              "w3": rand(C_IN, C_MID // G, 1, 1, seed=3, scale=0.3)}
    return model(nodes, {"x": [1, C_IN, HW, HW]}, {"y": [1, C_IN, HW, HW]}, inits)


def _folded(m: onnx.ModelProto):
    """The imported model after fold-batch-norm, fuse-relu and fold-channel-shuffle, in float."""
    module = import_model(m)
    for step in (FoldBatchNormPass(), FuseReluPass(), FoldChannelShufflePass()):
        step.apply(None, module)
    return module


def _x(seed: int = 7) -> np.ndarray:
    return rand(1, C_IN, HW, HW, seed=seed)


def _ops(module, kind) -> list:
    return [op for op in module.walk() if isinstance(op, kind)]


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_every_spelling_folds_and_computes_what_onnxruntime_does(spelling: str) -> None:
    m = shuffle_unit(spelling)
    assert len(_ops(import_model(m), nn.TransposeOp)) == 1
    module = _folded(m)
    assert not _ops(module, nn.TransposeOp) and not _ops(module, nn.ReshapeOp) and not _ops(module, nn.FlattenOp)
    (y,) = Golden(module).run(_x())
    np.testing.assert_allclose(y, ort_run(m, _x()), rtol=1e-4, atol=1e-4)


def test_prepare_puts_every_conv_of_the_unit_on_the_device(monkeypatch) -> None:
    # gconv1 and the depthwise conv whole: the blocked forms would split gconv1 into 16-kernel blocks
    # (tests/test_channel_blocks.py) or the depthwise conv into slices over its tiles (test_channel_tiles.py)
    monkeypatch.setattr(depthwise_to_grouped, "_blocked_producer", lambda op: None)
    monkeypatch.setattr(depthwise_to_grouped, "_tiled_writer", lambda op: None)
    module = import_model(shuffle_unit())
    NNPreparePass().apply(None, module)
    assert not _ops(module, nn.TransposeOp) and not _ops(module, nn.ReshapeOp)
    convs = _ops(module, nn.Conv2dOp)
    assert len(convs) == 3 and all(c.attributes["place"].data == "snowflake" for c in convs)
    dense = [c for c in convs if "dense_groups" in c.attributes]
    assert len(dense) == 2 and all(c.groups.value.data == 1 and c.attributes["dense_groups"].value.data == G for c in dense)
    # the reports count the grouped conv's MACs, not the zero blocks'
    first = next(c for c in dense if c.weight.type.get_shape()[0] == C_MID)
    assert useful_macs(first) == C_MID * (C_IN // G) * HW * HW


def test_the_fold_changes_no_bit_of_the_fixed_point_result(monkeypatch) -> None:
    """A permutation of kernels and channels changes the order, not the arithmetic: the Q8.8
    golden output with the fold equals the one without it, bit for bit."""
    folded = import_model(shuffle_unit())
    NNPreparePass().apply(None, folded)
    monkeypatch.setattr(FoldChannelShufflePass, "apply", lambda self, ctx, op: None)
    kept = import_model(shuffle_unit())
    NNPreparePass().apply(None, kept)
    assert len(_ops(kept, nn.TransposeOp)) == 1
    for seed in (7, 8):
        (a,), (b,) = Golden(folded).run(_x(seed)), Golden(kept).run(_x(seed))
        assert np.array_equal(a, b)
    monkeypatch.undo()  # on a quantised module the pass changes nothing (its weights are fixed point)
    FoldChannelShufflePass().apply(None, kept)
    assert len(_ops(kept, nn.TransposeOp)) == 1


def test_the_unit_on_the_machine_is_bit_exact_with_no_host_shuffle(tmp_path: Path, capsys) -> None:
    path, report = tmp_path / "unit.onnx", tmp_path / "r.json"
    onnx.save(shuffle_unit(), path)
    assert snow_run([str(path), "--check", "--quiet", "--report", str(report)]) == 0, capsys.readouterr().err
    r = json.loads(report.read_text())
    assert r["check"]["golden_bit_exact"] and r["check"]["snr_db"] > 35
    assert not [row for row in r["layers"] if row["op"] == "transpose"]
    convs = [row for row in r["layers"] if row["op"] == "conv2d"]
    assert convs and all(row["where"] == "device" and row["cycles"] > 0 for row in convs)


def test_a_producer_with_another_conv_reader_permutes_that_readers_channels() -> None:
    """conv -> shuffle -> conv A, and the same conv's output read by conv B directly: the producer
    takes the permutation, B's weights take it back."""
    n, inits = helper.make_node, {}
    nodes = [n("Conv", ["x", "w0"], ["p"], name="producer"), *_shuffle(n, "reshape5d", "p", "sh", inits),
             n("Conv", ["sh", "wa"], ["ya"], name="a"), n("Conv", ["p", "wb"], ["yb"], name="b")]
    inits |= {"w0": rand(C_MID, C_IN, 1, 1, seed=1, scale=0.3), "wa": rand(8, C_MID, 1, 1, seed=2, scale=0.3),
              "wb": rand(8, C_MID, 3, 3, seed=3, scale=0.3)}
    m = model(nodes, {"x": [1, C_IN, HW, HW]}, {"ya": [1, 8, HW, HW], "yb": [1, 8, HW - 2, HW - 2]}, inits)
    module = import_model(m)
    FoldChannelShufflePass().apply(None, module)
    assert not _ops(module, nn.TransposeOp)
    import onnxruntime as ort

    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": _x()})
    for got, ref in zip(Golden(module).run(_x()), want):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_a_shuffle_into_a_non_conv_permutes_the_producer_or_stays_with_its_reason() -> None:
    n = helper.make_node
    for producer in ("conv", "sigmoid"):
        inits: dict = {}
        first = n("Conv", ["x", "w0"], ["p"]) if producer == "conv" else n("Sigmoid", ["x"], ["p"])
        nodes = [first, *_shuffle(n, "reshape5d", "p", "sh", inits), n("MaxPool", ["sh"], ["y"], kernel_shape=[2, 2])]
        inits["w0"] = rand(C_MID, C_IN, 1, 1, seed=1, scale=0.3)
        x_channels = C_IN if producer == "conv" else C_MID
        m = model(nodes, {"x": [1, x_channels, HW, HW]}, {"y": [1, C_MID, HW - 1, HW - 1]},
                  inits if producer == "conv" else {k: v for k, v in inits.items() if k != "w0"})
        module = import_model(m)
        FoldChannelShufflePass().apply(None, module)
        transposes = _ops(module, nn.TransposeOp)
        if producer == "conv":
            assert not transposes
        else:
            assert len(transposes) == 1 and "its producer is Sigmoid, not a conv; it is read by nn.max_pool" in transposes[0].attributes["host_reason"].data
        x = rand(1, x_channels, HW, HW, seed=4)
        (y,) = Golden(module).run(x)
        np.testing.assert_allclose(y, ort_run(m, x), rtol=1e-4, atol=1e-4)


def test_a_producer_the_device_runs_grouped_keeps_its_groups_and_the_reader_takes_the_shuffle() -> None:
    """2 groups of 16 kernels are whole tiles: the producer stays grouped (a permutation would
    cross its groups) and the consuming conv reads its output with permuted input channels."""
    n, inits = helper.make_node, {}
    nodes = [n("Conv", ["x", "w0"], ["p"], name="producer", group=2),
             n("Reshape", ["p", "s0"], ["r"]), n("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3, 4]),
             n("Reshape", ["t", "s1"], ["sh"]), n("Conv", ["sh", "w1"], ["y"], name="reader")]
    inits |= {"w0": rand(32, C_IN // 2, 1, 1, seed=1, scale=0.3), "w1": rand(8, 32, 1, 1, seed=2, scale=0.3),
              "s0": np.array([1, 2, 16, HW, HW], np.int64), "s1": np.array([1, 32, HW, HW], np.int64)}
    m = model(nodes, {"x": [1, C_IN, HW, HW]}, {"y": [1, 8, HW, HW]}, inits)
    module = _folded(m)
    assert not _ops(module, nn.TransposeOp)
    groups = {op.attributes["onnx_node"].data: op.groups.value.data for op in _ops(module, nn.Conv2dOp)}
    assert groups == {"producer": 2, "reader": 1}
    (y,) = Golden(module).run(_x())
    np.testing.assert_allclose(y, ort_run(m, _x()), rtol=1e-4, atol=1e-4)


def test_a_conv_left_on_the_host_says_why() -> None:
    """partition-host names the reason a conv stays: a tiny grouped conv between host ops is
    faster on the host (its costs in the IR); a depthwise conv with a channel multiplier has no
    device form."""
    n = helper.make_node
    nodes = [n("Sigmoid", ["x"], ["s"]), n("Conv", ["s", "w"], ["c"], name="tiny", group=4), n("Sigmoid", ["c"], ["y"]),
             n("Conv", ["x", "wm"], ["m"], name="mult", group=C_IN, pads=[1, 1, 1, 1])]
    inits = {"w": rand(C_MID, C_IN // G, 1, 1, seed=1), "wm": rand(2 * C_IN, 1, 3, 3, seed=2)}
    m = model(nodes, {"x": [1, C_IN, 2, 2]}, {"y": [1, C_MID, 2, 2], "m": [1, 2 * C_IN, 2, 2]}, inits)
    module = import_model(m)
    NNPreparePass().apply(None, module)
    convs = {op.attributes["onnx_node"].data: op for op in _ops(module, nn.Conv2dOp)}
    tiny, mult = convs["tiny"], convs["mult"]
    assert tiny.attributes["place"].data == "host" and tiny.groups.value.data == 4
    assert tiny.attributes["host_reason"].data == "the host is estimated faster (placement_cost)"
    assert "vs host" in tiny.attributes["placement_cost"].data
    assert mult.attributes["host_reason"].data == "depthwise conv with a channel multiplier of 2"
