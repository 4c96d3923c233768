"""
fold-focus: a space-to-depth written as strided Slices and a channel Concat in front of convs
(the Focus layer of YOLOv5 and YOLOX) becomes part of each conv: the conv reads the Slices'
source with s times its stride and an s times larger kernel.

Focus concatenates x[:, :, 0::2, 0::2], x[:, :, 1::2, 0::2], x[:, :, 0::2, 1::2] and
x[:, :, 1::2, 1::2] on channels:

    P[0, q, a, b] = X[0, c_q, s·a + dy_q, s·b + dx_q]     (the Slices and Concat, for every q)
    conv(P, W, stride t, pads p) = conv(X, W', stride s·t, pads s·p)
    W'[k, c_q, s·i + dy_q, s·j + dx_q] += W[k, q, i, j]    (0 at the taps no phase supplies)

Why: each strided Slice copies the input on the host (a YOLOX detector at 416²: 8 Slices and
the Concat, 18.7 of its 21.5 host ms with the write-back activation unit), and a host layer in
front of the first conv is a DRAM round trip besides. A conv over X does the same arithmetic:
every product of the original conv appears once (zero taps add nothing), so the golden model
and the machine give the same bits as over P. The wider strided conv is then an ordinary stem
(space-to-depth / INDP / unfold-rows decide how it runs; the host lays the model input out as
it loads it).

Which ops: a conv (ungrouped, undilated, no residual input) whose input P is an `nn.concat`
on channels of Slice chains, or a Slice chain alone, all from one X, such that P is exactly a
space-to-depth of X by one factor s (checked on an index array of X pushed through the ops:
any spelling of starts, ends and steps that amounts to it matches; a P that is not, say a
crop, is left alone). Slices left without readers vanish. Runs after drop-identity and before
fold-batch-norm (which then folds into W').
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from snowir.dialects import nn
from snowir.golden import int_values
from snowir.nn_util import const_of, drop_dead_constants, new_constant, shape_of

_INT_MAX = np.iinfo(np.int64).max


@dataclass(frozen=True)
class Phases:
    """P = space_to_depth(X, s) up to the order of its channels: P's channel q is X's channel
    `channel[q]` at row offset `dy[q]`, column offset `dx[q]`."""

    x: SSAValue
    s: int
    channel: np.ndarray
    dy: np.ndarray
    dx: np.ndarray
    ops: tuple[Operation, ...]
    """The Concat (if any) and the Slices computing P, readers first."""


def _slice_args(op: nn.HostOp) -> tuple[list[int], list[int], list[int], list[int]] | None:
    """(starts, ends, axes, steps) of an ONNX Slice whose bounds are constants, else None."""
    if op.opset.value.data < 10:
        attrs = op.attrs.data
        if "starts" not in attrs or "ends" not in attrs:
            return None
        starts, ends = int_values(attrs["starts"]), int_values(attrs["ends"])
        axes = int_values(attrs["axes"]) if "axes" in attrs else list(range(len(starts)))
        return list(starts), list(ends), list(axes), [1] * len(starts)
    slots = list(int_values(op.slots)) if op.slots is not None else list(range(len(op.inputs)))
    given = dict(zip(slots, op.inputs))
    values = {}
    for slot in (1, 2, 3, 4):
        if slot in given:
            array = const_of(given[slot])
            if array is None:
                return None
            values[slot] = [int(v) for v in np.asarray(array).reshape(-1)]
    if 1 not in values or 2 not in values:
        return None
    starts, ends = values[1], values[2]
    return starts, ends, values.get(3, list(range(len(starts)))), values.get(4, [1] * len(starts))


def _apply_slice(index: np.ndarray, args: tuple[list[int], list[int], list[int], list[int]]) -> np.ndarray | None:
    """ONNX Slice on an index array (bounds clamped as ONNX clamps them)."""
    starts, ends, axes, steps = args
    key = [slice(None)] * index.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = axis + index.ndim if axis < 0 else axis
        if not 0 <= axis < index.ndim or step == 0:
            return None
        end = None if step < 0 and end < -index.shape[axis] else min(end, _INT_MAX)
        key[axis] = slice(start, end, step)
    return index[tuple(key)]


def _is_slice(op: Operation | None) -> bool:
    return isinstance(op, nn.HostOp) and op.op_type.data == "Slice" and op.domain is None


def _chain(value: SSAValue) -> tuple[SSAValue, list[nn.HostOp]] | None:
    """The Slices from a source to `value`, source first; None if `value` is no Slice's."""
    ops: list[nn.HostOp] = []
    while _is_slice(value.owner):
        ops.append(value.owner)
        value = value.owner.inputs[0]
    return (value, ops[::-1]) if ops else None


def match_phases(p: SSAValue) -> Phases | None:
    """How `p` (a conv's input) is a space-to-depth of one tensor, if it is."""
    cat = p.owner if isinstance(p.owner, nn.ConcatOp) and p.owner.axis.value.data == 1 else None
    parts = list(cat.inputs) if cat is not None else [p]
    chains = [_chain(v) for v in parts]
    if any(c is None for c in chains) or len({id(c[0]) for c in chains}) != 1:
        return None
    x = chains[0][0]
    x_shape = shape_of(x)
    if len(x_shape) != 4 or x_shape[0] != 1:
        return None
    index = np.arange(int(np.prod(x_shape)), dtype=np.int64).reshape(x_shape)
    outs = []
    for _, ops in chains:
        out = index
        for op in ops:
            args = _slice_args(op)
            out = None if args is None else _apply_slice(out, args)
            if out is None:
                return None
        outs.append(out)
    if any(o.shape[0] != 1 or o.shape[2:] != outs[0].shape[2:] for o in outs):
        return None
    flat = np.concatenate(outs, axis=1)[0]  # (Q, Hp, Wp) of indices into X
    _, h, w = x_shape[1:]
    q, hp, wp = flat.shape
    if hp == 0 or wp == 0 or h % hp or w % wp or h // hp != w // wp or h // hp < 2:
        return None
    s = h // hp
    first = flat[:, 0, 0]
    channel, dy, dx = first // (h * w), first // w % h, first % w
    if (dy >= s).any() or (dx >= s).any():
        return None
    a = np.arange(hp)[None, :, None]
    b = np.arange(wp)[None, None, :]
    expected = channel[:, None, None] * h * w + (s * a + dy[:, None, None]) * w + s * b + dx[:, None, None]
    if not np.array_equal(flat, expected):
        return None
    slices = tuple(op for _, chain in chains for op in reversed(chain))
    return Phases(x, s, channel, dy, dx, ((cat,) if cat is not None else ()) + slices)


def conv_over_source(w: np.ndarray, ph: Phases, c: int) -> np.ndarray:
    """W' over X (`c` channels) for W over P (module docstring)."""
    k, q, kh, kw = w.shape
    out = np.zeros((k, c, ph.s * kh, ph.s * kw), dtype=w.dtype)
    for j in range(q):
        out[:, ph.channel[j], ph.dy[j]::ph.s, ph.dx[j]::ph.s] += w[:, j]
    return out


class FoldFocus(RewritePattern):
    def __init__(self) -> None:
        super().__init__()
        self.bypassed: list[Operation] = []
        """The Concats and Slices a rewritten conv no longer reads (dropped once nothing does)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.Conv2dOp, rewriter: PatternRewriter) -> None:
        if op.bypass or int(op.groups.value.data) != 1 or any(int(d) != 1 for d in op.dilations.get_values()):
            return
        if not (_is_slice(op.input.owner) or isinstance(op.input.owner, nn.ConcatOp)):
            return
        weights = const_of(op.weight)
        ph = match_phases(op.input) if weights is not None else None
        if ph is None:
            return
        s = ph.s
        w2 = new_constant(rewriter, op, conv_over_source(weights, ph, shape_of(ph.x)[1]), "w_focus")
        conv = nn.Conv2dOp(ph.x, w2, op.bias, op.output.type, relu=op.relu is not None,
                           strides=[s * int(v) for v in op.strides.get_values()],
                           pads=[s * int(v) for v in op.pads.get_values()])
        conv.attributes.update(op.attributes)
        self.bypassed += [o for o in ph.ops if o not in self.bypassed]
        rewriter.replace(op, [conv])


def _drop_dead(ops: list[Operation]) -> None:
    """Those of `ops` nothing reads any more (readers first, so a chain goes whole)."""
    for op in ops:
        if op.parent is not None and all(not r.uses for r in op.results):
            op.detach()
            op.erase()


@dataclass(frozen=True)
class FoldFocusPass(ModulePass):
    name = "fold-focus"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        pattern = FoldFocus()
        PatternRewriteWalker(pattern, apply_recursively=False).rewrite_module(op)
        _drop_dead(pattern.bypassed)
        drop_dead_constants(op)
