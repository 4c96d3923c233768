"""
docs/tutorial.md section 6 ("A tile pass") executed: its code blocks are the repository's
files byte for byte, its shell commands run and succeed, the retiled layers' cycles differ
from the default run (the others' do not), and the output it quotes is what they print.
Sections 2 and 4: the pass they write, run on the example model that has a unit Mul.
"""

from __future__ import annotations

import json
import runpy
import shlex
import sys
import types
from pathlib import Path

import pytest

from snowir.api import parse_mlir
from snowir.dialects import tile
from snowir.tools.snow_opt import main as snow_opt
from snowir.tools.snow_report import main as snow_report
from snowir.tools.snow_run import main as snow_run
from tests.tutorial_util import tutorial_blocks

ROOT = Path(__file__).resolve().parent.parent
TOOLS = {"snow-opt": snow_opt, "snow-run": snow_run, "snow-report": snow_report}


def _blocks(lang: str, number: int = 6) -> list[str]:
    return tutorial_blocks(lang, number)


def test_the_pass_and_its_filecheck_test_are_the_repositorys_files() -> None:
    pass_file, registration = _blocks("python")
    assert pass_file == (ROOT / "passes" / "tile" / "tile_rows.py").read_text()
    assert registration.strip() in (ROOT / "passes" / "__init__.py").read_text()
    (lit,) = _blocks("mlir")
    assert lit == (ROOT / "tests" / "filecheck" / "tile" / "passes" / "tile_rows.mlir").read_text()


def _commands() -> list[list[str]]:
    (sh,) = _blocks("sh")
    return [shlex.split(line, comments=True) for line in sh.splitlines() if shlex.split(line, comments=True)]


def _words(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


def test_the_commands_run_and_show_the_cycle_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    out = []
    for argv in _commands():
        tool, *args = argv
        assert tool in TOOLS, f"docs/tutorial.md section 6 runs {tool}: only {', '.join(TOOLS)} are run here"
        # the model comes from the repository (a path under snowir/); what the commands write stays here
        args = [str(ROOT / a) if a.startswith("snowir/") and (ROOT / a).is_file() else a for a in args]
        capsys.readouterr()
        rc = TOOLS[tool](args)
        captured = capsys.readouterr()
        assert rc == 0, f"{' '.join(argv)}: exit {rc}\n{captured.err}"
        out.append(captured.out)

    # the retiled module (snow-opt -o) and the two reports snow-report compares (A: default, B: retiled)
    (opt,) = [a for a in _commands() if a[0] == "snow-opt"]
    (report,) = [a for a in _commands() if a[0] == "snow-report"]
    module = parse_mlir(tmp_path / opt[opt.index("-o") + 1])
    a, b = (json.loads((tmp_path / p).read_text()) for p in report[1:3])
    assert b["check"]["golden_bit_exact"] is True
    retiled = {layer.sym_name.data for layer in module.ops if isinstance(layer, tile.LayerOp)
               and any(not tile.body_ops(mt) for mt in layer.body.block.ops if isinstance(mt, tile.MapsTileOp))}
    assert retiled, "the pass retiled no layer of the model"
    cycles_a = {layer["name"]: layer["cycles"] for layer in a["layers"]}
    cycles_b = {layer["name"]: layer["cycles"] for layer in b["layers"]}
    assert retiled <= cycles_a.keys() == cycles_b.keys()
    for name in cycles_a:
        if name in retiled:
            assert cycles_b[name] != cycles_a[name], f"{name} was retiled and kept its {cycles_a[name]} cycles"
        else:
            assert cycles_b[name] == cycles_a[name], f"{name} was not retiled: {cycles_a[name]} -> {cycles_b[name]}"

    # the output the section quotes is the output of its commands
    (quoted,) = _blocks("text")
    printed = _words("\n".join(out))
    missing = [" ".join(line) for line in _words(quoted) if line not in printed]
    assert not missing, ("docs/tutorial.md section 6 quotes lines the commands no longer print; their output now:\n"
                         + out[-1])


def test_the_unit_mul_pass_changes_the_example_model_not_digits(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Section 2's pass (its code block, as the file the reader creates) run by section 4's
    check on examples/unit_mul.py's model: the Mul goes, the logits stay; after nn-prepare the
    Mul was a host layer and is gone; on digits_cnn.onnx (no Mul) the pass changes nothing."""
    from xdsl.context import Context

    from snowir.dialects import nn
    from snowir.frontend.onnx_import import import_onnx
    from snowir.nn_util import on_host
    from snowir.passes.pipelines import NNPreparePass

    pass_file = _blocks("python", 2)[0]
    module = types.ModuleType("snowir.passes.nn.drop_unit_mul")
    exec(compile(pass_file, "passes/nn/drop_unit_mul.py", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["examples/unit_mul.py"])
    runpy.run_path(str(ROOT / "examples" / "unit_mul.py"), run_name="__main__")  # writes unit_mul.onnx here
    (check,) = _blocks("python", 4)
    exec(compile(check, "docs/tutorial.md section 4", "exec"), {})

    def host_muls(m) -> int:
        NNPreparePass().apply(Context(), m)
        return sum(1 for op in m.walk() if isinstance(op, nn.MulOp) and on_host(op))

    assert host_muls(import_onnx("unit_mul.onnx")) == 1
    m = import_onnx("unit_mul.onnx")
    module.DropUnitMulPass().apply(Context(), m)
    assert host_muls(m) == 0
    digits = import_onnx(str(ROOT / "snowir" / "data" / "digits_cnn.onnx"))
    before = str(digits)
    module.DropUnitMulPass().apply(Context(), digits)
    assert str(digits) == before
