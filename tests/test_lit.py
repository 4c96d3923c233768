"""Runs the FileCheck suite (tests/filecheck) through lit, so one pytest command runs everything."""

import shutil
import subprocess
import sys
from pathlib import Path

FILECHECK_DIR = Path(__file__).parent / "filecheck"


def test_lit_suite() -> None:
    lit = shutil.which("lit")
    cmd = [lit] if lit else [sys.executable, "-m", "lit"]
    proc = subprocess.run([*cmd, "-sv", str(FILECHECK_DIR)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-20000:] + proc.stderr[-5000:]
    assert "Failed" not in proc.stdout
