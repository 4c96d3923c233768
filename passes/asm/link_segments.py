"""
link-segments: one program per device segment, as C17 deploys a model (§5.1 step 2: "each tile
object creates a block of instructions that will be concatenated with other tile objects'
instructions"; §5.3: the host starts the stream once and waits for it).

Input: the layer images tile-to-asm made over the model's DRAM plan (`dram = "model"`, after
allocate-dram). A segment is a maximal run of device layers in `@main`'s graph order with no host
layer between them (snowir/segments.py). Each segment's layers become one
`snowflake_asm.image @segment<i>`:

  * its program is the layers' programs in order, each after a marker label named after the
    layer whose `layer` attribute holds its report facts (kind, mode, loop order, fused pool,
    load imbalance); the machine attributes cycles, stalls and bytes to a layer from its marker
    on, so the report keeps one row per layer; a layer's own labels become `<layer>.<label>`;
  * its segments are the layers' segments, merged by name (the plan's tensors): a tensor some
    layer of the segment writes is an `output`, one only read an `input`, weights `data`;
  * the nn ops name the segment image (`image`) and their layer's marker (`layer`).

Run it after the per-layer passes (balance-loads, schedule-asm, fill-delay-slots work on each
layer's code and see a marker as a block boundary) and before icache-banking, which streams
the joined program through the instruction cache; a banked layer program is refused. Images
without a DRAM plan (each layer its own DRAM) are left as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import (DictionaryAttr, FloatAttr, IntegerAttr, ModuleOp, NameLoc, NoneAttr, StringAttr,
                                   UnitAttr)
from xdsl.ir import Attribute, Operation
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from snowir.asm_analysis import body_ops, is_banked, outside_programs
from snowir.dialects import snowflake_asm as sf
from snowir.segments import main_of, segments_of

MARKER_FACTS = ("kind", "mode", "loop_order", "fused", "mloop_bytes", "kloop_bytes", "load_imbalance_pct", "x", "r", "y",
                "w", "biases", "host_read")
"""The layer image attributes a marker keeps: what the report says of the layer, the segments
holding its input (`x`), residual input (`r`) and output (`y`), where the host writes and reads
them, and its packed weights (`w`, which the nn constant refers to: snowir/packed.py, and where
their image keeps the biases, `biases`, present when not with the kernels), and how the host reads its
output back (`host_read`: a merged conv's grid through its interleave)."""
_KIND_RANK = {sf.SegmentKind.OUTPUT: 0, sf.SegmentKind.DATA: 1, sf.SegmentKind.INPUT: 2, sf.SegmentKind.SCRATCH: 3}


def marker_facts(image: sf.ImageOp) -> DictionaryAttr:
    facts: dict[str, Attribute] = {}
    for key in MARKER_FACTS:
        value = image.attributes.get(key)
        if isinstance(value, StringAttr | IntegerAttr | FloatAttr):
            facts[key] = value
    return DictionaryAttr(facts)


def _fail(message: str) -> PassFailedException:
    return PassFailedException(f"link-segments: {message}")


def _joined_segments(members: list[sf.ImageOp]) -> list[sf.SegmentOp]:
    merged: dict[str, sf.SegmentOp] = {}
    for image in members:
        for seg in image.body.block.ops:
            if not isinstance(seg, sf.SegmentOp):
                continue
            name = seg.sym_name.data
            have = merged.get(name)
            if have is None:
                merged[name] = seg.clone()
                continue
            if (have.address.data, have.size.data) != (seg.address.data, seg.size.data):
                raise _fail(f"segment @{name} is at {have.address.data} (+{have.size.data}) in one layer and "
                            f"{seg.address.data} (+{seg.size.data}) in @{image.sym_name.data}")
            if _KIND_RANK[seg.kind.data] < _KIND_RANK[have.kind.data]:
                have.properties["kind"] = seg.kind
    return sorted(merged.values(), key=lambda s: s.address.data)


def _renamed(image: sf.ImageOp) -> list[Operation]:
    """The layer's instructions and labels, its labels prefixed with the layer's name."""
    prefix = image.sym_name.data + "."
    ops = []
    for op in body_ops(image.program):
        op.detach()
        role = sf.program_role(type(op))
        if role is sf.ProgramRole.LABEL:
            op.properties["label"] = StringAttr(prefix + op.label.data)
        elif role is sf.ProgramRole.BRANCH:
            op.properties["target"] = StringAttr(prefix + op.target.data)
        ops.append(op)
    return ops


@dataclass(frozen=True)
class LinkSegmentsPass(ModulePass):
    name = "link-segments"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        images = {o.sym_name.data: o for o in op.ops if isinstance(o, sf.ImageOp)}
        planned = {name for name, image in images.items() if image.attributes.get("dram") == StringAttr("model")
                   and "segment" not in image.attributes}
        if not planned:
            return
        main = main_of(op)
        segs = segments_of(main.body.block)
        users: dict[str, list[Operation]] = {}
        for inner in outside_programs(main):
            ref = inner.attributes.get("image")
            if isinstance(ref, StringAttr):
                users.setdefault(ref.data, []).append(inner)
        taken = set(images)
        for index, segment in enumerate(segs.segments):
            members = [images[name] for name in segment.layers if name in planned]
            if not members:
                continue
            if len(members) != len(segment.layers):
                raise _fail(f"segment {index} mixes layers with and without the DRAM plan (run allocate-dram "
                            "before tile-to-asm)")
            for image in members:
                if is_banked(image.program):
                    raise _fail(f"image @{image.sym_name.data} is banked already: run icache-banking after "
                                "link-segments")
            name = f"segment{index}"
            while name in taken:
                name += "_"
            taken.add(name)
            code: list[Operation] = []
            for image in members:
                marker = sf.LabelOp(image.sym_name.data)
                marker.attributes["layer"] = marker_facts(image)
                body = _renamed(image)
                node = next((o.location.desc for o in body if isinstance(o.location, NameLoc)), None)
                if node is not None:  # the layer's ONNX node, as its instructions name it
                    marker.location = NameLoc(node, NameLoc(image.sym_name, NoneAttr()))
                code.append(marker)
                code.extend(body)
            first = members[0]
            program = sf.ProgramOp("code", code, first.program.frac_bits.data)
            program.attributes["loads_balanced"] = UnitAttr()  # each layer's were (balance-loads keeps them)
            attrs = {"dram": StringAttr("model"), "segment": StringAttr(str(index))}
            if "hw" in first.attributes:
                attrs["hw"] = first.attributes["hw"]
            linked = sf.ImageOp(name, [*_joined_segments(members), program], attrs)
            op.body.block.insert_op_before(linked, first)
            for image in members:
                for user in users.get(image.sym_name.data, []):
                    user.attributes["image"] = StringAttr(name)
                    user.attributes["layer"] = StringAttr(image.sym_name.data)
                image.detach()
                image.erase()
