"""A detector head's class scores (YOLOv8's Detect: per scale Concat(box conv, class conv),
Reshape to (N, C, H·W), Concat on axis 2, Split into boxes and classes, Sigmoid on the classes):
with the write-back activation unit the Sigmoid goes into the class convs' write-back
(fuse-activation traces the channels back through the Split, the pixel concat, the Reshape and
the channel concat), bit-exact on the machine; where the class channels are read elsewhere too,
it stays."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from snowir.dialects import nn
from snowir.frontend.onnx_import import import_model
from snowir.passes.pipelines import NNPreparePass
from tests.onnx_util import model, rand, snow_run

N = helper.make_node
BOX, CLS = 16, 8


def detect_tail(raw_scores: bool = False, dfl: bool = False) -> onnx.ModelProto:
    """Two scales (8x8 and 4x4) of a 16-channel feature map; `raw_scores`: the class logits of the
    first scale are a model output too (so they must stay un-activated); `dfl`: the boxes go
    through YOLOv8's DFL first (Reshape to (1, 4, 4, anchors), a Softmax over the 4 bins, back)."""
    nodes, inits, outs = [], {}, {}
    nodes.append(N("Conv", ["x", "w_s", "b_s"], ["f8"], pads=[1] * 4, name="stem"))
    nodes.append(N("MaxPool", ["f8"], ["f4"], kernel_shape=[2, 2], strides=[2, 2], name="down"))
    inits |= {"w_s": rand(16, 8, 3, 3, seed=1, scale=0.2), "b_s": rand(16, seed=2, scale=0.1)}
    flat = []
    for i, f in enumerate(("f8", "f4")):
        for kind, k in (("box", BOX), ("cls", CLS)):
            inits |= {f"w_{kind}{i}": rand(k, 16, 1, 1, seed=10 + i * 2 + k, scale=0.3),
                      f"b_{kind}{i}": rand(k, seed=20 + i * 2 + k, scale=0.1)}
            nodes.append(N("Conv", [f, f"w_{kind}{i}", f"b_{kind}{i}"], [f"{kind}{i}"], name=f"{kind}_conv{i}"))
        nodes.append(N("Concat", [f"box{i}", f"cls{i}"], [f"cat{i}"], axis=1, name=f"cat{i}"))
        inits[f"shape{i}"] = np.array([1, BOX + CLS, -1], np.int64)
        nodes.append(N("Reshape", [f"cat{i}", f"shape{i}"], [f"flat{i}"], name=f"reshape{i}"))
        flat.append(f"flat{i}")
    inits["sizes"] = np.array([BOX, CLS], np.int64)
    nodes += [N("Concat", flat, ["all"], axis=2, name="cat_scales"),
              N("Split", ["all", "sizes"], ["boxes" if not dfl else "raw_boxes", "logits"], axis=1, name="split")]
    if dfl:
        inits |= {"bins": np.array([1, 4, BOX // 4, 80], np.int64), "flat_boxes": np.array([1, BOX, 80], np.int64)}
        nodes += [N("Reshape", ["raw_boxes", "bins"], ["binned"], name="dfl_reshape"),
                  N("Softmax", ["binned"], ["dist"], axis=2, name="dfl_softmax"),
                  N("Reshape", ["dist", "flat_boxes"], ["boxes"], name="dfl_back")]
    nodes += [N("Sigmoid", ["logits"], ["scores"], name="cls_sigmoid"),
              N("Concat", ["boxes", "scores"], ["out"], axis=1, name="cat_out"),
              N("Transpose", ["out"], ["y"], perm=[0, 2, 1], name="transpose")]
    outs["y"] = [1, 80, BOX + CLS]
    if raw_scores:
        outs["cls0"] = [1, CLS, 8, 8]
    return model(nodes, {"x": [1, 8, 8, 8]}, outs, inits)


def _prepared(m: onnx.ModelProto, hw: str):
    module = import_model(m)
    NNPreparePass(hw=hw).apply(None, module)
    return module


@pytest.fixture
def unit(tmp_path: Path) -> str:
    path = tmp_path / "unit.json"
    path.write_text(json.dumps({"writeback_activation": 1}))
    return str(path)


def _run_tail(m: onnx.ModelProto, hw: str, tmp_path: Path, capsys) -> dict:
    """snow-run --check of `m` (with the machine `hw`, if any): its report."""
    path, report = tmp_path / "tail.onnx", tmp_path / "r.json"
    onnx.save(m, path)
    assert snow_run([str(path), "--check", "--quiet", "--report", str(report), *(["--hw", hw] if hw else [])]) == 0, \
        capsys.readouterr().err
    return json.loads(report.read_text())


def _sigmoids(module) -> list[nn.HostOp]:
    return [op for op in module.walk() if isinstance(op, nn.HostOp) and op.op_type.data == "Sigmoid"]


def test_the_class_sigmoid_goes_into_the_class_convs(unit: str, tmp_path: Path, capsys) -> None:
    module = _prepared(detect_tail(), unit)
    assert not _sigmoids(module)
    acts = {op.attributes["onnx_node"].data: op.attributes["act"].data for op in module.walk()
            if isinstance(op, nn.Conv2dOp) and "act" in op.attributes}
    assert acts == {"cls_conv0": "sigmoid", "cls_conv1": "sigmoid"}
    r = _run_tail(detect_tail(), unit, tmp_path, capsys)
    assert r["check"]["golden_bit_exact"] is True
    assert not any(row["op"] == "host:Sigmoid" for row in r["layers"])


def test_class_logits_read_elsewhere_keep_their_sigmoid_on_the_host(unit: str) -> None:
    (sig,) = _sigmoids(_prepared(detect_tail(raw_scores=True), unit))
    assert "not right after a conv" in sig.attributes["host_reason"].data


def test_a_machine_without_the_unit_says_so(tmp_path: Path) -> None:
    (sig,) = _sigmoids(_prepared(detect_tail(), ""))
    assert "no activation unit" in sig.attributes["host_reason"].data


def test_the_split_and_its_reassembly_go_once_the_sigmoid_is_in_the_convs(unit: str, tmp_path: Path, capsys) -> None:
    """With the sigmoid in the class convs, Split(boxes, logits) -> Concat(boxes, scores) puts the
    split's outputs back in order: drop-identity (run again after the units' passes) makes it the
    scales' concat itself, so neither the host Split nor the axis-1 Concat copies the output (0.2
    and 0.1 ms of host time in /tmp/probe's exporter-style tail); bit-exact."""
    module = _prepared(detect_tail(), unit)
    assert not [op for op in module.walk() if isinstance(op, nn.HostOp) and op.op_type.data == "Split"]
    assert [op.axis.value.data for op in module.walk() if isinstance(op, nn.ConcatOp)] == [1, 1, 2]
    r = _run_tail(detect_tail(), unit, tmp_path, capsys)
    assert r["check"]["golden_bit_exact"] is True
    assert {row["name"] for row in r["layers"]} & {"split", "cat_out"} == set()


def test_without_the_unit_the_sigmoid_stays_and_the_split_goes_into_the_scales(tmp_path: Path) -> None:
    module = _prepared(detect_tail(), "")
    assert [op.op_type.data for op in module.walk() if isinstance(op, nn.HostOp)] == ["Sigmoid"]


def test_the_scales_concat_and_the_transpose_are_the_hosts_read_of_the_output(unit: str, tmp_path: Path,
                                                                                capsys) -> None:
    """What is left of the tail moves the device's words to the model's output: Concat(axis 2) of
    the scales (a concat the device does not place: pixel-axis) and Transpose(0, 2, 1). The host
    applies both as it copies the heads' words back, each once (the copy it makes anyway):
    `host-read`, no host layer, and the round trips count the output's words read back."""
    r = _run_tail(detect_tail(), unit, tmp_path, capsys)
    rows = {row["name"]: row for row in r["layers"]}
    assert rows["cat_scales"]["where"] == rows["transpose"]["where"] == "host-read"
    assert r["total"]["host_ms"] == 0 and r["check"]["golden_bit_exact"] is True
    back = [t for t in r["round_trips"] if t["direction"] == "to_host"]
    assert sum(t["bytes"] for t in back) == 2 * 80 * (BOX + CLS)


def test_a_user_may_keep_the_rearrangement_on_the_host_or_is_refused_a_host_read_it_cannot_have(
        unit: str, tmp_path: Path, capsys) -> None:
    from snowir.tools.snow_opt import main as snow_opt

    module = import_model(detect_tail())
    for op in module.walk():
        if isinstance(op, nn.TransposeOp):
            op.attributes["place"] = nn.StringAttr("host")
    NNPreparePass(hw=unit).apply(None, module)
    where = {op.attributes["onnx_node"].data: op.attributes["place"].data for op in module.walk()
             if isinstance(op, nn.ConcatOp | nn.TransposeOp)}
    # the user's host transpose stays; the scales' concat it reads is the host's read of the heads
    assert where == {"cat0": "snowflake", "cat1": "snowflake", "cat_scales": "host-read", "transpose": "host"}
    bad = tmp_path / "bad.mlir"
    bad.write_text('func.func @main(%x: tensor<1x4x6xf32>) -> tensor<1x6x4xf32> {\n'
                   '  %t = nn.transpose %x {place = "host-read", perm = array<i64: 0, 2, 1>} : '
                   '(tensor<1x4x6xf32>) -> tensor<1x6x4xf32>\n  func.return %t : tensor<1x6x4xf32>\n}\n')
    assert snow_opt([str(bad), "-p", "partition-host"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "host-read" in err[0] and "Traceback" not in err[0], err


@pytest.mark.parametrize("with_unit", [True, False])
def test_with_the_dfl_the_split_goes_into_the_scales(with_unit: bool, unit: str, tmp_path: Path, capsys) -> None:
    """With YOLOv8's DFL between the Split and the output's Concat, the split outputs are not put
    back together; drop-identity{split-heads} gives each its own pixel concat of the scales' flattened
    inputs (boxes: the box convs', classes: the class convs'), so no host Split copies the whole
    output; bit-exact, on the stock machine too (the sigmoid then on the host)."""
    hw = unit if with_unit else ""
    module = _prepared(detect_tail(dfl=True), hw)
    assert not [op for op in module.walk() if isinstance(op, nn.HostOp) and op.op_type.data == "Split"]
    pixel_concats = [op for op in module.walk() if isinstance(op, nn.ConcatOp) and op.axis.value.data == 2]
    assert sorted(op.attributes["onnx_node"].data for op in pixel_concats) == ["cat_scales.0", "cat_scales.1"]
    r = _run_tail(detect_tail(dfl=True), hw, tmp_path, capsys)
    assert r["check"]["golden_bit_exact"] is True and r["check"]["snr_db"] > 35
    assert "split" not in {row["name"] for row in r["layers"]}


def test_the_dfl_reads_its_concat_and_the_outputs_concat_takes_host_results_in_place(unit: str, tmp_path: Path,
                                                                                       capsys) -> None:
    """A rearrangement read by a host layer is the host's read too (the DFL softmax reads the box
    bins' concat of the scales: YOLOv8n's Concat_6 and Transpose, 1.6 ms of host copies), and a
    concat taking a host layer's result only it reads gets it written in its slice (the DFL's output
    into the output's Concat). Only the softmax is host work; the round trips count the input and
    each head's words once; bit-exact."""
    r = _run_tail(detect_tail(dfl=True), unit, tmp_path, capsys)
    rows = {row["name"]: row for row in r["layers"]}
    assert [n for n, row in rows.items() if row["where"] == "host"] == ["dfl_softmax"]
    assert rows["cat_scales.0"]["where"] == rows["cat_out"]["where"] == rows["transpose"]["where"] == "host-read"
    assert r["check"]["golden_bit_exact"] is True and r["check"]["snr_db"] > 35
    trips = {d: sum(t["bytes"] for t in r["round_trips"] if t["direction"] == d) for d in ("to_device", "to_host")}
    assert trips == {"to_device": 2 * 8 * 8 * 8, "to_host": 2 * 80 * (BOX + CLS)}


def test_a_host_result_read_elsewhere_keeps_its_concat_on_the_host(tmp_path: Path, capsys) -> None:
    """The host writes a result in a concat's slice only where the concat is its one reader; read
    by another output too, the concat is a host copy (a host layer with its time). (An output a
    host Softmax over channels produces is checked as its logits on both sides: the golden side
    compared its probabilities with onnxruntime's logits, SNR 0.4 dB, a false failure.)"""
    nodes = [N("Conv", ["x", "w", "b"], ["c"], pads=[1] * 4, name="conv"),
             N("Softmax", ["c"], ["s"], axis=1, name="soft"),
             N("Concat", ["s", "c"], ["y"], axis=2, name="cat")]  # a pixel-axis concat: not the device's
    inits = {"w": rand(16, 8, 3, 3, seed=3, scale=0.2), "b": rand(16, seed=4, scale=0.1)}
    alone = _run_tail(model(nodes, {"x": [1, 8, 8, 8]}, {"y": [1, 16, 16, 8]}, inits), "", tmp_path, capsys)
    shared = _run_tail(model(nodes, {"x": [1, 8, 8, 8]}, {"y": [1, 16, 16, 8], "s": [1, 16, 8, 8]}, inits), "",
                       tmp_path, capsys)
    where = [{row["name"]: row["where"] for row in r["layers"]}["cat"] for r in (alone, shared)]
    assert where == ["host-read", "host"]
    assert alone["total"]["host_ms"] < shared["total"]["host_ms"]
    assert alone["check"]["golden_bit_exact"] is True and shared["check"]["golden_bit_exact"] is True
