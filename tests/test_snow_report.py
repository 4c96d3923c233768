"""snow-report: one report's table, two reports' differences, a cycle-breakdown plot, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

from snowir.tools.snow_report import main as snow_report
from snowir.tools.snow_run import main as snow_run

DIGITS = Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx"


def test_table_diff_and_plot(tmp_path: Path, capsys) -> None:
    a, b, hw = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "hw.json"
    hw.write_text(json.dumps({"dram_gbps": 2.1, "unit_gbps": 1.0}))  # half the bus
    assert snow_run([str(DIGITS), "--quiet", "--report", str(a)]) == 0
    assert snow_run([str(DIGITS), "--quiet", "--hw", str(hw), "--report", str(b)]) == 0
    capsys.readouterr()
    assert snow_report([str(a)]) == 0
    table = capsys.readouterr().out
    assert "conv1" in table and "total" in table and "stall cycles by cause" in table
    png = tmp_path / "p.png"
    assert snow_report([str(a), str(b), "--plot", str(png)]) == 0
    diff = capsys.readouterr().out.splitlines()
    ra, rb = json.loads(a.read_text()), json.loads(b.read_text())
    total = next(line for line in diff if line.startswith("total"))
    assert f"{ra['total']['cycles']:,}" in total and f"{rb['total']['cycles']:,}" in total
    assert rb["total"]["cycles"] > ra["total"]["cycles"] and "+" in total  # half the bus: slower
    assert any("cu_load_wait +" in line for line in diff)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_layers_in_one_report_only(tmp_path: Path, capsys) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert snow_run([str(DIGITS), "--quiet", "--report", str(a)]) == 0
    r = json.loads(a.read_text())
    r["layers"] = [layer for layer in r["layers"] if layer["name"] != "pool2"]
    b.write_text(json.dumps(r))
    capsys.readouterr()
    assert snow_report([str(a), str(b)]) == 0
    assert any(line.startswith("pool2") and "only in A" in line for line in capsys.readouterr().out.splitlines())


def test_errors_are_one_line(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.json"
    for content, why in (("{", "not JSON"), ("{}", "not a snow-run report"),
                         ('{"model": "m", "total": {}, "layers": [{"name": "x"}]}', "layer 0 lacks")):
        bad.write_text(content)
        assert snow_report([str(bad)]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and why in err[0] and str(bad) in err[0]
    assert snow_report([str(tmp_path / "missing.json")]) == 1
    assert "cannot read" in capsys.readouterr().err
    out = tmp_path / "nodir" / "p.png"
    good = tmp_path / "g.json"
    assert snow_run([str(DIGITS), "--quiet", "--report", str(good)]) == 0
    assert snow_report([str(good), "--plot", str(out)]) == 1 and not out.exists()


def test_snow_run_plot_and_compact_traces(tmp_path: Path, monkeypatch) -> None:
    import gzip

    from snowir.tools import snow_report as sr

    panels: list[int] = []
    real = sr.plot_report
    monkeypatch.setattr(sr, "plot_report", lambda report, path, loop=None: (panels.append(len(loop or {})),
                                                                             real(report, path, loop)))
    png, trace = tmp_path / "p.png", tmp_path / "t.json.gz"
    assert snow_run([str(DIGITS), "--quiet", "--plot", str(png), "--trace", str(trace)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG" and panels == [3]  # conv1, conv2, fc: Mloop/Kloop estimates
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    merged = [e for e in spans if e.get("args", {}).get("count", 1) > 1]
    # a merged span names what it holds: "MAC wb x40 + VMOV bypass x40", the counts adding up
    assert merged and all(sum(int(part.rsplit(" x", 1)[1]) for part in e["name"].split(" + ")) == e["args"]["count"]
                          for e in merged)
    # one CU track (lock step); merged spans keep its time line: no two overlap
    names = {e["args"]["name"]: e["tid"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    cus = sorted((e["ts"], e["ts"] + e["dur"]) for e in spans if e["tid"] == names["CUs (lock step)"])
    assert cus and all(a[1] <= b[0] + 1e-3 for a, b in zip(cus, cus[1:]))
