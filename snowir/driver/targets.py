"""
Output targets registered with snow-opt (`-t NAME`).

`snowflake-bin` writes a `.sfb` program image, or for a whole-model lowering (segment images,
link-segments) a model image (snowir/model_image.py). xDSL targets write text streams, so the
target emits the bytes as latin-1 characters (one char per byte) and snow-opt writes
them back out as raw bytes (`write_binary_text`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import IO

from xdsl.dialects.builtin import ModuleOp
from snowir.dialects import snowflake_asm as sf
from snowir.machine.image import ImageError, assemble
from snowir.model_image import model_image, segment_images

BINARY_TARGETS = ("snowflake-bin",)


def emit_snowflake_bin(module: ModuleOp, output: IO[str]) -> None:
    if not segment_images(module) and not any(isinstance(op, sf.ProgramOp) for op in module.ops):
        raise ImageError(_not_assemblable(module))
    data = model_image(module).to_bytes() if segment_images(module) else assemble(module).to_bytes()
    output.write(data.decode("latin-1"))


def _not_assemblable(module: ModuleOp) -> str:
    """Why a module with neither a program nor a whole-model lowering has no image, and what to do."""
    images = sum(1 for op in module.ops if isinstance(op, sf.ImageOp))
    if images:
        return (f"{images} per-layer snowflake_asm.image ops (snowflake-lower{{whole-model=false}}): a .sfb holds "
                "one program or a whole-model lowering; lower with plain -p snowflake-lower, or run it with snow-run")
    return "not lowered to snowflake_asm: add -p snowflake-lower"


def all_targets() -> dict[str, Callable[[ModuleOp, IO[str]], None]]:
    return {"snowflake-bin": emit_snowflake_bin}


def write_binary_text(path: str | None, text: str) -> None:
    data = text.encode("latin-1")
    if path is None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
