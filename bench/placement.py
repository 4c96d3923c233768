"""
Device vs host placement (issue 28 items 5 and 7): each model with the default nn-prepare and
with sequence-gemm and add-to-bypass off (`nn-prepare{sequence-gemm=false add-to-bypass=false}`),
both on the default machine (fast engine, whole-model programs) and checked bit-exact against the
golden model. The host estimate is the same model in both (snowir/host_model.py).

Columns: device layers and MACs, host layers and MACs, device ms, host ms (Cortex-A9 estimate),
DRAM bytes, logit SNR against onnxruntime; then the layers that moved.

    python bench/placement.py MODEL.onnx:1,1,64,256 [MODEL2.onnx:SHAPE ...] [--out DIR]
        # the OCR / detector nets of issue 28 are not in the repository: give their paths
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from snowir.driver.model_api import run_model_on_device

from _output import add_output_options, forget_blobs, output_file

VARIANTS = {"off": "nn-prepare{sequence-gemm=false add-to-bypass=false}", "on": "nn-prepare"}


def summary(report: dict) -> dict:
    layers = report["layers"]
    device = [layer for layer in layers if layer["where"] == "device" and layer["cycles"]]
    host = [layer for layer in layers if layer["where"] == "host"]
    check = report.get("check") or {}
    return {"device_layers": len(device), "device_macs": sum(layer["macs"] for layer in device),
            "host_layers": len(host), "host_macs": sum(layer["macs"] for layer in host),
            "device_ms": report["total"]["ms"], "host_ms": report["total"]["host_ms"],
            "dram_bytes": report["total"]["dram_bytes"], "snr_db": check.get("snr_db"),
            "bit_exact": check.get("golden_bit_exact"),
            "where": {layer["name"]: (layer["where"], layer["op"], layer["ms"] or layer["host_ms"] or 0.0,
                                      layer["dram_bytes"]) for layer in layers}}


def moved(off: dict, on: dict) -> list[str]:
    out = []
    for name, (where, op, ms, dram) in off["where"].items():
        after = on["where"].get(name)
        if after is not None and (after[0] != where or after[1] != op or abs(after[2] - ms) > 0.25 * ms + 0.01):
            out.append(f"{name} ({op}): {where} {ms:.2f} ms, {dram / 1e6:.1f} MB -> {after[0]} {after[1]} "
                       f"{after[2]:.2f} ms, {after[3] / 1e6:.1f} MB")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("models", nargs="+", help="MODEL.onnx:N,C,H,W")
    add_output_options(parser, "placement.json")
    args = parser.parse_args()
    rows = {}
    print(f"{'model':<28} {'variant':<4} {'dev layers':>10} {'dev MMAC':>9} {'host layers':>11} {'host MMAC':>9} "
          f"{'device ms':>9} {'host ms':>8} {'DRAM MB':>8} {'SNR dB':>7} exact")
    for spec in args.models:
        path, _, shape = spec.partition(":")
        name = Path(path).name
        rows[name] = {}
        for variant, pipeline in VARIANTS.items():
            run = run_model_on_device(path, pipeline=pipeline, check=True, input_shape=shape or None)
            s = rows[name][variant] = summary(run.report)
            snr = f"{s['snr_db']:.1f}" if s["snr_db"] is not None else "-"
            print(f"{name:<28} {variant:<4} {s['device_layers']:>10} {s['device_macs'] / 1e6:>9.1f} {s['host_layers']:>11} "
                  f"{s['host_macs'] / 1e6:>9.1f} {s['device_ms']:>9.2f} {s['host_ms']:>8.2f} "
                  f"{s['dram_bytes'] / 1e6:>8.1f} {snr:>7} {s['bit_exact']}")
            del run
            forget_blobs()
        for line in moved(rows[name]["off"], rows[name]["on"]):
            print(f"    moved: {line}")
    path = output_file(args, "placement.json")
    path.write_text(json.dumps(rows, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
