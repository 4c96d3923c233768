"""A space-to-depth written as strided Slices and a channel Concat (YOLOv5 / YOLOX's Focus) in
front of a conv becomes part of the conv (fold-focus): exporters' spellings, against
onnxruntime, the golden model without the fold (bit for bit) and the machine."""

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
from snowir.passes.nn.fold_focus import FoldFocusPass
from snowir.passes.pipelines import NNPreparePass
from tests.onnx_util import model, ort_run, rand, snow_run

YOLOV5 = ((0, 0), (1, 0), (0, 1), (1, 1))  # x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2], ...
YOLOX = ((0, 0), (1, 0), (0, 1), (1, 1))


def focus_net(phases=YOLOV5, spelling: str = "chained", size: int = 32, crop: bool = False,
              bn: bool = False) -> onnx.ModelProto:
    """Focus + 3x3 conv (+BN) + ReLU. `chained`: a Slice on H then one on W (as torch exports
    x[..., ::2, ::2]); `joint`: one Slice over both axes, end INT_MAX; `negative`: ends as -1
    past the end (a crop by one row and column when `crop`), axes counted from the back."""
    n, inits = helper.make_node, {}

    def const(name: str, values: list[int]) -> str:
        inits[name] = np.array(values, np.int64)
        return name

    nodes, parts = [], []
    for i, (dy, dx) in enumerate(phases):
        if spelling == "chained":
            nodes += [n("Slice", ["x", const(f"sy{i}", [dy]), const("end", [2**63 - 1]), const("ax2", [2]),
                                  const("two", [2])], [f"r{i}"], name=f"Slice_r{i}"),
                      n("Slice", [f"r{i}", const(f"sx{i}", [dx]), "end", const("ax3", [3]), "two"], [f"p{i}"],
                        name=f"Slice_c{i}")]
        else:
            end = (size - 2) if crop else (2**31 - 1 if spelling == "joint" else size + 5)
            axes = [2, 3] if spelling == "joint" else [-2, -1]
            nodes.append(n("Slice", ["x", const(f"s{i}", [dy, dx]), const("e", [end, end]), const("ax", axes),
                                     const("st", [2, 2])], [f"p{i}"], name=f"Slice_{i}"))
        parts.append(f"p{i}")
    q = 3 * len(phases)
    nodes.append(n("Concat", parts, ["cat"], axis=1, name="Concat_focus"))
    nodes.append(n("Conv", ["cat", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="Conv_focus"))
    last = "c"
    if bn:
        inits |= {"g": 1 + rand(16, seed=3, scale=0.1), "be": rand(16, seed=4, scale=0.1),
                  "m": rand(16, seed=5, scale=0.1), "v": 1 + np.abs(rand(16, seed=6, scale=0.1))}
        nodes.append(n("BatchNormalization", ["c", "g", "be", "m", "v"], ["cb"], name="bn"))
        last = "cb"
    nodes.append(n("Relu", [last], ["y"], name="relu"))
    inits |= {"w": rand(16, q, 3, 3, scale=0.3 / (q * 9) ** 0.5), "b": rand(16, seed=1, scale=0.1)}
    half = (size - 2) // 2 if crop else size // 2
    return model(nodes, {"x": [1, 3, size, size]}, {"y": [1, 16, half, half]}, inits)


def _x(seed: int = 7, size: int = 32) -> np.ndarray:
    return rand(1, 3, size, size, seed=seed)


def _hosts(module) -> list:
    return [op for op in module.walk() if isinstance(op, (nn.HostOp, nn.ConcatOp))]


@pytest.mark.parametrize("phases,spelling", [(YOLOV5, "chained"), (YOLOX, "joint"), (YOLOV5, "negative"),
                                             (((0, 0), (0, 1), (1, 0)), "chained")])
def test_focus_becomes_a_strided_conv_computing_what_onnxruntime_does(phases, spelling: str) -> None:
    m = focus_net(phases, spelling)
    module = import_model(m)
    FoldFocusPass().apply(None, module)
    assert not _hosts(module), [op.name for op in _hosts(module)]
    (conv,) = [op for op in module.walk() if isinstance(op, nn.Conv2dOp)]
    assert tuple(conv.weight.type.get_shape()) == (16, 3, 6, 6)
    assert [int(v) for v in conv.strides.get_values()] == [2, 2] and [int(v) for v in conv.pads.get_values()] == [2] * 4
    (y,) = Golden(module).run(_x())
    np.testing.assert_allclose(y, ort_run(m, _x()), rtol=1e-5, atol=1e-5)


def test_a_crop_is_not_a_focus_and_stays() -> None:
    """Slices that drop the last two rows and columns (30 of 32) do not make a space-to-depth of x."""
    m = focus_net(YOLOV5, "negative", size=32, crop=True)
    module = import_model(m)
    before = len(_hosts(module))
    FoldFocusPass().apply(None, module)
    assert len(_hosts(module)) == before


def test_the_fold_changes_no_bit_of_the_fixed_point_result(monkeypatch) -> None:
    """The same integer products and sums (zero taps add nothing): the Q8.8 golden output with the
    fold equals the one with the Slices and Concat on the host, bit for bit; BN folds after."""
    folded = import_model(focus_net(bn=True))
    NNPreparePass().apply(None, folded)
    assert not _hosts(folded)
    monkeypatch.setattr(FoldFocusPass, "apply", lambda self, ctx, op: None)
    kept = import_model(focus_net(bn=True))
    NNPreparePass().apply(None, kept)
    assert len(_hosts(kept)) == 9
    for seed in (7, 8):
        (a,), (b,) = Golden(folded).run(_x(seed)), Golden(kept).run(_x(seed))
        assert np.array_equal(a, b)


def test_the_focus_net_runs_on_the_device_alone_bit_exact(tmp_path: Path, capsys) -> None:
    path, report = tmp_path / "focus.onnx", tmp_path / "r.json"
    onnx.save(focus_net(), path)
    assert snow_run([str(path), "--check", "--quiet", "--report", str(report)]) == 0, capsys.readouterr().err
    r = json.loads(report.read_text())
    assert r["check"]["golden_bit_exact"] is True
    assert [layer["where"] for layer in r["layers"] if layer["where"] == "host" and layer.get("host_ms")] == []
    assert r["total"]["host_ms"] == 0
