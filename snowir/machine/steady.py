"""
Closed-form timing of a vector loop in its periodic steady state (the fast engine's
self-looping blocks of MAC / MAX / VMOV bias|bypass and linear scalar code).

A pixel loop of a conv settles within a few iterations into a regime in which every iteration
is the previous one shifted by Δ cycles: the same stalls, the same vector queue and result
bus relative to the clock. Then the next K iterations are known without stepping them: every
time in the timing state moves by K·Δ, every counter grows by K times one iteration's growth,
and each skipped write-back lands K·Δ later than its counterpart. Their arithmetic and
register updates still run, functionally (`fblock`: the block without its timing), so values
never rely on the extrapolation; only the trip count does, from the branch operands.

When it holds (all checked from three consecutive iterations, else the loop just steps):
  * the block's scalar code is linear (ADD, ADDI, MOV, MOVI, MULI, MUL by a register the block
    does not write): equal register deltas over two iterations then stay equal, so the branch
    operands are affine in the iteration and the trip count is exact (no 32-bit wrap in range);
  * the relative timing state is equal after both iterations and one iteration's counter
    growth is equal in both: no LD still landing (the regions a vector op waits for), the
    ledger's future (write-backs on the bus; anything else on it moves in absolute time and so
    breaks the equality) at whole cycles, no events being recorded;
  * at least a vector queue's depth of iterations is left to step after the skip, so the
    pending reads an LD after the loop checks and the bus near its end are the stepped ones.
The reference engine steps every instruction; the differential tests compare cycles and
stalls of both engines.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable

from snowir.fixedpoint import wrap32
from snowir.machine.core import Machine

WATCH = 48
"""Looks at the timing state per loop entry (the vector queue fills in `vector_queue_depth`
ops, so a loop settles within a few dozen iterations); after that the loop steps."""
RETRY = 8
"""Iterations between looks while an LD is still landing."""

_INT32 = 1 << 31
_COUNTERS = ("macs", "lane_macs", "busy_cycles", "writeback_bytes", "load_bytes", "store_bytes")


class SteadyLoop:
    """The steady-state watcher of one compiled self-loop block."""

    def __init__(self, machine: Machine, fblock: Callable[[int], tuple[int, bool]], compare: str,
                 vector_ops: int):
        self.m = machine
        self.T = machine.timing
        self.fblock = fblock
        self.compare = compare
        hw = machine.hw
        self.margin = -(-(hw.vector_queue_depth + 1) // vector_ops) + 1
        self.snaps: list[tuple] = []
        self.looks = 0
        self.next = 1  # the iteration after which `watch` is called next
        self.ranges: list[tuple[int, int, int]] = []  # write-backs of the functional run (`fblock` appends)

    # ------------------------------------------------------------------ watching
    def stop(self) -> None:
        """The loop entry ends: the next one starts looking afresh."""
        self.next = 1
        self.T.wb_log = None

    def watch(self, n: int, budget: int, ba: int, bb: int) -> int:
        """After iteration n (its branch taken), when n == `self.next`: the iterations skipped
        in closed form, 0 if none. Looks at consecutive iterations; while an LD is landing,
        every RETRY iterations; gives up after WATCH looks or when the loop is too short."""
        T = self.T
        if n == 1:
            self.snaps, self.looks = [], 0
            T.wb_log = []
            self.next = 2
            return 0
        self.looks += 1
        if self.looks > WATCH:
            self._give_up()
            return 0
        log = T.wb_log
        T.wb_log = []
        self.next = n + 1
        if log is None:  # resuming: this iteration's write-backs were not logged
            return 0
        snap = self._snapshot(ba, bb, log)
        if snap is None:
            self.snaps = []
            T.wb_log = None
            self.next = n + RETRY
            return 0
        snaps = self.snaps
        snaps.append(snap)
        if len(snaps) == 2:  # too short a loop to gain: stop looking (an affine guess of its trips)
            (a0, b0), (a1, b1) = snaps[0][6], snaps[1][6]
            if self._iterations_left(a1, b1, a1 - a0, b1 - b0, budget - n) < 2 * self.margin:
                self._give_up()
            return 0
        if len(snaps) < 3:
            return 0
        if len(snaps) > 3:
            del snaps[0]
        s0, s1, s2 = snaps
        if s1[0] != s2[0] or s1[5] != s2[5]:
            return 0
        delta = s2[1] - s1[1]
        if s1[1] - s0[1] != delta or delta <= 0:
            return 0
        d_regs = [wrap32(b - a) for a, b in zip(s1[2], s2[2])]
        if d_regs != [wrap32(b - a) for a, b in zip(s0[2], s1[2])]:
            return 0
        grow = [b - a for a, b in zip(s1[3], s2[3])]
        if grow != [b - a for a, b in zip(s0[3], s1[3])]:
            return 0
        stalls = {k: s2[4].get(k, 0) - s1[4].get(k, 0) for k in set(s1[4]) | set(s2[4])}
        if stalls != {k: s1[4].get(k, 0) - s0[4].get(k, 0) for k in set(s0[4]) | set(s1[4])}:
            return 0
        (a0, b0), (a1, b1), (a2, b2) = s0[6], s1[6], s2[6]
        if a2 - a1 != a1 - a0 or b2 - b1 != b1 - b0:
            return 0
        left = self._iterations_left(a2, b2, a2 - a1, b2 - b1, budget - n)
        k = left - self.margin
        if k <= 0:
            self._give_up()
            return 0
        self._skip(k, delta, grow, stalls, s2[5])
        self._give_up()  # what is left is the margin, stepped
        return k

    def _give_up(self) -> None:
        self.snaps = []
        self.next = 1 << 62
        self.T.wb_log = None

    def _snapshot(self, ba: int, bb: int, log: list) -> tuple | None:
        """(relative timing state, t, registers, counters, stalls, write-backs, branch operands);
        None when the state cannot be periodic (loads landing, recording)."""
        T = self.T
        t = T.t
        if T.record:
            return None
        if T.maps_loads.due > t or T.weights_loads.due > t:  # an LD still landing
            return None
        dma = T.dma
        times, used = dma.times, dma.used
        i = bisect_right(times, t) - 1
        future = []
        for j in range(i + 1, len(times)):
            rel = times[j] - t
            if rel != int(rel):
                return None
            future.append((rel, used[j]))
        ready = tuple(r - t if r > t else 0 for r in T.reg_ready)
        queue = tuple(e - t for e in T.vq if e > t)
        rel_state = (ready, queue, T.cu_free - t, T.end - t, used[i], tuple(future))
        counters = tuple(getattr(T, c) for c in _COUNTERS)
        wbs = tuple((lo, hi, done - t) for lo, hi, done in log)
        return (rel_state, t, tuple(self.m.state.regs), counters, dict(T.stalls),
                tuple(w[2] for w in wbs), (ba, bb))

    def _iterations_left(self, a: int, b: int, da: int, db: int, budget: int) -> int:
        """Iterations still to run after one whose branch compared a with b (taken), the
        operands moving by da, db per iteration; at most `budget`. Stops short of a 32-bit
        wrap of the operands, where the affine form would no longer hold."""
        limit = budget
        for v, dv in ((a, da), (b, db)):
            if dv > 0:
                limit = min(limit, (_INT32 - 1 - v) // dv)
            elif dv < 0:
                limit = min(limit, (v + _INT32) // -dv)
        gap, dgap = a - b, da - db  # the branch at iteration j compares gap + j * dgap with 0
        if self.compare == "<=":
            j = limit if dgap <= 0 else -gap // dgap + 1  # first j with gap + j*dgap > 0
        elif self.compare == ">":
            j = limit if dgap >= 0 else gap // -dgap + (1 if gap % -dgap else 0)  # first gap + j*dgap <= 0
        else:  # "==": taken while equal
            j = limit if dgap == 0 else 1
        return max(0, min(j, limit))

    # ------------------------------------------------------------------ the closed form
    def _skip(self, k: int, delta: int, grow: list[int], stalls: dict[str, int], wb_rel: tuple) -> None:
        T = self.T
        self.ranges.clear()
        done, taken = self.fblock(k)
        if done != k or not taken:  # pragma: no cover - the trip count is exact
            raise AssertionError(f"steady loop: {done} of {k} iterations, taken={taken}")
        t0 = T.t
        shift = k * delta
        # skipped write-backs land where their counterparts one iteration apart would
        w = len(wb_rel)
        if len(self.ranges) != k * w:  # pragma: no cover - a constant mask writes alike
            raise AssertionError("steady loop: write-backs differ between iterations")
        end = T.end
        for i, written in enumerate(self.ranges):
            when = t0 + wb_rel[i % w] + (i // w + 1) * delta
            for lo, hi in (written[3] if len(written) > 3 else (written[:2],)):
                T.wrote_dram(lo, hi, when)
        T.t = t0 + shift
        T.end = end + shift
        T.reg_ready[:] = [r + shift if r > t0 else r for r in T.reg_ready]
        kept = [e + shift for e in T.vq if e > t0]
        T.vq.clear()
        T.vq.extend(kept)
        T.cu_free += shift
        for reads in (T.maps_reads, T.weights_reads):
            for j, (lo, hi, e) in enumerate(reads):
                if e > t0:
                    reads[j] = (lo, hi, e + shift)
        dma = T.dma
        i = bisect_right(dma.times, t0) - 1
        for j in range(i + 1, len(dma.times)):
            dma.times[j] += shift
        for name, g in zip(_COUNTERS, grow):
            setattr(T, name, getattr(T, name) + k * g)
        for key, g in stalls.items():
            if g:
                T.stalls[key] += k * g
        self.ranges.clear()
        self.m.steady_iterations += k
