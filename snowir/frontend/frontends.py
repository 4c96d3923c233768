"""Input frontends registered with snow-opt by file extension (`.sfb` program images, `.onnx` models)."""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, Any

from xdsl.dialects.builtin import ModuleOp
from snowir.frontend.onnx_import import OnnxImportError, import_model, parse_input_shape
from snowir.machine.image import ProgramImage, disassemble


def parse_sfb(stream: IO[bytes], source: str = "<sfb>") -> ModuleOp:
    return disassemble(ProgramImage.from_bytes(stream.read(), source))


def all_frontends(tool: Any) -> dict[str, Callable[[IO[bytes]], ModuleOp]]:
    def sfb(stream: IO[bytes]) -> ModuleOp:
        # Segment data prints as builtin dense_resource blobs: the printer needs the
        # builtin dialect loaded, which parsing text would have done.
        tool.ctx.get_optional_dialect("builtin")
        tool.ctx.get_optional_dialect("snowflake_asm")
        return parse_sfb(stream, tool.get_input_name())

    def onnx_frontend(stream: IO[bytes]) -> ModuleOp:
        import onnx


        tool.ctx.get_optional_dialect("builtin")
        tool.ctx.get_optional_dialect("nn")
        source = tool.get_input_name()
        try:
            model = onnx.load_model_from_string(stream.read())
        except Exception as e:  # noqa: BLE001 - protobuf decode errors vary
            raise OnnxImportError(f"{source}: not an ONNX model ({type(e).__name__})") from None
        spec = getattr(tool.args, "input_shape", None)
        shapes = parse_input_shape(spec) if spec else None
        return import_model(model, source, shapes)

    return {"sfb": sfb, "onnx": onnx_frontend}
