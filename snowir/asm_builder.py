"""
A small builder for snowflake_asm programs: instructions, labels, counted loops with their
delay slots, large constants, and a vector-queue flush. Used by the code generators.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from xdsl.ir import Operation

from snowir.dialects import snowflake_asm as sf

NOP = lambda: sf.MovOp(0, 0)  # noqa: E731
MOVI_MAX = (1 << 22) - 1


@dataclass
class AsmBuilder:
    ops: list[Operation] = field(default_factory=list)
    _labels: itertools.count = field(default_factory=itertools.count)

    def emit(self, *ops: Operation) -> None:
        self.ops.extend(ops)

    def label(self, hint: str) -> str:
        name = f"{hint}{next(self._labels)}"
        self.ops.append(sf.LabelOp(name))
        return name

    def const(self, reg: int, value: int) -> None:
        """reg = value for any 32-bit value (MOVI, or MOVI + shift + ADDI)."""
        if -(1 << 22) <= value <= MOVI_MAX:
            self.emit(sf.MoviOp(reg, value))
            return
        high, low = value >> 12, value & 0xFFF
        self.emit(sf.MoviOp(reg, high), sf.MovOp(reg, reg, 12), sf.AddiOp(reg, reg, low))

    def loop_end(self, counter: int, limit: int, target: str, slots: list[Operation] | None = None) -> None:
        """`counter += 1; if counter <= limit goto target`, delay slots filled with `slots` then NOPs."""
        self.emit(sf.AddiOp(counter, counter, 1))
        body = list(slots or [])
        # the branch reads `counter` written just before: one RAW stall of 2 cycles, or fill
        self.emit(sf.BleOp(counter, limit, target))
        while len(body) < 4:
            body.append(NOP())
        self.emit(*body[:4])

    def flush_vector_queue(self, depth: int, reg: int) -> None:
        """Issue `depth` VMOVs (write-back mask = all) so no older vector op is still pending
        when the next LD lands (C17 §5.2: fill the trace buffer with new vector ops)."""
        self.emit(sf.MoviOp(reg, 0xFFFF))
        for _ in range(depth):
            self.emit(sf.VmovOp(sf.VectorMode.COOP, sf.VmovSelect.MASK, reg))
