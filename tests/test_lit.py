"""The FileCheck suite (tests/filecheck): every lit file is its own pytest test, its RUN lines
run in this process (lit_inproc.py: lit's parser and substitutions, filecheck's matcher, snow-opt
and snow-run called as functions), so a failing file names itself and shows only its own output,
and the files spread over pytest-xdist's workers like any other test."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lit_inproc import FILECHECK_DIR, discover, relative_name, run_test

LIT_FILES = sorted(p.relative_to(FILECHECK_DIR).as_posix() for p in FILECHECK_DIR.rglob("*.mlir")
                   if "Inputs" not in p.parts and "Output" not in p.parts)
TESTS = {relative_name(t): t for t in discover()}


def test_every_lit_file_is_collected() -> None:
    """lit (with lit.cfg) finds every .mlir file under tests/filecheck but Inputs/."""
    assert sorted(TESTS) == LIT_FILES


@pytest.mark.parametrize("path", LIT_FILES)
def test_lit(path: str, tmp_path: Path) -> None:
    assert path in TESTS, f"lit does not find {path}"
    passed, log = run_test(TESTS[path], tmp_path)
    assert passed, log[-20000:]


def test_a_failing_check_fails(tmp_path: Path) -> None:
    """The in-process runner is not vacuous: a CHECK that does not match, a `not` before a
    command that succeeds, and a failure inside a pipeline (pipefail) each fail the file."""
    cases = {
        "bad_check.mlir": "// RUN: snow-opt %s | filecheck %s\n// CHECK: no.such.op\nbuiltin.module {}\n",
        "bad_not.mlir": "// RUN: not snow-opt %s | filecheck %s\n// CHECK: builtin.module\nbuiltin.module {}\n",
        "bad_pipe.mlir": "// RUN: snow-opt %s -p no-such-pass | filecheck %s --allow-empty\n// CHECK-NOT: x\n"
                         "builtin.module {}\n",
    }
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(FILECHECK_DIR / "lit.cfg", suite / "lit.cfg")
    for name, text in cases.items():
        (suite / name).write_text(text)
    tests = {relative_name(t): t for t in discover([suite])}
    assert sorted(tests) == sorted(cases)
    for name, test in tests.items():
        passed, log = run_test(test, tmp_path)
        assert not passed, f"{name} passed:\n{log}"
    good = suite / "good.mlir"
    good.write_text("// RUN: snow-opt %s | filecheck %s\n// CHECK: builtin.module\nbuiltin.module {}\n")
    passed, log = run_test(discover([good])[0], tmp_path)
    assert passed, log


def test_lit_from_a_shell() -> None:
    """`lit tests/filecheck/...` (lit's own shell, a process per command) still works."""
    # The interpreter's own scripts first: the test runs as `.venv/bin/python -m pytest` without an
    # activated venv as well, where `lit`, `snow-opt` and `filecheck` are only beside the interpreter.
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")])}
    lit = shutil.which("lit", path=env["PATH"])
    assert lit, f"no lit script beside {sys.executable} or on PATH"
    one = FILECHECK_DIR / "nn" / "passes" / "fuse_relu.mlir"
    proc = subprocess.run([lit, "-q", str(one)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
