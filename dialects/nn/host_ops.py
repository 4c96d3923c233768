"""
The `nn` ops the host CPU runs: layers Snowflake has no mapping for (softmax, LRN, transpose,
clip, the hard activations, broadcast multiply), the input layouts a pass moves to the host
(space-to-depth, unfold-rows, pad-rows), and `nn.host`, an ONNX node kept as it is.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    I64,
    ArrayAttr,
    DenseArrayBase,
    DictionaryAttr,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_op_definition,
    opt_prop_def,
    prop_def,
    var_operand_def,
    var_result_def,
)
from xdsl.utils.exceptions import VerifyException

from snowir import recurrence
from snowir.dialects.nn.abstract_ops import (
    ElementwiseBinary,
    ElementwiseUnary,
    OneTensorOperation,
    i64_array,
    int_values,
    shape_of,
)


@irdl_op_definition
class MulOp(ElementwiseBinary):
    """Element-wise multiply with broadcasting (host; per-channel scales fold into convs)."""

    name = "nn.mul"


@irdl_op_definition
class SpaceToDepthOp(OneTensorOperation):
    """s x s pixel blocks of an NCHW tensor as channels, zero-padded by `pads` (top, left) and
    as far bottom/right as the result needs: out[(a·s + b)·C + c, i, j] = in[c, s·i + a − t,
    s·j + b − l]. The space-to-depth pass lays a model input out this way (on the host)."""

    name = "nn.space_to_depth"
    block = prop_def(IntegerAttr[I64])
    pads = prop_def(DenseArrayBase[I64])

    def __init__(self, input: SSAValue, block: int, pads: Sequence[int], result_type: TensorType):
        super().__init__(input, result_type, {"block": IntegerAttr(block, i64), "pads": i64_array(pads)})

    def verify_(self) -> None:
        n, c, h, w = self._rank(self.input, 4, "input")
        s = self.block.value.data
        pads = int_values(self.pads)
        if s < 2:
            self._fail(f"block must be at least 2, not {s}")
        if len(pads) != 2 or min(pads) < 0 or pads[0] >= s * h or pads[1] >= s * w:
            self._fail(f"pads must be (top, left), non-negative and inside the input, not {list(pads)}")
        on, oc, oh, ow = self._rank(self.output, 4, "result")
        if (on, oc) != (n, c * s * s) or oh < 1 or ow < 1:
            self._fail(f"result must be {n}x{c * s * s}xHxW for {c} channels in {s}x{s} blocks, "
                       f"not {on}x{oc}x{oh}x{ow}")
        self._same_element(self.input, self.output)


@irdl_op_definition
class UnfoldRowsOp(OneTensorOperation):
    """The `kernel` input rows each output row of a conv reads (stride `stride`, zero-padded by
    `pads` = (top, bottom)) stacked as channels: out[ky·C + c, i, j] = in[c, stride·i + ky − t, j].
    A conv with a kh x kw kernel over `in` is a 1 x kw conv over `out`, whose window is one
    contiguous trace. The unfold-rows pass lays a model input out this way (on the host)."""

    name = "nn.unfold_rows"
    kernel = prop_def(IntegerAttr[I64])
    stride = prop_def(IntegerAttr[I64])
    pads = prop_def(DenseArrayBase[I64])

    def __init__(self, input: SSAValue, kernel: int, stride: int, pads: Sequence[int], result_type: TensorType):
        super().__init__(input, result_type, {"kernel": IntegerAttr(kernel, i64), "stride": IntegerAttr(stride, i64),
                                     "pads": i64_array(pads)})

    def verify_(self) -> None:
        n, c, h, w = self._rank(self.input, 4, "input")
        kh, sy = self.kernel.value.data, self.stride.value.data
        pads = int_values(self.pads)
        if kh < 2 or sy < 1:
            self._fail(f"kernel must be at least 2 rows and stride at least 1, not {kh} and {sy}")
        if len(pads) != 2 or min(pads) < 0 or max(pads) >= kh:
            self._fail(f"pads must be (top, bottom), non-negative and less than the kernel, not {list(pads)}")
        oh = (h + pads[0] + pads[1] - kh) // sy + 1
        if oh < 1:
            self._fail(f"{kh} rows (pads {list(pads)}) do not fit an input of {h} rows")
        self._expect_result((n, c * kh, oh, w))
        self._same_element(self.input, self.output)


@irdl_op_definition
class PadRowsOp(OneTensorOperation):
    """`pads` = (top, bottom) zero rows around the input: out[c, i, j] = in[c, i − top, j] (0
    outside). A conv whose row padding is these rows reads no clipped kernel row. The pad-rows
    pass lays a model input out this way (on the host)."""

    name = "nn.pad_rows"
    pads = prop_def(DenseArrayBase[I64])

    def __init__(self, input: SSAValue, pads: Sequence[int], result_type: TensorType):
        super().__init__(input, result_type, {"pads": i64_array(pads)})

    def verify_(self) -> None:
        n, c, h, w = self._rank(self.input, 4, "input")
        pads = int_values(self.pads)
        if len(pads) != 2 or min(pads) < 0:
            self._fail(f"pads must be (top, bottom), non-negative, not {list(pads)}")
        self._expect_result((n, c, h + pads[0] + pads[1], w))
        self._same_element(self.input, self.output)


@irdl_op_definition
class SoftmaxOp(ElementwiseUnary):
    """Softmax along `axis` (host CPU)."""

    name = "nn.softmax"
    axis = prop_def(IntegerAttr[I64])

    def verify_(self) -> None:
        super().verify_()
        if not 0 <= self.axis.value.data < len(shape_of(self.input)):
            self._fail(f"axis {self.axis.value.data} out of range")


@irdl_op_definition
class LrnOp(ElementwiseUnary):
    """Local response normalisation across channels (host CPU)."""

    name = "nn.lrn"
    size = prop_def(IntegerAttr[I64])
    alpha = prop_def(FloatAttr)
    beta = prop_def(FloatAttr)
    bias = prop_def(FloatAttr)

    def verify_(self) -> None:
        super().verify_()
        if self.size.value.data < 1:
            self._fail("size must be positive")


@irdl_op_definition
class TransposeOp(OneTensorOperation):
    """Permute dimensions (host CPU)."""

    name = "nn.transpose"
    perm = prop_def(DenseArrayBase[I64])

    def __init__(self, input: SSAValue, perm: Sequence[int], result_type: TensorType):
        super().__init__(input, result_type, {"perm": i64_array(perm)})

    def verify_(self) -> None:
        shape = shape_of(self.input)
        perm = int_values(self.perm)
        if sorted(perm) != list(range(len(shape))):
            self._fail(f"perm {list(perm)} is not a permutation of {len(shape)} dimensions")
        self._expect_result([shape[p] for p in perm])
        self._same_element(self.input, self.output)


@irdl_op_definition
class ClipOp(ElementwiseUnary):
    """Clamp to [min, max] (ReLU6 and friends)."""

    name = "nn.clip"
    min = prop_def(FloatAttr)
    max = prop_def(FloatAttr)

    def verify_(self) -> None:
        super().verify_()
        if self.min.value.data > self.max.value.data:
            self._fail("min must not exceed max")


@irdl_op_definition
class HardSigmoidOp(ElementwiseUnary):
    """max(0, min(1, alpha * x + beta))."""

    name = "nn.hard_sigmoid"
    alpha = prop_def(FloatAttr)
    beta = prop_def(FloatAttr)


@irdl_op_definition
class HardSwishOp(ElementwiseUnary):
    """x * max(0, min(1, x / 6 + 1/2))."""

    name = "nn.hard_swish"


@irdl_op_definition
class HostOp(IRDLOperation):
    """
    An ONNX node kept as it is, for the host CPU: what Snowflake has no mapping for (Sigmoid,
    Erf, Div, Resize, a ConvTranspose with computed weights, shape arithmetic on run-time
    tensors, ...). It carries the node's op type, opset and attributes; its operands are the node's present inputs
    (`slots`: their ONNX input positions, when an optional input is absent), then, for a node
    with sub-graphs (If, Loop, Scan; `#nn.onnx_graph` attributes), the outer-scope values those
    sub-graphs read (`captures`: their ONNX names, which the sub-graphs refer to). The golden model
    and the device runner evaluate it as ONNX defines it (snowir/frontend/onnx_host.py), in float on
    dequantised data; results a device layer reads are quantised at that boundary. Domain `snowir`
    names snowir's own kinds, what a pass leaves on the host of an ONNX node (split-recurrence's
    LSTM / GRU / RNNRecurrence, snowir/recurrence.py): their operands are checked here, numpy runs them.

        %y = nn.host "Sigmoid"(%x) {attrs = {}, opset = 13 : i64} : (tensor<1x8xf32>) -> tensor<1x8xf32>
    """

    name = "nn.host"
    op_type = prop_def(StringAttr)
    opset = prop_def(IntegerAttr[I64])
    attrs = prop_def(DictionaryAttr)
    domain = opt_prop_def(StringAttr)
    slots = opt_prop_def(DenseArrayBase)
    n_slots = opt_prop_def(IntegerAttr[I64])
    captures = opt_prop_def(ArrayAttr[StringAttr])
    inputs = var_operand_def(TensorType)
    outputs = var_result_def(TensorType)

    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$op_type `(` $inputs `)` attr-dict `:` functional-type($inputs, $outputs)"

    def __init__(self, op_type: str, opset: int, attrs: DictionaryAttr, inputs: Sequence[SSAValue],
                 result_types: Sequence[Attribute], slots: Sequence[int] | None = None, n_slots: int | None = None,
                 domain: str = "", captures: Sequence[str] = ()):
        props: dict[str, Attribute] = {"op_type": StringAttr(op_type), "opset": IntegerAttr(opset, i64),
                                       "attrs": attrs}
        slotted = len(inputs) - len(captures)
        if slots is not None and list(slots) != list(range(slotted)):
            props["slots"] = i64_array(slots)
        if n_slots is not None and n_slots != slotted:
            props["n_slots"] = IntegerAttr(n_slots, i64)
        if domain:
            props["domain"] = StringAttr(domain)
        if captures:
            props["captures"] = ArrayAttr([StringAttr(c) for c in captures])
        super().__init__(operands=[list(inputs)], result_types=[list(result_types)], properties=props)

    def capture_names(self) -> list[str]:
        """The ONNX names of the outer-scope values the sub-graphs read: the last operands."""
        return [c.data for c in self.captures.data] if self.captures is not None else []

    def input_slots(self) -> list[int]:
        """The ONNX input position of each operand before the captures."""
        slotted = len(self.inputs) - len(self.capture_names())
        return list(int_values(self.slots)) if self.slots is not None else list(range(slotted))

    def slot_count(self) -> int:
        return self.n_slots.value.data if self.n_slots is not None else len(self.inputs) - len(self.capture_names())

    def verify_(self) -> None:
        if not self.op_type.data:
            raise VerifyException(f"{self.name}: empty op_type")
        slots, captures = self.input_slots(), self.capture_names()
        if len(captures) > len(self.inputs) or len(set(captures)) != len(captures) or not all(captures):
            raise VerifyException(f"{self.name} \"{self.op_type.data}\": captures {captures} are not distinct "
                                  f"names of its last operands")
        if len(slots) + len(captures) != len(self.inputs) or sorted(set(slots)) != slots or (slots and slots[-1] >= self.slot_count()):
            raise VerifyException(f"{self.name} \"{self.op_type.data}\": slots {slots} do not place "
                                  f"{len(self.inputs)} operands among {self.slot_count()} inputs")
        if not self.outputs:
            raise VerifyException(f"{self.name} \"{self.op_type.data}\": needs at least one result")
        if self.domain is not None and self.domain.data == recurrence.DOMAIN:
            self._verify_snowir_kind()

    def _verify_snowir_kind(self) -> None:
        """snowir's own kinds (snowir/recurrence.py) have their operands and results checked here:
        no ONNX schema or onnxruntime session stands behind them."""
        kind = self.op_type.data
        where = f"{self.name} \"{kind}\" (domain {recurrence.DOMAIN})"
        cell = recurrence.CELLS.get(kind)
        if cell is None:
            raise VerifyException(f"{where}: no such kind (snowir's: {', '.join(recurrence.CELLS)})")
        by_slot = dict(zip(self.input_slots(), self.inputs))
        direction = self.attrs.data.get("direction")
        if self.capture_names() or 0 not in by_slot or 1 not in by_slot or max(by_slot) >= len(cell.slots) \
                or len(self.outputs) > cell.outputs or (5 in by_slot and 4 not in by_slot):
            raise VerifyException(f"{where}: takes {', '.join(cell.slots)} (slots 0-{len(cell.slots) - 1}; gates and "
                                  f"R required) and gives at most {cell.outputs} results, not slots {sorted(by_slot)} "
                                  f"and {len(self.outputs)} results")
        found = recurrence.recurrence_shapes(kind, shape_of(by_slot[0]), shape_of(by_slot[1]),
                                             direction.data if isinstance(direction, StringAttr) else "")
        if isinstance(found, str):
            raise VerifyException(f"{where}: {found}")
        y, state = found
        dirs, rows, hidden = shape_of(by_slot[1])
        for slot in (2, 3):
            want = [dirs, hidden] if cell.slots[slot:slot + 1] == ("Rb_h",) else state
            if slot in by_slot and list(shape_of(by_slot[slot])) != want:
                raise VerifyException(f"{where}: {cell.slots[slot]} must be {want}, not {list(shape_of(by_slot[slot]))}")
        r_elem = by_slot[1].type.get_element_type()
        if (4 in by_slot) != (isinstance(r_elem, IntegerType) and r_elem.width.data == 8):
            raise VerifyException(f"{where}: R is 8-bit with R_scale (slot 4), else float, not {r_elem}"
                                  f"{' with' if 4 in by_slot else ' without'} R_scale")
        for slot in (4, 5):
            if slot in by_slot and list(shape_of(by_slot[slot])) not in ([dirs], [dirs, rows]):
                raise VerifyException(f"{where}: {cell.slots[slot]} must be [{dirs}] or [{dirs}, {rows}], not "
                                      f"{list(shape_of(by_slot[slot]))}")
        for k, (result, want) in enumerate(zip(self.outputs, [y, state, state])):
            if list(shape_of(result)) != want:
                raise VerifyException(f"{where}: result {k} must be {want}, not {list(shape_of(result))}")
