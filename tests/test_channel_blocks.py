"""
A depthwise conv's input written as one tensor per 16-channel block (depthwise-to-grouped's
split-producer form, docs/lowering.md "Depthwise convs: the bound"): the 1x1 producer becomes one
conv per block, each depthwise slice reads its block whole instead of gathering its channels pixel
by pixel. Where the producer can write every block in one layer (channel-tile-major,
tests/test_channel_tiles.py) that form wins; the split one stays where it cannot (channels not
whole blocks, an INDP stem whose blocks run INDP), so these tests switch the one-layer form off
(`split_only`) to keep checking the split one on small exporter-style mobile blocks: bit-exact
against the golden model (Q8.8 and per-tensor formats), and fewer cycles than the gathered slices
it replaces.
"""

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
from snowir.hw import SnowflakeConfig
from snowir.passes.nn import depthwise_to_grouped
from snowir.passes.nn.fuse_relu import FuseReluPass
from snowir.passes.pipelines import NNPreparePass
from snowir.tools.snow_run import main as snow_run
from tests.onnx_util import model, rand


@pytest.fixture
def split_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The producer not written channel-tile-major in one layer: the split form is the blocked one."""
    monkeypatch.setattr(depthwise_to_grouped, "_tiled_writer", lambda op: None)


def mobile_block(cin: int, c: int, h: int, stride: int = 1, kernel: int = 3, dw_scale: float = 0.3) -> onnx.ModelProto:
    """`expand` 1x1 cin -> c, ReLU, `dw` kernel x kernel depthwise (pad kernel // 2), ReLU, `project`
    1x1 c -> c."""
    n = helper.make_node
    o = (h - 1) // stride + 1
    nodes = [n("Conv", ["x", "w0", "b0"], ["c0"], name="expand"), n("Relu", ["c0"], ["r0"]),
             n("Conv", ["r0", "w1", "b1"], ["c1"], name="dw", pads=[kernel // 2] * 4, group=c, strides=[stride] * 2),
             n("Relu", ["c1"], ["r1"]), n("Conv", ["r1", "w2", "b2"], ["y"], name="project")]
    inits = {"w0": rand(c, cin, 1, 1, scale=0.5 / cin ** 0.5), "b0": rand(c, seed=1, scale=0.1),
             "w1": rand(c, 1, kernel, kernel, seed=2, scale=dw_scale), "b1": rand(c, seed=3, scale=0.1),
             "w2": rand(c, c, 1, 1, seed=4, scale=0.3 / c ** 0.5), "b2": rand(c, seed=5, scale=0.1)}
    return model(nodes, {"x": [1, cin, h, h]}, {"y": [1, c, o, o]}, inits)


def _run(tmp_path: Path, m: onnx.ModelProto, name: str, *extra: str) -> dict:
    """snow-run --check on `m` (bit-exact asserted): the report's layers, by name."""
    path, report = tmp_path / f"{name}.onnx", tmp_path / f"{name}.json"
    onnx.save(m, path)
    assert snow_run([str(path), "--check", "--quiet", "--report", str(report), *extra]) == 0
    r = json.loads(report.read_text())
    assert r["check"]["golden_bit_exact"] is True
    return {layer["name"]: layer for layer in r["layers"]}


def _cycles(layers: dict, prefix: str) -> int:
    return sum(v["cycles"] or 0 for k, v in layers.items() if k == prefix or k.startswith(f"{prefix}."))


@pytest.mark.usefixtures("split_only")
@pytest.mark.parametrize("h, stride", [(14, 1), (28, 2)])
def test_blocked_input_is_bit_exact_and_faster_than_gathered_slices(tmp_path: Path, h: int, stride: int,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """16 -> 48 1x1, 48-channel 3x3 depthwise, 48 -> 48 1x1: the producer runs as three block
    convs, the depthwise slices read them without a gather; the depthwise layer and the whole
    block take fewer cycles than without the blocked form (gathered slices at stride 1, 16-lane
    groups at stride 2). Measured: 14² 10,649 -> 9,027 dw cycles, 19,204 -> 18,219 the block;
    28²/2 19,251 -> 10,122 and 33,733 -> 25,350."""
    m = mobile_block(16, 48, h, stride)
    blocked = _run(tmp_path, m, "blocked")
    assert {"expand.0", "expand.1", "expand.2", "dw.0", "dw.1", "dw.2"} <= set(blocked)
    assert all(blocked[f"expand.{g}"]["where"] == "device" for g in range(3))
    monkeypatch.setattr(depthwise_to_grouped, "_blocked_producer", lambda op: None)
    plain = _run(tmp_path, m, "plain")
    assert "expand" in plain and "expand.0" not in plain
    assert _cycles(blocked, "dw") < 0.9 * _cycles(plain, "dw"), (_cycles(blocked, "dw"), _cycles(plain, "dw"))
    total = lambda layers: sum(_cycles(layers, n) for n in ("expand", "dw", "project"))  # noqa: E731
    assert total(blocked) < total(plain), (total(blocked), total(plain))


@pytest.mark.usefixtures("split_only")
def test_blocked_input_with_per_tensor_formats_is_bit_exact(tmp_path: Path) -> None:
    """--format auto: each block is a tensor of its own with its own format (the first block's
    kernels 20x the others'); the slices read each in its format, bit-exact."""
    m = mobile_block(16, 48, 14)
    w0 = next(i for i in m.graph.initializer if i.name == "w0")
    a = onnx.numpy_helper.to_array(w0).copy()
    a[:16] *= 20
    w0.CopyFrom(onnx.numpy_helper.from_array(a, "w0"))
    cal = tmp_path / "cal.npy"
    np.save(cal, np.random.default_rng(0).standard_normal((4, 16, 14, 14)).astype(np.float32))
    layers = _run(tmp_path, m, "auto", "--format", "auto", "--calibration", str(cal))
    assert {"expand.0", "expand.2", "dw.0"} <= set(layers)


def test_an_indp_producer_keeps_its_one_conv(tmp_path: Path) -> None:
    """8 input channels: the producer runs INDP (64-kernel tiles over the CUs' rows), which
    16-kernel COOP blocks would give up (1,422 cycles against 5,519 at 14²), and so would one COOP
    conv writing the blocks (4,531): neither blocked form."""
    layers = _run(tmp_path, mobile_block(8, 48, 14), "indp")
    assert "expand" in layers and "expand.0" not in layers and layers["expand"]["mode"] == "INDP"


@pytest.mark.usefixtures("split_only")
def test_blocks_keep_the_producers_weight_format(monkeypatch: pytest.MonkeyPatch) -> None:
    """Q8.8: the blocked model's golden output equals the unblocked one's bit for bit, though the
    other blocks' kernels are 20x the first's (alone, the first would take more fraction bits):
    each block is capped at the producer's weight format (`w_frac_max`)."""
    m = mobile_block(16, 48, 14)
    w0 = next(i for i in m.graph.initializer if i.name == "w0")
    a = onnx.numpy_helper.to_array(w0).copy()
    a[16:] *= 20
    w0.CopyFrom(onnx.numpy_helper.from_array(a, "w0"))
    x = rand(1, 16, 14, 14, seed=9)
    blocked = import_model(m)
    NNPreparePass().apply(None, blocked)
    fracs = {op.attributes["w_frac"].value.data for op in blocked.walk()
             if isinstance(op, nn.Conv2dOp) and "channel_block" in op.attributes}
    assert len(fracs) == 1
    monkeypatch.setattr(depthwise_to_grouped, "_blocked_producer", lambda op: None)
    plain = import_model(m)
    NNPreparePass().apply(None, plain)
    (got,), (want,) = Golden(blocked).run(x), Golden(plain).run(x)
    assert np.array_equal(got, want)


def test_pricing_the_blocks_leaves_no_reader_behind() -> None:
    """`_blocked_cycles` builds every block to price it and lets go of all of them: the producer's
    input keeps its one reader (a priced block left among its uses was seen by later passes)."""
    module = import_model(mobile_block(16, 48, 14))
    FuseReluPass().apply(None, module)
    dw = next(op for op in module.walk() if isinstance(op, nn.Conv2dOp) and op.groups.value.data == 48)
    producer, w = depthwise_to_grouped._blocked_producer(dw), depthwise_to_grouped.const_of(dw.weight)
    assert producer is not None
    before = len(list(producer[0].input.uses))
    assert depthwise_to_grouped._blocked_cycles(SnowflakeConfig(), dw, w, *producer) > 0
    assert len(list(producer[0].input.uses)) == before == 1
