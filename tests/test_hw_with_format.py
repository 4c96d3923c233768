"""
`snow-run --hw H --format auto` and `snow-dse --sweep ... --format auto` build an nn-prepare from the
format; that nn-prepare got no `hw=`, so its hardware-aware passes (partition-host, fuse-activation,
depthwise-to-grouped, ...) decided for the ZC706 build while the rest lowered for H: with the
write-back activation unit, every HardSwish of PP-OCR's classifier stayed on the host under
--format auto and left it under Q8.8.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx

from snowir.driver.dse import run_one
from tests.act_nets import act_input, act_net
from tests.onnx_util import snow_run

UNIT = {"writeback_activation": 1}


def _host_ops(report: dict) -> list[str]:
    return [layer["op"] for layer in report["layers"] if layer["where"] == "host"]


def test_snow_run_format_auto_prepares_for_the_given_machine(tmp_path: Path, capsys) -> None:
    model, hw, x, report = tmp_path / "m.onnx", tmp_path / "hw.json", tmp_path / "x.npy", tmp_path / "r.json"
    onnx.save(act_net(("hard_swish", "leaky_relu")), model)
    hw.write_text(json.dumps(UNIT))
    np.save(x, act_input())
    args = [str(model), "--input", str(x), "--hw", str(hw), "--format", "auto", "--calibration", str(x), "--check",
            "--quiet", "--report", str(report)]
    assert snow_run(args) == 0, capsys.readouterr().err
    r = json.loads(report.read_text())
    assert not {"hard_swish", "leaky_relu"} & set(_host_ops(r)) and r["check"]["golden_bit_exact"], _host_ops(r)


def test_dse_format_auto_prepares_for_the_swept_machine(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(act_net(("hard_swish",)), model)
    stock, unit = run_one(str(model), {}, None, "auto", None), run_one(str(model), UNIT, None, "auto", None)
    assert unit["host_ms"] < stock["host_ms"], (unit["host_ms"], stock["host_ms"])  # the HardSwish left the host
