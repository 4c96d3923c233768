"""
Where a bench writes its results, and how it keeps its memory to one model at a time.

A bench run writes to build/bench/ (git-ignored), so the commands in README.md and docs/ never
rewrite tracked files by accident; `--update-results` writes the tracked copies in bench/results/
(and, for dse_scaling, docs/img/) that the docs quote; `--out DIR` writes anywhere else.

Seconds mean little on their own: the same ResNet-50 compile took 4.8 s on one machine and
15.4 s on another (issue 40). So every bench that times something also measures the machine in
the same run (`machine_speed`: a fixed pure-Python loop and a fixed numpy kernel), prints it
with its table and writes it into its JSON (`with_speed`); a figure divided by the loop's
seconds is in *loop-units*, comparable across machines and across a busy and an idle one.
"""

from __future__ import annotations

import argparse
import gc
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "bench"
RESULTS = ROOT / "bench" / "results"


def add_output_options(parser: argparse.ArgumentParser, name: str) -> None:
    """`--out DIR` and `--update-results` for a bench writing `name`."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--out", type=Path, help=f"directory for {name} (default: build/bench)")
    tracked = (RESULTS / name).exists()  # what the help says is what the repository holds
    where.add_argument("--update-results", action="store_true",
                       help=f"write bench/results/{name}" + (", the tracked copy the docs quote" if tracked else
                                                              " (not tracked: no doc quotes it)"))


def output_dir(args: argparse.Namespace) -> Path:
    """The directory the options chose, created."""
    folder = args.out if args.out is not None else RESULTS if args.update_results else BUILD
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def output_file(args: argparse.Namespace, name: str) -> Path:
    return output_dir(args) / name


def forget_blobs() -> None:
    """Drop every weight blob of the models run so far, and the modules themselves. xDSL keeps
    blobs in one process-wide table that nothing empties, so a bench running several models one
    after the other held them all at once (light_machine.py: 8.1 GB); and IR is cyclic (ops
    point at their parents), so a dropped module's memory waits for the cycle collector. Call it
    only once nothing of the earlier modules is used again."""
    from snowir.resources import reset_blobs

    reset_blobs()
    gc.collect()  # tens of ms, a few times a model


SPEED_LOOP = 10_000_000
"""Iterations of `machine_speed`'s pure-Python loop: its seconds are one loop-unit."""
SPEED_MATMUL = 512
"""Side of `machine_speed`'s float64 matrices (the numpy kernel: 12 products)."""


def machine_speed(before: dict | None = None) -> dict:
    """How fast this machine runs Python and numpy now: the seconds of a fixed 10 M-iteration
    Python loop (`python_loop_s`, one loop-unit: what compiling and the golden model's
    bookkeeping scale with) and of a fixed numpy kernel (`numpy_kernel_s`: 12 float64 512x512
    matrix products, what the arithmetic scales with), each the best of two runs; about 1-4 s.
    The loop's CPU seconds are kept too (`python_loop_cpu_s_runs`): wall well above CPU says other
    processes shared the cores while the bench ran.

    A bench measures at its start and, passing that figure as `before`, again at its end: the
    figure is then the mean of the two (`*_runs` keeps both), and `speed_line` says when they
    differ by more than a quarter (other work on a shared machine came or went during the run,
    and its seconds compare less well)."""
    cpu: list[float] = []

    def loop() -> float:
        t0, c0 = time.perf_counter(), time.process_time()
        total = 0
        for i in range(SPEED_LOOP):
            total += i
        cpu.append(time.process_time() - c0)
        return time.perf_counter() - t0

    def kernel() -> float:
        import numpy as np

        a = np.random.default_rng(0).standard_normal((SPEED_MATMUL, SPEED_MATMUL))
        t0 = time.perf_counter()
        for _ in range(12):
            a = a @ a
            a /= np.abs(a).max()
        return time.perf_counter() - t0

    loops = [*(before["python_loop_s_runs"] if before else []), min(loop(), loop())]
    cpus = [*(before["python_loop_cpu_s_runs"] if before else []), min(cpu)]
    kernels = [*(before["numpy_kernel_s_runs"] if before else []), min(kernel(), kernel())]
    return {"python_loop_s": sum(loops) / len(loops), "python_loop_s_runs": loops,
            "python_loop_cpu_s_runs": cpus, "python_loop_iterations": SPEED_LOOP,
            "numpy_kernel_s": sum(kernels) / len(kernels), "numpy_kernel_s_runs": kernels,
            "numpy_kernel": f"12 float64 {SPEED_MATMUL}x{SPEED_MATMUL} matrix products"}


def speed_line(speed: dict) -> str:
    """The one line a bench prints under its table."""
    runs = speed["python_loop_s_runs"]
    drift = (f"; the loop took {runs[0]:.2f} s at the start and {runs[-1]:.2f} s at the end: the machine's load "
             f"changed, its seconds compare less well" if max(runs) > 1.25 * min(runs) else "")
    wall, cpu = speed["python_loop_s"], sum(speed["python_loop_cpu_s_runs"]) / len(speed["python_loop_cpu_s_runs"])
    if wall > 1.25 * cpu:
        drift += f"; the loop's wall time is {wall / cpu:.1f}x its CPU time: other processes shared the cores"
    return (f"machine speed: a {speed['python_loop_iterations'] // 1_000_000} M-iteration Python loop "
            f"{speed['python_loop_s']:.2f} s (1 loop-unit), numpy kernel {speed['numpy_kernel_s']:.3f} s "
            f"({speed['numpy_kernel']}); seconds / loop-unit compare across machines{drift}")


def loop_units(seconds: float, speed: dict) -> float:
    """`seconds` in loop-units of the machine `speed` was measured on."""
    return seconds / speed["python_loop_s"]


def with_speed(data: dict | list, speed: dict) -> dict | list:
    """`data` carrying `speed` under "machine_speed": a dict at its top, a list of rows in every
    row (those files stay lists, as tools/doc_tables.py reads them)."""
    if isinstance(data, dict):
        return {**data, "machine_speed": speed}
    return [{**row, "machine_speed": speed} for row in data]
