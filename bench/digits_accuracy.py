"""
Accuracy of the shipped digits CNN (snowir/data/digits_cnn.onnx) on the held-out 20% of
scikit-learn's digits: onnxruntime fp32, golden fp32, golden Q8.8 and Q5.11, plus the SNR of
the fixed-point logits against onnxruntime. Prints a table, writes digits_accuracy.json.

    python bench/digits_accuracy.py [--out DIR | --update-results]   # build/bench/ or bench/results/
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from xdsl.context import Context

from snowir.driver.check import golden_logits, snr_db
from snowir.frontend.onnx_import import import_onnx
from snowir.passes.pipelines import NNPreparePass
from snowir.tools.train_digits import load_split

from _output import add_output_options, machine_speed, output_file, speed_line, with_speed

MODEL = Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx"


def logits_of(module, images: np.ndarray) -> np.ndarray:
    return np.array([golden_logits(module, img[None]).reshape(-1) for img in images])


def main() -> None:
    import argparse

    p = argparse.ArgumentParser()
    add_output_options(p, "digits_accuracy.json")
    args = p.parse_args()
    speed = machine_speed()  # the machine, in the run whose seconds it qualifies
    _, _, xte, yte = load_split()
    import onnx
    from snowir.driver.check import ort_logits

    model = onnx.load(str(MODEL))
    ref = np.array([ort_logits(model, img[None]).reshape(-1) for img in xte])
    rows = [{"format": "onnxruntime fp32", "accuracy": float((ref.argmax(1) == yte).mean()), "snr_db": None}]
    for fmt in (None, "Q8.8", "Q5.11", "Q4.12"):
        module = import_onnx(MODEL)
        NNPreparePass(format=fmt or "Q8.8", quantize=fmt is not None).apply(Context(), module)
        t0 = time.perf_counter()
        lg = logits_of(module, xte)
        rows.append({"format": f"golden {fmt or 'fp32'}", "accuracy": float((lg.argmax(1) == yte).mean()),
                     "snr_db": snr_db(ref, lg), "top1_agree": float((lg.argmax(1) == ref.argmax(1)).mean()),
                     "seconds": time.perf_counter() - t0})
    print(f"{'model / format':<22} {'test accuracy':>13} {'logit SNR dB':>13} {'top-1 = fp32':>12}")
    for r in rows:
        snr = f"{r['snr_db']:.1f}" if r["snr_db"] is not None else "-"
        agree = f"{100 * r['top1_agree']:.1f}%" if "top1_agree" in r else "-"
        print(f"{r['format']:<22} {100 * r['accuracy']:>12.2f}% {snr:>13} {agree:>12}")
    speed = machine_speed(speed)  # again at the end: a load that came or went shows
    print(speed_line(speed))
    output_file(args, "digits_accuracy.json").write_text(
        json.dumps(with_speed({"test_images": int(len(yte)), "rows": rows}, speed), indent=2) + "\n")


if __name__ == "__main__":
    main()
