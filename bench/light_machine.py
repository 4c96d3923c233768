"""
The nine light models end to end on the machine model: compile every device layer, run it,
compare it bit for bit with the golden model and the logits with onnxruntime. Prints simulated
ms (all layers), device vs host conv counts, SNR, compile and simulator seconds; writes
light_machine.json. Takes several minutes (VGG-19 alone ~20 GMACs).

    python bench/light_machine.py [names...] [--out DIR | --update-results]   # build/bench/ or bench/results/
"""

from __future__ import annotations

import collections
import json
import time

from xdsl.utils.exceptions import PassFailedException

from snowir.driver.model_api import run_model_on_device
from snowir.errors import SnowError
from snowir.tools.light_models import NAMES, build

from _output import add_output_options, forget_blobs, machine_speed, output_file, speed_line, with_speed


def main() -> None:
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("names", nargs="*", default=list(NAMES))
    add_output_options(p, "light_machine.json")
    args = p.parse_args()
    speed = machine_speed()  # the machine, in the run whose seconds it qualifies
    names = args.names
    rows = []
    for name in names:
        t0 = time.perf_counter()
        try:
            r = run_model_on_device(build(name), check=True).report  # the run's module is not kept
        except (SnowError, PassFailedException) as e:  # a pass's refusal (VGG-19: DRAM) ends that model only
            rows.append({"model": name, "error": str(e)})
            print(f"  {name}: {e}", flush=True)
            continue
        finally:
            forget_blobs()  # one model's weights at a time
        ops = collections.Counter((layer["op"], layer["where"]) for layer in r["layers"])
        rows.append({"model": name, "ms": r["total"]["ms"], "snr_db": r["check"]["snr_db"],
                     "golden_bit_exact": r["check"]["golden_bit_exact"], "top1_match": r["check"]["top1_match"],
                     "device_convs": ops[("conv2d", "device")], "host_convs": ops[("conv2d", "host")],
                     "max_pools": ops[("max_pool", "device")], "host_ops": sum(v for k, v in ops.items() if k[1] == "host"),
                     "host_ms": r["total"]["host_ms"],
                     "mac_utilization": r["total"]["mac_utilization"], "gbps": r["total"]["gbps"],
                     "compile_s": r["total"]["compile_s"], "simulate_s": r["total"]["simulate_s"],
                     "wall_s": time.perf_counter() - t0})
        print(f"  {name}: {r['total']['ms']:.2f} ms, bit-exact {r['check']['golden_bit_exact']}", flush=True)
    head = f"{'model':<14} {'ms':>8} {'SNR dB':>7} {'exact':>5} {'dev conv':>8} {'host conv':>9} {'MAC util':>8} {'GB/s':>5} {'sim s':>6}"
    print(head)
    print("-" * len(head))
    for r in rows:
        if "error" in r:
            print(f"{r['model']:<14} {r['error']}")
            continue
        print(f"{r['model']:<14} {r['ms']:>8.2f} {r['snr_db']:>7.1f} {str(r['golden_bit_exact']):>5} {r['device_convs']:>8} "
              f"{r['host_convs']:>9} {100 * r['mac_utilization']:>7.1f}% {r['gbps']:>5.2f} {r['simulate_s']:>6.1f}")
    speed = machine_speed(speed)  # again at the end: a load that came or went shows
    print(speed_line(speed))
    output_file(args, "light_machine.json").write_text(json.dumps(with_speed(rows, speed), indent=2) + "\n")


if __name__ == "__main__":
    main()
