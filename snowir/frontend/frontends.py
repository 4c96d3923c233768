"""Input frontends registered with snow-opt by file extension (`.sfb` program images, `.onnx` models)."""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, Any

from xdsl.dialects.builtin import ModuleOp
from snowir.frontend.onnx_import import OnnxImportError, import_model, parse_input_shape
from snowir.machine.image import ProgramImage, disassemble
from snowir.model_image import ModelImage, is_model_image, model_module


def parse_sfb(stream: IO[bytes], source: str = "<sfb>") -> ModuleOp:
    data = stream.read()
    if is_model_image(data):
        return model_module(ModelImage.from_bytes(data, source), source)
    return disassemble(ProgramImage.from_bytes(data, source))


def all_frontends(tool: Any) -> dict[str, Callable[[IO[bytes]], ModuleOp]]:
    def sfb(stream: IO[bytes]) -> ModuleOp:
        # Segment data prints as builtin dense_resource blobs: the printer needs the
        # builtin dialect loaded, which parsing text would have done.
        tool.ctx.get_optional_dialect("builtin")
        tool.ctx.get_optional_dialect("snowflake_asm")
        tool.ctx.get_optional_dialect("nn")  # a model image's host part
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
