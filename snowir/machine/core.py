"""
`Machine`: the state, the cycle model and one method per non-scalar instruction kind,
shared by the reference and the fast engine. Engines differ only in how they walk
the program. What a scalar or branch instruction does and how it issues is its record in the
ISA table (dialects/snowflake_asm/isa.py: semantics and timing class), which both engines
compile from; what a vector or memory instruction does and costs is the `Machine` method its
record names (here, state.py and timing.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from snowir.asm_analysis import raw_pairs
from snowir.dialects import snowflake_asm as sf
from snowir.dialects.snowflake_asm.isa import mac_cu_cycles
from snowir.hw import SnowflakeConfig
from snowir.machine.profile import new_profile
from snowir.machine.image import ProgramImage
from snowir.machine.mac_batch import DeferredMacs
from snowir.machine.state import MachineFault, MachineState
from snowir.machine.timing import Timing

OPERAND_SELECTS = ("bias", "bypass", "mbias")
"""VMOV selects that fill a write-back operand (bias or bypass): deferred MACs keep a copy per
write-back (mac_batch.py), so these do not end a run of them."""


def delay_slot_raw_pairs(ops: list[sf.SnowflakeInstruction], pc: int, slots: int) -> int:
    """True RAW pairs among the delay-slot instructions of the branch at `pc`."""
    return raw_pairs(ops[pc + 1:pc + 1 + slots])


def next_pc(pc: int, slots_left: int, pending: int | None, is_branch: bool, taken: int | None,
            slots: int) -> tuple[int, int, int | None]:
    """The program counter after the instruction at `pc`, with the branch delay-slot state:
    a branch's `slots` following instructions always execute, then a taken branch jumps."""
    nxt = pc + 1
    if slots_left:
        slots_left -= 1
        if not slots_left and pending is not None:
            nxt, pending = pending, None
    if is_branch:
        if slots:
            slots_left, pending = slots, taken
        elif taken is not None:
            nxt = taken
    return nxt, slots_left, pending


class Machine:
    def __init__(self, image: ProgramImage, hw: SnowflakeConfig, record: bool = False,
                 dram: np.ndarray | None = None):
        """`dram`: the model's DRAM (uint8), shared with the other segment programs of a
        whole-model run and the host between them; the image's data and code are written into
        it. Default: a DRAM of the image's own."""
        self.image = image
        self.hw = hw
        needed = max(image.code_end, max((s.end for s in image.segments), default=0))
        if needed > hw.dram_bytes:
            raise MachineFault(f"program image needs {needed} bytes of DRAM, the machine has {hw.dram_bytes}")
        if dram is None:
            size = max(needed, 1 << 16)
            size += size % 2
            dram = np.zeros(size, np.uint8)
        elif dram.size < needed:
            raise MachineFault(f"program image needs {needed} bytes of DRAM, the model's DRAM has {dram.size}")
        for s in image.segments:
            if s.data is not None:
                dram[s.address:s.address + s.size] = np.frombuffer(s.data, np.uint8)
        dram[image.code_base:image.code_end] = np.asarray(image.code, "<u4").view(np.uint8)
        self.state = MachineState(hw, image.frac_bits, dram)
        self.timing = Timing(hw, record)
        if record:
            self.timing.sources = image.sources  # trace events name the layer part
        self.n = len(image.code)
        self.timing.preload_icache(self.n)
        self.dynamic = 0
        self.pc = 0
        # progress(dynamic instructions, cycles) is called about every `progress_every` instructions
        self.progress: Callable[[int, int], None] | None = None
        self.progress_every = 1 << 18
        self.next_progress = 1 << 62
        # the fast engine defers MAC arithmetic (mac_batch.py); None: every MAC computes at once
        self.deferred: DeferredMacs | None = None
        self.lanes, self.lanes_all = hw.lanes, hw.lanes * hw.vmacs
        self.steady_iterations = 0  # loop iterations the fast engine timed in closed form (steady.py)
        # layer markers (a whole-model program): the engines call `mark` on reaching `next_mark`
        self.marks: list[Mark] = []
        self.on_mark: Callable[[int], None] | None = None
        self.next_mark = image.markers[0].pc if image.markers else -1
        self.code = np.asarray(image.code, np.uint32).copy()  # the words the engine runs (`ld icache` updates)
        self.code_changed: Callable[[int, int], None] | None = None
        self.profile = new_profile(image)  # snow-run --profile: cycles per instruction (reference engine)

    def defer_macs(self, describe: Callable[[int], str]) -> None:
        self.deferred = DeferredMacs(self.state, describe)

    def flush(self) -> None:
        """Complete deferred MACs: before anything that reads or changes what they use or write."""
        if self.deferred is not None and len(self.deferred):
            self.deferred.flush()

    def set_progress(self, callback: Callable[[int, int], None] | None) -> None:
        self.progress = callback
        self.next_progress = self.progress_every if callback else 1 << 62

    def report_progress(self) -> None:
        if self.progress is not None:
            self.progress(self.dynamic, self.timing.t)
        self.next_progress = self.dynamic + self.progress_every

    # ------------------------------------------------------------------ inputs / outputs
    def write_segment(self, name: str, data: np.ndarray) -> None:
        seg = self.image.segment(name)
        raw = np.ascontiguousarray(data, dtype="<i2").view(np.uint8).ravel()
        if raw.size != seg.size:
            raise MachineFault(f"segment @{name} holds {seg.size} bytes, input has {raw.size}")
        self.state.dram[seg.address:seg.end] = raw

    def read_segment(self, name: str) -> np.ndarray:
        self.flush()
        seg = self.image.segment(name)
        return self.state.dram[seg.address:seg.end].view("<i2").copy()

    # ------------------------------------------------------------------ vector ops
    def mac(self, rd: int, rs1: int, rs2: int, trace: int, indp: bool, wb: bool, relu: bool) -> None:
        st = self.state
        regs = st.regs
        out, a, b = regs[rd], regs[rs1], regs[rs2]
        if self.deferred is not None:
            written = self.deferred.add(self.pc, indp, out, a, b, trace, wb, relu)
        else:
            written = st.mac(indp, out, a, b, trace, wb, relu)
        wlen = self.lanes * trace if indp else trace
        cycles = mac_cu_cycles(trace, indp, self.lanes)
        # useful work: every trace element of a vMAC whose result is kept (COOP: one kernel's
        # channels, so the lanes past the trace's end in its last cycle are idle; INDP: 16 kernels)
        self.timing.vector_op(rd, rs1, rs2, cycles, a, a + trace, b, b + wlen, "MAC wb" if wb else "MAC",
                              wlen * st.enabled_vmacs(), cycles * self.lanes_all, written,
                              st.unit_cycles(indp) if st.wb_active and wb else 0)

    # the arithmetic alone, for loop iterations whose timing is known in closed form (steady.py)
    def mac_f(self, rd: int, rs1: int, rs2: int, trace: int, indp: bool, wb: bool,
              relu: bool) -> tuple[int, int, int] | None:
        regs = self.state.regs
        assert self.deferred is not None
        return self.deferred.add(self.pc, indp, regs[rd], regs[rs1], regs[rs2], trace, wb, relu)

    def max_f(self, rd: int, rs1: int, rs2: int, trace: int, wb: bool) -> tuple[int, int, int] | None:
        self.flush()
        regs = self.state.regs
        return self.state.max(regs[rd], regs[rs1], regs[rs2], trace, wb)

    def vmov_f(self, rs1: int, indp: bool, select: str, word: int = 0, shared: bool = False) -> None:
        assert select in OPERAND_SELECTS and self.deferred is not None
        if select == "bypass":
            self.deferred.bypass_changed = True
        else:
            self.deferred.bias_changed = True
        self.state.vmov(indp, select, self.state.regs[rs1], word, shared)

    def max(self, rd: int, rs1: int, rs2: int, trace: int, wb: bool) -> None:
        written = self.max_f(rd, rs1, rs2, trace, wb)
        hw, st = self.hw, self.state
        a, step = st.regs[rs1], st.regs[rs2]
        lo = min(a, a + step * (trace - 1))
        hi = max(a, a + step * (trace - 1)) + hw.lanes + (hw.cus - 1) * (st.pool_stride() // 2)
        self.timing.vector_op(rd, rs1, rs2, trace, lo, hi, None, 0, "MAX wb" if wb else "MAX", 0, 0, written)

    def vmov(self, rs1: int, indp: bool, select: str, word: int = 0, shared: bool = False) -> None:
        hw, st = self.hw, self.state
        value = st.regs[rs1]
        if select in OPERAND_SELECTS and self.deferred is not None:
            self.vmov_f(rs1, indp, select, word, shared)  # deferred write-backs keep what they saw
        else:
            self.flush()
            st.vmov(indp, select, value, word, shared)
        mlo = wlo = None  # the ranges read: none, but for bias (weights) and bypass, mbias (maps)
        mhi = whi = 0
        if select == "bias":
            wlo, whi = value, value + hw.lanes
        elif select in ("bypass", "mbias"):
            step, count = st.bypass_layout(indp, select, shared)
            mlo, mhi = value, value + (hw.cus - 1) * step + count
        self.timing.vector_op(rs1, 0, 0, hw.vmov_cycles, mlo, mhi, wlo, whi, "VMOV " + select, 0, 0, None)

    # ------------------------------------------------------------------ memory ops
    def ld(self, pc: int, rd: int, rs1: int, rs2: int, unit: int, target: str, select: int) -> None:
        st = self.state
        regs = st.regs
        # deferred MACs complete first only when the LD touches what they read or write
        if self.deferred is not None and self.deferred.load_conflicts(
                target, regs[rd], regs[rd] + regs[rs2], regs[rs1], regs[rs1] + 2 * regs[rs2]):
            self.flush()
        buf, src, length = regs[rd], regs[rs1], regs[rs2]
        reads = (rd, rs1, rs2)
        self._unit(unit, "LD")
        if target == "icache":
            self._ld_icache(pc, reads, unit, select, src, length)
            return
        where = st.load_maps(buf, src, length, select) if target == "maps" \
            else st.load_weights(buf, src, length, select)
        self.timing.load(reads, unit, 2 * length, (src, src + 2 * length), target, where, (buf, buf + length))

    def _ld_icache(self, pc: int, reads: tuple[int, ...], unit: int, bank: int, src: int, count: int) -> None:
        hw, image = self.hw, self.image
        if not 0 <= bank < hw.icache_banks:
            raise MachineFault(f"LD icache bank {bank} does not exist")
        offset = src - image.code_base
        if offset % 4 or offset < 0:
            raise MachineFault(f"LD icache source {src:#x} is not an instruction address of the program")
        first = offset // 4
        size = hw.icache_bank_instructions
        if first % size:
            raise MachineFault(f"LD icache must load a bank-aligned block (instruction {first} is not a multiple of {size})")
        if not 1 <= count <= size or first + count > self.n:
            raise MachineFault(f"LD icache of {count} instructions from {first} (bank holds {size}, program has {self.n})")
        self.timing.load_icache(reads, unit, pc, bank, first, count, (src, src + 4 * count))
        # the bank gets DRAM's words as they are now (the host or the program may have written them)
        words = self.state.dram[src:src + 4 * count].view("<u4")
        if not np.array_equal(words, self.code[first:first + count]):
            if self.code_changed is None:
                raise MachineFault("LD icache loads instructions that were overwritten in DRAM; this engine "
                                   "runs the program as assembled (use the fast engine)")
            self.code[first:first + count] = words
            self.code_changed(first, count)

    def _unit(self, unit: int, what: str) -> None:
        if unit >= self.hw.load_units:
            raise MachineFault(f"{what} on load unit {unit}: the machine has {self.hw.load_units} load units")

    def tmov(self, rd: int, rs1: int, rs2: int, unit: int, cu: int) -> None:
        self.flush()
        self._unit(unit, "TMOV")
        st = self.state
        regs = st.regs
        dst, buf, length = regs[rd], regs[rs1], regs[rs2]
        lo, hi = st.tmov(dst, buf, length, cu)
        self.timing.store((rd, rs1, rs2), unit, cu, (buf, buf + length), (lo, hi))


@dataclass(frozen=True)
class Mark:
    """The machine's counters when execution first reached a layer marker; `dram_bytes`: the
    bytes on the bus by cycle `t` (Timing.bytes_by), so that two marks' difference is what
    crossed the bus between them."""

    name: str
    t: int
    dynamic: int
    stalls: dict[str, int]
    macs: int
    lane_macs: int
    dram_bytes: int
    unit_bytes: tuple[int, ...]
    saturated: int = 0


def mark(machine: Machine) -> None:
    """Record the marker at `machine.next_mark` (the engine is there) and move to the next one."""
    t = machine.timing
    markers = machine.image.markers
    index = len(machine.marks)
    machine.flush()  # the write-backs before the marker, counted (`saturated`) and in DRAM
    machine.marks.append(Mark(markers[index].name, t.t, machine.dynamic, dict(t.stalls), t.macs, t.lane_macs,
                              t.bytes_by(t.t), tuple(t.unit_bytes), machine.state.saturated))
    machine.next_mark = markers[index + 1].pc if index + 1 < len(markers) else -1
    if machine.on_mark is not None:
        machine.on_mark(index)
