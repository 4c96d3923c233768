"""
cascade-max-pool: stride-1 "same" max pools that read one tensor become a chain, each pool
over the next smaller one's result (SPP becomes SPPF):

    max_pool(x, 9x9, pad 4) = max_pool(max_pool(x, 5x5, pad 2), 5x5, pad 2)
    max_pool(x, 13x13, pad 6) = max_pool(max_pool(x, 9x9, pad 4), 5x5, pad 2)

Why: YOLO's SPP block pools one tensor 5x5, 9x9 and 13x13 and concatenates the four. The
large windows do not fit the maps buffer when the pools read their input in place from the
concat (13 input rows of a 13 x 768-channel row: 130 k words against 64 k), so the pools and
the concat went to the host (ddddocr's YOLOX detector). A chain of 5x5 windows needs 5 rows,
does 25 MAX taps an output where 81 and 169 did, and each link reads the result the concat
holds anyway. YOLOv5 made the same change by hand (SPPF).

Exact: per axis, a stride-1 pool with padding (k - 1) / 2 on both sides takes the maximum over
the window [i - r, i + r] clipped to the tensor (ONNX's padding never wins a max). For windows
of radii a and b, the clipped windows [j - b, j + b] of the positions j in [i - a, i + a]
(clipped) cover exactly [i - a - b, i + a + b] clipped, and the maximum of maxima is the
maximum of the union: the same value, in float and in every fixed-point format (a max rounds
nothing). So the golden model and the machine give the graph's bits.

Which ops: `nn.max_pool`s of one input with stride 1, odd kernels and padding (k - 1) / 2 on
every side, whose kernels grow in both axes when sorted; a pool equal to a smaller-index one
is replaced by it. Run before partition-host, which then places the chain.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from snowir.dialects import nn
from snowir.golden import int_values


def _same_radius(op: nn.MaxPoolOp) -> tuple[int, int] | None:
    """(ry, rx) of a stride-1 pool padded (k - 1) / 2 on every side, else None."""
    kh, kw = int_values(op.kernel)
    pt, pl, pb, pr = int_values(op.pads)
    if list(int_values(op.strides)) != [1, 1] or kh % 2 == 0 or kw % 2 == 0:
        return None
    ry, rx = (kh - 1) // 2, (kw - 1) // 2
    return (ry, rx) if (pt, pb, pl, pr) == (ry, ry, rx, rx) else None


def _chain(pools: list[tuple[tuple[int, int], nn.MaxPoolOp]]) -> list[tuple[tuple[int, int], nn.MaxPoolOp]]:
    """The pools in kernel order, if every radius grows (or stays) in both axes; else []."""
    pools = sorted(pools, key=lambda p: p[0])
    grows = all(a[0][0] <= b[0][0] and a[0][1] <= b[0][1] for a, b in zip(pools, pools[1:]))
    return pools if grows else []


def cascade(x: SSAValue) -> int:
    """Rewrite the same-padded stride-1 max pools reading `x` as a chain; the pools changed.
    The smallest pool moves up to where the first of them was, the links follow it, so every
    reader of a pool's result still comes after it."""
    pools = [(r, use.operation) for use in list(x.uses)
             if isinstance(use.operation, nn.MaxPoolOp) and (r := _same_radius(use.operation)) is not None]
    chain = _chain(pools)
    if len(chain) < 2:
        return 0
    block = chain[0][1].parent_block()
    first = min((op for _, op in chain), key=block.get_operation_index)
    (prev_r, prev) = chain[0]
    if prev is not first:
        prev.detach()
        Rewriter.insert_op(prev, InsertPoint.before(first))
    at = prev
    for r, op in chain[1:]:
        if r == prev_r:  # a duplicate pool: its twin's result
            op.output.replace_all_uses_with(prev.output)
            Rewriter.erase_op(op)
            continue
        ry, rx = r[0] - prev_r[0], r[1] - prev_r[1]
        link = nn.MaxPoolOp(prev.output, op.output.type, [2 * ry + 1, 2 * rx + 1], [1, 1], [ry, rx, ry, rx])
        link.attributes.update(op.attributes)
        link.output.name_hint = op.output.name_hint
        Rewriter.insert_op(link, InsertPoint.after(at))
        op.output.replace_all_uses_with(link.output)
        Rewriter.erase_op(op)
        prev_r, prev, at = r, link, link
    return len(chain) - 1


@dataclass(frozen=True)
class CascadeMaxPoolPass(ModulePass):
    """Same-padded stride-1 max pools of one tensor as a chain of smaller windows (SPP -> SPPF)."""

    name = "cascade-max-pool"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        readers: dict[SSAValue, int] = defaultdict(int)
        for pool in op.walk():
            if isinstance(pool, nn.MaxPoolOp) and _same_radius(pool) is not None:
                readers[pool.input] += 1
        for x, n in readers.items():
            if n > 1:
                cascade(x)
