"""
Fixed formats against `--format auto` with and without calibration data, on light models whose
weights were drawn with another seed than the one the formats' rules were tuned on (held out).

The BN nets of tools/light_models.py rebuilt with `--seed` (default 7) into build/heldout/; image-like
inputs (`unit`: uniform in [0, 1); `normalized`: the same standardised as ImageNet images are,
(u - 0.45) / 0.225): 8 for calibration (seed 1), 4 others for the SNR of the logits against
onnxruntime fp32 (seed 2). Columns: Q8.8, Q5.11, auto without calibration data (synthetic
inputs), auto calibrated. All on the golden model, which the machine matches bit for bit.

    python bench/heldout_qformat.py [names...] [--seed 7] [--inputs unit|normalized] [--bn-stats normal|images]
                                    [--out DIR | --update-results]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import gc
import json
import tempfile
from pathlib import Path

import numpy as np  # noqa: E402
from xdsl.context import Context  # noqa: E402

from snowir.driver.check import golden_logits, ort_logits, snr_db
from snowir.frontend.onnx_import import import_onnx
from snowir.passes.pipelines import NNPreparePass
from snowir.tools.light_models import build

from _output import ROOT, add_output_options, forget_blobs, output_file

BN_NETS = ("inception_v2", "densenet121", "resnet50", "shufflenet")
COLUMNS = ("Q8.8", "Q5.11", "auto-synthetic", "auto-calibrated")


def images(shape: list[int], n: int, seed: int, kind: str) -> np.ndarray:
    u = np.random.default_rng(seed).random([n, *shape]).astype(np.float32)
    return u if kind == "unit" else ((u - 0.45) / 0.225).astype(np.float32)


def built(name: str, seed: int, kind: str, bn_stats: str) -> Path:
    """tools/light_models.py's model with weights of `seed`; BN statistics measured on N(0, 1)
    (as that tool does), on image-like inputs of `kind` (as a net trained on images has them), or
    left at mean 0, variance 1."""
    if bn_stats == "normal":
        return build(name, ROOT / "build" / "heldout" / f"seed{seed}", seed=seed)
    import os

    import onnx

    from snowir.tools.light_models import calibrate_batch_norm, give_weights, light_path, scale_classifier

    target = ROOT / "build" / "heldout" / f"seed{seed}-{kind}-{bn_stats}" / f"{name}.onnx"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    model = give_weights(onnx.load(str(light_path(name))), seed)
    dims = [i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}][0]
    shape = [d.dim_value for d in dims.type.tensor_type.shape.dim]
    if bn_stats == "images":
        model = calibrate_batch_norm(model, x=images(shape[1:], shape[0], 5, kind))
    model = scale_classifier(model, x=images(shape[1:], 1, 5, kind))
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    onnx.save(model, str(tmp))
    os.replace(tmp, target)
    return target


def evaluate(name: str, seed: int, kind: str, work: Path, bn_stats: str = "normal") -> dict:
    import onnx

    path = built(name, seed, kind, bn_stats)
    dims = onnx.load(str(path), load_external_data=False).graph.input[0].type.tensor_type.shape.dim
    shape = [d.dim_value for d in dims]
    cal = work / f"{name}_cal.npy"
    np.save(cal, images(shape, 8, 1, kind))
    tests = images(shape, 4, 2, kind)
    ref = np.stack([ort_logits(str(path), x).reshape(-1) for x in tests])
    row: dict = {"model": name, "seed": seed, "inputs": kind, "bn_stats": bn_stats}
    for col in COLUMNS:
        fmt = "auto" if col.startswith("auto") else col
        module = import_onnx(path)
        NNPreparePass(format=fmt, calibration=str(cal) if col == "auto-calibrated" else "").apply(Context(), module)
        got = np.stack([golden_logits(module, x).reshape(-1) for x in tests])
        del module
        gc.collect()
        forget_blobs()
        row[col] = {"snr_db": snr_db(ref, got), "top1_agree": float((got.argmax(1) == ref.argmax(1)).mean())}
    return row


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("names", nargs="*", default=list(BN_NETS))
    p.add_argument("--seed", type=int, default=7, help="the weights' seed (tools/light_models.py uses 0)")
    p.add_argument("--inputs", choices=("unit", "normalized"), default="unit")
    p.add_argument("--bn-stats", choices=("normal", "images", "none"), default="normal",
                   help="BN statistics measured on N(0, 1) inputs (tools/light_models.py), on the image-like "
                        "inputs, or none (mean 0, variance 1: activations far from unit scale)")
    add_output_options(p, "heldout_qformat.json")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.names:
            rows.append(evaluate(name, args.seed, args.inputs, Path(tmp), args.bn_stats))
            r = rows[-1]
            print(f"  {name}: " + ", ".join(f"{c} {r[c]['snr_db']:.1f} dB" for c in COLUMNS), flush=True)
    head = f"{'model':<14} " + " ".join(f"{c + ' dB':>20}" for c in COLUMNS)
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['model']:<14} " + " ".join(f"{r[c]['snr_db']:>20.1f}" for c in COLUMNS))
    output_file(args, f"heldout_qformat_{args.inputs}_{args.bn_stats}.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
