"""
partition-host: mark every nn op `place = "snowflake"` or `place = "host"` (or, a merged conv's
interleave the host reads in place, `place = "host-read"`).

Snowflake runs MAC/MAX work (conv, dense, pools, residual add, ReLU) and data movement;
everything else (softmax, LRN, a transpose that moves bytes, clip, hard-sigmoid/swish, element-wise multiply
(an SE gate's too, when se-gate left it: `GATE_REASON`),
an unfolded batch_norm) runs on the host CPU in float, reading and writing DRAM between
device layers. Depthwise convs (a group with fewer than 16 output channels: DenseNet's
pre-activation BN, average pools as convs) and average pools whose border windows exclude the
padding, and a ReLU / add that fuse-relu / fuse-residual-add could not fold into a conv,
have no efficient Snowflake mapping — a MAC trace
sums over contiguous channels — so they run on the host too (a conv left so says why in
`host_reason`: the host estimated faster, a channel multiplier, or groups not whole 16-lane groups), in the exact fixed-point
arithmetic of the golden model (an add add-to-bypass found cheaper on the device is a conv by
then). So does any conv, max pool or concat the lowering cannot
place (`snowir.tile.lowerable.device_refusal`, the planners' own answer: a dilated conv, a max pool
over 200 channels, a channel concat whose inputs cannot all be written as channel slices of its
one DRAM tensor — by a conv (COOP by rows or column bands, INDP row groups, bypass slices) or a max pool
of whole CUs, or by the host — and read in place —
by convs — (the host then copies it between segments and the reports count that copy), with the
reason as `host_reason`. A channel concat on the device is no work: its producers write their slices
(snowir/segments.py `slot_of`); so is an interleave (`nn.depth_to_space`) whose inputs are one
COOP conv per result phase, each writing its pixels of the result in place, or one merged conv
writing every phase in place through its CU stride (its reason otherwise:
snowir/tile/lowerable.py `interleave_refusal`); a merged conv's interleave that cannot be written
in place but whose result only the host reads (the model's outputs, ops only the host runs) is
placed `host-read`: no host layer, the host applies it as it copies the conv's grid back
(`host_read_refusal`; conv-transpose-to-conv's sub-pixel method asks for it), else it is a host
layer with both reasons; so is a crop (`nn.crop`, a window of pixels) whose
every reader is a device conv that loads the window in place, as its maps or its residual input
(placed after the rest, once its readers are: `crop_refusal`). The runner
and the reports follow these attributes. A `place` already in the IR (the user's edit, or an
earlier run) is honoured: "host" stays on the host, "snowflake" on an op the device cannot run is
refused in one line, as is "host-read" on an op that is not a merged conv's interleave, a concat or
a transpose. A concat or transpose the device cannot place whose inputs are device tensors and
whose result only host layers and the model's outputs read (a YOLOv8 Detect head's Concat(axis 2) of
its scales and Transpose to (N, anchors, C), and its DFL's Concat of the scales' box bins and
Transpose before the host's softmax) is placed `host-read` too: the host applies it as it copies
those tensors back, each word once, the copy it makes anyway (`_place_read_rearrangements`); a
concat may also take host layers' results only it reads (the box decode's Concat of centre and
size, the Detect head's of boxes and class scores): each host layer writes its result in its slice.
"""

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from snowir import writeback
from snowir.dialects import nn
from snowir.hw import SnowflakeConfig
from snowir.segments import HOST_READ, READ_REARRANGEMENTS, transpose_is_view
from snowir.passes.nn.se_gate import gate_of
from snowir.tile.lowerable import MERGED, device_refusal, host_read_refusal

RESHAPES = (nn.ReshapeOp, nn.FlattenOp)
"""Free on the host, which holds tensors in their logical order: a host-read chain passes them."""

DEVICE = (nn.Conv2dOp, nn.DenseOp, nn.MaxPoolOp, nn.AvgPoolOp, nn.GlobalAvgPoolOp, nn.AddOp, nn.ReluOp,
          nn.ConcatOp, nn.FlattenOp, nn.ReshapeOp, nn.IdentityOp, nn.ChannelSliceOp, nn.DepthToSpaceOp, nn.CropOp)


def placement(op) -> str | None:
    attr = op.attributes.get("place")
    return attr.data if isinstance(attr, StringAttr) else None


@dataclass(frozen=True)
class PartitionHostPass(ModulePass):
    name = "partition-host"
    hw: str = ""
    """A hardware description JSON (SnowflakeConfig fields); default: the ZC706 build."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        hw = SnowflakeConfig.load(self.hw or None)
        crops = []
        asked = {inner for inner in op.walk() if isinstance(inner, READ_REARRANGEMENTS) and placement(inner) == HOST_READ}
        for inner in asked:  # the user's host-read: placed host below, then host-read if it can be
            inner.attributes["place"] = StringAttr("host")
        user_host = {inner for inner in op.walk() if placement(inner) == "host"} - asked
        for inner in op.walk():
            if isinstance(inner, nn.CropOp):
                crops.append(inner)  # once its readers are placed: each must read it in place
            elif inner.name.startswith("nn.") and not isinstance(inner, nn.ConstantOp):
                _place(inner, hw)
        for crop in crops:
            _place(crop, hw)
        _place_read_rearrangements(op, asked, user_host)


def _place_read_rearrangements(module: ModuleOp, asked: set, user_host: set) -> None:
    """Concats and transposes left on the host that only move device tensors to host layers or
    the model's outputs become `host-read` (segments.read_rearrangement): the host applies them as
    it copies the device's words back, which it does anyway before any host layer reads them, so
    they are no host layer. A concat's input may also be a host layer's result only the concat
    reads: that layer writes its result in the concat's slice. A rearrangement the user placed on the host stays; one the user placed
    `host-read` that cannot be is refused."""
    ops = [o for o in module.walk() if isinstance(o, READ_REARRANGEMENTS) and placement(o) == "host"
           and o not in user_host]
    candidates = set(ops)

    def sourced(value, reader) -> bool:  # a device tensor, through candidates and the reshapes between them
        owner = value.owner
        if owner in candidates:
            return all(sourced(v, owner) for v in owner.operands)
        if isinstance(owner, RESHAPES) and _through(owner.operands[0]):
            return sourced(owner.operands[0], owner)
        if isinstance(reader, nn.ConcatOp) and isinstance(owner, Operation) and placement(owner) == "host" \
                and len(list(value.uses)) == 1:
            return True  # a host layer's result only the concat reads: the host writes it in its slice
        return isinstance(owner, Operation) and placement(owner) == "snowflake" and owner.name.startswith("nn.")

    def _through(value) -> bool:  # a candidate's result, through reshapes
        owner = value.owner
        return owner in candidates or (isinstance(owner, RESHAPES) and _through(owner.operands[0]))

    def only_read(op) -> bool:  # by the model's outputs or host layers, through candidates and reshapes
        return all(isinstance(u.operation, func.ReturnOp) or (u.operation in candidates and only_read(u.operation))
                   or (isinstance(u.operation, RESHAPES) and only_read(u.operation))
                   or (u.operation not in candidates and placement(u.operation) == "host")
                   for r in op.results for u in r.uses)

    for o in ops:
        if all(sourced(v, o) for v in o.operands) and only_read(o):
            o.attributes["place"] = StringAttr(HOST_READ)
            o.attributes.pop("host_reason", None)
    for o in asked:
        if placement(o) != HOST_READ:
            what = o.attributes.get("onnx_node")
            raise PassFailedException(
                f"partition-host: {o.name} {what.data if isinstance(what, StringAttr) else ''} is placed "
                f"'{HOST_READ}' in the IR, but the host cannot read it as it copies device tensors back: "
                "its inputs must be device tensors and only host layers or the model's outputs may read it")


def _device_kind(op) -> bool:
    """An op the device may run (the lowering may still refuse it: `device_refusal`)."""
    return (isinstance(op, DEVICE) and not _depthwise(op)) or (isinstance(op, nn.TransposeOp) and transpose_is_view(op))


def _runs_on_host(op) -> bool:
    """Placed on the host, or of a kind only the host runs (whatever partition-host decides later)."""
    return placement(op) == "host" or (op.name.startswith("nn.") and not _device_kind(op))


def _place_merged_interleave(op: nn.DepthToSpaceOp, hw: SnowflakeConfig) -> None:
    """A merged conv's interleave: in place on the device through the CU stride (cu-stride) where it
    can be (unless `host-read` is asked for: conv-transpose-to-conv's sub-pixel), else read in place by
    the host as it copies the result back (`host-read`, lowerable.host_read_refusal), else a host
    layer with both reasons."""
    asked = placement(op) == HOST_READ
    reason = None if asked else device_refusal(op, hw)
    if reason is None and not asked:
        op.attributes["place"] = StringAttr("snowflake")
        op.attributes.pop("host_reason", None)
        return
    if placement(op) == "snowflake":  # the user's (or an earlier run's) choice, which cannot stand
        what = op.attributes.get("onnx_node")
        raise PassFailedException(f"partition-host: {op.name} {what.data if isinstance(what, StringAttr) else ''} is "
                                  f"placed on snowflake in the IR, but cannot run there: {reason}")
    why = host_read_refusal(op, _runs_on_host)
    if why is None:
        op.attributes["place"] = StringAttr(HOST_READ)
        op.attributes.pop("host_reason", None)
        return
    by, bx = nn.int_values(op.block)
    given = op.attributes.get("host_reason")  # conv-transpose-to-conv's, for its sub-pixel method
    reason = reason or (given.data if isinstance(given, StringAttr) else MERGED.format(by=by, bx=bx, why="asked"))
    op.attributes["host_reason"] = StringAttr(f"{reason}; host-read: {why}")
    op.attributes["place"] = StringAttr("host")


def _place(op, hw: SnowflakeConfig) -> None:
    if isinstance(op, nn.DepthToSpaceOp) and len(op.inputs) == 1 and placement(op) != "host":
        _place_merged_interleave(op, hw)
        return
    if placement(op) == HOST_READ:
        what = op.attributes.get("onnx_node")
        raise PassFailedException(
            f"partition-host: {op.name} {what.data if isinstance(what, StringAttr) else ''} is placed "
            f"'{HOST_READ}' in the IR, which only a merged conv's interleave (nn.depth_to_space of one input), "
            "a concat or a transpose can be")
    device = _device_kind(op)
    reason = device_refusal(op, hw) if device else _host_reason(op, hw)
    if reason is not None:
        device = False
        op.attributes["host_reason"] = StringAttr(reason)
    wanted = placement(op)
    if wanted == "host" and device:  # the user's (or an earlier run's) choice stands
        op.attributes.setdefault("host_reason", StringAttr("placed on the host in the IR"))
        return
    if wanted == "snowflake" and not device:
        what = op.attributes.get("onnx_node")
        raise PassFailedException(
            f"partition-host: {op.name} {what.data if isinstance(what, StringAttr) else ''} is placed "
            f"on snowflake in the IR, but cannot run there: {reason or 'no device mapping'}")
    op.attributes["place"] = StringAttr("snowflake" if device else "host")


GATE_REASON = ("a per-channel gate computed at run time that se-gate did not make a conv: a gate a device layer "
               "writes (it would be written mid-segment, after the conv's kernels load), or se-gate off")


AVG_REASON = ("average pool whose border windows divide by their own count (padding excluded: count_include_pad = 0, "
              "or ceil-mode partial windows): one conv's weights give one divisor")


HOST_OP_REASONS = {
    "Slice": "a strided slice, one of pixels and channels at once, or one computed at run time (a channel run is "
             "a channel slice, a window of pixels a crop: read in place)",
    "Split": "a split of a tensor that is not NCHW, off the channel axis, or with run-time sizes (a channel split of "
             "an NCHW tensor is channel slices, read in place)",
    "Resize": "a mode or coordinate mapping other than nearest pixel y -> y div s (resize-to-conv-transpose)",
}
"""Why common ONNX operators that have a device form in some spelling stayed `nn.host` ops."""


def _writes_runtime_kernels(op) -> bool:
    """Whether `op`'s result becomes a conv's kernels (through views): se-gate's gate."""
    values = list(op.results)
    while values:
        for use in values.pop().uses:
            user = use.operation
            if isinstance(user, nn.ReshapeOp | nn.FlattenOp):
                values.extend(user.results)
            elif isinstance(user, nn.Conv2dOp) and "runtime_kernels" in user.attributes and use.index == 1:
                return True
    return False


def _unit_reason(unit: writeback.WritebackUnit, hw: SnowflakeConfig) -> str:
    """Why an op a write-back unit could take stayed on the host."""
    if unit.machine_has(hw):
        return "not right after a conv whose write-back could apply it"
    return f"this machine's write-back has no {unit.title} unit (SnowflakeConfig.{unit.switch} = 0)"


def _host_reason(op, hw: SnowflakeConfig) -> str | None:
    """Why an op with no device mapping here stays on the host, in one line: a conv `_depthwise`
    keeps, an average pool avgpool-to-conv left, a multiply by a run-time gate, an ONNX op or an
    activation no pass took, an input layout, a transpose that moves words; a reason an earlier
    pass wrote is kept. None for element-wise work (ReLU, Add, softmax: their op says it)."""
    if isinstance(op, nn.MulOp) and gate_of(op) is not None:
        return "the host is estimated faster (placement_cost)" if "placement_cost" in op.attributes else GATE_REASON
    if isinstance(op, nn.AvgPoolOp):
        return AVG_REASON
    given = op.attributes.get("host_reason")
    if isinstance(given, StringAttr) and not isinstance(op, nn.Conv2dOp | nn.MulOp):
        return given.data  # an earlier pass said why (resize-to-conv-transpose, fold-channel-shuffle, ...)
    if isinstance(op, nn.HostOp):
        kind = op.op_type.data
        unit = writeback.absorbing(kind)
        if unit is not None and _writes_runtime_kernels(op):
            why = ("an SE gate: se-gate writes it as the gate conv's kernels, which the host computes (C values) "
                   "before the segment that reads them")
        elif unit is not None:
            why = _unit_reason(unit, hw)
        else:
            why = HOST_OP_REASONS.get(kind, "no device form (onnxruntime runs it)")
        return f"ONNX {kind}: {why}"
    unit = writeback.absorbing(op.name)
    if unit is not None:
        return f"{op.name}: {_unit_reason(unit, hw)}"
    if isinstance(op, nn.SpaceToDepthOp | nn.UnfoldRowsOp | nn.PadRowsOp):
        return f"{op.name}: the model input in the stem's layout, written by the host as it loads the input"
    if isinstance(op, nn.TransposeOp):
        return "a transpose that moves words in the device's order: the host copies them"
    if not isinstance(op, nn.Conv2dOp):
        return None
    k, cg = op.weight.type.get_shape()[:2]
    groups = op.groups.value.data
    if "placement_cost" in op.attributes:
        return "the host is estimated faster (placement_cost)"
    if cg == 1 and k != groups:
        return f"depthwise conv with a channel multiplier of {k // groups}"
    return f"grouped conv with {k // groups} output channels per group (not whole 16-lane groups)"


def _depthwise(op) -> bool:
    if isinstance(op, nn.ReluOp | nn.AddOp | nn.GlobalAvgPoolOp | nn.DenseOp):
        return True  # left unfused / unconverted by the earlier passes: element-wise work for the host
    if isinstance(op, nn.AvgPoolOp):
        return True  # avgpool-to-conv left it: windows that exclude padding differ per border
    if not isinstance(op, nn.Conv2dOp) or op.groups.value.data == 1 or "lane_groups" in op.attributes:
        return False  # lane_groups: depthwise-to-grouped's padded groups of 16 lanes
    return (op.output.type.get_shape()[1] // op.groups.value.data) % 16 != 0

