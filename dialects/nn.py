"""
The `nn` dialect: a CNN as tensor values, one op per layer.

Close to ONNX, but holding only what Snowflake needs to know. Tensors are NCHW
(`tensor<1x64x56x56xf32>`); after quantisation their element type is a fixed-point
type `!nn.fixed<8, 8>` (integer bits, fraction bits, 16 bits in all on Snowflake).
Layer hyper-parameters are properties printed in the attribute dictionary so a
researcher can read and edit them:

    %y = nn.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>,
                               dilations = array<i64: 1, 1>, groups = 1 : i64, relu}
         : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>

Weights never bloat the text: `nn.constant` holds a `dense_resource` blob, a small
`dense` literal, or `#nn.external<"file.npz", "key">` naming an array in a side file.
"""

from __future__ import annotations

import base64
import math
from abc import ABC
from collections.abc import Sequence

from xdsl.dialects.builtin import (
    I64,
    ArrayAttr,
    i64,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    DenseResourceAttr,
    DictionaryAttr,
    Float32Type,
    FloatAttr,
    IntAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    UnitAttr,
)
from xdsl.ir import (
    Attribute,
    Dialect,
    ParametrizedAttribute,
    SSAValue,
    TypeAttribute,
)
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    var_operand_def,
    var_result_def,
    traits_def,
)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException


# ---------------------------------------------------------------- types and attributes
# weights of tiny magnitude (a 1/169 average) keep 15 significant bits with up to 24 fraction
# bits under per-tensor formats (the write-back shift absorbs them, docs/isa.md)
MAX_WEIGHT_FRAC = 24


@irdl_attr_definition
class FixedType(ParametrizedAttribute, TypeAttribute):
    """Signed fixed point Qm.n: `int_bits` integer bits (sign included), `frac_bits` fraction bits."""

    name = "nn.fixed"
    int_bits: IntAttr
    frac_bits: IntAttr

    def __init__(self, int_bits: int, frac_bits: int):
        super().__init__(IntAttr(int_bits), IntAttr(frac_bits))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            m = parser.parse_integer(allow_boolean=False, allow_negative=True)
            parser.parse_punctuation(",")
            n = parser.parse_integer(allow_boolean=False, allow_negative=False)
        return (IntAttr(m), IntAttr(n))

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.int_bits.data}, {self.frac_bits.data}>")

    def verify(self) -> None:
        m, n = self.int_bits.data, self.frac_bits.data
        if n < 0 or m + n != 16 or m < 16 - MAX_WEIGHT_FRAC:
            raise VerifyException(f"nn.fixed<{m}, {n}>: Snowflake data is 16-bit Qm.n with m + n = 16, "
                                  f"m >= {16 - MAX_WEIGHT_FRAC} (m < 1: small weights only)")

    @property
    def scale(self) -> float:
        return float(1 << self.frac_bits.data)


@irdl_attr_definition
class ExternalWeightsAttr(ParametrizedAttribute):
    """`#nn.external<"weights.npz", "conv1.w", tensor<64x3x7x7xf32>>`: an array kept in a side file."""

    name = "nn.external"
    path: StringAttr
    key: StringAttr
    type: TensorType

    def __init__(self, path: str, key: str, type: TensorType):
        super().__init__(StringAttr(path), StringAttr(key), type)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            path = parser.parse_str_literal()
            parser.parse_punctuation(",")
            key = parser.parse_str_literal()
            parser.parse_punctuation(",")
            ty = parser.parse_type()
        return (StringAttr(path), StringAttr(key), ty)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f'<"{self.path.data}", "{self.key.data}", ')
        printer.print_attribute(self.type)
        printer.print_string(">")

    def get_type(self) -> TensorType:
        return self.type


@irdl_attr_definition
class OnnxGraphAttr(ParametrizedAttribute):
    """`#nn.onnx_graph<"CgNBZGQ...">`: an ONNX sub-graph (the `then_branch` of an If, the `body`
    of a Loop or Scan) in an nn.host node's attributes, as its serialised GraphProto in base64:
    onnxruntime and onnx's reference evaluator run it as it is, so it is carried, not spelled."""

    name = "nn.onnx_graph"
    data: StringAttr

    def __init__(self, data: str):
        super().__init__(StringAttr(data))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            return (StringAttr(parser.parse_str_literal()),)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f'<"{self.data.data}">')

    def verify(self) -> None:
        import binascii

        try:
            base64.b64decode(self.data.data, validate=True)
        except (binascii.Error, ValueError):
            raise VerifyException(f"{self.name}: not base64 (a serialised ONNX GraphProto)") from None


@irdl_attr_definition
class PackedWeightsAttr(ParametrizedAttribute):
    """`#nn.packed<"conv1", tensor<64x3x7x7x!nn.fixed<1, 15>>>`: a device conv's weights, held
    once, in its layer's packed weight image (the tile layer's weights region, then the image's
    data segment): from the tile level on the nn constant refers to them rather than keep a
    second copy (snowir/packed.py reads them back for the golden model)."""

    name = "nn.packed"
    layer: StringAttr
    type: TensorType

    def __init__(self, layer: str, type: TensorType):
        super().__init__(StringAttr(layer), type)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            layer = parser.parse_str_literal()
            parser.parse_punctuation(",")
            ty = parser.parse_type()
        return (StringAttr(layer), ty)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string("<")
        printer.print_string_literal(self.layer.data)
        printer.print_string(", ")
        printer.print_attribute(self.type)
        printer.print_string(">")

    def get_type(self) -> TensorType:
        return self.type


ElementType = Float32Type | FixedType


def _shape(value: SSAValue | Attribute) -> tuple[int, ...]:
    ty = value.type if isinstance(value, SSAValue) else value
    assert isinstance(ty, TensorType)
    return tuple(ty.get_shape())


def _elem(value: SSAValue) -> Attribute:
    ty = value.type
    assert isinstance(ty, TensorType)
    return ty.get_element_type()


def int_values(attr: DenseArrayBase | None) -> tuple[int, ...]:
    return () if attr is None else tuple(int(v) for v in attr.get_values())


def i64_array(values: Sequence[int]) -> DenseArrayBase:
    return DenseArrayBase.from_list(i64, list(values))


def window_out(size: int, k: int, stride: int, pad_lo: int, pad_hi: int,
               dilation: int = 1, ceil_mode: bool = False) -> int:
    span = size + pad_lo + pad_hi - dilation * (k - 1) - 1
    if ceil_mode:
        out = -(-span // stride) + 1
        if (out - 1) * stride >= size + pad_lo:  # the last window must start inside
            out -= 1
        return out
    return span // stride + 1


class NNOperation(IRDLOperation, ABC):
    """Base of all nn ops: shape checking helpers and the common result."""

    irdl_options = (ParsePropInAttrDict(),)
    traits = traits_def(Pure())

    def _fail(self, message: str) -> None:
        raise VerifyException(f"{self.name}: {message}")

    def _same_element(self, *values: SSAValue) -> None:
        elems = {str(_elem(v)) for v in values}
        if len(elems) > 1:
            self._fail(f"element types differ: {', '.join(sorted(elems))}")

    def _weight_kind(self) -> None:
        """Weights may use their own fixed-point format (per-layer fraction bits), never float vs fixed."""
        w, x = _elem(getattr(self, "weight")), _elem(getattr(self, "input"))
        if isinstance(w, FixedType) != isinstance(x, FixedType) or (
                not isinstance(w, FixedType) and str(w) != str(x)):
            self._fail(f"element types differ: weight {w}, input {x}")

    def _expect_result(self, shape: Sequence[int]) -> None:
        got = _shape(self.results[0])
        if tuple(got) != tuple(shape):
            self._fail(
                f"result shape {'x'.join(map(str, got))} does not match the computed "
                f"{'x'.join(map(str, shape))}"
            )

    def _rank(self, value: SSAValue, rank: int, what: str) -> tuple[int, ...]:
        shape = _shape(value)
        if len(shape) != rank:
            self._fail(f"{what} must have rank {rank}, got {len(shape)}")
        return shape

    def _window_props(self, spatial: int = 2) -> None:
        strides = int_values(getattr(self, "strides"))
        pads = int_values(getattr(self, "pads"))
        if len(strides) != spatial or any(s < 1 for s in strides):
            self._fail(f"strides must be {spatial} positive integers")
        if len(pads) != 2 * spatial or any(p < 0 for p in pads):
            self._fail(f"pads must be {2 * spatial} non-negative integers (top, left, bottom, right)")


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
    """2-D convolution (NCHW, weights OIHW), optional fused ReLU and residual `bypass` add."""

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
        if _shape(self.bias) != (o,):
            self._fail(f"bias must have shape {o}")
        s, p = int_values(self.strides), int_values(self.pads)
        oh = window_out(h, kh, s[0], p[0], p[2], dil[0])
        ow = window_out(w, kw, s[1], p[1], p[3], dil[1])
        if oh < 1 or ow < 1:
            self._fail("kernel larger than padded input")
        self._expect_result((n, o, oh, ow))
        if self.bypass is not None and _shape(self.bypass) != (n, o, oh, ow):
            self._fail("bypass must have the result's shape")
        self._same_element(self.input, self.bias, self.output, *([self.bypass] if self.bypass else []))
        self._weight_kind()
        if "lane_groups" in self.attributes and not (g == c == o and cg == 1):
            self._fail("lane_groups: a depthwise conv's (groups = input = output channels), run as groups of 16 lanes")


class PoolOperation(NNOperation, ABC):
    input = operand_def(TensorType)
    output = result_def(TensorType)
    kernel = prop_def(DenseArrayBase[I64])
    strides = prop_def(DenseArrayBase[I64])
    pads = prop_def(DenseArrayBase[I64])
    ceil_mode = opt_prop_def(UnitAttr)

    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, result_type: TensorType, kernel: Sequence[int],
                 strides: Sequence[int], pads: Sequence[int] = (0, 0, 0, 0),
                 ceil_mode: bool = False, extra: dict[str, Attribute] | None = None):
        props: dict[str, Attribute] = {
            "kernel": i64_array(kernel), "strides": i64_array(strides), "pads": i64_array(pads),
        }
        if ceil_mode:
            props["ceil_mode"] = UnitAttr()
        props.update(extra or {})
        super().__init__(operands=[input], result_types=[result_type], properties=props)

    def verify_(self) -> None:
        n, c, h, w = self._rank(self.input, 4, "input")
        self._window_props()
        k = int_values(self.kernel)
        if len(k) != 2 or any(v < 1 for v in k):
            self._fail("kernel must be 2 positive integers")
        s, p = int_values(self.strides), int_values(self.pads)
        if p[0] >= k[0] or p[2] >= k[0] or p[1] >= k[1] or p[3] >= k[1]:
            self._fail("padding must be smaller than the kernel")
        ceil = self.ceil_mode is not None
        self._expect_result((n, c, window_out(h, k[0], s[0], p[0], p[2], 1, ceil),
                             window_out(w, k[1], s[1], p[1], p[3], 1, ceil)))
        self._same_element(self.input, self.output)


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
class GlobalAvgPoolOp(NNOperation):
    """Mean over the spatial dimensions: NxCxHxW -> NxCx1x1."""

    name = "nn.global_avg_pool"
    input = operand_def(TensorType)
    output = result_def(TensorType)
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, result_type: TensorType):
        super().__init__(operands=[input], result_types=[result_type])

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
        if _shape(self.bias) != (m,):
            self._fail(f"bias must have shape {m}")
        self._expect_result((n, m))
        self._same_element(self.input, self.bias, self.output)
        self._weight_kind()


class ElementwiseBinary(NNOperation, ABC):
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    output = result_def(TensorType)
    assembly_format = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)"

    def __init__(self, lhs: SSAValue, rhs: SSAValue, result_type: TensorType,
                 props: dict[str, Attribute] | None = None):
        super().__init__(operands=[lhs, rhs], result_types=[result_type], properties=props or {})

    def verify_(self) -> None:
        a, b = _shape(self.lhs), _shape(self.rhs)
        try:
            shape = _broadcast(a, b)
        except ValueError:
            self._fail(f"shapes {a} and {b} do not broadcast")
        self._expect_result(shape)
        self._same_element(self.lhs, self.rhs, self.output)


def _broadcast(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    out: list[int] = []
    for i in range(max(len(a), len(b))):
        x = a[len(a) - 1 - i] if i < len(a) else 1
        y = b[len(b) - 1 - i] if i < len(b) else 1
        if x != y and 1 not in (x, y):
            raise ValueError
        out.append(max(x, y))
    return tuple(reversed(out))


@irdl_op_definition
class AddOp(ElementwiseBinary):
    """Element-wise add (residual connections), optional fused ReLU."""

    name = "nn.add"
    relu = opt_prop_def(UnitAttr)


@irdl_op_definition
class MulOp(ElementwiseBinary):
    """Element-wise multiply with broadcasting (host; per-channel scales fold into convs)."""

    name = "nn.mul"


class ElementwiseUnary(NNOperation, ABC):
    input = operand_def(TensorType)
    output = result_def(TensorType)
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, result_type: TensorType | None = None,
                 props: dict[str, Attribute] | None = None):
        super().__init__(operands=[input], result_types=[result_type or input.type],
                         properties=props or {})

    def verify_(self) -> None:
        self._expect_result(_shape(self.input))
        self._same_element(self.input, self.output)


@irdl_op_definition
class ReluOp(ElementwiseUnary):
    """max(x, 0)."""

    name = "nn.relu"


@irdl_op_definition
class ChannelSliceOp(NNOperation):
    """Channels [start, start+size) of an NCHW tensor (on Snowflake a view: a strided read)."""

    name = "nn.channel_slice"
    input = operand_def(TensorType)
    output = result_def(TensorType)
    start = prop_def(IntegerAttr[I64])
    size = prop_def(IntegerAttr[I64])
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, start: int, size: int, result_type: TensorType):
        super().__init__(operands=[input], result_types=[result_type],
                         properties={"start": IntegerAttr(start, i64), "size": IntegerAttr(size, i64)})

    def verify_(self) -> None:
        n, c, h, w = self._rank(self.input, 4, "input")
        start, size = self.start.value.data, self.size.value.data
        if start < 0 or size < 1 or start + size > c:
            self._fail(f"channels [{start}, {start + size}) are not inside the input's {c}")
        self._expect_result((n, size, h, w))
        self._same_element(self.input, self.output)


@irdl_op_definition
class SpaceToDepthOp(NNOperation):
    """s x s pixel blocks of an NCHW tensor as channels, zero-padded by `pads` (top, left) and
    as far bottom/right as the result needs: out[(a·s + b)·C + c, i, j] = in[c, s·i + a − t,
    s·j + b − l]. The space-to-depth pass lays a model input out this way (on the host)."""

    name = "nn.space_to_depth"
    input = operand_def(TensorType)
    output = result_def(TensorType)
    block = prop_def(IntegerAttr[I64])
    pads = prop_def(DenseArrayBase[I64])
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, block: int, pads: Sequence[int], result_type: TensorType):
        super().__init__(operands=[input], result_types=[result_type],
                         properties={"block": IntegerAttr(block, i64), "pads": i64_array(pads)})

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
class UnfoldRowsOp(NNOperation):
    """The `kernel` input rows each output row of a conv reads (stride `stride`, zero-padded by
    `pads` = (top, bottom)) stacked as channels: out[ky·C + c, i, j] = in[c, stride·i + ky − t, j].
    A conv with a kh x kw kernel over `in` is a 1 x kw conv over `out`, whose window is one
    contiguous trace. The unfold-rows pass lays a model input out this way (on the host)."""

    name = "nn.unfold_rows"
    input = operand_def(TensorType)
    output = result_def(TensorType)
    kernel = prop_def(IntegerAttr[I64])
    stride = prop_def(IntegerAttr[I64])
    pads = prop_def(DenseArrayBase[I64])
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, kernel: int, stride: int, pads: Sequence[int], result_type: TensorType):
        super().__init__(operands=[input], result_types=[result_type],
                         properties={"kernel": IntegerAttr(kernel, i64), "stride": IntegerAttr(stride, i64),
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
        shape = _shape(self.input)
        if len(shape) < 2:
            self._fail("input must have a channel axis")
        for v, what in ((self.scale, "scale"), (self.bias, "bias"), (self.mean, "mean"), (self.var, "var")):
            if _shape(v) != (shape[1],):
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
        shapes = [_shape(v) for v in self.inputs]
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
class FlattenOp(NNOperation):
    """Flatten to 2-D: dims before `axis` and from `axis` on."""

    name = "nn.flatten"
    input = operand_def(TensorType)
    output = result_def(TensorType)
    axis = prop_def(IntegerAttr[I64])
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, axis: int, result_type: TensorType):
        super().__init__(operands=[input], result_types=[result_type],
                         properties={"axis": IntegerAttr(axis, i64)})

    def verify_(self) -> None:
        shape = _shape(self.input)
        axis = self.axis.value.data
        if not 0 <= axis <= len(shape):
            self._fail(f"axis {axis} out of range for rank {len(shape)}")
        self._expect_result((math.prod(shape[:axis]), math.prod(shape[axis:])))
        self._same_element(self.input, self.output)


@irdl_op_definition
class ReshapeOp(NNOperation):
    """Reshape to the result type (same element count)."""

    name = "nn.reshape"
    input = operand_def(TensorType)
    output = result_def(TensorType)
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, result_type: TensorType):
        super().__init__(operands=[input], result_types=[result_type])

    def verify_(self) -> None:
        a, b = _shape(self.input), _shape(self.output)
        if math.prod(a) != math.prod(b):
            self._fail(f"cannot reshape {math.prod(a)} elements into {math.prod(b)}")
        self._same_element(self.input, self.output)


# ---------------------------------------------------------------- host-only layers
@irdl_op_definition
class SoftmaxOp(ElementwiseUnary):
    """Softmax along `axis` (host CPU)."""

    name = "nn.softmax"
    axis = prop_def(IntegerAttr[I64])

    def verify_(self) -> None:
        super().verify_()
        if not 0 <= self.axis.value.data < len(_shape(self.input)):
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
class TransposeOp(NNOperation):
    """Permute dimensions (host CPU)."""

    name = "nn.transpose"
    input = operand_def(TensorType)
    output = result_def(TensorType)
    perm = prop_def(DenseArrayBase[I64])
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, perm: Sequence[int], result_type: TensorType):
        super().__init__(operands=[input], result_types=[result_type],
                         properties={"perm": i64_array(perm)})

    def verify_(self) -> None:
        shape = _shape(self.input)
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
    Erf, Div, ConvTranspose, Resize, shape arithmetic on run-time tensors, ...). It carries
    the node's op type, opset and attributes; its operands are the node's present inputs
    (`slots`: their ONNX input positions, when an optional input is absent), then, for a node
    with sub-graphs (If, Loop, Scan; `#nn.onnx_graph` attributes), the outer-scope values those
    sub-graphs read (`captures`: their ONNX names, which the sub-graphs refer to). The golden model
    and the device runner evaluate it as ONNX defines it (snowir/frontend/onnx_host.py), in float on
    dequantised data; results a device layer reads are quantised at that boundary.

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


DEVICE_OPS = (Conv2dOp, MaxPoolOp, AvgPoolOp, GlobalAvgPoolOp, DenseOp, AddOp, ReluOp,
              BatchNormOp, ConcatOp, FlattenOp, ReshapeOp, IdentityOp, ChannelSliceOp)
HOST_OPS = (SoftmaxOp, LrnOp, TransposeOp, ClipOp, HardSigmoidOp, HardSwishOp, MulOp, SpaceToDepthOp, UnfoldRowsOp, HostOp)

NN = Dialect(
    "nn",
    [ConstantOp, *DEVICE_OPS, *HOST_OPS],
    [FixedType, ExternalWeightsAttr, PackedWeightsAttr, OnnxGraphAttr],
)
