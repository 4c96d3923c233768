"""
`SnowflakeConfig`: the one home of every Snowflake hardware parameter.

Defaults are the ZC706 build of the Snowball paper (C17 §3) and of
the Snowflake hardware fact sheet; docs/machine.md lists every field, and explains every [P] (proposed) value.
Passes, the assembler, the machine model and the golden model all read their limits
from here, never from literals of their own.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


# What the 32-bit encoding can name (docs/isa.md): the LD select field (imm[8:4] and imm[11:10],
# 7 bits) names up to 16 CUs x 4 vMACs; the VMOV mask word (imm[5:3]) sets 32 write-back enables
# at a time; LD/TMOV name 8 load units (imm[1:0] and imm[9]). Configurations stay within these,
# and a verifier checks an instruction against them; a smaller machine faults on what it lacks.
ISA_CUS = 16
ISA_VMACS_PER_CU = 4
ISA_LOAD_UNITS = 8
ISA_SELECT_BITS = 7
ISA_MASK_WORDS = 8
MASK_WORD_BITS = 32
MASK_WORD_MAX = (1 << MASK_WORD_BITS) - 1


def select_bits(cus: int, vmacs_per_cu: int) -> int:
    """Width of the LD select field a machine decodes: the fewest bits, at least the 5 of the
    4 x 4 machine, whose all-ones value (`all`) names no CU and no vMAC. So a 4 x 4 machine's
    words are the ones it always had, and a 16 x 4 machine reads imm[11:10] too."""
    bits = 5
    while (1 << bits) - 1 < max(cus, cus * vmacs_per_cu + vmacs_per_cu):
        bits += 1
    return bits


DRAM_PAGE_BYTES = 4096
"""The DRAM page of the write-back interlock (a load waits for pending write-backs to its pages)."""
CODE_ALIGN = 4096
"""[choice] program images put their code at a 4 KB-aligned DRAM address (docs/isa.md)."""


CODE_FIELDS = ("cus", "vmacs_per_cu", "macs_per_vmac", "maps_bank_bytes", "maps_banks", "weights_buffer_bytes",
               "element_bytes", "icache_banks", "icache_bank_instructions", "registers", "branch_delay_slots",
               "load_units")
"""The parameters a program is only correct for: its buffer addresses, selects, load units and
icache layout follow them. The others (clock, bandwidth, latencies, queue depth) change its
timing only, so an image may run on a machine that differs in them (a what-if); program
images record these fields (`.sfb` version 2, the `hw` attribute of `snowflake_asm.image`)."""


class ConfigError(ValueError):
    """A hardware description file that cannot be used. Its message starts with the file's name,
    so the tools print it as it is (snowir/errors.py `one_line`)."""

    names_its_file = True


@dataclass(frozen=True)
class SnowflakeConfig:
    # --- compute organisation [S]
    cus: int = 4
    vmacs_per_cu: int = 4
    macs_per_vmac: int = 16
    clock_mhz: float = 250.0

    # --- on-chip buffers [S] sizes (64 KB maps bank, 8 KB weights buffer per vMAC); [P] two
    # maps banks per CU. Buffers interlock by address region (load IDs), not by bank.
    maps_bank_bytes: int = 64 * 1024
    maps_banks: int = 2
    weights_buffer_bytes: int = 8 * 1024
    element_bytes: int = 2

    # --- instruction cache [S]
    icache_banks: int = 2
    icache_bank_instructions: int = 512

    # --- control pipeline [S] 5 stages, execute takes 2 cycles, 4 branch delay slots
    registers: int = 32
    scalar_latency: int = 3
    """Cycles from a scalar op's dispatch until a dependent op may dispatch
    (execute 2 + write-back 1; no forwarding)."""
    branch_delay_slots: int = 4

    # --- vector unit [P]
    vector_queue_depth: int = 16
    result_latency: int = 6
    """Cycles from the end of a write-back trace until the result is in memory."""
    vmov_cycles: int = 1
    writeback_activation: int = 0
    """[P] 1: the MAC write-back has the activation unit (snowir/activation.py: LeakyReLU, clip,
    hard-sigmoid, hard-swish, sigmoid, SiLU, tanh after bias, bypass and shift; `VMOV act`);
    0: the ZC706 build's write-back (saturation and ReLU only)."""

    # --- memory system [S] 4.2 GB/s, 4 load units; [P] per-unit cap and start-up
    load_units: int = 4
    dram_gbps: float = 4.2
    unit_gbps: float = 2.0
    """One load unit's AXI port (64 bit at 250 MHz); the units share `dram_gbps`."""
    ld_startup_cycles: int = 32
    dram_bytes: int = 1 << 28

    # ------------------------------------------------------------------ derived
    @property
    def vmacs(self) -> int:
        return self.cus * self.vmacs_per_cu

    @property
    def select_bits(self) -> int:
        return select_bits(self.cus, self.vmacs_per_cu)

    @property
    def mask_words(self) -> int:
        """32-bit words of the write-back mask (one enable per vMAC)."""
        return -(-self.vmacs // MASK_WORD_BITS)

    @property
    def all_vmacs_mask(self) -> int:
        return (1 << self.vmacs) - 1

    @property
    def macs(self) -> int:
        return self.vmacs * self.macs_per_vmac

    @property
    def lanes(self) -> int:
        return self.macs_per_vmac

    @property
    def maps_buffer_elements(self) -> int:
        return self.maps_banks * self.maps_bank_bytes // self.element_bytes

    @property
    def maps_bank_elements(self) -> int:
        return self.maps_bank_bytes // self.element_bytes

    @property
    def weights_buffer_elements(self) -> int:
        return self.weights_buffer_bytes // self.element_bytes

    @property
    def dram_bytes_per_cycle(self) -> float:
        return self.dram_gbps * 1e3 / self.clock_mhz

    @property
    def unit_bytes_per_cycle(self) -> float:
        return self.unit_gbps * 1e3 / self.clock_mhz

    @property
    def icache_instructions(self) -> int:
        return self.icache_banks * self.icache_bank_instructions

    def cycles_to_ms(self, cycles: int | float) -> float:
        return cycles / (self.clock_mhz * 1e3)

    # ------------------------------------------------------------------ JSON
    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def code_fields(self) -> dict[str, Any]:
        """The `CODE_FIELDS` of this configuration: what a program built for it records."""
        return {k: getattr(self, k) for k in CODE_FIELDS}

    def code_mismatch(self, built_for: dict[str, Any]) -> str | None:
        """Why a program built for `built_for` (recorded `CODE_FIELDS`) cannot run on this
        configuration, or None when it can."""
        diff = [f"{k} {built_for[k]} (this machine: {getattr(self, k)})"
                for k in CODE_FIELDS if k in built_for and built_for[k] != getattr(self, k)]
        return "built for " + ", ".join(diff) if diff else None

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2) + "\n")

    @classmethod
    def from_json(cls, data: dict[str, Any], source: str = "<json>") -> SnowflakeConfig:
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: hardware description must be a JSON object")
        known = {f.name: f for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            if key not in known:
                close = difflib.get_close_matches(key, sorted(known), n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise ConfigError(f"{source}: unknown hardware parameter '{key}'{hint}")
            want = type(getattr(cls(), key))
            if want is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if not isinstance(value, want) or isinstance(value, bool):
                raise ConfigError(
                    f"{source}: parameter '{key}' must be {want.__name__}, got {value!r}"
                )
            kwargs[key] = value
        config = cls(**kwargs)
        config.validate(source)
        return config

    @classmethod
    def load(cls, path: str | Path | None) -> SnowflakeConfig:
        """The description in JSON file `path`, or `path` itself when it is the JSON (a string
        starting with '{': `snow-run --hw '{"cus": 16}'`); None: the ZC706 build."""
        if path is None:
            return cls()
        if isinstance(path, str) and path.lstrip().startswith("{"):
            try:
                return cls.from_json(json.loads(path), "--hw")
            except json.JSONDecodeError as e:
                raise ConfigError(f"--hw {path}: invalid JSON: {e.msg}") from None
        p = Path(path)
        try:
            data = json.loads(p.read_text())
        except OSError as e:
            raise ConfigError(f"{p}: cannot read hardware description: {e.strerror}")
        except json.JSONDecodeError as e:
            raise ConfigError(f"{p}:{e.lineno}: invalid JSON: {e.msg}")
        return cls.from_json(data, str(p))

    def validate(self, source: str = "<config>") -> None:
        """Every field within its range (RANGES); one line naming the first field that is not."""
        for name, (lo, hi, why) in RANGES.items():
            value = getattr(self, name)
            if not lo <= value <= hi:
                span = f"= {lo}" if lo == hi else f">= {lo}" if hi == float("inf") else f"in [{lo}, {hi}]"
                raise ConfigError(f"{source}: parameter '{name}' = {value} must be {span} ({why})")
        if self.unit_gbps > self.dram_gbps:
            raise ConfigError(f"{source}: parameter 'unit_gbps' = {self.unit_gbps} exceeds 'dram_gbps' = "
                              f"{self.dram_gbps} (one port cannot be faster than the shared bus)")
        if self.maps_bank_bytes % (2 * self.element_bytes) or self.weights_buffer_bytes % (2 * self.element_bytes):
            raise ConfigError(f"{source}: buffer sizes must be whole multiples of 2 elements")


_INF = float("inf")
RANGES: dict[str, tuple[float, float, str]] = {
    "cus": (1, ISA_CUS, "the 7-bit LD select field names up to 16 CUs x 4 vMACs"),
    "vmacs_per_cu": (1, ISA_VMACS_PER_CU, "[S] a CU has 4 vMACs; the LD select field names up to 4 per CU"),
    "macs_per_vmac": (16, 16, "[S] a vMAC is 16 MACs, 256 bits per cycle"),
    "clock_mhz": (1.0, 10_000.0, "a clock in MHz"),
    "maps_bank_bytes": (1024, 1 << 20, "element addresses are 16-bit wide per bank pair"),
    "maps_banks": (1, 8, "banks per CU"),
    "weights_buffer_bytes": (64, 1 << 17, "per vMAC"),
    "element_bytes": (2, 2, "[S] 16-bit data"),
    "icache_banks": (2, 2, "[S] the cache streams through 2 banks (C17 §5.2)"),
    "icache_bank_instructions": (64, 4096, "instructions per bank"),
    "registers": (32, 32, "[S] 32 registers; r30/r31 are icache-banking's"),
    "scalar_latency": (1, 16, "cycles from dispatch to a readable result"),
    "branch_delay_slots": (4, 4, "[S] C17 §4: 4 delay slots, which the code relies on"),
    "vector_queue_depth": (1, 1024, "in-flight vector ops"),
    "result_latency": (0, 1000, "cycles from a trace's end to its write-back request"),
    "vmov_cycles": (1, 1000, "cycles of a VMOV on the CUs"),
    "writeback_activation": (0, 1, "0: the ZC706 write-back; 1: with the activation unit"),
    "load_units": (1, ISA_LOAD_UNITS, "the LD/TMOV encoding names 8 load units"),
    "dram_gbps": (0.001, 10_000.0, "shared DRAM bandwidth in GB/s"),
    "unit_gbps": (0.001, 10_000.0, "one load unit's port in GB/s"),
    "ld_startup_cycles": (0, 100_000, "cycles from an LD's request to its first data"),
    "dram_bytes": (1 << 16, 1 << 32, "DRAM the machine model allocates"),
}


DEFAULT = SnowflakeConfig()
MAX_MAPS_BUFFER_ELEMENTS = int(RANGES["maps_banks"][1] * RANGES["maps_bank_bytes"][1]) // DEFAULT.element_bytes
MAX_WEIGHTS_BUFFER_ELEMENTS = int(RANGES["weights_buffer_bytes"][1]) // DEFAULT.element_bytes
