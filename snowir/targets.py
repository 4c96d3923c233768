"""Output targets registered with snow-opt (`-t NAME`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import IO

from xdsl.dialects.builtin import ModuleOp


def all_targets() -> dict[str, Callable[[ModuleOp, IO[str]], None]]:
    return {}


def write_binary_text(path: str, text: str) -> None:
    raise NotImplementedError
