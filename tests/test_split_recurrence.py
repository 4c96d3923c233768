"""split-recurrence (issue 36): an ONNX LSTM's input projection X·W^T + Wb + Rb runs on the device as
a dense layer (sequence-gemm's one 1x1 conv over the T pixels), its recurrence on the host as snowir's
LSTMRecurrence; float LSTM forward / reverse / bidirectional with and without initial states,
onnxruntime's DynamicQuantizeLSTM (quantize_dynamic) dequantized, GRU (both linear_before_reset) and
RNN the same way. A node of another form stays one host node, with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from snowir.dialects import nn
from snowir.frontend.onnx_import import import_model
from snowir.golden import Golden
from snowir.host_model import useful_macs
from snowir.passes.nn.split_recurrence import SplitRecurrencePass
from snowir.tools.snow_run import main as snow_run
from tests.onnx_util import rand

T, I = 16, 64  # the conv's 16 x 8 x 8 output read as 16 steps of 64 features, batch 1
FLOAT_TOL = 1e-5
"""The float recurrence (split, golden model in float) against onnxruntime's LSTM: float32 rounding."""


GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def lstm_model(direction: str = "forward", states: bool = False, hidden: int = 8, op_attrs: dict | None = None,
               extra: dict | None = None, op: str = "LSTM") -> onnx.ModelProto:
    """x [1, 16, 8, 8] -> conv -> Reshape [T, 1, I] -> LSTM (GRU, RNN) -> Y, Y_h (, Y_c) (as ddddocr's
    nets: a conv feature map read as a sequence). `extra` adds inputs by ONNX slot (sequence_lens 4, P 7)."""
    dirs, g = 2 if direction == "bidirectional" else 1, GATES[op]
    inits = {"w": rand(16, 16, 3, 3, scale=0.1), "b": rand(16, seed=1, scale=0.1), "rs": np.array([T, 1, I], np.int64),
             "lw": rand(dirs, g * hidden, I, seed=5, scale=0.1), "lr": rand(dirs, g * hidden, hidden, seed=6, scale=0.2),
             "lb": rand(dirs, 2 * g * hidden, seed=7, scale=0.1)}
    ins = ["seq", "lw", "lr", "lb", "", "", "", ""]
    if states:
        inits |= {"h0": rand(dirs, 1, hidden, seed=8, scale=0.5)}
        ins[5] = "h0"
        if op == "LSTM":
            inits |= {"c0": rand(dirs, 1, hidden, seed=9, scale=0.5)}
            ins[6] = "c0"
    for slot, (name, value) in (extra or {}).items():
        inits[name] = value
        ins[slot] = name
    while not ins[-1]:
        ins.pop()
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Reshape", ["c", "rs"], ["seq"], name="to_steps"),
             helper.make_node(op, ins, ["y", "yh", "yc"][:3 if op == "LSTM" else 2], name="lstm", hidden_size=hidden,
                              direction=direction, **(op_attrs or {}))]
    outs = [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [T, dirs, 1, hidden]),
            helper.make_tensor_value_info("yh", onnx.TensorProto.FLOAT, [dirs, 1, hidden]),
            helper.make_tensor_value_info("yc", onnx.TensorProto.FLOAT, [dirs, 1, hidden])][:3 if op == "LSTM" else 2]
    graph = helper.make_graph(nodes, "lstm", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 16, 8, 8])],
                              outs,
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def quantized_lstm(tmp_path: Path, per_channel: bool = False) -> onnx.ModelProto:
    """onnxruntime's quantize_dynamic of a bidirectional LSTM with initial states: DynamicQuantizeLSTM
    (com.microsoft) with int8 W [D, I, 4H] / R [D, H, 4H] and a scale and zero point per direction
    (`per_channel`: per direction and gate column, [D, 4H])."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    onnx.save(lstm_model("bidirectional", states=True, hidden=16), tmp_path / "f.onnx")
    quantize_dynamic(str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx"), op_types_to_quantize=["LSTM"],
                     weight_type=QuantType.QInt8, per_channel=per_channel)
    m = onnx.load(str(tmp_path / "q.onnx"))
    assert [n.op_type for n in m.graph.node][-1] == "DynamicQuantizeLSTM"
    return m


def _x() -> np.ndarray:
    return np.random.default_rng(9).uniform(0, 1, [1, 16, 8, 8]).astype(np.float32)


def _ort(m: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    from snowir.frontend.onnx_host import ort_session

    return ort_session(m).run(None, {"x": x})


def _split(m: onnx.ModelProto):
    module = import_model(m)
    SplitRecurrencePass().apply(None, module)
    module.verify()
    return module


def _hosts(module) -> list[nn.HostOp]:
    return [op for op in module.walk() if isinstance(op, nn.HostOp)]


def _run(tmp_path: Path, m: onnx.ModelProto, capsys) -> dict:
    path, report = tmp_path / "m.onnx", tmp_path / "r.json"
    onnx.save(m, path)
    rc = snow_run([str(path), "--check", "--quiet", "--report", str(report)])
    assert rc == 0, capsys.readouterr().err
    return json.loads(report.read_text())


FORMS = [("forward", False), ("forward", True), ("reverse", True), ("bidirectional", False), ("bidirectional", True)]


@pytest.mark.parametrize("direction, states", FORMS)
def test_the_split_computes_what_onnxruntime_does(direction: str, states: bool) -> None:
    """In float (the golden model on the unquantized module), the projection as a dense and the
    recurrence as LSTMRecurrence give onnxruntime's Y, Y_h and Y_c to float32 rounding."""
    m, x = lstm_model(direction, states), _x()
    module = _split(m)
    (cell,) = _hosts(module)
    assert (cell.op_type.data, cell.domain.data) == ("LSTMRecurrence", "snowir")
    assert len([op for op in module.walk() if isinstance(op, nn.DenseOp)]) == 1
    for got, want in zip(Golden(module).run(x), _ort(m, x), strict=True):
        assert got.shape == want.shape and np.abs(got - want).max() < FLOAT_TOL


@pytest.mark.parametrize("direction, states", [FORMS[1], FORMS[4]])
def test_the_projection_runs_on_the_device_bit_exact(tmp_path: Path, capsys, direction: str, states: bool) -> None:
    """Through snow-run: the projection is a device layer (one conv over the T pixels), the machine
    equals the golden model, the recurrence is the one host layer, priced D·T·B·4H·H MACs."""
    m = lstm_model(direction, states, hidden=32)
    report = _run(tmp_path, m, capsys)
    assert report["check"]["golden_bit_exact"]
    rows = {r["name"]: r for r in report["layers"]}
    assert rows["lstm.input_projection"]["where"] == "device" and rows["lstm.input_projection"]["op"] == "dense"
    assert rows["lstm"]["op"] == "host:LSTMRecurrence" and rows["lstm"]["where"] == "host"
    assert "recurrence" in rows["lstm"]["host_reason"]
    assert [r["name"] for r in report["layers"] if r["where"] == "host"] == ["lstm"]
    dirs = 2 if direction == "bidirectional" else 1
    assert rows["lstm"]["macs"] == dirs * T * 4 * 32 * 32
    assert rows["lstm.input_projection"]["macs"] == T * dirs * 4 * 32 * I


def test_the_quantized_golden_model_follows_onnxruntime() -> None:
    """The whole pipeline in Q8.8 (golden model): every output within 30 dB of onnxruntime."""
    from snowir.backend import SnowflakeBackend
    from snowir.driver.check import snr_db

    m, x = lstm_model("bidirectional", True, hidden=16), _x()
    rep = SnowflakeBackend.prepare(m, engine="golden")
    assert [op.op_type.data for op in _hosts(rep.module)] == ["LSTMRecurrence"]
    for got, want in zip(rep.run([x]), _ort(m, x), strict=True):
        assert snr_db(want, got) > 30


def test_the_split_keeps_the_work() -> None:
    """The dense's MACs and the recurrence's add up to the LSTM's D·T·B·4H·(I + H)."""
    m = lstm_model("bidirectional", True)
    (whole,) = _hosts(import_model(m))
    module = _split(m)
    (dense,) = [op for op in module.walk() if isinstance(op, nn.DenseOp)]
    (cell,) = _hosts(module)
    assert useful_macs(dense) + useful_macs(cell) == useful_macs(whole) == 2 * T * 4 * 8 * (I + 8)


@pytest.mark.parametrize("per_channel", [False, True])
def test_dynamic_quantize_lstm_splits_as_its_dequantized_weights(tmp_path: Path, capsys, per_channel: bool) -> None:
    """DynamicQuantizeLSTM: W / R dequantized ((q - zp) · scale per direction, transposed to ONNX's
    [D, 4H, I] / [D, 4H, H]): the split equals a float LSTM of those weights (float32 rounding), is
    within the 8-bit quantization's error of onnxruntime running the model as shipped, and its
    projection runs on the device bit-exact."""
    q, x = quantized_lstm(tmp_path, per_channel), _x()
    inits = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    (node,) = [n for n in q.graph.node if n.op_type == "DynamicQuantizeLSTM"]
    w_q, r_q, w_s, w_z, r_s, r_z = (inits[node.input[k]] for k in (1, 2, 8, 9, 10, 11))

    def deq(a, s, z):  # a scale and zero point per direction, or per direction and gate column
        d = a.shape[0]
        return ((a.astype(np.float32) - z.astype(np.float32).reshape(d, 1, -1)) * s.reshape(d, 1, -1)).transpose(0, 2, 1)

    floats = lstm_model("bidirectional", states=True, hidden=16)
    for t in floats.graph.initializer:
        if t.name in ("lw", "lr"):
            t.CopyFrom(numpy_helper.from_array(deq(w_q, w_s, w_z) if t.name == "lw" else deq(r_q, r_s, r_z), t.name))
    module = _split(q)
    assert [(op.op_type.data, op.domain.data) for op in _hosts(module)] == [("LSTMRecurrence", "snowir")]
    got = Golden(module).run(x)
    for a, b in zip(got, _ort(floats, x), strict=True):
        assert np.abs(a - b).max() < FLOAT_TOL
    for a, b in zip(got, _ort(q, x), strict=True):
        assert np.abs(a - b).max() < 0.05  # onnxruntime quantizes X and h to 8 bits as well
    from snowir.host_nodes import node_bytes

    (cell,) = _hosts(module)  # R streamed at every step as it is held: 8-bit here, fp32 for a float LSTM
    (float_cell,) = _hosts(_split(floats))
    r_words = 2 * 4 * 16 * 16
    params = 2 * (4 * 16 if per_channel else 1)  # R_scale (fp32) and R_zero_point (int8) values
    assert node_bytes(float_cell) - node_bytes(cell) == T * r_words * (4 - 1) - params * (4 + 1)
    report = _run(tmp_path, q, capsys)
    (projection,) = [r for r in report["layers"] if r["name"] == f"{node.name}.input_projection"]
    assert report["check"]["golden_bit_exact"] and projection["where"] == "device"


UNSPLIT = {
    "clip": ({"clip": 2.0}, {}, "attribute clip (a clip, or activation parameters)"),
    "activations": ({"activations": ["Sigmoid", "Relu", "Tanh"]}, {}, "activations ['Sigmoid', 'Relu', 'Tanh'] (split: the default sigmoid, tanh, tanh only)"),
    "input_forget": ({"input_forget": 1}, {}, "input_forget = 1"),
    "peepholes": ({}, {7: ("p", rand(1, 24, seed=11, scale=0.1))}, "peepholes (P)"),
    "short sequences": ({}, {4: ("lens", np.array([T - 2], np.int32))}, "sequence_lens shorter than T (or computed at run time)"),
}


@pytest.mark.parametrize("name", list(UNSPLIT))
def test_another_lstm_stays_one_host_node_with_its_reason(name: str) -> None:
    attrs, extra, why = UNSPLIT[name]
    m, x = lstm_model(op_attrs=attrs, extra=extra), _x()
    module = _split(m)
    (op,) = _hosts(module)
    assert op.op_type.data == "LSTM" and not [d for d in module.walk() if isinstance(d, nn.DenseOp)]
    assert op.attributes["host_reason"].data == \
        f"ONNX LSTM: not split (split-recurrence): {why}; the whole LSTM runs on the host"
    for got, want in zip(Golden(module).run(x), _ort(m, x), strict=True):
        assert np.abs(got - want).max() < FLOAT_TOL  # still onnxruntime's own node


def test_nn_prepare_without_split_recurrence_keeps_the_node() -> None:
    from snowir.passes.pipelines import NNPreparePass

    module = import_model(lstm_model())
    NNPreparePass(split_recurrence=False).apply(None, module)
    assert [op.op_type.data for op in _hosts(module)] == ["LSTM"]


CELLS = [("GRU", {"linear_before_reset": 0}), ("GRU", {"linear_before_reset": 1}), ("RNN", {})]


@pytest.mark.parametrize("op, attrs", CELLS)
@pytest.mark.parametrize("direction, states", [FORMS[1], FORMS[3], FORMS[4]])
def test_gru_and_rnn_split_as_the_lstm_does(op: str, attrs: dict, direction: str, states: bool) -> None:
    """GRU (z, r, h; with linear_before_reset = 1 the h gate's Rb stays with the recurrence, inside
    the reset gate's product) and RNN: the same split, onnxruntime's Y and Y_h to float32 rounding."""
    m, x = lstm_model(direction, states, op_attrs=attrs, op=op), _x()
    module = _split(m)
    (cell,) = _hosts(module)
    assert (cell.op_type.data, cell.domain.data) == (f"{op}Recurrence", "snowir")
    assert (3 in cell.input_slots()) == bool(attrs.get("linear_before_reset"))  # Rb_h
    for got, want in zip(Golden(module).run(x), _ort(m, x), strict=True):
        assert got.shape == want.shape and np.abs(got - want).max() < FLOAT_TOL


@pytest.mark.parametrize("op, attrs", [CELLS[1], CELLS[2]])
def test_gru_and_rnn_projections_run_on_the_device(tmp_path: Path, capsys, op: str, attrs: dict) -> None:
    m = lstm_model("bidirectional", True, hidden=32, op_attrs=attrs, op=op)
    report = _run(tmp_path, m, capsys)
    rows = {r["name"]: r for r in report["layers"]}
    assert report["check"]["golden_bit_exact"] and rows["lstm.input_projection"]["where"] == "device"
    assert rows["lstm"]["op"] == f"host:{op}Recurrence" and rows["lstm"]["macs"] == 2 * T * GATES[op] * 32 * 32


def test_a_gru_of_another_form_stays_whole() -> None:
    m = lstm_model(op_attrs={"activations": ["HardSigmoid", "Tanh"]}, op="GRU")
    (op,) = _hosts(_split(m))
    assert op.op_type.data == "GRU" and op.attributes["host_reason"].data == (
        "ONNX GRU: not split (split-recurrence): activations ['HardSigmoid', 'Tanh'] (split: the default sigmoid, "
        "tanh only); the whole GRU runs on the host")
