"""
Differential fuzzing of the two engines: 1000 seeded random programs that run (rather than
fault at once), covering every instruction kind, `ld icache` (a copy of the running block in
the other bank, and the forbidden load into the executing bank), TMOV, runs of vector ops
that fill the queue, LDs near regions pending vector ops read (region interlock: the LD
proceeds or faults), loads the next vector op waits for, and counted loops of up to ~60
iterations. Fast and reference must agree on registers, DRAM, buffers, cycles, stall counts
and the fault (pc and message) if any.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from machine_util import assert_same
from snowir import api
from snowir.machine.image import assemble
from snowir.machine.run import run_image
from snowir.machine.state import MachineFault

SEG = ("snowflake_asm.segment input @x at 0 size 8192\n"
       "snowflake_asm.segment output @y at 8192 size 16384\n")
PROGRAMS = 1000
BATCH = 50
NOP = "snowflake_asm.mov r0, r0"


class Gen:
    """Random straight-line code, loops and skips. r1..r6 are free scalars; r7 output,
    r11 maps, r12 weights, r13 MAX step, r14 length, r15 DRAM source: set right before use,
    so programs stay in range and mostly run to the end. r9/r10 count loops."""

    def __init__(self, seed: int, code_base: int):
        self.rng = np.random.default_rng(seed)
        self.code_base = code_base
        self.labels = 0

    def pick(self, *options):
        return options[int(self.rng.integers(len(options)))]

    def i(self, lo: int, hi: int) -> int:
        return int(self.rng.integers(lo, hi + 1))

    def body(self, depth: int) -> list[str]:
        lines: list[str] = []
        kinds = ["scalar"] * 4 + ["mac"] * 3 + ["max", "vmov", "ld", "ld", "tmov", "burst", "hazard", "icache"]
        if depth < 2:
            kinds += ["loop", "loop", "skip"]
        for _ in range(self.i(1, 7)):
            lines += getattr(self, "_" + self.pick(*kinds))(depth)
        return lines

    def _scalar(self, depth: int) -> list[str]:
        r = lambda: f"r{self.i(0, 6)}"  # noqa: E731
        return [self.pick(
            f"snowflake_asm.movi {r()}, {self.i(-64, 4000)}",
            f"snowflake_asm.{self.pick('add', 'mul')} {r()}, {r()}, {r()}",
            f"snowflake_asm.{self.pick('addi', 'muli')} {r()}, {r()}, {self.i(-300, 300)}",
            f"snowflake_asm.mov {r()}, {r()} shl {self.i(0, 3)}")]

    def _mac(self, depth: int, trace: int | None = None) -> list[str]:
        indp = self.rng.random() < 0.3
        trace = trace or (self.i(1, 60) if indp else self.i(1, 1023))
        if indp:
            trace = min(trace, 250)  # 16 weights per trace element
        w = self.i(0, 4096 - 16 * trace) if indp else self.i(0, 4096 - trace)
        wb = " wb" if self.rng.random() < 0.5 else ""
        return [f"snowflake_asm.movi r7, {8192 + 2 * self.i(0, 2000)}",
                f"snowflake_asm.movi r11, {self.i(0, 65536 - 1100)}", f"snowflake_asm.movi r12, {w}",
                f"snowflake_asm.mac {'indp' if indp else 'coop'} r7, r11, r12 trace {trace}{wb}"]

    def _max(self, depth: int) -> list[str]:
        return [f"snowflake_asm.movi r7, {8192 + 2 * self.i(0, 2000)}",
                f"snowflake_asm.movi r11, {self.i(0, 60000)}", f"snowflake_asm.movi r13, {self.i(0, 64)}",
                f"snowflake_asm.max r7, r11, r13 trace {self.i(1, 8)}{self.pick('', ' wb')}"]

    def _vmov(self, depth: int) -> list[str]:
        select = self.pick("bias", "bypass", "mask", "stride", "shift")
        value = {"bias": self.i(0, 4096 - 16), "bypass": self.i(0, 60000), "mask": self.i(1, 0xFFFF),
                 "stride": 2 * self.i(1, 256), "shift": self.i(1, 15)}[select]
        return [f"snowflake_asm.movi r1, {value}",
                f"snowflake_asm.vmov {self.pick('coop', 'indp')} {select} r1"]

    def _ld(self, depth: int, buf: int | None = None) -> list[str]:
        target = self.pick("maps", "weights")
        length = self.i(1, 1000)
        limit = 65536 if target == "maps" else 4096
        buf = self.i(0, limit - length) if buf is None else min(buf, limit - length)
        select = self.pick(*([0, 3, "all"] if target == "maps" else [0, 5, 17, "all"]))
        return [f"snowflake_asm.movi r14, {length}", f"snowflake_asm.movi r15, {2 * self.i(0, 4096 - length)}",
                f"snowflake_asm.movi r11, {buf}",
                f"snowflake_asm.ld {target} r11, r15, r14 unit {self.i(0, 3)} to {select}"]

    def _tmov(self, depth: int) -> list[str]:
        length = self.i(1, 400)
        return [f"snowflake_asm.movi r14, {length}", f"snowflake_asm.movi r7, {8192 + 2 * self.i(0, 8192 - length)}",
                f"snowflake_asm.movi r11, {self.i(0, 65536 - length)}",
                f"snowflake_asm.tmov r7, r11, r14 unit {self.i(0, 3)} from {self.i(0, 3)}"]

    def _burst(self, depth: int) -> list[str]:
        """More vector ops than the queue holds, back to back."""
        lines = self._mac(depth, trace=self.i(200, 250))
        return lines + lines[-1:] * self.i(16, 23)

    def _hazard(self, depth: int) -> list[str]:
        """A long MAC, then an LD near what it reads: overlapping (fault) or just beside it (proceeds)."""
        mac = self._mac(depth, trace=self.i(400, 1023))
        maps = int(mac[1].split(", ")[1])
        return mac + self._ld(depth, buf=maps + self.pick(-1200, 1100, 1023, 500))

    def _icache(self, depth: int) -> list[str]:
        """Bank 1 gets a copy of block 0 (the code runs from bank 0: allowed); rarely bank 0 (fault)."""
        bank = 1 if self.rng.random() < 0.9 else 0
        return [f"snowflake_asm.movi r15, {self.code_base}", f"snowflake_asm.movi r14, ICOUNT{self.i(1, 200)}",
                f"snowflake_asm.ld icache r0, r15, r14 unit {self.i(0, 3)} to {bank}"]

    def _loop(self, depth: int) -> list[str]:
        counter = 9 + depth
        self.labels += 1
        label = f"loop{self.labels}"
        lines = [f"snowflake_asm.movi r{counter}, {self.i(0, 60 if depth else 12)}", f"snowflake_asm.label @{label}"]
        lines += self.body(depth + 1)
        return lines + [f"snowflake_asm.addi r{counter}, r{counter}, -1",
                        f"snowflake_asm.bgt r{counter}, r0, @{label}"] + [NOP] * 4

    def _skip(self, depth: int) -> list[str]:
        self.labels += 1
        label = f"skip{self.labels}"
        return ([f"snowflake_asm.beq r{self.i(0, 6)}, r{self.i(0, 6)}, @{label}"] + [NOP] * 4
                + self.body(depth + 1) + [f"snowflake_asm.label @{label}"])


def program(seed: int, code_base: int) -> list[str]:
    lines = Gen(seed, code_base).body(0) + [NOP]  # a skip's label never ends the program
    n = sum(1 for line in lines if ".label" not in line)
    # an icache load copies at most the whole (single-bank) program
    return [re.sub(r"ICOUNT(\d+)", lambda m: str(min(int(m.group(1)), n)), line) for line in lines]


def _code_base() -> int:
    return assemble(api.parse_text(SEG + "snowflake_asm.program @p {\n" + NOP + "\n}\n")).code_base


def _run(engine: str, image, module, x: np.ndarray):
    try:
        return run_image(image, engine=engine, inputs={"x": x}, module=module, max_instructions=30_000), None
    except MachineFault as fault:
        if fault.message.startswith("instruction limit"):
            # a simulator guard, not a hardware rule: the fast engine checks it per block
            return None, (None, fault.message)
        return None, (fault.pc, fault.message)


@pytest.mark.parametrize("batch", range(PROGRAMS // BATCH))
def test_engines_agree_on_random_programs(batch: int) -> None:
    code_base = _code_base()
    ran = 0
    for seed in range(batch * BATCH, (batch + 1) * BATCH):
        lines = program(seed, code_base)
        module = api.parse_text(SEG + "snowflake_asm.program @r {\n" + "\n".join(lines) + "\n}\n")
        image = assemble(module)
        assert image.code_base == code_base
        x = np.random.default_rng(seed).integers(-512, 512, 4096).astype(np.int16)
        ref, ref_fault = _run("reference", image, module, x)
        fast, fast_fault = _run("fast", image, None, x)
        assert ref_fault == fast_fault, seed
        if ref is not None:
            assert_same(ref, fast)
            assert ref.timing.dram_bytes <= ref.cycles * ref.machine.hw.dram_bytes_per_cycle + 1e-6
            ran += 1
    # most programs run to the end: the generator keeps addresses in range
    assert ran >= BATCH * 0.6, ran
