"""
The deployable model image (`.sfb`, magic `SFM1`): what `snow-opt model.onnx -p snowflake-lower
-t snowflake-bin` writes for a whole-model lowering, and `snow-run model.sfb` runs. Layout in
docs/isa.md ("Model image").

It holds every device segment's program image (the `SFB1` bytes of `ProgramImage`: code, layer
markers, the DRAM plan's segments with the weights, the machine record) and the host's part as
MLIR text: the lowered module without its segment images, i.e. `@main` with the host layers, the
nn ops naming their segment and layer, and the constants the golden model checks against
(zlib-compressed). Disassembled (`snow-opt model.sfb`), it is the lowered module again, and
assembling that text gives the same bytes.
"""

from __future__ import annotations

import io
import struct
import zlib
from dataclasses import dataclass

from xdsl.dialects.builtin import Builtin, ModuleOp, StringAttr
from xdsl.printer import Printer

from snowir import api
from snowir.dialects import snowflake_asm as sf
from snowir.errors import SnowError
from snowir.machine.image import MACHINE_RECORD, ProgramImage, assemble, disassemble

MODEL_MAGIC = b"SFM1"
MODEL_VERSION = 1


@dataclass
class ModelImage:
    host: str
    """The lowered module without its segment images, as MLIR text."""
    programs: list[ProgramImage]
    """The segment programs in graph order (image `@segment<i>` is program i)."""

    def to_bytes(self) -> bytes:
        host = zlib.compress(self.host.encode(), 6)
        out = [MODEL_MAGIC, struct.pack("<HII", MODEL_VERSION, len(self.programs), len(host)), host]
        for program in self.programs:
            blob = program.to_bytes()
            out += [struct.pack("<I", len(blob)), blob]
        return b"".join(out)

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "<sfb>") -> ModelImage:
        try:
            if data[:4] != MODEL_MAGIC:
                raise ValueError("bad magic, not a model image")
            version, n, host_len = struct.unpack_from("<HII", data, 4)
            if version != MODEL_VERSION:
                raise ValueError(f"unsupported model image version {version}")
            pos = 14
            host = zlib.decompress(data[pos:pos + host_len]).decode()
            pos += host_len
            programs = []
            for i in range(n):
                (size,) = struct.unpack_from("<I", data, pos)
                pos += 4
                if pos + size > len(data):
                    raise ValueError(f"program {i} truncated")
                programs.append(ProgramImage.from_bytes(data[pos:pos + size], f"{source} (program {i})"))
                pos += size
            if pos != len(data):
                raise ValueError(f"{len(data) - pos} trailing bytes")
        except (struct.error, zlib.error, UnicodeDecodeError, ValueError) as e:
            raise SnowError(f"{source}: truncated or corrupt model image ({e})") from None
        return cls(host, programs)


def is_model_image(data: bytes) -> bool:
    return data[:4] == MODEL_MAGIC


def segment_images(module: ModuleOp) -> list[sf.ImageOp]:
    return [op for op in module.ops if isinstance(op, sf.ImageOp) and "segment" in op.attributes]


def host_text(module: ModuleOp) -> str:
    """The module without its segment images, printed with the resources it uses."""
    images = segment_images(module)
    anchors = [image.next_op for image in images]
    for image in images:
        image.detach()
    try:
        out = io.StringIO()
        printer = Printer(stream=out)
        printer.print_op(module)
        printer.print_metadata([Builtin])
        return out.getvalue()
    finally:
        for image, anchor in zip(images, anchors):
            if anchor is not None and anchor.parent is module.body.block:
                module.body.block.insert_op_before(image, anchor)
            else:
                module.body.block.add_op(image)


def model_image(module: ModuleOp) -> ModelImage:
    """The model image of a whole-model lowering (link-segments made its segment images)."""
    images = segment_images(module)
    if not images:
        raise SnowError("not a whole-model lowering: no segment images (run snowflake-lower, or "
                        "allocate-dram ... link-segments)")
    others = [op for op in module.ops if isinstance(op, sf.ImageOp | sf.ProgramOp) and op not in images]
    if others:
        raise SnowError(f"the module mixes segment images with other programs (@{others[0].sym_name.data})")
    programs = [assemble(image) for image in images]
    return ModelImage(host_text(module), programs)


def model_module(image: ModelImage, source: str = "<sfb>") -> ModuleOp:
    """The lowered module of a model image: its host part and one segment image per program."""
    module = api.parse_text(image.host, source)
    for index, program in enumerate(image.programs):
        disassembled = disassemble(program)
        attrs = {"dram": StringAttr("model"), "segment": StringAttr(str(index))}
        recorded = disassembled.attributes.get(MACHINE_RECORD)
        if recorded is not None:
            attrs["hw"] = recorded
        ops = list(disassembled.body.block.ops)
        for op in ops:
            op.detach()
        module.body.block.add_op(sf.ImageOp(program.name, ops, attrs))
    return module

