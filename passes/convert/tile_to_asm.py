"""
tile-to-asm{hw=path.json}: every `tile.layer` becomes a `snowflake_asm.image` (its DRAM
segments and its program), generated from the tile IR alone: no planner runs here.

Each layer is read back as its decisions (snowir/tile/read.py: the geometry, mode, loop order,
maps tiles with their rows, buffering and row groups, kernel tiles with their count, slots,
stagger or residency, the weights packing, bypass slices, gather, a fused pool and its ring
slots, a pool's strips or rings), after tiles written with an empty body `{}` have been
derived (snowir/tile/derive.py: derive_layer) and the layer checked against the configuration
in use (check_conv, check_pool). An edit either changes the code or is refused in one line naming what
may be edited instead. The code is straightforward: loads in program order as the generator places them,
every LD on load unit 0 (`balance-loads` spreads them), delay slots left as no-ops where the
generator has nothing of the loop's own to put (`fill-delay-slots` fills them), nothing
reordered (`schedule-asm`). Layers whose plans are equal share one generated program (cloned).

Segments inside an image: `@x` (input maps), `@w` (weights, with data), `@y` (output), `@r`
(residual input), `@slack` (pool scratch), `@t` (a fused pool's conv output, scratch); the
program is `@code`. In a model with a DRAM plan (allocate-dram) the segments are the plan's
tensors instead, named as they are there and at their addresses (a layer's `@y` is the next one's
input), each image is marked `dram = "model"`, and every program starts with the state a layer
assumes of a fresh machine (write-back mask, CU stride; after a `fence`, once the previous
layer's vector ops are done): link-segments then joins them into one program per segment. A conv layer with a fused max pool (`pool`) gives one image, `fused =
"max_pool"`, whose `@y` is the pool's output; both nn ops name it. The nn op that named the
layer (`tile = "..."`) now names the image (`image = "..."`).
"""

from __future__ import annotations

import json

from collections.abc import Hashable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, NameLoc, NoneAttr, StringAttr
from xdsl.ir import Attribute, Operation
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from snowir.asm_analysis import outside_programs
from snowir.codegen.builder import layer_prologue
from snowir.dialects import snowflake_asm as sf, tile
from snowir.dialects.tile.decisions import BIASES, FENCE, KERNELS_PRELOADED, MAPS_PRELOADED, WEIGHTS_BEFORE_FENCE
from snowir.device_layers import DEVICE_OPS, kind_of_layer
from snowir.hw import SnowflakeConfig
from snowir.nn_util import layer_name
from snowir.plan.shapes import LoweringError
from snowir.plan.weights_end import kernels_preloaded_refusal, maps_preloaded_refusal, weights_before_fence_refusal
from snowir.segments import HOST_READ_FACT
from snowir.tile.placement import maps_refusal, output_host_read, placement_refusal, regions_of
from snowir.tile.read import TileError, conv_plan_of, tile_layers
from snowir.codegen.traces import R_TMP

SEGMENTS = {"maps": ("x", sf.SegmentKind.INPUT), "weights": ("w", sf.SegmentKind.DATA),
            "output": ("y", sf.SegmentKind.OUTPUT), "bypass": ("r", sf.SegmentKind.INPUT),
            "scratch": ("slack", sf.SegmentKind.SCRATCH), "conv_output": ("t", sf.SegmentKind.SCRATCH)}



def _preloaded_refusal(name: str, refusal, previous: tile.LayerOp | None, layer: tile.LayerOp,
                       hw: SnowflakeConfig) -> str | None:
    """Why `layer`'s `name` (a load the previous conv's last kernel tile makes for it:
    kernels_preloaded, maps_preloaded) cannot be followed, or None."""
    if previous is None or previous.kind.data != tile.LayerKind.CONV or not FENCE.value(layer):
        return f"{name} needs a conv before it in the same program (its last kernel tile loads them)"
    why = refusal(conv_plan_of(previous), conv_plan_of(layer), hw)
    return None if why is None else f"{name} after conv @{previous.sym_name.data}: {why}"

def _fail(layer: tile.LayerOp, message: str) -> PassFailedException:
    return PassFailedException(f"tile-to-asm: layer @{layer.sym_name.data}: {message}")


def layer_code(layer: tile.LayerOp, hw: SnowflakeConfig, cache: dict[Hashable, list[Operation]],
               following: tile.LayerOp | None = None, preceding: tile.LayerOp | None = None) -> list[Operation]:
    """The layer's instructions, from its tile IR alone (derived bodies filled in, then checked
    for `hw`) and, for a conv, the next layer's when that one is `kernels_preloaded` or
    `maps_preloaded` (`following`: its first kernels and maps load in this one's last kernel tile)
    and the previous conv's when this one is `maps_preloaded` (`preceding`: the rows of the first
    strip that conv's last tile leaves to this one); layers with equal decisions get clones of one
    generated program."""
    try:
        program = kind_of_layer(layer).function("program")
        pair = {k: v for k, v in (("following", following), ("preceding", preceding)) if v is not None}
        key, generate = program(layer, hw, **pair)
        if key not in cache:
            cache[key] = generate()
            return cache[key]
    except TileError as e:
        raise PassFailedException(f"tile-to-asm: {e}") from None
    except LoweringError as e:
        raise _fail(layer, str(e)) from None
    return [op.clone() for op in cache[key]]


def layer_image(layer: tile.LayerOp, code: list[Operation]) -> sf.ImageOp:
    segments = []
    for label, region in regions_of(layer).items():
        if label not in SEGMENTS:
            continue
        name, kind = SEGMENTS[label]
        if region.tensor is not None:
            name = region.tensor.data
        segments.append(sf.SegmentOp(name, kind, region.offset.value.data, region.size.value.data, region.value))
    attrs = {"layer": StringAttr(layer.sym_name.data), "kind": StringAttr(layer.kind.data.value)}
    if layer.mode is not None:
        attrs["mode"] = StringAttr(layer.mode.data.value)
    if layer.loop_order is not None:
        attrs["loop_order"] = StringAttr(layer.loop_order.data.value)
    if layer.pool is not None:
        attrs["fused"] = StringAttr("max_pool")  # its @y is the max pool's output
    w = regions_of(layer).get("weights")
    if w is not None and BIASES.value(w) != BIASES.default:  # its weight image's layout (snowir/packed.py reads it)
        attrs[BIASES.name] = StringAttr(BIASES.value(w))
    for key in ("mloop_bytes", "kloop_bytes"):  # both orders' estimated traffic, for C17 Fig. 4 plots
        if key in layer.properties:
            attrs[key] = layer.properties[key]
    return sf.ImageOp(layer.sym_name.data, [*segments, sf.ProgramOp("code", code)], attrs)


def onnx_nodes(module: ModuleOp) -> dict[str, str]:
    """Per tile layer, the ONNX node(s) it computes (`+` between a conv and its fused pool), else
    the nn op's name."""
    out: dict[str, list[str]] = {}
    for inner in outside_programs(module):
        ref = inner.attributes.get("tile")
        if isinstance(ref, StringAttr):
            node = inner.attributes.get("onnx_node")
            out.setdefault(ref.data, []).append(node.data if isinstance(node, StringAttr) else layer_name(inner))
    return {layer: "+".join(names) for layer, names in out.items()}


def locate(code: list[Operation], node: str, layer: str, relative: dict[Attribute, str]) -> None:
    """Every instruction's location: its ONNX node around the layer and the part of it the
    generator named (`loc("Conv_3"("conv2.strip1.ktile0"))`, --print-debuginfo shows it).
    `relative` maps locations already given back to the generator's part: clones of a program
    shared between equal layers carry the first layer's."""
    made: dict[Attribute, NameLoc] = {}
    for op in code:
        inner = op.location
        loc = made.get(inner)
        if loc is None:
            part = relative.get(inner, inner.desc.data if isinstance(inner, NameLoc) else "")
            loc = made[inner] = NameLoc(StringAttr(node), NameLoc(StringAttr(f"{layer}.{part}" if part else layer), NoneAttr()))
            relative[loc] = part
        op.location = loc


@dataclass(frozen=True)
class TileToAsmPass(ModulePass):
    name = "tile-to-asm"
    hw: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        hw = SnowflakeConfig.load(self.hw or None)
        cache: dict[Hashable, list[Operation]] = {}
        images: dict[str, str] = {}
        built_for = StringAttr(json.dumps(hw.code_fields(), separators=(",", ":")))
        plan = next((o for o in op.ops if isinstance(o, tile.DramPlanOp)), None)
        nodes = onnx_nodes(op)
        relative: dict[Attribute, str] = {}
        named = [inner for inner in outside_programs(op)
                 if isinstance(inner, DEVICE_OPS) and isinstance(inner.attributes.get("tile"), StringAttr)]
        outputs = {inner.attributes["tile"].data: inner for inner in named}  # type: ignore[union-attr]
        readers = {inner.attributes["tile"].data: inner for inner in reversed(named)}  # type: ignore[union-attr]
        previous: tile.LayerOp | None = None
        layers = list(tile_layers(op, self.name))
        for position, layer in enumerate(layers):
            name = layer.sym_name.data
            wrong = placement_refusal(layer, outputs[name], readers[name]) or maps_refusal(layer, readers[name]) \
                if name in outputs else None
            if wrong is None and WEIGHTS_BEFORE_FENCE.value(layer) and previous is not None \
                    and previous.kind.data == tile.LayerKind.CONV:
                why = weights_before_fence_refusal(conv_plan_of(previous), conv_plan_of(layer), hw)
                wrong = None if why is None else f"weights_before_fence after conv @{previous.sym_name.data}: {why}"
            for decision, refusal in ((KERNELS_PRELOADED, kernels_preloaded_refusal),
                                      (MAPS_PRELOADED, maps_preloaded_refusal)):
                if wrong is None and decision.value(layer):
                    wrong = _preloaded_refusal(decision.name, refusal, previous, layer, hw)
            preceding = previous if MAPS_PRELOADED.value(layer) else None  # (a conv: else refused above)
            previous = layer
            if wrong is not None:
                raise _fail(layer, wrong)
            following = layers[position + 1] if position + 1 < len(layers) else None
            if following is None or not (KERNELS_PRELOADED.value(following) or MAPS_PRELOADED.value(following)) \
                    or layer.kind.data != tile.LayerKind.CONV:
                following = None
            code = layer_code(layer, hw, cache, following, preceding)
            if plan is not None:
                coop_conv = layer.kind.data == tile.LayerKind.CONV and layer.mode is not None \
                    and layer.mode.data == tile.ComputeMode.COOP
                # weights_before_fence: the code generator placed the fence after the first kernel loads
                fence = FENCE.value(layer) and not WEIGHTS_BEFORE_FENCE.value(layer)
                code = layer_prologue(hw, coop_conv, fence, R_TMP) + code
            locate(code, nodes.get(name, name), name, relative)
            image = layer_image(layer, code)
            if plan is not None:
                image.attributes["dram"] = StringAttr("model")
                for label, key in (("maps", "x"), ("bypass", "r"), ("output", "y"), ("weights", "w")):
                    region = regions_of(layer).get(label)
                    if region is not None and region.tensor is not None:
                        image.attributes[key] = region.tensor  # where the host finds the layer's tensors
            image.attributes["hw"] = built_for  # what the program is only correct for (hw.CODE_FIELDS)
            out = regions_of(layer).get("output")
            if out is not None and (read := output_host_read(out)) is not None:  # the host's read of the output
                image.attributes[HOST_READ_FACT] = StringAttr(",".join(str(v) for v in read))
            images[layer.sym_name.data] = image.sym_name.data
            op.body.block.insert_op_before(image, layer)
            layer.detach()
            layer.erase()
        if plan is not None:  # its tensors are the images' segments now
            plan.detach()
            plan.erase()
        for inner in outside_programs(op):  # the nn ops naming the layers, not 10^5 instructions
            ref = inner.attributes.get("tile")
            if isinstance(ref, StringAttr) and ref.data in images:
                del inner.attributes["tile"]
                inner.attributes["image"] = StringAttr(images[ref.data])
