"""
The load-placement decisions of a conv layer (dialects/tile/decisions.py, issue 39 item 3):
`prefetch_after` (codegen/pixels.kernel_tile: vector ops of a kernel tile queued before its
prefetches issue) and `load_next_whole` (codegen/strip_loads.spreads: the next maps strip whole
in the last kernel tile, not one piece per tile). Edited in the tile IR, each is followed (the
layer's cycles change, the output stays bit-exact with the golden model) or refused in one line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx_util import model
from snowir.tools.snow_opt import main as snow_opt
from snowir.tools.snow_run import main as snow_run


def _model(path: Path) -> Path:
    """One 3x3 conv, 16 -> 32 channels (two kernel tiles) over 12x12."""
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((32, 16, 3, 3)) * np.sqrt(2.0 / 144)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    m = model(nodes, {"x": [1, 16, 12, 12]}, {"y": [1, 32, 12, 12]}, {"w": w, "b": np.full(32, 0.1, np.float32)})
    onnx.save(m, str(path))
    return path


def _tiled(d: Path, rows: int | None) -> str:
    """The model at the tile level; `rows`: maps tiles of that many output rows (tile-rows)."""
    out = d / f"t{rows}.mlir"
    passes = "nn-prepare,nn-to-tile,tile-loop-order" + (f",tile-rows{{rows={rows}}}" if rows else "")
    assert snow_opt([str(_model(d / "m.onnx")), "-p", passes, "-o", str(out)]) == 0
    return out.read_text()


def _run(d: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, int, str]:
    """(exit code, the conv's cycles, stderr) of `snow-run --check` on the tile IR."""
    src, rep = d / "edited.mlir", d / "r.json"
    src.write_text(text)
    capsys.readouterr()
    rc = snow_run([str(src), "--check", "--quiet", "--report", str(rep)])
    err = capsys.readouterr().err
    if rc != 0:
        return rc, 0, err
    r = json.loads(rep.read_text())
    assert r["check"]["golden_bit_exact"] is True
    return rc, r["layers"][0]["cycles"], err


def _with(text: str, prop: str) -> str:
    """`prop` added to the conv layer's attributes."""
    new = re.sub(r"(tile\.layer @conv conv attributes \{)", rf"\1{prop}, ", text, count=1)
    assert new != text
    return new


@pytest.mark.parametrize("prop, rows", [("prefetch_after = 48 : i64", None), ("prefetch_after = 400 : i64", 4),
                                        ("load_next_whole", 4)])
def test_edit_is_followed(tmp_path: Path, capsys: pytest.CaptureFixture[str], prop: str, rows: int | None) -> None:
    text = _tiled(tmp_path, rows)
    rc, before, err = _run(tmp_path, text, capsys)
    assert rc == 0, err
    edited = _with(text, prop)
    rc, after, err = _run(tmp_path, edited, capsys)
    assert rc == 0, err
    assert after != before, f"{prop}: same cycles ({after}): the edit was ignored"


@pytest.mark.parametrize("prop, rows, says", [
    ("prefetch_after = 8 : i64", None, "layer @conv: prefetch_after 8: fewer than the vector queue's 16 ops"),
    ("load_next_whole", None, "layer @conv: load_next_whole: the layer's code is the same without it"),
    ("prefetch_after = 0 : i64", None, "tile.layer @conv: prefetch_after: a conv layer's ops queued"),
])
def test_edit_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], prop: str, rows: int | None,
                         says: str) -> None:
    rc, _, err = _run(tmp_path, _with(_tiled(tmp_path, rows), prop), capsys)
    assert rc != 0
    assert says in err and len(err.strip().splitlines()) == 1, err
