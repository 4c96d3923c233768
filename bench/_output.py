"""
Where a bench writes its results, and how it keeps its memory to one model at a time.

A bench run writes to build/bench/ (git-ignored), so the commands in README.md and docs/ never
rewrite tracked files by accident; `--update-results` writes the tracked copies in bench/results/
(and, for dse_scaling, docs/img/) that the docs quote; `--out DIR` writes anywhere else.
"""

from __future__ import annotations

import argparse
import gc
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
