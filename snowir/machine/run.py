"""
Running a program image on the machine model and reporting what the hardware did.
`run_image` is the Python API behind `snow-run` for snowflake_asm-level inputs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from snowir.dialects import snowflake_asm as sf
from snowir.hw import SnowflakeConfig
from snowir.machine.core import Machine
from snowir.machine.fast import run_fast
from snowir.machine.image import ProgramImage, disassemble
from snowir.machine.reference import run_reference
from snowir.machine.state import MachineFault
from snowir.machine.timing import STALL_CAUSES

Engine = Literal["fast", "reference"]

DEFAULT_MAX_INSTRUCTIONS = 500_000_000
"""Dynamic instructions after which a run stops with a fault naming pc and instruction: an endless
program ends by itself, within about half a minute on the fast engine (which runs an endless
scalar loop at about 19 M instructions a second); ResNet-50's whole model executes 5.6 M."""


@dataclass
class RunResult:
    machine: Machine
    outputs: dict[str, np.ndarray]
    cycles: int
    simulate_s: float
    engine: str
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def timing(self):
        return self.machine.timing


def default_inputs(image: ProgramImage, seed: int = 0) -> dict[str, np.ndarray]:
    """A fixed seeded input per input segment: values uniform in [-1, 1) in the program's Qm.n."""
    rng = np.random.default_rng(seed)
    scale = 1 << image.frac_bits
    return {s.name: rng.integers(-scale, scale, size=s.size // 2).astype(np.int16)
            for s in image.of_kind(sf.SegmentKind.INPUT)}


def run_engine(machine: Machine, engine: Engine, program: Callable[[], ModuleOp | sf.ImageOp],
               max_instructions: int | None) -> None:
    """Run `machine`'s image on `engine` (`program`: the module the reference engine interprets,
    made only for it); a fault names where its instruction came from (ProgramImage.sources)."""
    try:
        if engine == "reference":
            run_reference(machine, program(), max_instructions)
        elif engine == "fast":
            run_fast(machine, max_instructions)
        else:
            raise ValueError(f"unknown engine '{engine}' (fast, reference)")
    except MachineFault as fault:
        raise fault.located(machine.image.source(fault.pc)) from None


def run_image(image: ProgramImage, hw: SnowflakeConfig | None = None, engine: Engine = "fast",
              inputs: dict[str, np.ndarray] | None = None, record: bool = False,
              module: ModuleOp | None = None, max_instructions: int | None = DEFAULT_MAX_INSTRUCTIONS,
              progress: Callable[[int, int], None] | None = None) -> RunResult:
    hw = hw or SnowflakeConfig()
    image.check_machine(hw)
    machine = Machine(image, hw, record)
    machine.set_progress(progress)
    for name, data in (default_inputs(image) if inputs is None else inputs).items():
        machine.write_segment(name, data)
    start = time.perf_counter()
    run_engine(machine, engine, lambda: module if module is not None else disassemble(image), max_instructions)
    elapsed = time.perf_counter() - start
    machine.timing.finish()
    outputs = {s.name: machine.read_segment(s.name) for s in image.of_kind(sf.SegmentKind.OUTPUT)}
    return RunResult(machine, outputs, machine.timing.total_cycles(), elapsed, engine)


def program_report(result: RunResult, hw: SnowflakeConfig, model: str, compile_s: float = 0.0) -> dict[str, Any]:
    """The JSON report (docs/machine.md, "Report fields") of a program run (one `layers` entry: the program)."""
    t = result.timing
    cycles = result.cycles
    ms = hw.cycles_to_ms(cycles)
    dram = t.dram_bytes
    total = {
        "cycles": cycles,
        "ms": ms,
        "host_ms": 0.0,
        "macs": t.macs,
        "lane_macs": t.lane_macs,
        "mac_utilization": t.macs / (cycles * hw.macs) if cycles else 0.0,
        "dram_bytes": dram,
        "gbps": dram / (ms * 1e6) if ms else 0.0,
        "static_instructions": result.machine.n,
        "dynamic_instructions": result.machine.dynamic,
        "stall_cycles": stall_breakdown(t.stalls),
        "compile_s": compile_s,
        "simulate_s": result.simulate_s,
    }
    layer = {k: total[k] for k in ("cycles", "ms", "macs", "lane_macs", "mac_utilization", "dram_bytes", "gbps",
                                   "stall_cycles")}
    # of the values the program wrote back (MAC and MAX), those its write-backs saturated
    saturated, written = result.machine.state.saturated, t.writeback_bytes // 2
    layer.update({"name": result.machine.image.name, "op": "program", "where": "device", "host_ms": None,
                  "mode": None, "loop_order": None, "load_imbalance_pct": imbalance(t.unit_bytes), "format": None,
                  "saturated": saturated, "saturated_share": saturated / written if written else 0.0})
    return {"model": model, "hw": hw.to_json(), "total": total, "layers": [layer], "check": None}


def stall_breakdown(stalls: dict[str, int]) -> dict[str, int]:
    """Every stall cause of `STALL_CAUSES`, in that order (0 where none)."""
    return {cause: int(stalls.get(cause, 0)) for cause in STALL_CAUSES}


def imbalance(per_unit: list[int]) -> float | None:
    """The paper's C_L = (L_max / mean - 1) * 100% over the bytes each load unit moved."""
    if not per_unit or sum(per_unit) == 0:
        return None
    mean = sum(per_unit) / len(per_unit)
    return (max(per_unit) / mean - 1.0) * 100.0
