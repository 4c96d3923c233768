"""
Simulator speed: simulated instructions per second of the fast and the reference engine
on a long scalar loop and on a MAC loop nest (a 3x3 16->16 convolution, tools/asm_kernels.py).

    python bench/sim_speed.py [--quick]     # prints a table, writes bench/results/sim_speed.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time


from snowir import api
from snowir.hw import SnowflakeConfig
from snowir.machine.image import assemble
from snowir.machine.run import run_image
from snowir.tools.asm_kernels import conv3x3, scalar_loop



def measure(name: str, kernel, engine: str, repeat: int = 3) -> dict:
    module = api.parse_text(kernel.text)
    image = assemble(module)
    best = None
    for _ in range(repeat):
        r = run_image(image, engine=engine, inputs=kernel.inputs, module=module)
        if best is None or r.simulate_s < best.simulate_s:
            best = r
    hw = SnowflakeConfig()
    return {"kernel": name, "engine": engine, "dynamic_instructions": best.machine.dynamic,
            "simulate_s": best.simulate_s, "minstr_per_s": best.machine.dynamic / best.simulate_s / 1e6,
            "cycles": best.cycles, "ms": hw.cycles_to_ms(best.cycles),
            "mac_utilization": best.timing.macs / (best.cycles * hw.macs)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", help="directory for sim_speed.json (default: bench/results)")
    args = p.parse_args()
    big = not args.quick
    cases = [
        ("scalar loop", scalar_loop(400_000 if big else 40_000), "fast"),
        ("scalar loop", scalar_loop(40_000 if big else 4_000), "reference"),
        ("conv 3x3 16->16 on 34x34", conv3x3(34, 34), "fast"),
        ("conv 3x3 16->16 on 18x18", conv3x3(18, 18), "reference"),
    ]
    rows = []
    t0 = time.perf_counter()
    for name, kernel, engine in cases:
        rows.append(measure(name, kernel, engine, 3 if big else 1))
        print(f"  measured {name} / {engine}", flush=True)
    head = f"{'kernel':<26} {'engine':<10} {'instr':>10} {'sim s':>8} {'M instr/s':>10} {'cycles':>10} {'sim ms':>8} {'MAC util':>8}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['kernel']:<26} {r['engine']:<10} {r['dynamic_instructions']:>10,} {r['simulate_s']:>8.3f} "
              f"{r['minstr_per_s']:>10.2f} {r['cycles']:>10,} {r['ms']:>8.3f} {100 * r['mac_utilization']:>7.1f}%")
    from snowir.tools.io import bench_output

    out = bench_output(__file__, "sim_speed.json", args.out)
    out.write_text(json.dumps({"machine": platform.processor() or platform.machine(), "python": platform.python_version(),
                               "bench_s": time.perf_counter() - t0, "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
