"""
quantize{format=Q8.8|auto calibration=inputs.npy samples=8 headroom=1.25}: move the module to
Snowflake's 16-bit fixed point.

Every tensor becomes `!nn.fixed<m, n>`. Weights of conv2d / dense get their own format per
layer, the one with the most fraction bits that still holds the largest |w|
(`!nn.fixed<16-f, f>`, f <= 15; recorded in the weight's type and as `w_frac` on the layer).

  * `format=Qm.n`: every activation, bias and other constant in that one data format; the
    write-back shift is f (docs/isa.md, `vmov shift`).
  * `format=auto`: each tensor its own format from calibration (snowir/calibration.py):
    calibration inputs (`calibration`, a .npy of N inputs, else `samples` seeded N(0, 1)
    inputs) run through the float module, and each group of tensors the hardware moves
    without rescaling gets the most fraction bits that hold its largest value x `headroom`.
    Synthetic inputs (no `calibration`) only record the ranges: their formats are Q8.8's
    (activations Q8.8, weights at most 15 fraction bits), snowir/calibration.py says why.
    A conv / dense changes format at its write-back for free: shift = input fraction bits + f
    - output fraction bits; its bias takes the output's format.

Values are rounded half away from zero and saturated.
"""

import hashlib
import re
import sys
from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import (Float32Type, FloatAttr, FunctionType, IntegerAttr, ModuleOp, StringAttr, TensorType,
                                   f64, i64)
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter
from xdsl.utils.exceptions import PassFailedException

from snowir.calibration import (DEFAULT_HEADROOM, DEFAULT_SAMPLES, SYNTHETIC_FRAC, calibration_inputs,
                                choose_by_error, choose_formats, output_snr, ranges, uniform_formats)
from snowir.dialects import nn
from snowir.errors import SnowError
from snowir.fixedpoint import frac_for, quantize_counted
from snowir.golden import constant_array
from snowir.nn_util import layer_name, on_host
from snowir.resources import int16_resource

_FORMAT = re.compile(r"^[Qq](\d+)\.(\d+)$")


def _constant_name(const: nn.ConstantOp) -> str:
    """A constant as a user reads it: the bias of the layer it feeds, else its own name."""
    for use in const.result.uses:
        user = use.operation
        if isinstance(user, nn.Conv2dOp | nn.DenseOp) and use.index == 2:
            return f"{layer_name(user)}'s bias"
        if user.name.startswith("nn."):
            return f"a constant of {layer_name(user)}"
    return const.result.name_hint or "a constant"


def clipped_warning(clipped: list[tuple[str, int, int, float, tuple[int, int]]], calibrated: bool) -> str:
    """One line: the constants (biases, an add's operand) whose values their format saturates at
    compile time, worst first; the write-back counts (`saturated`) never see them."""
    worst = sorted(clipped, key=lambda c: -c[1] / c[2])
    named = ", ".join(f"{name} {lost:,} of {size:,} (largest {peak:g}, Q{m}.{n} holds {2.0 ** (m - 1):g})"
                      for name, lost, size, peak, (m, n) in worst[:3])
    more = f" and {len(worst) - 3} more" if len(worst) > 3 else ""
    fix = "calibrate with inputs like the real ones" if calibrated else "try format=auto with calibration data"
    return f"constants saturate in their formats: {named}{more}; {fix}"


def parse_format(text: str) -> tuple[int, int]:
    m = _FORMAT.match(text.strip())
    if not m or int(m.group(1)) + int(m.group(2)) != 16 or int(m.group(1)) < 1:
        raise PassFailedException(f"quantize: format '{text}' is not a 16-bit Qm.n (m >= 1, m + n = 16)")
    return int(m.group(1)), int(m.group(2))


def weight_frac(w: np.ndarray, most: int = 15) -> int:
    """Most fraction bits (up to `most`) that hold the largest |w| in 16 bits."""
    return frac_for(float(np.abs(w).max()) if w.size else 0.0, most)


def most_frac(layer: Operation) -> int:
    """A layer's `w_frac_max`, else 15: an earlier pass's cap on its weight fraction bits (the
    phase convs of one transposed conv keep its one format, conv-transpose-to-conv)."""
    cap = layer.attributes.get("w_frac_max")
    return cap.value.data if isinstance(cap, IntegerAttr) else 15


def _fixed(ty, m: int, n: int):
    if isinstance(ty, TensorType) and not isinstance(ty.get_element_type(), nn.FixedType):
        return TensorType(nn.FixedType(m, n), list(ty.get_shape()))
    return ty


def _host_only(value) -> bool:
    """Every user is an nn.host node or the function's return: the value never meets the device."""
    return all(isinstance(u.operation, nn.HostOp | func.ReturnOp) for u in value.uses)


def _retype(value, new_type) -> None:
    if value.type != new_type:
        Rewriter.replace_value_with_new_type(value, new_type)


@dataclass(frozen=True)
class QuantizePass(ModulePass):
    name = "quantize"
    format: str = "Q8.8"
    calibration: str = ""
    """format=auto: a .npy of calibration inputs (N x the model input), else seeded N(0, 1)."""
    samples: int = DEFAULT_SAMPLES
    headroom: float = DEFAULT_HEADROOM

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        auto = self.format.strip().lower() == "auto"
        m, n = (8, 8) if auto else parse_format(self.format)
        weight_of = {}
        for inner in op.walk():
            if isinstance(inner, nn.Conv2dOp | nn.DenseOp):
                weight_of[inner.weight] = inner
        tensor_frac: dict = {}
        layer_wfrac: dict = {}
        if auto:
            tensor_frac, layer_wfrac = self._auto_formats(op, weight_of)
        clipped = self._rewrite(op, m, n, weight_of, tensor_frac, layer_wfrac, auto and bool(self.calibration))
        # the mark that the module is quantised, also when no argument is a float (integer inputs)
        op.attributes["nn.format"] = StringAttr(self.format)
        if clipped:
            print(f"quantize: warning: {clipped_warning(clipped, auto and bool(self.calibration))}", file=sys.stderr)

    @staticmethod
    def _rewrite(op: ModuleOp, m: int, n: int, weight_of: dict, tensor_frac: dict, layer_wfrac: dict,
                 calibrated: bool) -> list[tuple[str, int, int, float, tuple[int, int]]]:
        """Every tensor to its format (`tensor_frac`, else Qm.n), every weight to its layer's;
        the constants whose values saturate."""
        clipped: list[tuple[str, int, int, float, tuple[int, int]]] = []
        for inner in list(op.walk()):
            if isinstance(inner, nn.ConstantOp):
                if not isinstance(inner.result.type.get_element_type(), Float32Type) or _host_only(inner.result):
                    continue  # already fixed; or an nn.host operand only (shapes, scales): kept as ONNX gave it
                values = constant_array(inner)
                layer = weight_of.get(inner.result)
                if layer is not None and all(u.operation is layer and u.index == 1 for u in inner.result.uses):
                    f = layer_wfrac.get(layer, weight_frac(values, most_frac(layer)))
                    layer.attributes["w_frac"] = IntegerAttr(f, i64)
                    fmt = (16 - f, f)
                elif calibrated:
                    f = QuantizePass._constant_frac(inner, values, tensor_frac)
                    fmt = (16 - f, f)
                else:
                    fmt = (m, n)
                words, lost = quantize_counted(values, fmt[1])
                if lost:
                    clipped.append((_constant_name(inner), lost, values.size, float(np.abs(values).max()), fmt))
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
            elif isinstance(inner, nn.HostOp):
                for res in list(inner.results):  # fixed point only where a device or nn layer reads it
                    if isinstance(res.type.get_element_type(), Float32Type) and not _host_only(res):
                        f = tensor_frac.get(res)
                        _retype(res, _fixed(res.type, m, n) if f is None else _fixed(res.type, 16 - f, f))
            elif inner.name.startswith("nn."):
                for res in list(inner.results):
                    f = tensor_frac.get(res)
                    _retype(res, _fixed(res.type, m, n) if f is None else _fixed(res.type, 16 - f, f))
        for fn in op.walk():
            if isinstance(fn, func.FuncOp):
                for arg in list(fn.body.block.args):
                    if not isinstance(arg.type.get_element_type(), Float32Type | nn.FixedType):
                        continue  # integer inputs feed nn.host nodes as they are
                    f = tensor_frac.get(arg)
                    _retype(arg, _fixed(arg.type, m, n) if f is None else _fixed(arg.type, 16 - f, f))
                ins = [a.type for a in fn.body.block.args]
                rets = [r for r in fn.body.block.ops if isinstance(r, func.ReturnOp)]
                outs = [v.type for v in rets[0].arguments] if rets else list(fn.function_type.outputs.data)
                fn.function_type = FunctionType.from_lists(ins, outs)
        return clipped

    def _auto_formats(self, op: ModuleOp, weight_of: dict) -> tuple[dict, dict]:
        if self.samples < 1 or not self.headroom >= 1.0:
            raise PassFailedException(f"quantize: samples must be >= 1 and headroom >= 1 "
                                      f"(got {self.samples}, {self.headroom})")
        try:
            x = calibration_inputs(op, self.calibration, self.samples)
            # what the formats were chosen from, for the report's provenance
            digest = hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()[:16]
            source = f"{len(x)} inputs of {self.calibration}" if self.calibration else \
                f"{len(x)} synthetic N(0, 1) inputs, ranges only: formats Q8.8"
            op.attributes["nn.calibration"] = StringAttr(f"sha256:{digest} ({source}, headroom {self.headroom:g})")
            reference: list[list[np.ndarray]] = []
            peak = ranges(op, x, reference)
            # synthetic: ranges recorded, formats as fixed Q8.8 gives them (snowir/calibration.py)
            most_w, fixed = (nn.MAX_WEIGHT_FRAC, None) if self.calibration else (15, SYNTHETIC_FRAC)
            weights = {layer: constant_array(w.owner) for w, layer in weight_of.items() if isinstance(w.owner, nn.ConstantOp)}
            wfrac = {layer: weight_frac(w, min(most_w, most_frac(layer))) for layer, w in weights.items()}
            formats = choose_formats(op, peak, wfrac, self.headroom, fixed)
            if self.calibration:  # the per-tensor formats against the uniform ones, by measured error
                wfrac15 = {layer: weight_frac(w, most_frac(layer)) for layer, w in weights.items()}
                formats, chosen = choose_by_error(
                    formats, peak, lambda f: uniform_formats(op, f, wfrac15),
                    lambda candidate: output_snr(self._quantized_copy(op, candidate), x, reference))
                op.attributes["nn.calibration"] = StringAttr(f"{op.attributes['nn.calibration'].data}; {chosen}")
        except SnowError as e:
            raise PassFailedException(f"quantize: {e}") from None
        for value, p in peak.items():  # what the formats cover, for reports and plots
            if isinstance(value.owner, Operation) and value.owner.name.startswith("nn."):
                value.owner.attributes["calibrated_max"] = FloatAttr(round(p, 6), f64)
        return formats

    @staticmethod
    def _quantized_copy(op: ModuleOp, formats: tuple[dict, dict]) -> ModuleOp:
        """A copy of the float module in `formats` (for measuring a candidate's error)."""
        mapper: dict = {}
        copy = op.clone(value_mapper=mapper)
        tensor_frac = {mapper[v]: f for v, f in formats[0].items()}
        layer_wfrac = {mapper[layer.results[0]].owner: f for layer, f in formats[1].items()}
        weight_of = {inner.weight: inner for inner in copy.walk() if isinstance(inner, nn.Conv2dOp | nn.DenseOp)}
        QuantizePass._rewrite(copy, 8, 8, weight_of, tensor_frac, layer_wfrac, True)
        return copy

    @staticmethod
    def _constant_frac(const: nn.ConstantOp, values: np.ndarray, tensor_frac: dict) -> int:
        """A non-weight constant in the format of what it feeds: a bias its layer's output, a
        device op's operand the op's result; otherwise (host) its own range."""
        for use in const.result.uses:
            user = use.operation
            if user.results and user.results[0] in tensor_frac:
                if isinstance(user, nn.Conv2dOp | nn.DenseOp) and use.index != 2:
                    continue
                if isinstance(user, nn.Conv2dOp | nn.DenseOp | nn.ConcatOp) or not on_host(user):
                    return tensor_frac[user.results[0]]
        return frac_for(float(np.abs(values).max()) if values.size else 0.0)
