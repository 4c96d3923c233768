"""
The suite's `--dist loadgroup` (pyproject addopts) sends each `xdist_group` to one worker: the
ONNX backend suite builds its cases once, the fuzzer's summary re-runs no batch, a light model is
built once. Under pytest 9.2 with pytest-xdist 3.8 the group suffix xdist writes (`item._nodeid`)
was ignored, every group was split over both workers, and nothing said so.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

GROUPED = '''
import pytest
pytestmark = pytest.mark.xdist_group("one")

@pytest.mark.parametrize("i", range(8))
def test_member(i):
    pass
'''


def test_a_group_runs_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    run = subprocess.run([sys.executable, "-m", "pytest", "-vv", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider",
                          "-c", "/dev/null", "--rootdir", str(tmp_path), str(tmp_path / "test_grouped.py")],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    workers = set(re.findall(r"\[(gw\d+)\] .*PASSED .*test_member\[\d\]@one", run.stdout))
    assert len(workers) == 1, run.stdout[-3000:]
