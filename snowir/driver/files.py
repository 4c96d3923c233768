"""Atomic output files: a failing command never leaves half a file behind."""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from snowir.errors import SnowError


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    path = str(path)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_text_atomic(path: str | Path, text: str) -> None:
    write_bytes_atomic(path, text.encode())



def npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def missing_directories(paths: Iterable[str | None]) -> list[str]:
    """The paths whose directory does not exist (`-`, standard output, and None are fine): a
    command checks them all before its work, so a typo costs no run and is named with the rest."""
    return [path for path in paths if path and path != "-" and not Path(path).resolve().parent.is_dir()]


class Outputs:
    """The files a command writes, written together at its end: all of them or none. Every
    target directory is checked first; each file goes to a temporary name beside its target,
    and only when all are written are they renamed into place. `-` is standard output."""

    def __init__(self) -> None:
        self.items: list[tuple[str, bytes]] = []

    def add(self, path: str, data: bytes) -> None:
        self.items.append((path, data))

    def commit(self) -> None:
        bad = missing_directories(path for path, _ in self.items)
        if bad:
            raise SnowError(f"{', '.join(bad)}: no such directory (nothing written)")
        staged: list[tuple[str, str]] = []
        try:
            for path, data in self.items:
                if path == "-":
                    continue
                tmp = f"{path}.tmp{os.getpid()}"
                with open(tmp, "wb") as f:
                    f.write(data)
                staged.append((tmp, path))
            for tmp, path in staged:
                os.replace(tmp, path)
        except OSError as e:
            raise SnowError(f"{e.filename or '?'}: cannot write: {e.strerror} (nothing written)") from None
        finally:
            for tmp, _ in staged:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        for path, data in self.items:
            if path == "-":
                sys.stdout.write(data.decode())


def bench_output(script: str, name: str, out: str | None = None, custom_hw: bool = False) -> Path:
    """Where a bench writes `name`: into `--out DIR` if given; else the tracked
    bench/results/ for the default configuration, and build/bench/ for a run with a custom
    --hw, so a what-if run never overwrites the tracked results. The directory is created."""
    if out:
        folder = Path(out)
    elif custom_hw:
        folder = Path("build") / "bench"
    else:
        folder = Path(script).resolve().parent / "results"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name
