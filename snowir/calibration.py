"""
Per-tensor fixed-point formats from calibration (`quantize{format=auto}`, docs/accuracy.md).

Calibration inputs run through the float nn module (the golden model's trace hook records every
tensor's largest |value|). Tensors that one piece of hardware moves without rescaling must share
a format: the operands and results of every device op except conv2d / dense, a conv's residual
bypass and its output (the write-back adds it unshifted), the parts of a split kernel (chained
through the bypass). Host ops convert at their boundaries, and a conv / dense rescales freely:
its write-back shift is input fraction bits + weight fraction bits - output fraction bits. Each
group gets the most fraction bits that still hold its largest value times `headroom` (a conv's
bias counts toward its output's group: the write-back adds it in the output's format).

Without the user's calibration data the inputs are synthetic (seeded N(0, 1), what snow-run feeds
by default), and their ranges are no estimate of real inputs' in either direction: a net trained
on images in [0, 1] sees a mean N(0, 1) lacks, so its activations grow past what the synthetic
inputs show (synthetic formats lost 1-41 dB to Q8.8 on image inputs, bench/heldout_qformat.py),
or stay below it (ddddocr's recogniser: N(0, 1) inputs reach 155 where its images stay inside
Q8.8, and widening those tensors to Q9.7 cost 0.4 dB). So synthetic calibration records the
ranges (`calibrated_max`) but every activation keeps Q8.8 (SYNTHETIC_FRAC) and every weight at
most 15 fraction bits, as under fixed Q8.8: auto without data is Q8.8, and says so in one line
(the drivers' warning). The extra weight bits of tiny weights (up to 24) are not a free gain
either: they made every layer of the PP-OCR direction classifier 2-8 dB closer to fp32 yet its
2-class softmax output 4 dB further, over 24 text images; with calibration data they stay.

With calibration data the per-tensor formats are one candidate, and the uniform formats are the
others (`choose_by_error`): each is applied to a copy of the module and run in fixed point over
the calibration inputs, and the one whose worst output is nearest the float outputs wins. The
range-and-headroom rule is a heuristic, and it can lose to a uniform format on the very data it
was calibrated on: a tensor whose values reach 0.9 gets Q2.14 under headroom 1.25 where Q1.15
holds them all (6 dB), and ShuffleNet calibrated on 8 images lost to Q5.11 on held-out inputs
(48.9 dB against 53.4, issue 40). Measured error decides instead, so auto never loses to a
uniform format on its calibration data.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue

from snowir.dialects import nn
from snowir.errors import SnowError
from snowir.fixedpoint import MAX_WB_SHIFT, frac_for
from snowir.golden import Golden, constant_array
from snowir.nn_util import on_host

DEFAULT_SAMPLES = 8
DEFAULT_HEADROOM = 1.25  # a quarter over the largest calibrated value
SYNTHETIC_FRAC = 8  # synthetic calibration: activations in Q8.8 (see above)


class CalibrationError(SnowError):
    pass


def resample(x: np.ndarray, h: int, w: int) -> np.ndarray:
    """Bilinear resampling of the last two axes to h x w (half-pixel centres). A model with dynamic
    H x W compiles per input size, and the activation ranges of a conv net over images hardly
    depend on the image's size, so calibration images of one size serve every size."""
    def axis(a: np.ndarray, n: int, ax: int) -> np.ndarray:
        m = a.shape[ax]
        if m == n:
            return a
        pos = np.clip((np.arange(n) + 0.5) * m / n - 0.5, 0, m - 1)
        lo = np.floor(pos).astype(int)
        hi = np.minimum(lo + 1, m - 1)
        t = (pos - lo).reshape([-1 if i == ax % a.ndim else 1 for i in range(a.ndim)])
        return (np.take(a, lo, axis=ax) * (1 - t) + np.take(a, hi, axis=ax) * t).astype(np.float32)

    return axis(axis(x, h, -2), w, -1)


def calibration_inputs(module: ModuleOp, path: str, samples: int) -> np.ndarray:
    """The user's `.npy` (N inputs, or one, or N images of a batch-B model: grouped B at a time,
    the last group filled up with the first images; images of another H x W resampled to the
    model's, see `resample`), else `samples` seeded N(0, 1) inputs: the
    distribution snow-run feeds by default."""
    arg = Golden(module).main.body.block.args[0]
    shape = list(arg.type.get_shape())
    if path:
        try:
            x = np.load(Path(path))
        except (OSError, ValueError, EOFError) as e:  # an empty file: numpy says EOFError
            raise CalibrationError(f"{path}: cannot read calibration inputs ({e})") from None
        x = np.asarray(x, np.float32)
        if x.ndim == len(shape) + 1 and list(x.shape[1:]) != shape:
            x = x.reshape(-1, *x.shape[2:])  # N inputs of another batch or size: their images
        if len(shape) == 4 and x.ndim == 4 and x.shape[1] == shape[1] and list(x.shape[2:]) != shape[2:]:
            x = resample(x, shape[2], shape[3])  # images of another size, for a model with dynamic H x W
        if list(x.shape) == shape:
            x = x[None]
        elif shape and x.ndim == len(shape) and list(x.shape[1:]) == shape[1:]:  # N images of a batch-B model
            groups = -(-len(x) // shape[0])
            x = np.resize(x, [groups * shape[0], *shape[1:]]).reshape([groups, *shape])
        if list(x.shape[1:]) != shape:
            raise CalibrationError(f"{path}: calibration inputs of shape {list(x.shape)}, the model takes {shape} "
                                   f"(or N x {shape})")
        if not np.isfinite(x).all():
            raise CalibrationError(f"{path}: calibration inputs hold NaN or infinity")
        return x
    rng = np.random.default_rng(0)
    return rng.standard_normal([samples, *shape]).astype(np.float32)


def ranges(module: ModuleOp, inputs: np.ndarray,
           outputs: list[list[np.ndarray]] | None = None) -> dict[SSAValue, float]:
    """The largest |value| of every tensor of @main over the calibration inputs (float model);
    `outputs`, if given, receives each input's float outputs (the reference `choose_by_error`
    measures against)."""
    golden = Golden(module)
    peak: dict[SSAValue, float] = {}

    def record(value: SSAValue, out) -> None:
        if isinstance(value.owner, nn.ConstantOp):  # weights are not activations: no format from them, no pass over them per input
            return
        if isinstance(out, np.ndarray) and out.dtype.kind not in "fi":
            return
        v = float(np.abs(out).max()) if np.size(out) else 0.0
        peak[value] = max(peak.get(value, 0.0), v)

    golden.trace = record
    arg = golden.main.body.block.args[0]
    for x in inputs:
        peak[arg] = max(peak.get(arg, 0.0), float(np.abs(x).max()))
        out = golden.run(x)
        if outputs is not None:
            outputs.append(out)
    return peak


class _Groups:
    def __init__(self) -> None:
        self.parent: dict[SSAValue, SSAValue] = {}

    def find(self, v: SSAValue) -> SSAValue:
        self.parent.setdefault(v, v)
        while self.parent[v] is not v:
            self.parent[v] = self.parent[self.parent[v]]
            v = self.parent[v]
        return v

    def union(self, a: SSAValue, b: SSAValue) -> None:
        self.parent[self.find(a)] = self.find(b)


def choose_formats(module: ModuleOp, peak: dict[SSAValue, float], weight_frac: dict[Operation, int],
                   headroom: float, fixed_frac: int | None = None) -> tuple[dict[SSAValue, int], dict[Operation, int]]:
    """Fraction bits of every tensor of @main (non-constant values), by the groups above (or
    `fixed_frac` for all: synthetic calibration), and of every conv / dense's weights. The write-back shift f_in + f_w - f_out must lie in
    [1, MAX_WB_SHIFT]: a layer whose shift would fall below 1 lowers its output group's fraction
    bits; one above MAX_WB_SHIFT keeps fewer weight fraction bits."""
    main = next(op for op in module.walk() if isinstance(op, func.FuncOp) and op.sym_name.data == "main")
    groups = _Groups()
    tensors: list[SSAValue] = list(main.body.block.args)
    macs: list[nn.Conv2dOp | nn.DenseOp] = []
    for op in main.body.block.ops:
        if isinstance(op, nn.ConstantOp) or not op.name.startswith("nn."):
            continue
        tensors += list(op.results)
        for r in op.results:
            groups.find(r)
        if isinstance(op, nn.Conv2dOp | nn.DenseOp):
            macs.append(op)
            if isinstance(op, nn.Conv2dOp) and op.bypass is not None:
                groups.union(op.bypass, op.output)
            continue
        if on_host(op) and not isinstance(op, nn.ConcatOp | nn.DepthToSpaceOp | nn.ZeroInsertOp | nn.CropOp):
            continue  # a concat's (interleave's, crop's) inputs share its format: the host's copy moves words as they are
        for v in op.operands:
            if not isinstance(v.owner, nn.ConstantOp):
                groups.union(v, op.results[0])
    best: dict[SSAValue, float] = {}
    for v in tensors:
        root = groups.find(v)
        best[root] = max(best.get(root, 0.0), peak.get(v, 0.0))
    for op in macs:  # the bias is added at the write-back in the output's format: it must fit too
        if isinstance(op.bias.owner, nn.ConstantOp):
            b = constant_array(op.bias.owner)
            root = groups.find(op.output)
            best[root] = max(best[root], float(np.abs(b).max()) if b.size else 0.0)
    frac = {root: frac_for(p * headroom) if fixed_frac is None else fixed_frac for root, p in best.items()}
    # a conv whose kernels are a tensor computed at run time (se-gate) takes that tensor's format
    wf = lambda op: weight_frac[op] if op in weight_frac else frac[groups.find(op.weight)]  # noqa: E731
    changed = True
    while changed:  # shift = f_in + f_w - f_out >= 1
        changed = False
        for op in macs:
            fi, fo = frac[groups.find(op.input)], frac[groups.find(op.output)]
            limit = fi + wf(op) - 1
            if fo > limit:
                if limit < 0:
                    raise CalibrationError(f"{op.name}: no output format leaves a write-back shift >= 1")
                frac[groups.find(op.output)] = limit
                changed = True
    wfrac = {op: min(weight_frac[op], MAX_WB_SHIFT - frac[groups.find(op.input)] + frac[groups.find(op.output)])
             for op in macs if op in weight_frac}
    return {v: frac[groups.find(v)] for v in tensors}, wfrac


Formats = tuple[dict[SSAValue, int], dict[Operation, int]]
"""Fraction bits of every tensor of @main, and of every conv / dense's weights (`choose_formats`)."""


def uniform_formats(module: ModuleOp, frac: int, weight_frac: dict[Operation, int]) -> Formats:
    """The formats `quantize{format=Q(16-frac).frac}` gives: every tensor `frac` fraction bits,
    weights their own (at most 15), written in the per-tensor form so every candidate of
    `choose_by_error` is applied the same way."""
    return choose_formats(module, {}, weight_frac, 1.0, fixed_frac=frac)


def output_snr(module: ModuleOp, inputs: np.ndarray, reference: list[list[np.ndarray]]) -> float:
    """The worst output's SNR (dB) of the fixed-point `module` against the float `reference`, each
    output's signal and noise summed over all inputs."""
    golden = Golden(module)
    got = [golden.run(x) for x in inputs]
    worst = float("inf")
    for k in range(len(reference[0])):
        signal = sum(float(np.sum(np.square(r[k], dtype=np.float64))) for r in reference)
        noise = sum(float(np.sum(np.square(np.asarray(g[k], np.float64) - r[k]))) for g, r in zip(got, reference))
        snr = float("inf") if noise == 0.0 else (10.0 * math.log10(signal / noise) if signal > 0 else float("-inf"))
        worst = min(worst, snr)
    return worst


def choose_by_error(auto: Formats, peak: dict[SSAValue, float], uniform: Callable[[int], Formats],
                    score: Callable[[Formats], float]) -> tuple[Formats, str]:
    """The candidate with the best `score` (the SNR `output_snr` measures on the calibration data):
    the per-tensor `auto` formats, or a uniform one (ties keep auto), and one line saying what was
    measured.

    The uniform formats are searched from the most fraction bits that saturate no calibrated
    activation (n_sat): upwards while each is better than the last (more precision, some values
    saturating), up to one bit over auto's widest tensor, and downwards the same way (fewer bits
    can still win where a constant, a bias of 69 against Q7.9's 64, saturates at n_sat). The
    error of a uniform format against its number of fraction bits falls to one best and rises
    again, so the search stops at the first step that is no better: two or three golden runs
    per calibration input for each candidate, not sixteen."""
    scores = {"auto": score(auto)}
    best_name, best = "auto", auto
    n_sat = frac_for(max(peak.values(), default=0.0))
    n_max = max(n_sat, min(15, max(auto[0].values(), default=n_sat) + 1))

    def measure(n: int) -> float:
        nonlocal best_name, best
        name, formats = f"Q{16 - n}.{n}", uniform(n)
        scores[name] = score(formats)
        if scores[name] > scores[best_name]:
            best_name, best = name, formats
        return scores[name]

    first = measure(n_sat)
    for step, stop in ((1, n_max + 1), (-1, -1)):
        last = first
        for n in range(n_sat + step, stop, step):
            now = measure(n)
            if now <= last:
                break
            last = now
    measured = ", ".join(f"{k} {v:.1f} dB" for k, v in scores.items())
    return best, f"{best_name} chosen by SNR on the calibration inputs ({measured})"
