"""
sequence-gemm: a dense layer over a leading dimension that is not the image batch (an OCR
head's Gemm / MatMul over T timesteps, `dense(x: [T, K])` after a Reshape / Transpose) becomes
one 1x1 conv over T pixels:

    dense(x: TxK) -> reshape(transpose(conv(transpose(reshape(x to 1x1xTxK)) to 1xKx1xT)) to TxM)

(or the column form, 1xKxTx1, where the planner's estimate is lower).

Why: fc-to-conv gives a 2-D dense a conv over N = T images of one pixel, and a batch of N
images runs as N programs: the layer's weights stream from DRAM T times (C17 §2 reuses a
kernel over a whole maps tile; here the tile is one pixel). Over T pixels the weights stream
once: common.onnx's 32 x 1024 -> 8210 head moves 548 MB in 32 programs, 17 MB in one.

The reshapes and transposes move no byte: a [T, K] tensor row-major and a [1, K, 1, T] one
channel-innermost are the same bytes (snowir/segments.py `transpose_is_view`), so the device
reads the dense's input in place and the host sees them as views. The decision is in the IR:
the conv's N = 1 and its H x W = T (with `from_dense`: reports call it a dense layer), and
`sequence_cost` gives the planner's estimates of the row and column forms and of T images.

Only for a model whose image batch is 1 (every argument of @main has N = 1): a conv over the
pixels of a batch would mix images that run in DRAMs of their own. A dense the user placed
(`place`) is left alone, and so is one whose per-image form the planner estimates cheaper.
`layout=row|column` forces a form, `layout=off` leaves every dense to fc-to-conv.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr, UnitAttr
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern
from xdsl.utils.exceptions import PassFailedException

from snowir.dialects import nn
from snowir.hw import SnowflakeConfig
from snowir.nn_util import const_of, new_constant, shape_of, tensor
from snowir.plan.shapes import ConvShape, LoweringError
from snowir.plan.conv import choose_mode, plan_conv
from snowir.plan.layout import conv_layout

LAYOUTS = ("auto", "row", "column", "off")
_PIXELS = {"row": lambda t: (1, t), "column": lambda t: (t, 1)}
"""H x W of the conv over T pixels: one row of T pixels, or a column of T one-pixel rows."""
_TO_CONV = {"row": [0, 3, 1, 2], "column": [0, 3, 2, 1]}
"""perm of 1x1xTxK -> 1xKx1xT (row) / 1xKxTx1 (column)"""
_FROM_CONV = {"row": [0, 2, 3, 1], "column": [0, 3, 2, 1]}
"""perm of the conv's 1xMx1xT / 1xMxTx1 back to 1x1xTxM"""


def estimated_ms(c: int, h: int, w: int, k: int, images: int, hw: SnowflakeConfig) -> float | None:
    """The planner's estimate for a 1x1 conv over `images` images of h x w pixels (None: refused)."""
    s = ConvShape(c, h, w, k, 1, 1, 1, 1, 0, 0, 0, 0, False, 0)
    try:
        mode = choose_mode(s, hw, False)
        lay = conv_layout(s, False, mode, hw)
        plan = plan_conv(s, hw, 0, lay.w_addr, lay.out_addr, None, None, mode)
    except LoweringError:
        return None
    return images * hw.cycles_to_ms(plan.estimated_cycles(hw))


def choose_layout(t: int, k: int, m: int, hw: SnowflakeConfig, layout: str) -> tuple[str | None, str]:
    """The form of a [T, K] x [K, M] dense ("row", "column", or None for fc-to-conv's T images)
    and the planner's estimates it was chosen by."""
    costs = {form: estimated_ms(k, *_PIXELS[form](t), m, 1, hw) for form in _PIXELS}
    costs["images"] = estimated_ms(k, 1, 1, m, t, hw)
    known = {form: ms for form, ms in costs.items() if ms is not None}
    said = ", ".join(f"{form} {ms:.3f} ms" for form, ms in known.items())
    if layout in _PIXELS:
        return layout, f"{layout} (forced); {said}"
    best = min(known, key=known.__getitem__, default="images")
    return (None if best == "images" else best), said


class SequenceGemm(RewritePattern):
    def __init__(self, hw: SnowflakeConfig, layout: str):
        self.hw = hw
        self.layout = layout

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.DenseOp, rewriter: PatternRewriter) -> None:
        w = const_of(op.weight)
        t, k = shape_of(op.input)
        if w is None or t == 1 or "place" in op.attributes:
            return
        m = w.shape[0]
        form, said = choose_layout(t, k, m, self.hw, self.layout)
        if form is None:
            return
        flat = nn.ReshapeOp(op.input, tensor([1, 1, t, k], op.input))
        h, wd = _PIXELS[form](t)
        x = nn.TransposeOp(flat.output, _TO_CONV[form], tensor([1, k, h, wd], op.input))
        w4 = new_constant(rewriter, op, w.reshape(m, k, 1, 1), "seq_w")
        conv = nn.Conv2dOp(x.output, w4, op.bias, tensor([1, m, h, wd], op.output), relu=op.relu is not None)
        conv.attributes.update(op.attributes)
        conv.attributes["from_dense"] = UnitAttr()  # reports name it a dense layer
        conv.attributes["sequence_cost"] = StringAttr(said)  # the estimates the form was chosen by
        back = nn.TransposeOp(conv.output, _FROM_CONV[form], tensor([1, 1, t, m], op.output))
        out = nn.ReshapeOp(back.output, op.output.type)
        node = op.attributes.get("onnx_node")
        if isinstance(node, StringAttr):  # the views report under the dense's node
            for view, part in ((flat, "flat"), (x, "to_pixels"), (back, "from_pixels"), (out, "unflat")):
                view.attributes["onnx_node"] = StringAttr(f"{node.data}.{part}")
        rewriter.replace(op, [flat, x, conv, back, out])


def image_batch(module: ModuleOp) -> int | None:
    """The image batch of @main's arguments (their common leading dimension), None when they differ."""
    sizes = {arg.type.get_shape()[0] for f in module.walk() if isinstance(f, func.FuncOp)
             for arg in f.body.block.args if hasattr(arg.type, "get_shape") and arg.type.get_shape()}
    return sizes.pop() if len(sizes) == 1 else None


@dataclass(frozen=True)
class SequenceGemmPass(ModulePass):
    name = "sequence-gemm"
    layout: str = "auto"
    """auto: the planner's cheapest of row, column and T one-pixel images; row / column: that form;
    off: leave every dense to fc-to-conv."""
    hw: str = ""
    """A hardware description JSON (SnowflakeConfig fields); default: the ZC706 build."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.layout not in LAYOUTS:
            raise PassFailedException(f"sequence-gemm: layout must be one of {', '.join(LAYOUTS)}, not '{self.layout}'")
        if self.layout == "off" or image_batch(op) != 1:
            return
        hw = SnowflakeConfig.load(self.hw or None)
        PatternRewriteWalker(SequenceGemm(hw, self.layout), apply_recursively=False).rewrite_module(op)
