"""Input frontends registered with snow-opt by file extension."""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, Any

from xdsl.dialects.builtin import ModuleOp


def all_frontends(tool: Any) -> dict[str, Callable[[IO[bytes]], ModuleOp]]:
    return {}
