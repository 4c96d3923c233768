"""
choose-layouts{tiles=true hw=}: choose the DRAM layout of every tensor a conv writes for one conv
to read as its residual bypass -- whole pixels (H, W, C) or channel-tile-major NCHW[16]c (the
`channel_tiles` attribute on the writer, docs/lowering.md "Channel-tile-major tensors") -- by the
planners' estimates of the writer and the reader over the whole graph, not pair by pair.

Such tensors form chains: a conv's channel parts (split-kernels: part i's partial sums are part
i + 1's bypass), a projection shortcut read by the block's last conv (fuse-residual-add), a
residual conv whose result is the next residual conv's bypass. A conv in a chain has two layout
choices that meet in its own plan: the bypass it reads (slices of whole pixels, one LD a pixel,
or one run of a block a strip) and the output it writes (pixels, or its kernel tiles' blocks,
which a residual conv can only do when its bypass is blocks too: `plan/layout.channel_tiles_refusal`).
So a chain is solved by dynamic programming over its tensors (state: the layout of the tensor
between two convs; cost of a conv: `layout_cycles` of the plan nn-to-tile would make,
`tile/lowerable.planned_conv`, infinite where a planner refuses), as TVM's graph-level layout
search does over its graph.

A tensor stored channel-tile-major may cost its pair up to TILES_MARGIN more by estimate and still
be taken: the reader's slices keep one strip whose maps the estimate counts as exposed, where the
cold start overlaps all but its first rows with the first tile (AlexNet-OWT's conv4.part1: estimated
269,415 cycles with slices of blocks against 269,316 with whole pixels in two banks; measured
266,676 and 270,082). A writer that already has `channel_tiles` (depthwise-to-grouped's, or one
written in the input) keeps it; `tiles=false` leaves every other chain as whole pixels. Run after
the passes that form bypasses (fuse-residual-add, split-kernels, add-to-bypass) and before
partition-host, which places what the planners then refuse.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass

from snowir.dialects import nn
from snowir.errors import SnowError
from snowir.hw import SnowflakeConfig
from snowir.plan.conv import layout_cycles
from snowir.plan.shapes import LoweringError, coop_kernels
from snowir.segments import CHANNEL_TILES
from snowir.tile.lowerable import planned_conv

TILES_MARGIN = 0.01
"""How much higher than whole pixels a pair with a channel-tile-major tensor between them may be
estimated and still be taken (the module docstring says why)."""

PIXELS, TILES = 0, 1


def _bypass_reader(value: SSAValue) -> nn.Conv2dOp | None:
    """The conv that reads `value` as its bypass and is its only reader (then the two may agree on
    any layout), else None."""
    uses = list(value.uses)
    if len(uses) != 1:
        return None
    reader = uses[0].operation
    if not isinstance(reader, nn.Conv2dOp) or reader.bypass is not value or reader.input is value:
        return None
    return reader


def chains(module: ModuleOp) -> list[list[nn.Conv2dOp]]:
    """Maximal runs c0 -> c1 -> ... of convs, each the only reader of the previous one's output as
    its bypass, whose writers do not carry a layout already; at least two convs each."""
    def free_writer(op: object) -> bool:
        return isinstance(op, nn.Conv2dOp) and CHANNEL_TILES not in op.attributes and _bypass_reader(op.output) is not None

    out = []
    for op in module.walk():
        if not free_writer(op):
            continue
        if op.bypass is not None and free_writer(op.bypass.owner):
            continue  # not a chain's first conv
        chain = [op]
        while free_writer(chain[-1]):
            chain.append(_bypass_reader(chain[-1].output))  # type: ignore[arg-type]
        out.append(chain)
    return out


def _set(writer: nn.Conv2dOp, layout: int, width: int) -> None:
    if layout == TILES:
        writer.attributes[CHANNEL_TILES] = IntegerAttr(width, i64)
    else:
        writer.attributes.pop(CHANNEL_TILES, None)


def _cost(conv: nn.Conv2dOp, hw: SnowflakeConfig) -> tuple[float, str]:
    """The estimate of the plan nn-to-tile would make for `conv` as the graph now lays out its
    bypass and output, and the plan's mode; infinite where a planner refuses it."""
    try:
        plan = planned_conv(conv, hw)
    except (LoweringError, SnowError):
        return math.inf, ""
    return layout_cycles(plan, hw), plan.mode


def solve(chain: list[nn.Conv2dOp], hw: SnowflakeConfig) -> list[int]:
    """The layouts of the chain's len - 1 tensors (between chain[i] and chain[i + 1]) of least
    total estimate, each channel-tile-major tensor credited TILES_MARGIN of its pair's estimate
    with whole pixels. The writers' attributes are left as chosen."""
    width, n = coop_kernels(hw), len(chain) - 1

    def estimate(i: int, before: int, after: int) -> tuple[float, str]:
        if i > 0:
            _set(chain[i - 1], before, width)
        if i < n:
            _set(chain[i], after, width)
        return _cost(chain[i], hw)

    whole = [estimate(i, PIXELS, PIXELS) for i in range(n + 1)]
    flat = [cycles for cycles, _ in whole]

    def credit(i: int) -> float:
        """Tensor i as blocks: TILES_MARGIN of its pair's estimate with whole pixels (none where
        a planner refuses either with whole pixels: no finite estimate to take a share of)."""
        pair = flat[i] + flat[i + 1]
        return TILES_MARGIN * pair if math.isfinite(pair) else 0.0

    def cost(i: int, before: int, after: int) -> float:
        """chain[i] reading its bypass in layout `before` (i > 0) and writing `after` (i < n).
        Blocks only for a conv its planners run COOP with whole pixels: blocks force COOP (an
        INDP vMAC's kernels cannot step a block), and the INDP and COOP planners' estimates are
        not calibrated against each other (on one load unit a 64 -> 256 1x1 at 56² read blocks
        COOP, estimated 290,805 cycles against INDP's 473,149, and measured 354,451 against 284,259)."""
        if before == after == PIXELS:
            return flat[i]  # (each estimate sets both of chain[i]'s layouts, so none relies on this one's)
        if whole[i][1] != "COOP":
            return math.inf
        return estimate(i, before, after)[0]
    # best[x]: least estimate of chain[0..i] with tensor i (chain[i]'s output) in layout x
    best = {x: cost(0, PIXELS, x) for x in (PIXELS, TILES)}
    best[TILES] -= credit(0)
    choice: list[dict[int, int]] = []
    for i in range(1, n + 1):
        outs = (PIXELS, TILES) if i < n else (PIXELS,)
        step: dict[int, float] = {}
        came: dict[int, int] = {}
        for after in outs:
            taken = credit(i) if after == TILES else 0.0
            step[after], came[after] = min((best[before] + cost(i, before, after) - taken, before)
                                           for before in (PIXELS, TILES))
        best = step
        choice.append(came)
    layouts = [PIXELS] * n
    at = PIXELS
    for i in range(n, 0, -1):
        at = choice[i - 1][at]
        layouts[i - 1] = at
    for i, layout in enumerate(layouts):
        _set(chain[i], layout, width)
    return layouts


@dataclass(frozen=True)
class ChooseLayoutsPass(ModulePass):
    name = "choose-layouts"
    tiles: bool = True
    """false: every chain's tensors stay whole pixels (writers given `channel_tiles` keep it)."""
    hw: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if not self.tiles:
            return
        hw = SnowflakeConfig.load(self.hw or None)
        for chain in chains(op):
            solve(chain, hw)
