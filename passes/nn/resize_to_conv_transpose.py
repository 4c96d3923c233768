"""
resize-to-conv-transpose: a nearest-neighbour upsampling by integer factors (ONNX Resize mode
nearest, or Upsample, with scales [1, 1, sy, sx], as FPNs and YOLO's necks use: x2) as a
depthwise transposed conv whose sy x sx kernel is all ones, stride (sy, sx), no pads:

    resize_nearest(x, sy, sx)[n, c, sy·i + a, sx·j + b] = x[n, c, i, j]
      = conv_transpose(x, ones(C, 1, sy, sx), stride (sy, sx), groups C)

conv-transpose-to-conv (run right after) makes it sy·sx depthwise 1x1 "phase" convs of weight 1,
one per result phase, each writing its pixels of the result in place (the write-back's pixel
stride sx, row stride sy; no host interleave): the upsampled tensor is written once, by the
device, where the consumer (a conv, or a concat's channel slice) reads it. Weight 1 is exact in
the kernel's format and the write-back rounds x·1 back to x: the copy is bit for bit where the
result's format is the input's (Q8.8; `auto` gives them one format unless calibration says not).

Only what is exactly that copy is rewritten: the node's coordinate mapping is checked numerically
(the host's own implementation, snowir/frontend/onnx_host.py, run once on a tensor of pixel
indices: every exporter's combination of coordinate_transformation_mode and nearest_mode that
maps output pixel y to input pixel y div s qualifies). Everything else stays on the host with its
reason in `host_reason`: linear / cubic interpolation (several taps with weights that vary by
pixel), non-integer or down-scaling factors, a resized batch or channel axis, run-time scales.

The alternative, folding the upsampling into the conv that reads it (conv kxk over upsample x2
= four phase convs over x with their taps summed into ceil(k/2)-wide kernels, interleaved in
place), saves the upsampled tensor's write and read, but applies only where a conv is the sole
reader; YOLO's and FPNs' upsamplings feed a concat (docs/lowering.md, "Nearest upsampling").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from snowir.dialects import nn
from snowir.frontend.onnx_host import NodeRunner
from snowir.host_nodes import host_attr
from snowir.nn_util import const_of, drop_dead_constants, new_constant, shape_of


def nearest_factors(op: nn.HostOp) -> tuple[tuple[int, int] | None, str]:
    """The integer upsampling factors (sy, sx) of a Resize / Upsample node that is a nearest copy
    (each output pixel (y, x) the input's (y div sy, x div sx)), or None and why not."""
    kind = op.op_type.data
    mode = host_attr(op, "mode", "nearest")
    if mode != "nearest":
        return None, f"{kind} mode {mode}: interpolation weights that vary by pixel (not a copy), on the host"
    if len(op.inputs) < 1 or len(op.outputs) != 1 or len(shape_of(op.inputs[0])) != 4:
        return None, f"{kind} of a tensor that is not N x C x H x W, on the host"
    (n, c, h, w), (on, oc, oh, ow) = shape_of(op.inputs[0]), shape_of(op.outputs[0])
    if (on, oc) != (n, c) or oh % h or ow % w or (oh, ow) == (h, w) or min(h, w) < 1:
        return None, (f"{kind} {n}x{c}x{h}x{w} -> {on}x{oc}x{oh}x{ow}: not an integer upsampling of the pixels "
                      "(the device writes each input pixel s times), on the host")
    rest = [const_of(v) for v in op.inputs[1:]]
    if any(r is None for r in rest):
        return None, f"{kind} with run-time scales or sizes, on the host"
    sy, sx = oh // h, ow // w
    probe = np.broadcast_to(np.arange(h * w, dtype=np.float32).reshape(1, 1, h, w), (n, c, h, w)).copy()
    runner = NodeRunner.cached(kind, op.domain.data if op.domain else "", op.opset.value.data, op.attrs,
                               op.input_slots(), op.slot_count(), 1)
    try:
        (got,) = runner(probe, *rest)  # type: ignore[arg-type]
    except Exception as e:  # noqa: BLE001 - the node's own evaluation failing: leave it to the host
        return None, f"{kind}: {str(e).splitlines()[0] if str(e) else type(e).__name__}, on the host"
    if got.shape != probe.repeat(sy, 2).repeat(sx, 3).shape or not np.array_equal(got, probe.repeat(sy, 2).repeat(sx, 3)):
        return None, (f"{kind} nearest with its coordinate mapping ({host_attr(op, 'coordinate_transformation_mode', 'half_pixel')}, "
                      f"{host_attr(op, 'nearest_mode', 'round_prefer_floor')}): not pixel y from y div {sy}, on the host")
    return (sy, sx), ""


class NearestResizeToConvTranspose(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.HostOp, rewriter: PatternRewriter) -> None:
        if op.op_type.data not in ("Resize", "Upsample") or op.domain is not None or "host_reason" in op.attributes:
            return
        factors, why = nearest_factors(op)
        if factors is None:
            op.attributes["host_reason"] = StringAttr(why)
            return
        sy, sx = factors
        x = op.inputs[0]
        c = shape_of(x)[1]
        weight = new_constant(rewriter, op, np.ones((c, 1, sy, sx), np.float32), "w_upsample")
        bias = new_constant(rewriter, op, np.zeros(c, np.float32), "b_upsample")
        up = nn.ConvTranspose2dOp(x, weight, bias, op.outputs[0].type, strides=[sy, sx], groups=c)
        if "onnx_node" in op.attributes:
            up.attributes["onnx_node"] = op.attributes["onnx_node"]
        rewriter.replace(op, [up])


@dataclass(frozen=True)
class ResizeToConvTransposePass(ModulePass):
    name = "resize-to-conv-transpose"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(NearestResizeToConvTranspose()).rewrite_module(op)
        drop_dead_constants(op)
