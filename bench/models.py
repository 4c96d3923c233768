"""
C17 Table 2 models on the machine model: simulated ms of the conv (+ max-pool) layers, GB/s,
MAC utilisation, compile and simulator seconds, against the paper's compiler (Table 2) and the
padding-free compute bound. FC layers (op "dense", run as convs) run too but, as in the paper,
are not in the conv time.
Models that cannot be lowered yet are listed with the reason.

    python bench/models.py [--out DIR | --update-results]   # table + models.json in build/bench/
                                                            # (bench/results/ with --update-results)
"""

from __future__ import annotations

import json
import time

from snowir.driver.model_api import run_model_on_device
from snowir.errors import SnowError
from snowir.hw import SnowflakeConfig
from snowir.tools.bench_models import build as build_bench
from snowir.tools.light_models import build as build_light

from _output import add_output_options, forget_blobs, machine_speed, output_file, speed_line, with_speed

PAPER = {"alexnet_owt": (10.68, 9.36, 1.22), "resnet18": (46.77, 26.30, 2.25), "resnet50": (218.61, 61.66, 1.87)}


def main() -> None:
    import argparse

    p = argparse.ArgumentParser()
    add_output_options(p, "models.json")
    args = p.parse_args()
    speed = machine_speed()  # the machine, in the run whose seconds it qualifies
    hw = SnowflakeConfig()
    rows = []
    for name, path_fn in (("alexnet_owt", lambda: build_bench("alexnet_owt")), ("resnet18", lambda: build_bench("resnet18")),
                          ("resnet50", lambda: build_light("resnet50"))):
        paper_ms, bound_ms, paper_gbps = PAPER[name]
        t0 = time.perf_counter()
        try:
            r = run_model_on_device(path_fn(), check=True, hw=hw,
                                    progress=lambda m: print(f"  {name}: {m}", flush=True)).report
        except SnowError as e:
            rows.append({"model": name, "error": str(e), "paper_ms": paper_ms})
            print(f"  {name}: not lowered: {e}")
            continue
        finally:
            forget_blobs()  # one model's weights at a time
        conv = [layer for layer in r["layers"] if layer["cycles"] and layer["op"] != "dense"]
        cycles = sum(layer["cycles"] for layer in conv)
        ms = hw.cycles_to_ms(cycles)
        dram = sum(layer["dram_bytes"] for layer in conv)
        macs = sum(layer["macs"] for layer in conv)
        rows.append({"model": name, "conv_ms": ms, "paper_ms": paper_ms, "bound_ms": bound_ms,
                     "conv_gbps": dram / (ms * 1e6), "paper_gbps": paper_gbps,
                     "conv_mac_utilization": macs / (cycles * hw.macs), "all_layers_ms": r["total"]["ms"],
                     "compile_s": r["total"]["compile_s"], "simulate_s": r["total"]["simulate_s"],
                     "wall_s": time.perf_counter() - t0, "check": r["check"], "layers": r["layers"]})
    head = f"{'model':<12} {'conv ms':>8} {'paper ms':>8} {'bound ms':>8} {'GB/s':>5} {'paper':>5} {'MAC util':>8} {'all ms':>7} {'compile s':>9} {'sim s':>6} {'bit-exact':>9}"
    print(head)
    print("-" * len(head))
    for r in rows:
        if "error" in r:
            print(f"{r['model']:<12} not lowered yet: {r['error'].split(': ', 1)[-1]}")
            continue
        print(f"{r['model']:<12} {r['conv_ms']:>8.2f} {r['paper_ms']:>8.2f} {r['bound_ms']:>8.2f} {r['conv_gbps']:>5.2f} "
              f"{r['paper_gbps']:>5.2f} {100 * r['conv_mac_utilization']:>7.1f}% {r['all_layers_ms']:>7.2f} "
              f"{r['compile_s']:>9.2f} {r['simulate_s']:>6.1f} {str(r['check']['golden_bit_exact']):>9}")
    speed = machine_speed(speed)  # again at the end: a load that came or went shows
    print(speed_line(speed))
    output_file(args, "models.json").write_text(json.dumps(with_speed(rows, speed), indent=2) + "\n")


if __name__ == "__main__":
    main()
