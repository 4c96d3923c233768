"""
The `nn` tensor ops: weights (`nn.constant`) and the layers Snowflake runs (convolution,
pooling, dense, add, ReLU, batch norm, and the views and reshapes that cost it no compute).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.dialects.builtin import (
    I64,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    DenseResourceAttr,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    UnitAttr,
    i64,
)
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from snowir import writeback
from snowir.dialects.nn.abstract_ops import (
    ElementwiseBinary,
    ElementwiseUnary,
    NNOperation,
    OneTensorOperation,
    PoolOperation,
    i64_array,
    int_values,
    shape_of,
    window_out,
)
from snowir.dialects.nn.attributes import ExternalWeightsAttr, PackedWeightsAttr
from snowir.errors import SnowError


# ---------------------------------------------------------------- weights
@irdl_op_definition
class ConstantOp(IRDLOperation):
    """A weight tensor: dense literal, dense_resource blob, external side-file array, or a device
    conv's weights in its packed weight image (`#nn.packed`, from the tile level on)."""

    name = "nn.constant"
    value = prop_def(DenseIntOrFPElementsAttr | DenseResourceAttr | ExternalWeightsAttr | PackedWeightsAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def __init__(self, value: DenseIntOrFPElementsAttr | DenseResourceAttr | ExternalWeightsAttr | PackedWeightsAttr):
        super().__init__(properties={"value": value}, result_types=[value.get_type()])

    @classmethod
    def parse(cls, parser: Parser) -> ConstantOp:
        value = parser.parse_attribute()
        attrs = parser.parse_optional_attr_dict()
        if not isinstance(value, DenseIntOrFPElementsAttr | DenseResourceAttr | ExternalWeightsAttr | PackedWeightsAttr):
            parser.raise_error("nn.constant expects a dense, dense_resource, #nn.external or #nn.packed value")
        return cls.create(properties={"value": value}, attributes=attrs,
                          result_types=[value.get_type()])

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_attribute(self.value)
        if self.attributes:
            printer.print_op_attributes(self.attributes)

    def verify_(self) -> None:
        if self.value.get_type() != self.result.type:
            raise VerifyException(f"{self.name}: value type and result type differ")


# ---------------------------------------------------------------- device layers
@irdl_op_definition
class Conv2dOp(NNOperation):
    """2-D convolution (NCHW, weights OIHW), optional fused ReLU and residual `bypass` add. A
    write-back unit's function is the attribute named by the unit (snowir/writeback.py), its
    text checked by the unit, applied after bias, bypass and shift, before ReLU."""

    name = "nn.conv2d"
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = operand_def(TensorType)
    bypass = opt_operand_def(TensorType)
    output = result_def(TensorType)
    strides = prop_def(DenseArrayBase[I64])
    pads = prop_def(DenseArrayBase[I64])
    dilations = prop_def(DenseArrayBase[I64])
    groups = prop_def(IntegerAttr[I64])
    relu = opt_prop_def(UnitAttr)

    assembly_format = (
        "$input `,` $weight `,` $bias (`bypass` $bypass^)? attr-dict `:` functional-type(operands, results)"
    )

    def __init__(self, input: SSAValue, weight: SSAValue, bias: SSAValue, result_type: TensorType,
                 strides: Sequence[int] = (1, 1), pads: Sequence[int] = (0, 0, 0, 0),
                 dilations: Sequence[int] = (1, 1), groups: int = 1, relu: bool = False,
                 bypass: SSAValue | None = None):
        props: dict[str, Attribute] = {
            "strides": i64_array(strides), "pads": i64_array(pads),
            "dilations": i64_array(dilations), "groups": IntegerAttr(groups, i64),
        }
        if relu:
            props["relu"] = UnitAttr()
        super().__init__(operands=[input, weight, bias, [bypass] if bypass else []],
                         result_types=[result_type], properties=props)

    def window(self) -> dict[str, list[int]]:
        """Strides, pads and dilations as keywords of `Conv2dOp(...)`: a rewrite that rebuilds a conv
        (new weights, a part of its kernels or channels, a fused add) slides the same window."""
        return dict(strides=int_values(self.strides), pads=int_values(self.pads), dilations=int_values(self.dilations))

    def verify_(self) -> None:
        n, c, h, w = self._rank(self.input, 4, "input")
        o, cg, kh, kw = self._rank(self.weight, 4, "weight")
        self._window_props()
        dil = int_values(self.dilations)
        if len(dil) != 2 or any(d < 1 for d in dil):
            self._fail("dilations must be 2 positive integers")
        g = self.groups.value.data
        if g < 1 or c % g or o % g:
            self._fail(f"groups {g} must divide input channels {c} and output channels {o}")
        if cg * g != c:
            self._fail(f"weight has {cg} channels per group, input has {c} channels in {g} groups")
        if shape_of(self.bias) != (o,):
            self._fail(f"bias must have shape {o}")
        s, p = int_values(self.strides), int_values(self.pads)
        oh = window_out(h, kh, s[0], p[0], p[2], dil[0])
        ow = window_out(w, kw, s[1], p[1], p[3], dil[1])
        if oh < 1 or ow < 1:
            self._fail("kernel larger than padded input")
        self._expect_result((n, o, oh, ow))
        if self.bypass is not None and shape_of(self.bypass) != (n, o, oh, ow):
            self._fail("bypass must have the result's shape")
        self._same_element(self.input, self.bias, self.output, *([self.bypass] if self.bypass else []))
        self._weight_kind()
        if "lane_groups" in self.attributes and not (g == c == o and cg == 1):
            self._fail("lane_groups: a depthwise conv's (groups = input = output channels), run as groups of 16 lanes")
        for unit, text in writeback.layer_choices(self.attributes):
            if not isinstance(text, str):
                self._fail(f"{unit.name}: the write-back {unit.title} unit's function, a string")
            try:
                writeback.check_text(unit, text)
            except SnowError as e:
                self._fail(f"{unit.name}: {e}")


@irdl_op_definition
class MaxPoolOp(PoolOperation):
    """Max pooling (Snowflake's pool unit, MAX instructions)."""

    name = "nn.max_pool"


@irdl_op_definition
class AvgPoolOp(PoolOperation):
    """Average pooling; on Snowflake a conv with weight 1/window (paper §2)."""

    name = "nn.avg_pool"
    count_include_pad = opt_prop_def(UnitAttr)


@irdl_op_definition
class GlobalAvgPoolOp(OneTensorOperation):
    """Mean over the spatial dimensions: NxCxHxW -> NxCx1x1."""

    name = "nn.global_avg_pool"

    def __init__(self, input: SSAValue, result_type: TensorType):
        super().__init__(input, result_type)

    def verify_(self) -> None:
        n, c, _, _ = self._rank(self.input, 4, "input")
        self._expect_result((n, c, 1, 1))
        self._same_element(self.input, self.output)


@irdl_op_definition
class DenseOp(NNOperation):
    """Fully connected: out[n, m] = sum_k in[n, k] * weight[m, k] + bias[m]."""

    name = "nn.dense"
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = operand_def(TensorType)
    output = result_def(TensorType)
    relu = opt_prop_def(UnitAttr)
    assembly_format = "$input `,` $weight `,` $bias attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, weight: SSAValue, bias: SSAValue, result_type: TensorType,
                 relu: bool = False):
        super().__init__(operands=[input, weight, bias], result_types=[result_type],
                         properties={"relu": UnitAttr()} if relu else {})

    def verify_(self) -> None:
        n, k = self._rank(self.input, 2, "input")
        m, k2 = self._rank(self.weight, 2, "weight")
        if k != k2:
            self._fail(f"input has {k} features, weight expects {k2}")
        if shape_of(self.bias) != (m,):
            self._fail(f"bias must have shape {m}")
        self._expect_result((n, m))
        self._same_element(self.input, self.bias, self.output)
        self._weight_kind()


@irdl_op_definition
class AddOp(ElementwiseBinary):
    """Element-wise add (residual connections), optional fused ReLU."""

    name = "nn.add"
    relu = opt_prop_def(UnitAttr)


@irdl_op_definition
class ReluOp(ElementwiseUnary):
    """max(x, 0)."""

    name = "nn.relu"


@irdl_op_definition
class ChannelSliceOp(OneTensorOperation):
    """Channels [start, start+size) of an NCHW tensor (on Snowflake a view: a strided read)."""

    name = "nn.channel_slice"
    start = prop_def(IntegerAttr[I64])
    size = prop_def(IntegerAttr[I64])

    def __init__(self, input: SSAValue, start: int, size: int, result_type: TensorType):
        super().__init__(input, result_type, {"start": IntegerAttr(start, i64), "size": IntegerAttr(size, i64)})

    def verify_(self) -> None:
        n, c, h, w = self._rank(self.input, 4, "input")
        start, size = self.start.value.data, self.size.value.data
        if start < 0 or size < 1 or start + size > c:
            self._fail(f"channels [{start}, {start + size}) are not inside the input's {c}")
        self._expect_result((n, size, h, w))
        self._same_element(self.input, self.output)


@irdl_op_definition
class CropOp(OneTensorOperation):
    """A window of an NCHW tensor's pixels, every channel: out[n, c, i, j] = in[n, c, y0 + i, x0 + j]
    for `offsets` (y0, x0) and the result's height and width (an ONNX Slice of H and W, step 1, as
    waifu2x's UNets crop a feature map before adding it to the other branch). On Snowflake a view
    when partition-host places it: its readers load the window in place, rows W·C words apart."""

    name = "nn.crop"
    offsets = prop_def(DenseArrayBase[I64])

    def __init__(self, input: SSAValue, offsets: Sequence[int], result_type: TensorType):
        super().__init__(input, result_type, {"offsets": i64_array(offsets)})

    def verify_(self) -> None:
        n, c, h, w = self._rank(self.input, 4, "input")
        on, oc, oh, ow = self._rank(self.output, 4, "result")
        o = int_values(self.offsets)
        if len(o) != 2 or min(o) < 0 or (on, oc) != (n, c) or oh < 1 or ow < 1 \
                or o[0] + oh > h or o[1] + ow > w:
            self._fail(f"a {oh}x{ow} window at {list(o)} (y0, x0) of every channel is not inside the input's "
                       f"{h}x{w} pixels ({n}x{c} kept)")
        self._same_element(self.input, self.output)


@irdl_op_definition
class IdentityOp(ElementwiseUnary):
    """A no-op kept from the source graph (ONNX Identity, inference Dropout); drop-identity removes it."""

    name = "nn.identity"
    kind = opt_prop_def(StringAttr)

    def __init__(self, input: SSAValue, kind: str | None = None):
        super().__init__(input, props={"kind": StringAttr(kind)} if kind else {})


@irdl_op_definition
class BatchNormOp(NNOperation):
    """Inference batch normalisation over channel axis 1."""

    name = "nn.batch_norm"
    input = operand_def(TensorType)
    scale = operand_def(TensorType)
    bias = operand_def(TensorType)
    mean = operand_def(TensorType)
    var = operand_def(TensorType)
    output = result_def(TensorType)
    epsilon = prop_def(FloatAttr)
    assembly_format = (
        "$input `,` $scale `,` $bias `,` $mean `,` $var attr-dict `:` functional-type(operands, results)"
    )

    def __init__(self, input: SSAValue, scale: SSAValue, bias: SSAValue, mean: SSAValue,
                 var: SSAValue, epsilon: float = 1e-5):
        super().__init__(operands=[input, scale, bias, mean, var], result_types=[input.type],
                         properties={"epsilon": FloatAttr(epsilon, 32)})

    def verify_(self) -> None:
        shape = shape_of(self.input)
        if len(shape) < 2:
            self._fail("input must have a channel axis")
        for v, what in ((self.scale, "scale"), (self.bias, "bias"), (self.mean, "mean"), (self.var, "var")):
            if shape_of(v) != (shape[1],):
                self._fail(f"{what} must have shape {shape[1]}")
        self._expect_result(shape)


@irdl_op_definition
class ConcatOp(NNOperation):
    """Concatenate along `axis` (on Snowflake: producers write side by side in DRAM)."""

    name = "nn.concat"
    inputs = var_operand_def(TensorType)
    output = result_def(TensorType)
    axis = prop_def(IntegerAttr[I64])
    assembly_format = "$inputs attr-dict `:` functional-type(operands, results)"

    def __init__(self, inputs: Sequence[SSAValue], axis: int, result_type: TensorType):
        super().__init__(operands=[inputs], result_types=[result_type],
                         properties={"axis": IntegerAttr(axis, i64)})

    def verify_(self) -> None:
        if not self.inputs:
            self._fail("needs at least one input")
        shapes = [shape_of(v) for v in self.inputs]
        rank = len(shapes[0])
        axis = self.axis.value.data
        if not 0 <= axis < rank:
            self._fail(f"axis {axis} out of range for rank {rank}")
        for s in shapes:
            if len(s) != rank or any(s[i] != shapes[0][i] for i in range(rank) if i != axis):
                self._fail("inputs must agree on every dimension but the axis")
        out = list(shapes[0])
        out[axis] = sum(s[axis] for s in shapes)
        self._expect_result(out)
        self._same_element(*self.inputs, self.output)


@irdl_op_definition
class FlattenOp(OneTensorOperation):
    """Flatten to 2-D: dims before `axis` and from `axis` on."""

    name = "nn.flatten"
    axis = prop_def(IntegerAttr[I64])

    def __init__(self, input: SSAValue, axis: int, result_type: TensorType):
        super().__init__(input, result_type, {"axis": IntegerAttr(axis, i64)})

    def verify_(self) -> None:
        shape = shape_of(self.input)
        axis = self.axis.value.data
        if not 0 <= axis <= len(shape):
            self._fail(f"axis {axis} out of range for rank {len(shape)}")
        self._expect_result((math.prod(shape[:axis]), math.prod(shape[axis:])))
        self._same_element(self.input, self.output)


@irdl_op_definition
class ReshapeOp(OneTensorOperation):
    """Reshape to the result type (same element count)."""

    name = "nn.reshape"

    def __init__(self, input: SSAValue, result_type: TensorType):
        super().__init__(input, result_type)

    def verify_(self) -> None:
        a, b = shape_of(self.input), shape_of(self.output)
        if math.prod(a) != math.prod(b):
            self._fail(f"cannot reshape {math.prod(a)} elements into {math.prod(b)}")
        self._same_element(self.input, self.output)
