"""
What each asm pass of snowflake-lower is worth, and C17 Table 3.

1. Ablation: cycles of the default pipeline and of the pipeline without balance-loads,
   schedule-asm or fill-delay-slots, on the four C17 Table 1 layers and the Table 2 models
   (conv + pool layers), all bit-exact against golden.
2. C17 Table 3: the 14x14, 1x1, 1024->2048, stride-2 conv with its loads on 1, 2, 3 or 4 load
   units (balance-loads{units=N}), and on 4 units without splitting the maps strip, against
   the load imbalance C_L balance-loads measures; speed-up against the slowest, beside the
   paper's (132% -> 1.000 ... 5% -> 1.658).

    python bench/ablation.py [--models] [--out DIR | --update-results]   # tables + ablation.json in
                                                                          # build/bench/ or bench/results/
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_lowering import ASM_PIPELINE, conv_case  # noqa: E402 - one layer = the harness the tests use

from snowir.hw import SnowflakeConfig  # noqa: E402
from snowir.passes.pipelines import PIPELINE  # noqa: E402

from _output import add_output_options, forget_blobs, output_file  # noqa: E402

ABLATED = ("balance-loads", "schedule-asm", "fill-delay-slots")
TABLE1 = [(64, 27, 27, 192, 5, 5, 1, 2), (192, 13, 13, 384, 3, 3, 1, 1), (384, 13, 13, 256, 3, 3, 1, 1),
          (256, 13, 13, 256, 3, 3, 1, 1)]
TABLE3_LAYER = (1024, 14, 14, 2048, 1, 1, 2, 0)
PAPER_TABLE3 = [(5, 1.658), (17, 1.656), (42, 1.652), (102, 1.644), (114, 1.297), (132, 1.000)]


def _layer_cycles(shape, passes) -> tuple[int, bool]:
    run, got, want, plan, image = conv_case(*shape, asm_passes=passes)
    return run.cycles, bool(np.array_equal(got, want))


def table1_ablation() -> list[dict]:
    rows = []
    for shape in TABLE1:
        c, h, w, k, kh, kw, s, p = shape
        row = {"layer": f"{h}x{w},{kh}x{kw},{c}->{k}"}
        for drop in (None, *ABLATED):
            cycles, exact = _layer_cycles(shape, tuple(x for x in ASM_PIPELINE if x != drop))
            row["full" if drop is None else f"-{drop}"] = cycles
            row["bit_exact"] = row.get("bit_exact", True) and exact
        rows.append(row)
        print(f"  table 1 {row['layer']}: done", flush=True)
    return rows


def model_ablation() -> list[dict]:
    from snowir.driver.model_api import run_model_on_device
    from snowir.tools.bench_models import build as build_bench
    from snowir.tools.light_models import build as build_light

    rows = []
    for name, path_fn in (("alexnet_owt", lambda: build_bench("alexnet_owt")),
                          ("resnet18", lambda: build_bench("resnet18")), ("resnet50", lambda: build_light("resnet50"))):
        row: dict = {"layer": name}
        for drop in (None, *ABLATED):
            pipeline = ",".join(x for x in PIPELINE if x != drop)
            t0 = time.perf_counter()
            r = run_model_on_device(path_fn(), pipeline=pipeline, check=True).report
            forget_blobs()  # one run's weights at a time (twelve runs of three models)
            conv = [layer for layer in r["layers"] if layer["cycles"] and layer["op"] != "dense"]
            row["full" if drop is None else f"-{drop}"] = sum(layer["cycles"] for layer in conv)
            row["bit_exact"] = row.get("bit_exact", True) and r["check"]["golden_bit_exact"]
            print(f"  {name} without {drop}: {time.perf_counter() - t0:.0f} s", flush=True)
        rows.append(row)
    return rows


def table3() -> list[dict]:
    variants = [("1 unit", "balance-loads{units=1}"), ("2 units", "balance-loads{units=2}"),
                ("3 units", "balance-loads{units=3}"), ("4 units, strip not split", "balance-loads{split=1000000}"),
                ("4 units, balanced", "balance-loads")]
    rows = []
    for label, spec in variants:
        passes = (spec, *ASM_PIPELINE[1:])
        run, got, want, plan, image = conv_case(*TABLE3_LAYER, asm_passes=passes)
        rows.append({"variant": label, "cycles": run.cycles, "bit_exact": bool(np.array_equal(got, want)),
                     "load_imbalance_pct": _cl(spec)})
    worst = max(r["cycles"] for r in rows)
    for r in rows:
        r["speedup"] = worst / r["cycles"]
    return rows


def _cl(spec: str) -> float:
    """C_L that balance-loads records for the Table 3 layer under `spec` (after tile-to-asm)."""
    from xdsl.dialects.builtin import ModuleOp

    from snowir.plan.shapes import ConvShape
    from snowir.dialects import snowflake_asm as sf
    from snowir.driver.model_run import apply_pipeline
    from snowir.tile.build import bare_conv_layer

    c, h, w, k, kh, kw, s, p = TABLE3_LAYER
    shape = ConvShape(c, h, w, k, kh, kw, s, s, p, p, p, p, True, 14)
    zeros = np.zeros((k, c, kh, kw), np.int16)
    module = ModuleOp([bare_conv_layer("conv", shape, zeros, np.zeros(k, np.int16), SnowflakeConfig())])
    apply_pipeline(module, f"tile-to-asm,{spec}")
    (image,) = [op for op in module.walk() if isinstance(op, sf.ImageOp)]
    return float(image.attributes["load_imbalance_pct"].value.data)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", action="store_true", help="also the Table 2 models (several minutes)")
    add_output_options(ap, "ablation.json")
    args = ap.parse_args()
    t1 = table1_ablation()
    models = model_ablation() if args.models else []
    head = f"{'layer / model':<22} {'full':>10} " + " ".join(f"{'-' + a:>18}" for a in ABLATED) + "  exact"
    print(head)
    print("-" * len(head))
    for r in t1 + models:
        cells = " ".join(f"{r['-' + a]:>10,} ({100 * (r['-' + a] / r['full'] - 1):+5.1f}%)" for a in ABLATED)
        print(f"{r['layer']:<22} {r['full']:>10,} {cells}  {r['bit_exact']}")
    t3 = table3()
    print()
    print(f"{'C17 Table 3 (1x1 1024->2048 /2)':<32} {'C_L %':>7} {'cycles':>10} {'speed-up':>8}")
    for r in sorted(t3, key=lambda r: -r["load_imbalance_pct"]):
        print(f"{r['variant']:<32} {r['load_imbalance_pct']:>7.1f} {r['cycles']:>10,} {r['speedup']:>8.3f}")
    print("paper (C_L % -> speed-up): " + ", ".join(f"{c}% -> {v:.3f}" for c, v in PAPER_TABLE3[::-1]))
    output_file(args, "ablation.json").write_text(json.dumps({"table1": t1, "models": models, "table3": t3}, indent=2) + "\n")


if __name__ == "__main__":
    main()
