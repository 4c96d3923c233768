"""A max pool computed by the program of the INDP conv it reads (snowir/plan/fused_pool.py):
bit-exact against the golden model, both engines alike, and faster than the two layers apart."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx_util import model, rand
from snowir.driver.model_api import Report, run_model_on_device
from snowir.hw import SnowflakeConfig
from snowir.tools.snow_opt import main as snow_opt_main
from snowir.tools.snow_run import main as snow_run


def _stem(path: Path, size: int, batch: int = 1) -> Path:
    """conv 7x7/2 (3 -> 64) + ReLU + max pool 3x3/2, ResNet's stem."""
    conv = (size + 6 - 7) // 2 + 1
    pooled = (conv + 2 - 3) // 2 + 1
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[7, 7], strides=[2, 2], pads=[3] * 4),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["o"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)]
    onnx.save(model(nodes, {"x": [batch, 3, size, size]}, {"o": [batch, 64, pooled, pooled]},
                    {"w": rand(64, 3, 7, 7, seed=1, scale=0.08), "b": rand(64, seed=2, scale=0.1)}), path)
    return path


@pytest.mark.parametrize("size, batch", [(40, 1), (27, 2)])
def test_the_pool_runs_in_the_conv_program_bit_exact_and_faster(tmp_path: Path, size: int, batch: int) -> None:
    path = _stem(tmp_path / "stem.onnx", size, batch)
    fused = run_model_on_device(path, check=True).report
    apart = run_model_on_device(path, pipeline="nn-prepare,nn-to-tile{fuse-pool=false}", check=True).report
    for report in (fused, apart):
        assert report["check"]["golden_bit_exact"], report["check"]
        assert report["check"]["snr_db"] > 30
    # (the host's pad-rows layout of the input comes first: device layers only)
    conv, pool = [layer for layer in fused["layers"] if layer["where"] != "host"]
    apart_conv, apart_pool = [layer for layer in apart["layers"] if layer["where"] != "host"]
    assert conv["op"] == "conv2d" and conv["cycles"] > 0 and conv["computes"] == pool["name"]
    assert pool["op"] == "max_pool" and pool["cycles"] == 0 and pool["computed_by"] == conv["name"]
    assert "computes" not in apart_conv and "computed_by" not in apart_pool
    assert [layer["op"] for layer in apart["layers"] if layer["cycles"]] == ["conv2d", "max_pool"]
    assert conv["macs"] == apart_conv["macs"]  # the MAXs are not MACs
    assert fused["total"]["cycles"] < apart["total"]["cycles"]


def test_both_engines_time_the_fused_program_alike(tmp_path: Path) -> None:
    path = _stem(tmp_path / "stem.onnx", 32)
    fast = run_model_on_device(path, engine="fast").report
    reference = run_model_on_device(path, engine="reference").report
    assert fast["total"]["cycles"] == reference["total"]["cycles"]
    assert fast["total"]["stall_cycles"] == reference["total"]["stall_cycles"]


def test_a_pool_with_another_reader_of_the_conv_is_not_fused(tmp_path: Path) -> None:
    """The conv's output also leaves the graph: the pool stays its own layer."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[7, 7], strides=[2, 2], pads=[3] * 4),
             helper.make_node("MaxPool", ["c"], ["o"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)]
    path = tmp_path / "two.onnx"
    onnx.save(model(nodes, {"x": [1, 3, 32, 32]}, {"o": [1, 64, 8, 8], "c": [1, 64, 16, 16]},
                    {"w": rand(64, 3, 7, 7, seed=1, scale=0.08), "b": rand(64, seed=2, scale=0.1)}), path)
    report = run_model_on_device(path, check=True).report
    assert [layer["op"] for layer in report["layers"] if layer["cycles"]] == ["conv2d", "max_pool"]
    assert np.isfinite(report["check"]["snr_db"])


def test_a_short_conv_keeps_its_pool_apart(tmp_path: Path) -> None:
    """SqueezeNet's stem (3x3/2, 3 -> 64, then a 3x3/2 max pool): the conv computes for less
    time than its own output and the pool's traffic take on the bus, so fusing would be slower
    (measured on the light model: 239 k cycles fused, 232 k apart) and nn-to-tile keeps them apart."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["o"], kernel_shape=[3, 3], strides=[2, 2])]
    path = tmp_path / "short.onnx"
    onnx.save(model(nodes, {"x": [1, 3, 97, 97]}, {"o": [1, 64, 23, 23]},
                    {"w": rand(64, 3, 3, 3, seed=1, scale=0.2), "b": rand(64, seed=2, scale=0.1)}), path)
    report = run_model_on_device(path, check=True).report
    assert report["check"]["golden_bit_exact"]
    conv, pool = report["layers"]
    assert conv["mode"] == "INDP" and "computes" not in conv and pool["cycles"] > 0


def test_snow_run_shows_where_the_pool_ran(tmp_path: Path, capsys) -> None:
    path, rep = _stem(tmp_path / "stem.onnx", 32), tmp_path / "r.json"
    assert snow_run([str(path), "--report", str(rep)]) == 0
    table = capsys.readouterr().out
    pool_line = next(line for line in table.splitlines() if line.startswith("o "))
    assert "in c" in pool_line  # the pool row names the conv whose program computed it
    report = Report.from_json(json.loads(rep.read_text()))  # the two extra keys read back
    assert report.layer("o").computed_by == "c" and report.layer("c").computes == "o"


def _coop(path: Path, size: int = 24) -> Path:
    """conv 3x3 (64 -> 64, COOP) + ReLU + max pool 3x3/2, an AlexNet-like conv and pool."""
    pooled = (size - 3) // 2 + 1
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["o"], kernel_shape=[3, 3], strides=[2, 2])]
    onnx.save(model(nodes, {"x": [1, 64, size, size]}, {"o": [1, 64, pooled, pooled]},
                    {"w": rand(64, 64, 3, 3, seed=1, scale=0.05), "b": rand(64, seed=2, scale=0.1)}), path)
    return path


def test_a_coop_conv_runs_its_pool_bit_exact_and_faster(tmp_path: Path) -> None:
    """The whole input fits the buffer in one strip; fused, the conv takes strips short enough
    for the ring beside them in their banks, and pools the rows each strip completed during the
    next one."""
    path = _coop(tmp_path / "coop.onnx")
    fused = run_model_on_device(path, check=True).report
    apart = run_model_on_device(path, pipeline="nn-prepare,nn-to-tile{fuse-pool=false}", check=True).report
    for report in (fused, apart):
        assert report["check"]["golden_bit_exact"], report["check"]
    conv, pool = fused["layers"]
    assert conv["mode"] == "COOP" and conv["computes"] == "o" and pool["cycles"] == 0 and pool["computed_by"] == "c"
    assert [layer["op"] for layer in apart["layers"] if layer["cycles"]] == ["conv2d", "max_pool"]
    assert conv["macs"] == apart["layers"][0]["macs"]
    assert fused["total"]["cycles"] < apart["total"]["cycles"]


def test_both_engines_time_the_fused_coop_program_alike(tmp_path: Path) -> None:
    path = _coop(tmp_path / "coop.onnx", 20)
    fast = run_model_on_device(path, engine="fast", check=True).report
    reference = run_model_on_device(path, engine="reference", check=True).report
    assert fast["check"]["golden_bit_exact"] and reference["check"]["golden_bit_exact"]
    assert fast["total"]["cycles"] == reference["total"]["cycles"]
    assert fast["total"]["stall_cycles"] == reference["total"]["stall_cycles"]


def _coop_tile_ir(tmp_path: Path) -> str:
    out = tmp_path / "t.mlir"
    assert snow_opt_main([str(_coop(tmp_path / "coop.onnx")), "-p", "nn-prepare,nn-to-tile,tile-loop-order",
                          "-o", str(out)]) == 0
    return out.read_text()


def test_the_coop_fusion_and_its_strips_are_in_the_tile_ir(tmp_path: Path) -> None:
    """The decision is the layer's `pool` and `pool_slots`, above the strips' words in each bank."""
    text = _coop_tile_ir(tmp_path)
    header = next(line for line in text.splitlines() if "tile.layer @c conv" in line)
    assert "#tile<mode COOP>" in header and "pool = #tile.pool_shape<c = 64, h = 24, w = 24" in header
    slots = [int(v) for v in re.search(r"pool_slots = array<i64: ([^>]*)>", header).group(1).split(", ")]
    strips = [tuple(map(int, m)) for m in re.findall(r"in_rows = array<i64: (\d+), (\d+)>", text)]
    assert len(strips) > 1 and not re.search(r"tile\.layer @o", text)  # shorter strips than the one that fits
    row = 24 * 64
    for slot in slots:
        bank, word = divmod(slot, SnowflakeConfig().maps_bank_elements)
        assert word >= max(r1 - r0 for r0, r1 in strips[bank::2]) * row


@pytest.mark.parametrize("edit, refusal", [("strips split", None), ("pool dropped", "pool"), ("slot in a strip", "pool_slots"),
                                            ("Mloop", "Kloop")])
def test_edits_of_a_fused_coop_conv(tmp_path: Path, capsys, edit: str, refusal: str | None) -> None:
    """Splitting the strips further is followed (the ring still fits, the rows are pooled as they
    complete: bit-exact); dropping the pool, moving a slot into a strip's words or Mloop is
    refused in one line (unfusing is nn-to-tile{fuse-pool=false})."""
    text = _coop_tile_ir(tmp_path)
    if edit == "strips split":  # the first maps tile in two
        m = re.search(r"tile\.maps_tile attributes \{([^}]*)\} \{", text)
        end = text.index("\n    }", m.end()) + len("\n    }")
        y0, y1 = map(int, re.search(r"out_rows = array<i64: (\d+), (\d+)>", m.group(1)).groups())
        assert y1 - y0 >= 2
        halves = [re.sub(r"out_rows = array<i64: \d+, \d+>", f"out_rows = array<i64: {a}, {b}>", m.group(1))
                  for a, b in ((y0, (y0 + y1) // 2), ((y0 + y1) // 2, y1))]
        edited = text[:m.start()] + "\n    ".join(f"tile.maps_tile attributes {{{h}}} {{}}" for h in halves) + text[end:]
        # the strips after it change banks: their bodies written empty too
        edited = re.sub(r"(tile\.maps_tile attributes \{[^}]*\}) \{\n.*?\n    \}", r"\1 {}", edited, flags=re.S)
    elif edit == "Mloop":
        edited = text.replace("#tile<loop_order Kloop>", "#tile<loop_order Mloop>", 1)
    elif edit == "pool dropped":
        edited = re.sub(r"pool = #tile\.pool_shape<[^>]*>, ", "", text, count=1)
    else:
        edited = re.sub(r"pool_slots = array<i64: \d+", "pool_slots = array<i64: 0", text, count=1)
    assert edited != text
    src = tmp_path / "e.mlir"
    src.write_text(edited)
    capsys.readouterr()
    rc = snow_run([str(src), "--check"])
    err = capsys.readouterr().err.strip()
    if refusal is None:
        assert rc == 0, err
    else:
        errors = [line for line in err.splitlines() if "error:" in line]
        assert rc == 1 and len(errors) == 1 and "Traceback" not in err and refusal in errors[0], err
