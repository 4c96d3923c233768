"""
Per-layer device cycles of every model the "no layer slower" rule covers (issue 38): the four
Table 1 layers (bench/table1.py), the Table 2 models (bench/models.py) and the nine light nets
(bench/light_machine.py), on the default machine. A change that moves code is measured by
running this before and after it and comparing:

    python bench/layer_cycles.py [--only table1,models,light] [--out DIR]   # layer_cycles.json
    python bench/layer_cycles.py --compare BEFORE.json AFTER.json          # slower / faster layers
    python bench/layer_cycles.py --pipeline 'nn-prepare,...,fill-delay-slots{measure=true},...'
                                   # the same set lowered by a pipeline of one's own (snow-run --pipeline)

Runs without the golden check (the cycles do not depend on it; bench/models.py and the tests
check bit-exactness), so the whole set takes a few minutes less than the benches themselves.
`--compare` exits 1 when a layer got slower, so it can gate a change.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _output import forget_blobs, output_dir  # noqa: E402


STALLS: dict[str, dict[str, dict[str, int]]] = {}  # model -> layer -> stall cause -> cycles (layer_stalls.json)


def _device_cycles(report: dict, model: str) -> dict[str, int]:
    STALLS[model] = {layer["name"]: {k: v for k, v in layer["stall_cycles"].items() if v}
                     for layer in report["layers"] if layer["cycles"]}
    return {layer["name"]: layer["cycles"] for layer in report["layers"] if layer["cycles"]}


def _table1(pipeline: str | None = None) -> dict[str, dict[str, int]]:
    import onnx

    from snowir.driver.model_api import run_model_on_device
    from table1 import LAYERS, layer_model

    out = {}
    for (c, h, w, k, kh, kw, s, pad), _, _ in LAYERS:
        m = layer_model((c, h, w, k, kh, kw, s, pad))
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "layer.onnx"
            onnx.save(m, path)
            name = f"table1:{h}x{w},{kh}x{kw},{c}->{k}"
            out[name] = _device_cycles(run_model_on_device(path, pipeline=pipeline).report, name)
    return out


def _models(names: list[str], pipeline: str | None = None) -> dict[str, dict[str, int]]:
    from snowir.driver.model_api import run_model_on_device
    from snowir.tools.bench_models import build as build_bench
    from snowir.tools.light_models import build as build_light

    out = {}
    for name in names:
        path = build_bench(name) if name in ("alexnet_owt", "resnet18") else build_light(name)
        try:
            out[name] = _device_cycles(run_model_on_device(path, pipeline=pipeline).report, name)
        except Exception as e:  # a model the compiler refuses (VGG-19's DRAM) has no layers to compare
            print(f"  {name}: {type(e).__name__}: {str(e)[:120]}", flush=True)
            out[name] = {}
        finally:
            forget_blobs()
        print(f"  {name}: {sum(out[name].values())} cycles", flush=True)
    return out


def compare(before: dict, after: dict) -> int:
    slower = faster = 0
    for model in before:
        for layer, b in before[model].items():
            a = after.get(model, {}).get(layer)
            if a is None or a == b:
                continue
            tag = "SLOWER" if a > b else "faster"
            slower += a > b
            faster += a < b
            print(f"{tag:<6} {model:<28} {layer:<20} {b:>10} -> {a:>10} ({a - b:+d})")
    for model in before:
        if model not in after:
            continue
        b, a = sum(before[model].values()), sum(after[model].values())
        if a != b:
            print(f"total  {model:<28} {b:>10} -> {a:>10} ({a - b:+d}, {100 * (a / b - 1):+.2f}%)")
    print(f"{slower} layers slower, {faster} faster")
    return 1 if slower else 0


def main() -> None:
    from snowir.tools.light_models import NAMES

    p = argparse.ArgumentParser()
    p.add_argument("--only", default="table1,models,light")
    p.add_argument("--models", help="comma-separated model names (overrides --only's model lists)")
    p.add_argument("--out", type=Path)
    p.add_argument("--update-results", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    p.add_argument("--pipeline", help="lower with this pass pipeline (as snow-run's --pipeline); default: snow-run's")
    args = p.parse_args()
    if args.compare:
        sys.exit(compare(*(json.loads(f.read_text()) for f in args.compare)))
    parts = args.only.split(",")
    result: dict[str, dict[str, int]] = {}
    if args.models:
        result.update(_models(args.models.split(","), args.pipeline))
    else:
        if "table1" in parts:
            result.update(_table1(args.pipeline))
        if "models" in parts:
            result.update(_models(["alexnet_owt", "resnet18"], args.pipeline))
        if "light" in parts:
            result.update(_models(list(NAMES), args.pipeline))  # resnet50 among them: Table 2's ResNet-50
    path = output_dir(args) / "layer_cycles.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    (path.parent / "layer_stalls.json").write_text(json.dumps(STALLS) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
