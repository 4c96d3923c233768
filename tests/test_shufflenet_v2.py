"""ShuffleNetV2 units as torch exports them (a channel Split or two channel Slices, a branch of
1x1 / depthwise 3x3 / 1x1 convs, Concat(identity half, branch), the Reshape-Transpose-Reshape
shuffle): every layer on the device, bit-exact. The identity half is a view of the unit's input
that no conv writes and the shuffle interleaves the concat's two inputs, so fold-channel-shuffle
writes them as shuffled 1x1 parts chained through the bypass, and copy-concat-slices copies a
last unit's identity half into its concat."""

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
from snowir.passes.pipelines import NNPreparePass
from tests.onnx_util import model, ort_run, rand, snow_run

N = helper.make_node
C, HW = 32, 12


def shufflenet_v2(units: int = 2, split: str = "split") -> onnx.ModelProto:
    """A stem conv to C channels, `units` stride-1 units, the last without its shuffle (as a
    stage's last unit feeds the next stage's stride-2 unit, here a 1x1 conv)."""
    nodes, inits, seed = [], {}, [0]

    def conv(x: str, cin: int, cout: int, k: int, name: str, relu: bool = True, groups: int = 1) -> str:
        seed[0] += 1
        inits[f"{name}_w"] = rand(cout, cin // groups, k, k, seed=seed[0], scale=0.8 / np.sqrt(cin // groups * k * k))
        inits[f"{name}_b"] = rand(cout, seed=100 + seed[0], scale=0.05)
        out = f"{name}_c" if relu else name
        nodes.append(N("Conv", [x, f"{name}_w", f"{name}_b"], [out], pads=[k // 2] * 4, group=groups, name=name))
        if relu:
            nodes.append(N("Relu", [out], [name], name=f"{name}_relu"))
        return name

    x = conv("x", 8, C, 3, "stem")
    inits |= {"halves": np.array([C // 2, C // 2], np.int64), "s0": np.array([0], np.int64),
              "mid": np.array([C // 2], np.int64), "end": np.array([2**63 - 1], np.int64), "ax": np.array([1], np.int64),
              "shape5": np.array([1, 2, C // 2, HW, HW], np.int64), "shape4": np.array([1, C, HW, HW], np.int64)}
    for u in range(units):
        if split == "split":
            nodes.append(N("Split", [x, "halves"], [f"u{u}_a", f"u{u}_b"], axis=1, name=f"u{u}_split"))
        else:
            nodes += [N("Slice", [x, "s0", "mid", "ax"], [f"u{u}_a"], name=f"u{u}_slice0"),
                      N("Slice", [x, "mid", "end", "ax"], [f"u{u}_b"], name=f"u{u}_slice1")]
        b = conv(f"u{u}_b", C // 2, C // 2, 1, f"u{u}_pw1")
        b = conv(b, C // 2, C // 2, 3, f"u{u}_dw", relu=False, groups=C // 2)
        b = conv(b, C // 2, C // 2, 1, f"u{u}_pw2")
        nodes.append(N("Concat", [f"u{u}_a", b], [f"u{u}_cat"], axis=1, name=f"u{u}_cat"))
        x = f"u{u}_cat"
        if u + 1 < units:
            nodes += [N("Reshape", [x, "shape5"], [f"u{u}_r5"], name=f"u{u}_r5"),
                      N("Transpose", [f"u{u}_r5"], [f"u{u}_t"], perm=[0, 2, 1, 3, 4], name=f"u{u}_shuffle"),
                      N("Reshape", [f"u{u}_t", "shape4"], [f"u{u}_sh"], name=f"u{u}_r4")]
            x = f"u{u}_sh"
    y = conv(x, C, 16, 1, "head")
    return model(nodes, {"x": [1, 8, HW, HW]}, {y: [1, 16, HW, HW]}, inits)


def _x(seed: int = 7) -> np.ndarray:
    return rand(1, 8, HW, HW, seed=seed)


@pytest.mark.parametrize("split", ["split", "slice"])
def test_every_layer_of_the_units_is_a_device_layer(split: str) -> None:
    m = shufflenet_v2(split=split)
    module = import_model(m)
    NNPreparePass(quantize=False).apply(None, module)
    host = [op.name for op in module.walk() if op.attributes.get("place") == nn.StringAttr("host")]
    assert host == []
    assert not any(isinstance(op, nn.TransposeOp) for op in module.walk())
    parts = [op for op in module.walk() if isinstance(op, nn.Conv2dOp) and ".part" in op.attributes["onnx_node"].data]
    copies = [op for op in module.walk() if isinstance(op, nn.Conv2dOp) and ".copy" in op.attributes["onnx_node"].data]
    assert len(parts) == 2 and parts[1].bypass is parts[0].output and len(copies) == 1
    (y,) = Golden(module).run(_x())
    np.testing.assert_allclose(y, ort_run(m, _x()), rtol=1e-4, atol=1e-4)


def test_the_units_run_on_the_machine_bit_exact_with_no_host_time(tmp_path: Path, capsys) -> None:
    path, report = tmp_path / "v2.onnx", tmp_path / "r.json"
    onnx.save(shufflenet_v2(units=3), path)
    np.save(tmp_path / "x.npy", _x())
    assert snow_run([str(path), "--check", "--quiet", "--input", str(tmp_path / "x.npy"), "--report", str(report)]) == 0, \
        capsys.readouterr().err
    r = json.loads(report.read_text())
    assert r["check"]["golden_bit_exact"] is True and r["check"]["snr_db"] > 30
    assert [row["name"] for row in r["layers"] if row["where"] == "host"] == [] and r["total"]["host_ms"] == 0
