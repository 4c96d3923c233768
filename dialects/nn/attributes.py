"""
The `nn` dialect's types and attributes: the fixed-point element type `!nn.fixed<m, n>`, and
the weight holders an `nn.constant` or `nn.host` carries instead of bloating the text
(`#nn.external`, `#nn.packed`, `#nn.onnx_graph`).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

from xdsl.dialects.builtin import Float32Type, IntAttr, StringAttr, TensorType
from xdsl.ir import Attribute, ParametrizedAttribute, TypeAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
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
