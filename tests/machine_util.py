"""Helpers for machine-model tests: assemble snippets, run them on one or both engines."""

from __future__ import annotations

import numpy as np

from snowir import api
from snowir.hw import SnowflakeConfig
from snowir.machine.image import assemble
from snowir.machine.run import RunResult, run_image


def program(body: str, segments: str = "", frac_bits: int = 8):
    text = f"{segments}\nsnowflake_asm.program @p frac_bits {frac_bits} {{\n{body}\n}}\n"
    if frac_bits == 8:
        text = text.replace(" frac_bits 8 ", " ")
    module = api.parse_text(text)
    module.verify()
    return assemble(module), module


def run(body: str, segments: str = "", engine: str = "fast", hw: SnowflakeConfig | None = None,
        inputs: dict[str, np.ndarray] | None = None, frac_bits: int = 8) -> RunResult:
    image, module = program(body, segments, frac_bits)
    result = run_image(image, hw, engine, inputs or {}, module=module)
    assert_within_bus(result)
    return result


def assert_within_bus(result: RunResult) -> None:
    """Nothing moves more bytes than the configured bus can in the program's cycles."""
    hw = result.machine.hw
    assert result.timing.dram_bytes <= result.cycles * hw.dram_bytes_per_cycle + 1e-6


def run_both(body: str, segments: str = "", hw: SnowflakeConfig | None = None,
             inputs: dict[str, np.ndarray] | None = None) -> RunResult:
    """Run on both engines, assert identical architectural state and timing, return the fast result."""
    ref = run(body, segments, "reference", hw, inputs)
    fast = run(body, segments, "fast", hw, inputs)
    assert_same(ref, fast)
    return fast


def assert_same(a: RunResult, b: RunResult) -> None:
    sa, sb = a.machine.state, b.machine.state
    assert sa.regs == sb.regs
    assert np.array_equal(sa.dram, sb.dram)
    assert np.array_equal(sa.maps, sb.maps) and np.array_equal(sa.weights, sb.weights)
    assert sa.saturated == sb.saturated, (sa.saturated, sb.saturated)  # write-back values clipped
    assert a.cycles == b.cycles, (a.cycles, b.cycles)
    assert dict(a.timing.stalls) == dict(b.timing.stalls)
    assert a.machine.dynamic == b.machine.dynamic
    assert a.timing.macs == b.timing.macs
    for counter in ("lane_macs", "busy_cycles", "load_bytes", "store_bytes", "writeback_bytes", "end"):
        assert getattr(a.timing, counter) == getattr(b.timing, counter), counter
    assert a.timing.page_written == b.timing.page_written  # when each DRAM page's last write lands


def movi(reg: int, value: int) -> str:
    return f"snowflake_asm.movi r{reg}, {value}"
