"""
Depthwise convs of any width and column-tiled layers (issue 28 item 6) on the machine model:
each layer as an exporter writes it (a depthwise conv behind a 1x1 conv, or a plain conv), its
placement, simulated cycles against the planner's estimate and the host's, useful-MAC
utilisation and the column bands it runs in. The 736 x 1280 conv is compiled and estimated;
`--simulate-large` runs it too. Prints a table, writes columns.json:

    python bench/columns.py [--simulate-large] [--out DIR | --update-results]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import onnx
from onnx import helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from onnx_util import model, rand  # noqa: E402

from xdsl.dialects.builtin import StringAttr  # noqa: E402

from snowir.dialects import nn, tile  # noqa: E402
from snowir.driver.model_api import compile as compile_model  # noqa: E402
from snowir.driver.model_run import load_model  # noqa: E402
from snowir.host_model import host_ms  # noqa: E402
from snowir.tile.read import conv_plan_of  # noqa: E402
from snowir.hw import SnowflakeConfig  # noqa: E402
from snowir.tools.snow_opt import main as snow_opt  # noqa: E402

from _output import add_output_options, machine_speed, output_file, speed_line, with_speed  # noqa: E402
from depthwise import summed_layer  # noqa: E402

LAYERS = [  # name, (C, H, W, K, kernel, groups), simulated unless large
    ("depthwise 3x3, 8 ch, 56x56", (8, 56, 56, 8, 3, 8), False),
    ("depthwise 3x3, 88 ch, 28x28", (88, 28, 28, 88, 3, 88), False),
    ("depthwise 3x3, 200 ch, 14x14", (200, 14, 14, 200, 3, 200), False),
    ("depthwise 5x5, 240 ch, 20x80", (240, 20, 80, 240, 5, 240), False),
    ("depthwise 5x5, 480 ch, 10x40", (480, 10, 40, 480, 5, 480), False),
    ("3x3, 32->32, 8x2200", (32, 8, 2200, 32, 3, 1), False),
    ("3x3, 32->32, 736x1280", (32, 736, 1280, 32, 3, 1), True),
]


def _net(c: int, h: int, w: int, k: int, kernel: int, groups: int) -> onnx.ModelProto:
    """The layer as `dw` (a depthwise conv between two 1x1 convs, as an exporter writes a mobile
    block: nothing the host reads, so no DRAM round trip weighs on its placement)."""
    n = helper.make_node
    nodes, inits, src = [], {}, "x"
    if groups > 1:
        nodes += [n("Conv", ["x", "w0", "b0"], ["c0"], name="expand"), n("Relu", ["c0"], ["r0"])]
        inits |= {"w0": rand(c, c, 1, 1, scale=0.3 / c ** 0.5), "b0": rand(c, seed=1, scale=0.1)}
        src = "r0"
    nodes += [n("Conv", [src, "w1", "b1"], ["c1"], name="dw", pads=[kernel // 2] * 4, group=groups),
              n("Relu", ["c1"], ["r1" if groups > 1 else "y"])]
    inits |= {"w1": rand(k, c // groups, kernel, kernel, seed=2, scale=0.3 / (c // groups * kernel * kernel) ** 0.5),
              "b1": rand(k, seed=3, scale=0.1)}
    if groups > 1:
        nodes.append(n("Conv", ["r1", "w2", "b2"], ["y"], name="project"))
        inits |= {"w2": rand(k, k, 1, 1, seed=4, scale=0.3 / k ** 0.5), "b2": rand(k, seed=5, scale=0.1)}
    return model(nodes, {"x": [1, c, h, w]}, {"y": [1, k, h, w]}, inits)


def _tile_facts(path: Path, tmp: Path, hw: SnowflakeConfig) -> tuple[int, float, float]:
    """(column bands, planner's estimated cycles, host estimate ms) of layer `dw`."""
    out = tmp / "t.mlir"
    assert snow_opt([str(path), "-p", "nn-prepare,nn-to-tile,tile-loop-order", "-o", str(out)]) == 0
    module, _ = load_model(out)
    (layer,) = [o for o in module.walk() if isinstance(o, tile.LayerOp) and o.sym_name.data == "dw"]
    bands = len({mt.out_cols for mt in layer.body.block.ops if isinstance(mt, tile.MapsTileOp)})
    (conv,) = [o for o in load_model(path)[0].walk() if isinstance(o, nn.Conv2dOp)
               and o.attributes.get("onnx_node") == StringAttr("dw")]
    return bands, conv_plan_of(layer).estimated_cycles(hw), host_ms(conv)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--simulate-large", action="store_true", help="simulate the 736 x 1280 conv too")
    add_output_options(p, "columns.json")
    args = p.parse_args()
    speed = machine_speed()  # the machine, in the run whose seconds it qualifies
    hw = SnowflakeConfig()
    rows = []
    for name, (c, h, w, k, kernel, groups), large in LAYERS:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "m.onnx"
            onnx.save(_net(c, h, w, k, kernel, groups), path)
            bands, estimate, host = _tile_facts(path, Path(tmp), hw)
            t0 = time.perf_counter()
            compiled = compile_model(path, hw=hw)
            compile_s = time.perf_counter() - t0
            row = {"layer": name, "bands": bands, "estimated_cycles": round(estimate), "host_ms": host,
                   "compile_s": round(compile_s, 2)}
            if not large or args.simulate_large:
                t0 = time.perf_counter()
                result = compiled.run(check=True)
                report = result.report.to_json()
                dw = summed_layer(report, "dw")  # its 16-channel slices summed, where it runs as them
                row |= {"where": dw["where"], "cycles": dw["cycles"], "ms": dw["ms"], "useful_macs": dw["macs"],
                        "useful_mac_util_pct": 100 * dw["macs"] / (dw["cycles"] * hw.macs) if dw["cycles"] else 0.0,
                        "bit_exact": bool(report["check"]["golden_bit_exact"]),
                        "simulate_s": round(time.perf_counter() - t0, 2)}
            rows.append(row)
            print(row, file=sys.stderr)
    head = (f"{'layer':<30} {'where':>6} {'bands':>5} {'cycles':>11} {'estimate':>11} {'ms':>8} {'host ms':>8} "
            f"{'util%':>6} {'exact':>5} {'compile s':>9}")
    print(head)
    print("-" * len(head))
    for r in rows:
        sim = "cycles" in r
        print(f"{r['layer']:<30} {r.get('where', '-'):>6} {r['bands']:>5} "
              f"{(format(r['cycles'], ',') if sim else '-'):>11} {r['estimated_cycles']:>11,} "
              f"{(format(r['ms'], '.3f') if sim else format(hw.cycles_to_ms(r['estimated_cycles']), '.3f') + '*'):>8} "
              f"{r['host_ms']:>8.3f} "
              f"{(format(r['useful_mac_util_pct'], '.1f') if sim else '-'):>6} {str(r.get('bit_exact', '-')):>5} "
              f"{r['compile_s']:>9.2f}")
    print("* estimated (not simulated: --simulate-large)")
    speed = machine_speed(speed)  # again at the end: a load that came or went shows
    print(speed_line(speed))
    out = output_file(args, "columns.json")
    out.write_text(json.dumps(with_speed({"rows": rows}, speed), indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
