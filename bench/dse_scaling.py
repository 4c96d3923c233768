"""
Scaling study on snow-dse: AlexNet-OWT and ResNet-50 conv time (device layers but fully
connected ones, C17 Table 2's measure) for 1 / 2 / 4 / 8 / 16 CUs (4 vMACs each: 0.25x to 4x
the ZC706 build's MACs) at 4.2 and 8.4 GB/s of shared DRAM bandwidth, each against its bound on that machine
(`conv_bound_ms`: the conv layers' compute or compulsory traffic, whichever is larger, summed;
snowir/driver/bound.py) and the share of it reached.

    python bench/dse_scaling.py [--workers N] [--work DIR] [--out DIR | --update-results]
        # runs (or reuses, from DIR: build/dse) the sweeps; table, dse_scaling.json and scaling.png in
        # build/bench/ (with --update-results: bench/results/dse_scaling.json and docs/img/scaling.png)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from snowir.driver import dse
from snowir.hw import SnowflakeConfig
from snowir.tools.bench_models import build as build_bench
from snowir.tools.light_models import build as build_light

from _output import add_output_options, output_dir

CUS = (1, 2, 4, 8, 16)
BUSES = (4.2, 8.4)
ROOT = Path(__file__).resolve().parent.parent


def sweep(name: str, model: Path, out: Path, workers: int) -> list[dict]:
    hws = dse.configs(SnowflakeConfig(), [dse.Sweep("cus", CUS), dse.Sweep("dram_gbps", BUSES)])
    explorer = dse.Explorer(str(model), out / name, workers=workers,
                            progress=lambda msg: print(f"  {name}: {msg}", flush=True))
    return explorer.run(hws)


def plot(results: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5.2 * len(results), 3.9))
    for ax, (name, rows) in zip(axes, results.items()):
        base = next(r for r in rows if r["cus"] == 4 and r["dram_gbps"] == 4.2)
        for bus, colour in zip(BUSES, ("tab:blue", "tab:orange")):
            pts = sorted((r["cus"], r["conv_ms"]) for r in rows if r["dram_gbps"] == bus)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=colour, label=f"{bus} GB/s")
        ax.plot(CUS, [base["conv_ms"] * 4 / c for c in CUS], "k--", lw=1, label="linear in CUs (from 4)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(CUS, [str(c) for c in CUS])
        ax.set_xlabel("CUs (4 vMACs each; the ZC706 build has 4)")
        ax.set_ylabel("conv ms")
        ax.set_title(name)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=0, help="Ray workers (0: one per core; 1: no Ray)")
    p.add_argument("--work", type=Path, default=ROOT / "build" / "dse", help="the sweeps' folders and cache")
    p.add_argument("--plot", type=Path, help="the plot (default: scaling.png beside the JSON; "
                                             "docs/img/scaling.png with --update-results)")
    add_output_options(p, "dse_scaling.json")
    args = p.parse_args()
    out = output_dir(args)
    plot_path = args.plot or (ROOT / "docs" / "img" / "scaling.png" if args.update_results else out / "scaling.png")
    models = {"alexnet_owt": build_bench("alexnet_owt"), "resnet50": build_light("resnet50")}
    results = {name: sweep(name, path, args.work, args.workers) for name, path in models.items()}
    print(f"{'model':<12} {'CUs':>4} {'GB/s':>5} {'conv ms':>8} {'speed-up':>8} {'ideal':>6} {'GB/s used':>9} "
          f"{'MAC util %':>10} {'cu_load_wait %':>14} {'bound ms':>8} {'of bound':>8} {'overlapped':>10}")
    for name, rows in results.items():
        base = next(r for r in rows if r["cus"] == 4 and r["dram_gbps"] == 4.2)
        for r in sorted(rows, key=lambda r: (r["dram_gbps"], r["cus"])):
            wait = 100 * r["stall_cu_load_wait"] / r["cycles"] if r["cycles"] else 0.0
            print(f"{name:<12} {r['cus']:>4} {r['dram_gbps']:>5} {r['conv_ms']:>8.3f} "
                  f"{base['conv_ms'] / r['conv_ms']:>7.2f}x {r['cus'] / 4:>5.2f}x {r['gbps']:>9.2f} "
                  f"{100 * r['mac_utilization']:>10.1f} {wait:>13.1f}% {r['conv_bound_ms']:>8.3f} "
                  f"{100 * r['conv_bound_share']:>7.1f}% {r['conv_overlap_bound_ms']:>10.3f}")
    plot(results, plot_path)
    (out / "dse_scaling.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out / 'dse_scaling.json'} and {plot_path}")


if __name__ == "__main__":
    main()
