"""
Whole-model programs against one program per layer (issue 27): for each C17 Table 2 model, the
default lowering (one instruction stream per device segment over a model DRAM plan) and
`snowflake-lower{whole-model=false}` (one program per layer, the host copying every tensor
between them), on the default machine, both checked bit-exact against the golden model.

Columns: device segments, conv cycles of each (conv + max-pool layers, as bench/models.py),
cycles won, the bytes the host no longer copies (every device layer's input and residual written
into its image and its output read back, per image of the batch), compile and simulate seconds.

    python bench/whole_model.py [--out DIR | --update-results] [--models alexnet_owt,resnet18]
        # table + whole_model.json in build/bench/ (bench/results/ with --update-results)
"""

from __future__ import annotations

import json
import time

from snowir.dialects import snowflake_asm as sf
from snowir.driver.model_api import run_model_on_device
from snowir.hw import SnowflakeConfig
from snowir.tools.bench_models import build as build_bench
from snowir.tools.light_models import build as build_light

from _output import add_output_options, forget_blobs, machine_speed, output_file, speed_line, with_speed

MODELS = {"alexnet_owt": build_bench, "resnet18": build_bench, "resnet50": build_light}


def _conv(report: dict) -> list[dict]:
    return [layer for layer in report["layers"] if layer["cycles"] and layer["op"] != "dense"]


def _elements(shape) -> int:
    count = 1
    for d in shape:
        count *= int(d)
    return count


def _host_copies(module) -> int:
    """Bytes the layer-by-layer host moves: every device layer's input (and residual) written
    into its image, its output (a fused pool's) read back."""
    from snowir.dialects import nn
    from snowir.segments import main_of
    from snowir.tile.build import device_input

    total, seen = 0, set()
    for op in main_of(module).body.block.ops:
        image = op.attributes.get("image")
        if not isinstance(op, nn.Conv2dOp | nn.MaxPoolOp) or image is None:
            continue
        if image.data not in seen:  # a fused pool's image is its conv's: inputs once
            seen.add(image.data)
            ins = [device_input(op)] + ([op.bypass] if isinstance(op, nn.Conv2dOp) and op.bypass is not None else [])
            total += sum(2 * _elements(v.type.get_shape()) for v in ins)
        users = [u.operation for u in op.results[0].uses]
        if not (len(users) == 1 and users[0].attributes.get("image") == image):  # not read by its fused pool
            total += 2 * _elements(op.results[0].type.get_shape())
    return total


def main() -> None:
    import argparse

    p = argparse.ArgumentParser()
    add_output_options(p, "whole_model.json")
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated, of " + ", ".join(MODELS))
    args = p.parse_args()
    speed = machine_speed()  # the machine, in the run whose seconds it qualifies
    hw = SnowflakeConfig()
    rows = []
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        path = MODELS[name](name)
        row: dict = {"model": name}
        for label, pipeline in (("whole", None), ("layers", "snowflake-lower{whole-model=false}")):
            print(f"  {name}: {label} ...", flush=True)
            t0 = time.perf_counter()
            run = run_model_on_device(path, pipeline=pipeline, check=True, hw=hw)
            r = run.report
            row[label] = {"conv_cycles": sum(layer["cycles"] for layer in _conv(r)),
                          "conv_ms": hw.cycles_to_ms(sum(layer["cycles"] for layer in _conv(r))),
                          "cycles": r["total"]["cycles"], "dram_bytes": r["total"]["dram_bytes"],
                          "compile_s": r["total"]["compile_s"], "simulate_s": r["total"]["simulate_s"],
                          "wall_s": time.perf_counter() - t0, "bit_exact": r["check"]["golden_bit_exact"],
                          "programs": sum(1 for op in run.module.ops if isinstance(op, sf.ImageOp))}
            if label == "layers":
                row["host_copied_bytes"] = _host_copies(run.module)
            del run, r
            forget_blobs()  # one run's weights at a time
        row["cycles_won"] = row["layers"]["conv_cycles"] - row["whole"]["conv_cycles"]
        rows.append(row)
    head = (f"{'model':<12} {'segments':>8} {'conv ms':>8} {'per-layer':>9} {'won cyc':>8} {'host MB':>8} "
            f"{'compile s':>9} {'(layers)':>8} {'sim s':>6} {'(layers)':>8} {'bit-exact':>9}")
    print(head)
    print("-" * len(head))
    for r in rows:
        w, lay = r["whole"], r["layers"]
        print(f"{r['model']:<12} {w['programs']:>8} {w['conv_ms']:>8.2f} {lay['conv_ms']:>9.2f} {r['cycles_won']:>8} "
              f"{r['host_copied_bytes'] / 1e6:>8.2f} {w['compile_s']:>9.2f} {lay['compile_s']:>8.2f} "
              f"{w['simulate_s']:>6.1f} {lay['simulate_s']:>8.1f} {str(w['bit_exact'] and lay['bit_exact']):>9}")
    speed = machine_speed(speed)  # again at the end: a load that came or went shows
    print(speed_line(speed))
    output_file(args, "whole_model.json").write_text(json.dumps(with_speed(rows, speed), indent=2) + "\n")


if __name__ == "__main__":
    main()
