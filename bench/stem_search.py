"""
Schedule search over a ResNet-style 7x7/2 stem (224x224, 3 -> 64, pad 3) on the default machine
and on one of 16 CUs: every INDP rows-per-CU choice (the `cu_rows` decision of its row groups)
and the COOP plan, each written into the tile IR, lowered by tile-to-asm and simulated; the
table puts the planner's own choice beside the best variant found (issue 39: the planner was
1.21x off on 16 CUs when rows per CU was a fixed rule). Both the stem as exported (three
clipped rows) and after pad-rows (its row padding as zero rows). Writes
bench/results/stem_search.json.

    python bench/stem_search.py [--size 224] [--cus 4 16]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from snowir.dialects import snowflake_asm as sf
from snowir.driver.model_run import apply_pipeline
from snowir.fixedpoint import writeback
from snowir.golden import conv_sum
from snowir.hw import SnowflakeConfig
from snowir.machine.image import assemble
from snowir.machine.run import run_image
from snowir.passes.pipelines import PIPELINE
from snowir.plan.conv import plan_conv, settle
from snowir.plan.indp import plan_indp, rows_per_cu_fit
from snowir.plan.shapes import ConvShape, LoweringError
from snowir.tile.build import bare_conv_layer, set_conv_plan
from snowir.tile.read import conv_plan_of

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _output import add_output_options, machine_speed, output_file, speed_line, with_speed  # noqa: E402

ASM_PASSES = tuple(p for p in PIPELINE[PIPELINE.index("tile-to-asm") + 1:] if p != "link-segments")


def stem_shape(size: int, padded: bool) -> ConvShape:
    """The 7x7/2 stem, pad 3; `padded`: as pad-rows leaves it (the row padding as input rows)."""
    s = ConvShape(3, size, size, 64, 7, 7, 2, 2, 3, 3, 3, 3, True, 14, 1)
    return replace(s, h=size + 6, pt=0, pb=0) if padded else s


def simulate(layer, hw: SnowflakeConfig, hw_path: Path, x: np.ndarray, want: np.ndarray) -> tuple[int, bool]:
    """Cycles of the layer lowered and run, and whether its output is bit-exact."""
    module = ModuleOp([layer])
    opt = f"{{hw={hw_path}}}"
    apply_pipeline(module, f"tile-to-asm{opt}")
    apply_pipeline(module, ",".join(f"{p}{opt}" for p in ASM_PASSES))
    (image_op,) = [op for op in module.body.block.ops if isinstance(op, sf.ImageOp)]
    image = assemble(image_op, hw)
    seg = image.of_kind(sf.SegmentKind.INPUT)[0]
    data = np.concatenate([x, np.zeros(max(0, seg.size // 2 - x.size), np.int16)])
    result = run_image(image, hw, "fast", {seg.name: data}, module=image_op, max_instructions=None)
    return result.cycles, bool(np.array_equal(result.outputs["y"][:want.size], want))


def golden_case(s: ConvShape) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Random int16 input (HWC words), weights, bias and the golden output words of conv `s`."""
    rng = np.random.default_rng(0)
    x = rng.integers(-300, 300, (s.c, s.h, s.w)).astype(np.int16)
    wt = rng.integers(-3000, 3000, (s.k, s.c, s.kh, s.kw)).astype(np.int16)
    bias = rng.integers(-300, 300, s.k).astype(np.int16)
    acc = conv_sum(x[None], wt, (s.sy, s.sx), (s.pt, s.pl, s.pb, s.pr), (1, 1), 1, dtype=np.float64)[0]
    want = writeback(acc.astype(np.int64), bias.reshape(-1, 1, 1).astype(np.int64), 0, s.shift, s.relu)
    want = want.transpose(1, 2, 0).ravel()
    return x.transpose(1, 2, 0).ravel(), wt, bias, want


def search(s: ConvShape, hw: SnowflakeConfig, hw_path: Path, max_rows: int) -> dict:
    x, wt, bias, want = golden_case(s)
    base = bare_conv_layer("stem", s, wt, bias, hw)
    planner = conv_plan_of(base.clone())
    variants = [("planner", None, base.clone())]
    fit = rows_per_cu_fit(s, hw)
    for r in range(1, min(fit, max_rows) + 1):
        layer = base.clone()
        set_conv_plan(layer, settle(plan_indp(s, hw, planner.in_addr, planner.w_addr, planner.out_addr,
                                              rows_per_cu=r), hw), hw)
        variants.append((f"INDP cu_rows {r}", r, layer))
    try:
        layer = bare_conv_layer("stem", s, wt, bias, hw, "COOP")
        variants.append(("COOP", None, layer))
    except LoweringError as e:
        print(f"COOP refused: {e}", file=sys.stderr)
    rows = []
    for name, r, layer in variants:
        t0 = time.perf_counter()
        plan = conv_plan_of(layer.clone())
        cycles, exact = simulate(layer, hw, hw_path, x, want)
        rows.append({"variant": name, "mode": plan.mode, "cu_rows": sorted(set(plan.cu_rows)),
                     "estimate": round(plan.estimated_cycles(hw)), "cycles": cycles, "exact": exact,
                     "seconds": round(time.perf_counter() - t0, 1)})
        print(f"  {name:18s} {plan.mode:4s} cu_rows {sorted(set(plan.cu_rows))!s:10s} "
              f"est {rows[-1]['estimate']:>9,} cycles {cycles:>9,} {'exact' if exact else 'WRONG'}", flush=True)
    best = min(rows[1:], key=lambda row: row["cycles"])
    return {"planner": rows[0], "best": best, "ratio": rows[0]["cycles"] / best["cycles"], "variants": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--cus", type=int, nargs="+", default=[4, 16])
    ap.add_argument("--max-rows", type=int, default=8, help="largest cu_rows tried")
    add_output_options(ap, "stem_search.json")
    args = ap.parse_args()
    speed = machine_speed()  # the machine, in the run whose seconds it qualifies
    out: dict = {"size": args.size, "machines": {}}
    tmp = Path(tempfile.mkdtemp(prefix="stem_search_"))
    for cus in args.cus:
        hw = SnowflakeConfig(cus=cus)
        hw_path = tmp / f"hw{cus}.json"
        hw.save(hw_path)
        for padded in (False, True):
            key = f"{cus} CUs{', pad-rows' if padded else ''}"
            print(key, flush=True)
            out["machines"][key] = res = search(stem_shape(args.size, padded), hw, hw_path, args.max_rows)
            print(f"  planner {res['planner']['cycles']:,} / best {res['best']['cycles']:,} "
                  f"({res['best']['variant']}) = {res['ratio']:.3f}x", flush=True)
    print("\n| machine | planner | cycles | best found | cycles | planner / best |\n|---|---|---:|---|---:|---:|")
    for key, res in out["machines"].items():
        p, b = res["planner"], res["best"]
        print(f"| {key} | {p['mode']} cu_rows {p['cu_rows']} | {p['cycles']:,} | {b['variant']} | {b['cycles']:,} | "
              f"{res['ratio']:.3f}x |")
    speed = machine_speed(speed)
    print(speed_line(speed))
    path = output_file(args, "stem_search.json")
    path.write_text(json.dumps(with_speed(out, speed), indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
