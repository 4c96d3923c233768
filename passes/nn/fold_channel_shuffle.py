"""
fold-channel-shuffle: a channel shuffle (ShuffleNet's Reshape [N, g, C/g, H, W] -> Transpose
(0, 2, 1, 3, 4) -> Reshape [N, C, H, W], or any exporter's spelling of a channel permutation with
reshapes, flattens and transposes) becomes a permutation of the producing conv's kernels, or of
its consuming convs' input channels; the shuffle's ops vanish.

Why: the transpose moves bytes, so it runs on the host, and each shuffle splits the device
program in two with a DRAM round trip between (ShuffleNet: 16 of them). A permutation of
channels is free where a conv writes or reads them: kernel k of the producer can be written as
output channel k' instead, and a consumer's weights can read channel c' instead of c. Nothing
in the arithmetic changes (the same integer sums, in another order of channels), so the golden
model and the machine stay bit-exact.

Which side takes it, for y = x[:, perm] (x: the shuffle's 4-D input, y: its 4-D output of the
same shape; the chain of views and transposes between them is evaluated on an index array, so any
spelling that ends in a pure channel permutation matches):
  * the producer of x, when it is a conv without a residual input whose every other reader is an
    ungrouped conv (their input channels are permuted back) or the same shuffle: its kernels and
    bias are permuted (W[perm], b[perm]). A grouped producer the device cannot run grouped
    (depthwise-to-grouped would make it dense anyway, `grouped_refused`) is made dense first
    (`dense_groups`: its kernels zero outside their group), so the permutation can cross groups;
  * otherwise every reader of y, when each is an ungrouped conv reading y as its input (or a
    grouped one depthwise-to-grouped would make dense): W[:, inverse(perm)] over x;
  * otherwise, when x is a channel concat (ShuffleNetV2: Concat(identity half, branch)), one 1x1
    conv per concat input writing its channels to their shuffled places, chained through the
    bypass (`_fold_into_concat_parts`), where estimated faster than the host's copies;
  * otherwise the shuffle stays, and its transpose carries a `host_reason` saying why.
Runs after fold-batch-norm and fuse-relu (the bias a permutation moves includes the folded BN)
and before depthwise-to-grouped (whose round-trip costs then see the shuffle gone).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from snowir.dialects import nn
from snowir.golden import int_values
from snowir.hw import SnowflakeConfig
from snowir.host_model import copy_ms, host_ms
from snowir.nn_util import const_of, constant_op, drop_dead_constants, name_part, shape_of
from snowir.plan.issue import placement_cycles
from snowir.plan.shapes import LoweringError
from snowir.tile.lowerable import planned_conv
from snowir.passes.nn.depthwise_to_grouped import dense_conv, grouped_refused

_SHAPE_OPS = (nn.ReshapeOp, nn.FlattenOp, nn.TransposeOp)


@dataclass(frozen=True)
class Shuffle:
    """y = x[:, perm] computed by `ops` (in order, x's reader first)."""

    x: SSAValue
    y: SSAValue
    ops: tuple[Operation, ...]
    perm: np.ndarray


def _apply(index: np.ndarray, op: Operation) -> np.ndarray:
    if isinstance(op, nn.TransposeOp):
        return index.transpose(int_values(op.perm))
    return index.reshape(shape_of(op.results[0]))


def channel_perm(x_shape: list[int], ops: list[Operation]) -> np.ndarray | None:
    """perm if `ops` map an x of `x_shape` (NCHW) to x[:, perm], else None."""
    size = int(np.prod(x_shape))
    index = np.arange(size, dtype=np.int32 if size < 2**31 else np.int64).reshape(x_shape)
    out = index
    for op in ops:
        out = _apply(out, op)
    if list(out.shape) != list(x_shape):
        return None
    hw = x_shape[2] * x_shape[3]
    perm = out[0, :, 0, 0] // hw % x_shape[1]
    return perm if np.array_equal(out, index[:, perm]) else None


def match_shuffle(transpose: nn.TransposeOp) -> Shuffle | None:
    """The channel permutation `transpose` is part of: back through single-use shape ops to a 4-D
    x, forward through single-use shape ops to the first value of x's shape that is x with its
    channels permuted."""
    ops: list[Operation] = [transpose]
    x = transpose.input
    while isinstance(x.owner, _SHAPE_OPS) and x.has_one_use():
        ops.insert(0, x.owner)
        x = x.owner.input
    if len(shape_of(x)) != 4:
        return None
    y = transpose.output
    while True:
        if shape_of(y) == shape_of(x):
            perm = channel_perm(shape_of(x), ops)
            if perm is not None:
                return Shuffle(x, y, tuple(ops), perm)
        if not y.has_one_use():
            return None
        user = next(iter(y.uses)).operation
        if not isinstance(user, _SHAPE_OPS):
            return None
        ops.append(user)
        y = user.results[0]


def _set_constant(op: Operation, index: int, array: np.ndarray, hint: str) -> None:
    const = constant_op(array.astype(np.float32), hint)
    Rewriter.insert_op(const, InsertPoint.before(op))
    op.operands[index] = const.result


def _float_weights(conv: nn.Conv2dOp) -> bool:
    """Constant float weights and bias (before quantize: a quantised module keeps its shuffles)."""
    return all(const_of(v) is not None and not isinstance(v.type.get_element_type(), nn.FixedType)
               for v in (conv.weight, conv.bias))


def _permutable_reader(op: Operation, value: SSAValue, hw: SnowflakeConfig) -> bool:
    """`op` reads `value` as the input of a conv whose input channels can be permuted: ungrouped,
    or grouped as depthwise-to-grouped would make dense."""
    return isinstance(op, nn.Conv2dOp) and op.input is value and op.bypass is not value and op.weight is not value \
        and _float_weights(op) and (op.groups.value.data == 1 or grouped_refused(op, hw))


def _ungrouped(conv: nn.Conv2dOp) -> nn.Conv2dOp:
    """`conv` itself if ungrouped, else its dense form in its place."""
    if conv.groups.value.data == 1:
        return conv
    weight, dense = dense_conv(conv, const_of(conv.weight))
    Rewriter.insert_op(weight, InsertPoint.before(conv))
    Rewriter.replace_op(conv, dense)
    return dense


def _permute_inputs(conv: nn.Conv2dOp, value: SSAValue, columns: np.ndarray) -> None:
    """`conv` reads `value` with its kernels' channels taken as W[:, columns]."""
    conv = _ungrouped(conv)
    _set_constant(conv, 1, const_of(conv.weight)[:, columns], "w_perm")
    conv.operands[0] = value


def _erase_chain(shuffle: Shuffle) -> None:
    for op in reversed(shuffle.ops):
        if all(not r.uses for r in op.results):
            Rewriter.erase_op(op)


def _describe(op: object) -> str:
    """An op as a host_reason names it (a block argument: the model input)."""
    if not isinstance(op, Operation):
        return "the model input"
    return op.op_type.data if isinstance(op, nn.HostOp) else op.name


def _fold_into_producer(shuffle: Shuffle, hw: SnowflakeConfig) -> str | None:
    """Permute the producer's kernels; None when done, else why not."""
    producer = shuffle.x.owner
    if not isinstance(producer, nn.Conv2dOp):
        return f"its producer is {_describe(producer)}, not a conv"
    if producer.bypass is not None:
        return "its producer conv has a residual input (its channels would need the same permutation)"
    if not _float_weights(producer):
        return "its producer conv's weights are not float constants"
    cg = shape_of(producer.weight)[1]
    groups = producer.groups.value.data
    if groups > 1 and not (cg > 1 and grouped_refused(producer, hw)):
        return f"its producer is a {groups}-group conv the device runs grouped (a permutation would cross groups)"
    others = [u.operation for u in shuffle.x.uses if u.operation is not shuffle.ops[0]]
    if not all(_permutable_reader(o, shuffle.x, hw) for o in others):
        return "its producer's output has other readers than ungrouped convs"
    for other in others:  # they read x = x'[:, inverse]: W'[:, c'] = W[:, perm[c']]
        _permute_inputs(other, shuffle.x, shuffle.perm)
    producer = _ungrouped(producer)
    _set_constant(producer, 1, const_of(producer.weight)[shuffle.perm], "w_perm")
    _set_constant(producer, 2, const_of(producer.bias)[shuffle.perm], "b_perm")
    shuffle.y.replace_all_uses_with(producer.output)
    _erase_chain(shuffle)
    return None


def _fold_into_consumers(shuffle: Shuffle, hw: SnowflakeConfig) -> str | None:
    """Permute the consumers' input channels; None when done, else why not."""
    readers = [u.operation for u in shuffle.y.uses]
    other = next((r for r in readers if not _permutable_reader(r, shuffle.y, hw)), None)
    if other is not None:
        return f"it is read by {_describe(other)}, not a conv whose input channels can be permuted"
    inverse = np.argsort(shuffle.perm)
    for reader in list(dict.fromkeys(readers)):
        _permute_inputs(reader, shuffle.x, inverse)
    _erase_chain(shuffle)
    return None


def _let_go(parts: list[tuple[Operation, Operation, nn.Conv2dOp]]) -> None:
    """Parts priced and not taken: they read the concat's inputs, which must forget them."""
    for _, _, conv in reversed(parts):
        conv.drop_all_references()


def _fold_into_concat_parts(shuffle: Shuffle, hw: SnowflakeConfig) -> str | None:
    """y = concat(v_0, ..., v_n)[:, perm] as one 1x1 conv per concat input, each writing its
    channels to their shuffled places (a one-hot kernel per output channel, zero kernels for the
    other inputs' places) and adding the part before it through its bypass: ShuffleNetV2's
    Concat(identity half, branch) -> shuffle, whose identity half is a slice no conv writes and
    whose two inputs a shuffle interleaves (no producer writes every other channel). Each output
    channel sums one input word times 1 and zeros, so the copy is exact. Done where the parts'
    device estimate beats the host's concat and shuffle copies with their DRAM round trip; the
    parts then carry `placement_cost`. None when done, else why not."""
    cat = shuffle.x.owner
    assert isinstance(cat, nn.ConcatOp)
    if cat.axis.value.data != 1:
        return "its producer concat is not on the channel axis"
    if not shuffle.x.has_one_use():
        return "its producer concat has other readers"
    c = shape_of(shuffle.y)[1]
    lands = np.argsort(shuffle.perm)  # x's channel i is y's channel lands[i]
    parts: list[tuple[Operation, Operation, nn.Conv2dOp]] = []
    first = 0
    for k, v in enumerate(cat.inputs):
        m = shape_of(v)[1]
        w = np.zeros((c, m, 1, 1), np.float32)
        w[lands[first:first + m], np.arange(m)] = 1.0
        first += m
        weight, bias = constant_op(w, "w_shuffle"), constant_op(np.zeros(c, np.float32), "b_shuffle")
        conv = nn.Conv2dOp(v, weight.result, bias.result, shuffle.y.type,
                           bypass=parts[-1][2].output if parts else None)
        name_part(conv, shuffle.ops[1] if len(shuffle.ops) > 1 else shuffle.ops[0], f"part{k}")
        parts.append((weight, bias, conv))
    try:
        device = sum(hw.cycles_to_ms(placement_cycles(planned_conv(conv, hw), hw)) for _, _, conv in parts)
    except LoweringError as e:
        _let_go(parts)
        return f"its concat's inputs as shuffled 1x1 parts are refused ({e})"
    words = sum(int(np.prod(shape_of(v))) for v in cat.inputs) + int(np.prod(shape_of(shuffle.y)))
    host = host_ms(cat) + sum(host_ms(op) for op in shuffle.ops if isinstance(op, nn.TransposeOp)) + copy_ms(2 * words)
    cost = f"device {device:.4f} ms vs host {host:.4f} ms (concat, shuffle and DRAM round trip)"
    if device >= host:
        _let_go(parts)
        return f"the concat's inputs as shuffled 1x1 parts are estimated slower: {cost}"
    for weight, bias, conv in parts:
        conv.attributes["placement_cost"] = StringAttr(cost)
        Rewriter.insert_op([weight, bias, conv], InsertPoint.before(shuffle.ops[0]))
    shuffle.y.replace_all_uses_with(parts[-1][2].output)
    _erase_chain(shuffle)
    Rewriter.erase_op(cat)
    return None


@dataclass(frozen=True)
class FoldChannelShufflePass(ModulePass):
    name = "fold-channel-shuffle"
    hw: str = ""
    """A hardware description JSON (which grouped convs the device runs grouped); default: ZC706."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        hw = SnowflakeConfig.load(self.hw or None)
        for transpose in [t for t in op.walk() if isinstance(t, nn.TransposeOp)]:
            if transpose.parent is None:
                continue
            shuffle = match_shuffle(transpose)
            if shuffle is None:
                continue
            producer_why = _fold_into_producer(shuffle, hw)
            if producer_why is None:
                continue
            consumer_why = _fold_into_consumers(shuffle, hw)
            if consumer_why is None:
                continue
            if isinstance(shuffle.x.owner, nn.ConcatOp):
                parts_why = _fold_into_concat_parts(shuffle, hw)
                if parts_why is None:
                    continue
                consumer_why += f"; {parts_why}"
            transpose.attributes["host_reason"] = StringAttr(
                f"channel shuffle left for the host: {producer_why}; {consumer_why}")
        drop_dead_constants(op)
