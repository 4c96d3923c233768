"""End-to-end time on one timeline (docs/machine.md "End-to-end time"): the report's total is
device + host + round trips in execution order, snow-run prints it, the trace shows the host's
spans on the machine's time axis, snow-report compares it, and Report.from_json reads it back."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

import snowir
from snowir.driver.model_api import Report
from snowir.host_model import copy_ms
from snowir.host_model import HOST
from snowir.segments import main_of
from snowir.tools.snow_report import main as snow_report
from snowir.tools.snow_run import main as snow_run
from tests.onnx_util import model, rand

C, HW = 16, 8
DIGITS_CNN = Path(snowir.__file__).parent / "data" / "digits_cnn.onnx"


def sigmoid_between_convs() -> onnx.ModelProto:
    """conv0 (device) -> Sigmoid (host) -> conv1 (device): two segments and four round trips
    (the input in, conv0's output out, the sigmoid's in, the model's output out)."""
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c0"], ["s"], name="sig"),
             helper.make_node("Conv", ["s", "w1", "b1"], ["y"], name="conv1", pads=[1, 1, 1, 1])]
    inits = {"w0": rand(C, C, 3, 3, seed=1, scale=0.1), "b0": rand(C, seed=2, scale=0.1),
             "w1": rand(C, C, 3, 3, seed=3, scale=0.1), "b1": rand(C, seed=4, scale=0.1)}
    return model(nodes, {"x": [1, C, HW, HW]}, {"y": [1, C, HW, HW]}, inits)


@pytest.fixture(scope="module")
def sigmoid_run(tmp_path_factory) -> tuple[dict, dict, Path]:
    tmp = tmp_path_factory.mktemp("e2e")
    path, report, trace = tmp / "sig.onnx", tmp / "sig.json", tmp / "sig.trace.json"
    onnx.save(sigmoid_between_convs(), path)
    assert snow_run([str(path), "--quiet", "--report", str(report), "--trace", str(trace)]) == 0
    return json.loads(report.read_text()), json.loads(trace.read_text()), report


def _sums_up(r: dict) -> None:
    """end_to_end_ms is device + host + round trips, each of them summed from its rows."""
    t = r["total"]
    assert t["ms"] == pytest.approx(sum(layer["ms"] for layer in r["layers"]))
    assert t["host_ms"] == pytest.approx(sum(layer["host_ms"] or 0.0 for layer in r["layers"]))
    assert t["round_trip_ms"] == pytest.approx(sum(trip["ms"] for trip in r["round_trips"]))
    assert t["end_to_end_ms"] == pytest.approx(t["ms"] + t["host_ms"] + t["round_trip_ms"])
    assert t["device_share"] == pytest.approx(t["ms"] / t["end_to_end_ms"])
    assert 0 < t["device_share"] < 1


def _spans(r: dict) -> list[tuple[float, float]]:
    """Every layer and round trip as (start, end), in execution order."""
    spans = [(layer["start_ms"], layer["end_ms"]) for layer in r["layers"]]
    spans += [(trip["start_ms"], trip["end_ms"]) for trip in r["round_trips"]]
    return sorted(spans)


def _ordered_without_overlap(r: dict) -> None:
    spans = _spans(r)
    assert spans[0][0] == 0.0
    for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
        assert a0 <= a1 <= b0 <= b1  # one after another: nothing overlaps
    # no gaps either: the last span ends at the end-to-end time
    assert spans[-1][1] == pytest.approx(r["total"]["end_to_end_ms"])
    assert sum(b - a for a, b in spans) == pytest.approx(r["total"]["end_to_end_ms"])


def test_digits_cnn_end_to_end_is_device_plus_host_plus_round_trips() -> None:
    compiled = snowir.compile(DIGITS_CNN)
    r = compiled.run().report.to_json()
    _sums_up(r)
    _ordered_without_overlap(r)
    # the host pads the input rows (conv1.pad_rows), writes them once before the one segment, and
    # reads the logits back for its softmax
    trips = r["round_trips"]
    assert [(t["direction"], t["name"]) for t in trips] == [("to_device", "conv1.pad_rows"), ("to_host", "fc")]
    padded = next(op for op in main_of(compiled.module).body.block.ops
                  if op.name == "nn.pad_rows")
    assert trips[0]["bytes"] == 2 * int(np.prod(padded.results[0].type.get_shape()))  # 2 bytes a word
    layers = {layer["name"]: layer for layer in r["layers"]}
    assert layers["conv1"]["start_ms"] == pytest.approx(trips[0]["end_ms"])
    assert layers["softmax"]["start_ms"] == pytest.approx(trips[1]["end_ms"])


def test_a_host_op_between_device_convs_costs_its_round_trips(sigmoid_run) -> None:
    r, _, _ = sigmoid_run
    _sums_up(r)
    _ordered_without_overlap(r)
    layers = {layer["name"]: layer for layer in r["layers"]}
    assert layers["sig"]["where"] == "host" and layers["conv0"]["where"] == layers["conv1"]["where"] == "device"
    # in execution order: x in, conv0, conv0 out, sig, sig in, conv1, y out
    words = C * HW * HW * 2
    assert [(t["direction"], t["name"], t["bytes"]) for t in r["round_trips"]] == [
        ("to_device", "x", words), ("to_host", "conv0", words),
        ("to_device", "sig", words), ("to_host", "conv1", words)]
    assert r["total"]["round_trip_ms"] == pytest.approx(4 * copy_ms(words))
    assert copy_ms(words) == pytest.approx(words / (HOST.gbps * 1e6))  # 16-bit words at the host's rate
    order = [layers["conv0"], r["round_trips"][1], layers["sig"], r["round_trips"][2], layers["conv1"]]
    assert all(a["end_ms"] == pytest.approx(b["start_ms"]) for a, b in zip(order, order[1:]))


def test_layer_by_layer_programs_copy_every_layers_input_and_output() -> None:
    """whole-model=false: each device layer is its own program with its own DRAM segments."""
    r = snowir.compile(sigmoid_between_convs(), pipeline="snowflake-lower{whole-model=false}").run().report.to_json()
    _sums_up(r)
    _ordered_without_overlap(r)
    assert [(t["direction"], t["name"]) for t in r["round_trips"]] == \
        [("to_device", "x"), ("to_host", "conv0"), ("to_device", "sig"), ("to_host", "conv1")]


def test_trace_has_host_spans_on_the_same_axis(sigmoid_run) -> None:
    r, trace, _ = sigmoid_run
    events = trace["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names[0] == "Snowflake" and names[1].startswith("host")
    host = [e for e in events if e["ph"] == "X" and e["pid"] == 1]
    # one span per host layer and per round trip, in order, not overlapping
    assert [e["name"] for e in host] == ["copy to device: x", "copy to host: conv0", "sig (host:Sigmoid)",
                                         "copy to device: sig", "copy to host: conv1"]
    for a, b in zip(host, host[1:]):
        assert a["ts"] + a["dur"] <= b["ts"] + 1e-3
    # the machine's spans of a layer sit inside its window of the end-to-end timeline (in us)
    layers = {layer["name"]: layer for layer in r["layers"]}
    for name in ("conv0", "conv1"):
        span = next(e for e in events if e["ph"] == "X" and e["pid"] == 0 and e["name"] == f"layer {name}")
        assert span["ts"] == pytest.approx(1e3 * layers[name]["start_ms"], abs=1e-3)
        assert span["ts"] + span["dur"] == pytest.approx(1e3 * layers[name]["end_ms"], abs=1e-3)
    sig = next(e for e in host if e["name"].startswith("sig"))
    conv1 = [e for e in events if e["ph"] == "X" and e["pid"] == 0 and e["ts"] >= sig["ts"]]
    assert conv1 and min(e["ts"] for e in conv1) >= sig["ts"] + sig["dur"]  # the device waits for the host


def test_report_round_trips_through_from_json(sigmoid_run) -> None:
    r, _, _ = sigmoid_run
    report = Report.from_json(r)
    assert report.total.end_to_end_ms == r["total"]["end_to_end_ms"] and report.total.device_share is not None
    assert report.layer("sig").start_ms == r["layers"][1]["start_ms"]
    assert report.round_trips[2].name == "sig" and report.round_trips[2].direction == "to_device"
    assert report.to_json() == r


def test_golden_reports_have_no_timeline(tmp_path: Path) -> None:
    """The golden model has no device time: no end-to-end figure rather than a wrong one."""
    r = snowir.compile(DIGITS_CNN).run(engine="golden").report
    assert r.total.end_to_end_ms is None and r.round_trips == () and r.layers[0].start_ms is None


def test_snow_run_and_snow_report_show_end_to_end(sigmoid_run, tmp_path: Path, capsys) -> None:
    """snow-run's line below the table; snow-report A B: A the default machine, B with half the
    bus (device layers slower, host and round trips the same)."""
    a, _, path = sigmoid_run
    model_path, report, hw = path.with_suffix(".onnx"), tmp_path / "b.json", tmp_path / "hw.json"
    hw.write_text(json.dumps({"dram_gbps": 2.1, "unit_gbps": 1.0}))
    capsys.readouterr()
    assert snow_run([str(model_path), "--hw", str(hw), "--report", str(report)]) == 0
    b = json.loads(report.read_text())
    ta, tb = a["total"], b["total"]
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("end to end"))
    assert line == (f"end to end {tb['end_to_end_ms']:.4f} ms = device {tb['ms']:.4f} + host {tb['host_ms']:.4f} "
                    f"+ round trips {tb['round_trip_ms']:.4f} ({tb['round_trip_bytes']:,} bytes); "
                    f"device share {100 * tb['device_share']:.1f}%")
    assert tb["ms"] > ta["ms"] and tb["host_ms"] == ta["host_ms"] and tb["round_trip_ms"] == ta["round_trip_ms"]
    assert snow_report([str(path), str(report)]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = {" ".join(x.split()[:-3]): x.split()[-3:] for x in out[out.index(next(x for x in out if
                                                                               x.startswith("end to end"))) + 1:]}
    assert rows["end_to_end_ms"] == [f"{ta['end_to_end_ms']:.4f}", f"{tb['end_to_end_ms']:.4f}",
                                     f"{100 * (tb['end_to_end_ms'] / ta['end_to_end_ms'] - 1):+.1f}%"]
    assert rows["round trip ms"][2] == "=" and rows["host ms"][2] == "="
    assert rows["device share"] == [f"{100 * ta['device_share']:.1f}%", f"{100 * tb['device_share']:.1f}%",
                                    f"{100 * (tb['device_share'] - ta['device_share']):+.1f}pt"]


def test_a_device_concat_costs_only_the_slices_the_host_writes() -> None:
    """A concat by placement (the device conv's slice and a host Sigmoid's in one DRAM tensor):
    the host writes its own slice before the segment that reads the concat, not the whole tensor,
    and the concat itself takes no time."""
    from tests.test_concat_placement import host_partner

    r = snowir.compile(host_partner()).run().report.to_json()
    _sums_up(r)
    _ordered_without_overlap(r)
    slice_bytes = 16 * 8 * 8 * 2  # 16 channels of 8x8, 2 bytes a word
    assert [(t["direction"], t["name"], t["bytes"]) for t in r["round_trips"]] == [
        ("to_device", "x", slice_bytes), ("to_host", "right", slice_bytes),
        ("to_device", "gate", slice_bytes), ("to_host", "post", slice_bytes)]
    cat = next(layer for layer in r["layers"] if layer["name"] == "cat")
    assert cat["where"] == "device" and cat["start_ms"] == cat["end_ms"]


def test_a_detector_heads_flatten_and_transpose_are_a_view(tmp_path: Path) -> None:
    """A detector head's output written (N, C, H, W) by a conv, then Reshape to (N, C, H·W) and
    Transpose (0, 2, 1) to (N, H·W, C) (PicoDet, YOLO exporters): the pair is the device's
    channel-innermost bytes as they are, so neither runs on the host (the transpose did: 0.123 ms
    here) and the model output is read straight from the conv's region; exact."""
    from onnx import TensorProto, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((32, 16, 3, 3)) * 0.1).astype(np.float32), "w"),
             numpy_helper.from_array(np.zeros(32, np.float32), "b"),
             numpy_helper.from_array(np.array([1, 32, -1], np.int64), "shape")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Reshape", ["c", "shape"], ["r"], name="flat"),
             helper.make_node("Transpose", ["r"], ["y"], perm=[0, 2, 1], name="tr")]
    g = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 20, 24])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 480, 32])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "head.onnx")
    assert snow_run([str(tmp_path / "head.onnx"), "--check", "--quiet", "--report", str(tmp_path / "r.json")]) == 0
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["check"]["golden_bit_exact"] is True and r["check"]["snr_db"] > 40
    assert {layer["name"]: layer["where"] for layer in r["layers"]} == {"conv": "device", "flat": "device",
                                                                       "tr": "device"}
    assert r["total"]["host_ms"] == 0
