"""The bound of a layer on its machine (snowir/driver/bound.py, issue 38 item 4): right on a
hand-computed conv, the compute part the same count as Table 1's padding-free bound, what the
compiler chose (partial sums, a fused pool) not counted as compulsory, and never above what the
machine measured on a few small models and machines."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import helper

from onnx_util import model, rand, three_layer_net
from snowir.driver import bound
from snowir.driver.model_api import run_model_on_device
from snowir.hw import SnowflakeConfig
from snowir.plan.shapes import ConvShape

n = helper.make_node


def _conv(tmp_path: Path, c: int, hw_: int, k: int, pool: bool = False, name: str = "conv.onnx") -> Path:
    """One 3x3 pad-1 conv + ReLU (+ a 3x3/2 max pool, which its program computes: the
    AlexNet-like pair of tests/test_fused_pool.py) on a c x hw_ x hw_ input."""
    nodes = [n("Conv", ["x", "w", "b"], ["y"], name="c", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             n("Relu", ["y"], ["r" if pool else "o"])]
    if pool:
        nodes.append(n("MaxPool", ["r"], ["o"], name="p", kernel_shape=[3, 3], strides=[2, 2]))
    path = tmp_path / name
    onnx.save(model(nodes, {"x": [1, c, hw_, hw_]}, {"o": None},
                    {"w": rand(k, c, 3, 3, seed=1, scale=0.05), "b": rand(k, seed=2, scale=0.1)}), path)
    return path


def test_bound_of_a_hand_computed_conv(tmp_path: Path) -> None:
    """16 -> 32 channels, 3x3 pad 1, 8x8, on the ZC706 build (256 MACs, 16.8 B/cycle bus,
    4 ports of 8 B/cycle): each axis has 8 * 3 - 2 = 22 taps inside the input, so 22 * 22 * 16
    * 32 = 247,808 MACs, 968 cycles; weights 32 * 16 * 9 + 32 bias, input 16 * 64, output
    32 * 64 values: 7,712 values, 15,424 bytes, 918.1 cycles on the bus. Compute binds."""
    hw = SnowflakeConfig()
    report = run_model_on_device(_conv(tmp_path, 16, 8, 32), hw=hw).report
    [row] = [r for r in report["layers"] if r["op"] == "conv2d"]
    assert row["macs"] == 247_808
    # the compute part is Table 1's padding-free bound (bench/table1.py), the same count
    table1 = ConvShape(16, 8, 8, 32, 3, 3, 1, 1, 1, 1, 1, 1, True, 8).valid_macs() / hw.macs
    assert table1 == 968
    assert row["bound_compute_ms"] == pytest.approx(hw.cycles_to_ms(968))
    assert row["compulsory_bytes"] == 15_424
    assert row["bound_bus_ms"] == pytest.approx(hw.cycles_to_ms(15_424 / 16.8))
    assert row["bound_ms"] == pytest.approx(hw.cycles_to_ms(968)) and row["bound_by"] == "compute"
    assert row["bound_share"] == pytest.approx(968 / row["cycles"])
    # a slow bus makes the same layer bus-bound; slow ports, port-bound (reads 11,328 bytes)
    slow = bound.layer_bound(247_808, bound.Traffic(9_280, 2_048, 4_096), SnowflakeConfig(dram_gbps=1.0, unit_gbps=1.0))
    assert slow["by"] == "bus" and slow["cycles"] == pytest.approx(15_424 / 4.0)
    ports = bound.layer_bound(247_808, bound.Traffic(9_280, 2_048, 4_096),
                              SnowflakeConfig(load_units=1, unit_gbps=0.5))
    assert ports["by"] == "ports" and ports["cycles"] == pytest.approx(11_328 / 2.0)
    total = report["total"]
    assert total["bound_ms"] == pytest.approx(sum(r["bound_ms"] for r in report["layers"] if r["bound_ms"]))
    assert total["bound_share"] == pytest.approx(total["bound_ms"] / total["ms"])


def test_what_the_compiler_chose_is_not_compulsory(tmp_path: Path) -> None:
    """A 3x3 conv over 512 channels is split into channel parts (its kernels exceed the weights
    buffer) whose partial sums go through DRAM: the parts together must move what the conv
    does, once. A conv whose program computes its max pool writes the pool's output."""
    report = run_model_on_device(_conv(tmp_path, 512, 4, 16), hw=SnowflakeConfig()).report
    parts = [r for r in report["layers"] if r["op"] == "conv2d"]
    assert len(parts) > 1
    values = 16 * 512 * 9 + 16 + 512 * 16 + 16 * 16  # weights, bias, input, output
    assert sum(r["compulsory_bytes"] for r in parts) == 2 * values
    fused = run_model_on_device(_conv(tmp_path, 64, 24, 64, pool=True), hw=SnowflakeConfig()).report
    conv, pool = (next(r for r in fused["layers"] if r["op"] == op) for op in ("conv2d", "max_pool"))
    assert conv.get("computes") == pool["name"] and pool["cycles"] == 0 and pool["bound_ms"] is None
    # the pool's output, 64 x 11 x 11, is what leaves the chip, not the conv's 64 x 24 x 24
    assert conv["compulsory_bytes"] == 2 * (64 * 64 * 9 + 64 + 64 * 576 + 64 * 121)


@pytest.mark.parametrize("fields", [{}, {"cus": 1}, {"cus": 16, "dram_gbps": 8.4},
                                    {"dram_gbps": 1.0, "unit_gbps": 0.25}, {"load_units": 1}])
def test_bound_is_never_above_the_measured_time(tmp_path: Path, fields: dict) -> None:
    """The model's bound never exceeds its device time; a layer's never exceeds its own cycles
    when it runs as its own program. In a whole-model program a layer's row is the window
    between two markers, and its first loads may cross the bus in the window before (the
    stream runs ahead): a max pool behind a conv on a slow bus saw 41,914 of its 46,080
    compulsory bytes in its own window (share 1.09, 0.92 as its own program), so per layer
    only the one-program-per-layer lowering is held to 1."""
    hw = SnowflakeConfig(**fields)
    hw_path = tmp_path / "hw.json"
    hw.save(hw_path)
    for path in (three_layer_net(tmp_path), _conv(tmp_path, 512, 4, 16, name="split.onnx"),
                 _conv(tmp_path, 64, 24, 64, pool=True, name="pool.onnx")):
        for pipeline in (None, f"snowflake-lower{{whole-model=false hw={hw_path}}}"):
            report = run_model_on_device(path, hw=hw, pipeline=pipeline).report
            timed = [r for r in report["layers"] if r["cycles"]]
            assert timed and all(r["bound_ms"] is not None for r in timed)
            assert 0 < report["total"]["bound_share"] <= 1, f"{path.name} on {fields}"
            assert report["total"]["bound_by"] in bound.RESOURCES
            if pipeline is not None:
                over = [(r["name"], r["bound_share"]) for r in timed if r["bound_share"] > 1]
                assert over == [], f"{path.name} on {fields}: bound above the measured cycles"


def test_snow_run_and_snow_report_print_the_bound(tmp_path: Path, capsys) -> None:
    from snowir.tools.snow_report import main as snow_report
    from snowir.tools.snow_run import main as snow_run

    report = tmp_path / "r.json"
    assert snow_run([str(_conv(tmp_path, 16, 8, 32)), "--report", str(report)]) == 0
    printed = capsys.readouterr().out
    data = __import__("json").loads(report.read_text())
    row = next(r for r in data["layers"] if r["op"] == "conv2d")
    assert "bound ms" in printed and "bound%" in printed
    line = next(x for x in printed.splitlines() if x.startswith("c "))
    assert f"{row['bound_ms']:.4f} {100 * row['bound_share']:>6.1f} compute" in line
    assert f"= {100 * data['total']['bound_share']:.1f}% of the device time; mostly compute-bound" in printed
    assert snow_report([str(report)]) == 0  # a saved report reprints the same table
    assert capsys.readouterr().out.splitlines()[:4] == [x for x in printed.splitlines() if x][:4]


def test_a_strided_1x1_conv_reads_only_the_pixels_its_windows_touch(tmp_path: Path) -> None:
    """ResNet's downsample: a 1x1 stride-2 conv, 64 -> 128 channels, 16x16 -> 8x8, reads 64 x
    8 x 8 of its 64 x 16 x 16 input; counting the whole input put ResNet-50's three such convs
    at up to 130% of their bound on 16 CUs at 4.2 GB/s (a bound above the measured time)."""
    path = tmp_path / "down.onnx"
    onnx.save(model([n("Conv", ["x", "w", "b"], ["o"], name="d", kernel_shape=[1, 1], strides=[2, 2])],
                    {"x": [1, 64, 16, 16]}, {"o": None},
                    {"w": rand(128, 64, 1, 1, seed=1, scale=0.05), "b": rand(128, seed=2, scale=0.1)}), path)
    hw = SnowflakeConfig(cus=16, dram_gbps=4.2)
    hw_path = tmp_path / "hw.json"
    hw.save(hw_path)
    report = run_model_on_device(path, hw=hw, pipeline=f"snowflake-lower{{whole-model=false hw={hw_path}}}").report
    [row] = [r for r in report["layers"] if r["op"] == "conv2d"]
    assert row["compulsory_bytes"] == 2 * (128 * 64 + 128 + 64 * 8 * 8 + 128 * 8 * 8)
    assert row["bound_share"] <= 1


def test_overlap_bound_lies_below_the_summed_bound() -> None:
    """Two layers, one compute-bound (1.0 ms of MACs, 0.25 ms of traffic) and one bus-bound
    (0.2 ms of MACs, 0.8 ms of traffic): one after the other at least 1.8 ms; overlapped, at
    least max(1.2, 1.05) = 1.2 ms, the MACs. Ports are left out (a lower bound either way)."""
    hw = SnowflakeConfig()
    per_ms = hw.dram_bytes_per_cycle * hw.clock_mhz * 1e3  # bytes the bus moves in a millisecond
    rows = [{"bound_ms": 1.0, "bound_compute_ms": 1.0, "bound_bus_ms": 0.25, "compulsory_bytes": int(0.25 * per_ms),
             "bound_by": "compute"},
            {"bound_ms": 0.8, "bound_compute_ms": 0.2, "bound_bus_ms": 0.8, "compulsory_bytes": int(0.8 * per_ms),
             "bound_by": "bus"},
            {"bound_ms": None}]  # a host layer
    total = bound.total_fields(rows, 2.0, hw)
    assert total["bound_ms"] == pytest.approx(1.8)
    assert total["overlap_bound_ms"] == pytest.approx(1.2)
    rows[1]["compulsory_bytes"] = int(1.5 * per_ms)  # now the traffic binds: 1.75 ms of it
    assert bound.overlap_bound_ms(rows, hw) == pytest.approx(1.75, rel=1e-6)
    assert bound.total_fields([{"bound_ms": None}], 1.0, hw)["overlap_bound_ms"] is None
