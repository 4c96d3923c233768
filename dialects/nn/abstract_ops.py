"""
The bases of the `nn` ops, as xDSL's riscv dialect keeps its in abstract_ops.py: `NNOperation`
(the shape and element-type checks every layer's verifier uses), and the shapes several layers
share (`PoolOperation`, `ElementwiseBinary`, `ElementwiseUnary`), with the shape arithmetic
the frontend and golden model read as well (`window_out`).
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Sequence

from xdsl.dialects.builtin import I64, DenseArrayBase, TensorType, UnitAttr, i64
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import IRDLOperation, ParsePropInAttrDict, operand_def, opt_prop_def, prop_def, result_def, traits_def
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from snowir.dialects.nn.attributes import FixedType


def shape_of(value: SSAValue | Attribute) -> tuple[int, ...]:
    ty = value.type if isinstance(value, SSAValue) else value
    assert isinstance(ty, TensorType)
    return tuple(ty.get_shape())


def element_of(value: SSAValue) -> Attribute:
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
        elems = {str(element_of(v)) for v in values}
        if len(elems) > 1:
            self._fail(f"element types differ: {', '.join(sorted(elems))}")

    def _weight_kind(self) -> None:
        """Weights may use their own fixed-point format (per-layer fraction bits), never float vs fixed."""
        w, x = element_of(getattr(self, "weight")), element_of(getattr(self, "input"))
        if isinstance(w, FixedType) != isinstance(x, FixedType) or (
                not isinstance(w, FixedType) and str(w) != str(x)):
            self._fail(f"element types differ: weight {w}, input {x}")

    def _expect_result(self, shape: Sequence[int]) -> None:
        got = shape_of(self.results[0])
        if tuple(got) != tuple(shape):
            self._fail(
                f"result shape {'x'.join(map(str, got))} does not match the computed "
                f"{'x'.join(map(str, shape))}"
            )

    def _rank(self, value: SSAValue, rank: int, what: str) -> tuple[int, ...]:
        shape = shape_of(value)
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


class ElementwiseBinary(NNOperation, ABC):
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    output = result_def(TensorType)
    assembly_format = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)"

    def __init__(self, lhs: SSAValue, rhs: SSAValue, result_type: TensorType,
                 props: dict[str, Attribute] | None = None):
        super().__init__(operands=[lhs, rhs], result_types=[result_type], properties=props or {})

    def verify_(self) -> None:
        a, b = shape_of(self.lhs), shape_of(self.rhs)
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


class OneTensorOperation(NNOperation, ABC):
    """One tensor in, one out, with the op's own properties (a window, a slice, a layout, a
    permutation of the input); the subclass's verifier says how the result's shape follows."""

    input = operand_def(TensorType)
    output = result_def(TensorType)
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, result_type: TensorType | None = None,
                 props: dict[str, Attribute] | None = None):
        super().__init__(operands=[input], result_types=[result_type or input.type],
                         properties=props or {})


class ElementwiseUnary(OneTensorOperation, ABC):
    def verify_(self) -> None:
        self._expect_result(shape_of(self.input))
        self._same_element(self.input, self.output)
