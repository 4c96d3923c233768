"""
A small builder for snowflake_asm programs: instructions, labels, branches and counted loops
(delay slots left as no-ops), large constants, and a vector-queue flush. Used by the code
generators.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from xdsl.dialects.builtin import NameLoc, NoneAttr, StringAttr, UnknownLoc
from xdsl.ir import Operation

from snowir.dialects import snowflake_asm as sf
from snowir.hw import MASK_WORD_BITS, MASK_WORD_MAX, SnowflakeConfig

NOP = lambda: sf.MovOp(0, 0)  # noqa: E731
MOVI_MAX = (1 << 22) - 1
DELAY_SLOTS = 4  # [S] C17 §4: the ISA's branch delay slots (hw.branch_delay_slots must match)


@dataclass
class AsmBuilder:
    """Instructions in program order. `at(part)` names the part of the layer being generated
    (`strip1.ktile0`, `load_maps.rows4_9`): every op emitted meanwhile carries it as its location,
    labels are named after it, and tile-to-asm puts the layer and its ONNX node around it."""

    ops: list[Operation] = field(default_factory=list)
    _labels: itertools.count = field(default_factory=itertools.count)
    scope: list[str] = field(default_factory=list)
    _locs: dict[str, NameLoc] = field(default_factory=dict)

    def child(self) -> AsmBuilder:
        """A builder for code placed later (a loop body): the same labels and the same part."""
        return AsmBuilder(_labels=self._labels, scope=self.scope, _locs=self._locs)

    @contextmanager
    def at(self, part: str) -> Iterator[None]:
        self.scope.append(part)
        try:
            yield
        finally:
            self.scope.pop()

    def emit(self, *ops: Operation) -> None:
        if self.scope:
            path = ".".join(self.scope)
            loc = self._locs.get(path)
            if loc is None:
                loc = self._locs[path] = NameLoc(StringAttr(path), NoneAttr())
            for op in ops:
                if isinstance(op.location, UnknownLoc):
                    op.location = loc
        self.ops.extend(ops)

    def label(self, hint: str) -> str:
        """A new label named after the part it loops in: `strip0.ktile1.y3`."""
        name = f"{'.'.join([*self.scope, hint])}{next(self._labels)}"
        self.emit(sf.LabelOp(name))
        return name

    def const(self, reg: int, value: int) -> None:
        """reg = value for any 32-bit value (MOVI, or MOVI + shift + ADDI)."""
        if -(1 << 22) <= value <= MOVI_MAX:
            self.emit(sf.MoviOp(reg, value))
            return
        high, low = value >> 12, value & 0xFFF
        self.emit(sf.MoviOp(reg, high), sf.MovOp(reg, reg, 12), sf.AddiOp(reg, reg, low))

    def set_reg(self, reg: int, value: int, known: int | None) -> None:
        """reg = value when it is known to hold `known`: nothing if equal, an ADDI when the
        step fits its immediate, else a constant."""
        if value == known:
            return
        if known is not None and -(1 << 16) <= value - known < (1 << 16):
            self.emit(sf.AddiOp(reg, reg, value - known))
        else:
            self.const(reg, value)

    def branch(self, op: sf.BranchOperation, before: Sequence[Operation] = ()) -> None:
        """`before` (the loop's own bookkeeping, none of which writes what `op` compares), the
        branch, then its delay slots as no-ops: straightforward code. `fill-delay-slots` moves
        independent instructions from before the branch into the slots."""
        self.emit(*before, op)
        self.emit(*(NOP() for _ in range(DELAY_SLOTS)))

    def loop_end(self, counter: int, limit: int, target: str, before: Sequence[Operation] = ()) -> None:
        """`counter += 1; (before); if counter <= limit goto target`."""
        self.emit(sf.AddiOp(counter, counter, 1))
        self.branch(sf.BleOp(counter, limit, target), before)

    def flush_vector_queue(self, hw: SnowflakeConfig, reg: int, mask: int | None = None) -> None:
        """Issue a vector queue's depth of VMOVs so no older vector op is still pending when the
        next LD lands (C17 §5.2: fill the trace buffer with new vector ops). They write mask
        word 0 with `mask`'s (default: every vMAC), so a flush inside a kernel tile keeps the
        tile's write-back mask."""
        self.const(reg, (hw.all_vmacs_mask if mask is None else mask) & MASK_WORD_MAX)
        for _ in range(hw.vector_queue_depth):
            self.emit(sf.VmovOp(sf.VectorMode.COOP, sf.VmovSelect.MASK, reg))

    def write_mask(self, hw: SnowflakeConfig, reg: int, mask: int) -> None:
        """The write-back mask (one enable per vMAC), one VMOV per 32-bit mask word."""
        for word in range(hw.mask_words):
            self.const(reg, (mask >> (MASK_WORD_BITS * word)) & MASK_WORD_MAX)
            self.emit(sf.VmovOp(sf.VectorMode.COOP, sf.VmovSelect.MASK, reg, word))


def layer_prologue(hw: SnowflakeConfig, coop_conv: bool, fence: bool, reg: int) -> list[Operation]:
    """What a layer's code assumes of a fresh machine, restored where it follows another layer in
    one instruction stream (a whole-model program): every vMAC's write-back enabled, and for a
    COOP conv, whose code never sets it, the COOP CU stride (a max pool or an INDP conv before
    it leaves its own). `fence`: first wait until no vector op of the previous layer is pending
    (its last ops may still read the buffer words this layer's first loads overwrite)."""
    b = AsmBuilder(scope=["prologue"])
    if fence:
        b.flush_vector_queue(hw, reg)
    b.write_mask(hw, reg, hw.all_vmacs_mask)
    if coop_conv:
        b.const(reg, 2 * hw.vmacs_per_cu)
        b.emit(sf.VmovOp(sf.VectorMode.COOP, sf.VmovSelect.STRIDE, reg))
    return b.ops
