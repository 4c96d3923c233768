"""
The golden model: a plain numpy executor of the `nn` level, in float32 and in exactly
the hardware's fixed-point arithmetic (`snowir.fixedpoint`).

Fixed point: a tensor whose type has a `!nn.fixed<m, n>` element type holds int16 words.
Device layers compute as Snowflake does: exact integer products and sums (done in
float64 GEMMs, exact because |product| <= 2^30 and every sum stays below 2^53), then the
shared write-back (bias, bypass, round half up, saturate, ReLU). Host layers (softmax,
LRN, ...) run in float on dequantised data, as the host CPU would, and their results are
quantised again when a device layer consumes them.

Every value a fixed-point result loses to saturation is counted (`Golden.saturated`, per op;
`input_saturated`, per input of @main): the write-back's, an add's, and the host's and the
input's quantisation. The machine counts its write-backs the same way (fixedpoint.clipped).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from xdsl.dialects import func
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, DenseResourceAttr, ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue

from snowir import writeback
from snowir.dialects import nn
from snowir.errors import SnowError
from snowir.fixedpoint import (INT16_MAX, INT16_MIN, clipped_count, dequantize, quantize, quantize_counted, saturate,
                               writeback_rounded)
from snowir.frontend.onnx_host import NodeRunner, numpy_dtype
from snowir.packed import packed_weights
from snowir.resources import get_blob


class GoldenError(SnowError):
    pass


# ---------------------------------------------------------------- values
@dataclass
class Q:
    """A fixed-point tensor: int16 words with `frac` fraction bits."""

    words: np.ndarray
    frac: int

    def __post_init__(self) -> None:
        # one memory layout whoever made the words (a machine result transposed back from
        # channel-innermost, a strided quantised view): host ops' float sums (BLAS blocking, NumPy's
        # pairwise reductions) depend on the layout, so the machine run and the golden engine must agree
        self.words = np.asarray(self.words, order="C")  # ascontiguousarray makes a 0-d value 1-d

    def float(self) -> np.ndarray:
        return dequantize(self.words, self.frac)


Value = np.ndarray | Q


def element_frac(value: SSAValue) -> int | None:
    ty = value.type
    assert isinstance(ty, TensorType)
    elem = ty.get_element_type()
    return elem.frac_bits.data if isinstance(elem, nn.FixedType) else None


def constant_array(op: nn.ConstantOp) -> np.ndarray:
    """The value of an nn.constant: float32, or int16 words for fixed-point types."""
    ty = op.result.type
    assert isinstance(ty, TensorType)
    shape = tuple(ty.get_shape())
    dtype = numpy_dtype(ty.get_element_type())
    value = op.value
    if isinstance(value, nn.PackedWeightsAttr):  # a device conv's weights, in its packed image
        arr = packed_weights(op)
    elif isinstance(value, DenseResourceAttr):
        blob = get_blob(value.resource_handle.data)
        if blob is None:
            raise GoldenError(f"nn.constant: resource '{value.resource_handle.data}' has no data")
        arr = np.frombuffer(blob, dtype.newbyteorder("<"))
    elif isinstance(value, DenseIntOrFPElementsAttr):
        arr = np.asarray(value.get_values(), dtype)
        if arr.size == 1:
            arr = np.full(math.prod(shape), arr.reshape(-1)[0])
    else:
        path, key = value.path.data, value.key.data
        try:
            arr = np.load(path)[key]
        except (OSError, KeyError) as e:
            raise GoldenError(f"nn.constant: cannot read '{key}' from {path}: {e}") from None
    if arr.size != math.prod(shape):
        raise GoldenError(f"nn.constant: {arr.size} values for shape {list(shape)}")
    return arr.reshape(shape).astype(dtype)


# ---------------------------------------------------------------- float kernels
def _patches(x: np.ndarray, kh: int, kw: int, stride: Sequence[int], pads: Sequence[int],
             dil: Sequence[int], fill: float = 0.0) -> np.ndarray:
    """N, C, OH, OW, KH, KW windows of x (a view where possible)."""
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])), constant_values=fill)
    eh, ew = dil[0] * (kh - 1) + 1, dil[1] * (kw - 1) + 1
    win = sliding_window_view(xp, (eh, ew), axis=(2, 3))
    return win[:, :, ::stride[0], ::stride[1], ::dil[0], ::dil[1]]


def conv_sum(x: np.ndarray, w: np.ndarray, stride, pads, dil, groups: int, dtype=np.float32) -> np.ndarray:
    """sum_{c,ky,kx} x * w per output, as an (N, O, OH, OW) array of `dtype` (float64: exact for ints)."""
    n, c, _, _ = x.shape
    o, cg, kh, kw = w.shape
    p = _patches(x.astype(dtype, copy=False), kh, kw, stride, pads, dil)
    _, _, oh, ow, _, _ = p.shape
    out = np.empty((n, o, oh, ow), dtype)
    og = o // groups
    for g in range(groups):
        pg = p[:, g * cg:(g + 1) * cg]  # N, cg, OH, OW, KH, KW
        cols = pg.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, cg * kh * kw)
        wg = w[g * og:(g + 1) * og].reshape(og, cg * kh * kw).astype(dtype)
        out[:, g * og:(g + 1) * og] = (cols @ wg.T).reshape(n, oh, ow, og).transpose(0, 3, 1, 2)
    return out


def space_to_depth(x: np.ndarray, s: int, pads, oh: int, ow: int) -> np.ndarray:
    """nn.space_to_depth: out[n, (a·s + b)·C + c, i, j] = x[n, c, s·i + a − t, s·j + b − l]."""
    n, c, h, w = x.shape
    t, l = pads
    p = np.zeros((n, c, oh * s, ow * s), x.dtype)
    r0, r1, c0, c1 = max(0, t), min(oh * s, t + h), max(0, l), min(ow * s, l + w)
    p[:, :, r0:r1, c0:c1] = x[:, :, r0 - t:r1 - t, c0 - l:c1 - l]
    return np.ascontiguousarray(p.reshape(n, c, oh, s, ow, s).transpose(0, 3, 5, 1, 2, 4).reshape(n, s * s * c, oh, ow))


def conv_transpose_sum(x: np.ndarray, w: np.ndarray, stride, pads, dil, groups: int, out_hw: Sequence[int],
                       dtype=np.float32) -> np.ndarray:
    """nn.conv_transpose2d without bias: every product x[g·Cg + c, i, j]·w[g·Cg + c, m, ky, kx]
    added at output pixel (s·i + d·ky − top, s·j + d·kx − left), as an (N, M, OH, OW) array of
    `dtype` (float64: exact for ints). Each output's sum is the same set of products as the
    decomposed conv's (conv-transpose-to-conv), so fixed point rounds it once, at write-back."""
    n, c, h, wd = x.shape
    _, mg, kh, kw = w.shape
    cg = c // groups
    oh, ow = out_hw
    top, left = pads[0], pads[1]
    # a canvas over the full scatter and the (possibly grown) output: rows y0 .. y0 + rows
    y0, x0 = min(0, top), min(0, left)
    rows = max(stride[0] * (h - 1) + dil[0] * (kh - 1) + 1, top + oh) - y0
    cols = max(stride[1] * (wd - 1) + dil[1] * (kw - 1) + 1, left + ow) - x0
    canvas = np.zeros((n, groups, mg, rows, cols), dtype)
    xg = x.astype(dtype, copy=False).reshape(n, groups, cg, h, wd)
    wg = w.astype(dtype, copy=False).reshape(groups, cg, mg, kh, kw)
    for ky in range(kh):
        r = dil[0] * ky - y0
        for kx in range(kw):
            q = dil[1] * kx - x0
            canvas[:, :, :, r:r + stride[0] * (h - 1) + 1:stride[0], q:q + stride[1] * (wd - 1) + 1:stride[1]] += \
                np.einsum("ngchw,gcm->ngmhw", xg, wg[:, :, :, ky, kx])
    canvas = canvas.reshape(n, groups * mg, rows, cols)
    return np.ascontiguousarray(canvas[:, :, top - y0:top - y0 + oh, left - x0:left - x0 + ow])


def depth_to_space(x: np.ndarray, block: Sequence[int], offsets: Sequence[int], groups: int,
                   oh: int, ow: int) -> np.ndarray:
    """nn.depth_to_space: out[n, g·Mg + m, y, x] = x[n, g·by·bx·Mg + (a·bx + b)·Mg + m, (y + oy) div by,
    (x + ox) div bx], a and b the remainders."""
    n, c, h, w = x.shape
    by, bx = block
    g = groups
    mg = c // (g * by * bx)
    v = x.reshape(n, g, by, bx, mg, h, w).transpose(0, 1, 4, 5, 2, 6, 3).reshape(n, g * mg, h * by, w * bx)
    return np.ascontiguousarray(v[:, :, offsets[0]:offsets[0] + oh, offsets[1]:offsets[1] + ow])


def zero_insert(x: np.ndarray, strides: Sequence[int], pads: Sequence[int]) -> np.ndarray:
    """nn.zero_insert: out[n, c, top + sy·i, left + sx·j] = x[n, c, i, j], zeros elsewhere."""
    n, c, h, w = x.shape
    (sy, sx), (t, l, b, r) = strides, pads
    out = np.zeros((n, c, t + sy * (h - 1) + 1 + b, l + sx * (w - 1) + 1 + r), x.dtype)
    out[:, :, t:t + sy * (h - 1) + 1:sy, l:l + sx * (w - 1) + 1:sx] = x
    return out


def unfold_rows(x: np.ndarray, kh: int, sy: int, top: int, oh: int) -> np.ndarray:
    """nn.unfold_rows: out[n, ky·C + c, i, j] = x[n, c, sy·i + ky − top, j] (0 outside x)."""
    n, c, h, w = x.shape
    out = np.zeros((n, kh, c, oh, w), x.dtype)
    for ky in range(kh):
        rows = np.arange(oh) * sy + ky - top
        ok = (rows >= 0) & (rows < h)
        out[:, ky, :, ok] = x[:, :, rows[ok]].transpose(2, 0, 1, 3)
    return out.reshape(n, kh * c, oh, w)


def pool(x: np.ndarray, kernel, stride, pads, ceil: bool, kind: str, count_include_pad: bool = False):
    n, c, h, w = x.shape
    oh = nn.window_out(h, kernel[0], stride[0], pads[0], pads[2], 1, ceil)
    ow = nn.window_out(w, kernel[1], stride[1], pads[1], pads[3], 1, ceil)
    # extra bottom/right padding so ceil-mode windows exist; they never count
    extra_h = max(0, (oh - 1) * stride[0] + kernel[0] - (h + pads[0] + pads[2]))
    extra_w = max(0, (ow - 1) * stride[1] + kernel[1] - (w + pads[1] + pads[3]))
    full = (pads[0], pads[1], pads[2] + extra_h, pads[3] + extra_w)
    if kind == "max":
        fill = -np.inf if x.dtype.kind == "f" else INT16_MIN
        p = _patches(x, kernel[0], kernel[1], stride, full, (1, 1), fill)[:, :, :oh, :ow]
        return p.max(axis=(4, 5))
    ones = np.ones((1, 1, h, w), np.float64)
    counted = _patches(ones, kernel[0], kernel[1], stride, full, (1, 1))[:, :, :oh, :ow].sum(axis=(4, 5))
    if count_include_pad:
        inside = np.pad(ones, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])), constant_values=1.0)
        counted = _patches(inside, kernel[0], kernel[1], stride, (0, 0, extra_h, extra_w), (1, 1))[:, :, :oh, :ow].sum(axis=(4, 5))
    sums = _patches(x.astype(np.float64), kernel[0], kernel[1], stride, full, (1, 1))[:, :, :oh, :ow].sum(axis=(4, 5))
    return sums, counted


def int_values(attr) -> list[int]:
    return [int(v) for v in attr.get_values()]


# ---------------------------------------------------------------- executor
class Golden:
    """Executes `func.func @main` of an nn module; `fixed` follows the element types."""

    def __init__(self, module: ModuleOp):
        funcs = [op for op in module.walk() if isinstance(op, func.FuncOp)]
        mains = [op for op in funcs if op.sym_name.data == "main"] or (funcs if len(funcs) == 1 else [])
        if len(mains) != 1:
            raise GoldenError("the module needs a func.func @main (or exactly one function)")
        self.main = mains[0]
        self.constants: dict[SSAValue, np.ndarray] = {}
        self.runners: dict[Operation, NodeRunner] = {}
        self.trace: Callable[[SSAValue, Value], None] | None = None
        """Called with every result of @main's ops and its value, as they are computed."""
        self.saturated: dict[Operation, int] = {}
        """Per op last executed: the values of its fixed-point results that saturation changed."""
        self.input_saturated: dict[SSAValue, int] = {}
        """Per argument of @main: the input values quantising it saturated."""
        self._clipped = 0  # saturated values counted so far (each op's count is its difference)

    def inputs(self, inputs: Sequence[np.ndarray]) -> dict[SSAValue, Value]:
        """@main's arguments bound to `inputs`: quantised where the argument is fixed point, else in
        the argument's own element type."""
        block = self.main.body.block
        if len(inputs) != len(block.args):
            raise GoldenError(f"@main takes {len(block.args)} inputs, got {len(inputs)}")
        env: dict[SSAValue, Value] = {}
        for arg, x in zip(block.args, inputs):
            shape = tuple(arg.type.get_shape())
            if tuple(np.shape(x)) != shape:
                raise GoldenError(f"input has shape {list(np.shape(x))}, @main expects {list(shape)}")
            frac = element_frac(arg)
            if frac is None:
                env[arg] = np.asarray(x, numpy_dtype(arg.type.get_element_type()))
                self.input_saturated[arg] = 0
                continue
            words, self.input_saturated[arg] = quantize_counted(x, frac)
            env[arg] = Q(words, frac)
        return env

    def run(self, *inputs: np.ndarray) -> list[np.ndarray]:
        env = self.inputs(inputs)
        for op in self.main.body.block.ops:
            if isinstance(op, func.ReturnOp):
                return [self._float(env[v]) for v in op.arguments]
            self.step(op, env)
        raise GoldenError("@main has no func.return")

    def step(self, op: Operation, env: dict[SSAValue, Value]) -> None:
        """Execute one op of @main, binding its results in `env`."""
        if isinstance(op, nn.HostOp):
            before = self._clipped
            outs = self._host_node(op, env)
            self.saturated[op] = self._clipped - before
        else:
            outs = [self._op(op, env)]
        for result, out in zip(op.results, outs):
            env[result] = out
            if self.trace is not None:
                self.trace(result, out)

    # -------------------------------------------------------------- helpers
    @staticmethod
    def _float(v: Value) -> np.ndarray:
        return v.float() if isinstance(v, Q) else v

    def _quantize(self, x: np.ndarray, frac: int) -> np.ndarray:
        """`quantize`, its saturated values counted for the op being executed."""
        words, saturated = quantize_counted(x, frac)
        self._clipped += saturated
        return words

    def _saturate(self, rounded: np.ndarray, relu: bool) -> np.ndarray:
        """`saturate`, the values it changed counted for the op being executed."""
        self._clipped += clipped_count(rounded, relu)
        return saturate(rounded, relu)

    @staticmethod
    def _q(v: Value, frac: int) -> np.ndarray:
        """v's words in Qm.`frac` (of a constant, or where no op is being executed: not counted)."""
        if isinstance(v, Q):
            if v.frac == frac:
                return v.words
            return quantize(v.float(), frac)
        return quantize(v, frac)

    def _fixed(self, v: Value, frac: int) -> np.ndarray:
        """An operand's words in Qm.`frac`: quantised, or converted from another format, counted."""
        if isinstance(v, Q):
            if v.frac == frac:
                return v.words
            return self._quantize(v.float(), frac)
        return self._quantize(v, frac)

    def _const(self, value: SSAValue) -> np.ndarray:
        if value not in self.constants:
            owner = value.owner
            assert isinstance(owner, nn.ConstantOp)
            self.constants[value] = constant_array(owner)
        return self.constants[value]

    # -------------------------------------------------------------- ops
    def _op(self, op: Operation, env: dict[SSAValue, Value]) -> Value:
        """The value of one (single-result) op; its saturated values go to `saturated[op]`."""
        before = self._clipped
        out = self._compute(op, env)
        self.saturated[op] = self._clipped - before
        return out

    def _compute(self, op: Operation, env: dict[SSAValue, Value]) -> Value:
        if isinstance(op, nn.ConstantOp):
            arr = self._const(op.result)
            frac = element_frac(op.result)
            return Q(arr, frac) if frac is not None else arr
        out_frac = element_frac(op.results[0]) if op.results else None
        get = lambda v: env[v]
        if isinstance(op, nn.Conv2dOp | nn.DenseOp):
            return self._mac_layer(op, env, out_frac)
        if isinstance(op, nn.ConvTranspose2dOp):
            return self._conv_transpose(op, env, out_frac)
        if isinstance(op, nn.MaxPoolOp):
            x = get(op.input)
            args = (int_values(op.kernel), int_values(op.strides), int_values(op.pads), op.ceil_mode is not None, "max")
            if out_frac is not None:
                return Q(pool(self._fixed(x, out_frac), *args).astype(np.int16), out_frac)
            return pool(self._float(x), *args).astype(np.float32)
        if isinstance(op, nn.AvgPoolOp | nn.GlobalAvgPoolOp):
            return self._avg(op, get(op.input), out_frac)
        if isinstance(op, nn.AddOp):
            a, b = get(op.lhs), get(op.rhs)
            if out_frac is not None:
                total = self._fixed(a, out_frac).astype(np.int64) + self._fixed(b, out_frac).astype(np.int64)
                return Q(self._saturate(total, op.relu is not None), out_frac)
            r = self._float(a) + self._float(b)
            return np.maximum(r, 0) if op.relu is not None else r
        if isinstance(op, nn.ReluOp):
            x = get(op.input)
            if out_frac is not None:
                return Q(np.maximum(self._fixed(x, out_frac), 0), out_frac)
            return np.maximum(self._float(x), 0)
        if isinstance(op, nn.DepthToSpaceOp):  # a permutation of words: the host moves them as they are
            _, _, oh, ow = op.output.type.get_shape()
            xs = [self._fixed(env[v], out_frac) if out_frac is not None else self._float(env[v]) for v in op.inputs]
            if len(xs) > 1:  # phases of their own sizes: each read within its own (verifier)
                h, w = max(v.shape[2] for v in xs), max(v.shape[3] for v in xs)
                xs = [np.pad(v, ((0, 0), (0, 0), (0, h - v.shape[2]), (0, w - v.shape[3]))) for v in xs]
            x = xs[0] if len(xs) == 1 else np.concatenate(xs, axis=1)
            y = depth_to_space(x, int_values(op.block), int_values(op.offsets), op.groups.value.data, oh, ow)
            return Q(y, out_frac) if out_frac is not None else y
        if isinstance(op, nn.ZeroInsertOp):
            x = self._fixed(env[op.input], out_frac) if out_frac is not None else self._float(env[op.input])
            y = zero_insert(x, int_values(op.strides), int_values(op.pads))
            return Q(y, out_frac) if out_frac is not None else y
        if isinstance(op, nn.SpaceToDepthOp | nn.UnfoldRowsOp | nn.PadRowsOp):  # the host's layouts of a model input
            _, _, oh, ow = op.output.type.get_shape()
            x = self._fixed(env[op.input], out_frac) if out_frac is not None else self._float(env[op.input])
            if isinstance(op, nn.SpaceToDepthOp):
                y = space_to_depth(x, op.block.value.data, int_values(op.pads), oh, ow)
            elif isinstance(op, nn.UnfoldRowsOp):
                y = unfold_rows(x, op.kernel.value.data, op.stride.value.data, int_values(op.pads)[0], oh)
            else:
                top, bottom = int_values(op.pads)
                y = np.pad(x, ((0, 0), (0, 0), (top, bottom), (0, 0)))
            return Q(y, out_frac) if out_frac is not None else y
        if isinstance(op, nn.ChannelSliceOp):
            x = env[op.input]
            a, n = op.start.value.data, op.size.value.data
            if out_frac is not None:
                return Q(self._fixed(x, out_frac)[:, a:a + n].copy(), out_frac)
            return self._float(x)[:, a:a + n].copy()
        if isinstance(op, nn.CropOp):  # a window of pixels: its words as they are
            x = env[op.input]
            (y0, x0), (_, _, h, w) = int_values(op.offsets), op.output.type.get_shape()
            if out_frac is not None:
                return Q(self._fixed(x, out_frac)[:, :, y0:y0 + h, x0:x0 + w].copy(), out_frac)
            return self._float(x)[:, :, y0:y0 + h, x0:x0 + w].copy()
        if isinstance(op, nn.ConcatOp | nn.FlattenOp | nn.ReshapeOp | nn.TransposeOp | nn.IdentityOp):
            return self._move(op, env, out_frac)
        if isinstance(op, nn.BatchNormOp):
            # one fold-batch-norm could not fold (not after a conv, not rank 4): on the host, in float
            x = self._float(get(op.input))
            s, b, m, v = (self._float(Q(self._const(p), element_frac(p)) if element_frac(p) is not None
                                      else self._const(p)) for p in (op.scale, op.bias, op.mean, op.var))
            eps = op.epsilon.value.data
            k = (s / np.sqrt(v + eps)).astype(np.float32)
            shape = (1, -1) + (1,) * (x.ndim - 2)
            r = (x - m.reshape(shape)) * k.reshape(shape) + b.reshape(shape)
            return Q(self._quantize(r, out_frac), out_frac) if out_frac is not None else r
        return self._host(op, env, out_frac)

    def _mac_layer(self, op: nn.Conv2dOp | nn.DenseOp, env: dict[SSAValue, Value], out_frac: int | None) -> Value:
        x = env[op.input]
        relu = op.relu is not None
        bypass = env[op.bypass] if isinstance(op, nn.Conv2dOp) and op.bypass is not None else None
        units = writeback.layer_choices(op.attributes) if isinstance(op, nn.Conv2dOp) else []
        if isinstance(op, nn.Conv2dOp):
            args = (int_values(op.strides), int_values(op.pads), int_values(op.dilations), op.groups.value.data)
        if out_frac is None:
            w = self._float(env[op.weight])
            b = self._float(env[op.bias])
            xf = self._float(x)
            # accumulated in float64 (exact products, error ~1e-16) and rounded once: a float32
            # BLAS sums each block of output channels in its own order, so equal channels of one
            # layer came out unequal on some CPUs (SqueezeNet's 1000 logits of ~1e10, test_onnx_backend)
            if isinstance(op, nn.Conv2dOp):
                r = conv_sum(xf, w, *args, dtype=np.float64).astype(np.float32) + b.reshape(1, -1, 1, 1)
            else:
                r = (xf.astype(np.float64) @ w.T.astype(np.float64)).astype(np.float32) + b
            if bypass is not None:
                r = r + self._float(bypass)
            for unit, text in units:
                r = unit.in_float(text, r)
            return np.maximum(r, 0) if relu else r.astype(np.float32)
        wq = env[op.weight]
        if not isinstance(wq, Q):
            raise GoldenError(f"{op.name}: fixed-point layer with float weights")
        in_frac = element_frac(op.input)
        xq = self._fixed(x, in_frac)
        bq = self._q(env[op.bias], out_frac).astype(np.int64)
        if isinstance(op, nn.Conv2dOp):
            acc = conv_sum(xq, wq.words, *args, dtype=np.float64)
            bq = bq.reshape(1, -1, 1, 1)
        else:
            acc = xq.astype(np.float64) @ wq.words.astype(np.float64).T
        byp = self._fixed(bypass, out_frac).astype(np.int64) if bypass is not None else 0
        # the write-back shift takes the accumulator (input + weight fraction bits) to the output's
        rounded = writeback_rounded(acc.astype(np.int64), bq, byp, in_frac + wq.frac - out_frac)
        for unit, text in units:  # the write-back units, as the machine applies them
            rounded = unit.apply(unit.word(text, out_frac), rounded)
        return Q(self._saturate(rounded, relu), out_frac)

    def _conv_transpose(self, op: nn.ConvTranspose2dOp, env: dict[SSAValue, Value], out_frac: int | None) -> Value:
        """As a conv: the products summed exactly, then (fixed point) one write-back rounding."""
        args = (int_values(op.strides), int_values(op.pads), int_values(op.dilations), op.groups.value.data,
                op.output.type.get_shape()[2:])
        if out_frac is None:
            r = conv_transpose_sum(self._float(env[op.input]), self._float(env[op.weight]), *args)
            return (r + self._float(env[op.bias]).reshape(1, -1, 1, 1)).astype(np.float32)
        wq = env[op.weight]
        if not isinstance(wq, Q):
            raise GoldenError(f"{op.name}: fixed-point layer with float weights")
        in_frac = element_frac(op.input)
        acc = conv_transpose_sum(self._fixed(env[op.input], in_frac), wq.words, *args, dtype=np.float64)
        bq = self._q(env[op.bias], out_frac).astype(np.int64).reshape(1, -1, 1, 1)
        rounded = writeback_rounded(acc.astype(np.int64), bq, 0, in_frac + wq.frac - out_frac)
        return Q(self._saturate(rounded, False), out_frac)

    def _avg(self, op, x: Value, out_frac: int | None) -> Value:
        if isinstance(op, nn.GlobalAvgPoolOp):
            h, w = op.input.type.get_shape()[2:]
            kernel, stride, pads, ceil, cip = (h, w), (1, 1), (0, 0, 0, 0), False, False
        else:
            kernel, stride, pads = int_values(op.kernel), int_values(op.strides), int_values(op.pads)
            ceil, cip = op.ceil_mode is not None, op.count_include_pad is not None
        if out_frac is None:
            sums, counted = pool(self._float(x), kernel, stride, pads, ceil, "avg", cip)
            return (sums / counted).astype(np.float32)
        # on Snowflake an average is a MAC with weight 1/count in Q1.15 (write-back shift 15)
        sums, counted = pool(self._fixed(x, out_frac).astype(np.float64), kernel, stride, pads, ceil, "avg", cip)
        weight = np.clip(np.floor(32768.0 / counted + 0.5), 0, INT16_MAX)
        return Q(self._saturate(writeback_rounded((sums * weight).astype(np.int64), 0, 0, 15), False), out_frac)

    def _move(self, op, env, out_frac: int | None) -> Value:
        if isinstance(op, nn.ConcatOp):
            xs = [env[v] for v in op.inputs]
            axis = op.axis.value.data
            if out_frac is not None:
                return Q(np.concatenate([self._fixed(v, out_frac) for v in xs], axis), out_frac)
            return np.concatenate([self._float(v) for v in xs], axis)
        x = env[op.input]
        shape = tuple(op.results[0].type.get_shape())
        data = self._fixed(x, out_frac) if out_frac is not None else self._float(x)
        if isinstance(op, nn.TransposeOp):
            data = data.transpose(int_values(op.perm))
        else:
            data = data.reshape(shape)
        return Q(data, out_frac) if out_frac is not None else data

    def _host_node(self, op: nn.HostOp, env: dict[SSAValue, Value]) -> list[Value]:
        """An ONNX node on the host: as ONNX defines it, in float on dequantised operands;
        a result typed fixed point (a device layer reads it) is quantised there."""
        runner = self.runners.get(op)
        if runner is None:
            runner = self.runners[op] = NodeRunner.cached(op.op_type.data, op.domain.data if op.domain else "",
                                                   op.opset.value.data, op.attrs, op.input_slots(),
                                                   op.slot_count(), len(op.outputs), op.capture_names())
        args = []
        for v in op.inputs:
            value = env[v]
            args.append(np.asarray(self._float(value) if isinstance(value, Q) else value, order="C"))
        try:
            outs = runner(*args)
        except Exception as e:  # noqa: BLE001 - onnxruntime's or the reference evaluator's message, in one line
            raise GoldenError(f"nn.host \"{op.op_type.data}\": {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        results = []
        for result, out in zip(op.results, outs):
            frac = element_frac(result)
            shape = tuple(result.type.get_shape())
            if tuple(out.shape) != shape:
                raise GoldenError(f"nn.host \"{op.op_type.data}\": result of shape {list(out.shape)}, "
                                  f"the IR says {list(shape)}")
            if frac is not None:
                results.append(Q(self._quantize(np.asarray(out, np.float32), frac), frac))
            else:
                results.append(np.asarray(out, numpy_dtype(result.type.get_element_type())))
        return results

    def _host(self, op, env, out_frac: int | None) -> Value:
        """Host-CPU ops: float math on dequantised data."""
        if isinstance(op, nn.MulOp):
            r = self._float(env[op.lhs]) * self._float(env[op.rhs])
        else:
            x = np.asarray(self._float(env[op.input]), np.float32, order="C")
            if isinstance(op, nn.SoftmaxOp):
                axis = op.axis.value.data
                e = np.exp(x - x.max(axis=axis, keepdims=True))
                r = e / e.sum(axis=axis, keepdims=True)
            elif isinstance(op, nn.LrnOp):
                size = op.size.value.data
                alpha, beta, bias = op.alpha.value.data, op.beta.value.data, op.bias.value.data
                sq = np.pad(x.astype(np.float64) ** 2, ((0, 0), ((size - 1) // 2, size // 2), (0, 0), (0, 0)))
                window = sliding_window_view(sq, size, axis=1).sum(axis=-1)
                r = (x / (bias + alpha / size * window) ** beta).astype(np.float32)
            elif isinstance(op, nn.ClipOp):
                r = np.clip(x, op.min.value.data, op.max.value.data)
            elif isinstance(op, nn.HardSigmoidOp):
                r = np.clip(op.alpha.value.data * x + op.beta.value.data, 0, 1)
            elif isinstance(op, nn.HardSwishOp):
                r = x * np.clip(x / 6 + 0.5, 0, 1)
            else:
                raise GoldenError(f"{op.name}: not supported by the golden model")
        r = np.asarray(r, np.float32)
        return Q(self._quantize(r, out_frac), out_frac) if out_frac is not None else r


def run_golden(module: ModuleOp, *inputs: np.ndarray) -> list[np.ndarray]:
    return Golden(module).run(*inputs)
