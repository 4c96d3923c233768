"""
Program images: the assembler (snowflake_asm module -> image), the disassembler
(image -> module) and the `.sfb` file format. Layout in docs/isa.md ("Program image").

An image is what the host hands to Snowflake: the instruction words (placed in DRAM
at `code_base`, 4 KB aligned after the data) and the DRAM segments (inputs, outputs,
weights, scratch), with initial contents where the program has them.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.dialects.builtin import (DenseIntOrFPElementsAttr, DenseResourceAttr, DictionaryAttr, FloatAttr, IntegerAttr,
                                   IntegerType, ModuleOp, NameLoc, StringAttr, f64, i64)
from xdsl.ir import Attribute, Operation
from xdsl.utils.exceptions import VerifyException

from snowir.dialects import snowflake_asm as sf
from snowir.errors import SnowError
from snowir.hw import CODE_ALIGN, DEFAULT, SnowflakeConfig, select_bits
from snowir.machine.encoding import EncodingError, branch_label, decode, encode, layout
from snowir.resources import get_blob, int16_resource

MAGIC = b"SFB1"
VERSION = 3
"""2: the configuration the program was built for (hw.CODE_FIELDS, JSON) follows the name; 3: a
table of layer markers follows it (written only by programs that have markers, so a program
without them keeps its version-2 bytes); 1 reads too."""
_KIND_CODE = {sf.SegmentKind.INPUT: 0, sf.SegmentKind.OUTPUT: 1, sf.SegmentKind.DATA: 2,
              sf.SegmentKind.SCRATCH: 3}
_KIND_OF = {v: k for k, v in _KIND_CODE.items()}


class ImageError(SnowError):
    pass


@dataclass
class Segment:
    name: str
    kind: sf.SegmentKind
    address: int
    size: int
    data: bytes | None = None

    @property
    def end(self) -> int:
        return self.address + self.size


@dataclass(frozen=True)
class Marker:
    """Where a layer's code starts in a whole-model program (link-segments): the machine
    attributes what happens from `pc` on to `name`; `facts` are what the report says of it."""

    pc: int
    name: str
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass
class ProgramImage:
    name: str
    frac_bits: int
    code: np.ndarray  # uint32 words
    code_base: int
    segments: list[Segment] = field(default_factory=list)
    built_for: dict[str, Any] | None = None
    """The hw.CODE_FIELDS of the configuration the program was compiled for; None: not recorded
    (hand-written assembly, version-1 images)."""
    markers: list[Marker] = field(default_factory=list)
    sources: tuple[str | None, ...] = field(default=(), compare=False, repr=False)
    """Per pc, where the instruction came from (its location: layer part and ONNX node); not in
    the binary, so empty for a program read from a .sfb."""

    def source(self, pc: int | None) -> str | None:
        return self.sources[pc] if pc is not None and 0 <= pc < len(self.sources) else None

    def check_machine(self, hw: SnowflakeConfig) -> None:
        """Refuse, in one line, a machine this program is not correct for."""
        if self.built_for is not None:
            why = hw.code_mismatch(self.built_for)
            if why is not None:
                raise ImageError(f"program @{self.name} was {why}: recompile it with that --hw")

    @property
    def code_end(self) -> int:
        return self.code_base + 4 * len(self.code)

    def segment(self, name: str) -> Segment:
        for s in self.segments:
            if s.name == name:
                return s
        raise ImageError(f"program @{self.name} has no segment @{name}")

    def of_kind(self, kind: sf.SegmentKind) -> list[Segment]:
        return [s for s in self.segments if s.kind == kind]

    # ------------------------------------------------------------------ .sfb bytes
    def to_bytes(self) -> bytes:
        name = self.name.encode()
        built = json.dumps(self.built_for, separators=(",", ":")).encode() if self.built_for is not None else b""
        out = [MAGIC, struct.pack("<HHIII", VERSION if self.markers else 2, self.frac_bits, self.code_base,
                                  len(self.code), len(self.segments)),
               struct.pack("<H", len(name)), name, struct.pack("<I", len(built)), built]
        if self.markers:
            out.append(struct.pack("<I", len(self.markers)))
            for m in self.markers:
                mname, facts = m.name.encode(), json.dumps(m.facts, sort_keys=True, separators=(",", ":")).encode()
                out += [struct.pack("<IH", m.pc, len(mname)), mname, struct.pack("<I", len(facts)), facts]
        for s in self.segments:
            sname = s.name.encode()
            out.append(struct.pack("<BBH", _KIND_CODE[s.kind], int(s.data is not None), len(sname)))
            out.append(sname)
            out.append(struct.pack("<II", s.address, s.size))
        out.append(np.asarray(self.code, dtype="<u4").tobytes())
        for s in self.segments:
            if s.data is not None:
                out.append(s.data)
        return b"".join(out)

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "<sfb>") -> ProgramImage:
        try:
            return cls._from_bytes(data)
        except (struct.error, UnicodeDecodeError, KeyError, ValueError) as e:
            raise ImageError(f"{source}: truncated or corrupt program image ({e})") from None

    @classmethod
    def _from_bytes(cls, data: bytes) -> ProgramImage:
        if data[:4] != MAGIC:
            raise ValueError("bad magic, not a .sfb program image")
        version, frac, code_base, n_code, n_seg = struct.unpack_from("<HHIII", data, 4)
        if version not in (1, 2, VERSION):
            raise ValueError(f"unsupported version {version}")
        pos = 4 + 16
        (name_len,) = struct.unpack_from("<H", data, pos)
        pos += 2
        name = data[pos:pos + name_len].decode()
        pos += name_len
        built_for = None
        if version >= 2:
            (built_len,) = struct.unpack_from("<I", data, pos)
            pos += 4
            if built_len:
                built_for = json.loads(data[pos:pos + built_len].decode())
                if not isinstance(built_for, dict):
                    raise ValueError("the recorded configuration is not a JSON object")
                pos += built_len
        markers: list[Marker] = []
        if version >= 3:
            (n_markers,) = struct.unpack_from("<I", data, pos)
            pos += 4
            for _ in range(n_markers):
                pc, mlen = struct.unpack_from("<IH", data, pos)
                pos += 6
                mname = data[pos:pos + mlen].decode()
                pos += mlen
                (flen,) = struct.unpack_from("<I", data, pos)
                pos += 4
                facts = json.loads(data[pos:pos + flen].decode())
                pos += flen
                markers.append(Marker(pc, mname, facts))
        headers: list[tuple[sf.SegmentKind, bool, str, int, int]] = []
        for _ in range(n_seg):
            kind, has_data, slen = struct.unpack_from("<BBH", data, pos)
            pos += 4
            sname = data[pos:pos + slen].decode()
            pos += slen
            address, size = struct.unpack_from("<II", data, pos)
            pos += 8
            headers.append((_KIND_OF[kind], bool(has_data), sname, address, size))
        code = np.frombuffer(data, dtype="<u4", count=n_code, offset=pos).astype(np.uint32)
        pos += 4 * n_code
        segments: list[Segment] = []
        for kind, has_data, sname, address, size in headers:
            blob = None
            if has_data:
                blob = data[pos:pos + size]
                if len(blob) != size:
                    raise ValueError(f"segment @{sname} data truncated")
                pos += size
            segments.append(Segment(sname, kind, address, size, blob))
        if pos != len(data):
            raise ValueError(f"{len(data) - pos} trailing bytes")
        return cls(name, frac, code, code_base, segments, built_for, markers)


def _segment_bytes(op: sf.SegmentOp) -> bytes | None:
    value = op.value
    if value is None:
        return None
    if isinstance(value, DenseResourceAttr):
        blob = get_blob(value.resource_handle.data)
        if blob is None:
            raise ImageError(f"segment @{op.sym_name.data}: resource {value.resource_handle.data} has no data")
        if len(blob) != op.size.data:
            raise ImageError(f"segment @{op.sym_name.data}: resource holds {len(blob)} bytes, size is {op.size.data}")
        return bytes(blob)
    assert isinstance(value, DenseIntOrFPElementsAttr)
    elem = value.get_type().get_element_type()
    if not isinstance(elem, IntegerType) or elem.width.data != 16:
        raise ImageError(f"segment @{op.sym_name.data}: initial value must be i16 (Qm.n words)")
    values = np.asarray(value.get_values(), dtype=np.int64)
    shape = value.get_type().get_shape()
    count = int(np.prod(shape)) if shape else 1
    if values.size == 1 and count > 1:  # splat
        values = np.full(count, values[0])
    return values.astype("<i2").tobytes()


def assemble(module: ModuleOp | sf.ImageOp, hw: SnowflakeConfig | None = None) -> ProgramImage:
    """Encode the single `snowflake_asm.program` of a module (or of one `snowflake_asm.image`)
    and lay out its segments, for the machine the image records (its `hw` attribute), else for
    `hw`, else for the default machine: the LD select width follows the machine's CUs x vMACs."""
    ops = list(module.body.block.ops)
    programs = [op for op in ops if isinstance(op, sf.ProgramOp)]
    if len(programs) != 1:
        images = sum(1 for op in ops if isinstance(op, sf.ImageOp))
        more = f" ({images} snowflake_asm.image ops: run the model, or assemble one image)" if images else ""
        raise ImageError(f"expected exactly one snowflake_asm.program, found {len(programs)}{more}")
    program = programs[0]
    try:
        module.verify()
    except VerifyException as e:
        raise ImageError(f"program does not verify: {str(e).splitlines()[0]}") from None
    name = module.sym_name.data if isinstance(module, sf.ImageOp) else program.sym_name.data
    built_for = None
    # the machine the code is for: an image's `hw`, a disassembled program's module `snowflake_asm.hw`
    recorded = module.attributes.get("hw" if isinstance(module, sf.ImageOp) else MACHINE_RECORD)
    if isinstance(recorded, StringAttr):
        try:
            built_for = json.loads(recorded.data)
        except json.JSONDecodeError:
            raise ImageError(f"image @{name}: its hw attribute is not JSON") from None
    instructions, labels = layout(program)
    markers = [Marker(labels[op.label.data], op.label.data, facts_of(op.attributes["layer"]))
               for op in program.body.block.ops if isinstance(op, sf.LabelOp) and "layer" in op.attributes]
    width = _select_width(built_for) if built_for or hw is None else hw.select_bits
    words = np.array([encode(op, pc, labels, width) for pc, op in enumerate(instructions)], dtype=np.uint32)
    segments = segments_of(module, shared=module.attributes.get("dram") == StringAttr("model"))
    data_end = max((s.end for s in segments), default=0)
    code_base = -(-data_end // CODE_ALIGN) * CODE_ALIGN
    if program.code_base is not None:
        if program.code_base.data < data_end:
            raise ImageError(f"code_base {program.code_base.data} overlaps the data segments (end {data_end})")
        code_base = program.code_base.data
    return ProgramImage(name, program.frac_bits.data, words, code_base, segments, built_for, markers,
                        source_table(instructions))


def source_table(instructions: list[sf.SnowflakeInstruction]) -> tuple[str | None, ...]:
    """`conv2.strip1.ktile0 (ONNX node Conv_3)` per instruction from its location (tile-to-asm's
    `loc("Conv_3"("conv2.strip1.ktile0"))`); () when no instruction has one."""
    # by identity: instructions share their layer part's location object, and hashing a nested
    # location costs more than describing it (equal ones that are not shared are described twice)
    named: dict[int, str | None] = {}
    out = []
    for op in instructions:
        loc = op.location
        text = named.get(id(loc), "")
        if text == "":
            text = named[id(loc)] = describe_location(loc)
        out.append(text)
    return tuple(out) if any(out) else ()


def describe_location(loc: Attribute) -> str | None:
    if not isinstance(loc, NameLoc):
        return None
    inner = loc.location
    if isinstance(inner, NameLoc):
        return f"{inner.desc.data} (ONNX node {loc.desc.data})"
    return loc.desc.data


def facts_of(attr: Attribute) -> dict[str, Any]:
    """A marker's `layer` dictionary as JSON values (strings, integers, floats)."""
    if not isinstance(attr, DictionaryAttr):
        raise ImageError("a layer marker's `layer` attribute must be a dictionary")
    out: dict[str, Any] = {}
    for key, value in attr.data.items():
        if isinstance(value, StringAttr):
            out[key] = value.data
        elif isinstance(value, IntegerAttr):
            out[key] = value.value.data
        elif isinstance(value, FloatAttr):
            out[key] = float(value.value.data)
        else:
            raise ImageError(f"layer marker fact '{key}' must be a string, integer or float")
    return out


def facts_attr(facts: dict[str, Any]) -> DictionaryAttr:
    out: dict[str, Attribute] = {}
    for key, value in facts.items():
        if isinstance(value, str):
            out[key] = StringAttr(value)
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise ImageError(f"layer marker fact '{key}' must be a string, integer or float")
        elif isinstance(value, int):
            out[key] = IntegerAttr(value, i64)
        else:
            out[key] = FloatAttr(value, f64)
    return DictionaryAttr(out)


def _select_width(built_for: dict[str, Any] | None) -> int:
    """The LD select width of the machine a program was built for (the default machine's when
    not recorded, as for hand-written assembly)."""
    if not built_for:
        return DEFAULT.select_bits
    return select_bits(int(built_for.get("cus", DEFAULT.cus)), int(built_for.get("vmacs_per_cu", DEFAULT.vmacs_per_cu)))


def segments_of(module: ModuleOp | sf.ImageOp, shared: bool = False) -> list[Segment]:
    """The `snowflake_asm.segment`s of a module or image with their data, checked not to overlap.
    `shared`: a segment program of a whole-model DRAM plan, whose tensors share addresses at
    different times (allocate-dram checked when); only the data (weights) must not overlap."""
    segments = [
        Segment(op.sym_name.data, op.kind.data, op.address.data, op.size.data, _segment_bytes(op))
        for op in module.body.block.ops if isinstance(op, sf.SegmentOp)
    ]
    ordered = sorted(segments, key=lambda s: s.address)
    for i, a in enumerate(ordered):
        for b in ordered[i + 1:]:
            if b.address >= a.end:
                break
            if not shared or a.data is not None or b.data is not None:
                raise ImageError(f"segments @{a.name} and @{b.name} overlap")
    return segments


MACHINE_RECORD = "snowflake_asm.hw"
"""The module attribute holding a disassembled image's machine record (the fields its code is for)."""


def disassemble(image: ProgramImage) -> ModuleOp:
    """The snowflake_asm module of an image; labels `L<pc>` at every branch target."""
    instructions: list[sf.SnowflakeInstruction] = []
    width = _select_width(image.built_for)
    for pc, word in enumerate(image.code.tolist()):
        op = decode(int(word), pc, width)
        try:
            op.verify()
        except VerifyException as e:
            raise EncodingError(f"pc {pc}: word {int(word):#010x}: {e}") from None
        instructions.append(op)
    n = len(instructions)
    targets: set[int] = set()
    for pc, op in enumerate(instructions):
        if isinstance(op, sf.BranchOperation):
            target = int(op.target.data[1:])
            if not 0 <= target <= n:
                raise EncodingError(f"pc {pc}: branch target {target} outside the program (0..{n})")
            targets.add(target)
    body: list[Operation] = []
    markers: dict[int, list[Marker]] = {}
    for m in image.markers:
        markers.setdefault(m.pc, []).append(m)

    def labels_at(pc: int) -> None:
        for m in markers.get(pc, []):
            label = sf.LabelOp(m.name)
            label.attributes["layer"] = facts_attr(m.facts)
            body.append(label)
        if pc in targets:
            body.append(sf.LabelOp(branch_label(pc)))

    for pc, op in enumerate(instructions):
        labels_at(pc)
        body.append(op)
    labels_at(n)
    ops: list[Operation] = []
    for s in image.segments:
        value = None
        if s.data is not None:
            value = int16_resource(s.name, np.frombuffer(s.data, dtype="<i2"))
        ops.append(sf.SegmentOp(s.name, s.kind, s.address, s.size, value))
    data_end = max((s.end for s in image.segments), default=0)
    default_base = -(-data_end // CODE_ALIGN) * CODE_ALIGN
    code_base = None if image.code_base == default_base else image.code_base
    ops.append(sf.ProgramOp(image.name, body, image.frac_bits, code_base))
    module = ModuleOp(ops)
    if image.built_for is not None:  # kept, so text -> .sfb gives the same bytes back
        module.attributes[MACHINE_RECORD] = StringAttr(json.dumps(image.built_for, separators=(",", ":")))
    return module
