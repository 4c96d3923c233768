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


# ---------------------------------------------------------------- synthetic reports (issue 29)

def _report(pipeline: str = "snowflake-lower", dram_gbps: float = 4.2, layers: int = 6, slower: float = 1.0,
            provenance: bool = True) -> dict:
    """A snow-run report of `layers` device convs, made up: no model runs."""
    from snowir.hw import SnowflakeConfig

    out = []
    for i in range(layers):
        cycles = int((20_000 + 7_919 * (i * 37 % layers)) * slower)
        stalls = {"cu_load_wait": cycles // (3 + i % 4), "cu_starved": cycles // 20}
        macs, dram = 1_000_000 + 50_000 * i, 40_000 + 9_000 * (i * 13 % layers)
        out.append({"name": f"block{i}.conv", "op": "conv2d", "where": "device", "cycles": cycles,
                    "ms": cycles / 250e3, "macs": macs, "lane_macs": macs, "mac_utilization": macs / (cycles * 256),
                    "dram_bytes": dram, "gbps": dram / (cycles / 250e3 * 1e6), "stall_cycles": stalls,
                    "mode": "INDP" if i % 3 == 0 else "COOP", "loop_order": "Kloop", "format": "Q8.8"})
    cycles = sum(layer["cycles"] for layer in out)
    report = {"model": "net.onnx", "hw": {**SnowflakeConfig().to_json(), "dram_gbps": dram_gbps},
              "total": {"cycles": cycles, "ms": cycles / 250e3, "mac_utilization": 0.5, "gbps": 1.0,
                        "dram_bytes": 1, "stall_cycles": {}}, "layers": out}
    if provenance:
        report["provenance"] = {"snowir": "0.1.0", "model": "net.onnx", "model_sha256": "ab" * 32,
                                "pipeline": pipeline, "format": "Q8.8", "calibration": None, "engine": "fast"}
    return report


def _write(tmp_path: Path, name: str, report: dict) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(report))
    return str(path)


def test_diff_names_what_differs_in_provenance_and_hw_first(tmp_path: Path, capsys) -> None:
    a = _write(tmp_path, "a.json", _report())
    b = _write(tmp_path, "b.json", _report("nn-prepare{format=Q4.12},snowflake-lower", dram_gbps=2.1))
    assert snow_report([a, b]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == ["pipeline: snowflake-lower -> nn-prepare{format=Q4.12},snowflake-lower",
                         "hw.dram_gbps: 4.2 -> 2.1", ""]
    assert lines[3].startswith("B = net.onnx")  # then the per-layer diff, as before
    same = _write(tmp_path, "same.json", _report())
    assert snow_report([a, same]) == 0
    assert capsys.readouterr().out.splitlines()[:2] == ["same provenance", "same hw"]
    bare = _write(tmp_path, "bare.json", _report(provenance=False))
    calibrated = _report()
    calibrated["provenance"]["calibration"] = "sha256:" + "0123456789" * 7
    assert snow_report([bare, _write(tmp_path, "cal.json", calibrated)]) == 0
    assert capsys.readouterr().out.splitlines()[:2] == ["A has no provenance", "same hw"]
    assert snow_report([a, _write(tmp_path, "cal.json", calibrated)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "calibration: none -> sha256:012345678901…"


def test_a_repeated_layer_name_is_matched_not_hidden(tmp_path: Path, capsys) -> None:
    # a dense layer and its reshape share a name in reports of real models (ResNet's fc)
    ra, rb = _report(), _report(slower=1.5)
    for r in (ra, rb):
        r["layers"].append({**r["layers"][0], "name": "block0.conv", "op": "reshape", "cycles": 0, "ms": 0.0})
    assert snow_report([_write(tmp_path, "a.json", ra), _write(tmp_path, "b.json", rb)]) == 0
    first = [line for line in capsys.readouterr().out.splitlines() if line.startswith("block0.conv ")]
    assert len(first) == 1 and "+50.0%" in first[0]


def test_two_run_plot_draws_both_runs_labelled_by_what_differs(tmp_path: Path) -> None:
    from snowir.tools.snow_report import compare_figure, run_labels

    pa = "nn-prepare{format=Q8.8,fold-bn=true,fuse-pool=true},snowflake-lower"
    pb = "nn-prepare{format=Q8.8,fold-bn=true,fuse-pool=false},snowflake-lower"
    a, b = _report(pa, layers=55), _report(pb, layers=55, slower=1.25)
    b["layers"].insert(3, {**b["layers"][3], "name": "block3.conv.part1"})  # a layer B split in two
    labels = run_labels(a, b)
    # cut to where they differ
    assert labels == ("A: pipeline=…se-pool=true},snowf…", "B: pipeline=…se-pool=false},snowf…")
    fig = compare_figure(a, b, labels)
    assert labels[0] in fig._suptitle.get_text() and labels[1] in fig._suptitle.get_text()
    names = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert names[3:5] == ["block3.conv.part1", "block3.conv"]  # B's own layer beside its neighbour
    heights: dict[float, float] = {}
    for bar in fig.axes[0].patches:  # stacked bars: A's centred 0.2 left of the layer, B's 0.2 right
        x = round(bar.get_x() + bar.get_width() / 2, 3)
        heights[x] = heights.get(x, 0) + bar.get_height()
    cycles = {n: layer["cycles"] for n, layer in ((x["name"], x) for x in a["layers"])}
    for i, n in enumerate(names):
        assert heights[round(i - 0.2, 3)] == cycles.get(n, 0)
        assert heights[round(i + 0.2, 3)] == next(x["cycles"] for x in b["layers"] if x["name"] == n)
    import matplotlib.pyplot as plt

    plt.close(fig)
    png = tmp_path / "ab.png"
    assert snow_report([_write(tmp_path, "a.json", a), _write(tmp_path, "b.json", b), "--plot", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"


def _overlaps(texts, renderer) -> list[tuple[str, str]]:
    from matplotlib.text import Text

    boxes = [(t.get_text(), Text.get_window_extent(t, renderer)) for t in texts]
    return [(p, q) for i, (p, a) in enumerate(boxes) for q, b in boxes[i + 1:] if a.overlaps(b)]


def test_roofline_labels_the_layers_losing_most_time_without_overlap() -> None:
    import matplotlib.pyplot as plt

    from snowir.tools.snow_report import ROOFLINE_LABELS, report_figure

    report = _report(layers=60)
    fig = report_figure(report)
    ax = fig.axes[1]
    hw = report["hw"]
    peak = hw["cus"] * hw["vmacs_per_cu"] * hw["macs_per_vmac"] * hw["clock_mhz"] * 1e6

    def lost(layer: dict) -> float:
        x, y = layer["macs"] / layer["dram_bytes"], layer["macs"] / (layer["ms"] * 1e-3)
        return layer["ms"] * (1 - y / min(peak, hw["dram_gbps"] * 1e9 * x))

    want = sorted(report["layers"], key=lost, reverse=True)[:ROOFLINE_LABELS]
    labelled = {t.get_text() for t in ax.texts}
    assert labelled and labelled <= {layer["name"] for layer in want}
    assert len(labelled) >= ROOFLINE_LABELS // 2  # most of them find a place
    assert _overlaps(ax.texts, fig.canvas.get_renderer()) == []
    plt.close(fig)


def test_loop_order_panel_says_what_measured_counts() -> None:
    import matplotlib.pyplot as plt

    from snowir.tools.snow_report import report_figure

    report = _report(layers=3)
    fig = report_figure(report, {layer["name"]: (30_000, 20_000) for layer in report["layers"]})
    ax = fig.axes[2]
    title = " ".join(ax.get_title().split())
    assert "write-backs" in title and "residual" in title and "icache" in title
    assert "measured, all bus bytes (chosen order)" in [t.get_text() for t in ax.get_legend().get_texts()]
    plt.close(fig)
