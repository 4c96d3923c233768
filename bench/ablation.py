"""
What each asm pass of snowflake-lower is worth, layer by layer, and C17 Table 3.

1. Ablation: every device layer's cycles under the default pipeline and under the pipeline
   without balance-loads, schedule-asm or fill-delay-slots, on the four C17 Table 1 layers
   (each an ONNX conv + ReLU through the whole pipeline, as bench/table1.py builds them, so a
   layer split into channel parts is linked into one program) and, with --models, on the
   Table 2 models (AlexNet-OWT and ResNet-18 from tools/bench_models.py, ResNet-50 the onnx
   wheel's light model) and the onnx wheel's nine light models (tools/light_models.py).
   A pass must never make a layer slower. In a linked program the report counts a layer's
   cycles from its marker to the next, so a layer that issues sooner hands its CUs' tail to the
   next one; what a pass must not delay is when each layer ends (the device cycles up to and
   including it). Per pass the table shows the worst layer by end (`worst end`: the largest
   delay, <= 0 when no layer ends later) and by its own cycles (`worst layer`).
2. C17 Table 3: the 14x14, 1x1, 1024->2048, stride-2 conv with its loads on 1, 2, 3 or 4 load
   units (balance-loads{units=N}), and on 4 units without splitting the maps strip, against
   the load imbalance C_L balance-loads measures; speed-up against the slowest, beside the
   paper's (132% -> 1.000 ... 5% -> 1.658).

    python bench/ablation.py [--models [NAMES]] [--no-table1] [--no-table3] [--out DIR | --update-results]

`--models` alone runs all eleven models; `--models resnet18,squeezenet` a few. Each model is
lowered once up to tile-to-asm; the asm passes then run on a copy per variant (all, and without
each ablated pass), and each variant runs once, linked as snow-run runs it, on the fast engine:
a layer's end time is the device cycles up to and including it in that run. Progress (seconds
per variant) on standard error; tables on standard output, ablation.json in build/bench/ (or
bench/results/ with --update-results), with every variant's compile and simulate seconds and
the machine-speed figure. Cycles come from the machine model and do not depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_lowering import ASM_PIPELINE, conv_case  # noqa: E402 - one layer = the harness the tests use

from snowir.hw import SnowflakeConfig  # noqa: E402
from snowir.passes.pipelines import PIPELINE, SnowflakeLowerPass  # noqa: E402
from xdsl.passes import ModulePass  # noqa: E402

from _output import (add_output_options, forget_blobs, loop_units, machine_speed, output_file, speed_line,  # noqa: E402
                     with_speed)

ABLATED = ("balance-loads", "schedule-asm", "fill-delay-slots")
TABLE1 = [(64, 27, 27, 192, 5, 5, 1, 2), (192, 13, 13, 384, 3, 3, 1, 1), (384, 13, 13, 256, 3, 3, 1, 1),
          (256, 13, 13, 256, 3, 3, 1, 1)]
TABLE2 = ("alexnet_owt", "resnet18")  # tools/bench_models.py; ResNet-50 is the light model
LIGHT = ("bvlc_alexnet", "zfnet512", "vgg19", "squeezenet", "inception_v1", "inception_v2", "densenet121", "resnet50",
         "shufflenet")
TABLE3_LAYER = (1024, 14, 14, 2048, 1, 1, 2, 0)
PAPER_TABLE3 = [(5, 1.658), (17, 1.656), (42, 1.652), (102, 1.644), (114, 1.297), (132, 1.000)]


PREFIX = PIPELINE[:PIPELINE.index("balance-loads")]
"""The passes every variant shares: lowered once per model, then cloned per variant."""


def pipeline_passes(drop: str | None = None, **options: object) -> list[ModulePass]:
    """snowflake-lower's passes after tile-to-asm, as it configures them (`options`: its own, e.g.
    guard), without `drop`."""
    passes = SnowflakeLowerPass(**options).passes(quantised_already=True)
    rest = passes[[p.name for p in passes].index("tile-to-asm") + 1:]
    return [p for p in rest if p.name != drop]


def variants(path: Path, check: bool) -> Iterator[tuple[str | None, list[dict], bool | None, float, float]]:
    """The model lowered once up to tile-to-asm, then the rest of snowflake-lower (its passes as it
    configures them) applied to a copy per variant (all of it, then without each ablated pass) and
    run once, linked, on the fast engine: per variant (dropped pass or None, device layers with
    cycles in program order, bit-exact with `check`, compile seconds, simulate seconds)."""
    from snowir import api
    from snowir.driver.model_api import Compiled
    from snowir.driver.model_run import apply_pipeline, load_model
    from snowir.pass_steps import run_steps

    t0 = time.perf_counter()
    module, _ = load_model(path)
    apply_pipeline(module, ",".join(PREFIX))
    shared = time.perf_counter() - t0
    hw = SnowflakeConfig()
    for drop in (None, *ABLATED):
        t0 = time.perf_counter()
        copy = module.clone()
        run_steps(api.context(), copy, pipeline_passes(drop))
        compiled = Compiled(copy, hw, str(path), None, shared + time.perf_counter() - t0)
        t1 = time.perf_counter()
        report = compiled.run(engine="fast", check=check).report.to_json()
        t2 = time.perf_counter()
        layers = [{"name": layer["name"], "op": layer["op"], "cycles": layer["cycles"]}
                  for layer in report["layers"] if layer["where"] == "device" and layer["cycles"]]
        exact = bool(report["check"]["golden_bit_exact"]) if check else None
        del compiled, report, copy
        yield drop, layers, exact, shared + t1 - t0, t2 - t1
    del module
    forget_blobs()  # one model's weights at a time


def ablate(label: str, path: Path, check: bool) -> dict:
    """The model under the default pipeline and without each ablated pass: per layer, and per
    pass the worst layer."""
    row: dict = {"model": label, "bit_exact": True if check else None, "seconds": {}}
    ends_full = np.zeros(0, dtype=np.int64)
    for drop, layers, exact, compile_s, simulate_s in variants(path, check):
        key = "full" if drop is None else f"-{drop}"
        row["seconds"][key] = {"compile": round(compile_s, 2), "simulate": round(simulate_s, 2)}
        print(f"  {label} {'' if drop is None else 'without ' + drop:<{len('without fill-delay-slots')}} "
              f"compile {compile_s:6.1f} s, simulate {simulate_s:6.1f} s", file=sys.stderr, flush=True)
        if check:
            row["bit_exact"] = row["bit_exact"] and exact
        if drop is None:
            row["layers"] = [{"name": layer["name"], "op": layer["op"], "full": layer["cycles"]} for layer in layers]
            ends_full = np.cumsum([layer["full"] for layer in row["layers"]])
            row["full"] = int(ends_full[-1]) if len(ends_full) else 0
            continue
        if [layer["name"] for layer in layers] != [layer["name"] for layer in row["layers"]]:
            raise SystemExit(f"ablation: {label} without {drop} has other device layers than with it")
        for layer, other in zip(row["layers"], layers):
            layer[f"-{drop}"] = other["cycles"]
        ends = np.cumsum([layer["cycles"] for layer in layers])
        delays = ends_full - ends  # > 0: the layer ends later with the pass
        own = np.array([layer["full"] - layer[f"-{drop}"] for layer in row["layers"]])
        k, j = int(np.argmax(delays)), int(np.argmax(own))
        row[f"-{drop}"] = {"total": int(ends[-1]), "worst_end": {"layer": row["layers"][k]["name"],
                                                                 "delay": int(delays[k]), "with": int(ends_full[k]),
                                                                 "without": int(ends[k])},
                           "worst_layer": {"layer": row["layers"][j]["name"], "delay": int(own[j]),
                                           "with": row["layers"][j]["full"],
                                           "without": row["layers"][j][f"-{drop}"]},
                           "layers_ending_later": [row["layers"][i]["name"] for i in np.flatnonzero(delays > 0)]}
    return row


def table1_model(shape: tuple[int, ...], folder: Path) -> Path:
    """A Table 1 layer as bench/table1.py builds it: an ONNX conv + ReLU."""
    import onnx
    from onnx import helper
    from onnx_util import model, rand

    c, h, w, k, kh, kw, s, pad = shape
    m = model([helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[kh, kw], strides=[s, s], pads=[pad] * 4),
               helper.make_node("Relu", ["y"], ["o"])], {"x": [1, c, h, w]}, {"o": None},
              {"w": rand(k, c, kh, kw, seed=1, scale=1 / np.sqrt(c * kh * kw)), "b": rand(k, seed=2, scale=0.1)})
    path = folder / f"table1_{h}x{w}_{kh}x{kw}_{c}_{k}.onnx"
    onnx.save(m, path)
    return path


def model_path(name: str) -> Path:
    """A Table 2 or light model by name, or an .onnx file (static input shapes) by its path."""
    from snowir.tools.bench_models import build as build_bench
    from snowir.tools.light_models import build as build_light

    if name.endswith(".onnx"):
        if not Path(name).is_file():
            raise SystemExit(f"ablation: {name}: no such file")
        return Path(name)
    return build_bench(name) if name in TABLE2 else build_light(name)


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

    from snowir.dialects import snowflake_asm as sf
    from snowir.driver.model_run import apply_pipeline
    from snowir.plan.shapes import ConvShape
    from snowir.tile.build import bare_conv_layer

    c, h, w, k, kh, kw, s, p = TABLE3_LAYER
    shape = ConvShape(c, h, w, k, kh, kw, s, s, p, p, p, p, True, 14)
    zeros = np.zeros((k, c, kh, kw), np.int16)
    module = ModuleOp([bare_conv_layer("conv", shape, zeros, np.zeros(k, np.int16), SnowflakeConfig())])
    apply_pipeline(module, f"tile-to-asm,{spec}")
    (image,) = [op for op in module.walk() if isinstance(op, sf.ImageOp)]
    return float(image.attributes["load_imbalance_pct"].value.data)


def print_ablation(rows: list[dict]) -> None:
    head = (f"{'model':<26} {'layers':>6} {'full':>12} " + " ".join(f"{'-' + a:>44}" for a in ABLATED) + "  exact")
    print(head)
    print(f"{'':<46} " + " ".join(f"{'total (%)':>17} {'worst end':>12} {'worst layer':>13}" for _ in ABLATED))
    print("-" * len(head))
    for r in rows:
        cells = []
        for a in ABLATED:
            d = r["-" + a]
            cells.append(f"{d['total']:>10,} ({100 * (d['total'] / r['full'] - 1):+5.1f}%) "
                         f"{d['worst_end']['delay']:>+12,} {d['worst_layer']['delay']:>+13,}")
        print(f"{r['model']:<26} {len(r['layers']):>6} {r['full']:>12,} " + " ".join(cells) + f"  {r['bit_exact']}")
    print("worst end: the most cycles a layer ends later with the pass than without (<= 0: none ends later);")
    print("worst layer: the most cycles one layer's own count grows (a linked layer that starts sooner can take")
    print("over its predecessor's CU tail). Layers by name in ablation.json.")
    late = [(r["model"], a, r["-" + a]) for r in rows for a in ABLATED if r["-" + a]["worst_end"]["delay"] > 0]
    for model, a, d in late:
        w = d["worst_end"]
        print(f"  SLOWER: {model}, {a}: {len(d['layers_ending_later'])} layer(s) end later, worst {w['layer']} at "
              f"{w['with']:,} with it, {w['without']:,} without (+{w['delay']:,})")
    if not late:
        print("no asm pass makes any layer end later")
    for a in ABLATED:  # the worst layer over every model, per pass
        model, w = max(((r["model"], r["-" + a]["worst_end"]) for r in rows), key=lambda mw: mw[1]["delay"])
        print(f"worst case of {a}: {model} layer {w['layer']} ends {w['delay']:+,} cycles later with it "
              f"({w['with']:,} against {w['without']:,})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="?", const="all", default="",
                    help="also these models (comma-separated names, or .onnx paths with static input shapes; "
                         "alone: the Table 2 models and the nine light models)")
    ap.add_argument("--no-table1", action="store_true")
    ap.add_argument("--no-table3", action="store_true")
    ap.add_argument("--check", action="store_true", help="check every run bit-exact against golden (slower)")
    add_output_options(ap, "ablation.json")
    args = ap.parse_args()
    names = [*TABLE2, *LIGHT] if args.models == "all" else [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in (*TABLE2, *LIGHT) and not n.endswith(".onnx")]
    if unknown:
        ap.error(f"unknown model {unknown[0]} (known: {', '.join((*TABLE2, *LIGHT))}, or an .onnx path)")
    speed = machine_speed()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        jobs = [(f"T1 {h}x{w},{kh}x{kw},{c}->{k}", lambda shape=(c, h, w, k, kh, kw, s, p): table1_model(shape, Path(tmp)))
                for c, h, w, k, kh, kw, s, p in ([] if args.no_table1 else TABLE1)]
        jobs += [(Path(name).name if name.endswith(".onnx") else name, lambda name=name: model_path(name))
                 for name in names]
        for i, (label, path) in enumerate(jobs, 1):
            print(f"[{i}/{len(jobs)}] {label}", file=sys.stderr, flush=True)
            rows.append(ablate(label, path(), args.check))
            # written as each model finishes: a long run stopped early keeps what it measured
            output_file(args, "ablation.json").write_text(json.dumps({"ablation": rows, "partial": True}, indent=2) + "\n")
    print_ablation(rows)
    t3 = [] if args.no_table3 else table3()
    if t3:
        print()
        print(f"{'C17 Table 3 (1x1 1024->2048 /2)':<32} {'C_L %':>7} {'cycles':>10} {'speed-up':>8}")
        for r in sorted(t3, key=lambda r: -r["load_imbalance_pct"]):
            print(f"{r['variant']:<32} {r['load_imbalance_pct']:>7.1f} {r['cycles']:>10,} {r['speedup']:>8.3f}")
        print("paper (C_L % -> speed-up): " + ", ".join(f"{c}% -> {v:.3f}" for c, v in PAPER_TABLE3[::-1]))
    speed = machine_speed(speed)
    print(speed_line(speed))
    compile_s = sum(r["seconds"]["full"]["compile"] for r in rows)
    print(f"compile s of snowflake-lower over these models: {compile_s:.1f} = {loop_units(compile_s, speed):.1f} "
          "loop-units")
    output_file(args, "ablation.json").write_text(
        json.dumps(with_speed({"ablation": rows, "table3": t3}, speed), indent=2) + "\n")


if __name__ == "__main__":
    main()
