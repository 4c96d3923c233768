"""
The nine light models with He-initialised weights (tools/light_models.py): float golden vs
onnxruntime (relative error of the logits) and Q8.8 golden vs onnxruntime (SNR of the logits,
top-1 agreement), import and golden times.

    python bench/light_snr.py [names...] [--format Q8.8] [--out DIR | --update-results]
        # table + light_snr.json in build/bench/ (bench/results/ with --update-results)
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from snowir.driver.check import compare, golden_logits, ort_logits
from snowir.frontend.onnx_import import import_onnx
from snowir.tools.light_models import NAMES, build

from _output import add_output_options, forget_blobs, machine_speed, output_file, speed_line, with_speed


def evaluate(name: str, fmt: str = "Q8.8", seed: int = 0) -> dict:
    from xdsl.context import Context

    from snowir.passes.pipelines import NNPreparePass

    path = build(name)
    t0 = time.perf_counter()
    module = import_onnx(path)
    t_import = time.perf_counter() - t0
    shape = module.body.block.ops.first.body.block.args[0].type.get_shape()
    x = np.random.default_rng(seed).standard_normal(list(shape)).astype(np.float32)
    ref = ort_logits(str(path), x)
    t0 = time.perf_counter()
    flt = golden_logits(module, x)
    t_float = time.perf_counter() - t0
    rel = float(np.abs(flt - ref.reshape(flt.shape)).max() / np.abs(ref).max())
    t0 = time.perf_counter()
    NNPreparePass(format=fmt).apply(Context(), module)
    t_prepare = time.perf_counter() - t0
    t0 = time.perf_counter()
    fixed = golden_logits(module, x)
    t_fixed = time.perf_counter() - t0
    cmp = compare(ref.reshape(fixed.shape), fixed)
    return {"model": name, "format": fmt, "float_rel_err": rel, "snr_db": cmp["snr_db"],
            "max_abs_err": cmp["max_abs_err"], "top1_match": cmp["top1_match"],
            "logit_rms": float(np.sqrt(np.mean(ref.astype(np.float64) ** 2))),
            "import_s": t_import, "prepare_s": t_prepare, "golden_float_s": t_float, "golden_fixed_s": t_fixed}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("names", nargs="*", default=list(NAMES))
    p.add_argument("--format", default="Q8.8")
    add_output_options(p, "light_snr.json")
    args = p.parse_args()
    speed = machine_speed()  # the machine, in the run whose seconds it qualifies
    rows = []
    for name in args.names:
        rows.append(evaluate(name, args.format))
        forget_blobs()  # one model's weights at a time (the nine at once peaked at 4.2 GB)
        r = rows[-1]
        print(f"  {name}: float rel {r['float_rel_err']:.1e}, {args.format} SNR {r['snr_db']:.1f} dB", flush=True)
    head = f"{'model':<14} {'float rel err':>13} {'SNR dB':>7} {'top1':>5} {'import s':>8} {'golden f32 s':>12} {'golden fx s':>11}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['model']:<14} {r['float_rel_err']:>13.1e} {r['snr_db']:>7.1f} {str(r['top1_match']):>5} "
              f"{r['import_s']:>8.2f} {r['golden_float_s']:>12.2f} {r['golden_fixed_s']:>11.2f}")
    speed = machine_speed(speed)  # again at the end: a load that came or went shows
    print(speed_line(speed))
    output_file(args, "light_snr.json").write_text(json.dumps(with_speed(rows, speed), indent=2) + "\n")


if __name__ == "__main__":
    main()
