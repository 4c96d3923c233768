"""A test session leaves nothing in the system's temporary directory (conftest.py): its own
temporary files, ONNX_HOME's data sets and children's files go to a folder removed at the end."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

TESTS = Path(__file__).parent


def test_onnx_home_is_in_the_session_folder(tmp_path_factory: pytest.TempPathFactory) -> None:
    """ONNX_HOME (set before collection) and the temporary directory are under this run's
    basetemp (a pytest-xdist worker's is in the controller's, where ONNX_HOME was set)."""
    base = tmp_path_factory.getbasetemp()
    run = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    assert Path(tempfile.gettempdir()) == base / "t"
    assert Path(os.environ["ONNX_HOME"]).is_relative_to(run)


def test_a_session_without_the_tmpdir_plugin_leaves_nothing(tmp_path: Path) -> None:
    """Issue 40: every session left a snowir-onnx-home-* folder behind (test_onnx_backend made it
    at import time). Collecting that module with pytest's tmpdir plugin off (no basetemp at all)
    leaves the system's temporary directory as it was."""
    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("ONNX_HOME", "RAY_TMPDIR")}
    env["TMPDIR"] = str(system_tmp)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:tmpdir",
                           "-p", "no:cacheprovider", "-n", "0", str(TESTS / "test_onnx_backend.py")],
                          capture_output=True, text=True, env=env, cwd=TESTS.parent)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(p.name for p in system_tmp.iterdir()) == []
