"""
depthwise-to-grouped: a depthwise conv (one input channel per output channel) -> block-diagonal
convs, in the form with the lowest placement estimate (docs/lowering.md, "Depthwise convs: the
bound"): a grouped conv of 16 channels per group whose 16 x 16 kernel blocks are diagonal (C a
multiple of 16; else see below), one ungrouped C x C diagonal conv (`DepthwiseToGrouped.width`),
or ceil(C/16) diagonal convs over 16-channel slices of the input joined by a placed concat
(`_slices`: a kernel row of a gathered slice is one trace at the bound's 1/16 lanes). The slices'
input may be channel-tile-major (passes/nn/depthwise_slices.py), so that slice g reads block g
whole, with no gather, where the estimate says so (`BLOCKED_MIN_GAIN`): written so by its writer
(`_tiled_writer`: a COOP conv only depthwise convs read, in one layer, its 16-kernel tiles a
block apart; or a host activation; `channel_tiles = 16`; several depthwise readers of one tensor
decided together, `_shared_blocks`), or by its producer split into one conv
per 16-channel block (`_blocked_producer`, `channel_block`: where one conv cannot write the blocks,
C not whole blocks or an INDP stem whose blocks run INDP).
Measured (bench/depthwise.py): MobileNetV2's 144-channel 56² 3x3/1 after its 24 -> 144 1x1,
630.7 k -> 355.6 k cycles (39% -> 70% of the bound), the block 992.0 k -> 747.6 k, with the
producer split; 263.5 k -> 262.1 k and 655.6 k -> 623.4 k with the one producer writing the blocks.

Why: the 16 MACs of a vMAC multiply 16 contiguous channels of one trace into one output
channel, so a depthwise conv (one channel per output) has no dense mapping (docs/lowering.md,
"Depthwise convs"). The grouped form is one Snowflake runs: each vMAC still reads its group's
16 channels, 15 of them against zero weights.
That wastes 15/16 of the MACs, and the code generator reaches ~20% of the rest (16-kernel
groups, short traces), so it is a cost decision: the rewrite happens only where the estimate for
the grouped conv (the planner's, or the code's issue slots where larger: a trace per tap is
issue-bound, snowir/plan/issue.py), plus the host's DRAM round trip when host layers produce its
input or read its output (`round_trip_ms`, as add-to-bypass), beats the host estimate
(Cortex-A9, docs/machine.md). Both numbers go in the IR as `placement_cost`, on the conv that
runs or on the depthwise conv left for the host. A mul by a per-channel constant (fold-batch-norm
makes it a depthwise 1x1 conv) is decided here too. Measured:
3x3 depthwise 32x112², 64x56², 384x14², 960x7² take 4.61 / 2.29 / 0.86 / 0.51 ms on the device
against 5.36 / 2.65 / 0.92 / 0.52 ms on the host; 1x1 (a BN left without a conv) 0.50 ms against
the host's memory-bound 1.61 ms; a 7x7 global pool over 512 channels (one output pixel per
16-lane trace) would take 0.26 ms against 0.2 ms, so it stays on the host. The integer sums are the depthwise ones (zero products add nothing), so golden and machine
agree bit for bit. The new conv carries `block_diagonal`: reports count its useful MACs from
the depthwise shape, not from the lanes the machine keeps busy.

The group width is chosen by the same estimate (`DepthwiseToGrouped.width`): 16-channel groups
(a trace a tap and its ADDI pair, issue-bound) or one C x C diagonal conv (traces of a kernel
row, kw·C words, MAC-bound at 16/C of the bound's lanes). Measured (bench/depthwise.py):
32 x 112² 3x3 0.75 M cycles in groups, 0.45 M as one 32 x 32 conv (50% of the bound,
`depthwise_bound`), 24 x 56² 0.19 M / 0.09 M, 48 x 28² 5x5 0.17 M / 0.16 M; from 64 channels
the groups win. A 1x1 keeps the groups.

C not a multiple of 16 (and the groups chosen), the same decision: above 16 channels the conv keeps its depthwise form
and is marked `lane_groups` — the tile level runs it as ceil(C/16) block-diagonal groups, the
last padded past C (its extra lanes read the next pixel's words against zero weights, its extra
kernels are zero and masked at the write-back); below 16, one group is the whole input, so the
conv becomes an ungrouped C x C diagonal conv (traces of kw·C words per kernel row rather than
one 16-word trace per tap).

Left alone: channel multipliers > 1, convs already grouped by 16, and convs whose grouped form
the planners refuse (a global pool over 16 x 16 pixels: 16 such kernels overflow the weights buffer).

Grouped convs the planners refuse as they are (several input channels a group, but output
channels a group not whole kernel tiles: ShuffleNet's 1x1 convs, 4 groups of 28 / 34 / 68 / 136)
become ungrouped convs over all C input channels whose kernels are zero outside their group
(`dense_groups`): G times the MACs, the same integer sums, so golden and machine agree bit for
bit; a residual input stays exact (an ungrouped conv's bypass). The same cost rule decides, and
this runs over the whole module before the depthwise rule, so a depthwise conv between two such
convs sees device neighbours (no round trip). `dense_groups = G` tells the reports the useful
MACs (C/G channels a kernel). Measured on ShuffleNet: all 32 grouped 1x1 convs move (host estimate
3.2-5.4 ms each).
"""

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr, UnitAttr
from xdsl.passes import ModulePass
from xdsl.ir import Operation
from xdsl.rewriter import InsertPoint
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from snowir.dialects import nn
from snowir.host_model import host_ms, round_trip_ms
from snowir.host_nodes import valid_taps
from snowir.hw import SnowflakeConfig
from snowir.nn_util import const_of, constant_op, name_part, shape_of
from snowir.plan.issue import placement_cycles
from snowir.plan.layout import LANE_GROUPS
from snowir.plan.shapes import LoweringError
from snowir.passes.nn.depthwise_slices import (BLOCKED_MIN_GAIN, CHANNEL_TILES, LANES, SLICED, SliceConv,
                                              blocked_cycles as _blocked_cycles, blocked_producer as _blocked_producer,
                                              blocks_run_indp as _blocks_run_indp, device_cycles as _device_cycles,
                                              erase_with_constants as _erase_with_constants, producer_blocks as _producer_blocks,
                                              runs_indp as _runs_indp,
                                              slice_conv as _slice_conv, slice_sizes as _slice_sizes,
                                              tiled_cycles as _tiled_cycles, tiled_writer as _tiled_writer,
                                              block_readers as _block_readers, is_depthwise,
                                              diagonal_conv, grouped_over_blocks, over_blocks_cycles as _over_blocks_cycles)
from snowir.tile.lowerable import planned_conv



@dataclass(frozen=True)
class DepthwiseBound:
    """What Snowflake can do at best for a depthwise conv over channel-innermost (HWC) maps, the
    layout every device tensor has (docs/lowering.md, "Depthwise convs: the bound"). A MAC's
    lanes are channels in both modes: COOP sums 16 contiguous words into one output, and a
    vMAC's output is one channel, so a 16-word cycle holds at most `lanes_useful` words of its
    channel; INDP broadcasts one word to 16 kernels written back as 16 contiguous words, i.e.
    16 channels of one pixel, so the word is useful to one lane. Hence at most `lane_share` of
    the MACs do useful work, and the layer takes at least `cycles`: the larger of its useful
    MACs at that share and its DRAM traffic: input and output once, and each channel's kernel
    as a vMAC must hold it, the words its traces read (kh·kw / lane_share: 16 a tap from 16
    channels on, 15 of them zero), once. `dram_cycles_kernels_once` is the traffic with the
    kernels' useful words alone (kh·kw a channel), which no vMAC can use as they are: the bound
    before 2026-11-29, kept for comparison (`cycles_kernels_once`)."""

    useful_macs: int
    """multiply-accumulates of the depthwise conv, padding taps excluded"""
    lane_share: float
    """useful share of a vMAC's lanes per MAC cycle"""
    mac_cycles: float
    """useful_macs / (all MACs x lane_share)"""
    dram_cycles: float
    """input, output and bias words once, and each kernel's words as its vMAC holds them, over the
    shared DRAM bus"""
    dram_cycles_kernels_once: float = 0.0
    """the same with each kernel's kh·kw useful words alone"""

    @property
    def cycles(self) -> float:
        return max(self.mac_cycles, self.dram_cycles)

    @property
    def cycles_kernels_once(self) -> float:
        return max(self.mac_cycles, self.dram_cycles_kernels_once)

    def utilisation(self, hw: SnowflakeConfig) -> float:
        """Useful-MAC utilisation at the bound: useful MACs / (cycles x MACs)."""
        return self.useful_macs / (self.cycles * hw.macs)


def lane_share(c: int, kw: int, lanes: int) -> float:
    """Useful share of a COOP trace's lanes for a depthwise conv over C channel-innermost
    channels: a kernel row of one channel group's g = min(C, lanes) channels is kw·g contiguous
    words (for C > lanes a group's taps are C words apart, so a trace is one tap's g words), of
    which kw are the vMAC's channel, over ceil(kw·g / lanes) cycles. 1/lanes for C >= lanes."""
    g = min(c, lanes)
    return kw / (lanes * -(-kw * g // lanes))


def depthwise_bound(c: int, h: int, w: int, kernel: tuple[int, int], stride: tuple[int, int],
                    pads: tuple[int, int, int, int], hw: SnowflakeConfig) -> DepthwiseBound:
    """The bound of a C-channel depthwise conv over h x w (pads top, left, bottom, right). A
    channel's kernel is the words its vMAC's traces read: kh kernel rows of kw useful words at
    `lane_share`, kh·kw / lane_share words (kh·kw·16 from 16 channels on: a 16-word group a tap;
    below 16, a row's ceil(kw·C / 16) groups), for every channel, a last block's too."""
    (kh, kw), (sy, sx), (pt, pl, pb, pr) = kernel, stride, pads
    oh, ow = (h + pt + pb - kh) // sy + 1, (w + pl + pr - kw) // sx + 1
    useful = c * valid_taps(oh, kh, sy, pt, 1, h) * valid_taps(ow, kw, sx, pl, 1, w)
    share = lane_share(c, kw, hw.lanes)
    maps = c * (h * w + oh * ow + 1)  # input, output, biases
    held = c * kh * round(kw / share)  # kw / share = 16 · ceil(kw·g / 16) words a kernel row: an integer
    once = c * kh * kw
    return DepthwiseBound(useful, share, useful / (hw.macs * share), 2 * (maps + held) / hw.dram_bytes_per_cycle,
                          2 * (maps + once) / hw.dram_bytes_per_cycle)


DENSE_GROUPS = "dense_groups"
"""On an ungrouped conv whose kernels are a G-group conv's, zero outside their group: G."""


def dense_weights(w: np.ndarray, groups: int) -> np.ndarray:
    """A `groups`-group conv's (K, C/G, kh, kw) kernels as an ungrouped conv's (K, C, kh, kw):
    kernel k reads its group's C/G channels, zero elsewhere."""
    k, cg, kh, kw = w.shape
    kg = k // groups
    out = np.zeros((k, cg * groups, kh, kw), w.dtype)
    for g in range(groups):
        out[g * kg:(g + 1) * kg, g * cg:(g + 1) * cg] = w[g * kg:(g + 1) * kg]
    return out


def dense_conv(op: nn.Conv2dOp, w: np.ndarray) -> tuple[nn.ConstantOp, nn.Conv2dOp]:
    """`op` (grouped, weights `w`) as an ungrouped conv with `dense_weights`, not yet in a block."""
    groups = op.groups.value.data
    weight = constant_op(dense_weights(w, groups).astype(np.float32), "w_dense")
    conv = nn.Conv2dOp(op.input, weight.result, op.bias, op.output.type, **op.window(), relu=op.relu is not None,
                       bypass=op.bypass)
    conv.attributes.update(op.attributes)
    conv.attributes[DENSE_GROUPS] = IntegerAttr(groups, 64)
    return weight, conv


def grouped_refused(op: nn.Conv2dOp, hw: SnowflakeConfig) -> bool:
    """A grouped conv with several channels a group that the device cannot run as it is (its
    groups' kernels not whole 16-lane groups, or the planners refuse it)."""
    k, cg = shape_of(op.weight)[:2]
    groups = op.groups.value.data
    if groups == 1 or cg == 1:
        return False
    if (k // groups) % LANES:
        return True
    try:
        planned_conv(op, hw)
    except LoweringError:
        return True
    return False



def _replace(op: nn.Conv2dOp, new: Operation, rewriter: PatternRewriter) -> None:
    """`op` replaced by `new`, and its weight constant erased when nothing else reads it."""
    old = op.weight.owner
    rewriter.replace(op, new)
    if isinstance(old, nn.ConstantOp) and not old.result.uses:
        rewriter.erase(old)


class GroupedToDense(RewritePattern):
    def __init__(self, hw: SnowflakeConfig):
        self.hw = hw

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.Conv2dOp, rewriter: PatternRewriter) -> None:
        if "place" in op.attributes or "placement_cost" in op.attributes or not grouped_refused(op, self.hw):
            return
        w = const_of(op.weight)
        if w is None:
            return
        weight, conv = dense_conv(op, w)
        if not _pays(self.hw, conv, op):
            return
        rewriter.insert(weight, InsertPoint.before(op))
        _replace(op, conv, rewriter)


class DepthwiseToGrouped(RewritePattern):
    def __init__(self, hw: SnowflakeConfig):
        self.hw = hw

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.Conv2dOp, rewriter: PatternRewriter) -> None:
        c = shape_of(op.input)[1]
        if not is_depthwise(op) or "place" in op.attributes \
                or LANE_GROUPS in op.attributes or "placement_cost" in op.attributes:
            return
        w = const_of(op.weight)
        if w is None:
            return
        width = self.width(op, w, c)
        sliced = _sliced_cycles(self.hw, op, w)
        form = self.form_cycles(op, w, width)
        blocks = w.shape[2:] != (1, 1) and op.bypass is None  # a kernel row to span: slices may read blocks
        writer = _tiled_writer(op) if blocks else None
        if writer is not None and len(readers := _block_readers(writer)) > 1:
            if self._shared_blocks(writer, readers, rewriter):
                return
            writer = None  # the readers' own forms over the channel-innermost tensor
        producer = _blocked_producer(op) if blocks else None
        if writer is not None or producer is not None:
            # the input channel-tile-major, if it beats the best form over (H, W, C): its writer
            # writing every block (`_tiled_cycles`), or the producer as one conv per block
            alone = _device_cycles(self.hw, writer or producer[0]) if isinstance(writer or producer[0], nn.Conv2dOp) else 0
            tiled = sum(_tiled_cycles(self.hw, op, w, writer)) if writer is not None else float("inf")
            over = _over_blocks_cycles(self.hw, op, w, writer) if writer is not None else (0.0, float("inf"))
            split = producer is not None and (not _runs_indp(self.hw, producer[0]) or _blocks_run_indp(self.hw, *producer))
            blocked = _blocked_cycles(self.hw, op, w, *producer) if split else float("inf")  # type: ignore[misc]
            if min(tiled, blocked, sum(over)) < (1 - BLOCKED_MIN_GAIN) * (min(sliced, form) + alone):
                if sum(over) < min(tiled, blocked):  # one grouped layer over the blocks, by cost against the slices
                    self._place_over_blocks(op, w, over[1], rewriter, writer)  # type: ignore[arg-type]
                elif tiled <= blocked:
                    self._place_sliced(op, w, _tiled_cycles(self.hw, op, w, writer)[1], rewriter, tiled=writer)
                else:
                    self._place_sliced(op, w, blocked - alone, rewriter, producer)
                return
        if sliced < form:
            self._place_sliced(op, w, sliced, rewriter)
            return
        if width is None:  # padded groups: the tile level's form, the nn op stays depthwise
            op.attributes[LANE_GROUPS] = UnitAttr()
            if not _pays(self.hw, op, op):
                del op.attributes[LANE_GROUPS]
            return
        weight, conv = diagonal_conv(op, w, width)
        if not _pays(self.hw, conv, op):  # left for the host, with its costs
            return
        rewriter.insert(weight, InsertPoint.before(op))
        _replace(op, conv, rewriter)

    def width(self, op: nn.Conv2dOp, w: np.ndarray, c: int) -> int | None:
        """The block-diagonal group width, by the placement estimate: 16-channel groups (None:
        padded ones, C not a multiple of 16), one trace a tap and issue-bound, or one C x C
        diagonal conv, whose traces span a kernel row (kw·C words, 16/C of them useful) and
        which is MAC-bound: below 16 channels always, above where C is small enough that its
        C/16 times the bound's MACs beat the groups' issue slots (32 channels: 3x3 at 112²,
        0.45 M cycles estimated, 0.75 M in groups). A 1x1 (a per-channel mul) has no kernel row to
        span: 16-channel groups."""
        if c <= LANES:
            return c
        groups: int | None = None if c % LANES else LANES
        if w.shape[2:] == (1, 1):
            return groups
        if groups is not None:
            grouped = _diagonal_cycles(self.hw, op, w, groups)
        else:
            op.attributes[LANE_GROUPS] = UnitAttr()
            try:
                grouped = _device_cycles(self.hw, op)
            finally:
                op.attributes.pop(LANE_GROUPS, None)
        return c if _diagonal_cycles(self.hw, op, w, c) < grouped else groups


    def form_cycles(self, op: nn.Conv2dOp, w: np.ndarray, width: int | None) -> float:
        """The placement estimate of the block-diagonal form `width` chose."""
        if width is not None:
            return _diagonal_cycles(self.hw, op, w, width)
        op.attributes[LANE_GROUPS] = UnitAttr()
        try:
            return _device_cycles(self.hw, op)
        finally:
            del op.attributes[LANE_GROUPS]

    def _shared_blocks(self, writer: Operation, readers: list[nn.Conv2dOp], rewriter: PatternRewriter) -> bool:
        """The depthwise `readers` of one `writer` (`_block_readers`, more than one: PP-PicoDet's
        5x5/2 and 5x5/1 after one 1x1 HardSwish) decided together, as a tensor has one layout: the
        writer stores the blocks and each reader takes its form over them (one grouped layer, or
        its slices each reading a block whole, by estimate) if that, the writer's tiled cost
        counted once, beats the writer and each reader's best form over (H, W, C) by
        `BLOCKED_MIN_GAIN`, and every reader then pays on the device (else a host reader would
        read the blocks). True when placed so; False leaves the graph as it was (each reader then
        takes its own form over the channel-innermost tensor).

        Why: each reader alone saw a writer of two readers and gathered its channels (the 5x5/2
        at 100 x 76 x 128: 25% of its bound as slices, ~100% as one grouped layer over blocks)."""
        alone = _device_cycles(self.hw, writer) if isinstance(writer, nn.Conv2dOp) else 0.0
        written, plain, forms = 0.0, alone, []
        for r in readers:
            w = const_of(r.weight)
            written, over = _over_blocks_cycles(self.hw, r, w, writer)
            tiled = _tiled_cycles(self.hw, r, w, writer)[1]
            plain += min(_sliced_cycles(self.hw, r, w), self.form_cycles(r, w, self.width(r, w, shape_of(r.input)[1])))
            forms.append((r, w, over < tiled, min(over, tiled)))
        if not written + sum(f[3] for f in forms) < (1 - BLOCKED_MIN_GAIN) * plain \
                or any(not self._cost(r, cycles)[0] for r, _, _, cycles in forms):
            return False
        for r, w, over, cycles in forms:
            if over:
                self._place_over_blocks(r, w, cycles, rewriter, writer)
            else:
                self._place_sliced(r, w, cycles, rewriter, tiled=writer)
        return True

    def _cost(self, op: nn.Conv2dOp, cycles: float) -> tuple[bool, StringAttr]:
        """Whether `op` on the device at `cycles` beats the host (its DRAM round trip counted),
        and its `placement_cost`."""
        device = self.hw.cycles_to_ms(cycles)
        trip, host = round_trip_ms([op.input], op.output), host_ms(op)
        return device + trip < host, StringAttr(f"device {device:.4f} ms + DRAM round trip {trip:.4f} ms vs host {host:.4f} ms")

    def _pays(self, op: nn.Conv2dOp, cycles: float) -> StringAttr | None:
        """The `placement_cost` of `op` on the device at `cycles` if that beats the host (its DRAM
        round trip counted), else None, the op left for the host with the cost on it."""
        pays, cost = self._cost(op, cycles)
        if not pays:
            op.attributes["placement_cost"] = cost
            return None
        return cost

    def _place_over_blocks(self, op: nn.Conv2dOp, w: np.ndarray, cycles: float, rewriter: PatternRewriter,
                           writer: Operation) -> None:
        """`op` replaced by one grouped conv over the blocks its `writer` then stores
        (`grouped_over_blocks`, `CHANNEL_TILES`) if, at `cycles`, it pays; else left for the host."""
        cost = self._pays(op, cycles)
        if cost is None:
            return
        writer.attributes[CHANNEL_TILES] = IntegerAttr(LANES, 64)
        weight, conv = grouped_over_blocks(op, w)
        conv.attributes["placement_cost"] = cost
        rewriter.insert(weight, InsertPoint.before(op))
        _replace(op, conv, rewriter)

    def _place_sliced(self, op: nn.Conv2dOp, w: np.ndarray, cycles: float, rewriter: PatternRewriter,
                      producer: tuple[nn.Conv2dOp, np.ndarray] | None = None, tiled: Operation | None = None) -> None:
        """`op` replaced by its `_slices` and their placed concat if, at `cycles` (`_sliced_cycles`,
        or with `producer` the `_blocked_cycles` less the producer's own), it pays; else left for
        the host. Each slice carries the whole conv's costs. With `producer` (`_blocked_producer`)
        the input is written channel-tile-major: the producer becomes one conv per slice
        (`_producer_blocks`), each slice reading its block whole, no gather."""
        cost = self._pays(op, cycles)
        if cost is None:
            return
        if tiled is not None:  # the producer writes every block in one layer, each slice reads its block whole
            tiled.attributes[CHANNEL_TILES] = IntegerAttr(LANES, 64)
        parts = _slices(op, w)
        if producer is not None:
            p, pw = producer
            blocks = _producer_blocks(p, pw)
            for (sl, _, conv), (consts, block) in zip(parts, blocks, strict=True):
                rewriter.insert([*consts, block], InsertPoint.before(p))
                conv.operands[0] = block.output  # the slice's block itself, not a channel slice of one tensor
                sl.drop_all_references()
        for sl, consts, conv in parts:
            conv.attributes["placement_cost"] = cost
            rewriter.insert([*([] if producer is not None else [sl]), *consts, conv], InsertPoint.before(op))
        concat = nn.ConcatOp([conv.output for _, _, conv in parts], 1, op.output.type)
        if "onnx_node" in op.attributes:
            concat.attributes["onnx_node"] = op.attributes["onnx_node"]
        _replace(op, concat, rewriter)
        if producer is not None:
            _erase_with_constants(producer[0], rewriter)


GATHER_PIXEL_CYCLES = 10
"""What a slice layer's gather adds a input pixel, which the planners' estimate leaves out: one LD
of the pixel's 16 words and its two address registers (snowir/codegen/strip_loads.py
`load_maps`), straight-line code, so its instruction-cache fetches and register waits too.
Measured (simulated minus estimated cycles of a slice, before the grouped taps' pipelining):
5.5 a pixel at 14², 8.4-9.4 at 28² and 56², 10.0 at 112²; the upper end, so the choice errs
toward the forms without a gather."""

def _slices(op: nn.Conv2dOp, w: np.ndarray) -> list[SliceConv]:
    """The depthwise `op` (weights `w`) as ceil(C/16) convs, each over its 16-channel slice of
    the input (the last C mod 16; `nn.channel_slice`: the layer gathers its channels, so its
    maps are 16 words a pixel) with diagonal kernels, their outputs concatenated (placed: each
    writes its channel slice of one DRAM tensor, allocate-dram). Not yet in a block.

    Why: over a gathered 16-channel slice a kernel row is kw·16 contiguous words, one pipelined
    trace of kw MAC cycles with 1 useful lane in 16 (the bound), instead of a 16-word trace a
    tap (docs/lowering.md, "Depthwise convs: the bound")."""
    bias = const_of(op.bias) if op.bias is not None else None
    sizes = _slice_sizes(shape_of(op.input)[1])
    parts = []
    for g, size in enumerate(sizes):
        sl, consts, conv = _slice_conv(op, w, bias, g * LANES, size)
        name_part(conv, op, str(g))  # the reports' rows: dw.0, dw.1, ... and the concat dw
        conv.attributes[SLICED] = StringAttr(f"{g} of {len(sizes)}")
        parts.append((sl, consts, conv))
    return parts


def _sliced_cycles(hw: SnowflakeConfig, op: nn.Conv2dOp, w: np.ndarray) -> float:
    """The placement estimate of `op` as `_slices` (one slice of each width planned), each
    slice's gather included; inf where it does not apply: a 1x1 (no kernel row to span), a fused
    residual, an input already a channel slice, or the planners refuse a slice."""
    if w.shape[2:] == (1, 1) or op.bypass is not None or isinstance(op.input.owner, nn.ChannelSliceOp):
        return float("inf")
    h, w_in = shape_of(op.input)[2:]
    sizes = _slice_sizes(shape_of(op.input)[1])
    each = {}
    for size in set(sizes):
        sl, _, conv = _slice_conv(op, w, None, 0, size)
        try:
            each[size] = _device_cycles(hw, conv)
        finally:  # priced, then let go of: op.input's uses forget the slice
            conv.drop_all_references()
            sl.drop_all_references()
    return sum(each[size] + GATHER_PIXEL_CYCLES * h * w_in for size in sizes)


def _diagonal_cycles(hw: SnowflakeConfig, op: nn.Conv2dOp, w: np.ndarray, lanes: int) -> float:
    """The placement estimate of `diagonal_conv(op, w, lanes)`, built for pricing only and then
    let go of: its operands' use lists forget it (a priced form left among op.input's uses was
    seen by every later walk over them)."""
    conv = diagonal_conv(op, w, lanes, priced_only=True)[1]
    try:
        return _device_cycles(hw, conv)
    finally:
        conv.drop_all_references()


def _pays(hw: SnowflakeConfig, conv: nn.Conv2dOp, original: nn.Conv2dOp) -> bool:
    """Whether the planners place `conv` and estimate it, with the host's DRAM round trip,
    faster than the host's `original` (the depthwise or grouped conv as it was); the numbers go on
    the op that runs (`placement_cost`)."""
    try:
        plan = planned_conv(conv, hw)
    except LoweringError:
        return False  # the planners refuse it: host as it was
    device = hw.cycles_to_ms(placement_cycles(plan, hw))
    inputs = [original.input] + ([original.bypass] if original.bypass is not None else [])
    trip, host = round_trip_ms(inputs, original.output), host_ms(original)
    pays = device + trip < host
    (conv if pays else original).attributes["placement_cost"] = StringAttr(
        f"device {device:.4f} ms + DRAM round trip {trip:.4f} ms vs host {host:.4f} ms")
    return pays


@dataclass(frozen=True)
class DepthwiseToGroupedPass(ModulePass):
    name = "depthwise-to-grouped"
    hw: str = ""
    """A hardware description JSON (SnowflakeConfig fields); default: the ZC706 build."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        hw = SnowflakeConfig.load(self.hw or None)
        PatternRewriteWalker(GroupedToDense(hw), apply_recursively=False).rewrite_module(op)
        PatternRewriteWalker(DepthwiseToGrouped(hw), apply_recursively=False).rewrite_module(op)
