"""
The 16-channel slices of a depthwise conv (depthwise-to-grouped's slice forms) and the layouts of
their input: the slice convs and their sizes; the input written channel-tile-major (NCHW[16]c) by
its writer in one go (`tiled_writer`: a conv whose kernel tiles are the blocks, or a host
activation; `CHANNEL_TILES`), or by the producer split into one conv per block (`blocked_producer`,
`channel_block`); and their placement estimates (docs/lowering.md, "Depthwise convs: the bound").
Kept apart from the pass so each module reads as one thing; the pass chooses among the forms.
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import DenseResourceAttr, Float32Type, IntegerAttr, StringAttr, TensorType, UnitAttr, f32
from xdsl.ir import Operation
from xdsl.pattern_rewriter import PatternRewriter

from snowir.dialects import nn
from snowir.hw import SnowflakeConfig
from snowir.nn_util import const_of, constant_op, name_part, shape_of
from snowir.passes.nn.fuse_activation import activation_of
from snowir.passes.nn.input_layout import CHANNEL_BLOCK
from snowir.passes.nn.quantize import most_frac, weight_frac
from snowir.plan.issue import placement_cycles
from snowir.plan.layout import LANE_GROUPS, block_diagonal
from snowir.plan.shapes import LoweringError
from snowir.segments import CHANNEL_TILES
from snowir.tile.lowerable import planned_conv

LANES = SnowflakeConfig().macs_per_vmac
"""the channels one vMAC multiplies per trace word"""


SLICED = "depthwise_slice"
"""On a diagonal conv over a channel slice of a depthwise conv's input (`_slices`): which slice
it is, of how many."""

SliceConv = tuple[nn.ChannelSliceOp, tuple[nn.ConstantOp, nn.ConstantOp], nn.Conv2dOp]
"""A slice of a depthwise conv's input, the diagonal conv's weights and bias, the conv."""


def slice_sizes(c: int) -> list[int]:
    """The channel slices of a C-channel depthwise conv: 16 each, the last C mod 16."""
    return [LANES] * (c // LANES) + ([c % LANES] if c % LANES else [])


def slice_conv(op: nn.Conv2dOp, w: np.ndarray, bias: np.ndarray | None, start: int, size: int) -> SliceConv:
    """The diagonal size x size conv over channels [start, start + size) of `op`'s input."""
    n, _, h, w_in = shape_of(op.input)
    _, _, oh, ow = shape_of(op.output)
    sl = nn.ChannelSliceOp(op.input, start, size, TensorType(f32, [n, size, h, w_in]))
    weight = constant_op(block_diagonal(w[start:start + size], size).astype(np.float32), "w_diag")
    b = constant_op((bias[start:start + size] if bias is not None else np.zeros(size)).astype(np.float32), "b_slice")
    conv = nn.Conv2dOp(sl.output, weight.result, b.result, TensorType(f32, [n, size, oh, ow]), **op.window(),
                       relu=op.relu is not None)
    conv.attributes.update(op.attributes)
    conv.attributes["block_diagonal"] = UnitAttr()
    return sl, (weight, b), conv


BLOCKED = CHANNEL_BLOCK
"""On one conv of a producer split into one conv per 16-channel block of its output (`blocked_producer`,
each block a tensor of its own): which block, of how many."""


BLOCKED_MIN_GAIN = 0.03
"""The share by which a blocked form's estimate (the writer channel-tile-major, or the producer's
blocks, and the slices) must beat the producer and the best form over (H, W, C): the estimate
misses what the blocks' repeated input reads and per-layer starts cost (a 144 -> 144 1x1 before a
144-channel 56² 3x3 split into blocks: estimated 2% less, measured 1.2% more) and what a gather
costs exactly, so a near tie keeps the channel-innermost input, as split-kernels' MIN_GAIN does."""


def blocked_producer(op: nn.Conv2dOp) -> tuple[nn.Conv2dOp, np.ndarray] | None:
    """The conv producing the depthwise `op`'s input, with its weights, when it can be split into
    one conv per 16-channel block of that input (block g: channels [16g, 16g + 16) of every pixel,
    an (H, W, 16) tensor of its own): an ungrouped conv with constant weights, no residual input,
    no device placement decided yet, whose result the depthwise conv alone reads. None otherwise.

    Why: over the blocked layout a slice's kernel row is kw·16 contiguous words of its own block,
    loaded whole (one LD a strip), where over the channel-innermost (H, W, C) layout the slice
    gathers its 16 channels pixel by pixel (an LD a pixel: `GATHER_PIXEL_CYCLES`)."""
    p = op.input.owner
    if not isinstance(p, nn.Conv2dOp) or p.groups.value.data != 1 or p.bypass is not None \
            or "place" in p.attributes or "placement_cost" in p.attributes or LANE_GROUPS in p.attributes \
            or BLOCKED in p.attributes or len(list(p.output.uses)) != 1:
        return None
    pw = const_of(p.weight)
    if pw is None or (p.bias is not None and const_of(p.bias) is None):
        return None
    return p, pw


def runs_indp(hw: SnowflakeConfig, p: nn.Conv2dOp) -> bool:
    """Whether the planners run the producer INDP (fewer than 16 input channels): its kernel tiles
    are 64 kernels over the CUs' rows, which 16-kernel blocks would give up for COOP (an 8 -> 48
    1x1 at 14²: 1,422 cycles INDP, 5,519 as three COOP blocks, which the estimate, 347 against
    the blocks' share, does not see), so it keeps its one conv."""
    try:
        return planned_conv(p, hw).indp
    except LoweringError:
        return True


def blocks_run_indp(hw: SnowflakeConfig, p: nn.Conv2dOp, pw: np.ndarray) -> bool:
    """Whether every 16-kernel block of an INDP producer runs INDP too (a 3-channel stem's, by the
    priced mode: plan/conv.choose_mode): then the blocks keep the producer's mode and their
    estimate is the INDP one, which `runs_indp`'s COOP blocks' was not. CenterFace's 3 -> 32
    3x3/2 stem at 480 x 640 as two INDP blocks, its depthwise slices reading them whole: 3.71 M
    cycles before (two COOP blocks), 3.36 M unblocked (a 32 x 32 diagonal conv), 2.92 M."""
    priced = [block for _, block in producer_blocks(p, pw, priced_only=True)]
    try:
        return all(planned_conv(block, hw).indp for block in priced)
    except LoweringError:
        return False
    finally:
        for block in priced:  # let go of: the producer's input forgets every one
            block.drop_all_references()


def producer_blocks(p: nn.Conv2dOp, pw: np.ndarray, priced_only: bool = False
                     ) -> list[tuple[tuple[nn.ConstantOp, nn.ConstantOp], nn.Conv2dOp]]:
    """The producer `p` (weights `pw`) as one conv per 16-channel block of its output (the last
    C mod 16), each over the whole input with its kernels' weights and biases, capped at the
    producer's weight format (`w_frac_max`, as conv-transpose-to-conv's phases: a block of small
    kernels would otherwise take more fraction bits than the conv): the same integer sums per
    output channel, so in a fixed format the result is the unsplit conv's bit for bit. Not yet
    in a block. `priced_only`: constants of the right types and no data (the planners' estimate
    reads shapes only; `diagonal_conv`)."""
    bias = const_of(p.bias) if p.bias is not None else None
    n, _, oh, ow = shape_of(p.output)
    sizes = slice_sizes(shape_of(p.output)[1])
    frac = weight_frac(pw, most_frac(p))
    out = []
    for g, size in enumerate(sizes):
        start = g * LANES
        if priced_only:
            weight, b = (nn.ConstantOp(DenseResourceAttr.from_params("priced_only", TensorType(Float32Type(), shape)))
                         for shape in ([size, *pw.shape[1:]], [size]))
        else:
            weight = constant_op(pw[start:start + size], "w_block")
            b = constant_op((bias[start:start + size] if bias is not None else np.zeros(size)), "b_block")
        conv = nn.Conv2dOp(p.input, weight.result, b.result, TensorType(f32, [n, size, oh, ow]), **p.window(),
                           relu=p.relu is not None)
        conv.attributes.update(p.attributes)
        name_part(conv, p, str(g))
        conv.attributes[BLOCKED] = StringAttr(f"{g} of {len(sizes)}")
        conv.attributes["w_frac_max"] = IntegerAttr(frac, 64)  # the producer's one weight format
        out.append(((weight, b), conv))
    return out


def blocked_cycles(hw: SnowflakeConfig, op: nn.Conv2dOp, w: np.ndarray, p: nn.Conv2dOp, pw: np.ndarray) -> float:
    """The placement estimate of the producer's blocks and the depthwise slices reading them
    whole (no gather), each block planned once per width; inf where the planners refuse one."""
    sizes = slice_sizes(shape_of(op.input)[1])
    priced = [block for _, block in producer_blocks(p, pw, priced_only=True)]
    blocks = dict(zip(sizes, priced))
    each = {}
    for size, block in blocks.items():
        sl, _, conv = slice_conv(op, w, None, 0, size)
        conv.operands[0] = block.output
        sl.drop_all_references()
        try:
            each[size] = device_cycles(hw, block) + device_cycles(hw, conv)
        finally:
            conv.drop_all_references()
    for block in priced:  # let go of: the producer's input forgets every one
        block.drop_all_references()
    return sum(each[size] for size in sizes) + BLOCK_START_CYCLES * (len(sizes) - 1)


def tiled_writer(op: nn.Conv2dOp) -> Operation | None:
    """The op writing the depthwise `op`'s input, when it may write it channel-tile-major
    (`CHANNEL_TILES`): every reader of it a depthwise conv that may read the blocks (`block_readers`:
    `op`, and any sibling reading the same tensor, as PP-PicoDet's 5x5/2 and 5x5/1 after one 1x1),
    and a conv without a residual input (the planners say whether it writes the blocks:
    `tiled_cycles`) or an activation the host applies (HardSwish, ReLU6's Clip, ... on a machine
    without the write-back unit: the host writes any layout as cheaply; with the unit,
    fuse-activation moves the layout to the conv it folds it into, or drops it). None otherwise (a
    view, a slice, a concat, a max pool, an add: their writers write channel-innermost tensors; a
    reader of the whole tensor as it lies, a 1x1 conv or the host)."""
    w = op.input.owner
    if not isinstance(w, Operation) or len(w.results) != 1 or op not in block_readers(w) \
            or any(key in w.attributes for key in ("place", "placement_cost", CHANNEL_TILES, BLOCKED, LANE_GROUPS)):
        return None
    if isinstance(w, nn.Conv2dOp):
        return w if w.bypass is None else None
    return w if activation_of(w) is not None else None


def block_readers(writer: Operation) -> list[nn.Conv2dOp]:
    """The readers of `writer`'s result, in order, when each is a depthwise conv that may read it
    channel-tile-major (its input, a kernel row to span, no residual input, no form decided yet,
    constant weights); [] when any reader is not (its reads are of the tensor as it lies).

    Why all of them: a tensor has one layout, so the writer stores the blocks only where every
    reader reads blocks; depthwise-to-grouped then decides the readers' forms together."""
    readers = []
    for use in writer.results[0].uses:
        r = use.operation
        if not isinstance(r, nn.Conv2dOp) or use.index != 0 or r in readers or not is_depthwise(r) \
                or shape_of(r.weight)[2:] == [1, 1] or r.bypass is not None \
                or any(key in r.attributes for key in ("place", "placement_cost", LANE_GROUPS)) or const_of(r.weight) is None:
            return []
        readers.append(r)
    return readers


def is_depthwise(op: nn.Conv2dOp) -> bool:
    """One input channel per output channel, one output channel per group (more than one channel)."""
    c = shape_of(op.input)[1]
    k, cg = shape_of(op.weight)[:2]
    return op.groups.value.data == c and cg == 1 and k == c and c > 1


def tiled_cycles(hw: SnowflakeConfig, op: nn.Conv2dOp, w: np.ndarray, writer: Operation) -> tuple[float, float]:
    """The placement estimates of `writer` (`tiled_writer`) writing the depthwise input channel-
    tile-major (a conv: in one layer, a COOP conv whose 16-kernel tiles are the blocks, written a
    block apart; a host activation: nothing on the device) and of the depthwise slices reading their
    blocks whole (no gather); inf where C is not whole blocks (more than one), the conv runs INDP
    by the planners' choice (`runs_indp`: its 64-kernel tiles over the CUs' rows beat COOP ones by
    more than the COOP estimate sees: an 8 -> 48 1x1 at 14², 1,422 cycles INDP, 4,531 COOP writing
    the blocks, the slices' gain 1,679), or the planners refuse either (column bands: LoweringError)."""
    c = shape_of(op.input)[1]
    if c % LANES or c == LANES or (isinstance(writer, nn.Conv2dOp) and runs_indp(hw, writer)):
        return float("inf"), float("inf")
    writer.attributes[CHANNEL_TILES] = IntegerAttr(LANES, 64)
    sl, _, conv = slice_conv(op, w, None, 0, LANES)
    try:
        written = device_cycles(hw, writer) if isinstance(writer, nn.Conv2dOp) else 0.0
        return written, device_cycles(hw, conv) * (c // LANES)
    finally:  # priced, then let go of: the writer's output forgets the slice, the writer its layout
        del writer.attributes[CHANNEL_TILES]
        conv.drop_all_references()
        sl.drop_all_references()


def over_blocks_cycles(hw: SnowflakeConfig, op: nn.Conv2dOp, w: np.ndarray, writer: Operation) -> tuple[float, float]:
    """The placement estimates of `writer` writing the depthwise input channel-tile-major (as
    `tiled_cycles`) and of the grouped form over its blocks: one layer of C/16 groups whose kernel
    tile g reads block g whole (`ConvShape.block_maps`, Mloop: block g + 1's maps and kernels load
    while block g computes), its first strip exposed once where each slice exposes its own; inf
    where the writer cannot write the blocks or the planners refuse the grouped conv.

    Why: a slice is a layer, with a fixed cost the estimate of a slice leaves out (its kernels' and
    first strip's loads before its first MAC, the fence behind the previous slice's MACs: ~300
    cycles), against few MAC cycles at 14² and 7² (a 7² 3x3 block: 441)."""
    c = shape_of(op.input)[1]
    if c % LANES or c == LANES or (isinstance(writer, nn.Conv2dOp) and runs_indp(hw, writer)):
        return float("inf"), float("inf")
    writer.attributes[CHANNEL_TILES] = IntegerAttr(LANES, 64)
    conv = grouped_over_blocks(op, w, priced_only=True)[1]
    try:
        written = device_cycles(hw, writer) if isinstance(writer, nn.Conv2dOp) else 0.0
        return written, device_cycles(hw, conv)
    finally:  # priced, then let go of: the writer's output forgets the conv, the writer its layout
        del writer.attributes[CHANNEL_TILES]
        conv.drop_all_references()


def diagonal_conv(op: nn.Conv2dOp, w: np.ndarray, lanes: int, priced_only: bool = False
                  ) -> tuple[nn.ConstantOp, nn.Conv2dOp]:
    """The depthwise `op` (weights `w`) as a conv of `lanes`-channel groups whose kernel blocks
    are diagonal (one ungrouped C x C conv when `lanes` = C), not yet in a block. `priced_only`:
    a weight of the right type and no data, for the planners' estimate, which reads shapes only
    (ResNet-50's average pool as a 2048-channel 7x7 depthwise conv: its C x C diagonal was 822 MB
    of float32 built to be priced and dropped, 3.9 of its 8.8 s compile)."""
    c = w.shape[0]
    if priced_only:
        shape = [c, lanes, *w.shape[2:]]
        weight = nn.ConstantOp(DenseResourceAttr.from_params("priced_only", TensorType(Float32Type(), shape)))
    else:
        weight = constant_op(block_diagonal(w, lanes).astype(np.float32), "w_diag")
    conv = nn.Conv2dOp(op.input, weight.result, op.bias, op.output.type, **op.window(), groups=c // lanes,
                       relu=op.relu is not None, bypass=op.bypass)
    conv.attributes.update(op.attributes)
    conv.attributes["block_diagonal"] = UnitAttr()
    return weight, conv


def grouped_over_blocks(op: nn.Conv2dOp, w: np.ndarray, priced_only: bool = False) -> tuple[nn.ConstantOp, nn.Conv2dOp]:
    """The depthwise `op` as one conv of C/16 groups of 16 channels, its 16 x 16 kernel blocks
    diagonal, over op's input (stored channel-tile-major by its writer: group g's channels are
    block g, which the layer reads whole). Not yet in a block."""
    weight, conv = diagonal_conv(op, w, LANES, priced_only)
    conv.attributes[OVER_BLOCKS] = UnitAttr()
    return weight, conv


OVER_BLOCKS = "depthwise_over_blocks"
"""On the grouped conv of a depthwise conv whose input its writer stores channel-tile-major, read a
block a group (`grouped_over_blocks`): the reports' and tests' name for the form (the tile layer
records it as its maps region's `channel_tiles` on a grouped conv)."""


BLOCK_START_CYCLES = 400
"""What each producer block past the first adds that the planners' estimate leaves out: a
layer's start (its first kernel and maps loads, the fence behind the previous layer's vector ops).
Measured: a 32 -> 32 1x1 at 8² took 1,588 cycles as one conv, 1,973 as two 16-channel blocks."""


def erase_with_constants(op: nn.Conv2dOp, rewriter: PatternRewriter) -> None:
    """`op` (no longer read) erased, and its weight and bias constants when nothing else reads them."""
    consts = [v.owner for v in (op.weight, op.bias) if v is not None]
    rewriter.erase(op)
    for c in consts:
        if isinstance(c, nn.ConstantOp) and not c.result.uses:
            rewriter.erase(c)


def device_cycles(hw: SnowflakeConfig, conv: nn.Conv2dOp) -> float:
    """The placement estimate of `conv` (inf where the planners refuse it)."""
    try:
        return placement_cycles(planned_conv(conv, hw), hw)
    except LoweringError:
        return float("inf")
