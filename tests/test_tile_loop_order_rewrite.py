"""
tile-loop-order is a rewrite of the decisions it owns (passes/tile/tile_loop_order.py): an edit
made between nn-to-tile and tile-loop-order survives it where tile-to-asm follows it on the
re-derived layer (before: the pass re-planned and overwrote the layer), and is dropped with one
line naming it and the rule where it does not hold.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from snowir.tools.snow_opt import main as snow_opt
from snowir.tools.snow_run import main as snow_run

DIGITS = Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx"
SLOT = "repeat = 2 : i64, slot = 2048"  # conv2's kernel tile as nn-to-tile writes it (two tiles, double-buffered)


@pytest.fixture(scope="module")
def nn_tiled(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("order") / "t.mlir"
    assert snow_opt([str(DIGITS), "-p", "nn-prepare,nn-to-tile", "-o", str(out)]) == 0
    text = out.read_text()
    assert SLOT in text[text.index("tile.layer @conv2 "):]
    return text


def _edit_slot(text: str, slot: int) -> str:
    a = text.index("tile.layer @conv2 ")
    return text[:a] + text[a:].replace(SLOT, f"repeat = 2 : i64, slot = {slot}", 1)


def _conv2(text: str) -> tuple[str, str]:
    """conv2's kernel tile attributes and loop order."""
    body = text[text.index("tile.layer @conv2 "):text.index("tile.layer @pool2 ")]
    return re.search(r"kernel_tile attributes \{[^}]*\}", body).group(0), re.search(r"loop_order (\w+)", body).group(1)


def _order(tmp_path: Path, text: str, order: str) -> str:
    src, out = tmp_path / "in.mlir", tmp_path / "out.mlir"
    src.write_text(text)
    assert snow_opt([str(src), "-p", f"tile-loop-order{{order={order}}}", "-o", str(out)]) == 0
    return out.read_text()


def _cycles(tmp_path: Path, text: str) -> int:
    src, rep = tmp_path / "run.mlir", tmp_path / "r.json"
    src.write_text(text)
    assert snow_run([str(src), "--check", "--quiet", "--report", str(rep)]) == 0
    r = json.loads(rep.read_text())
    assert r["check"]["golden_bit_exact"] is True
    return {layer["name"]: layer["cycles"] for layer in r["layers"]}["conv2"]


@pytest.mark.parametrize("order", ["auto", "Mloop"])
def test_slot_edited_before_tile_loop_order_survives(nn_tiled: str, tmp_path: Path, capsys, order: str) -> None:
    """conv2's weights slot moved to 1024 after nn-to-tile: tile-loop-order (keeping Kloop, or
    re-tiling for Mloop) keeps it, and tile-to-asm follows it bit-exact."""
    plain = _order(tmp_path, nn_tiled, order)
    capsys.readouterr()
    edited = _order(tmp_path, _edit_slot(nn_tiled, 1024), order)
    assert "conv2" not in capsys.readouterr().err
    kt, loop = _conv2(edited)
    assert "slot = 1024" in kt
    assert loop == ("Kloop" if order == "auto" else "Mloop")
    assert edited == plain.replace(f"{SLOT} ", "repeat = 2 : i64, slot = 1024 ", 1)  # nothing else differs
    _cycles(tmp_path, edited)


def test_slot_that_does_not_hold_is_dropped_in_one_line(nn_tiled: str, tmp_path: Path, capsys) -> None:
    """A slot with no room above it for a kernel: dropped with one line naming it and the rule."""
    capsys.readouterr()
    out = _order(tmp_path, _edit_slot(nn_tiled, 4000), "Mloop")
    err = [line for line in capsys.readouterr().err.splitlines() if "conv2" in line]
    assert len(err) == 1 and "kernel tile slot 4000 dropped for Mloop" in err[0] and "4096-word" in err[0], err
    assert "slot = 2048" in _conv2(out)[0]


@pytest.fixture(scope="module")
def tiled(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("bodies") / "t.mlir"
    assert snow_opt([str(DIGITS), "-p", "nn-prepare,nn-to-tile,tile-loop-order", "-o", str(out)]) == 0
    return out.read_text()


def _body_edit(text: str, tmp_path: Path, capsys, old: str, new: str) -> str:
    """conv2's tile IR with `old` replaced by `new` once, lowered: the one-line refusal."""
    src = tmp_path / "t.mlir"
    a = text.index("tile.layer @conv2 ")
    assert old in text[a:]
    src.write_text(text[:a] + text[a:].replace(old, new, 1))
    capsys.readouterr()
    assert snow_opt([str(src), "-p", "tile-to-asm", "-o", str(tmp_path / "o.mlir")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("old, new, says", [
    ("length = 160 : i64, dram_addr = 832", "length = 80 : i64, dram_addr = 832",
     "tile.load 1: length 80 where its attributes imply 160 (a maps load's words are its rows'"),
    ("dram_addr = 832 : i64", "dram_addr = 900 : i64",
     "tile.load 1: dram_addr 900 where its attributes imply 832 (the maps (weights) region's offset"),
    ("dram_addr = 832 : i64, buf_addr = 0 : i64, unit = 0 : i64, select = 1",
     "dram_addr = 832 : i64, buf_addr = 0 : i64, unit = 0 : i64, select = 2",
     "tile.load 1: select 2 where its attributes imply 1 (the mode"),
], ids=["length", "dram_addr", "select"])
def test_body_edit_is_refused_naming_the_rule(tiled: str, tmp_path: Path, capsys, old: str, new: str,
                                              says: str) -> None:
    """A tile body is derived from its tile's attributes (docs/lowering.md, "Tile bodies"): an
    edited load is refused naming the field, the value implied and the rule it follows from."""
    err = _body_edit(tiled, tmp_path, capsys, old, new)
    assert "layer @conv2: kernel tile:" in err and says in err, err
