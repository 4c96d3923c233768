"""
quantize{format=Q8.8}: move the module to Snowflake's 16-bit fixed point.

Every tensor becomes `!nn.fixed<m, n>` (the chosen data format, default Q8.8). Weights of
conv2d / dense get their own format per layer, the one with the most fraction bits that
still holds the largest |w| (`!nn.fixed<16-f, f>`, f <= 15; recorded in the weight's type and
as `w_frac` on the layer): the hardware's write-back shifts by f (docs/isa.md, `vmov shift`),
so small weights keep their precision while activations stay Qm.n. Biases and every other
constant use the data format. Values are rounded half away from zero and saturated.
"""

import math
import re
from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import FunctionType, IntegerAttr, ModuleOp, TensorType, i64
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter
from xdsl.utils.exceptions import PassFailedException

from snowir.dialects import nn
from snowir.fixedpoint import quantize
from snowir.golden import constant_array
from snowir.resources import int16_resource

_FORMAT = re.compile(r"^[Qq](\d+)\.(\d+)$")


def parse_format(text: str) -> tuple[int, int]:
    m = _FORMAT.match(text.strip())
    if not m or int(m.group(1)) + int(m.group(2)) != 16 or int(m.group(1)) < 1:
        raise PassFailedException(f"quantize: format '{text}' is not a 16-bit Qm.n (m >= 1, m + n = 16)")
    return int(m.group(1)), int(m.group(2))


def weight_frac(w: np.ndarray) -> int:
    peak = float(np.abs(w).max()) if w.size else 0.0
    if peak == 0.0:
        return 15
    return int(max(0, min(15, math.floor(math.log2(32767.0 / peak)))))


def _fixed(ty, m: int, n: int):
    if isinstance(ty, TensorType) and not isinstance(ty.get_element_type(), nn.FixedType):
        return TensorType(nn.FixedType(m, n), list(ty.get_shape()))
    return ty


def _retype(value, new_type) -> None:
    if value.type != new_type:
        Rewriter.replace_value_with_new_type(value, new_type)


@dataclass(frozen=True)
class QuantizePass(ModulePass):
    name = "quantize"
    format: str = "Q8.8"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        m, n = parse_format(self.format)
        weight_of = {}
        for inner in op.walk():
            if isinstance(inner, nn.Conv2dOp | nn.DenseOp):
                weight_of[inner.weight] = inner
        for inner in list(op.walk()):
            if isinstance(inner, nn.ConstantOp):
                if isinstance(inner.result.type.get_element_type(), nn.FixedType):
                    continue
                values = constant_array(inner)
                layer = weight_of.get(inner.result)
                if layer is not None and all(u.operation is layer and u.index == 1 for u in inner.result.uses):
                    f = weight_frac(values)
                    layer.attributes["w_frac"] = IntegerAttr(f, i64)
                    fmt = (16 - f, f)
                else:
                    fmt = (m, n)
                words = quantize(values, fmt[1])
                attr = int16_resource(f"{inner.result.name_hint or 'c'}_q", words.ravel())
                from xdsl.dialects.builtin import DenseResourceAttr

                typed = DenseResourceAttr.from_params(attr.resource_handle, TensorType(nn.FixedType(*fmt), list(values.shape)))
                new = nn.ConstantOp(typed)
                new.result.name_hint = inner.result.name_hint
                inner.result.replace_all_uses_with(new.result)
                block = inner.parent_block()
                block.insert_op_before(new, inner)
                inner.detach()
                inner.erase()
            elif inner.name.startswith("nn."):
                for res in list(inner.results):
                    _retype(res, _fixed(res.type, m, n))
        for fn in op.walk():
            if isinstance(fn, func.FuncOp):
                for arg in list(fn.body.block.args):
                    _retype(arg, _fixed(arg.type, m, n))
                ins = [a.type for a in fn.body.block.args]
                rets = [r for r in fn.body.block.ops if isinstance(r, func.ReturnOp)]
                outs = [v.type for v in rets[0].arguments] if rets else list(fn.function_type.outputs.data)
                fn.function_type = FunctionType.from_lists(ins, outs)
