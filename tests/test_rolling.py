"""maps_buffering rolling (snowir/codegen/pixels.RollingLoads): whole maps tiles of a 1x1 conv
take turns row by row, the next tile's rows loading during the last kernel tile over this one.
The machine checks every such load against the MACs still reading the row it replaces (a load
over a pending read faults), so bit-exact runs also say the lag is long enough."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import onnx
import pytest
from onnx import helper

sys.path.insert(0, str(Path(__file__).parent))
from onnx_util import model, rand, snow_run  # noqa: E402

from snowir.tools.snow_opt import main as snow_opt  # noqa: E402


def _pointwise(path: Path, c: int, h: int, k: int, kh: int = 1) -> Path:
    m = model([helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[kh, kh], pads=[kh // 2] * 4),
               helper.make_node("Relu", ["y"], ["o"])], {"x": [1, c, h, h]}, {"o": None},
              {"w": rand(k, c, kh, kh, seed=1, scale=1 / (c * kh * kh) ** 0.5), "b": rand(k, seed=2, scale=0.1)})
    onnx.save(m, path)
    return path


@pytest.fixture(scope="module")
def tiled(tmp_path_factory: pytest.TempPathFactory) -> str:
    d = tmp_path_factory.mktemp("rolling")
    out = d / "t.mlir"
    assert snow_opt([str(_pointwise(d / "m.onnx", 1024, 10, 128)), "-p", "nn-prepare,nn-to-tile,tile-loop-order",
                     "-o", str(out)]) == 0
    return out.read_text()


def _run(tmp_path: Path, text: str) -> tuple[int, int]:
    src, rep = tmp_path / "edited.mlir", tmp_path / "r.json"
    src.write_text(text)
    rc = snow_run([str(src), "--check", "--quiet", "--report", str(rep)])
    if rc:
        return rc, 0
    r = json.loads(rep.read_text())
    assert r["check"]["golden_bit_exact"] is True
    return 0, r["layers"][0]["cycles"]


def test_rolling_is_chosen_exact_and_faster_than_whole(tiled: str, tmp_path: Path) -> None:
    assert "#tile<buffering rolling>" in tiled
    rc, rolling = _run(tmp_path, tiled)
    assert rc == 0
    rc, whole = _run(tmp_path, tiled.replace("#tile<buffering rolling>", "#tile<buffering whole>"))
    assert rc == 0
    assert rolling < whole, (rolling, whole)  # the edit back to whole is followed, and loads later


@pytest.mark.parametrize("edit, says", [
    (lambda t: t.replace("#tile<loop_order Kloop>", "#tile<loop_order Mloop>"), "rolling maps tiles need Kloop"),
    (lambda t: t.replace("#tile<mode COOP>", "#tile<mode INDP>"), "rolling"),
])
def test_rolling_where_the_code_cannot_follow_is_refused_in_one_line(tiled: str, tmp_path: Path, capsys, edit,
                                                                     says: str) -> None:
    edited = edit(tiled)
    assert edited != tiled
    capsys.readouterr()
    rc, _ = _run(tmp_path, edited)
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert says in err, err


def test_rolling_on_a_3x3_conv_is_refused(tmp_path: Path, capsys) -> None:
    """A 3x3 conv's tiles overlap by the kernel's halo: row j of the next tile is not row j's."""
    out = tmp_path / "t.mlir"
    assert snow_opt([str(_pointwise(tmp_path / "m.onnx", 256, 40, 64, kh=3)), "-p",
                     "nn-prepare,nn-to-tile,tile-loop-order", "-o", str(out)]) == 0
    text = out.read_text()
    buffering = next(b for b in ("double", "whole") if f"#tile<buffering {b}>" in text)
    capsys.readouterr()
    rc, _ = _run(tmp_path, text.replace(f"#tile<buffering {buffering}>", "#tile<buffering rolling>"))
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1, err
    assert "rolling maps tiles need" in err, err
