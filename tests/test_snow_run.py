"""snow-run on snowflake_asm programs: report fields, trace, --hw, --input/--output, .sfb input, errors."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

import snowir

from snowir.tools.snow_opt import main as snow_opt
from snowir.tools.snow_run import main as snow_run

EXAMPLE = Path(__file__).parent.parent / "examples" / "conv3x3.mlir"
# the report contract of docs/machine.md ("Report fields")
TOTAL_KEYS = {"cycles", "ms", "host_ms", "macs", "lane_macs", "mac_utilization", "dram_bytes", "gbps",
              "static_instructions", "dynamic_instructions", "stall_cycles", "compile_s", "simulate_s"}
LAYER_KEYS = {"name", "op", "where", "cycles", "ms", "host_ms", "macs", "lane_macs", "mac_utilization", "dram_bytes",
              "gbps", "stall_cycles", "mode", "loop_order", "load_imbalance_pct", "format", "saturated",
              "saturated_share"}


def test_report_trace_and_outputs(tmp_path: Path, capsys) -> None:
    report, trace, out = tmp_path / "r.json", tmp_path / "t.json", tmp_path / "y.npy"
    assert snow_run([str(EXAMPLE), "--report", str(report), "--trace", str(trace), "--output", str(out)]) == 0
    table = capsys.readouterr().out
    assert "conv3x3" in table and "total" in table
    r = json.loads(report.read_text())
    assert set(r) == {"model", "hw", "total", "layers", "check", "provenance"}
    assert r["provenance"]["model_sha256"] == hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()
    assert r["provenance"]["format"] == "Q8.8" and r["provenance"]["engine"] == "fast"
    assert set(r["total"]) == TOTAL_KEYS and set(r["layers"][0]) == LAYER_KEYS
    assert r["total"]["macs"] == 16 * 16 * 3 * 48 * 16
    assert r["total"]["mac_utilization"] == pytest.approx(r["total"]["macs"] / (r["total"]["cycles"] * 256))
    assert r["total"]["ms"] == pytest.approx(r["total"]["cycles"] / 250e3)
    assert 0 < r["total"]["gbps"] <= 4.2
    assert r["hw"]["cus"] == 4 and r["check"] is None
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"control", "CUs (lock step)", "load unit 0", "load unit 3", "write-back"} <= names
    assert any(e["ph"] == "X" and e["name"].startswith("MAC") for e in events)
    y = np.load(out)
    assert y.dtype == np.float32 and y.shape == (16 * 16 * 16,) and (y >= 0).all()  # ReLU


def test_engines_and_sfb_agree(tmp_path: Path) -> None:
    sfb = tmp_path / "conv.sfb"
    assert snow_opt([str(EXAMPLE), "-t", "snowflake-bin", "-o", str(sfb)]) == 0
    outs = []
    for model, engine in ((EXAMPLE, "fast"), (EXAMPLE, "reference"), (sfb, "fast"), (sfb, "reference")):
        rep = tmp_path / f"{engine}.json"
        assert snow_run([str(model), "--engine", engine, "--quiet", "--report", str(rep), "--output",
                         str(tmp_path / f"{engine}.npy")]) == 0
        outs.append((json.loads(rep.read_text())["total"]["cycles"], np.load(tmp_path / f"{engine}.npy")))
    assert len({c for c, _ in outs}) == 1
    assert all(np.array_equal(outs[0][1], y) for _, y in outs)


def test_hw_file_changes_the_timing(tmp_path: Path) -> None:
    slow = tmp_path / "hw.json"
    slow.write_text(json.dumps({"ld_startup_cycles": 500}))
    cycles = []
    for extra in ([], ["--hw", str(slow)]):
        rep = tmp_path / "r.json"
        assert snow_run([str(EXAMPLE), "--quiet", "--report", str(rep), *extra]) == 0
        r = json.loads(rep.read_text())
        cycles.append(r["total"]["cycles"])
    assert r["hw"]["ld_startup_cycles"] == 500
    assert cycles[1] > cycles[0]


def test_input_file(tmp_path: Path) -> None:
    x = np.zeros(18 * 18 * 16, np.float32)
    np.save(tmp_path / "x.npy", x)
    assert snow_run([str(EXAMPLE), "--quiet", "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy")]) == 0
    y = np.load(tmp_path / "y.npy")
    assert y.any()  # bias only, through ReLU: some channels positive
    assert np.allclose(y.reshape(-1, 16), y.reshape(-1, 16)[0])  # every pixel the same


@pytest.mark.parametrize("args, message", [
    (["--hw", "HW"], "unknown hardware parameter 'bogus'"),
    (["--input", "BADX"], "input has 3 elements"),
    (["--engine", "golden"], "--engine golden runs nn-level models"),
    (["--check"], "--check compares against the float model"),
])
def test_bad_invocations_are_one_line(tmp_path: Path, capsys, args, message) -> None:
    (tmp_path / "hw.json").write_text('{"bogus": 1}')
    np.save(tmp_path / "x.npy", np.zeros(3, np.float32))
    args = [a.replace("HW", str(tmp_path / "hw.json")).replace("BADX", str(tmp_path / "x.npy")) for a in args]
    assert snow_run([str(EXAMPLE), "--report", str(tmp_path / "r.json"), *args]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and "Traceback" not in "".join(err)
    assert not (tmp_path / "r.json").exists()


def test_missing_and_wrong_level_models(tmp_path: Path, capsys) -> None:
    for missing in ("nope.mlir", "nope.sfb", "nope.onnx"):  # the same words for each kind
        assert snow_run([str(tmp_path / missing)]) == 1
        assert capsys.readouterr().err == f"snow-run: {tmp_path / missing}: no such file\n"
        assert snow_opt([str(tmp_path / missing)]) == 1
        assert capsys.readouterr().err == f"snow-opt: {tmp_path / missing}: no such file\n"
    text = tmp_path / "x.txt"
    text.write_text("1 2 3\n")
    assert snow_run([str(EXAMPLE), "--input", str(text)]) == 1
    assert capsys.readouterr().err == f"snow-run: {text}: not an .npy file (numpy.save writes one)\n"
    nn = tmp_path / "nn.mlir"
    nn.write_text("func.func @f(%x: tensor<1x4xf32>) -> tensor<1x4xf32> {\n"
                  "  %y = nn.relu %x : (tensor<1x4xf32>) -> tensor<1x4xf32>\n  func.return %y : tensor<1x4xf32>\n}\n")
    # a lone ReLU (nothing to fuse it into) is host work after partition-host: no device layer
    rep0 = tmp_path / "r0.json"
    assert snow_run([str(nn), "--quiet", "--report", str(rep0)]) == 0
    r0 = json.loads(rep0.read_text())
    assert [(layer["op"], layer["where"]) for layer in r0["layers"]] == [("relu", "host")]
    assert r0["total"]["cycles"] == 0 and r0["layers"][0]["host_ms"] > 0
    # the golden engine runs it: an unquantised nn module is prepared (nn-prepare) first
    rep = tmp_path / "r.json"
    assert snow_run([str(nn), "--engine", "golden", "--check", "--quiet", "--report", str(rep)]) == 0
    check = json.loads(rep.read_text())["check"]
    assert check["reference"] == "golden-fp32" and check["snr_db"] > 40


def test_trace_layers_keeps_only_the_chosen_layers(tmp_path: Path, capsys) -> None:
    digits = Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx"
    full, some = tmp_path / "all.json", tmp_path / "conv.json"
    assert snow_run([str(digits), "--quiet", "--trace", str(full)]) == 0
    assert snow_run([str(digits), "--quiet", "--trace", str(some), "--trace-layers", "conv*,fc"]) == 0
    layers = lambda p: {e["name"] for e in json.loads(p.read_text())["traceEvents"]  # noqa: E731
                        if str(e.get("name", "")).startswith("layer ")}
    assert layers(full) == {"layer conv1", "layer pool1", "layer conv2", "layer pool2", "layer fc"}
    assert layers(some) == {"layer conv1", "layer conv2", "layer fc"}
    assert len(some.read_bytes()) < len(full.read_bytes())
    capsys.readouterr()
    assert snow_run([str(digits), "--quiet", "--trace-layers", "conv1"]) == 1
    assert "--trace" in capsys.readouterr().err


def test_sfb_records_the_configuration_it_was_built_for(tmp_path: Path, capsys) -> None:
    """A compiled layer's image records hw.CODE_FIELDS; a machine that differs in one of them is
    refused in one line, one that differs only in timing (clock, bandwidth) runs it."""
    from onnx import TensorProto, helper, numpy_helper

    import snowir
    from snowir.dialects import snowflake_asm as sf
    from snowir.hw import CODE_FIELDS, SnowflakeConfig
    from snowir.machine.image import ProgramImage, assemble

    w = (np.random.default_rng(0).standard_normal((16, 16, 3, 3)) * 0.1).astype(np.float32)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "c",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 12, 12])],
                          [numpy_helper.from_array(w, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    built = SnowflakeConfig(load_units=2)
    compiled = snowir.compile(model, hw=built)
    image_op = next(op for op in compiled.module.walk() if isinstance(op, sf.ImageOp))
    image = assemble(image_op)
    assert image.built_for == {k: getattr(built, k) for k in CODE_FIELDS}
    sfb = tmp_path / "layer.sfb"
    sfb.write_bytes(image.to_bytes())
    assert ProgramImage.from_bytes(sfb.read_bytes()).built_for == image.built_for
    assert snow_run([str(sfb), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "built for load_units 2 (this machine: 4)" in err and "Traceback" not in err
    faster = tmp_path / "hw.json"
    faster.write_text(json.dumps({"load_units": 2, "clock_mhz": 500.0, "dram_gbps": 8.4}))
    assert snow_run([str(sfb), "--quiet", "--hw", str(faster), "--report", str(tmp_path / "r.json")]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["hw"]["clock_mhz"] == 500.0


def test_trace_layers_that_match_nothing_are_refused(tmp_path: Path, capsys) -> None:
    digits = Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx"
    trace = tmp_path / "t.json"
    assert snow_run([str(digits), "--trace", str(trace), "--trace-layers", "convv*", "--quiet"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "matches no device layer" in err[0] and "conv1" in err[0]
    assert not trace.exists()


def test_model_report_records_its_provenance(tmp_path: Path) -> None:
    """The pipeline applied, the format, the calibration inputs' digest, version and model
    digest: two runs of one model under different pipelines tell themselves apart."""
    digits = Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx"
    cal = tmp_path / "cal.npy"
    np.save(cal, np.random.default_rng(1).standard_normal([2, 1, 1, 8, 8]).astype(np.float32))
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert snow_run([str(digits), "--quiet", "--engine", "golden", "--report", str(a)]) == 0
    assert snow_run([str(digits), "--quiet", "--format", "auto", "--calibration", str(cal), "--report", str(b)]) == 0
    pa, pb = (json.loads(p.read_text())["provenance"] for p in (a, b))
    assert pa["model_sha256"] == pb["model_sha256"] == hashlib.sha256(digits.read_bytes()).hexdigest()
    assert pa["pipeline"] == "nn-prepare" and pa["format"] == "Q8.8" and pa["calibration"] is None
    assert pa["engine"] == "golden" and pb["engine"] == "fast"
    assert pb["pipeline"].startswith("nn-prepare{") and "cal.npy" in pb["pipeline"]
    assert pb["pipeline"].endswith(",snowflake-lower") and pb["format"] == "auto"
    digest = hashlib.sha256(np.load(cal).astype(np.float32).tobytes()).hexdigest()[:16]
    assert pb["calibration"].startswith(f"sha256:{digest} (2 inputs of ")
    assert pa["snowir"] == pb["snowir"] == snowir.__version__


def test_not_a_model_and_golden_tables(tmp_path: Path, capsys) -> None:
    readme = Path(__file__).resolve().parent.parent / "README.md"
    assert snow_run([str(readme)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"snow-run: {readme}: not a model: give an ONNX file") and "{" not in err
    digits = Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx"
    assert snow_run([str(digits), "--engine", "golden"]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert rows["conv1"][2] == "device" and rows["conv1"][3] == "-"  # no simulated cycles to show, not "0"


def test_refused_before_running(tmp_path: Path, capsys) -> None:
    """What a run would only fail at its end is refused up front, in one line, nothing written:
    every missing output directory, --profile of a .sfb (no locations), --profile --engine fast."""
    sfb = tmp_path / "conv.sfb"
    assert snow_opt([str(EXAMPLE), "-t", "snowflake-bin", "-o", str(sfb)]) == 0
    nowhere, trace = tmp_path / "nowhere", tmp_path / "t.json"
    assert snow_run([str(EXAMPLE), "--output", str(nowhere / "y.npy"), "--report", str(nowhere / "r" / "r.json"),
                     "--trace", str(trace)]) == 1
    cap = capsys.readouterr()
    assert cap.err.count("\n") == 1 and f"--output {nowhere / 'y.npy'}, --report {nowhere / 'r' / 'r.json'}" in cap.err
    assert "nothing run" in cap.err and "conv3x3" not in cap.out and not trace.exists()
    assert snow_run([str(sfb), "--profile", "*"]) == 1
    cap = capsys.readouterr()
    assert cap.err.count("\n") == 1 and "a .sfb holds none" in cap.err and cap.out == ""
    assert snow_run([str(EXAMPLE), "--profile", "--engine", "fast"]) == 1
    cap = capsys.readouterr()
    assert cap.err.count("\n") == 1 and "drop --engine fast" in cap.err and cap.out == ""
    assert snow_run([str(EXAMPLE), "--quiet", "--profile"]) == 0  # without --engine: the reference engine
    assert "conv3x3" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conv.sfb"]


def test_the_table_says_why_each_host_layer_is_on_the_host(capsys) -> None:
    """The printed table ends with the host layers grouped by their host_reason (the JSON report
    has each row's): the digits CNN's input padding is the host's, written as it loads the input."""
    from pathlib import Path

    from snowir.tools.snow_run import main as snow_run

    digits = Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx"
    assert snow_run([str(digits)]) == 0
    out = capsys.readouterr().out
    assert "on the host, and why:\n  conv1.pad_rows: nn.pad_rows: the model input in the stem's layout" in out
