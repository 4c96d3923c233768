"""
The two indexes the cycle model (timing.py) queries per instruction: the DRAM bandwidth
granted over future time (`BandwidthLedger`) and the LDs still landing in a buffer, by
address (`PendingLoads`). Both give the answers of a plain scan over every transfer or
load; they only keep what can no longer matter from being scanned again.
"""

from __future__ import annotations

from bisect import bisect_right

_INF = float("inf")
_EPS = 1e-9
"""Slack of the ledger's comparisons: a segment with no more than this left is full."""


class BandwidthLedger:
    """
    Piecewise-constant DRAM bandwidth already granted over future time. A new transfer
    takes what earlier ones left, up to its port cap: an arbitration by age that is
    exact, deterministic and computable when the request is issued.

    Segment i is [times[i], times[i+1]) (the last one open-ended) with used[i] bytes/cycle
    granted. A full segment (at most `_EPS` left) gives a transfer nothing, now or later, so
    full neighbours are kept merged: no two adjacent segments are full, and a transfer skips a
    full stretch in one step. When write-backs oversubscribe the bus the backlog is then one
    segment, not one per transfer that every later transfer would walk (quadratic). Segments
    with room, and the float arithmetic on them, are those of a plain walk over unmerged
    segments, so end times are the same to the bit (tests/test_timing.py compares with one).
    """

    def __init__(self, total: float):
        self.total = total
        self.times: list[float] = [0.0]
        self.used: list[float] = [0.0]

    def prune(self, now: float) -> None:
        """Forget the segments that end by `now`: no transfer starts before the current cycle."""
        times = self.times
        if len(times) > 16 and times[1] <= now:
            k = bisect_right(times, now) - 1
            del times[:k]
            del self.used[:k]

    def bytes_after(self, t: float) -> float:
        """Bytes granted to cross the bus from cycle `t` on: what requests made so far still have
        to move at `t` (exact for any `t` at or after the last `prune`). A layer's report counts
        the bytes that crossed the bus in its own cycles (core.mark), not those its requests
        will move later, so its GB/s never exceeds the bus's."""
        times, used = self.times, self.used
        i = max(0, bisect_right(times, t) - 1)
        moved = 0.0
        for j in range(i, len(times) - 1):
            if used[j]:
                moved += used[j] * (times[j + 1] - max(times[j], t))
        return moved  # the last segment is open-ended: nothing is granted there

    def _merge(self, i: int) -> int:
        """Segment i just became full: merge it with full neighbours; returns its index."""
        times, used, total = self.times, self.used, self.total
        if i + 1 < len(times) and total - used[i + 1] <= _EPS:
            del times[i + 1]
            del used[i + 1]
        if i > 0 and total - used[i - 1] <= _EPS:
            del times[i]
            del used[i]
            return i - 1
        return i

    def transfer(self, start: float, nbytes: int, cap: float) -> float:
        """Grant `nbytes` from `start` at up to `cap` bytes/cycle; returns when the last byte moves."""
        times, used, total = self.times, self.used, self.total
        if start < times[0]:
            start = times[0]
        i = bisect_right(times, start) - 1
        if total - used[i] <= _EPS:
            i += 1  # full from `start` on: the next segment has room
        elif times[i] != start:
            i += 1
            times.insert(i, start)
            used.insert(i, used[i - 1])
        remaining = float(nbytes)
        while True:
            t0 = times[i]
            seg_end = times[i + 1] if i + 1 < len(times) else _INF
            u = used[i]
            avail = total - u
            if cap < avail:
                avail = cap
            need = remaining / avail
            if t0 + need <= seg_end + _EPS:
                end = t0 + need
                if t0 < end < seg_end:
                    times.insert(i + 1, end)
                    used.insert(i + 1, u)
                used[i] = u + avail
                if total - used[i] <= _EPS:
                    self._merge(i)
                return end
            used[i] = u + avail
            remaining -= avail * (seg_end - t0)
            if total - used[i] <= _EPS:
                i = self._merge(i) + 1
            else:
                i += 1
                if total - used[i] <= _EPS:
                    i += 1


class PendingLoads:
    """
    The LDs into one kind of buffer (maps or weights) that may still be landing:
    (lo, hi, done, CU mask) in buffer elements, filed under every `2^SHIFT`-element block
    their range touches, or, spanning more than `WIDE` blocks (a whole tile), in one list
    looked at always. A vector op asks when the last of them overlapping what it reads lands;
    a layer that fetches far ahead has hundreds in flight, of which the few in the blocks
    read are the only ones looked at.

    Entries landed by the asking dispatch are dropped from the lists it looks at, all of
    them once `due` has passed. One that stayed would be harmless (its `done` is below the
    answer that matters, see `Timing._vector`), so the last answer stands until an LD is
    added: a loop's vector ops ask about the same weights again and again.
    """

    SHIFT = 8
    WIDE = 4
    PRUNE_AT = 8
    """A block's entries before the landed ones are dropped."""

    def __init__(self) -> None:
        self.blocks: dict[int, list[tuple[int, int, int, int]]] = {}
        self.wide: list[tuple[int, int, int, int]] = []
        self.due = 0
        """No LD filed here lands after this cycle (the latest `done` ever added)."""
        self._asked: tuple[int, int, int] | None = None
        self._answer = 0

    def _span(self, lo: int, hi: int) -> range:
        """The blocks an entry overlapping [lo, hi) is filed under; an empty range asks for
        the entries around `lo` (what an overlap test `e.lo < hi and lo < e.hi` can match)."""
        shift = self.SHIFT
        return range(lo >> shift, ((hi - 1 if hi > lo else lo) >> shift) + 1)

    def add(self, lo: int, hi: int, done: int, mask: int, now: int) -> None:
        """File an LD of [lo, hi) that lands at `done`, issued at `now`."""
        entry = (lo, hi, done, mask)
        self._asked = None
        if done > self.due:
            self.due = done
        span = self._span(lo, hi)
        if len(span) > self.WIDE:
            self.wide.append(entry)
            return
        blocks = self.blocks
        for b in span:
            block = blocks.get(b)
            if block is None:
                blocks[b] = [entry]
            else:
                if len(block) >= self.PRUNE_AT:
                    block[:] = [e for e in block if e[2] > now]
                block.append(entry)

    def ready(self, lo: int, hi: int, now: int, mask: int = -1) -> int:
        """When the last LD overlapping [lo, hi) (into a CU of `mask`) lands; an answer <= `now`
        means none is still landing after `now`."""
        if self.due <= now:
            if self.blocks or self.wide:
                self.blocks.clear()
                self.wide.clear()
            return 0
        asked = (lo, hi, mask)
        if asked == self._asked:
            return self._answer
        ready = _latest(self.wide, lo, hi, now, mask, 0) if self.wide else 0
        blocks = self.blocks
        for b in self._span(lo, hi):
            block = blocks.get(b)
            if block:
                ready = _latest(block, lo, hi, now, mask, ready)
        self._asked, self._answer = asked, ready
        return ready


def _latest(entries: list[tuple[int, int, int, int]], lo: int, hi: int, now: int, mask: int,
            ready: int) -> int:
    """max(ready, the latest `done` after `now` of the entries overlapping [lo, hi) in `mask`);
    drops the entries landed by `now`."""
    landed = False
    for e in entries:
        if e[2] <= now:
            landed = True
        elif e[2] > ready and e[0] < hi and lo < e[1] and e[3] & mask:
            ready = e[2]
    if landed:
        entries[:] = [e for e in entries if e[2] > now]
    return ready
