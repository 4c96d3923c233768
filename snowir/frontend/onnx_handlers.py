"""
The ONNX frontend's node handlers: one function per ONNX operator with an nn mapping
(snowir/frontend/onnx_import.py walks the graph and calls them). A handler builds the nn op, or raises
`Unmapped` when the node, though valid, is in a form the mapping does not cover (a 1-D conv, a
dilated pool, a Gemm whose B is computed, ...): the importer then keeps it as `nn.host`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx
from xdsl.dialects.builtin import Float32Type, TensorType
from xdsl.ir import Operation, SSAValue

from snowir.dialects import nn
from snowir.frontend.context import ImportContext



class Unmapped(Exception):
    """A handler's answer that the node, though valid, has no nn-op mapping: it becomes nn.host."""


def tensor_type(shape: Sequence[int]) -> TensorType:
    return TensorType(Float32Type(), list(shape))


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


_tensor_type = tensor_type


def _conv(imp: ImportContext, node: onnx.NodeProto) -> None:
    a = _attrs(node)
    x = imp.value(node, node.input[0])
    w = imp.const(node, 1, "weight")
    if w.ndim != 4:
        raise Unmapped(f"only 2-D convolution is supported (weight rank {w.ndim})")
    b = imp.const(node, 2, "bias") if len(node.input) > 2 and node.input[2] else np.zeros(w.shape[0], np.float32)
    if len(imp.shape(x)) != 4:
        raise Unmapped(f"input of rank {len(imp.shape(x))}")
    if "kernel_shape" in a and [int(k) for k in a["kernel_shape"]] != list(w.shape[2:]):
        raise imp.fail(node, f"kernel_shape {[int(k) for k in a['kernel_shape']]} disagrees with the weight's "
                             f"{w.shape[2]}x{w.shape[3]} kernels")
    n, c, h, wd = imp.shape(x)
    strides = list(a.get("strides", [1, 1]))
    dil = list(a.get("dilations", [1, 1]))
    pads = _pads(imp, node, a, (h, wd), w.shape[2:], strides, dil)
    groups = int(a.get("group", 1))
    oh = nn.window_out(h, w.shape[2], strides[0], pads[0], pads[2], dil[0])
    ow = nn.window_out(wd, w.shape[3], strides[1], pads[1], pads[3], dil[1])
    wv = imp.const_value(node.input[1])
    if len(node.input) > 2 and node.input[2]:
        bv = imp.const_value(node.input[2])
    else:
        bv = imp.new_const(f"{node.output[0]}_bias", b)
    op = imp.emit(nn.Conv2dOp(x, wv, bv, _tensor_type([n, w.shape[0], oh, ow]), strides, pads, dil, groups))
    imp.set_output(node, op)


def _conv_transpose(imp: ImportContext, node: onnx.NodeProto) -> None:
    """ConvTranspose -> nn.conv_transpose2d, its pads resolved from output_shape / auto_pad as
    the specification and onnxruntime do: an odd total's extra row at the start (SAME_UPPER's at
    the end); an output_shape larger than the full scatter grows it at the end (the bias there);
    SAME_* never grow it (onnxruntime keeps the full scatter). Computed weights: nn.host."""
    a = _attrs(node)
    x = imp.value(node, node.input[0])
    w = imp.const(node, 1, "weight")
    if w.ndim != 4 or len(imp.shape(x)) != 4:
        raise Unmapped(f"only 2-D transposed convolution is supported (weight rank {w.ndim})")
    n, c, h, wd = imp.shape(x)
    groups = int(a.get("group", 1))
    if c % groups or w.shape[0] != c:
        raise imp.fail(node, f"weight of shape {list(w.shape)} does not fit {c} input channels in {groups} groups")
    m = w.shape[1] * groups
    strides = list(a.get("strides", [1, 1]))
    dil = list(a.get("dilations", [1, 1]))
    outpad = list(a.get("output_padding", [0, 0]))
    pads = list(a.get("pads", [0, 0, 0, 0]))
    if len(strides) != 2 or len(dil) != 2 or len(outpad) != 2 or len(pads) != 4:
        raise imp.fail(node, "strides, dilations, output_padding need 2 entries and pads 4")
    auto = a.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    wanted = list(a["output_shape"])[-2:] if "output_shape" in a else None
    same = wanted is None and auto in ("SAME_UPPER", "SAME_LOWER")
    if same:  # input x stride, or the full scatter where that is smaller (onnxruntime does not grow it)
        wanted = [h * strides[0], wd * strides[1]]
    if auto == "VALID":
        pads = [0, 0, 0, 0]
    if wanted is not None:
        for i, size in enumerate((h, wd)):
            total = nn.transpose_out(size, w.shape[2 + i], strides[i], 0, 0, dil[i], outpad[i]) - wanted[i]
            total = max(total, 0) if same else total
            half = int(total / 2)  # C's division, as the specification's formula and onnxruntime
            head = 0 if total < 0 else half if auto == "SAME_UPPER" else total - half  # grown: at the end
            pads[i], pads[i + 2] = head, total - head
    if len(node.input) > 2 and node.input[2]:
        imp.const(node, 2, "bias")
        bv = imp.const_value(node.input[2])
    else:
        bv = imp.new_const(f"{node.output[0]}_bias", np.zeros(m, np.float32))
    oh = nn.transpose_out(h, w.shape[2], strides[0], pads[0], pads[2], dil[0], outpad[0])
    ow = nn.transpose_out(wd, w.shape[3], strides[1], pads[1], pads[3], dil[1], outpad[1])
    if oh < 1 or ow < 1:
        raise imp.fail(node, f"pads {pads} leave no output")
    op = imp.emit(nn.ConvTranspose2dOp(x, imp.const_value(node.input[1]), bv, _tensor_type([n, m, oh, ow]),
                                       strides, pads, outpad, dil, groups))
    imp.set_output(node, op)


def _pads(imp: ImportContext, node: onnx.NodeProto, a: dict, size: Sequence[int], kernel: Sequence[int],
          strides: Sequence[int], dil: Sequence[int]) -> list[int]:
    auto = a.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("NOTSET", ""):
        pads = list(a.get("pads", [0, 0, 0, 0]))
        if len(pads) != 4:
            raise imp.fail(node, f"pads {pads} must have 4 entries")
        return pads
    if auto == "VALID":
        return [0, 0, 0, 0]
    out = []
    for i in range(2):
        o = -(-size[i] // strides[i])
        total = max(0, (o - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - size[i])
        lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
        out.append((lo, total - lo))
    return [out[0][0], out[1][0], out[0][1], out[1][1]]


def _pool(imp: ImportContext, node: onnx.NodeProto) -> None:
    a = _attrs(node)
    x = imp.value(node, node.input[0])
    if len(imp.shape(x)) != 4:
        raise Unmapped(f"input of rank {len(imp.shape(x))}")
    n, c, h, w = imp.shape(x)
    k = list(a["kernel_shape"])
    s = list(a.get("strides", [1, 1]))
    if any(d != 1 for d in a.get("dilations", [1, 1])):
        raise Unmapped("dilated pooling is not supported")
    pads = _pads(imp, node, a, (h, w), k, s, (1, 1))
    ceil = bool(a.get("ceil_mode", 0))
    oh = nn.window_out(h, k[0], s[0], pads[0], pads[2], 1, ceil)
    ow = nn.window_out(w, k[1], s[1], pads[1], pads[3], 1, ceil)
    ty = _tensor_type([n, c, oh, ow])
    if node.op_type == "MaxPool":
        if len(node.output) > 1 and node.output[1]:
            raise Unmapped("MaxPool indices output is not supported")
        op = nn.MaxPoolOp(x, ty, k, s, pads, ceil)
    else:
        extra = {"count_include_pad": nn.UnitAttr()} if a.get("count_include_pad", 0) else {}
        op = nn.AvgPoolOp(x, ty, k, s, pads, ceil, extra)
    imp.set_output(node, imp.emit(op))


def _global_avg(imp: ImportContext, node: onnx.NodeProto) -> None:
    x = imp.value(node, node.input[0])
    shape = imp.shape(x)
    if len(shape) != 4:
        raise Unmapped("only NCHW inputs are supported")
    imp.set_output(node, imp.emit(nn.GlobalAvgPoolOp(x, _tensor_type(shape[:2] + [1, 1]))))


def _reduce_mean(imp: ImportContext, node: onnx.NodeProto) -> None:
    """ReduceMean over H and W of an NCHW tensor is a global average pool: what PyTorch's
    `x.mean((2, 3))` and onnx-chainer's `F.average(x, axis=(2, 3))` export (SE blocks' squeeze)."""
    x = imp.value(node, node.input[0])
    shape = imp.shape(x)
    a = _attrs(node)
    if len(node.input) > 1 and node.input[1]:  # opset 18: axes as an input
        axes = [int(v) for v in imp.const(node, 1, "axes")]
    else:
        axes = [int(v) for v in a.get("axes", [])]
    if not axes and a.get("noop_with_empty_axes", 0):
        imp.set_output(node, imp.emit(nn.IdentityOp(x, "reducemean")))
        return
    if len(shape) != 4 or sorted(v % 4 for v in axes) != [2, 3]:
        raise Unmapped(f"a mean over axes {axes or 'all'} of a {len(shape)}-D tensor (only H and W of an "
                       "NCHW tensor map to a global average pool)")
    pooled = imp.emit(nn.GlobalAvgPoolOp(x, _tensor_type(shape[:2] + [1, 1])))
    if not a.get("keepdims", 1):
        pooled.attributes["onnx_node"] = nn.StringAttr(node.name)  # the pool is the node's work, named in reports
        pooled = imp.emit(nn.ReshapeOp(pooled.results[0], _tensor_type(shape[:2])))
    imp.set_output(node, pooled)


def _gemm(imp: ImportContext, node: onnx.NodeProto) -> None:
    a = _attrs(node)
    if a.get("transA", 0):
        raise Unmapped("transA=1 is not supported")
    x = imp.value(node, node.input[0])
    if len(imp.shape(x)) != 2:
        raise Unmapped(f"input must be 2-D, got {imp.shape(x)}")
    w = imp.const(node, 1, "weight B").astype(np.float32) * float(a.get("alpha", 1.0))
    w = w if a.get("transB", 0) else w.T
    m = w.shape[0]
    if len(node.input) > 2 and node.input[2]:
        c = imp.const(node, 2, "bias C").astype(np.float32) * float(a.get("beta", 1.0))
        if c.size not in (1, m):
            raise Unmapped(f"bias of shape {list(c.shape)} does not broadcast to {m} outputs")
        c = np.broadcast_to(c.reshape(-1), (m,)).copy()
    else:
        c = np.zeros(m, np.float32)
    _dense(imp, node, x, w, c)


def _matmul(imp: ImportContext, node: onnx.NodeProto) -> None:
    x = imp.value(node, node.input[0])
    shape = imp.shape(x)
    if len(shape) < 2:
        raise Unmapped(f"a 1-D left operand {shape} is not supported")
    w = imp.const(node, 1, "right operand").astype(np.float32)
    if w.ndim != 2:
        raise Unmapped("right operand must be 2-D")
    if len(shape) == 2:
        _dense(imp, node, x, w.T.copy(), np.zeros(w.shape[1], np.float32))
        return
    # [..., T, K] x [K, M]: one dense over the leading axes' rows (a transformer's or an OCR
    # head's projection over timesteps), between reshapes that keep the row-major bytes
    rows = imp.emit(nn.ReshapeOp(x, _tensor_type([int(np.prod(shape[:-1])), shape[-1]])))
    if w.shape[0] != shape[-1]:
        raise imp.fail(node, f"weight expects {w.shape[0]} features, input has {shape[-1]}")
    wv = imp.new_const(f"{node.output[0]}_w", w.T.copy())
    bv = imp.new_const(f"{node.output[0]}_b", np.zeros(w.shape[1], np.float32))
    dense = imp.emit(nn.DenseOp(rows.results[0], wv, bv, _tensor_type([int(np.prod(shape[:-1])), w.shape[1]])))
    if node.name:
        dense.attributes["onnx_node"] = nn.StringAttr(node.name)
        rows.attributes["onnx_node"] = nn.StringAttr(f"{node.name}.rows")
    imp.set_output(node, imp.emit(nn.ReshapeOp(dense.results[0], _tensor_type([*shape[:-1], w.shape[1]]))))
    if node.name:
        imp.values[node.output[0]].owner.attributes["onnx_node"] = nn.StringAttr(f"{node.name}.unrows")


def _dense(imp: ImportContext, node: onnx.NodeProto, x: SSAValue, w: np.ndarray, b: np.ndarray) -> None:
    n, k = imp.shape(x)
    if w.shape[1] != k:
        raise imp.fail(node, f"weight expects {w.shape[1]} features, input has {k}")
    wv = imp.new_const(f"{node.output[0]}_w", w)
    bv = imp.new_const(f"{node.output[0]}_b", b)
    imp.set_output(node, imp.emit(nn.DenseOp(x, wv, bv, _tensor_type([n, w.shape[0]]))))


def _binary(cls: type) -> Callable[[ImportContext, onnx.NodeProto], None]:
    def handler(imp: ImportContext, node: onnx.NodeProto) -> None:
        operands = [imp.value(node, name) for name in node.input if name]
        if not operands:
            raise imp.fail(node, "needs inputs")
        acc = operands[0]
        for i, rhs in enumerate(operands[1:]):
            shape = list(np.broadcast_shapes(tuple(imp.shape(acc)), tuple(imp.shape(rhs))))
            op = imp.emit(cls(acc, rhs, _tensor_type(shape)))
            acc = op.results[0]
        if len(operands) == 1:
            imp.values[node.output[0]] = acc
            return
        imp.set_output(node, op)

    return handler


def _unary(build: Callable[[ImportContext, onnx.NodeProto, SSAValue], Operation]) -> Callable[[ImportContext, onnx.NodeProto], None]:
    def handler(imp: ImportContext, node: onnx.NodeProto) -> None:
        imp.set_output(node, imp.emit(build(imp, node, imp.value(node, node.input[0]))))

    return handler


def _clip(imp: ImportContext, node: onnx.NodeProto, x: SSAValue) -> Operation:
    a = _attrs(node)
    lo, hi = a.get("min", -3.4e38), a.get("max", 3.4e38)
    if len(node.input) > 1 and node.input[1]:
        lo = float(imp.const(node, 1, "min"))
    if len(node.input) > 2 and node.input[2]:
        hi = float(imp.const(node, 2, "max"))
    return nn.ClipOp(x, props={"min": nn.FloatAttr(float(lo), 32), "max": nn.FloatAttr(float(hi), 32)})


def _batch_norm(imp: ImportContext, node: onnx.NodeProto) -> None:
    a = _attrs(node)
    x = imp.value(node, node.input[0])
    for i, what in ((1, "scale"), (2, "bias"), (3, "mean"), (4, "var")):
        imp.const(node, i, what)
    params = [imp.const_value(node.input[i]) for i in range(1, 5)]
    if any(o for o in node.output[1:]):
        raise Unmapped("training-mode outputs (running mean/var) are not supported")
    imp.set_output(node, imp.emit(nn.BatchNormOp(x, *params, float(a.get("epsilon", 1e-5)))))


def _concat(imp: ImportContext, node: onnx.NodeProto) -> None:
    xs = [imp.value(node, name) for name in node.input]
    rank = len(imp.shape(xs[0]))
    axis = int(_attrs(node)["axis"]) % rank
    shape = imp.shape(xs[0])
    shape[axis] = sum(imp.shape(v)[axis] for v in xs)
    imp.set_output(node, imp.emit(nn.ConcatOp(xs, axis, _tensor_type(shape))))


def _split(imp: ImportContext, node: onnx.NodeProto) -> None:
    """A Split on the channel axis of an NCHW tensor: one `nn.channel_slice` per output, which device
    layers read in place (and a device concat may place: snowir/segments.py `slot_of`)."""
    x = imp.value(node, node.input[0])
    shape = imp.shape(x)
    axis = int(_attrs(node).get("axis", 0)) % max(len(shape), 1)
    if len(shape) != 4 or axis != 1:
        raise Unmapped("a split off the channel axis")
    if len(node.input) > 1 and node.input[1]:
        sizes = [int(v) for v in imp.const(node, 1, "split")]
    elif "split" in _attrs(node):
        sizes = [int(v) for v in _attrs(node)["split"]]
    else:
        parts = len(node.output)
        sizes = [-(-shape[1] // parts)] * (parts - 1)
        sizes.append(shape[1] - sum(sizes))
    if len(sizes) != len(node.output) or sum(sizes) != shape[1] or min(sizes) < 1:
        raise Unmapped("split sizes that do not cover the channels")
    start = 0
    for i, size in enumerate(sizes):
        imp.set_output(node, imp.emit(nn.ChannelSliceOp(x, start, size, _tensor_type([shape[0], size, *shape[2:]]))), i)
        start += size


def _slice(imp: ImportContext, node: onnx.NodeProto) -> None:
    """A Slice that keeps a contiguous run of an NCHW tensor's channels and every pixel (torch's
    `chunk` / `x[:, a:b]`, as YOLOv8's C2f and ShuffleNetV2's channel split export): an
    `nn.channel_slice`, read in place like a Split's. One that keeps every channel and a window of
    the pixels, step 1 (waifu2x's `x[:, :, 4:-4, 4:-4]`): an `nn.crop`, which its device readers
    read in place too. Other slices (strided, of channels and pixels at once, of images) stay host
    Slices (fold-focus reads those)."""
    x = imp.value(node, node.input[0])
    shape = imp.shape(x)
    a = _attrs(node)
    if len(shape) != 4:
        raise Unmapped("a slice of a tensor that is not NCHW")
    if imp.opset < 10:
        starts, ends = [int(v) for v in a.get("starts", [])], [int(v) for v in a.get("ends", [])]
        axes, steps = [int(v) for v in a.get("axes", range(len(starts)))], [1] * len(starts)
    else:
        starts, ends = ([int(v) for v in np.asarray(imp.const(node, i, what)).reshape(-1)]
                        for i, what in ((1, "starts"), (2, "ends")))
        axes = ([int(v) for v in np.asarray(imp.const(node, 3, "axes")).reshape(-1)]
                if len(node.input) > 3 and node.input[3] else list(range(len(starts))))
        steps = ([int(v) for v in np.asarray(imp.const(node, 4, "steps")).reshape(-1)]
                 if len(node.input) > 4 and node.input[4] else [1] * len(starts))
    keep = {axis: (0, dim) for axis, dim in enumerate(shape)}
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis %= 4
        dim = shape[axis]
        if step != 1:
            raise Unmapped("a strided slice")
        start, end = (min(max(v + dim if v < 0 else v, 0), dim) for v in (start, end))
        keep[axis] = (start, end)
    if keep[0] != (0, shape[0]) or min(b - a for a, b in keep.values()) < 1:
        raise Unmapped("a slice of images, or an empty one")
    pixels = keep[2] != (0, shape[2]) or keep[3] != (0, shape[3])
    if pixels and keep[1] != (0, shape[1]):
        raise Unmapped("a slice of pixels and channels at once")
    if pixels:  # a window of every channel's pixels
        (y0, y1), (x0, x1) = keep[2], keep[3]
        imp.set_output(node, imp.emit(nn.CropOp(x, (y0, x0), _tensor_type([shape[0], shape[1], y1 - y0, x1 - x0]))))
        return
    start, end = keep[1]
    if end <= start:
        raise Unmapped("an empty channel slice")
    imp.set_output(node, imp.emit(nn.ChannelSliceOp(x, start, end - start,
                                                    _tensor_type([shape[0], end - start, *shape[2:]]))))


def _flatten(imp: ImportContext, node: onnx.NodeProto) -> None:
    x = imp.value(node, node.input[0])
    shape = imp.shape(x)
    axis = int(_attrs(node).get("axis", 1))
    axis = axis + len(shape) if axis < 0 else axis
    out = [int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))]
    imp.set_output(node, imp.emit(nn.FlattenOp(x, axis, _tensor_type(out))))


def _reshape(imp: ImportContext, node: onnx.NodeProto) -> None:
    x = imp.value(node, node.input[0])
    shape = imp.shape(x)
    if node.op_type == "Reshape":
        target = [int(v) for v in imp.const(node, 1, "shape")]
        target = [shape[i] if v == 0 and not _attrs(node).get("allowzero", 0) else v for i, v in enumerate(target)]
        if target.count(-1) > 1:
            raise Unmapped("more than one -1 in the target shape")
        if -1 in target:
            known = int(np.prod([v for v in target if v != -1]))
            target[target.index(-1)] = int(np.prod(shape)) // max(known, 1)
    else:  # Unsqueeze / Squeeze of a run-time tensor
        axes = [int(v) for v in (imp.const(node, 1, "axes") if len(node.input) > 1 else _attrs(node).get("axes", []))]
        target = _squeeze_shape(shape, axes, node.op_type == "Unsqueeze")
    if int(np.prod(target)) != int(np.prod(shape)):
        raise imp.fail(node, f"cannot reshape {shape} into {target}")
    imp.set_output(node, imp.emit(nn.ReshapeOp(x, _tensor_type(target))))


def _squeeze_shape(shape: list[int], axes: list[int], unsqueeze: bool) -> list[int]:
    if unsqueeze:
        out = list(shape)
        rank = len(shape) + len(axes)
        for ax in sorted(a % rank for a in axes):
            out.insert(ax, 1)
        return out
    rank = len(shape)
    drop = {a % rank for a in axes} if axes else {i for i, d in enumerate(shape) if d == 1}
    return [d for i, d in enumerate(shape) if i not in drop]


def _shape_of(imp: ImportContext, node: onnx.NodeProto) -> None:
    """Shape of a run-time tensor is static here: it becomes a constant for later folding."""
    shape = np.array(imp.shape(imp.value(node, node.input[0])), np.int64)
    a = _attrs(node)
    start, end = a.get("start", 0), a.get("end", None)
    imp.consts[node.output[0]] = shape[start:end]


def _transpose(imp: ImportContext, node: onnx.NodeProto) -> None:
    x = imp.value(node, node.input[0])
    shape = imp.shape(x)
    perm = list(_attrs(node).get("perm", list(reversed(range(len(shape))))))
    imp.set_output(node, imp.emit(nn.TransposeOp(x, perm, _tensor_type([shape[p] for p in perm]))))


def _passthrough(imp: ImportContext, node: onnx.NodeProto) -> None:
    # inference Dropout is the identity; a mask someone reads, or training mode, is the host's
    if any(o in imp.consumed for o in node.output[1:] if o):
        raise Unmapped("its mask output is used")
    if len(node.input) > 2 and node.input[2] and not (node.input[2] in imp.consts and not imp.consts[node.input[2]].any()):
        raise Unmapped("training mode")
    x = imp.value(node, node.input[0])
    op = imp.emit(nn.IdentityOp(x, node.op_type.lower()))
    imp.set_output(node, op)


def _softmax(imp: ImportContext, node: onnx.NodeProto, x: SSAValue) -> Operation:
    rank = len(imp.shape(x))
    axis = int(_attrs(node).get("axis", -1)) % rank
    if axis != rank - 1 and any(d != 1 for d in imp.shape(x)[axis + 1:]):
        raise Unmapped("softmax over a non-last axis is not supported")
    return nn.SoftmaxOp(x, props={"axis": nn.IntegerAttr(axis, nn.i64)})


def _lrn(imp: ImportContext, node: onnx.NodeProto, x: SSAValue) -> Operation:
    a = _attrs(node)
    return nn.LrnOp(x, props={"size": nn.IntegerAttr(int(a["size"]), nn.i64),
                              "alpha": nn.FloatAttr(float(a.get("alpha", 1e-4)), 32),
                              "beta": nn.FloatAttr(float(a.get("beta", 0.75)), 32),
                              "bias": nn.FloatAttr(float(a.get("bias", 1.0)), 32)})


def _hard_sigmoid(imp: ImportContext, node: onnx.NodeProto, x: SSAValue) -> Operation:
    a = _attrs(node)
    return nn.HardSigmoidOp(x, props={"alpha": nn.FloatAttr(float(a.get("alpha", 0.2)), 32),
                                      "beta": nn.FloatAttr(float(a.get("beta", 0.5)), 32)})


HANDLERS: dict[str, Callable[[ImportContext, onnx.NodeProto], None]] = {
    "Conv": _conv,
    "ConvTranspose": _conv_transpose,
    "Relu": _unary(lambda imp, n, x: nn.ReluOp(x)),
    "Clip": _unary(_clip),
    "MaxPool": _pool,
    "AveragePool": _pool,
    "GlobalAveragePool": _global_avg,
    "ReduceMean": _reduce_mean,
    "Gemm": _gemm,
    "MatMul": _matmul,
    "Add": _binary(nn.AddOp),
    "Sum": _binary(nn.AddOp),
    "Mul": _binary(nn.MulOp),
    "BatchNormalization": _batch_norm,
    "Concat": _concat,
    "Split": _split,
    "Slice": _slice,
    "Flatten": _flatten,
    "Reshape": _reshape,
    "Unsqueeze": _reshape,
    "Squeeze": _reshape,
    "Transpose": _transpose,
    "Shape": _shape_of,
    "Dropout": _passthrough,
    "Identity": _passthrough,
    "Softmax": _unary(_softmax),
    "LRN": _unary(_lrn),
    "HardSigmoid": _unary(_hard_sigmoid),
    "HardSwish": _unary(lambda imp, n, x: nn.HardSwishOp(x)),
}
