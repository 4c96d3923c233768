"""
Edits of the tile IR a researcher makes by hand: each is followed by tile-to-asm (different
code, still bit-exact with the golden model) or refused in one line naming the layer and
what may be edited instead; none is silently ignored or miscompiled.

The model: a plain 3x3 conv (stem), a residual block (branch_b adds the stem's output), a
2x2 max pool and a 48-kernel head (three kernel tiles).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from snowir.tools.snow_opt import main as snow_opt
from snowir.tools.snow_run import main as snow_run


def _model(path: Path) -> Path:
    rng = np.random.default_rng(0)
    w = lambda *s, fan: (rng.standard_normal(s) * np.sqrt(2.0 / fan)).astype(np.float32)  # noqa: E731
    inits = [numpy_helper.from_array(a, n) for a, n in (
        (w(32, 16, 3, 3, fan=144), "w0"), (np.zeros(32, np.float32), "b0"),
        (w(32, 32, 3, 3, fan=288), "w1"), (np.full(32, 0.1, np.float32), "b1"),
        (w(32, 32, 3, 3, fan=288) * 0.3, "w2"), (np.zeros(32, np.float32), "b2"),
        (w(48, 32, 3, 3, fan=288), "w3"), (np.zeros(48, np.float32), "b3"))]
    n = helper.make_node
    nodes = [n("Conv", ["x", "w0", "b0"], ["c0"], name="stem", pads=[1, 1, 1, 1]), n("Relu", ["c0"], ["r0"]),
             n("Conv", ["r0", "w1", "b1"], ["c1"], name="branch_a", pads=[1, 1, 1, 1]), n("Relu", ["c1"], ["r1"]),
             n("Conv", ["r1", "w2", "b2"], ["c2"], name="branch_b", pads=[1, 1, 1, 1]),
             n("Add", ["c2", "r0"], ["s"], name="residual"), n("Relu", ["s"], ["y0"]),
             n("MaxPool", ["y0"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             n("Conv", ["p", "w3", "b3"], ["y"], name="head", pads=[1, 1, 1, 1])]
    g = helper.make_graph(nodes, "edits", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 20, 20])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 48, 10, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


@pytest.fixture(scope="module")
def tiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, int]]:
    """The model at the tile level (after tile-loop-order), and each layer's cycles as it is."""
    d = tmp_path_factory.mktemp("edits")
    out = d / "t.mlir"
    assert snow_opt([str(_model(d / "m.onnx")), "-p", "nn-prepare,nn-to-tile,tile-loop-order", "-o", str(out)]) == 0
    text = out.read_text()
    return text, _cycles(d, text)[1]


def _cycles(d: Path, text: str) -> tuple[int, dict[str, int]]:
    src, rep = d / "edited.mlir", d / "r.json"
    src.write_text(text)
    rc = snow_run([str(src), "--check", "--quiet", "--report", str(rep)])
    if rc != 0:
        return rc, {}
    r = json.loads(rep.read_text())
    assert r["check"]["golden_bit_exact"] is True
    return 0, {layer["name"]: layer["cycles"] for layer in r["layers"]}


def _layer(text: str, name: str) -> tuple[int, int]:
    """[start, end) of `tile.layer @name` in the text."""
    start = text.index(f"tile.layer @{name} ")
    nxt = text.find("\n  tile.layer @", start + 1)
    end = text.index("\n  }\n", start) + 4 if nxt < 0 else nxt
    return start, end


def _in_layer(text: str, name: str, edit) -> str:
    a, b = _layer(text, name)
    return text[:a] + edit(text[a:b]) + text[b:]


def _maps_tiles(body: str) -> list[tuple[int, int, str, str]]:
    """(start, end, header, body) of each maps tile in a layer's text."""
    out = []
    for m in re.finditer(r"tile\.maps_tile attributes \{([^}]*)\} \{", body):
        end = body.index("\n    }", m.end()) + len("\n    }")
        out.append((m.start(), end, m.group(1), body[m.end():end]))
    return out


def _split_rows(body: str, s: int = 1, oh: int | None = None) -> str:
    """The layer's first maps tile split in two at half its rows, both bodies written empty."""
    start, end, header, _ = _maps_tiles(body)[0]
    y0, y1 = map(int, re.search(r"out_rows = array<i64: (\d+), (\d+)>", header).groups())
    mid = (y0 + y1) // 2

    def tile_text(a: int, b: int) -> str:
        h = re.sub(r"out_rows = array<i64: \d+, \d+>", f"out_rows = array<i64: {a}, {b}>", header)
        return f"tile.maps_tile attributes {{{h}}} {{}}"

    return body[:start] + tile_text(y0, mid) + "\n    " + tile_text(mid, y1) + body[end:]


def _empty_bodies(body: str) -> str:
    body = re.sub(r"(tile\.kernel_tile attributes \{[^}]*\}) \{.*?\n    \}", r"\1 {}", body, flags=re.S)
    return re.sub(r"(tile\.maps_tile attributes \{[^}]*\}) \{.*?\n    \}", r"\1 {}", body, flags=re.S)


def _header(body: str, old: str, new: str) -> str:
    assert old in body.split("\n", 1)[0], old
    first, rest = body.split("\n", 1)
    return first.replace(old, new, 1) + "\n" + rest


def _columns(body: str, cut: int, ow: int) -> str:
    """The maps tiles as two column bands, [0, cut) and [cut, ow), each over the same rows, bodies empty."""
    tiles = _maps_tiles(body)
    out = [f"tile.maps_tile attributes {{{header}, out_cols = array<i64: {x0}, {x1}>}} {{}}"
           for x0, x1 in ((0, cut), (cut, ow)) for _, _, header, _ in tiles]
    return body[:tiles[0][0]] + "\n    ".join(out) + body[tiles[-1][1]:]


FOLLOWED = {
    "plain conv: column split in two, bodies empty": ("stem", lambda b: _columns(b, 8, 20)),
    "plain conv: maps tile split in two, bodies empty": ("stem", lambda b: _split_rows(b)),
    "residual conv: maps tile split in two, bodies empty": ("branch_b", lambda b: _split_rows(b)),
    "max pool: maps tile split in two, bodies empty": ("pool", lambda b: _split_rows(b)),
    "mode COOP -> INDP, bodies empty": ("stem", lambda b: _empty_bodies(_header(b, "#tile<mode COOP>", "#tile<mode INDP>"))),
    "kernel tile 16 -> 8, body empty": ("stem", lambda b: re.sub(
        r"(tile\.kernel_tile attributes \{first = 0 : i64, )count = 16 : i64(.*?\}) \{.*?\n    \}", r"\1count = 8 : i64\2 {}",
        b, count=1, flags=re.S)),
}


@pytest.mark.parametrize("what", list(FOLLOWED))
def test_edit_is_followed(tiled, tmp_path: Path, what: str) -> None:
    text, before = tiled
    layer, edit = FOLLOWED[what]
    edited = _in_layer(text, layer, edit)
    assert edited != text
    rc, after = _cycles(tmp_path, edited)
    assert rc == 0, what
    assert after[layer] != before[layer], f"{what}: same cycles ({after[layer]}), the edit was ignored"


def _first_load(body: str, key: str, value: str, tile_index: int = 0) -> str:
    start, end, _, inner = _maps_tiles(body)[tile_index]
    new = re.sub(rf"{key} = \d+ : i64", f"{key} = {value} : i64", inner, count=1)
    assert new != inner
    return body[:start] + body[start:end].replace(inner, new) + body[end:]


def _halve_length(body: str) -> str:
    start, end, _, inner = _maps_tiles(body)[0]
    n = int(re.search(r"length = (\d+) : i64", inner).group(1))
    return body[:start] + body[start:end].replace(f"length = {n} : i64", f"length = {n // 2} : i64", 1) + body[end:]


def _delete_maps_tile(body: str) -> str:
    start, end, _, _ = _maps_tiles(body)[-1]
    return body[:start] + body[end:]


def _rows_kept_loads(body: str) -> str:
    """The first maps tile's rows shortened, its loads and windows left as they were."""
    start, end, header, inner = _maps_tiles(body)[0]
    y1 = int(re.search(r"out_rows = array<i64: \d+, (\d+)>", header).group(1))
    h = re.sub(r"out_rows = array<i64: (\d+), \d+>", rf"out_rows = array<i64: \1, {y1 - 1}>", header)
    return body[:start] + f"tile.maps_tile attributes {{{h}}} {{{inner}" + body[end:]


def _delete_first_load(body: str) -> str:
    """The first maps tile's first tile.load deleted (a max pool's strip or ring: its only one)."""
    start, end, _, inner = _maps_tiles(body)[0]
    i = inner.index("      tile.load")
    new = inner[:i] + inner[inner.index("\n", i) + 1:]
    return body[:start] + body[start:end].replace(inner, new) + body[end:]


REFUSED = {  # layer, edit, what the one-line refusal says
    "residual conv: column split": ("branch_b", lambda b: _columns(b, 8, 20), "not column-tiled"),
    "max pool: column split": ("pool", lambda b: _columns(b, 4, 10), "not column-tiled"),
    "plain conv: columns past the output": ("stem", lambda b: _columns(b, 8, 24), "cover output columns 0..20"),
    "max pool: a load's length halved": ("pool", _halve_length, "loads and windows differ"),
    "max pool: a load's unit": ("pool", lambda b: _first_load(b, "unit", "2"), "balance-loads"),
    "max pool: its only load deleted": ("pool", _delete_first_load, "maps tile 0: a body with no ops"),
    "max pool: cu": ("pool", lambda b: b.replace("cu = -1 : i64", "cu = 2 : i64", 1), "broadcast"),
    "max pool: maps tile deleted": ("pool", _delete_maps_tile, "cover output rows"),
    "residual conv: rows edited, loads kept": ("branch_b", _rows_kept_loads, "maps tile"),
    "plain conv: rows edited, loads kept": ("stem", _rows_kept_loads, "maps tile"),
    "plain conv: relu dropped from the layer": ("stem", lambda b: _header(b, "relu, ", ""), "relu"),
    "plain conv: mode COOP -> INDP, bodies kept": ("stem", lambda b: _header(b, "#tile<mode COOP>", "#tile<mode INDP>"),
                                                   "stem"),
    "plain conv: kernel tile 16 -> 8, body kept": ("stem", lambda b: b.replace("count = 16 : i64", "count = 8 : i64", 1),
                                                   "kernel tile"),
    "residual conv: loop order Mloop": ("branch_b", lambda b: _header(b, "#tile<loop_order Kloop>",
                                                                      "#tile<loop_order Mloop>"), "Kloop only"),
    "plain conv: a window's rows": ("stem", lambda b: re.sub(r"rows = 3 : i64", "rows = 1 : i64", b, count=1),
                                    "loads and windows differ"),
    "plain conv: stagger on double-buffered tiles": ("stem", lambda b: b.replace("slot = 2048 : i64", "slot = 2048 : i64, "
                                                                                 "stagger = 8 : i64", 1), "stagger"),
    "residual conv: slice_tiles without bypass slices": ("branch_b", lambda b: _header(
        b, "maps_buffering", "slice_tiles = 2 : i64, maps_buffering"), "slice_tiles"),
    "plain conv: an unknown attribute": ("stem", lambda b: b.replace("slot = 2048 : i64", "slto = 2048 : i64", 1),
                                         "unknown attribute 'slto'"),
    "plain conv: a required attribute misspelt": ("stem", lambda b: b.replace("out_rows =", "out_rws =", 1),
                                                  "tile.maps_tile: unknown attribute 'out_rws'"),
}


@pytest.mark.parametrize("what", list(REFUSED))
def test_edit_is_refused_in_one_line(tiled, tmp_path: Path, capsys, what: str) -> None:
    text, _ = tiled
    layer, edit, says = REFUSED[what]
    edited = _in_layer(text, layer, edit)
    assert edited != text, what
    capsys.readouterr()
    rc, _ = _cycles(tmp_path, edited)
    err = capsys.readouterr().err.strip()
    assert rc == 1, f"{what}: accepted"
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert says in err, err


def test_forced_mloop_reports_the_layers_it_cannot_apply_to(tiled, tmp_path: Path, capsys) -> None:
    text, _ = tiled
    src = tmp_path / "a.mlir"
    src.write_text(re.sub(r"loop_order = #tile<loop_order \w+>, ", "", text))
    capsys.readouterr()
    assert snow_opt([str(src), "-p", "tile-loop-order{order=Mloop}", "-o", str(tmp_path / "b.mlir")]) == 0
    err = capsys.readouterr().err
    assert "layer @branch_b keeps Kloop: a residual layer runs Kloop only" in err
    out = (tmp_path / "b.mlir").read_text()
    a, b = _layer(out, "head")
    assert "#tile<loop_order Mloop>" in out[a:b]


def test_mode_change_rebuilt_by_tile_loop_order_repacks_the_weights(tiled, tmp_path: Path) -> None:
    """COOP -> INDP, then tile-loop-order{order=Kloop} rebuilds the tiles: the weights are
    repacked for INDP (they were read past their region before)."""
    text, before = tiled
    edited = _in_layer(text, "stem", lambda b: _header(b, "#tile<mode COOP>", "#tile<mode INDP>"))
    src, out = tmp_path / "a.mlir", tmp_path / "b.mlir"
    src.write_text(edited)
    assert snow_opt([str(src), "-p", "tile-loop-order{order=Kloop}", "-o", str(out)]) == 0
    rebuilt = out.read_text()
    a, b = _layer(rebuilt, "stem")
    assert "packing = #tile<mode INDP>" in rebuilt[a:b]
    rc, after = _cycles(tmp_path, rebuilt)
    assert rc == 0 and after["stem"] != before["stem"]


@pytest.mark.parametrize("drop", ["pool", "pool and its slots", "pool, slots and regions"])
def test_dropping_a_fused_pool_is_refused(tmp_path: Path, capsys, drop: str) -> None:
    """A conv whose max pool runs in its program: dropping the pool (it compiled, then faulted
    at run time) is refused in one line, however much of it is dropped."""
    from test_fused_pool import _stem

    out = tmp_path / "t.mlir"
    assert snow_opt([str(_stem(tmp_path / "stem.onnx", 40)), "-p", "nn-prepare,nn-to-tile,tile-loop-order",
                     "-o", str(out)]) == 0
    text = out.read_text()
    assert "pool_slots" in text

    def edit(body: str) -> str:
        first, rest = body.split("\n", 1)
        first = re.sub(r"pool = #tile\.pool_shape<[^>]*>, ", "", first)
        if drop != "pool":
            first = re.sub(r"pool_slots = array<i64[^>]*>, ", "", first)
        if drop == "pool, slots and regions":
            rest = "\n".join(line for line in rest.split("\n") if 'label = "conv_output"' not in line)
        return first + "\n" + rest

    name = re.search(r"tile\.layer @(\S+) conv", text).group(1)
    edited = _in_layer(text, name, edit)
    assert edited != text
    capsys.readouterr()
    rc, _ = _cycles(tmp_path, edited)
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "pool" in err


def _conv_model(path: Path, c: int, k: int, size: int) -> Path:
    """One 3x3 conv, `c` -> `k` channels on `size` x `size` (no ReLU)."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array((rng.standard_normal((k, c, 3, 3)) * np.sqrt(2.0 / (9 * c))).astype(np.float32),
                                     "w"), numpy_helper.from_array(np.zeros(k, np.float32), "b")]
    g = helper.make_graph([helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", pads=[1, 1, 1, 1])], "conv",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, size, size])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, k, size, size])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def test_resident_on_a_single_kernel_tile_is_bit_exact(tmp_path: Path) -> None:
    """`resident` on a COOP conv's only kernel tile (repeat 1) over several maps strips: the tile
    is computed once per strip from word 0 (it was computed twice, the second time from weights
    past the only kernel: every output row wrong)."""
    out = tmp_path / "t.mlir"
    assert snow_opt([str(_conv_model(tmp_path / "m.onnx", 64, 16, 56)), "-p", "nn-prepare,nn-to-tile,tile-loop-order",
                     "-o", str(out)]) == 0
    text = out.read_text()
    assert len(_maps_tiles(text)) > 1 and "repeat = 1 : i64, slot = " in text
    edited = re.sub(r"(tile\.kernel_tile attributes \{[^}]*repeat = 1 : i64), slot = \d+ : i64\} \{.*?\n    \}",
                    r"\1, resident} {}", text, count=1, flags=re.S)
    assert "resident} {}" in edited
    rc, after = _cycles(tmp_path, edited)
    assert rc == 0
    assert after["conv"] > 0


def _fused_stem(tmp_path: Path) -> str:
    """ResNet's stem at 40 x 40 at the tile level: an INDP conv computing its max pool (`pool_slots`)."""
    from test_fused_pool import _stem

    out = tmp_path / "t.mlir"
    assert snow_opt([str(_stem(tmp_path / "stem.onnx", 40)), "-p", "nn-prepare,nn-to-tile,tile-loop-order",
                     "-o", str(out)]) == 0
    return out.read_text()


def _taller_row_groups(body: str) -> str:
    """The fused conv's maps tiles as row groups of 8 rows (2 a CU), every body written empty."""
    tiles = _maps_tiles(body)
    oh = int(re.search(r"out_rows = array<i64: \d+, (\d+)>", tiles[-1][2]).group(1))
    new = [f"tile.maps_tile attributes {{out_rows = array<i64: {y}, {min(y + 8, oh)}>, in_rows = array<i64: 0, 1>, "
           f"overlap = 0 : i64, cu = -1 : i64, cu_rows = 2 : i64}} {{}}" for y in range(0, oh, 8)]
    return _empty_bodies(body[:tiles[0][0]] + "\n    ".join(new) + body[tiles[-1][1]:])


def test_taller_strips_of_a_fused_pool_rederive_its_slots(tmp_path: Path) -> None:
    """A conv with a fused pool, its row groups made taller and every body written empty: the
    ring needs more slots at once, derived with the rest (it was refused: "pool_slots: 5 slots,
    the pool needs 9 rows at once")."""
    text = _fused_stem(tmp_path)
    name = re.search(r"tile\.layer @(\S+) conv", text).group(1)
    assert len(re.search(r"pool_slots = array<i64: ([^>]*)>", text).group(1).split(",")) < 9
    _, before = _cycles(tmp_path, text)
    rc, after = _cycles(tmp_path, _in_layer(text, name, _taller_row_groups))
    assert rc == 0  # bit-exact (_cycles checks it)
    assert after[name] != before[name]


def test_too_few_pool_slots_are_refused_with_the_slots_to_write(tmp_path: Path, capsys) -> None:
    """Taller row groups derived, the old slots written back: refused in one line giving the slots
    that serve the new row groups (the refusal named no value)."""
    from snowir.driver.model_run import load_model
    from snowir.tile.edit import rederive
    from xdsl.printer import Printer
    import io

    text = _fused_stem(tmp_path)
    name = re.search(r"tile\.layer @(\S+) conv", text).group(1)
    old = re.search(r"pool_slots = array<i64: [^>]*>", text).group(0)
    src = tmp_path / "tall.mlir"
    src.write_text(_in_layer(text, name, _taller_row_groups))
    module, _ = load_model(src)
    (layer,) = [op for op in module.walk() if op.name == "tile.layer"]
    rederive(layer)
    derived = f"pool_slots = {layer.pool_slots}"
    printed = io.StringIO()
    Printer(stream=printed).print_op(module)
    edited = re.sub(r"pool_slots = array<i64: [^>]*>", old, printed.getvalue())
    capsys.readouterr()
    rc, _ = _cycles(tmp_path, edited)
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1, err
    assert "the pool needs 9 rows at once" in err and f"write {derived}" in err, err


def _pool_model(path: Path) -> Path:
    """A 3x3/2 max pool over 64 x 56 x 56 (ResNet's): its maps do not fit the buffer (a ring)."""
    g = helper.make_graph([helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[3, 3], strides=[2, 2],
                                            pads=[1, 1, 1, 1])], "pool",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 56, 56])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 28, 28])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def _one_tile(body: str, oh: int, extra: str = "") -> str:
    """The layer's maps tiles as one over all `oh` rows (no ring), body empty, `extra` attributes."""
    tiles = _maps_tiles(body)
    one = (f"tile.maps_tile attributes {{out_rows = array<i64: 0, {oh}>, in_rows = array<i64: 0, 1>, overlap = 0 : i64, "
           f"cu = -1 : i64{extra}}} {{}}")
    return body[:tiles[0][0]] + one + body[tiles[-1][1]:]


SUGGESTING = {  # model, layer, edit, what the refusal says, a value the layer has, how a refusal would suggest it
    "conv: one whole-buffered tile too large": (
        "conv", "conv", lambda b: _one_tile(_header(b, "buffering double", "buffering whole"), 56),
        "exceed the 65536-word buffer (split the tile)", "#tile<buffering whole>", "maps_buffering = whole"),
    "max pool: one whole-buffered strip too large": (
        "pool", "pool", lambda b: _one_tile(b, 28), "exceed the 18 its buffer holds (split the tile)",
        "#tile<buffering whole>", "maps_buffering = whole"),
    "max pool: cu_rows on a broadcast tile": (
        "pool", "pool", lambda b: b.replace("cu = -1 : i64, ring", "cu = -1 : i64, cu_rows = 1 : i64, ring", 1),
        "(remove cu_rows)", "cu = -1 : i64", "cu = -1"),
}


@pytest.mark.parametrize("what", list(SUGGESTING))
def test_refusals_suggest_no_value_already_set(tmp_path: Path, capsys, what: str) -> None:
    """A refusal that names values to write names none the layer already has (a whole-buffered
    tile too large was told "or maps_buffering = whole"; a pool tile with cu = -1 "cu = -1")."""
    model, layer, edit, says, present, suggestion = SUGGESTING[what]
    path = _conv_model(tmp_path / "m.onnx", 64, 16, 56) if model == "conv" else _pool_model(tmp_path / "m.onnx")
    out = tmp_path / "t.mlir"
    assert snow_opt([str(path), "-p", "nn-prepare,nn-to-tile,tile-loop-order", "-o", str(out)]) == 0
    edited = _in_layer(out.read_text(), layer, edit)
    a, b = _layer(edited, layer)
    assert present in edited[a:b]
    capsys.readouterr()
    rc, _ = _cycles(tmp_path, edited)
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1, err
    assert says in err, err
    assert suggestion not in err, err
