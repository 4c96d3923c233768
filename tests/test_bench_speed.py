"""Seconds that mean something on another machine (issue 40): every bench that times something
measures the machine in the same run (bench/_output.machine_speed: a fixed Python loop and a
fixed numpy kernel), prints it with its table and writes it into its JSON."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))
import _output  # noqa: E402

OWNED_ELSEWHERE = {"ablation.py"}  # bench/ablation.py: another change owns it


def test_machine_speed_measures_a_loop_and_a_numpy_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_output, "SPEED_LOOP", 20_000)  # the figure's shape, not its cost
    monkeypatch.setattr(_output, "SPEED_MATMUL", 16)
    speed = _output.machine_speed()
    assert speed["python_loop_iterations"] == 20_000
    assert speed["python_loop_s"] > 0 and speed["numpy_kernel_s"] >= 0
    assert "16x16" in speed["numpy_kernel"]
    assert "1 loop-unit" in _output.speed_line(speed)
    again = _output.machine_speed(speed)  # at the end of the run: both kept, the figure their mean
    assert len(again["python_loop_s_runs"]) == 2 and again["python_loop_s_runs"][0] == speed["python_loop_s"]
    assert again["python_loop_s"] == pytest.approx(sum(again["python_loop_s_runs"]) / 2)
    slower = {**again, "python_loop_s_runs": [1.0, 2.0]}
    assert "the machine's load changed" in _output.speed_line(slower)
    assert len(again["python_loop_cpu_s_runs"]) == 2
    shared = {**again, "python_loop_s": 2.0, "python_loop_cpu_s_runs": [1.0, 1.0]}
    assert "other processes shared the cores" in _output.speed_line(shared)
    speed = again
    assert _output.loop_units(2 * speed["python_loop_s"], speed) == pytest.approx(2.0)
    # a dict carries it at its top; a list of rows (tools/doc_tables.py reads them as lists) in every row
    assert _output.with_speed({"rows": []}, speed) == {"rows": [], "machine_speed": speed}
    assert _output.with_speed([{"a": 1}, {"a": 2}], speed) == [{"a": 1, "machine_speed": speed},
                                                                {"a": 2, "machine_speed": speed}]


def timing_benches() -> list[Path]:
    return sorted(p for p in BENCH.glob("*.py") if not p.name.startswith("_") and p.name not in OWNED_ELSEWHERE
                  and re.search(r"\btime\.(perf_counter|time|monotonic)\(", p.read_text()))


def test_the_benches_that_time_are_found() -> None:
    names = {p.name for p in timing_benches()}
    assert {"sim_speed.py", "models.py", "table1.py", "columns.py"} <= names, names


@pytest.mark.parametrize("bench", timing_benches(), ids=lambda p: p.name)
def test_every_bench_that_prints_seconds_records_the_machine_speed(bench: Path) -> None:
    text = bench.read_text()
    assert re.search(r"\bspeed = machine_speed\(\)", text), f"{bench.name} does not measure the machine"
    assert "speed = machine_speed(speed)" in text, f"{bench.name} does not measure the machine again at its end"
    assert "print(speed_line(speed))" in text, f"{bench.name} does not print the machine speed"
    writes = re.findall(r"json\.dumps\(([^\n]*)", text)
    assert writes and all(w.startswith("with_speed(") for w in writes), \
        f"{bench.name}: a JSON it writes does not carry machine_speed: {writes}"
