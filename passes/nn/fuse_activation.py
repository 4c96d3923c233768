"""
fuse-activation: fold an activation into the producing conv2d when the machine has the
write-back activation unit (`SnowflakeConfig.writeback_activation`, snowir/activation.py).

    conv -> LeakyRelu(alpha)             conv{act = "leaky_relu(alpha)"}
    conv -> Clip(lo, hi)   (ReLU6, ...)  conv{act = "clip(lo, hi)"}
    conv -> HardSigmoid(alpha, beta)     conv{act = "hard_sigmoid(alpha, beta)"}
    conv -> HardSwish                    conv{act = "hard_swish(0.166667, 0.5)"}
    conv -> Sigmoid / Tanh               conv{act = "sigmoid"} / conv{act = "tanh"}
    conv -> x * Sigmoid(x)   (SiLU)      conv{act = "silu"}

Why: without the unit these are host element-wise ops, each a round trip off the device and a
pass over the tensor on the Cortex-A9 (a YOLOv8n-style net spends most of its time in SiLU's
sigmoid and multiply there); with it the write-back applies them for a few cycles per write-back.
Like fuse-relu, it fuses only into a conv whose result nothing else reads, and not after a
ReLU (the unit applies before ReLU); an activation of a channel concat of such convs (a wide
depthwise conv, which depthwise-to-grouped leaves as parts), or of a ConvTranspose's interleave
of them (`nn.depth_to_space`), goes into every part. An activation
of one channel slice of a conv whose result only slices read (a detector head's Split into class
scores and boxes, then Sigmoid on the scores) splits the conv at the slices' edges into convs
over kernel ranges, the slice's own taking the activation (each slice then reads its part; a
slice over several parts, their channel concat). An activation of channels that come whole
from convs through a Split, reshapes keeping (N, C), channel concats and pixel concats (YOLOv8's
Detect: Sigmoid on the class half of Concat(axis 2) of the scales' reshaped Concat(box, class
convs)) goes into those convs when nothing else reads their channels. It runs late in nn-prepare, after the passes that rebuild
convs (split-kernels, depthwise-to-grouped, the input layouts, add-to-bypass: an add's identity
conv takes the activation too), so partition-host then re-decides with the activation gone
from the host. An activation whose result depthwise-to-grouped stored channel-tile-major (`CHANNEL_TILES`) hands
the layout to its one conv where that conv writes it no slower, else drops it. Parameters that do not fit the unit's word (`Activation.word`: a clip bound off
the 1/16 grid or beyond +-128, alpha outside [0, 1)) leave the op where it is. An SE block's gate
activation goes into the gate conv as any other; se-gate (after this pass) then has the host
write that device-computed gate as the Mul conv's kernels between segments. On a machine without
the unit the pass changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from snowir.activation import UNIT, Activation
from snowir.dialects import nn
from snowir.errors import SnowError
from snowir.hw import SnowflakeConfig
from snowir.nn_util import const_of, constant_op, shape_of, tensor
from snowir.plan.issue import placement_cycles
from snowir.plan.shapes import LoweringError
from snowir.segments import CHANNEL_TILES
from snowir.tile.lowerable import planned_conv


def _attr(op: nn.HostOp, name: str, default: float) -> float:
    value = op.attrs.data.get(name)
    return float(value.value.data) if value is not None else default


def activation_of(op: Operation) -> tuple[SSAValue, Activation] | None:
    """The value an activation op applies to and its unit function, or None."""
    if isinstance(op, nn.ClipOp):
        return op.input, Activation("clip", (op.min.value.data, op.max.value.data))
    if isinstance(op, nn.HardSigmoidOp):
        return op.input, Activation("hard_sigmoid", (op.alpha.value.data, op.beta.value.data))
    if isinstance(op, nn.HardSwishOp):
        return op.input, Activation("hard_swish", (1 / 6, 0.5))
    if isinstance(op, nn.HostOp) and len(op.inputs) == 1 and len(op.outputs) == 1 and not op.domain:
        kind = op.op_type.data
        if kind == "LeakyRelu":
            return op.inputs[0], Activation("leaky_relu", (_attr(op, "alpha", 0.01),))
        if kind in ("Sigmoid", "Tanh"):
            return op.inputs[0], Activation(kind.lower())
    return None


def _silu(op: Operation) -> tuple[SSAValue, list[Operation]] | None:
    """x * Sigmoid(x): x and the sigmoid (erased with the multiply)."""
    if not isinstance(op, nn.MulOp):
        return None
    for x, gate in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
        sig = gate.owner
        if isinstance(sig, nn.HostOp) and sig.op_type.data == "Sigmoid" and len(sig.inputs) == 1 \
                and sig.inputs[0] is x and gate.has_one_use():
            return x, [sig]
    return None


def _conv(value: SSAValue) -> nn.Conv2dOp | None:
    """The conv producing `value`, when an activation may go into its write-back."""
    conv = value.owner
    if not isinstance(conv, nn.Conv2dOp) or conv.relu is not None or UNIT.name in conv.attributes:
        return None
    return conv


def _fusable(x: SSAValue, users: int) -> list[nn.Conv2dOp]:
    """The convs an activation of x goes into: x's producer, or every producer of a channel
    concat whose parts are convs read by nothing else (depthwise-to-grouped and split-kernels
    leave a wide depthwise conv as such parts); [] when x has other users."""
    if sum(1 for _ in x.uses) != users:
        return []
    conv = _conv(x)
    if conv is not None:
        return [conv]
    cat = x.owner
    if isinstance(cat, nn.ConcatOp) and cat.axis.value.data == 1 or isinstance(cat, nn.DepthToSpaceOp):
        # a concat's parts, or the phases a ConvTranspose's interleave moves (an element-wise
        # function commutes with moving words)
        parts = [_conv(v) if v.has_one_use() else None for v in cat.inputs]
        if all(p is not None for p in parts):
            return parts
    if users == 1 and len(shape_of(x)) >= 2:
        return _whole_convs(x, 0, shape_of(x)[1], top=True) or []
    return []


def _whole_convs(x: SSAValue, lo: int, hi: int, top: bool = False) -> list[nn.Conv2dOp] | None:
    """The convs whose every output channel, and nothing else, lands in channels [lo, hi) of x,
    through channel slices (a Split), reshapes that keep the channel axis (N, C, H, W) -> (N, C,
    H·W), channel concats and pixel concats (a concat on a later axis: each input holds every
    channel): a detector head's class convs behind its Reshape / Concat(axis 2) / Split. None
    where any value on the way is read by something else that sees those channels, or a conv
    contributes only part of its channels. `top`: x is the activation's input (its caller counted
    its readers)."""
    owner = x.owner
    if not top and not x.has_one_use():
        return None
    if isinstance(owner, nn.ChannelSliceOp):
        start = owner.start.value.data
        others = [u.operation for u in owner.input.uses if u.operation is not owner]
        if not all(isinstance(o, nn.ChannelSliceOp) and (_channels(o)[1] <= start + lo or _channels(o)[0] >= start + hi)
                   for o in others):
            return None
        return _whole_convs(owner.input, start + lo, start + hi)
    if isinstance(owner, nn.HostOp) and owner.op_type.data == "Split":
        first = _split_first(owner, x)
        return None if first is None else _whole_convs(owner.inputs[0], first + lo, first + hi)
    if isinstance(owner, nn.Conv2dOp):
        return [owner] if _conv(x) is not None and (lo, hi) == (0, shape_of(x)[1]) else None
    if isinstance(owner, nn.ReshapeOp | nn.FlattenOp):
        before, after = shape_of(owner.operands[0]), shape_of(x)
        if len(before) == 4 and len(after) >= 2 and before[:2] == after[:2]:
            return _whole_convs(owner.operands[0], lo, hi)
        return None
    if isinstance(owner, nn.ConcatOp):
        convs: list[nn.Conv2dOp] = []
        first = 0
        for v in owner.inputs:
            c = shape_of(v)[1]
            if owner.axis.value.data == 1:
                a, b = max(lo - first, 0), min(hi - first, c)
                first += c
                if a >= b:
                    continue
            else:
                a, b = lo, hi
            found = _whole_convs(v, a, b)
            if found is None:
                return None
            convs += found
        return convs
    return None


def _split_first(split: nn.HostOp, x: SSAValue) -> int | None:
    """The first channel of output x of a host Split on axis 1 (one the frontend left on the host:
    a 3-D head tensor), None for another axis."""
    axis = split.attrs.data.get("axis")
    rank = len(shape_of(split.inputs[0]))
    if (axis.value.data if axis is not None else 0) % rank != 1:
        return None
    outputs = list(split.results)
    return sum(shape_of(v)[1] for v in outputs[:outputs.index(x)])


def _channels(sl: nn.ChannelSliceOp) -> tuple[int, int]:
    """The [first, end) channels a slice reads."""
    return sl.start.value.data, sl.start.value.data + sl.size.value.data


def _kernel_part(sl: nn.ChannelSliceOp) -> nn.Conv2dOp | None:
    """The conv `sl` reads a kernel range of, if every reader of that conv's result is a channel
    slice and no other slice's edge falls inside `sl` (so `sl` is one part of the split)."""
    conv = _conv(sl.input)
    if conv is None or conv.groups.value.data != 1 or conv.bypass is not None \
            or const_of(conv.weight) is None or const_of(conv.bias) is None:
        return None
    slices = [use.operation for use in conv.output.uses]
    if not all(isinstance(other, nn.ChannelSliceOp) for other in slices):
        return None
    lo, hi = _channels(sl)
    edges = {e for other in slices for e in _channels(other)}
    return conv if not any(lo < e < hi for e in edges) else None


def _split_at_slices(conv: nn.Conv2dOp, rewriter: Rewriter) -> dict[int, nn.Conv2dOp]:
    """`conv` as convs over the kernel ranges between its slices' edges (by first channel); each
    slice reads its part, or the channel concat of the parts it spans."""
    w, b = const_of(conv.weight), const_of(conv.bias)
    slices = [use.operation for use in conv.output.uses]
    edges = sorted({0, w.shape[0]} | {e for sl in slices for e in _channels(sl)})
    n, _, oh, ow = shape_of(conv.output)
    name = conv.attributes.get("onnx_node")
    parts: dict[int, nn.Conv2dOp] = {}
    for lo, hi in zip(edges, edges[1:]):
        weight, bias = constant_op(w[lo:hi].astype(np.float32), "w_part"), constant_op(b[lo:hi].astype(np.float32), "b_part")
        part = nn.Conv2dOp(conv.input, weight.result, bias.result, tensor([n, hi - lo, oh, ow], conv.output),
                           **conv.window())
        part.attributes.update(conv.attributes)
        if isinstance(name, StringAttr):  # the reports' rows: head.0, head.1, ...
            part.attributes["onnx_node"] = StringAttr(f"{name.data}.{len(parts)}")
        rewriter.insert_op([weight, bias, part], InsertPoint.before(conv))
        parts[lo] = part
    for sl in slices:
        lo, hi = _channels(sl)
        spanned = [parts[e] for e in edges if lo <= e < hi]
        if len(spanned) == 1:
            sl.output.replace_all_uses_with(spanned[0].output)
            rewriter.erase_op(sl)
        else:
            rewriter.replace_op(sl, nn.ConcatOp([p.output for p in spanned], 1, sl.output.type))
    rewriter.erase_op(conv)
    return parts


def _carry_tiles(tiles: Attribute, x: SSAValue, convs: list[nn.Conv2dOp], hw: SnowflakeConfig) -> None:
    """The activation's result was to be stored channel-tile-major (depthwise-to-grouped's
    `CHANNEL_TILES`: its depthwise reader's slices read whole blocks). Its conv, now writing that
    result, takes the layout where it runs COOP by the planners' own choice and they estimate it no
    slower so (its kernel tiles are the blocks); else the layout is dropped and the slices gather
    their channels from the channel-innermost tensor (an INDP conv forced to COOP costs more than
    the COOP estimate sees: depthwise_slices.tiled_cycles)."""
    if len(convs) != 1 or x is not convs[0].output:
        return
    conv = convs[0]
    try:
        plain = planned_conv(conv, hw)
        conv.attributes[CHANNEL_TILES] = tiles
        if not plain.indp and placement_cycles(planned_conv(conv, hw), hw) <= placement_cycles(plain, hw):
            return
    except LoweringError:
        pass
    conv.attributes.pop(CHANNEL_TILES, None)


def _fuse(op: Operation, rewriter: Rewriter, hw: SnowflakeConfig) -> None:
    """Fold `op` (an activation, or the multiply of x * Sigmoid(x)) into its conv if it may."""
    silu = _silu(op)
    if silu is not None:
        x, dead = silu
        act, users = Activation("silu"), 2
    else:
        found = activation_of(op)
        if found is None:
            return
        (x, act), dead, users = found, [], 1
    convs = _fusable(x, users)
    to_split = isinstance(x.owner, nn.ChannelSliceOp) and x.has_one_use() and not dead and _kernel_part(x.owner)
    if not (convs or to_split) or op.results[0].type != x.type:
        return
    try:
        act.word(8)  # the parameters fit the unit's word
    except (SnowError, OverflowError, ValueError):  # ValueError: a NaN bound
        return
    if not convs:
        part = _split_at_slices(to_split, rewriter)[x.owner.start.value.data]
        x, convs = part.output, [part]
    for conv in convs:
        conv.attributes[UNIT.name] = StringAttr(str(act))
    if CHANNEL_TILES in op.attributes:
        _carry_tiles(op.attributes[CHANNEL_TILES], x, convs, hw)
    op.results[0].replace_all_uses_with(x)
    rewriter.erase_op(op)
    for d in dead:
        rewriter.erase_op(d)


@dataclass(frozen=True)
class FuseActivationPass(ModulePass):
    name = "fuse-activation"

    hw: str = ""
    """A hardware description JSON (SnowflakeConfig fields); default: the ZC706 build, which has
    no activation unit (the pass then does nothing)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        hw = SnowflakeConfig.load(self.hw or None)
        if not UNIT.machine_has(hw):
            return
        rewriter = Rewriter()
        for candidate in list(op.walk()):  # a list: the walk erases as it goes
            if candidate.parent is not None:
                _fuse(candidate, rewriter, hw)
