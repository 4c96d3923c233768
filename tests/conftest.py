"""Shared test set-up: models built once per session in a temporary directory (not the work
tree), and xDSL's process-wide resource-blob table emptied after every test (weights of a
model are hex strings there, never freed otherwise: the suite grew to 9 GB).

The session's temporary files (tempfile's, onnxruntime's, Ray's, the ONNX backend data sets in
ONNX_HOME, child processes') go to a folder under pytest's basetemp (or, with `-p no:tmpdir`, a
folder of its own) that is removed when the session ends, so a run leaves nothing behind in the
system's temporary directory (issue 29: the suite left ~1.4 GB there; issue 40: a
snowir-onnx-home-* folder per session)."""

from __future__ import annotations

import ctypes
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

def _keep_freed_memory() -> None:
    """Let glibc reuse the memory this process frees instead of returning it to the kernel.

    Why: the light models' weights (VGG-19's alone are 548 MB) are built, copied, packed and freed
    over and over, and glibc gives every block over 32 MB its own mmap, returned at free. On a
    virtual machine of the kind CI runs on, touching memory the kernel has just got back costs
    0.2-1.7 s of system time a GB (measured: 1 GB filled three times, 0.24-1.70 s sys each with
    mmap, 0.00 s from a retained heap), and the suite's system time was as large as its user
    time. Every block from the heap (no mmap) and no trimming of its top: the VGG-19 light-model
    test went from 39.6 s to 25.6 s (sys 22.2 s to 10.8 s); a worker keeps its peak size until it
    ends. Outputs are unchanged: this is the allocator's policy only."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: nothing to tune
        return
    m_trim_threshold, m_mmap_max = -1, -4  # malloc.h
    libc.mallopt(m_mmap_max, 0)
    libc.mallopt(m_trim_threshold, 2**31 - 1)


_keep_freed_memory()

# Ray puts AF_UNIX sockets at $TMPDIR/ray/session_<date>_<us>_<pid>/sockets/plasma_store, and
# such a path may be at most 107 bytes long: 68 of them are Ray's own.
_RAY_SOCKET_SUFFIX = 68
_AF_UNIX_MAX = 107
_SAVED = pytest.StashKey[tuple[Path, dict[str, str | None], str | None]]()
_ENV = ("TMPDIR", "RAY_TMPDIR", "ONNX_HOME")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Point TMPDIR (children), tempfile.tempdir (this process) and ONNX_HOME (the ONNX backend
    suite's data sets) at basetemp/t before collection: some test modules make temporary
    folders at import time."""
    # the factory's basetemp (a private attribute, but the only way to reach it before any
    # fixture runs) follows tmp_path_retention_policy, so a killed session is swept later too
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is None:  # -p no:tmpdir: a folder of this session's own
        tmp = Path(tempfile.mkdtemp(prefix="snowir-tests-"))
    else:
        tmp = factory.getbasetemp() / "t"
        tmp.mkdir(exist_ok=True)
    env = {key: os.environ.get(key) for key in _ENV}
    session.config.stash[_SAVED] = (tmp, env, tempfile.tempdir)
    if len(str(tmp)) + _RAY_SOCKET_SUFFIX > _AF_UNIX_MAX and env["RAY_TMPDIR"] is None:
        os.environ["RAY_TMPDIR"] = tempfile.gettempdir()  # a long basetemp: Ray keeps the system's
    os.environ["TMPDIR"] = str(tmp)
    tempfile.tempdir = str(tmp)
    if env["ONNX_HOME"] is None:
        os.environ["ONNX_HOME"] = str(tmp / "onnx-home")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Restore the temporary directory and remove the session's, failed or not (what the
    failing tests need to be looked at is in their tmp_path, kept by the retention policy)."""
    saved = session.config.stash.get(_SAVED, None)
    if saved is None:
        return
    tmp, env, tempdir = saved
    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    tempfile.tempdir = tempdir
    shutil.rmtree(tmp, ignore_errors=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Whole-model tests (`heavy`, most of a minute each) first, then the tests that share an
    xdist group (the ONNX backend suite: one worker's unit of several hundred tests): with two
    pytest-xdist workers, the long units start at once and the short tests fill in around them,
    instead of one long unit starting last and leaving the other worker idle."""
    items.sort(key=lambda item: (item.get_closest_marker("heavy") is None,
                                 item.get_closest_marker("xdist_group") is None))


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("models")
    yield path
    # over 1 GB of weights that a rerun rebuilds: not worth keeping even for a failing session
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
def _fresh_blobs():
    yield
    from snowir.resources import reset_blobs

    reset_blobs()  # the hex strings go with their last reference (no gc.collect(): seconds per test)
