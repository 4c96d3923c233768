"""
The cycle model of Snowflake (rules, constants and their sources in docs/machine.md, "Timing").

Both engines call these methods in program order, one call per dispatched
instruction (the fast engine folds runs of scalar instructions into one closed-form
update that equals the sequence of calls), so cycle counts are identical by
construction and the differential test checks the folding.

  * control pipeline: the rule of the instruction's timing class in the ISA table
    (dialects/snowflake_asm/isa.py `TimingClass`, the one rule set the fast engine's
    `_Run`, asm_analysis.issue_cycles and plan/issue.py read too): one dispatch per cycle;
    a register written by a scalar op is readable `scalar_latency` cycles after that op's
    dispatch (RAW -> decode stall); branches execute their 4 delay slots, so a branch
    costs one issue slot;
  * vector unit: vector ops enter a queue of `vector_queue_depth` in-flight ops
    (full queue -> dispatch stall) and run in order on the CUs (all CUs in lock
    step); a vector op whose operand region still awaits a load holds dispatch until
    the data lands ([P], docs/machine.md); start = max(dispatch + 1, CUs free, operands
    loaded); COOP MAC ceil(L/16) cycles, INDP MAC L, MAX L, VMOV `vmov_cycles`;
  * buffers interlock by region (C17 §5: load IDs, "different buffer regions"): a
    vector op waits only for earlier LDs whose address range overlaps what it reads;
    an LD whose range overlaps what an earlier, unfinished vector op reads is a
    machine fault (the hardware does not hold it back: C17 §5.2 has the compiler
    guarantee it);
  * the bus: every transfer between DRAM and the chip - LD, TMOV, instruction-cache
    fills including the host's initial one, and write-backs - takes its bytes from
    one `BandwidthLedger` of `dram_gbps`; each is capped at one port's `unit_gbps`;
    load units serve their LD/TMOVs in order, `ld_startup_cycles` after the request;
    a write-back is requested `result_latency` cycles after its trace ends; an LD
    whose DRAM source a pending write-back still writes waits for it;
  * instruction cache: a fetch uses a bank holding the pc (the earliest ready, when
    both do); from a bank still being loaded it stalls; from no bank it faults.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass, field

from snowir.dialects.snowflake_asm.isa import SCALAR_TIMING, TimingClass
from snowir.hw import DRAM_PAGE_BYTES, SnowflakeConfig
from snowir.machine.ledgers import BandwidthLedger, PendingLoads
from snowir.machine.state import MachineFault

PAGE_SHIFT = DRAM_PAGE_BYTES.bit_length() - 1


@dataclass
class Event:
    track: str
    name: str
    start: int
    end: int
    count: int = 1
    """Events merged into this span (a MAC loop is one span, not 10^5): `mix` counts them by name."""
    mix: dict[str, int] | None = None
    part: str | None = None
    """The layer part executing when it began (its instruction's location; the fast engine's
    compiled loops: the loop's first instruction's)."""

    @property
    def label(self) -> str:
        if self.count == 1:
            return self.name
        mix = self.mix or {self.name: self.count}
        return " + ".join(f"{name} x{n}" for name, n in sorted(mix.items(), key=lambda kv: -kv[1]))


MERGE_GAP = 16
"""Control-pipeline stalls of one kind closer than this many cycles are one span (a queue-full
stall before every vector op of a loop reads as one stretch of queue-full time)."""


STALL_CAUSES = ("raw", "vector_queue", "load_wait", "icache", "dram_raw", "cu_starved", "cu_load_wait", "cu_drain")
"""Pipeline stalls (raw, vector_queue, load_wait: a vector op held at dispatch for its data,
icache, dram_raw: an LD held for a pending write-back) and CU idle time (cu_starved: nothing
dispatched, cu_load_wait: data late, cu_drain: after the last vector op until the program ends).
CU busy cycles + the three cu_* causes = the program's cycles."""


@dataclass
class Timing:
    hw: SnowflakeConfig
    record: bool = False
    max_events: int = 200_000
    t: int = 0
    stalls: Counter = field(default_factory=Counter)
    events: list[Event] = field(default_factory=list)
    events_dropped: int = 0

    def __post_init__(self) -> None:
        hw = self.hw
        self._last: dict[str, Event] = {}  # each track's latest event, which a repeat extends
        self.reg_ready = [0] * hw.registers
        self.vq: deque[int] = deque()
        self.cu_free = 0
        # Region interlocks. Pending LDs, indexed by buffer address (ledgers.py). Pending reads
        # of vector ops: (lo, hi, end) in buffer elements; vector ops end in order, so a deque.
        # TMOV reads: (lo, hi, end, CU bit) in a list. A read that ended by an LD's dispatch
        # cannot conflict with it, so the deques are pruned there and when they grow, not per op.
        self.maps_loads = PendingLoads()
        self.weights_loads = PendingLoads()
        self.maps_reads: deque[tuple[int, int, int]] = deque()
        self.weights_reads: deque[tuple[int, int, int]] = deque()
        self.tmov_reads: list[tuple[int, int, int, int]] = []
        self.unit_free = [0] * hw.load_units
        self.unit_busy = [0] * hw.load_units
        self.unit_bytes = [0] * hw.load_units
        self.dma = BandwidthLedger(hw.dram_bytes_per_cycle)
        # read once per vector op
        self._depth = hw.vector_queue_depth
        self._result_latency = hw.result_latency
        self._port = hw.unit_bytes_per_cycle
        self.page_written: dict[int, int] = {}
        # icache bank b holds instructions [lo, hi), usable from cycle `ready`
        self.icache: list[list[int]] = [[0, 0, 0] for _ in range(hw.icache_banks)]
        self.icache_generation = 0  # bumped whenever a bank's contents change
        self.fill = BandwidthLedger(hw.dram_bytes_per_cycle)  # the initial fill's grants (preload_icache)
        self.end = 0
        self.macs = 0
        self.lane_macs = 0
        self.load_bytes = 0
        self.store_bytes = 0
        self.writeback_bytes = 0
        self.busy_cycles = 0
        # the steady-state watcher's log of write-backs (lo, hi, done) while it looks (steady.py)
        self.wb_log: list[tuple[int, int, int]] | None = None
        self.pc = 0  # the instruction being timed (fetch; the fast engine's loop entries)
        self.sources: tuple[str | None, ...] = ()  # per pc, its layer part (ProgramImage.sources), for events

    @property
    def dram_bytes(self) -> int:
        """Everything that crossed the bus: LDs, icache fills, TMOVs and write-backs."""
        return self.load_bytes + self.store_bytes + self.writeback_bytes

    def bytes_by(self, t: int) -> int:
        """`dram_bytes` as of cycle `t`: the bytes that crossed the bus before `t`, the host's
        initial icache fill counted whole from cycle 0 (it is no layer's). What a layer marker
        records, so a layer's window counts the bytes that crossed the bus in it, not those its
        requests move after the next layer has started (issue 40: ResNet-50 layers reported
        4.72 GB/s on a 4.2 GB/s bus); at the end of the program it is `dram_bytes`."""
        return self.dram_bytes - round(self.dma.bytes_after(t) - self.fill.bytes_after(t))

    # ------------------------------------------------------------------ icache
    def preload_icache(self, n_instructions: int) -> None:
        """The host's initial load (C17 §5.3): consecutive banks from instruction 0, each one
        load of its block on its own load unit from cycle 0, over the shared bus."""
        size = self.hw.icache_bank_instructions
        for b in range(self.hw.icache_banks):
            lo = b * size
            count = min(size, n_instructions - lo)
            if count <= 0:
                self.icache[b] = [lo, lo, 0]
                continue
            _, done = self._transfer(-1, b % self.hw.load_units, 4 * count, None, 0,
                                     f"icache preload bank {b}", count_unit=False)
            self.icache[b] = [lo, lo + count, done]
            self.load_bytes += 4 * count
        self.icache_generation += 1
        # the fill's place on the bus: granted first, so no later transfer moves it (bytes_by)
        self.fill = BandwidthLedger(self.dma.total)
        self.fill.times, self.fill.used = list(self.dma.times), list(self.dma.used)

    def bank_of(self, pc: int) -> int:
        """The bank a fetch of `pc` uses: one holding it, the earliest ready when both do."""
        best = -1
        for b, (lo, hi, ready) in enumerate(self.icache):
            if lo <= pc < hi and (best < 0 or ready < self.icache[best][2]):
                best = b
        if best < 0:
            raise MachineFault("instruction fetch from an address in no instruction-cache bank")
        return best

    def fetch(self, pc: int) -> int:
        self.pc = pc
        b = self.bank_of(pc)
        ready = self.icache[b][2]
        if ready > self.t:
            self._event("control", "icache stall", self.t, ready)
            self.stalls["icache"] += ready - self.t
            self.t = ready
        return b

    def check_branch(self, pc: int, target: int) -> None:
        lo, hi, _ = self.icache[self.bank_of(pc)]
        if not lo <= target < hi:
            raise MachineFault(
                f"branch target {target} is outside the instruction-cache bank [{lo}, {hi}) of the branch")

    # ------------------------------------------------------------------ control pipeline
    def _issue(self, reads: tuple[int, ...]) -> int:
        d = self.t
        ready = self.reg_ready
        for r in reads:
            if ready[r] > d:
                d = ready[r]
        if d > self.t:
            self.stalls["raw"] += d - self.t
        return d

    def scalar(self, reads: tuple[int, ...], write: int | None, timing: TimingClass = SCALAR_TIMING) -> int:
        """Dispatch a control-pipeline instruction of timing class `timing` (its ISA record's):
        once the registers it reads are ready; the next one `issue_cycles` later; the register
        it writes ready `timing.latency(hw)` after dispatch."""
        d = self._issue(reads)
        self.t = d + timing.issue_cycles
        if write:
            self.reg_ready[write] = d + timing.latency(self.hw)
        return d

    # ------------------------------------------------------------------ vector unit
    def vector(self, reads: tuple[int, ...], cycles: int, maps: tuple[int, int] | None,
               weights: tuple[int, int] | None, name: str, macs: int = 0, lane_macs: int = 0) -> tuple[int, int]:
        """Dispatch a vector op reading the element ranges `maps` / `weights` of every CU's maps
        buffer / every vMAC's weights buffer; returns (start, end)."""
        mlo, mhi = maps if maps is not None else (None, 0)
        wlo, whi = weights if weights is not None else (None, 0)
        return self._vector(self._issue(reads), cycles, mlo, mhi, wlo, whi, name, macs, lane_macs)

    def vector_op(self, r1: int, r2: int, r3: int, cycles: int, mlo: int | None, mhi: int,
                  wlo: int | None, whi: int, name: str, macs: int, lane_macs: int,
                  written: tuple[int, int, int] | None, wb_delay: int = 0) -> None:
        """`vector` reading registers r1..r3 and, when `written` = (lo, hi, bytes), `writeback`:
        every MAC, MAX and VMOV (~10^6 in a model) comes here, so arguments are flat (a range
        with lo None is none; an unused register slot is r0, ready at 0) and nothing is built.
        `wb_delay`: cycles the write-back units add before the result pipeline (MachineState.unit_cycles)."""
        t = self.t
        ready = self.reg_ready
        d = t
        if ready[r1] > d:
            d = ready[r1]
        if ready[r2] > d:
            d = ready[r2]
        if ready[r3] > d:
            d = ready[r3]
        if d > t:
            self.stalls["raw"] += d - t
        _, end = self._vector(d, cycles, mlo, mhi, wlo, whi, name, macs, lane_macs)
        if written is not None:
            self._writeback(end + wb_delay, written[2], written[0], written[1], written[3] if len(written) > 3 else None)

    def _vector(self, d: int, cycles: int, mlo: int | None, mhi: int, wlo: int | None, whi: int,
                name: str, macs: int, lane_macs: int) -> tuple[int, int]:
        """`vector` from its decode slot `d` (RAW stalls counted), ranges flat (lo None: no range)."""
        vq = self.vq
        while vq and vq[0] <= d:
            vq.popleft()
        if len(vq) >= self._depth:
            free = vq[0]
            self.stalls["vector_queue"] += free - d
            if self.record:
                self._event("control", "vector queue full", d, free)
            d = free
            while vq and vq[0] <= d:
                vq.popleft()
        # when the last earlier LD into the regions read lands (an answer <= d: none after d,
        # which below is the same as 0)
        ready = 0
        loads = self.maps_loads
        if loads.due > d and mlo is not None:
            ready = loads.ready(mlo, mhi, d)
        loads = self.weights_loads
        if loads.due > d and wlo is not None:
            r = loads.ready(wlo, whi, d)
            if r > ready:
                ready = r
        issue = d + 1
        if ready > issue:
            # [P] dispatch holds a vector op until its operands have landed: the op leaves
            # dispatch at ready - 1, and nothing behind it dispatches earlier
            self.stalls["load_wait"] += ready - issue
            if self.record:
                self._event("control", "load wait", issue, ready)
            self.t = ready
        else:
            self.t = issue
        cu_free = self.cu_free
        start = max(issue, cu_free, ready)
        if start > cu_free:
            starved = min(issue, start) - cu_free
            if starved > 0:
                self.stalls["cu_starved"] += starved
            late = start - max(issue, cu_free)
            if late > 0:
                self.stalls["cu_load_wait"] += late
        end = start + cycles
        self.cu_free = end
        vq.append(end)
        if mlo is not None:
            reads = self.maps_reads
            if len(reads) >= _PRUNE_AT:
                _prune_reads(reads, d)
            reads.append((mlo, mhi, end))
        if wlo is not None:
            reads = self.weights_reads
            if len(reads) >= _PRUNE_AT:
                _prune_reads(reads, d)
            reads.append((wlo, whi, end))
        self.busy_cycles += cycles
        self.macs += macs
        self.lane_macs += lane_macs
        if end > self.end:
            self.end = end
        if self.record:
            self._event("CUs", name, start, end)
        return start, end

    def writeback(self, end: int, nbytes: int, dst: tuple[int, int],
                  runs: tuple[tuple[int, int], ...] | None = None) -> int:
        """A vector op's results leave the result pipeline `result_latency` cycles after its
        trace ends and cross the bus like any transfer; returns when they are in DRAM. `runs`:
        the byte runs written when [lo, hi) has gaps a page fits in (state.page_runs)."""
        return self._writeback(end, nbytes, dst[0], dst[1], runs)

    def _writeback(self, end: int, nbytes: int, lo: int, hi: int,
                   runs: tuple[tuple[int, int], ...] | None = None) -> int:
        request = end + self._result_latency
        dma = self.dma
        dma.prune(self.t)
        done = math.ceil(dma.transfer(request, nbytes, self._port) - 1e-9)
        self.writeback_bytes += nbytes
        if runs is None:
            self.wrote_dram(lo, hi, done)
        else:  # only the pages written: a load of rows between the CUs' blocks does not wait
            for a, b in runs:
                self.wrote_dram(a, b, done)
        if self.wb_log is not None:
            self.wb_log.append((lo, hi, done))
        if self.record:
            self._event("write-back", f"write-back {nbytes} B", request, done)
        return done

    def wrote_dram(self, lo: int, hi: int, when: int) -> None:
        pages = self.page_written
        first, last = lo >> PAGE_SHIFT, (hi - 1) >> PAGE_SHIFT
        if first == last:
            if pages.get(first, 0) < when:
                pages[first] = when
        else:
            for p in range(first, last + 1):
                if pages.get(p, 0) < when:
                    pages[p] = when
        if when > self.end:
            self.end = when

    def _dram_dependency(self, lo: int, hi: int) -> int:
        pages = self.page_written
        if not pages:
            return 0
        first, last = lo >> PAGE_SHIFT, (hi - 1) >> PAGE_SHIFT
        if first == last:
            return pages.get(first, 0)
        return max((pages.get(p, 0) for p in range(first, last + 1)), default=0)

    # ------------------------------------------------------------------ load units
    def _transfer(self, d: int, unit: int, nbytes: int, src: tuple[int, int] | None,
                  not_before: int, name: str, count_unit: bool = True) -> tuple[int, int]:
        """`name`: the event's, only read when recording."""
        request = max(d + 1, self.unit_free[unit], not_before)
        if src is not None:
            dep = self._dram_dependency(src[0], src[1])
            if dep > request:
                self.stalls["dram_raw"] += dep - request
                request = dep
        first = request + self.hw.ld_startup_cycles
        dma = self.dma
        dma.prune(d)
        done = math.ceil(dma.transfer(first, nbytes, self._port) - 1e-9)
        self.unit_free[unit] = done
        if count_unit:
            self.unit_busy[unit] += done - request
            self.unit_bytes[unit] += nbytes
        if done > self.end:
            self.end = done
        if self.record:
            self._event(f"load unit {unit}", name, request, done)
        return first, done

    @staticmethod
    def _check_overwrite(reads, lo: int, hi: int, first: int, buffer: str, which: int) -> None:
        """Fault if an LD of [lo, hi) whose data arrives from `first` overwrites what a vector op
        still reads; `buffer` names it with `which` ({}; formatted only for the message)."""
        for rlo, rhi, until in reads:
            if until > first and rlo < hi and lo < rhi:
                raise MachineFault(
                    f"LD overwrites {buffer.format(which)} [{lo}, {hi}) while an earlier vector op still "
                    f"reads [{rlo}, {rhi}) (until cycle {until}, data arrives from cycle {first})")

    def load(self, reads: tuple[int, ...], unit: int, nbytes: int, src: tuple[int, int],
             target: str, where: list, rng: tuple[int, int]) -> int:
        d = self._issue(reads)
        self.t = d + 1
        first, done = self._transfer(d, unit, nbytes, src, 0, f"LD {target} {nbytes} B" if self.record else "")
        lo, hi = rng
        if target == "maps":
            mask = _cu_mask(where)
            _prune_reads(self.maps_reads, d)
            self._check_overwrite(self.maps_reads, lo, hi, first, "the maps buffer of CU {}", where[0])
            if self.tmov_reads:
                self._check_overwrite([(a, b, u) for a, b, u, m in self.tmov_reads if m & mask],
                                      lo, hi, first, "the maps buffer of CU {}", where[0])
            self.maps_loads.add(lo, hi, done, mask, d)
        else:
            c, v = where[0]
            _prune_reads(self.weights_reads, d)
            self._check_overwrite(self.weights_reads, lo, hi, first, "the weights buffer of vMAC {}",
                                  c * self.hw.vmacs_per_cu + v)
            self.weights_loads.add(lo, hi, done, -1, d)
        self.load_bytes += nbytes
        return done

    def load_icache(self, reads: tuple[int, ...], unit: int, pc: int, bank: int, lo: int,
                    count: int, src: tuple[int, int]) -> int:
        d = self._issue(reads)
        self.t = d + 1
        if self.bank_of(pc) == bank:
            raise MachineFault(f"LD into instruction-cache bank {bank}, which holds the executing code")
        first, done = self._transfer(d, unit, 4 * count, src, 0, f"LD icache bank {bank}")
        self.icache[bank] = [lo, lo + count, done]
        self.icache_generation += 1
        self.load_bytes += 4 * count
        return done

    def store(self, reads: tuple[int, ...], unit: int, cu: int, rng: tuple[int, int], dst: tuple[int, int]) -> int:
        """TMOV: maps buffer of one CU -> DRAM, after every earlier LD into that range has landed."""
        d = self._issue(reads)
        self.t = d + 1
        lo, hi = rng
        bit = 1 << cu
        ready = self.maps_loads.ready(lo, hi, d, bit)
        if ready <= d:  # none still landing after d
            ready = 0
        nbytes = dst[1] - dst[0]
        first, done = self._transfer(d, unit, nbytes, None, ready, f"TMOV {nbytes} B" if self.record else "")
        self.tmov_reads = [e for e in self.tmov_reads if e[2] > d]
        self.tmov_reads.append((lo, hi, done, bit))
        self.wrote_dram(dst[0], dst[1], done)
        self.store_bytes += nbytes
        return done

    # ------------------------------------------------------------------ results
    def total_cycles(self) -> int:
        return max(self.t, self.end)

    def finish(self) -> None:
        """Close the CU time line: idle time after the last vector op is `cu_drain`."""
        total = self.total_cycles()
        if total > self.cu_free:
            self.stalls["cu_drain"] += total - self.cu_free
            self.cu_free = total

    def _event(self, track: str, name: str, start: int, end: int) -> None:
        if not self.record:
            return
        last = self._last.get(track)
        if last is not None and (last.end == start and (track == "CUs" or last.name == name)
                                 or track == "control" and last.name == name and start - last.end <= MERGE_GAP):
            # the CUs: any back-to-back ops form one busy span (gaps are the stalls worth seeing)
            if last.name != name or last.mix is not None:
                last.mix = last.mix or {last.name: last.count}
                last.mix[name] = last.mix.get(name, 0) + 1
            last.end = max(last.end, end)
            last.count += 1
            return
        if len(self.events) >= self.max_events:
            self.events_dropped += 1
            return
        pc, sources = self.pc, self.sources
        event = Event(track, name, start, end, part=sources[pc] if pc < len(sources) else None)
        self._last[track] = event
        self.events.append(event)


_PRUNE_AT = 64
"""Reads a deque of pending reads holds before the ended ones are dropped."""


def _prune_reads(reads: deque[tuple[int, int, int]], now: int) -> None:
    """Drop the reads ended by `now` (they end in order)."""
    while reads and reads[0][2] <= now:
        reads.popleft()


def _cu_mask(cus: list[int]) -> int:
    mask = 0
    for c in cus:
        mask |= 1 << c
    return mask
