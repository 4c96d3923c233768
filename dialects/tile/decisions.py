"""
Each schedule decision of a tile layer, declared once (as MLIR's ODS declares an op's attributes).

A declaration (`Decision`) says which op records the decision and under what name, how its
value is stored, what it is when absent, what it means for the generated code (the docs text),
the rule it must satisfy and when it applies (its preconditions). From it come:

- the op's property (`declare_on`, applied to the tile ops in layer_ops.py), with the rule as its
  verifier check (`Decision.verify`), one message per rule;
- its entry in FIELD_DOCS, hence docs/dialects.md;
- the field of the generators' view: a decision with a `field` is a field of `ConvDecisions`,
  the base of `ConvPlan` (snowir/plan/shapes.py), written from the planner's choice
  (`Decision.write`, snowir/tile/build.py) and read back (`Decision.read`, snowir/tile/read.py);
- the refusal tile-to-asm gives when a plan-level precondition fails (`Decision.refusal`,
  snowir/tile/check.py).

A new decision is then: its declaration here, the planner or pass that sets it, and the code
generator that follows it (docs/lowering.md, "Decisions declared once").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from typing import Any

from xdsl.dialects.builtin import I64, DenseArrayBase, IntegerAttr, StringAttr, UnitAttr, i64
from xdsl.ir import Attribute, Operation
from xdsl.irdl import opt_prop_def

from snowir.dialects.tile.attributes import (ComputeMode, CuSplit, CuSplitAttr, GatherAttr, LayerKind, MapsBuffering,
                                             MapsBufferingAttr)
from snowir.dialects.tile.refusals import (coop_rows_refusal, first_slot_refusal, kernel_order_refusal,
                                           paired_start_refusal, prefetch_refusal, slice_tiles_refusal, whole_refusal)

LAYER, KERNEL_TILE, MAPS_TILE, DRAM_REGION = "tile.layer", "tile.kernel_tile", "tile.maps_tile", "tile.dram_region"


@dataclass(frozen=True)
class Codec:
    """How a decision's value is stored on its op: the property's constraint, and the two
    directions between the property and the plan's Python value."""

    constraint: Any
    read: Callable[[Any], Any]
    write: Callable[[Any], Attribute]
    kind: str


INT = Codec(IntegerAttr[I64], lambda a: a.value.data, lambda v: IntegerAttr(int(v), i64), "int")
FLAG = Codec(UnitAttr, lambda a: True, lambda v: UnitAttr(), "flag")
INTS = Codec(DenseArrayBase[I64], lambda a: tuple(int(v) for v in a.get_values()),
             lambda v: DenseArrayBase.from_list(i64, list(v)), "ints")
GATHER = Codec(GatherAttr, lambda a: tuple(a.values().values()),
               lambda v: GatherAttr.get(**dict(zip(GatherAttr.FIELDS, v))), "gather")
CU_SPLIT = Codec(CuSplitAttr, lambda a: a.data.value, lambda v: CuSplitAttr(CuSplit(v)), "enum")
BUFFERING = Codec(MapsBufferingAttr, lambda a: a.data, lambda v: MapsBufferingAttr(MapsBuffering(v)), "enum")
WORD = Codec(StringAttr, lambda a: a.data, lambda v: StringAttr(str(v)), "word")


def _has(name: str) -> Callable[[Operation], bool]:
    return lambda op: op.properties.get(name) is not None


def _conv(op: Operation) -> bool:
    return op.properties["kind"].data == LayerKind.CONV  # type: ignore[attr-defined]


def _indp_conv(op: Operation) -> bool:
    mode = op.properties.get("mode")
    return _conv(op) and mode is not None and mode.data == ComputeMode.INDP  # type: ignore[attr-defined]


def _region(label: str) -> Callable[[Operation], bool]:
    def has(op: Operation) -> bool:
        labels = (o.properties.get("label") for o in op.regions[0].block.ops)
        return any(isinstance(a, StringAttr) and a.data == label for a in labels)

    return has


@dataclass(frozen=True)
class Decision:
    """One decision: `name` on op `op`, stored as `codec` says, `default` when absent."""

    name: str
    op: str
    codec: Codec
    default: Any
    doc: str
    """What the decision means for the generated code (FIELD_DOCS, docs/dialects.md)."""
    rule: str = ""
    """The constraint in words; a property breaking it is refused as `name: rule`."""
    minimum: int | None = None
    length: int | None = None
    valid: Callable[[Any], bool] | None = None
    """A rule on the value itself beyond `minimum` and `length` (its fields' ranges)."""
    needs: Callable[[Operation], bool] | None = None
    """The op-level precondition (the owning op's other properties), checked by the verifier."""
    refuse: Callable[[Any, Any], str | None] | None = None
    """The plan-level precondition (plan, hardware) -> why not, checked by tile-to-asm."""
    field: str = ""
    """The ConvPlan field it becomes ('' : read by the generators from the IR directly)."""
    planned: bool = True
    """Set from the planner's choice when a layer is (re)planned (False: a later pass decides,
    allocate-dram's `weights_before_fence`, and re-planning keeps it)."""

    def value(self, op: Operation) -> Any:
        """The decision as the op records it (`default` when absent)."""
        attr = op.properties.get(self.name)
        return self.default if attr is None else self.codec.read(attr)

    def write(self, op_or_props: Operation | dict[str, Attribute], value: Any) -> None:
        """Record `value` (the default, or a false flag: the property is removed)."""
        props = op_or_props if isinstance(op_or_props, dict) else op_or_props.properties
        if value == self.default or (self.codec is FLAG and not value):
            props.pop(self.name, None)
        else:
            props[self.name] = self.codec.write(value)

    def verify(self, op: Operation) -> str | None:
        """Why the op's property breaks the declaration's rule (None: it does not, or is absent)."""
        attr = op.properties.get(self.name)
        if attr is None:
            return None
        v = self.codec.read(attr)
        if self.minimum is not None and v < self.minimum and not self.rule:
            return f"{self.name} must be >= {self.minimum}, got {v}"
        bad = (self.minimum is not None and v < self.minimum) or (self.length is not None and len(v) != self.length) \
            or (self.valid is not None and not self.valid(v)) or (self.needs is not None and not self.needs(op))
        return f"{self.name}: {self.rule}" if bad else None

    def refusal(self, plan: Any, hw: Any) -> str | None:
        """Why the plan cannot take this decision's value (a precondition beyond the op's own)."""
        if self.refuse is None or getattr(plan, self.field) == self.default:
            return None
        why = self.refuse(plan, hw)
        return f"{self.name} {_show(getattr(plan, self.field))}: {why}" if why else None


def _show(v: Any) -> str:
    return str(list(v)) if isinstance(v, tuple) else str(v)


def decision(d: Decision) -> Any:
    """A `ConvDecisions` field declared by `d` (keyword-only, `d.default` when not given)."""
    default = d.default
    return field(default=default, kw_only=True, metadata={"decision": d})


@dataclass(frozen=True, kw_only=True)
class ConvDecisions:
    """The decisions of a conv the tile IR records one to one, as the generators' view holds them
    (the base of ConvPlan: each field's declaration is its metadata, `DECISIONS`)."""

    gather: tuple[int, int, int, int, int] | None = decision(Decision(
        "gather", LAYER, GATHER, None, field="gather",
        doc="Maps loaded pixel by pixel (#tile.gather<sy, sx, w, cin, c0>): a strided 1x1's pixels or a channel "
            "slice's channels; tiles, loads and windows are over the compact input.",
        rule="only a conv layer gathers its maps", needs=_conv))
    """maps gathered pixel by pixel, `shape` then being the compact conv over what is loaded: a
    strided 1x1 conv planned on the pixels it reads, a conv over a channel slice on its channels.
    (sy, sx, W, C, c0): pixel (r, x) of the compact input is DRAM pixel (r*sy, x*sx) of a W-wide,
    C-channel tensor, channels from c0."""
    cu_split: str = decision(Decision(
        "cu_split", LAYER, CU_SPLIT, "rows", field="cu_split",
        doc="INDP: rows (absent; CU c its own output rows, cu_rows) or cols (CU c output columns [c OW/4, (c+1) OW/4) "
            "of every row of a tile, vmov stride OW/4 x K words: a residual 1x1 conv's bypass read where the "
            "write-back stores it). Followed.",
        rule="how an INDP conv's CUs share a row group (rows or cols)", needs=_indp_conv))
    """INDP: the CUs split each row group's rows (`cu_rows`) or every row's output columns
    (snowir/plan/indp_columns.py)."""
    coop_rows: bool = decision(Decision(
        "coop_rows", LAYER, FLAG, False, field="coop_rows",
        doc="COOP with the CUs splitting output rows (row groups, `cu_rows` on each maps tile, as INDP's): CU c "
            "computes its rows from its own maps load (select c) at the group's buffer address, the kernel tile's "
            "count <= V kernels on vMAC v of every CU (select CV+v), vmov stride cu_rows output rows; absent: maps "
            "broadcast, the CUs split the kernel tile (16 kernels). For convs of few kernels (K = 3: 12 of 16 vMACs "
            "busy instead of 3), and for strided 1x1 convs whose gathered pixels then fit the CUs' buffers at once (each "
            "CU gathers its own rows' pixels; the kernels load once). Followed; on a layer it cannot run, refused.",
        rule="a COOP conv layer's", needs=lambda op: _conv(op) and not _indp_conv(op),
        refuse=lambda plan, hw: coop_rows_refusal(plan, hw)))
    """COOP row groups: the CUs split each group's output rows, each CU's V vMACs a kernel tile of
    at most V kernels (snowir/plan/coop_rows.py)."""
    slice_bases: tuple[int, ...] = decision(Decision(
        "bypass_slices", LAYER, INTS, (), field="slice_bases",
        doc="A residual conv's bypass in two per-kernel-tile slices at these maps-buffer words, the next tile's "
            "slice loading pixel by pixel beside the current one.",
        rule="two slice bases, on a layer with a 'bypass' dram_region", length=2, needs=_region("bypass")))
    """The bypass slices' bases (`settle` places them)."""
    slice_tiles: int = decision(Decision(
        "slice_tiles", LAYER, INT, 1, field="slice_tiles",
        doc="A residual 1x1 conv's kernel tiles per bypass slice (absent: 1): each pixel's channels of the next "
            "group of tiles load with one LD, during the group's first tile.",
        rule="2 or more kernel tiles a bypass slice holds, with `bypass_slices`", minimum=2,
        needs=_has("bypass_slices"), refuse=slice_tiles_refusal))
    """Kernel tiles a 1x1 conv's bypass slice holds: each pixel's channels of that many tiles in
    one LD (their start-ups on the load units bound the tiles otherwise)."""
    pool_slots: tuple[int, ...] = decision(Decision(
        "pool_slots", LAYER, INTS, (), field="pool_slots",
        doc="Maps-buffer words of the fused pool's row ring (conv output row r in slot r mod N).",
        rule="belong to a fused max pool (`pool`)", needs=_has("pool")))
    """A fused pool's row-ring slots."""
    weights_before_fence: bool = decision(Decision(
        "weights_before_fence", LAYER, FLAG, False, field="weights_before_fence",
        doc="With fence: the first kernel loads issue before it, the maps loads after (the previous layer reads "
            "none of the words they load: a fenced max pool reads no weights, a conv's last kernel tile sits in "
            "its second slot; allocate-dram decides, the verifier checks a pool, tile-to-asm a conv).",
        rule="splits a conv layer's `fence` (set both)", needs=lambda op: _conv(op) and _has("fence")(op),
        planned=False))
    """In a whole-model program, the previous layer's last vector ops read none of the weights-buffer
    words the cold start loads (snowir/plan/weights_end.py): its kernel loads issue before the
    fence, the maps loads after."""
    kernels_preloaded: bool = decision(Decision(
        "kernels_preloaded", LAYER, FLAG, False, field="kernels_preloaded",
        doc="With weights_before_fence after a conv: the first kernel tile is loaded by the previous conv's last "
            "kernel tile (as its own prefetch, into the words below the slot that tile reads), so it lands while the "
            "previous layer computes; the layer's code loads none of it (allocate-dram decides where the previous "
            "conv's last tile hides the loads' issue, tile-to-asm checks the previous conv, "
            "snowir/plan/weights_end.py).",
        rule="with weights_before_fence, on a conv layer", needs=lambda op: _conv(op) and _has("weights_before_fence")(op),
        planned=False))
    """In a whole-model program, the conv's first kernel tile is the previous conv's last
    prefetch (codegen/conv.py `preload`): its cold start loads only maps (and biases)."""
    maps_preloaded: bool = decision(Decision(
        "maps_preloaded", LAYER, FLAG, False, field="maps_preloaded",
        doc="With fence after a bypass-slice 1x1 conv of one maps strip: the conv's first maps strip is loaded by the "
            "previous conv's last kernel tile, each row as that tile's pixels free the words it lands on (a queue's "
            "depth of ops after them), so it lands while the previous layer computes; the layer's code loads none "
            "of it (allocate-dram decides, tile-to-asm checks the previous conv, snowir/plan/weights_end.py).",
        rule="with fence, on a conv layer", needs=lambda op: _conv(op) and _has("fence")(op), planned=False))
    """In a whole-model program, the conv's first maps strip is the previous conv's last tile's
    row loads (codegen/conv.py `_residual`, plan/weights_end.preload_maps_loads): its cold start
    loads only kernels and biases."""
    first_slot: int = decision(Decision(
        "first_slot", LAYER, INT, 0, field="first_slot",
        doc="With weights_before_fence after a conv whose last kernel tile sits in weights slot 0: the word of the "
            "second slot (the kernel tile's `slot`), where this conv's kernel tile 0 lands (its cold start's load, or "
            "with kernels_preloaded the previous conv's prefetch), the tiles alternating slots from there (absent: "
            "0). Followed by a COOP conv of double-buffered kernel tiles (allocate-dram decides, tile-to-asm checks).",
        rule="the second weights slot's word, with weights_before_fence, on a conv layer", minimum=1,
        needs=lambda op: _conv(op) and _has("weights_before_fence")(op), refuse=lambda plan, hw: first_slot_refusal(plan),
        planned=False))
    """The weights slot of the conv's kernel tile 0 (snowir/plan/weights_end.py): the second slot when the
    previous conv ends in the first, so its first kernels still load before the fence (a serpentine
    conv of an even number of tile changes ends in slot 0)."""
    stagger: int = decision(Decision(
        "stagger", KERNEL_TILE, INT, 0, field="stagger",
        doc="Tiles alternate between bases 0 and F = stagger; the F words of the next tile that miss the current "
            "one load while it computes, the rest after a flush.", minimum=1))
    """Staggered kernel tiles' F."""
    resident_weights: bool = decision(Decision(
        "resident", KERNEL_TILE, FLAG, False, field="resident_weights",
        doc="Every tile held at once (tile t at t x kernel words), loaded once for the layer."))
    """Every kernel tile held in the weights buffer at once (tile t at t x kernel words): loaded
    once for the layer, not once per maps strip (`weights_resident`)."""
    prefetch_after: int | None = decision(Decision(
        "prefetch_after", LAYER, INT, None, field="prefetch_after",
        doc="Vector ops of a kernel tile queued before its prefetches (the next strip's maps, the next tile's "
            "weights) issue (absent: the vector queue's depth, 16; a tile with fewer ops: its prefetches first, "
            "behind a flush). Followed; a value placing them as the default does is refused.",
        rule="a conv layer's ops queued before a tile's prefetches, >= the vector queue's depth", minimum=1,
        needs=_conv, refuse=lambda plan, hw: prefetch_refusal(plan, hw)))
    """Where a tile's prefetches go (codegen/pixels.kernel_tile): once this many of its vector ops
    are queued, so that the loads overwrite only words older, finished vector ops read."""
    load_next_whole: bool = decision(Decision(
        "load_next_whole", LAYER, FLAG, False, field="load_next_whole",
        doc="The next maps strip (a residual conv's: and its bypass rows) loads whole during the strip's last "
            "kernel tile (absent: in one piece per kernel tile where each piece is a whole number of vMAC "
            "counts, codegen/strip_loads.spreads). Followed; on a layer whose strips never load in pieces, refused.",
        rule="on a conv layer", needs=_conv, refuse=lambda plan, hw: whole_refusal(plan, hw)))
    """The next strip's loads not spread over the kernel tiles (codegen/strip_loads.spreads)."""
    paired_start: bool = decision(Decision(
        "paired_start", LAYER, FLAG, False, field="paired_start",
        doc="Resident kernel tiles over double-buffered strips: the cold start loads maps tile 1 right behind maps "
            "tile 0, ahead of kernel tiles 1..T-1, and each kernel tile computes over maps tile 0 then 1, so both "
            "strips' MACs run while the later tiles arrive (snowir/plan/paired_start.py prices it). Followed; "
            "elsewhere refused.",
        rule="on a conv layer", needs=_conv, refuse=lambda plan, hw: paired_start_refusal(plan)))
    """The first two maps strips computed kernel tile by kernel tile (codegen/conv.py `_paired_strips`)."""
    kernel_order: str = decision(Decision(
        "kernel_order", LAYER, WORD, "up", field="kernel_order",
        doc="The kernel tiles' order in each row group (Kloop): up (absent; 0, 1, ... in every group) or serpentine "
            "(up in even groups, down in odd ones, so a group starts with the tile the previous one ended with and "
            "that tile is not loaded again; a COOP strip, double-buffered, with the one before it too). Followed by "
            "column-split INDP convs and COOP convs of double-buffered kernel tiles whose next strip loads in a "
            "strip's last tile (whole-buffer strips, gathered banks); elsewhere refused.",
        rule="up or serpentine, on a conv layer", valid=lambda v: v in KERNEL_ORDERS, needs=_conv,
        refuse=lambda plan, hw: kernel_order_refusal(plan)))
    """The kernel tiles of each row group, in turn (`kernel_tile_order`)."""


MAPS_BUFFERING = Decision(
    "maps_buffering", LAYER, BUFFERING, None,
    doc="double: maps tile i in bank i mod 2 (a residual conv: half i mod 2), the next loading while the current "
        "computes; whole: a tile may fill the buffer, its rows loaded as the previous tile's last kernel tile frees "
        "them; single: a residual conv's tiles in turn at the bottom.")
FENCE = Decision(
    "fence", LAYER, FLAG, False,
    doc="Whole-model programs: the layer's loads wait for the previous layer's vector ops (set where its first "
        "loads could overwrite buffer words those still read); absent: they overlap.")
SLOT = Decision(
    "slot", KERNEL_TILE, INT, None,
    doc="Double-buffered tiles alternate between weights words 0 and `slot`, the next loading while the current "
        "computes (a kernel larger than the buffer: its chunks do).", minimum=1)
CU_ROWS = Decision(
    "cu_rows", MAPS_TILE, INT, None,
    doc="Row groups (INDP, COOP coop_rows): each CU computes cu_rows consecutive rows of the row group.", minimum=1)
RING = Decision(
    "ring", MAPS_TILE, INT, None,
    doc="A max pool's tile over a ring of N input-row slots, each row loaded once, instead of a strip loaded "
        "whole.", minimum=1)


def _output(op: Operation) -> bool:
    label = op.properties.get("label")
    return isinstance(label, StringAttr) and label.data == "output"


CHANNELS = Decision(
    "channels", DRAM_REGION, INTS, None, length=3, needs=_output,
    valid=lambda ch: len(ch) == 3 and 0 <= ch[0] and 0 < ch[1] and ch[0] + ch[1] <= ch[2],
    doc="An output region that is a channel slice of a device concat's tensor: [first, count, total]; the "
        "write-backs go to channel first of each pixel, pixels total words apart; two writers of a tensor write "
        "disjoint channels; must be where the graph's concat places the output (tile-to-asm refuses an edit).",
    rule="[first, count, total] marks an 'output' region that is a channel slice, first + count <= total")
"""The placement of a concat's operand (nn-to-tile sets it from the graph; allocate-dram and the
write-back follow it)."""
PIXELS = Decision(
    "pixels", DRAM_REGION, INTS, None, length=6, needs=_output,
    valid=lambda px: len(px) == 6 and 0 <= px[0] < px[2] and 0 <= px[1] < px[3] and min(px[4:]) >= 1,
    doc="An output region that is one phase of an interleave (a ConvTranspose's or a nearest Resize's result, "
        "written in place): [oy, ox, sy, sx, height, width]; the layer's pixel (i, j) goes to the result's pixel "
        "(oy + sy·i, ox + sx·j), the write-back stepping sx pixels and sy rows; phases of one result may not meet; "
        "must be where the graph's interleave places the output (tile-to-asm refuses an edit).",
    rule="[oy, ox, sy, sx, height, width] marks an 'output' region that is an interleave's phase, "
         "0 <= oy < sy, 0 <= ox < sx")
"""The placement of a ConvTranspose phase (conv-transpose-to-conv sets it; allocate-dram and the
write-back follow it)."""
PHASES = Decision(
    "phases", DRAM_REGION, INTS, None, length=4, needs=_output,
    valid=lambda ph: len(ph) == 4 and min(ph) >= 1,
    doc="An output region that is a merged sub-pixel conv's interleave result, written in place (a ConvTranspose's, "
        "method cu-stride): [sy, sx, height, width]; the layer's channel (a·sx + b)·M + m of pixel (i, j) goes to "
        "the result's pixel (sy·i + a, sx·j + b) channel m (M = K / (sy·sx)): phase row a's kernels on CU a's first "
        "sx·M vMACs, vmov stride one result row, the write-back mask their vMACs, stepping sx pixels and sy rows; "
        "must be where the graph's interleave places the output (tile-to-asm refuses an edit).",
    rule="[sy, sx, height, width] marks an 'output' region that is a merged conv's interleave result, all >= 1")
"""The placement of a merged ConvTranspose conv's phases (conv-transpose-to-conv's cu-stride method
and partition-host set it; allocate-dram, the kernel loads, the CU stride and the write-back follow it)."""
HOST_READ = Decision(
    "host_read", DRAM_REGION, INTS, None, length=6, needs=_output,
    valid=lambda r: len(r) == 6 and min(r[:2]) >= 1 and 0 <= r[2] < r[0] and 0 <= r[3] < r[1] and min(r[4:]) >= 1,
    doc="An output region holding a merged sub-pixel conv's phase grid as its write-back writes it (K = sy·sx·M "
        "channels a grid pixel), read by the host alone (host layers, the model's outputs) as its interleave's "
        "result: [sy, sx, oy, ox, height, width]; the result's pixel (y, x) channel m is grid pixel "
        "((y + oy) div sy, (x + ox) div sx) channel (((y + oy) mod sy)·sx + (x + ox) mod sx)·M + m, for y < height, "
        "x < width (the crop). The host applies the permutation as it copies the result's words back, each once: no "
        "host interleave layer runs and the device writes as without it. Followed by the runner's reads, the golden "
        "comparison and the end-to-end timeline; must be where the graph's interleave reads the output (tile-to-asm "
        "refuses an edit).",
    rule="[sy, sx, oy, ox, height, width] marks an 'output' region the host reads through an interleave, "
         "0 <= oy < sy, 0 <= ox < sx, height and width >= 1")
"""A layout the host reader follows (issue 36 item 1, issue 38 item 2): partition-host places a merged
conv's interleave `host-read` where only host layers or the model's outputs read its result;
nn-to-tile records it; tile-to-asm passes it to the image (`host_read`), which the runner's read,
the golden comparison and the timeline follow (snowir/driver/segment_run.py `host_read_words`)."""



def _weights(op: Operation) -> bool:
    label = op.properties.get("label")
    return isinstance(label, StringAttr) and label.data == "weights"


BIAS_LAYOUTS = ("kernel", "maps")
"""Where a conv's biases live: a 16-word block after each kernel in the weights buffer (`vmov bias`),
or the layer's bias block after the last kernel of its weight image, loaded once into the top of
the maps buffer and read by `vmov mbias` (snowir/plan/shapes.py `bias_block_words`, `bias_room`)."""

BIASES = Decision(
    "biases", DRAM_REGION, WORD, BIAS_LAYOUTS[0], valid=lambda v: v in BIAS_LAYOUTS, needs=_weights,
    doc="Where the weight image keeps the layer's biases: kernel (absent; a 16-word block after each kernel, "
        "`vmov bias` reading it from the weights buffer) or maps (kernels alone, then the layer's bias block: "
        "per kernel tile its biases and as many zeros; loaded once to the top of the maps buffer, whose banks the "
        "layer's maps tiles then leave it, and read by `vmov mbias`). Chosen by cost (nn-to-tile), followed by "
        "the packing, the kernel loads and the golden model's unpacking; an edit repacks the image with the "
        "kernel tile's body written empty `{}`, or is refused in one line.",
    rule="kernel or maps, on a 'weights' region")
"""A weight-image layout (issue 38): the planner prices both (snowir/plan/conv.py `plan_conv`),
snowir/plan/layout.py packs and unpacks, the generators load and read the bias block
(refusals.py's `bias_refusal` names what cannot take `maps`)."""


def _output_or_input(op: Operation) -> bool:
    label = op.properties.get("label")
    return isinstance(label, StringAttr) and label.data in ("output", "maps", "bypass")


CHANNEL_TILES = Decision(
    "channel_tiles", DRAM_REGION, INTS, None, length=3, needs=_output_or_input,
    valid=lambda ct: len(ct) == 3 and ct[0] >= 1 and 0 <= ct[1] < ct[2],
    doc="The region's tensor stored channel-tile-major (NCHW[w]c): [w, block, blocks]; channels [w·g, w·g + w) "
        "of every pixel are an (H, W, w) run at word g·H·W·w. On an 'output' region: the layer's kernel tiles of w "
        "kernels write blocks block, block + 1, ... (pixels w words apart, tiles H·W·w words apart; a COOP conv); "
        "on a 'maps' region: the layer reads block `block` whole, as a dense (H, W, w) input, or, a grouped conv of "
        "w channels a group, group g reads block block + g (its maps tiles one block's rows, each kernel tile "
        "loading its own; Mloop); on a 'bypass' region: kernel tile t's bypass is block block + t, each strip's "
        "slice one LD of its rows (a COOP residual conv with bypass slices of one w-kernel tile); must be where "
        "the graph places the tensor (tile-to-asm refuses an edit).",
    rule="[width, block, blocks] marks an 'output', 'maps' or 'bypass' region of a channel-tile-major tensor, "
         "width >= 1, 0 <= block < blocks")
"""A depthwise conv's producer's result (depthwise-to-grouped sets it, `segments.CHANNEL_TILES`) or a channel
part's partial sums the next reads as its bypass (split-kernels); nn-to-tile records it; the write-back, the readers' loads,
allocate-dram and the runner's reads and writes follow it. On a grouped reader's maps region it is
also where the groups' blocks are (`ConvShape.block_maps`, read from it by tile/build.shape_of): the
blocks are the kernel-tile loop, so no second attribute states them."""


def _input(op: Operation) -> bool:
    label = op.properties.get("label")
    return isinstance(label, StringAttr) and label.data in ("maps", "bypass")


CROP = Decision(
    "crop", DRAM_REGION, INTS, None, length=4, needs=_input,
    valid=lambda w: len(w) == 4 and 0 <= w[0] < w[2] and 0 <= w[1] < w[3],
    doc="An input region (maps or bypass) that is a device crop's window of a wider tensor (an ONNX Slice of H and "
        "W, read in place): [y0, x0, height, width] of the tensor the region spans; the layer's input (bypass) pixel "
        "(i, j) is the tensor's (y0 + i, x0 + j): its loads start at that pixel and step width x C words a row, one LD "
        "a row where the window is narrower than the tensor; the window must lie inside the tensor; must be where "
        "the graph's crop places the input (tile-to-asm refuses an edit).",
    rule="[y0, x0, height, width] marks a 'maps' or 'bypass' region that is a crop's window, "
         "0 <= y0 < height, 0 <= x0 < width")
"""The placement of a crop's reader (nn-to-tile sets it from the graph; allocate-dram and the maps
and bypass loads follow it)."""

IR_ONLY: tuple[Decision, ...] = (MAPS_BUFFERING, FENCE, SLOT, CU_ROWS, RING, CHANNELS, PIXELS, PHASES, HOST_READ,
                                 BIASES, CHANNEL_TILES, CROP)
"""Decisions the generators read from the IR itself (per maps tile, or not part of a conv's plan)."""

PLAN_DECISIONS: tuple[Decision, ...] = tuple(f.metadata["decision"] for f in fields(ConvDecisions))
WEIGHTS_BEFORE_FENCE: Decision = next(d for d in PLAN_DECISIONS if d.name == "weights_before_fence")
PAIRED_START: Decision = next(d for d in PLAN_DECISIONS if d.name == "paired_start")
KERNELS_PRELOADED: Decision = next(d for d in PLAN_DECISIONS if d.name == "kernels_preloaded")
FIRST_SLOT: Decision = next(d for d in PLAN_DECISIONS if d.name == "first_slot")
MAPS_PRELOADED: Decision = next(d for d in PLAN_DECISIONS if d.name == "maps_preloaded")
"""The plan decisions a later pass (allocate-dram) sets: read and written by it, the verifier and
tile-to-asm through these declarations."""
DECISIONS: tuple[Decision, ...] = PLAN_DECISIONS + IR_ONLY
"""Every declared decision."""


def decisions_on(op_name: str, among: Iterable[Decision] = DECISIONS) -> tuple[Decision, ...]:
    return tuple(d for d in among if d.op == op_name)


def declare_on(op_name: str) -> Callable[[type], type]:
    """A class decorator (under `@irdl_op_definition`): the op gets an optional property per
    decision it owns, and a `verify_decisions` its verify_ calls."""

    def deco(cls: type) -> type:
        for d in decisions_on(op_name):
            setattr(cls, d.name, opt_prop_def(d.codec.constraint))
        return cls

    return deco


def verify_decisions(op: Operation) -> str | None:
    """The first rule of a declared decision the op breaks (None: none)."""
    for d in decisions_on(op.name):
        why = d.verify(op)
        if why is not None:
            return why
    return None


def plan_decisions(op_name: str, op: Operation) -> dict[str, Any]:
    """The `ConvDecisions` fields `op` records, as keyword arguments of ConvPlan."""
    return {d.field: d.value(op) for d in decisions_on(op_name, PLAN_DECISIONS)}


def write_decisions(op_name: str, plan: Any, props: dict[str, Attribute]) -> None:
    """Record the plan's `ConvDecisions` fields that `op_name` owns into `props`."""
    for d in decisions_on(op_name, PLAN_DECISIONS):
        if d.planned:
            d.write(props, getattr(plan, d.field))


def decision_docs() -> dict[str, str]:
    """FIELD_DOCS entries of the declared decisions."""
    return {f"{d.op}.{d.name}": d.doc + (f" Rule: {d.rule}." if d.rule else "") for d in DECISIONS}


KERNEL_ORDERS = ("up", "serpentine")


def kernel_tile_order(plan: Any, group: int) -> list[int]:
    """The kernel tiles row group `group` of `plan` computes, in turn, under its `kernel_order`."""
    up = list(range(plan.tiles))
    return up[::-1] if plan.kernel_order == "serpentine" and group % 2 else up


def kernel_tile_sends(plan: Any) -> int:
    """Kernel tiles `plan` loads over a Kloop layer: each once if resident or alone; else every
    tile of each row group, but under serpentine a later group's first tile, still in the buffer
    (a COOP strip's first two: the tile it starts with and the one before it, double-buffered)."""
    groups = len(plan.strips)
    if plan.resident_weights or plan.tiles == 1:
        return plan.tiles
    kept = 0 if plan.kernel_order != "serpentine" else 1 if plan.indp else 2
    return plan.tiles * groups - (groups - 1) * kept
