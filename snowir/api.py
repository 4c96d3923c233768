"""
The Python API: everything the commands do, as functions.

    from snowir import api
    image, module = api.load_program("prog.mlir")      # or a .sfb image
    result = api.run_program(image, engine="fast")
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser
from xdsl.utils.exceptions import ParseError

from snowir.dialects import all_dialects, snowflake_asm as sf
from snowir.errors import SnowError, one_line, unreadable
from snowir.fixedpoint import quantize
from snowir.hw import SnowflakeConfig
from snowir.machine.image import ProgramImage, assemble, disassemble
from snowir.machine.run import DEFAULT_MAX_INSTRUCTIONS, Engine, RunResult, run_image
from snowir.resources import reset_blobs



NPY_MAGIC = b"\x93NUMPY"


def load_npy(path: str | Path, what: str = "input array") -> np.ndarray:
    """A `.npy` array, or one line naming the file: a text file is not an .npy (numpy would
    call it pickled data), a missing one is `no such file`."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(NPY_MAGIC))
    except OSError as e:
        raise unreadable(path, e) from None
    if head != NPY_MAGIC:
        raise SnowError(f"{path}: not an .npy file (numpy.save writes one)")
    try:
        return np.load(path)
    except (OSError, ValueError, EOFError) as e:
        raise SnowError(f"{path}: cannot read {what}: {str(e).splitlines()[0] if str(e) else e}") from None

def context() -> Context:
    """A context with builtin, func and the snowir dialects (what snow-opt registers)."""
    from xdsl.universe import Universe

    ctx = Context()
    for name, factory in Universe.get_multiverse().all_dialects.items():
        ctx.register_dialect(name, factory)
    for name, factory in all_dialects().items():
        if name not in ctx.registered_dialect_names:  # installed, the multiverse has them already
            ctx.register_dialect(name, factory)
    return ctx


def parse_mlir(path: str | Path, ctx: Context | None = None) -> ModuleOp:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise unreadable(path, e) from None
    try:
        module = parse_text(text, str(path), ctx)
        module.verify()
    except Exception as e:  # noqa: BLE001 - becomes a one-line diagnostic
        if isinstance(e, ParseError) or type(e).__name__ in ("VerifyException", "DiagnosticException"):
            raise SnowError(one_line(e, str(path))) from None
        raise
    return module


def parse_text(text: str, name: str = "<text>", ctx: Context | None = None) -> ModuleOp:
    """Parse MLIR text (any snowir level); blobs of earlier parses are dropped (resources.reset_blobs)."""
    reset_blobs()
    return Parser(ctx or context(), text, name).parse_module()


def level_of(module: ModuleOp) -> str:
    """The lowest dialect level present: snowflake_asm, tile or nn."""
    names = {op.name.split(".")[0] for op in module.walk()}
    for level in ("snowflake_asm", "tile", "nn"):
        if level in names:
            return level
    return "builtin"


def load_program(path: str | Path, hw: SnowflakeConfig | None = None) -> tuple[ProgramImage, ModuleOp]:
    """A snowflake_asm-level `.mlir` or a `.sfb` image, as (image, module); a `.mlir` program is
    assembled for `hw` (default: the ZC706 build) unless it records its machine."""
    path = Path(path)
    if path.suffix == ".sfb":
        try:
            data = path.read_bytes()
        except OSError as e:
            raise unreadable(path, e) from None
        image = ProgramImage.from_bytes(data, str(path))
        return image, disassemble(image)
    module = parse_mlir(path)
    level = level_of(module)
    if level != "snowflake_asm":
        raise SnowError(f"{path}: a {level}-level module; load_program takes snowflake_asm programs and .sfb "
                        f"images (snow-run, or snowir.driver.model_api.run_model_on_device, lowers and runs {level} modules)")
    try:
        return assemble(module, hw), module
    except SnowError as e:
        raise SnowError(f"{path}: {e}") from None


def read_input(path: str | Path, image: ProgramImage) -> dict[str, np.ndarray]:
    inputs = image.of_kind(sf.SegmentKind.INPUT)
    if len(inputs) != 1:
        raise SnowError(f"{path}: --input needs a program with one input segment, @{image.name} has {len(inputs)}")
    seg = inputs[0]
    x = load_npy(path)
    if x.size != seg.size // 2:
        raise SnowError(f"{path}: input has {x.size} elements, segment @{seg.name} holds {seg.size // 2}")
    if np.issubdtype(x.dtype, np.floating):
        words = quantize(x.ravel(), image.frac_bits)
    elif np.issubdtype(x.dtype, np.integer):
        if x.min(initial=0) < -32768 or x.max(initial=0) > 32767:
            raise SnowError(f"{path}: integer input must fit 16-bit words")
        words = x.ravel().astype(np.int16)
    else:
        raise SnowError(f"{path}: input dtype {x.dtype} is neither float nor integer")
    return {seg.name: words}


def run_program(image: ProgramImage, module: ModuleOp | None = None, hw: SnowflakeConfig | None = None,
                engine: Engine = "fast", inputs: dict[str, np.ndarray] | None = None,
                record: bool = False, progress=None, max_instructions: int | None = DEFAULT_MAX_INSTRUCTIONS) -> RunResult:
    return run_image(image, hw, engine, inputs, record, module, max_instructions, progress=progress)
