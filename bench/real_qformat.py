"""
Fixed formats against `--format auto` (synthetic and calibrated) on trained OCR nets, through the
ONNX backend with their dynamic input dims (SnowflakeBackend.prepare(model, format=...,
calibration=...)), on the golden model.

The inputs are rendered text lines (PIL's font, random strings, grey levels and noise), in each
model's own preprocessing: `paddle` RGB scaled to [-1, 1] (rapidocr's PP-OCR nets), `gray01`
grey in [0, 1] (ddddocr). 4 images calibrate, 8 others are compared with onnxruntime fp32: SNR
of the outputs and the task result (argmax class, or the greedy CTC text) agreeing.

    python bench/real_qformat.py MODEL.onnx:paddle:48x192 ... [--out DIR]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import string
import time
import warnings
from pathlib import Path

import numpy as np
import onnx

from snowir.backend import SnowflakeBackend
from snowir.driver.check import snr_db

from _output import add_output_options, machine_speed, output_file, speed_line, with_speed

COLUMNS = ("Q8.8", "Q5.11", "auto-synthetic", "auto-calibrated")


def text_images(n: int, seed: int, height: int, width: int, kind: str) -> np.ndarray:
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        back, ink = int(rng.integers(170, 256)), int(rng.integers(0, 90))
        img = Image.new("L", (width, height), back)
        text = "".join(rng.choice(list(string.ascii_letters + string.digits), int(rng.integers(4, 10))))
        font = ImageFont.load_default(size=int(height * rng.uniform(0.55, 0.8)))
        ImageDraw.Draw(img).text((int(rng.integers(2, 12)), int(height * 0.1)), text, fill=ink, font=font)
        a = np.asarray(img, np.float32) + rng.normal(0, 6, (height, width))
        a = np.clip(a, 0, 255) / 255.0
        out.append(a[None] if kind == "gray01" else np.repeat((a[None] - 0.5) / 0.5, 3, axis=0))
    return np.stack(out)[:, None].astype(np.float32)  # N x (1, C, H, W)


def task(y: np.ndarray) -> tuple:
    """argmax class (2-D output) or greedy CTC: argmax per step, repeats and blanks (0) dropped."""
    y = np.asarray(y)
    if y.ndim == 2:
        return tuple(y.argmax(-1))
    steps = y.reshape(-1, y.shape[-1]).argmax(-1) if y.ndim == 3 else y.reshape(y.shape[0], -1).argmax(-1)
    return tuple(int(s) for i, s in enumerate(steps) if s != 0 and (i == 0 or s != steps[i - 1]))


def evaluate(spec: str) -> dict:
    import onnxruntime as ort

    path, kind, size = spec.split(":")
    height, width = (int(v) for v in size.split("x"))
    model = onnx.load(path)
    cal = text_images(4, 1, height, width, kind)
    tests = text_images(8, 2, height, width, kind)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    ref = [sess.run(None, {sess.get_inputs()[0].name: x})[0] for x in tests]
    row: dict = {"model": Path(path).name, "inputs": kind, "shape": list(tests.shape[1:])}
    for col in COLUMNS:
        fmt = "auto" if col.startswith("auto") else col
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rep = SnowflakeBackend.prepare(model, engine="golden", format=fmt,
                                           calibration=cal[:, 0] if col == "auto-calibrated" else None)
        got = [rep.run(x)[0] for x in tests]
        row[col] = {"snr_db": snr_db(np.stack([r.reshape(-1) for r in ref]), np.stack([g.reshape(-1) for g in got])),
                    "task_agree": float(np.mean([task(g) == task(r) for g, r in zip(got, ref)])),
                    "seconds": time.perf_counter() - t0}
        print(f"  {row['model']} {col}: {row[col]['snr_db']:.1f} dB, task {row[col]['task_agree']:.2f} "
              f"({row[col]['seconds']:.0f} s)", flush=True)
    return row


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("models", nargs="+", help="PATH:paddle|gray01:HxW")
    add_output_options(p, "real_qformat.json")
    args = p.parse_args()
    speed = machine_speed()  # the machine, in the run whose seconds it qualifies
    rows = [evaluate(spec) for spec in args.models]
    head = f"{'model':<36} " + " ".join(f"{c + ' dB (task)':>26}" for c in COLUMNS)
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['model']:<36} " + " ".join(f"{r[c]['snr_db']:>17.1f} ({r[c]['task_agree']:.2f})" for c in COLUMNS))
    speed = machine_speed(speed)  # again at the end: a load that came or went shows
    print(speed_line(speed))
    output_file(args, "real_qformat.json").write_text(json.dumps(with_speed(rows, speed), indent=2) + "\n")


if __name__ == "__main__":
    main()
