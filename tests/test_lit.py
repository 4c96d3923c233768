"""Runs the FileCheck suite (tests/filecheck) through lit once, in parallel, and reports every lit
file as its own pytest test, so a failing file names itself and shows only its own output."""

from __future__ import annotations

import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

FILECHECK_DIR = Path(__file__).parent / "filecheck"
LIT_FILES = sorted(p.relative_to(FILECHECK_DIR).as_posix() for p in FILECHECK_DIR.rglob("*.mlir")
                   if "Inputs" not in p.parts and "Output" not in p.parts)


@pytest.fixture(scope="module")
def lit_results(tmp_path_factory) -> tuple[dict[str, str | None], str]:
    """{relative path: failure text or None} from one lit run, and lit's own output."""
    lit = shutil.which("lit")
    cmd = [lit] if lit else [sys.executable, "-m", "lit"]
    xml = tmp_path_factory.mktemp("lit") / "lit.xml"
    proc = subprocess.run([*cmd, "-sv", "--xunit-xml-output", str(xml), str(FILECHECK_DIR)],
                          capture_output=True, text=True)
    results: dict[str, str | None] = {}
    if xml.exists():
        for case in ET.parse(xml).getroot().iter("testcase"):
            folder = case.get("classname", "").split(".", 1)[1] if "." in case.get("classname", "") else ""
            name = f"{folder}/{case.get('name')}" if folder else case.get("name", "")
            failure = case.find("failure")
            results[name] = None if failure is None else (failure.text or failure.get("message") or "failed")
    return results, proc.stdout[-5000:] + proc.stderr[-2000:]


def test_every_lit_file_is_collected(lit_results) -> None:
    results, output = lit_results
    assert sorted(results) == LIT_FILES, output


@pytest.mark.parametrize("path", LIT_FILES)
def test_lit(path: str, lit_results) -> None:
    results, output = lit_results
    assert path in results, f"lit did not run {path}:\n{output}"
    assert results[path] is None, results[path][-20000:]
