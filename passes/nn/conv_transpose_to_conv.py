"""
conv-transpose-to-conv: a transposed convolution (`nn.conv_transpose2d`, ONNX ConvTranspose)
as an ordinary stride-1 `nn.conv2d` that computes every output phase, and an
`nn.depth_to_space` that interleaves the phases into pixels:

    conv_transpose(x, W, stride s, pads, output_padding, dilation d, groups g)
      -> depth_to_space(conv(x, W', stride 1, pads P), block s, offsets o, groups g)

Sub-pixel decomposition. Per axis, output row Y of the full scatter (before the crop `top`)
collects the products x[i]·w[k] with s·i + d·k = Y; for phase a = Y mod s only the taps with
d·k ≡ a (mod s) land, from input row i = Y div s − q, q = (d·k − a) / s. So phase a is a
stride-1 conv over x with the sub-kernel of those taps (tap k at index u = q_max − q, flipped),
and the s² phases (s_y·s_x in 2-D) are s² stride-1 convs over the same input. They become one
conv: its output channels are (group, phase, channel), each phase's kernels the sub-kernels
padded to the longest (zeros where a phase has no tap: k not a multiple of s, or a dilation
sharing a factor with s). Every output's sum is the same set of products as the transposed
conv's, so the fixed-point result (one rounding at the write-back) equals the golden model's
ConvTranspose bit for bit. The conv is an ordinary device conv: partition-host places and
prices it like any other.

Phases (`method=phases`): one conv per result phase r (the result's rows r, r + s, ...), with
the taps of the plan phase (r + offset) mod s only (`exact_window`), computing exactly that
phase's pixels of the result: the interleave (offsets 0, s² inputs) is then a placement, not a
copy. partition-host puts it on the device (snowir/tile/lowerable.py `interleave_refusal`) and
each phase conv's write-back writes its pixels into the result's one DRAM tensor (pixel stride
s·M words, row stride s·OW·M; `tile.dram_region pixels`). A crop that cuts the phase grid inside
the input (pads past the kernel's reach at the top or bottom) costs zero taps there: the conv
cannot start or stop its rows inside its input. A depthwise transposed conv is always split so
(each phase conv depthwise-to-grouped's, as any depthwise conv). Measured, 64 -> 64 4x4/2 p1 at
32x32: 2.806 ms end to end with the merged conv and the host interleave, 1.710 ms with the
phases in place (no host ms), bit-exact.

Zero insertion (`method=zero-insertion`, or where the cost model prefers it): the input spread
s apart with zeros between and padded by ((k − 1)·d + 1) − 1 − p (`nn.zero_insert`, on the host),
then a stride-1 conv with the flipped, per-group transposed kernel, its dilation spread into
zero taps (the device runs no dilated conv). Its conv does ((k − 1)·d + 1)² taps per output
where sub-pixel's does about ⌈((k − 1)·d + 1)/s⌉², but its layout moves the C input channels
where the interleave moves the M output channels: it wins where C is much smaller than M.
`plans` prices both (the conv at the share of MAC lanes its traces fill and of vMACs its kernel
tiles fill, broadcast or in COOP row groups (`Plan.vmac_share`), or at the DRAM rate,
or on the host where partition-host would put a grouped conv; plus the host's copy), and the
conv records the prices as `conv_transpose`. Crops past the kernel's span leave only sub-pixel.

The merged conv's interleave runs on the host under `method=sub-pixel` (its write-back writes a
pixel's s² phases together, which land in different pixels): the pass asks for `place = "host-read"`,
which partition-host grants where only the host reads the result (the model's outputs, host layers:
the host applies the permutation and crop as it copies the conv's grid back, each result word once,
the output region's `host_read`; no host layer), else the interleave is a host layer:
`nn.depth_to_space` is a permutation of its words, priced as the host's copy of 16-bit words;
`plans` prices the phases' in place (no host words) where their convs run COOP (INDP writes whole
pixels of its own only). Cu-stride (`method=cu-stride`): the same merged conv writes the result
in place itself, phase row a's sx·M kernels on CU a's vMACs and `vmov stride` one result row, so
a MAC's write-back puts each phase in its pixel (the output region's `phases`; docs/lowering.md,
"One merged conv, in place through the CU stride"). Where sx·M <= V, sy <= CUs, the grid is the
result's (no crop), one group and the conv plans COOP in one kernel tile (`cu_stride_refusal`,
plan/shapes.phases_refusal) it is priced as the merged conv's device time with no host words;
elsewhere `conv_transpose` names why not. PP-OCRv4 det's 24 -> 1 2x2/2 head: 0.307 host ms gone.
A ReLU or batch norm after the transposed conv is moved before the interleave (a per-channel
op commutes with a permutation of pixels), where fuse-relu and fold-batch-norm fold it into
the conv. Run first in nn-prepare.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr, i64
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (GreedyRewritePatternApplier, PatternRewriter, PatternRewriteWalker,
                                   RewritePattern, op_type_rewrite_pattern)
from xdsl.ir import SSAValue
from xdsl.rewriter import InsertPoint
from xdsl.utils.exceptions import PassFailedException

from snowir import writeback
from snowir.dialects import nn
from snowir.host_model import HOST
from snowir.hw import SnowflakeConfig
from snowir.plan.conv import choose_mode, plan_conv
from snowir.plan.shapes import ConvShape, LoweringError
from snowir.plan.layout import phases_refusal
from snowir.segments import HOST_READ
from snowir.nn_util import const_of, drop_dead_constants, new_constant, shape_of, tensor
from snowir.passes.nn.quantize import weight_frac


@dataclass(frozen=True)
class AxisPlan:
    """One spatial axis of the sub-pixel decomposition."""

    stride: int
    length: int
    """Sub-kernel taps (the conv's kernel size along the axis)."""
    pad_lo: int
    pad_hi: int
    """The conv's padding."""
    out: int
    """The conv's output size (phase grid rows; at least the rows the result reads)."""
    offset: int
    """The result's first row is phase `offset` of grid row 0 (depth_to_space offsets)."""
    taps: tuple[tuple[int, int, int], ...]
    """(kernel tap k, phase a, sub-kernel index u) for every tap."""
    result: int
    """The transposed conv's output size along the axis."""

    def rows_read(self, phase: int) -> int:
        """Grid rows of `phase` the interleave reads (at least 1)."""
        return max(1, (self.offset + self.result - 1 - phase) // self.stride + 1)


def axis_plan(size: int, k: int, s: int, d: int, top: int, out: int) -> AxisPlan:
    """The decomposition along one axis of input `size`, kernel `k`, stride `s`, dilation `d`,
    crop `top` (negative: grown) and result size `out`."""
    qmax = (k - 1) * d // s
    first = top // s  # the phase grid row of the result's first row (floor: also when grown)
    rows = (top + out - 1) // s - first + 1
    pad_lo = max(0, qmax - first)
    length = max(qmax, first) + 1  # first > qmax (crops past the kernel): leading zero taps
    pad_hi = max(0, rows - 1 + length - size - pad_lo)
    if pad_hi >= length:  # grown rows past the input's reach: leading zero taps keep every window
        grow = pad_hi - length + 1  # partly inside the input (the device runs pads < kernel)
        length, pad_lo = length + grow, pad_lo + grow
    taps = tuple((kk, kk * d % s, first - kk * d // s + pad_lo) for kk in range(k))
    return AxisPlan(s, length, pad_lo, pad_hi, size + pad_lo + pad_hi - length + 1, top - first * s, taps, out)


@dataclass(frozen=True)
class PhaseWindow:
    """One phase's own conv along an axis: its sub-kernel indices lo .. lo + length − 1 of the
    plan's (taps outside them none, taps inside without one zero) and its padding, so that it
    reads the plan's phase grid (`AxisPlan.out` rows) with pads < kernel."""

    lo: int
    length: int
    pad_lo: int
    pad_hi: int
    out: int
    """Grid rows the conv computes: from the grid's first, at least the rows its phase is read at."""


def phase_window(p: AxisPlan, size: int, phase: int) -> PhaseWindow:
    us = [u for _, a, u in p.taps if a == phase] or [p.pad_lo]  # no tap: one zero tap
    lo, hi = min(min(us), p.pad_lo), max(max(us), p.pad_lo)  # pads >= 0 and < the kernel at the top
    pad_lo = p.pad_lo - lo
    pad_hi = max(0, p.rows_read(phase) - 1 + hi - lo + 1 - size - pad_lo)
    if pad_hi > hi - lo:  # rows past the input's reach: leading zero taps (pads < kernel)
        grow = pad_hi - (hi - lo)
        lo, pad_lo = lo - grow, pad_lo + grow
    length = hi - lo + 1
    return PhaseWindow(lo, length, pad_lo, pad_hi, size + pad_lo + pad_hi - length + 1)


def exact_window(p: AxisPlan, size: int, r: int) -> tuple[int, PhaseWindow] | None:
    """The conv computing exactly the result's rows r, r + s, r + 2s, ... (result phase `r`): the
    plan's phase a = (r + offset) mod s from its grid row (r + offset) div s on, as many rows as
    the result has in phase r. Returns (a, window). Zero taps pad the kernel where the window
    would start before the input (leading), read past its end or compute rows past the result's
    (trailing), so that pads stay < kernel. Each result pixel then comes from one conv output,
    which the write-back can put in place (output pixel stride s, row stride s). None when the
    result has no row in phase r (a result shorter than the stride)."""
    s = p.stride
    if p.result <= r:
        return None
    n = (p.result - r + s - 1) // s
    a, i0 = (r + p.offset) % s, (r + p.offset) // s
    us = [u for _, ph, u in p.taps if ph == a] or [p.pad_lo]  # no tap: one zero tap
    lo, hi = min(us), max(us)
    pad = p.pad_lo - i0 - lo  # output t, tap v reads x[t - pad + v]
    if pad < 0:  # starts inside the input: leading zero taps
        lo, pad = lo + pad, 0
    hi = max(hi, lo + pad)  # pads < kernel
    pad_hi = n + (hi - lo + 1) - 1 - pad - size
    if pad_hi < 0:  # would compute rows past the result's: trailing zero taps
        hi, pad_hi = hi - pad_hi, 0
    if pad_hi > hi - lo:  # rows past the input's reach: leading zero taps (pads < kernel)
        grow = pad_hi - (hi - lo)
        lo, pad = lo - grow, pad + grow
    length = hi - lo + 1
    assert size + pad + pad_hi - length + 1 == n
    return a, PhaseWindow(lo, length, pad, pad_hi, n)


def _window(w: np.ndarray, axis: int, lo: int, length: int) -> np.ndarray:
    """w's indices lo .. lo + length − 1 along `axis`, zeros outside it."""
    shape = list(w.shape)
    shape[axis] = length
    out = np.zeros(shape, w.dtype)
    a, b = max(lo, 0), min(lo + length, w.shape[axis])
    if a < b:
        src = [slice(None)] * w.ndim
        dst = [slice(None)] * w.ndim
        src[axis], dst[axis] = slice(a, b), slice(a - lo, b - lo)
        out[tuple(dst)] = w[tuple(src)]
    return out


@dataclass(frozen=True)
class Plan:
    """A way to run a transposed conv, priced: the conv it runs (MACs, zero taps included; channels
    per group, kernel width, groups, kernels per group), the 16-bit words that conv reads and writes
    in DRAM, and the words the host's layout op moves (the interleave's or the zero insertion's,
    read and written; 0 when there is none)."""

    kind: str
    macs: int
    channels: int
    kernel_width: int
    groups: int
    kernels: int
    dram_words: int
    host_words: int

    def conv_on_host(self) -> bool:
        """partition-host's rule: a grouped conv (not depthwise) with groups of kernels that are not
        whole 16-lane groups runs on the host."""
        depthwise = self.channels == 1 and self.kernels == 1
        return self.groups > 1 and not depthwise and self.kernels % 16 != 0

    def ms(self, hw: SnowflakeConfig) -> float:
        """[P] The conv at the share of the MAC lanes its traces fill (a kernel row of `channels`
        x `kernel_width` words; a depthwise conv one lane in 16, as depthwise-to-grouped runs it),
        or at the DRAM rate, whichever is slower (or on the host, where partition-host puts it);
        plus the host's copy at its streaming rate (snowir/host_model.py)."""
        host = self.host_words * hw.element_bytes / (HOST.gbps * 1e6)
        if self.conv_on_host():
            return host + 2 * self.macs / (HOST.ops_per_cycle * HOST.clock_mhz * 1e3)
        trace = self.kernel_width * self.channels
        share = 1 / hw.lanes if self.groups > 1 and self.channels == 1 else trace / (hw.lanes * -(-trace // hw.lanes))
        device = max(self.macs / (hw.macs * share * self.vmac_share(hw)),
                     self.dram_words * hw.element_bytes / hw.dram_bytes_per_cycle)
        return hw.cycles_to_ms(device) + host

    def vmac_share(self, hw: SnowflakeConfig) -> float:
        """[P] The share of the vMACs the conv's kernel tiles keep busy: broadcast COOP gives the
        machine's 16 vMACs 16 kernels a tile (K = 3: 3 of 16); COOP row groups (`coop_rows`,
        plan/coop_rows.py) a CU's V kernels a tile on every CU (K = 3: 3 of 4), where it applies
        (ungrouped; not the merged conv in place, whose CU stride is its phases'). Grouped convs:
        1, as before (their tiles are their groups')."""
        if self.groups > 1:
            return 1.0
        k = self.kernels
        fill = lambda per_tile: k / (per_tile * -(-k // per_tile))  # noqa: E731
        return fill(hw.vmacs) if self.kind == "cu-stride" else max(fill(hw.vmacs), fill(hw.vmacs_per_cu))


@dataclass(frozen=True)
class ZeroPlan:
    """Zero insertion: the input spread by the strides and padded by `pads`, then a stride-1 conv
    with the flipped kernel (its dilation as zero taps)."""

    pads: tuple[int, int, int, int]
    kernel: tuple[int, int]


def zero_plan(op: nn.ConvTranspose2dOp) -> ZeroPlan | None:
    """None when the crops reach past the kernel's span (the layout would need negative pads)."""
    _, _, kh, kw = shape_of(op.weight)
    dy, dx = nn.int_values(op.dilations)
    ey, ex = (kh - 1) * dy + 1, (kw - 1) * dx + 1
    top, left, bottom, right = nn.int_values(op.pads)
    oy, ox = nn.int_values(op.output_padding)
    pads = (ey - 1 - top, ex - 1 - left, ey - 1 - bottom + oy, ex - 1 - right + ox)
    return ZeroPlan(pads, (ey, ex)) if min(pads) >= 0 else None


def axis_plans(op: nn.ConvTranspose2dOp) -> tuple[AxisPlan, AxisPlan]:
    """The transposed conv's row and column axis plans (phases, taps, crop)."""
    _, _, h, w = shape_of(op.input)
    _, _, kh, kw = shape_of(op.weight)
    _, _, oh, ow = shape_of(op.output)
    (sy, sx), (dy, dx) = nn.int_values(op.strides), nn.int_values(op.dilations)
    pads = nn.int_values(op.pads)
    return axis_plan(h, kh, sy, dy, pads[0], oh), axis_plan(w, kw, sx, dx, pads[1], ow)


def plans(op: nn.ConvTranspose2dOp, hw: SnowflakeConfig) -> list[Plan]:
    """Sub-pixel and (where the crops allow it) zero insertion, cheapest first."""
    n, c, h, w = shape_of(op.input)
    _, mg, _, _ = shape_of(op.weight)
    _, m, oh, ow = shape_of(op.output)
    g = op.groups.value.data
    sy, sx = nn.int_values(op.strides)
    ay, ax = axis_plans(op)
    grid = n * g * sy * sx * mg * ay.out * ax.out
    interleave = 0 if (sy, sx) == (1, 1) and (ay.out, ax.out) == (oh, ow) else grid + n * m * oh * ow
    if g == 1 and host_reads_result(op.output):  # the host applies it as it copies the result back (host-read)
        interleave = 0
    depthwise = g > 1 and c == g and mg == 1  # one depthwise conv per phase
    found = [] if depthwise else [Plan("sub-pixel", grid * (c // g) * ay.length * ax.length, c // g, ax.length, g,
                                       sy * sx * mg, n * c * h * w + grid, interleave)]
    exact = in_place_windows(ay, ax, h, w)
    if exact:  # one conv per result phase, written in place (no host copy; partition-host may still refuse it)
        per_tap = sum(y.out * y.length for (_, y), _ in exact[::sx]) * sum(x.out * x.length for _, (_, x) in exact[:sx])
        phase_grid = n * m * oh * ow
        (_, wy), (_, wx) = exact[0]
        shape = ConvShape(c // g, h, w, g * mg, wy.length, wx.length, 1, 1, wy.pad_lo, wx.pad_lo, wy.pad_hi, wx.pad_hi,
                          False, 0, g)
        in_place = depthwise or choose_mode(shape, hw, False) == "COOP"  # INDP writes whole pixels of its own only
        found.append(Plan("phases", n * g * mg * (c // g) * per_tap, c // g, max(x.length for _, (_, x) in exact), g,
                          mg, n * c * h * w * sy * sx + phase_grid, 0 if in_place else 2 * phase_grid))
    elif g == 1 or depthwise:  # one conv per phase, each with its own taps only
        wy = [phase_window(ay, h, a) for a in range(sy)]
        wx = [phase_window(ax, w, b) for b in range(sx)]
        per_tap = sum(y.out * y.length for y in wy) * sum(x.out * x.length for x in wx)
        phase_grid = n * g * mg * sum(y.out for y in wy) * sum(x.out for x in wx)
        found.append(Plan("phases", n * g * mg * (c // g) * per_tap, c // g, max(x.length for x in wx), g, mg,
                          n * c * h * w * sy * sx + phase_grid, phase_grid + n * m * oh * ow))
    if found and found[0].kind == "sub-pixel" and cu_stride_refusal(op, hw) is None:  # the merged conv, in place
        found.append(dataclasses.replace(found[0], kind="cu-stride", host_words=0))
    z = zero_plan(op)
    if z is not None:
        spread = n * c * (oh + z.kernel[0] - 1) * (ow + z.kernel[1] - 1)
        found.append(Plan("zero-insertion", n * m * oh * ow * (c // g) * z.kernel[0] * z.kernel[1], c // g,
                          z.kernel[1], g, mg, spread + n * m * oh * ow, n * c * h * w + spread))
    order = ("cu-stride", "sub-pixel", "phases", "zero-insertion")  # ties: fewer layers (and host words) first
    return sorted(found, key=lambda p: (round(p.ms(hw), 9), order.index(p.kind)))


def host_reads_result(value: SSAValue) -> bool:
    """Whether only the host reads the transposed conv's result `value` whatever the later passes
    do: the model's outputs, through per-channel ops read by nothing else (a ReLU or batch norm this
    pass moves before the interleave; an activation a write-back unit may fold into the conv, or
    the host runs). Then the merged conv's interleave costs no host words: the host applies it as it
    copies the result back (partition-host's `host-read`, which checks again once the graph is
    placed). Ops that look like the host's now (an Add, a Mul) may become device convs later
    (fuse-residual-add, se-gate: CenterFace's upsampling adds): not counted."""
    if not value.uses:
        return False
    for use in value.uses:
        user = use.operation
        if isinstance(user, func.ReturnOp):
            continue
        kind = user.op_type.data if isinstance(user, nn.HostOp) else user.name
        per_channel = isinstance(user, nn.ReluOp | nn.BatchNormOp) or writeback.absorbing(kind) is not None
        if not (per_channel and value.has_one_use() and host_reads_result(user.results[0])):
            return False
    return True


def merged_shape(op: nn.ConvTranspose2dOp) -> tuple[ConvShape, AxisPlan, AxisPlan]:
    """The sub-pixel method's one merged conv (all phases as output channels) as the planner sees
    it, with its two axis plans."""
    _, c, h, w = shape_of(op.input)
    _, mg, _, _ = shape_of(op.weight)
    g = op.groups.value.data
    sy, sx = nn.int_values(op.strides)
    ay, ax = axis_plans(op)
    shape = ConvShape(c // g, h, w, g * sy * sx * mg, ay.length, ax.length, 1, 1, ay.pad_lo, ax.pad_lo, ay.pad_hi,
                      ax.pad_hi, False, 0, g)
    return shape, ay, ax


def cu_stride_refusal(op: nn.ConvTranspose2dOp, hw: SnowflakeConfig) -> str | None:
    """Why the merged conv cannot write its interleave's result in place (method cu-stride): its
    grid must be the result's (no crop), one group, and the planned conv must spread each phase row
    over one CU's vMACs (snowir/plan/shapes.py `phases_refusal`, what tile-to-asm checks)."""
    shape, ay, ax = merged_shape(op)
    _, _, oh, ow = shape_of(op.output)
    if (ay.stride, ax.stride) == (1, 1):
        return "stride 1: no interleave"
    if op.groups.value.data != 1:
        return f"{op.groups.value.data} groups"
    if (ay.offset, ax.offset) != (0, 0):
        return "phases computed past the result (cropped)"
    try:
        return phases_refusal(plan_conv(shape, hw, 0, 0, 0), (ay.stride, ax.stride, oh, ow), hw)
    except LoweringError as e:
        return str(e)


def zero_insertion_weights(w: np.ndarray, groups: int, dil: Sequence[int]) -> np.ndarray:
    """(C, Mg, kh, kw) ConvTranspose weights -> (g·Mg, Cg, ey, ex) conv weights: per group
    transposed, dilation spread into zeros, flipped."""
    c, mg, kh, kw = w.shape
    cg = c // groups
    ey, ex = (kh - 1) * dil[0] + 1, (kw - 1) * dil[1] + 1
    spread = np.zeros((c, mg, ey, ex), np.float32)
    spread[:, :, ::dil[0], ::dil[1]] = w
    per_group = spread.reshape(groups, cg, mg, ey, ex).transpose(0, 2, 1, 3, 4)
    return np.ascontiguousarray(per_group[:, :, :, ::-1, ::-1].reshape(groups * mg, cg, ey, ex))


def sub_pixel_weights(w: np.ndarray, groups: int, ay: AxisPlan, ax: AxisPlan) -> np.ndarray:
    """(C, Mg, kh, kw) ConvTranspose weights -> (g·sy·sx·Mg, Cg, Ly, Lx) conv weights, output
    channel g·sy·sx·Mg + (a·sx + b)·Mg + m."""
    c, mg, _, _ = w.shape
    cg = c // groups
    wg = w.reshape(groups, cg, mg, *w.shape[2:])
    out = np.zeros((groups, ay.stride, ax.stride, mg, cg, ay.length, ax.length), np.float32)
    for ky, a, uy in ay.taps:
        for kx, b, ux in ax.taps:
            out[:, a, b, :, :, uy, ux] = wg[:, :, :, ky, kx].transpose(0, 2, 1)
    return out.reshape(groups * ay.stride * ax.stride * mg, cg, ay.length, ax.length)


def _phase_channels(values: np.ndarray, groups: int, phases: int) -> np.ndarray:
    """A per-channel vector of the result (g·Mg) as one per conv channel ((group, phase, channel))."""
    v = values.reshape(groups, 1, -1)
    return np.broadcast_to(v, (groups, phases, v.shape[2])).reshape(-1).copy()


def in_place_windows(ay: AxisPlan, ax: AxisPlan, h: int, w: int) \
        -> list[tuple[tuple[int, PhaseWindow], tuple[int, PhaseWindow]]] | None:
    """Per result phase (ry, rx), row-major, the plan phases and windows of the conv computing
    exactly its pixels (`exact_window`); None when some result phase has no pixel."""
    ys = [exact_window(ay, h, r) for r in range(ay.stride)]
    xs = [exact_window(ax, w, r) for r in range(ax.stride)]
    if any(v is None for v in ys + xs):
        return None
    return [(y, x) for y in ys for x in xs]  # type: ignore[misc]


class ConvTransposeToConv(RewritePattern):
    def __init__(self, hw: SnowflakeConfig, method: str):
        super().__init__()
        self.hw, self.method = hw, method

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.ConvTranspose2dOp, rewriter: PatternRewriter) -> None:
        w, b = const_of(op.weight), const_of(op.bias)
        if w is None or b is None:
            return
        ranked = plans(op, self.hw)
        if self.method != "auto":  # the user's choice first, where it applies
            ranked.sort(key=lambda p: p.kind != self.method)
        what = ", ".join(f"{p.kind} {p.ms(self.hw):.4f} ms ({p.macs} MACs, host {p.host_words} words)" for p in ranked)
        refused = cu_stride_refusal(op, self.hw) if any(p.kind == "sub-pixel" for p in ranked) else None
        if refused is not None:
            what += f"; cu-stride: {refused}"
        if ranked[0].kind == "zero-insertion":
            self.zero_insertion(op, w, b, rewriter, what)
        else:
            self.sub_pixel(op, w, b, rewriter, what, ranked[0].kind)

    @staticmethod
    def zero_insertion(op: nn.ConvTranspose2dOp, w: np.ndarray, b: np.ndarray, rewriter: PatternRewriter,
                       what: str) -> None:
        z = zero_plan(op)
        assert z is not None
        n, c, h, wd = shape_of(op.input)
        (sy, sx), g = nn.int_values(op.strides), op.groups.value.data
        spread = nn.ZeroInsertOp(op.input, [sy, sx], z.pads,
                                 tensor([n, c, z.pads[0] + sy * (h - 1) + 1 + z.pads[2],
                                         z.pads[1] + sx * (wd - 1) + 1 + z.pads[3]], op.input))
        if "onnx_node" in op.attributes:
            spread.attributes["onnx_node"] = StringAttr(f"{op.attributes['onnx_node'].data}.zero_insert")
        rewriter.insert(spread, InsertPoint.before(op))
        wv = new_constant(rewriter, op, zero_insertion_weights(w, g, nn.int_values(op.dilations)), "w_zero_insert")
        conv = nn.Conv2dOp(spread.output, wv, op.bias, op.output.type, groups=g)
        conv.attributes.update(op.attributes)
        conv.attributes["conv_transpose"] = StringAttr(what)
        rewriter.replace(op, [conv])

    @staticmethod
    def sub_pixel(op: nn.ConvTranspose2dOp, w: np.ndarray, b: np.ndarray, rewriter: PatternRewriter,
                  what: str, kind: str) -> None:
        """`kind`: phases (one conv per phase), sub-pixel (one merged conv, the host interleaves) or
        cu-stride (one merged conv writing the result in place: partition-host places the interleave)."""
        per_phase = kind == "phases"
        n, c, h, wd = shape_of(op.input)
        _, _, oh, ow = shape_of(op.output)
        g = op.groups.value.data
        sy, sx = nn.int_values(op.strides)
        ay, ax = axis_plans(op)
        weights, phases = sub_pixel_weights(w, g, ay, ax), sy * sx
        mg = w.shape[1]
        exact = in_place_windows(ay, ax, h, wd)
        offsets = [ay.offset, ax.offset]
        if per_phase or (g > 1 and c == g and mg == 1):  # one conv per phase (a depthwise one: depthwise-to-grouped's)
            by_phase = weights.reshape(g, phases, mg, *weights.shape[1:])
            convs = []
            if exact:  # result phase by result phase: each pixel one conv's (in place: offsets 0)
                windows, offsets = exact, [0, 0]
            else:  # the plan's phases over its grid, cropped by the interleave
                windows = [((a, phase_window(ay, h, a)), (bx, phase_window(ax, wd, bx)))
                           for a in range(sy) for bx in range(sx)]
            for (a, wy), (bx, wx) in windows:
                kernel = by_phase[:, a * sx + bx].reshape(g * mg, *weights.shape[1:])
                kernel = _window(_window(kernel, 2, wy.lo, wy.length), 3, wx.lo, wx.length)
                convs.append(nn.Conv2dOp(op.input, new_constant(rewriter, op, kernel, "w_phase"),
                                         new_constant(rewriter, op, b, "b_phase"),
                                         tensor([n, g * mg, wy.out, wx.out], op.output),
                                         pads=[wy.pad_lo, wx.pad_lo, wy.pad_hi, wx.pad_hi], groups=g))
            layout = 1
        else:
            convs = [nn.Conv2dOp(op.input, new_constant(rewriter, op, weights, "w_subpixel"),
                                 new_constant(rewriter, op, _phase_channels(b, g, phases), "b_subpixel"),
                                 tensor([n, g * phases * mg, ay.out, ax.out], op.output),
                                 pads=[ay.pad_lo, ax.pad_lo, ay.pad_hi, ax.pad_hi], groups=g)]
            layout = g
        for i, conv in enumerate(convs):
            conv.attributes.update(op.attributes)
            conv.attributes["conv_transpose"] = StringAttr(what)
            if len(convs) > 1:  # the phases' weights in the kernel's one format: the golden ConvTranspose's bits
                conv.attributes["w_frac_max"] = IntegerAttr(weight_frac(w), i64)
            if len(convs) > 1 and "onnx_node" in op.attributes:
                conv.attributes["onnx_node"] = StringAttr(f"{op.attributes['onnx_node'].data}.phase{i}")
        if phases == 1 and (ay.out, ax.out) == (oh, ow):
            rewriter.replace(op, convs)
            return
        interleave = nn.DepthToSpaceOp([conv.output for conv in convs], [sy, sx], offsets, layout,
                                       op.output.type)
        if "onnx_node" in op.attributes:
            interleave.attributes["onnx_node"] = StringAttr(f"{op.attributes['onnx_node'].data}.interleave")
        if kind == "sub-pixel" and phases > 1:  # the host interleaves (cu-stride: partition-host places it in place):
            # as it reads the grid back where only the host reads the result (partition-host: host-read), else a layer
            interleave.attributes["place"] = StringAttr(HOST_READ)
            interleave.attributes["host_reason"] = StringAttr(
                f"interleave of one merged conv's phases (method sub-pixel): its write-back writes a pixel's {sy}x{sx} "
                "phases together, which land in different pixels; the host interleaves")
        rewriter.replace(op, [*convs, interleave])


class HoistThroughInterleave(RewritePattern):
    """relu(depth_to_space(y)) -> depth_to_space(relu(y)); batch_norm likewise, its constants one
    per conv channel: per-channel ops commute with the interleave, and fold into the conv there."""

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, nn.ReluOp | nn.BatchNormOp):
            return
        d2s = op.input.owner
        if not isinstance(d2s, nn.DepthToSpaceOp) or not d2s.output.has_one_use():
            return
        by, bx = nn.int_values(d2s.block)
        g = d2s.groups.value.data
        params = []
        if isinstance(op, nn.BatchNormOp):
            params = [const_of(v) for v in (op.scale, op.bias, op.mean, op.var)]
            if any(p is None for p in params):
                return
            if len(d2s.inputs) == 1:  # one value per (group, phase, channel)
                params = [_phase_channels(p, g, by * bx) for p in params]
        moved = []
        for y in d2s.inputs:
            if isinstance(op, nn.ReluOp):
                inner = nn.ReluOp(y)
            else:
                inner = nn.BatchNormOp(y, *(new_constant(rewriter, d2s, p, "bn_phases") for p in params),
                                       op.epsilon.value.data)
            inner.attributes.update(op.attributes)
            rewriter.insert(inner, InsertPoint.before(d2s))
            moved.append(inner.output)
        new = nn.DepthToSpaceOp(moved, [by, bx], nn.int_values(d2s.offsets), g, op.output.type)
        new.attributes.update(d2s.attributes)
        rewriter.replace(op, [new])
        rewriter.erase(d2s)


@dataclass(frozen=True)
class ConvTransposeToConvPass(ModulePass):
    name = "conv-transpose-to-conv"
    hw: str = ""
    """A hardware description JSON for the cost model (peak MACs, DRAM rate); default: the ZC706 build."""
    method: str = "auto"
    """auto: the cheapest by `plans`; cu-stride, sub-pixel, phases or zero-insertion: that one where it
    applies (cu-stride: `cu_stride_refusal`; phases: ungrouped or depthwise; zero insertion: crops
    within the kernel's span)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.method not in ("auto", "cu-stride", "sub-pixel", "phases", "zero-insertion"):
            raise PassFailedException(f"conv-transpose-to-conv: method '{self.method}' is not auto, cu-stride, "
                                      f"sub-pixel, phases or zero-insertion")
        hw = SnowflakeConfig.load(self.hw or None)
        PatternRewriteWalker(GreedyRewritePatternApplier([ConvTransposeToConv(hw, self.method),
                                                          HoistThroughInterleave()])).rewrite_module(op)
        drop_dead_constants(op)
