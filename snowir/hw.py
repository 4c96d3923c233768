"""
`SnowflakeConfig`: the one home of every Snowflake hardware parameter.

Defaults are the ZC706 build of the Snowball paper (C17 §3) and of
``shared/SNOWFLAKE.md``; every [P] (proposed) value is explained in docs/machine.md.
Passes, the assembler, the machine model and the golden model all read their limits
from here, never from literals of their own.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A hardware description file that cannot be used."""


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
                raise ConfigError(f"{source}: unknown hardware parameter '{key}'")
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
        if path is None:
            return cls()
        p = Path(path)
        try:
            data = json.loads(p.read_text())
        except OSError as e:
            raise ConfigError(f"{p}: cannot read hardware description: {e.strerror}")
        except json.JSONDecodeError as e:
            raise ConfigError(f"{p}:{e.lineno}: invalid JSON: {e.msg}")
        return cls.from_json(data, str(p))

    def validate(self, source: str = "<config>") -> None:
        positive = [
            "cus", "vmacs_per_cu", "macs_per_vmac", "maps_bank_bytes", "maps_banks",
            "weights_buffer_bytes", "icache_banks",
            "icache_bank_instructions", "registers", "scalar_latency",
            "vector_queue_depth", "load_units", "dram_bytes",
        ]
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{source}: parameter '{name}' must be positive")
        if self.clock_mhz <= 0 or self.dram_gbps <= 0 or self.unit_gbps <= 0:
            raise ConfigError(f"{source}: clock and bandwidths must be positive")
        if self.registers > 32:
            raise ConfigError(f"{source}: the encoding has 5-bit register fields (<= 32)")
        if self.load_units > 4:
            raise ConfigError(f"{source}: the LD encoding has a 2-bit load-unit field (<= 4)")
        if self.vmacs > 16 or self.cus > 4:
            raise ConfigError(f"{source}: select fields address at most 4 CUs x 4 vMACs")
        if self.element_bytes != 2:
            raise ConfigError(f"{source}: only 16-bit elements are supported")


DEFAULT = SnowflakeConfig()
