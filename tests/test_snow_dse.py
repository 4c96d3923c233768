"""snow-dse: sweep rows equal single snow-run --hw runs, in this process and on Ray; the cache;
refused configurations; and every tunable hardware field the code generator honours bit-exact."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from onnx_util import model, rand, three_layer_net
from snowir.hw import SnowflakeConfig
from snowir.driver.model_api import run_model_on_device
from snowir.tools.snow_dse import main as snow_dse
from snowir.tools.snow_run import main as snow_run

SWEEP = ["--sweep", "dram_gbps=4.2,8.4", "--sweep", "load_units=2,8"]


def _rows(out: Path) -> list[dict]:
    return json.loads((out / "results.json").read_text())["rows"]


def _key(row: dict) -> tuple:
    return row["dram_gbps"], row["load_units"]


def test_rows_equal_snow_run_and_ray_equals_one_worker(tmp_path: Path, capsys) -> None:
    net = three_layer_net(tmp_path)
    one, many = tmp_path / "one", tmp_path / "ray"
    assert snow_dse([str(net), *SWEEP, "--out", str(one), "--workers", "1"]) == 0
    rows = _rows(one)
    assert len(rows) == 4 and all(not r["cached"] for r in rows)
    csv = (one / "results.csv").read_text().splitlines()
    assert len(csv) == 5 and csv[0].startswith("cus,") and "stall_cu_load_wait" in csv[0]
    header = csv[0].split(",")  # capacity and traffic, each its own column
    assert header.count("dram_bytes") == 1 and "dram_traffic_bytes" in header
    assert {"bound_ms", "bound_share", "bound_by", "conv_bound_ms", "conv_bound_share",
            "conv_overlap_bound_ms"} <= set(header)
    assert (one / "pareto.png").read_bytes()[:4] == b"\x89PNG" and any(r["pareto"] for r in rows)
    for row in rows:  # every row is the snow-run --hw of its configuration
        hw = SnowflakeConfig(dram_gbps=row["dram_gbps"], load_units=row["load_units"])
        hw_path = tmp_path / "hw.json"
        hw.save(hw_path)
        report = tmp_path / "r.json"
        assert snow_run([str(net), "--hw", str(hw_path), "--quiet", "--report", str(report)]) == 0
        total = json.loads(report.read_text())["total"]
        assert (row["cycles"], row["dram_traffic_bytes"], row["ms"]) == (total["cycles"], total["dram_bytes"], total["ms"])
        assert row["dram_bytes"] == SnowflakeConfig().dram_bytes  # the config field, capacity: not overwritten
        assert row["stall_cu_load_wait"] == total["stall_cycles"]["cu_load_wait"]
        # the bound on that machine and the share reached, as snow-run reports them
        assert (row["bound_ms"], row["bound_share"], row["bound_by"]) == (
            total["bound_ms"], total["bound_share"], total["bound_by"])
        assert 0 < row["conv_bound_share"] <= 1 and row["conv_bound_ms"] <= row["conv_ms"]
        # overlapping the layers can only lower the bound; the conv layers are the whole device time here
        assert 0 < row["conv_overlap_bound_ms"] <= row["conv_bound_ms"]
        assert row["conv_overlap_bound_ms"] == pytest.approx(total["overlap_bound_ms"])
    assert len({r["cycles"] for r in rows}) > 1  # the swept fields matter
    # the same sweep on a local Ray runtime: the same rows
    assert snow_dse([str(net), *SWEEP, "--out", str(many), "--workers", "2", "--quiet"]) == 0
    strip = lambda r: {k: v for k, v in r.items() if k not in ("cached", "compile_s", "simulate_s")}
    assert sorted(map(strip, _rows(many)), key=_key) == sorted(map(strip, rows), key=_key)
    # a re-run computes nothing; a wider sweep only the new configurations
    assert snow_dse([str(net), *SWEEP, "--out", str(one), "--workers", "1", "--quiet"]) == 0
    assert all(r["cached"] for r in _rows(one))
    assert snow_dse([str(net), "--sweep", "dram_gbps=4.2,8.4", "--sweep", "load_units=2,4,8", "--out", str(one),
                     "--workers", "1", "--quiet"]) == 0
    assert sum(not r["cached"] for r in _rows(one)) == 2


@pytest.mark.parametrize("sweep, message", [
    ("cus=2,17", "config cus=17: parameter 'cus' = 17 must be in [1, 16]"),
    ("load_units=4,9", "config load_units=9: parameter 'load_units' = 9 must be in [1, 8]"),
    ("clock=250", "unknown hardware parameter 'clock'"),
    ("dram_gbps=fast", "'fast' is not a float"),
])
def test_invalid_configurations_are_one_line(tmp_path: Path, capsys, sweep: str, message: str) -> None:
    out = tmp_path / "out"
    assert snow_dse([str(three_layer_net(tmp_path)), "--sweep", sweep, "--out", str(out), "--workers", "1"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
    assert not (out / "results.json").exists()


@pytest.mark.parametrize("fields", [
    {"load_units": 1}, {"load_units": 3}, {"load_units": 8}, {"dram_gbps": 8.4, "unit_gbps": 4.2},
    {"weights_buffer_bytes": 4096}, {"weights_buffer_bytes": 16384}, {"maps_bank_bytes": 16384},
    {"maps_banks": 4}, {"clock_mhz": 500.0}, {"icache_bank_instructions": 1024}, {"ld_startup_cycles": 100},
    {"cus": 1}, {"cus": 2}, {"cus": 8}, {"cus": 16}, {"vmacs_per_cu": 2}, {"cus": 16, "vmacs_per_cu": 1},
])
def test_every_targetable_config_is_bit_exact(tmp_path: Path, fields: dict) -> None:
    report = run_model_on_device(three_layer_net(tmp_path), hw=SnowflakeConfig(**fields), check=True).report
    assert report["check"]["golden_bit_exact"] is True
    assert report["hw"] == SnowflakeConfig(**fields).to_json() and report["total"]["cycles"] > 0


def test_cache_key_follows_the_compiler(monkeypatch) -> None:
    """A cached row belongs to the compiler that computed it: another compiler's sources give
    another key, so an upgraded planner recomputes the sweep instead of serving stale rows."""
    from snowir.driver import dse

    hw = SnowflakeConfig()
    key = dse.cache_key("m", hw, None, "Q8.8")
    assert key == dse.cache_key("m", hw, None, "Q8.8")
    monkeypatch.setattr(dse, "compiler_fingerprint", lambda: "another compiler")
    assert dse.cache_key("m", hw, None, "Q8.8") != key


def test_help_lists_the_sweepable_fields(capsys) -> None:
    from snowir.hw import RANGES
    from snowir.tools.snow_dse import main

    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "sweepable fields" in out and all(name in out for name in RANGES)


def test_the_front_ranks_by_end_to_end_time_where_layers_run_on_the_host(tmp_path: Path, capsys) -> None:
    """Issue 37: the write-back activation unit takes a LeakyReLU off the host. By device ms the
    machine without it dominates (cheaper, no slower); end to end (the default, since that
    machine runs a host layer) the unit's machine is on the front too. An unknown objective is
    one line, before anything runs."""
    from act_nets import act_net

    net = tmp_path / "leaky.onnx"
    onnx.save(act_net(("leaky_relu",), size=8), net)
    sweep = ["--sweep", "writeback_activation=0,1", "--workers", "1", "--quiet"]
    fronts = {}
    for objective in (None, "end-to-end", "device"):
        out = tmp_path / str(objective)
        assert snow_dse([str(net), *sweep, "--out", str(out)] + (["--objective", objective] if objective else [])) == 0
        data = json.loads((out / "results.json").read_text())
        fronts[objective] = (data["objective"], sorted(r["writeback_activation"] for r in data["rows"] if r["pareto"]))
    assert fronts["device"] == ("ms", [0])
    assert fronts["end-to-end"] == fronts[None] == ("end_to_end_ms", [0, 1])
    out = tmp_path / "bad"
    assert snow_dse([str(net), *sweep, "--out", str(out), "--objective", "latency"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--objective 'latency': not one of end-to-end, device" in err
    assert not out.exists()


def test_a_failed_sweep_leaves_no_directory_behind(tmp_path: Path, capsys) -> None:
    """A model the import refuses: one line, exit 1, and neither --out nor its cache is created."""
    from onnx import helper

    bad = tmp_path / "bad.onnx"
    onnx.save(model([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[5, 5], name="badconv")],
                    {"x": [1, 3, 8, 8]}, {"y": [1, 16, 6, 6]}, {"w": rand(16, 3, 3, 3)}), bad)
    out = tmp_path / "dse"
    assert snow_dse([str(bad), "--sweep", "cus=1,2", "--out", str(out), "--workers", "1", "--quiet"]) == 1
    assert "kernel_shape [5, 5] disagrees" in capsys.readouterr().err
    assert not out.exists()
