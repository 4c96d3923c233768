"""snow-dse's resource proxy and Pareto plot (issue 29): every swept resource has a price, the
README's first sweep spreads over the x axis, labels do not overlap. No model runs but one
two-configuration sweep of the digits CNN."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from matplotlib.text import Text

from snowir.driver import dse
from snowir.hw import DEFAULT, RANGES, SnowflakeConfig
from snowir.tools.snow_dse import main as snow_dse

DIGITS = Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx"
README_SWEEP = ["dram_gbps=2.1,4.2,8.4", "load_units=1,2,4,8"]


def _other(field: str):
    """A valid value of `field` other than the default (unit_gbps stays within dram_gbps)."""
    lo, hi, _ = RANGES[field]
    value = getattr(DEFAULT, field)
    if field == "unit_gbps":
        return DEFAULT.dram_gbps
    return type(value)(hi if value != hi else lo)


@pytest.mark.parametrize("field", [f for f, (lo, hi, _) in RANGES.items() if lo != hi])
def test_every_sweepable_field_is_priced_or_says_why_not(field: str) -> None:
    changed = dataclasses.replace(DEFAULT, **{field: _other(field)})
    if field in dse.UNPRICED:
        assert dse.resource_proxy(changed) == dse.resource_proxy(DEFAULT)
    else:  # more of a resource costs more, less costs less
        more = getattr(changed, field) > getattr(DEFAULT, field)
        assert (dse.resource_proxy(changed) > dse.resource_proxy(DEFAULT)) == more, field


def test_load_units_and_bandwidth_move_the_proxy() -> None:
    base = dse.resource_proxy(DEFAULT)
    assert dse.resource_proxy(SnowflakeConfig(load_units=8)) - base == pytest.approx(
        4 * (dse.PRICES["load_unit"] + dse.PRICES["port_gbps"] * DEFAULT.unit_gbps))
    assert dse.resource_proxy(SnowflakeConfig(dram_gbps=8.4)) - base == pytest.approx(4.2 * dse.PRICES["dram_gbps"])
    assert sum(dse.resource_breakdown(DEFAULT).values()) == pytest.approx(base, abs=1e-3)


def test_readme_first_sweep_spreads_over_the_x_axis() -> None:
    hws = dse.configs(DEFAULT, [dse.parse_sweep(s) for s in README_SWEEP])
    assert len({dse.resource_proxy(hw) for hw in hws}) == len(hws) == 12


def _rows(ms) -> list[dict]:
    hws = dse.configs(DEFAULT, [dse.parse_sweep(s) for s in README_SWEEP])
    return [{"dram_gbps": hw.dram_gbps, "load_units": hw.load_units, "resource_proxy": dse.resource_proxy(hw),
             "ms": ms(hw)} for hw in hws]


@pytest.mark.parametrize("ms", [
    lambda hw: 0.0116 + 0.004 / hw.dram_gbps + 0.002 / hw.load_units,  # a front and dominated points
    lambda hw: 0.0116 + 1e-6 * hw.load_units,  # crowded: nearly one level
], ids=["front", "crowded"])
def test_pareto_labels_do_not_overlap(ms) -> None:
    rows = _rows(ms)
    fig = dse.pareto_figure(rows, ["dram_gbps", "load_units"], "digits_cnn.onnx")
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    boxes = {t.get_text(): Text.get_window_extent(t, renderer) for t in ax.texts}
    names = list(boxes)
    assert [(p, q) for i, p in enumerate(names) for q in names[i + 1:] if boxes[p].overlaps(boxes[q])] == []
    frame, legend = ax.get_window_extent(renderer), ax.get_legend().get_window_extent(renderer)
    assert all(frame.contains(b.x0, b.y0) and frame.contains(b.x1, b.y1) and not b.overlaps(legend)
               for b in boxes.values())
    front = [f"dram_gbps={r['dram_gbps']}, load_units={r['load_units']}" for r, f in zip(rows, dse.pareto(rows)) if f]
    assert set(front) <= set(names)  # the front is labelled first: every one of its points
    fig.canvas.draw()  # the legend stays where the labels were placed around it
    assert ax.get_legend().get_window_extent(renderer).extents.tolist() == legend.extents.tolist()
    plt.close(fig)


def test_cached_rows_are_priced_afresh(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"not read: the row is cached")
    hw = SnowflakeConfig(load_units=2)
    key = dse.cache_key(dse.model_hash(model), hw, None, "Q8.8")
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / f"{key}.json").write_text(json.dumps({"ms": 1.0, "resource_proxy": 12345.0}))
    [row] = dse.Explorer(str(model), tmp_path, workers=1).run([hw])
    assert row["cached"] and row["resource_proxy"] == dse.resource_proxy(hw)


def test_snow_dse_says_when_the_proxy_cannot_see_a_swept_field(tmp_path: Path, capsys) -> None:
    assert snow_dse([str(DIGITS), "--sweep", "ld_startup_cycles=16,64", "--out", str(tmp_path), "--workers", "1"]) == 0
    err = capsys.readouterr().err
    assert "does not price ld_startup_cycles (a latency)" in err
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert len({r["resource_proxy"] for r in rows}) == 1


def test_a_row_keeps_the_capacity_and_names_the_traffic_apart() -> None:
    """The row's `dram_bytes` is the config field (the DRAM's capacity); the traffic was written
    over it under the same name (issue 40), so the CSV had one `dram_bytes` column meaning traffic."""
    hw = SnowflakeConfig(dram_bytes=64 << 20)
    total = {"cycles": 1000, "ms": 0.004, "gbps": 1.0, "mac_utilization": 0.5, "dram_bytes": 4000, "host_ms": 0.0,
             "compile_s": 0.1, "simulate_s": 0.2, "stall_cycles": {}}
    row = dse.summarise({"total": total, "layers": []}, hw)
    assert row["dram_bytes"] == 64 << 20 and row["dram_traffic_bytes"] == 4000
    header = dse.csv_text([row]).splitlines()[0].split(",")
    assert header.count("dram_bytes") == 1 and header.count("dram_traffic_bytes") == 1
