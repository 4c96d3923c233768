"""Atomic output files: a failing command never leaves half a file behind."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np


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


def save_npy_atomic(path: str | Path, array: np.ndarray) -> None:
    buf = io.BytesIO()
    np.save(buf, array)
    write_bytes_atomic(path, buf.getvalue())


def save_npz_atomic(path: str | Path, arrays: dict[str, np.ndarray]) -> None:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    write_bytes_atomic(path, buf.getvalue())
