"""Provenance of instructions (issue 29): every instruction lowering makes carries its ONNX node,
its layer and the part of the layer (maps strip, kernel tile, load) as an MLIR location; labels
are named after the part they loop in; faults name where the instruction came from."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from snowir import api
from snowir.machine.image import assemble
from snowir.tools.snow_opt import main as snow_opt
from snowir.tools.snow_run import main as snow_run
from tests.onnx_util import model, rand

INSTRUCTION = re.compile(r"^\s*snowflake_asm\.(?!segment|image|program|label)\w+ ")


def two_layers() -> onnx.ModelProto:
    """A conv + relu and a max pool, with node names an exporter would give."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="backbone/Conv_0", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="backbone/Relu_1"),
             helper.make_node("MaxPool", ["r"], ["y"], name="backbone/MaxPool_2", kernel_shape=[2, 2],
                              strides=[2, 2])]
    return model(nodes, {"x": [1, 16, 12, 12]}, {"y": [1, 32, 6, 6]},
                 {"w": rand(32, 16, 3, 3, scale=0.1), "b": rand(32, seed=1, scale=0.1)})


@pytest.fixture(scope="module")
def lowered(tmp_path_factory) -> tuple[Path, str]:
    path = tmp_path_factory.mktemp("prov") / "two.onnx"
    onnx.save(two_layers(), path)
    out = path.with_suffix(".mlir")
    assert snow_opt([str(path), "-p", "snowflake-lower", "--print-debuginfo", "-o", str(out)]) == 0
    return path, out.read_text()


def test_instructions_name_their_onnx_node(lowered) -> None:
    _, text = lowered
    lines = [line for line in text.splitlines() if INSTRUCTION.match(line)]
    assert len(lines) > 100
    named = [line for line in lines if 'loc("backbone/' in line]
    assert len(named) >= 0.95 * len(lines), [line for line in lines if line not in named][:5]
    # the layer and its part inside the node's location, for loads as for kernel tiles
    assert re.search(r'loc\("backbone/Conv_0"\("\S+\.strip0[.\w]*ktile0"\)\)', text)
    assert re.search(r'snowflake_asm\.ld maps .* loc\("backbone/\w+"\("\S+\.load_maps\.rows\d+_\d+"\)\)', text)
    assert re.search(r'snowflake_asm\.ld weights .* loc\("backbone/Conv_0"\("\S+\.load_weights\.', text)


def test_labels_are_named_after_what_they_loop_over(lowered) -> None:
    _, text = lowered
    labels = re.findall(r'snowflake_asm\.label @"?([\w./]+)"?', text)
    assert '@"backbone/Conv_0.strip0.ktile0.' in text  # an exporter's node name, quoted as MLIR does
    loops = [name for name in labels if name.count(".") >= 2]  # <layer>.<part>...<loop><n>
    assert loops and all(re.search(r"\.(strip|tile|group)\d+", name) for name in loops), labels[:8]
    assert not [name for name in labels if re.fullmatch(r"[A-Z]+\d+", name)]  # no bare @X0 / @PXP0 left


def test_locations_parse_back_and_reach_the_image(lowered) -> None:
    _, text = lowered
    module = api.parse_text(text)
    images = [op for op in module.walk() if op.name == "snowflake_asm.image"]
    image = assemble(images[0])
    assert image.sources and sum(s is not None for s in image.sources) >= 0.95 * len(image.sources)
    assert any(s and s.endswith("(ONNX node backbone/Conv_0)") for s in image.sources)


def test_a_fault_names_the_layer_part_and_node(lowered, capsys) -> None:
    path, _ = lowered
    for engine in ("fast", "reference"):
        assert snow_run([str(path), "--quiet", "--engine", engine, "--max-instructions", "200"]) == 1
    first, second = capsys.readouterr().err.strip().splitlines()
    assert first == second  # both engines say the same
    assert re.search(r"machine fault at pc \d+ \(snowflake_asm\.\w+.*\) in \S+ \(ONNX node backbone/\w+\): "
                     r"instruction limit 200 reached", first), first


def test_shared_programs_keep_their_own_layer(tmp_path: Path) -> None:
    """Equal layers share one generated program (cloned): each clone names its own layer and node."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="A", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c", "w2", "b"], ["y"], name="B", pads=[1, 1, 1, 1])]
    m = model(nodes, {"x": [1, 16, 8, 8]}, {"y": [1, 16, 8, 8]},
              {"w": rand(16, 16, 3, 3, scale=0.1), "w2": rand(16, 16, 3, 3, seed=2, scale=0.1),
               "b": np.zeros(16, np.float32)})
    path = tmp_path / "ab.onnx"
    onnx.save(m, path)
    out = tmp_path / "ab.mlir"
    assert snow_opt([str(path), "-p", "snowflake-lower{whole-model=false}", "--print-debuginfo", "-o", str(out)]) == 0
    text = out.read_text()
    a = re.findall(r'loc\("A"\("(\w+)[.")]', text)
    b = re.findall(r'loc\("B"\("(\w+)[.")]', text)
    assert a and b and set(a) != set(b)  # each node's instructions name its own layer


def test_profile_names_parts_and_instructions(capsys) -> None:
    """snow-run --profile: cycles by layer part and the hottest instructions, from the reference
    engine; the parts' cycles add up to the run's control-pipeline time."""
    digits = Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx"
    assert snow_run([str(digits), "--quiet", "--profile"]) == 0
    out = capsys.readouterr().out
    head, rows = out.split("hottest instructions")
    head, kinds = head.split("cycles by kind of part")
    total = int(re.search(r"stalls included; ([\d,]+) cycles\)", head).group(1).replace(",", ""))
    parts = {m.group(1): int(m.group(2).replace(",", "")) for m in
             re.finditer(r"^(\S+ \(ONNX node \w+\))\s+([\d,]+)\s", head, re.M)}
    assert "conv2.strip0.ktile0 (ONNX node conv2)" in parts and total > 2000
    # the same parts with their strip / tile numbers folded add up to the same cycles
    folded = {m.group(1): int(m.group(2).replace(",", "")) for m in
              re.finditer(r"^(\S+ \(ONNX node \w+\))\s+([\d,]+)\s", kinds, re.M)}
    assert sum(cycles for part, cycles in parts.items() if part.startswith("conv2.strip")) == \
        sum(cycles for kind, cycles in folded.items() if kind.startswith("conv2.strip*"))
    assert re.search(r"snowflake_asm\.vmov coop bias r\d+  \[conv2\.strip0\.ktile\d", rows)
    assert snow_run([str(digits), "--quiet", "--profile", "pool*"]) == 0
    only = capsys.readouterr().out.split("hottest instructions")[0]
    assert "pool1.tile0" in only and "conv2" not in only
    assert snow_run([str(digits), "--quiet", "--profile", "--engine", "golden"]) == 1
    assert "not with --engine golden" in capsys.readouterr().err


def test_trace_events_name_their_part_on_both_engines(tmp_path: Path) -> None:
    import json

    digits = Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx"
    spans = {}
    for engine in ("fast", "reference"):
        trace = tmp_path / f"{engine}.json"
        assert snow_run([str(digits), "--quiet", "--engine", engine, "--trace", str(trace)]) == 0
        spans[engine] = [(e["name"], e.get("args", {}).get("part")) for e in json.loads(trace.read_text())["traceEvents"]
                         if e["ph"] == "X"]
    assert spans["fast"] == spans["reference"]
    first = next(part for name, part in spans["fast"] if name == "LD maps 48 B")
    assert first == "conv1.load_maps.group0 (ONNX node conv1)"
    assert ("LD maps 48 B", "conv1.group0.ktile0.load_maps.group1 (ONNX node conv1)") in spans["fast"]  # a prefetch
    assert sum(part is not None for _, part in spans["fast"]) >= 0.9 * len(spans["fast"])
