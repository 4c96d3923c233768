"""snowir.compile / Compiled.run: compile once, run many times, typed reports whose to_json() is
snow-run's JSON report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import snowir
from snowir.dialects import snowflake_asm as sf
from snowir.errors import SnowError
from snowir.hw import SnowflakeConfig
from snowir.tools.snow_run import main as snow_run

DIGITS = Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx"


def test_compile_once_run_many_typed_reports(tmp_path: Path) -> None:
    said: list[str] = []
    compiled = snowir.compile(DIGITS, progress=said.append)
    x = np.random.default_rng(3).standard_normal(compiled.input_shapes[0]).astype(np.float32)
    first = compiled.run(x, check=True, progress=said.append)
    again = compiled.run(x)
    golden = compiled.run(x, engine="golden")
    assert isinstance(first.report, snowir.Report) and isinstance(first.report.total, snowir.TotalReport)
    assert first.report.check.golden_bit_exact and first.report.check.reference == "onnxruntime"
    assert np.array_equal(first.outputs[0], again.outputs[0]) and np.array_equal(first.outputs[0], golden.outputs[0])
    assert first.report.total.cycles == again.report.total.cycles > 0 and golden.report.total.cycles == 0
    assert any("lowering" in s for s in said) and any(s.startswith("layer ") for s in said)
    conv = first.report.layer("conv1")
    assert conv.where == "device" and conv.mode in ("COOP", "INDP") and conv.stall_cycles["cu_starved"] >= 0
    # to_json is the snow-run report, and reads back to the same typed report
    np.save(tmp_path / "x.npy", x)
    assert snow_run([str(DIGITS), "--input", str(tmp_path / "x.npy"), "--quiet", "--report", str(tmp_path / "r.json")]) == 0
    cli = json.loads((tmp_path / "r.json").read_text())
    mine = first.report.to_json()
    assert set(mine) == set(cli) and set(mine["total"]) == set(cli["total"])
    assert mine["total"]["cycles"] == cli["total"]["cycles"] and mine["layers"][0].keys() == cli["layers"][0].keys()
    assert snowir.Report.from_json(json.loads(json.dumps(mine))) == first.report


def test_compile_for_another_machine_shape_and_refuse_an_unknown_engine() -> None:
    compiled = snowir.compile(DIGITS, hw=SnowflakeConfig(cus=2))
    images = [op for op in compiled.module.walk() if isinstance(op, sf.ImageOp)]
    assert images and all(json.loads(op.attributes["hw"].data)["cus"] == 2 for op in images)
    assert compiled.run(check=True).report.check.golden_bit_exact is True
    with pytest.raises(SnowError, match="engine 'turbo'"):
        snowir.compile(DIGITS).run(engine="turbo")


def test_layers_in_parallel_processes_give_the_same_run() -> None:
    compiled = snowir.compile(DIGITS)
    x = np.random.default_rng(5).standard_normal(compiled.input_shapes[0]).astype(np.float32)
    one = compiled.run(x, record=True, jobs=1)
    two = compiled.run(x, record=True, jobs=2)
    assert np.array_equal(one.outputs[0], two.outputs[0])
    strip = lambda r: {**r.to_json(), "total": {k: v for k, v in r.total.__dict__.items() if not k.endswith("_s")},
                       "layers": [{k: v for k, v in layer.__dict__.items()} for layer in r.layers]}
    assert strip(one.report) == strip(two.report)
    assert [(e.track, e.name, e.start, e.end, e.count) for e in one.events] == \
        [(e.track, e.name, e.start, e.end, e.count) for e in two.events]
