"""
The `nn` ops of a transposed convolution: `nn.conv_transpose2d` as ONNX's ConvTranspose imports,
and `nn.depth_to_space`, the interleave the conv-transpose-to-conv pass leaves after the device
conv that computes every output phase (a pure permutation of words, run on the host).
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import I64, DenseArrayBase, IntegerAttr, TensorType, i64
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import irdl_op_definition, operand_def, prop_def, result_def, var_operand_def

from snowir.dialects.nn.abstract_ops import NNOperation, OneTensorOperation, i64_array, int_values, shape_of


def transpose_out(size: int, k: int, stride: int, pad_lo: int, pad_hi: int, dilation: int = 1,
                  output_padding: int = 0) -> int:
    """ONNX ConvTranspose's output size along one axis: the full scatter, less the crops."""
    return stride * (size - 1) + output_padding + (k - 1) * dilation + 1 - pad_lo - pad_hi


@irdl_op_definition
class ConvTranspose2dOp(NNOperation):
    """Transposed 2-D convolution (NCHW, weights C x M/groups x kh x kw, as ONNX):
    out[n, g·Mg + m, s·i + d·k − p] += in[n, g·Cg + c, i] · w[g·Cg + c, m, k] per axis, plus bias.
    `pads` (top, left, bottom, right) crop the full scatter and may be negative (a grown output
    holds the bias alone there); `output_padding` grows it at the bottom / right. The
    conv-transpose-to-conv pass rewrites it into an nn.conv2d (nn-prepare)."""

    name = "nn.conv_transpose2d"
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = operand_def(TensorType)
    output = result_def(TensorType)
    strides = prop_def(DenseArrayBase[I64])
    pads = prop_def(DenseArrayBase[I64])
    output_padding = prop_def(DenseArrayBase[I64])
    dilations = prop_def(DenseArrayBase[I64])
    groups = prop_def(IntegerAttr[I64])

    assembly_format = "$input `,` $weight `,` $bias attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, weight: SSAValue, bias: SSAValue, result_type: TensorType,
                 strides: Sequence[int] = (1, 1), pads: Sequence[int] = (0, 0, 0, 0),
                 output_padding: Sequence[int] = (0, 0), dilations: Sequence[int] = (1, 1), groups: int = 1):
        props: dict[str, Attribute] = {
            "strides": i64_array(strides), "pads": i64_array(pads), "output_padding": i64_array(output_padding),
            "dilations": i64_array(dilations), "groups": IntegerAttr(groups, i64),
        }
        super().__init__(operands=[input, weight, bias], result_types=[result_type], properties=props)

    def verify_(self) -> None:
        n, c, h, w = self._rank(self.input, 4, "input")
        cw, mg, kh, kw = self._rank(self.weight, 4, "weight")
        s, p = int_values(self.strides), int_values(self.pads)
        op, dil = int_values(self.output_padding), int_values(self.dilations)
        if len(s) != 2 or min(s) < 1 or len(dil) != 2 or min(dil) < 1:
            self._fail("strides and dilations must be 2 positive integers")
        if len(p) != 4 or len(op) != 2 or min(op) < 0:
            self._fail("pads must be 4 integers and output_padding 2 non-negative integers")
        g = self.groups.value.data
        if g < 1 or c % g or cw != c:
            self._fail(f"weight has {cw} input channels, input {c}; groups {g} must divide them")
        if shape_of(self.bias) != (mg * g,):
            self._fail(f"bias must have shape {mg * g}")
        oh = transpose_out(h, kh, s[0], p[0], p[2], dil[0], op[0])
        ow = transpose_out(w, kw, s[1], p[1], p[3], dil[1], op[1])
        if oh < 1 or ow < 1:
            self._fail("pads crop the whole output")
        self._expect_result((n, mg * g, oh, ow))
        self._same_element(self.input, self.bias, self.output)
        self._weight_kind()


@irdl_op_definition
class DepthToSpaceOp(NNOperation):
    """Output phases stacked as channels, interleaved into pixels: with `block` (by, bx),
    `offsets` (oy, ox) in [0, block), and the input's channels per group ordered (phase, channel),
    out[n, g·Mg + m, y, x] = in[n, g·by·bx·Mg + (a·bx + b)·Mg + m, (y + oy) div by, (x + ox) div bx]
    for a = (y + oy) mod by, b = (x + ox) mod bx. Several inputs are one, concatenated along the
    channels (one per phase, groups 1; each at least as large as the pixels its phase is read at). With one group and zero offsets it is ONNX's
    DepthToSpace (DCR) cropped to the result; a pure permutation of words (the host copies them)."""

    name = "nn.depth_to_space"
    inputs = var_operand_def(TensorType)
    output = result_def(TensorType)
    block = prop_def(DenseArrayBase[I64])
    offsets = prop_def(DenseArrayBase[I64])
    groups = prop_def(IntegerAttr[I64])
    assembly_format = "$inputs attr-dict `:` functional-type(operands, results)"

    def __init__(self, inputs: SSAValue | Sequence[SSAValue], block: Sequence[int], offsets: Sequence[int],
                 groups: int, result_type: TensorType):
        super().__init__(operands=[[inputs] if isinstance(inputs, SSAValue) else list(inputs)],
                         result_types=[result_type],
                         properties={"block": i64_array(block), "offsets": i64_array(offsets),
                                     "groups": IntegerAttr(groups, i64)})

    def verify_(self) -> None:
        if not self.inputs:
            self._fail("needs an input")
        shapes = [self._rank(v, 4, "input") for v in self.inputs]
        n = shapes[0][0]
        if any(s[0] != n or s[1] != shapes[0][1] for s in shapes):
            self._fail("inputs must agree on the batch and the channels")
        c = sum(s[1] for s in shapes)
        h, w = shapes[0][2:]
        on, oc, oh, ow = self._rank(self.output, 4, "result")
        b, o = int_values(self.block), int_values(self.offsets)
        g = self.groups.value.data
        if len(b) != 2 or min(b) < 1 or len(o) != 2 or not (0 <= o[0] < b[0] and 0 <= o[1] < b[1]):
            self._fail(f"block must be 2 positive integers and offsets inside it, not {list(b)}, {list(o)}")
        if g < 1 or on != n or oc % g or c != oc * b[0] * b[1] or (len(shapes) > 1 and g != 1):
            self._fail(f"inputs must have {oc * b[0] * b[1]} channels ({oc} in {g} groups, {b[0]}x{b[1]} phases; "
                       f"several inputs: one group), not {c}")
        if len(shapes) == 1 and ((oh - 1 + o[0]) // b[0] >= h or (ow - 1 + o[1]) // b[1] >= w):
            self._fail(f"a {oh}x{ow} result reads past the input's {h}x{w} pixels")
        for p, s in enumerate(shapes if len(shapes) > 1 else []):  # phase p's rows and columns read
            a, bx = divmod(p, b[1])
            rows, cols = (oh - 1 + o[0] - a) // b[0] + 1, (ow - 1 + o[1] - bx) // b[1] + 1
            if rows > s[2] or cols > s[3]:
                self._fail(f"phase {p} is read at {rows}x{cols} pixels, its input has {s[2]}x{s[3]}")
        self._same_element(*self.inputs, self.output)


@irdl_op_definition
class ZeroInsertOp(OneTensorOperation):
    """The input spread `strides` (sy, sx) apart with zeros between, and `pads` (top, left,
    bottom, right) zeros around: out[n, c, top + sy·i, left + sx·j] = in[n, c, i, j], 0 elsewhere.
    A transposed conv is a stride-1 conv over it (conv-transpose-to-conv's zero insertion; the
    host lays it out)."""

    name = "nn.zero_insert"
    strides = prop_def(DenseArrayBase[I64])
    pads = prop_def(DenseArrayBase[I64])

    def __init__(self, input: SSAValue, strides: Sequence[int], pads: Sequence[int], result_type: TensorType):
        super().__init__(input, result_type, {"strides": i64_array(strides), "pads": i64_array(pads)})

    def verify_(self) -> None:
        n, c, h, w = self._rank(self.input, 4, "input")
        self._window_props()
        (sy, sx), p = int_values(self.strides), int_values(self.pads)
        self._expect_result((n, c, p[0] + sy * (h - 1) + 1 + p[2], p[1] + sx * (w - 1) + 1 + p[3]))
        self._same_element(self.input, self.output)
