"""
The cycle model of Snowflake (rules and constants in docs/machine.md, "Timing").

Both engines call these methods in program order, one call per dispatched
instruction (the fast engine folds runs of scalar instructions into one closed-form
update that equals the sequence of calls), so cycle counts are identical by
construction and the differential test checks the folding.

  * control pipeline: one dispatch per cycle; a register written by a scalar op is
    readable `scalar_latency` cycles after that op's dispatch (RAW -> decode stall);
    branches execute their 4 delay slots, so a branch costs one issue slot;
  * vector unit: vector ops enter a queue of `vector_queue_depth` in-flight ops
    (full queue -> dispatch stall) and run in order on the CUs (all CUs in lock
    step): start = max(dispatch + 1, CUs free, operand banks loaded);
    COOP MAC ceil(L/16) cycles, INDP MAC L, MAX L, VMOV `vmov_cycles`; a write-back
    lands in DRAM `result_latency` cycles after the trace ends;
  * memory: each load unit serves its LD/TMOVs in order; a transfer starts
    `ld_startup_cycles` after the request and moves data at most at the unit's port
    bandwidth, sharing `dram_gbps` with the other units (earlier requests first);
    an LD whose DRAM source is still being written by a pending write-back waits;
    a vector op waits for every earlier LD into a bank it reads; an LD into a bank
    that an earlier, unfinished vector op reads is a machine fault;
  * instruction cache: a fetch from a bank still being loaded stalls; a fetch of
    an address in no bank is a fault.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass, field

import numpy as np

from snowir.hw import SnowflakeConfig
from snowir.machine.state import MachineFault

PAGE_SHIFT = 12
_INF = float("inf")


class BandwidthLedger:
    """
    Piecewise-constant DRAM bandwidth already granted over future time. A new transfer
    takes what earlier ones left, up to its port cap: an arbitration by age that is
    exact, deterministic and computable when the request is issued.
    """

    def __init__(self, total: float):
        self.total = total
        self.times: list[float] = [0.0]
        self.used: list[float] = [0.0]

    def _split(self, t: float) -> int:
        times = self.times
        lo, hi = 0, len(times)
        while lo < hi:
            mid = (lo + hi) // 2
            if times[mid] <= t:
                lo = mid + 1
            else:
                hi = mid
        i = lo - 1
        if times[i] == t:
            return i
        times.insert(i + 1, t)
        self.used.insert(i + 1, self.used[i])
        return i + 1

    def prune(self, now: float) -> None:
        times = self.times
        if len(times) < 64 or times[1] > now:
            return
        k = 0
        while k + 1 < len(times) and times[k + 1] <= now:
            k += 1
        del times[:k]
        del self.used[:k]

    def transfer(self, start: float, nbytes: int, cap: float) -> float:
        if start < self.times[0]:
            start = self.times[0]
        i = self._split(start)
        remaining = float(nbytes)
        times, used = self.times, self.used
        while True:
            seg_end = times[i + 1] if i + 1 < len(times) else _INF
            avail = min(cap, self.total - used[i])
            if avail > 1e-9:
                need = remaining / avail
                if times[i] + need <= seg_end + 1e-9:
                    end = times[i] + need
                    if end < seg_end:
                        self._split(end)
                    used[i] += avail
                    return end
                used[i] += avail
                remaining -= avail * (seg_end - times[i])
            i += 1


@dataclass
class Event:
    track: str
    name: str
    start: int
    end: int


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
        self.reg_ready = [0] * hw.registers
        self.vq: deque[int] = deque()
        self.cu_free = 0
        self.vector_seen = False
        # per bank: when the last LD into it lands, per CU (a TMOV stores one CU) and over all
        # CUs / vMACs (a vector op reads every CU); until when vector ops read it (they read
        # every CU and vMAC alike, so one number per bank). Plain lists: numpy calls on these
        # few elements cost more than the vector op's arithmetic.
        self.maps_ready = np.zeros((hw.cus, hw.maps_banks), np.int64)
        self.maps_ready_all = [0] * hw.maps_banks
        self.maps_read = [0] * hw.maps_banks
        self.weights_ready = [0] * hw.weights_banks
        self.weights_read = [0] * hw.weights_banks
        self.unit_free = [0] * hw.load_units
        self.unit_busy = [0] * hw.load_units
        self.unit_bytes = [0] * hw.load_units
        self.dma = BandwidthLedger(hw.dram_bytes_per_cycle)
        self.page_written: dict[int, int] = {}
        # icache bank b holds instructions [lo, hi), usable from cycle `ready`
        self.icache: list[list[int]] = [[0, 0, 0] for _ in range(hw.icache_banks)]
        self.icache_generation = 0  # bumped whenever a bank's contents change
        self.end = 0
        self.macs = 0
        self.load_bytes = 0
        self.store_bytes = 0
        self.busy_cycles = 0

    # ------------------------------------------------------------------ icache
    def preload_icache(self, n_instructions: int) -> None:
        """The host's initial load: consecutive banks from instruction 0, ready at cycle 0."""
        size = self.hw.icache_bank_instructions
        for b in range(self.hw.icache_banks):
            lo = b * size
            self.icache[b] = [lo, min(lo + size, max(n_instructions, lo)), 0]
        self.icache_generation += 1

    def bank_of(self, pc: int) -> int:
        for b, (lo, hi, _) in enumerate(self.icache):
            if lo <= pc < hi:
                return b
        raise MachineFault("instruction fetch from an address in no instruction-cache bank")

    def fetch(self, pc: int) -> int:
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

    def scalar(self, reads: tuple[int, ...], write: int | None) -> int:
        d = self._issue(reads)
        self.t = d + 1
        if write:
            self.reg_ready[write] = d + self.hw.scalar_latency
        return d

    # ------------------------------------------------------------------ vector unit
    def _vector_dispatch(self, reads: tuple[int, ...]) -> int:
        d = self._issue(reads)
        vq = self.vq
        while vq and vq[0] <= d:
            vq.popleft()
        if len(vq) >= self.hw.vector_queue_depth:
            free = vq[0]
            self.stalls["vector_queue"] += free - d
            self._event("control", "vector queue full", d, free)
            d = free
            while vq and vq[0] <= d:
                vq.popleft()
        self.t = d + 1
        return d

    def vector(self, reads: tuple[int, ...], cycles: int, maps_banks: range, weights_banks: range,
               name: str, macs: int = 0) -> tuple[int, int]:
        """Dispatch a vector op reading the given banks (all CUs / vMACs); returns (start, end)."""
        d = self._vector_dispatch(reads)
        ready = 0
        for b in maps_banks:
            if self.maps_ready_all[b] > ready:
                ready = self.maps_ready_all[b]
        for b in weights_banks:
            if self.weights_ready[b] > ready:
                ready = self.weights_ready[b]
        issue = d + 1
        start = max(issue, self.cu_free, ready)
        if self.vector_seen and start > self.cu_free:
            self.stalls["cu_starved"] += max(0, min(issue, start) - self.cu_free)
            self.stalls["cu_load_wait"] += max(0, start - max(issue, self.cu_free))
        self.vector_seen = True
        end = start + cycles
        self.cu_free = end
        self.vq.append(end)
        for b in maps_banks:
            if self.maps_read[b] < end:
                self.maps_read[b] = end
        for b in weights_banks:
            if self.weights_read[b] < end:
                self.weights_read[b] = end
        self.busy_cycles += cycles
        self.macs += macs
        if end > self.end:
            self.end = end
        self._event("CUs", name, start, end)
        return start, end

    def wrote_dram(self, lo: int, hi: int, when: int) -> None:
        pages = self.page_written
        for p in range(lo >> PAGE_SHIFT, ((hi - 1) >> PAGE_SHIFT) + 1):
            if pages.get(p, 0) < when:
                pages[p] = when
        if when > self.end:
            self.end = when

    def writeback_lands(self, end: int) -> int:
        return end + self.hw.result_latency

    def _dram_dependency(self, lo: int, hi: int) -> int:
        pages = self.page_written
        if not pages:
            return 0
        return max((pages.get(p, 0) for p in range(lo >> PAGE_SHIFT, ((hi - 1) >> PAGE_SHIFT) + 1)), default=0)

    # ------------------------------------------------------------------ load units
    def _transfer(self, d: int, unit: int, nbytes: int, src: tuple[int, int] | None,
                  not_before: int, name: str) -> tuple[int, int]:
        hw = self.hw
        request = max(d + 1, self.unit_free[unit], not_before)
        if src is not None:
            dep = self._dram_dependency(*src)
            if dep > request:
                self.stalls["dram_raw"] += dep - request
                request = dep
        first = request + hw.ld_startup_cycles
        self.dma.prune(d)
        done = math.ceil(self.dma.transfer(first, nbytes, hw.unit_bytes_per_cycle) - 1e-9)
        self.unit_free[unit] = done
        self.unit_busy[unit] += done - request
        self.unit_bytes[unit] += nbytes
        if done > self.end:
            self.end = done
        self._event(f"load unit {unit}", name, request, done)
        return first, done

    @staticmethod
    def _check_overwrite(read_until: list[int], banks: range, first: int, what: str) -> None:
        until = max((read_until[b] for b in banks), default=0)
        if until > first:
            raise MachineFault(
                f"LD overwrites {what} while an earlier vector op still reads it (until cycle {until}, data arrives from cycle {first})")

    def load(self, reads: tuple[int, ...], unit: int, nbytes: int, src: tuple[int, int],
             target: str, where: list, banks: range) -> int:
        d = self._issue(reads)
        self.t = d + 1
        first, done = self._transfer(d, unit, nbytes, src, 0, f"LD {target} {nbytes} B")
        if target == "maps":
            cus = where
            self._check_overwrite(self.maps_read, banks, first, f"maps bank {banks.start} of CU {cus[0]}")
            sl = self.maps_ready[np.ix_(cus, list(banks))]
            self.maps_ready[np.ix_(cus, list(banks))] = np.maximum(sl, done)
            for b in banks:
                self.maps_ready_all[b] = max(self.maps_ready_all[b], done)
        else:
            c, v = where[0]
            self._check_overwrite(self.weights_read, banks, first,
                                  f"weights bank {banks.start} of vMAC {c * self.hw.vmacs_per_cu + v}")
            for b in banks:
                self.weights_ready[b] = max(self.weights_ready[b], done)
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

    def store(self, reads: tuple[int, ...], unit: int, cu: int, banks: range, dst: tuple[int, int]) -> int:
        d = self._issue(reads)
        self.t = d + 1
        ready = int(self.maps_ready[cu, banks.start:banks.stop].max())
        nbytes = dst[1] - dst[0]
        _, done = self._transfer(d, unit, nbytes, None, ready, f"TMOV {nbytes} B")
        self.wrote_dram(dst[0], dst[1], done)
        self.store_bytes += nbytes
        return done

    # ------------------------------------------------------------------ results
    def total_cycles(self) -> int:
        return max(self.t, self.end)

    def _event(self, track: str, name: str, start: int, end: int) -> None:
        if not self.record:
            return
        if len(self.events) >= self.max_events:
            self.events_dropped += 1
            return
        self.events.append(Event(track, name, start, end))
