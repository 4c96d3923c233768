"""
Fixed-point formats against onnxruntime fp32: one global Q8.8, one global Q5.11, and
`--format auto` (per-tensor formats from calibration, snowir/calibration.py).

The nine light models (tools/light_models.py: He-initialised weights, BN statistics measured
layer by layer) on image-like inputs, uniform in [0, 1): calibration on 8 such inputs, SNR of
the logits and top-1 agreement on 4 others (different seeds). The shipped digits CNN:
calibration on 64 training images, test-set accuracy on the 360 held-out ones. All on the
golden model, which the machine matches bit for bit (tests). A plot per model of each
tensor's calibrated range against its auto format's limit goes to build/bench/qformat/.

    python bench/qformat.py [names...] [--out DIR | --update-results]   # table + qformat.json in
                                                                        # build/bench/ or bench/results/
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before numpy: threaded BLAS only contends here (10 min -> 4)

import argparse
import gc
import json
import tempfile
import time
from pathlib import Path

import numpy as np  # noqa: E402
from xdsl.context import Context  # noqa: E402

from snowir.driver.check import golden_logits, ort_logits, snr_db
from snowir.frontend.onnx_import import import_onnx
from snowir.passes.pipelines import NNPreparePass
from snowir.tools.light_models import NAMES, build

from _output import add_output_options, forget_blobs, machine_speed, output_file, speed_line, with_speed

FORMATS = ("Q8.8", "Q5.11", "auto")
DIGITS = Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx"
PLOTS = Path(__file__).resolve().parent.parent / "build" / "bench" / "qformat"


def _prepared(path: Path, fmt: str, calibration: Path):
    module = import_onnx(path)
    NNPreparePass(format=fmt, calibration=str(calibration) if fmt == "auto" else "").apply(Context(), module)
    return module


def _plot(module, name: str) -> None:
    """Calibrated range (`calibrated_max`, set by quantize{format=auto}) of every tensor of
    @main against its format's limit."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from snowir.dialects import nn
    from snowir.golden import Golden

    rows = []
    for op in Golden(module).main.body.block.ops:
        if "calibrated_max" in op.attributes and op.results:
            elem = op.results[0].type.get_element_type()
            if isinstance(elem, nn.FixedType):
                rows.append((op.attributes["calibrated_max"].value.data, 2.0 ** (elem.int_bits.data - 1)))
    if not rows:
        return
    PLOTS.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(9, 3.2))
    ax.semilogy([p for p, _ in rows], ".", label="calibrated max |x|")
    ax.semilogy([lim for _, lim in rows], "-", drawstyle="steps-mid", label="format limit 2^(m-1)")
    ax.set_xlabel("layer (graph order)")
    ax.set_title(f"{name}: per-layer ranges and --format auto limits")
    ax.legend(loc="lower left")
    fig.tight_layout()
    fig.savefig(PLOTS / f"{name}.png", dpi=110)
    plt.close(fig)


def light(name: str, work: Path) -> dict:
    path = build(name)
    import onnx

    dims = onnx.load(str(path), load_external_data=False).graph.input[0].type.tensor_type.shape.dim
    shape = [d.dim_value for d in dims]  # the light models have static inputs
    rng = np.random.default_rng(1)
    cal = work / f"{name}_cal.npy"
    np.save(cal, rng.random([8, *shape]).astype(np.float32))  # N x the model's input
    tests = np.random.default_rng(2).random([4, *shape]).astype(np.float32)
    ref = np.stack([ort_logits(str(path), x).reshape(-1) for x in tests])
    row = {"model": name}
    for fmt in FORMATS:
        t0 = time.perf_counter()
        got = _golden_logits(path, fmt, cal, tests, name)
        row[fmt] = {"snr_db": snr_db(ref, got), "top1_agree": float((got.argmax(1) == ref.argmax(1)).mean()),
                    "seconds": time.perf_counter() - t0}
    return row


def _golden_logits(path: Path, fmt: str, cal: Path, tests: np.ndarray, name: str) -> np.ndarray:
    """Golden logits of `tests` under `fmt`; the module and its weights are gone on return
    (three formats' modules of VGG-19 held at once peaked at 7.1 GB)."""
    module = _prepared(path, fmt, cal)
    try:
        got = []
        for x in tests:
            got.append(golden_logits(module, x).reshape(-1))
            gc.collect()  # a golden run leaves cyclic garbage: +0.3 GB a run on VGG-19 until collected
        if fmt == "auto":
            _plot(module, name)
        return np.stack(got)
    finally:
        del module
        forget_blobs()


def digits(work: Path) -> dict:
    from snowir.tools.train_digits import load_split

    xtr, _, xte, yte = load_split()
    cal = work / "digits_cal.npy"
    np.save(cal, xtr[:64])
    import onnx

    model = onnx.load(str(DIGITS))
    ref = np.array([ort_logits(model, img[None]).reshape(-1) for img in xte])
    row = {"model": "digits_cnn", "fp32_accuracy": float((ref.argmax(1) == yte).mean())}
    for fmt in FORMATS:
        got = _golden_logits(DIGITS, fmt, cal, xte[:, None], "digits_cnn")
        row[fmt] = {"snr_db": snr_db(ref, got), "top1_agree": float((got.argmax(1) == ref.argmax(1)).mean()),
                    "accuracy": float((got.argmax(1) == yte).mean())}
    return row


def _evaluate(name: str, work: str) -> dict:
    return digits(Path(work)) if name == "digits_cnn" else light(name, Path(work))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("names", nargs="*", default=[*NAMES, "digits_cnn"])
    add_output_options(p, "qformat.json")
    args = p.parse_args()
    speed = machine_speed()  # the machine, in the run whose seconds it qualifies
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.names:
            # one process per model: what one model's run leaves in the heap goes with its process
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
                rows.append(pool.submit(_evaluate, name, tmp).result())
            r = rows[-1]
            print(f"  {name}: " + ", ".join(f"{f} {r[f]['snr_db']:.1f} dB" for f in FORMATS), flush=True)
    head = f"{'model':<14} " + " ".join(f"{f + ' dB':>10} {'top1':>5}" for f in FORMATS) + f" {'acc (digits)':>24}"
    print(head)
    print("-" * len(head))
    for r in rows:
        acc = " / ".join(f"{100 * r[f]['accuracy']:.2f}" for f in FORMATS) if "fp32_accuracy" in r else ""
        print(f"{r['model']:<14} " + " ".join(f"{r[f]['snr_db']:>10.1f} {100 * r[f]['top1_agree']:>4.0f}%"
                                            for f in FORMATS) + f" {acc:>24}")
    speed = machine_speed(speed)  # again at the end: a load that came or went shows
    print(speed_line(speed))
    output_file(args, "qformat.json").write_text(json.dumps(with_speed(rows, speed), indent=2) + "\n")


if __name__ == "__main__":
    main()
