"""
Deferred MAC arithmetic for the fast engine: a run of MACs is recorded as it dispatches and
computed as a few matrix products when something could observe its results.

A MAC only reads the maps and weights buffers and the accumulator, and only its write-back
touches DRAM, so MACs between two other data-path instructions (LD, TMOV, VMOV, MAX) can be
evaluated together; an LD that touches neither what they read nor the DRAM they write need
not end the run (`DeferredMacs.load_conflicts`). Faults a MAC can raise on its own (buffer
ranges, write-back address and alignment) are checked when it is recorded, so they name the
instruction that breaks the rule; the one fault that needs the arithmetic, 48-bit accumulator
overflow, is found at the flush and reported with the program counter of the write-back MAC
that overflowed, after the write-backs before it have landed, as in the reference engine.

Exactness: every buffer word is a 16-bit integer, so one MAC's sum of products is below
2^30 * trace < 2^53 and float64 matrix products (BLAS) are exact; sums across MACs are int64.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from snowir.fixedpoint import ACC_LIMIT
from snowir.machine.state import MachineFault, MachineState, page_runs

FLUSH_AT = 3000
"""MACs recorded before a flush is forced."""
GATHER_WORDS = 1 << 20
"""Maps words gathered for one matrix product (8 MB of float64 at most)."""
_FAR = 1 << 62
"""Beyond any buffer or DRAM address: the bounds of an empty run."""


class DeferredMacs:
    def __init__(self, state: MachineState, describe: Callable[[int], str] = str):
        self.st = state
        self.describe = describe  # pc -> the instruction's text, for fault messages
        self.indp = False
        self.pcs: list[int] = []
        self.maps_at: list[int] = []
        self.groups: dict[tuple[int, int], list[int]] = {}  # (trace, weights address) -> records
        self.wb: list[int] = []  # records that write back
        self.out_at: list[int] = []
        self.relu: list[bool] = []
        # bias / bypass of each write-back: VMOV bias and bypass change them between the MACs
        # of a run (a residual conv moves a bypass block per output pixel), so each write-back
        # points at a copy of the values it saw instead of the run being cut there; a copy is
        # taken when a write-back first sees new values, of what it uses (COOP: lane 0)
        self.biases: list[np.ndarray] = []
        self.bypasses: list[np.ndarray] = []
        self.wb_bias: list[int] = []
        self.wb_bypass: list[int] = []
        self.bias_changed = self.bypass_changed = True
        self._windows: dict[int, np.ndarray] = {}
        self._marks: np.ndarray | None = None
        # what the recorded MACs read and write, as bounding ranges: an LD outside them (into
        # the other half of a double buffer, from another tensor) need not wait for a flush
        self.maps_lo = self.w_lo = self.dram_lo = _FAR
        self.maps_hi = self.w_hi = self.dram_hi = -_FAR
        # checked per MAC: the buffer sizes, and the write-back's byte range relative to its
        # address per layout (wb_mask, cu_stride, indp), known good once checked in full
        hw = state.hw
        self._lanes = hw.lanes
        self._maps_size = hw.maps_buffer_elements
        self._weights_size = hw.weights_buffer_elements
        self._spans: dict[tuple[int, int | None, bool], tuple[int, int, int]] = {}

    def __len__(self) -> int:
        return len(self.pcs)

    # ------------------------------------------------------------------ recording
    def add(self, pc: int, indp: bool, out_addr: int, maps_addr: int, w_addr: int, trace: int,
            wb: bool, relu: bool) -> tuple[int, int, int] | None:
        """Check and record one MAC; returns its write-back's (lo, hi, bytes) like `MachineState.mac`."""
        st = self.st
        maps_end = maps_addr + trace
        w_end = w_addr + (self._lanes * trace if indp else trace)
        if maps_addr < 0 or maps_end > self._maps_size:
            st._maps_range(maps_addr, trace, "MAC")
        if w_addr < 0 or w_end > self._weights_size:
            st._weights_range(w_addr, w_end - w_addr, "MAC")
        if indp != self.indp:
            if self.pcs:
                self.flush()
            self.indp = indp
        written = self._written(indp, out_addr) if wb else None
        pcs = self.pcs
        i = len(pcs)
        pcs.append(pc)
        self.maps_at.append(maps_addr)
        if maps_addr < self.maps_lo:
            self.maps_lo = maps_addr
        if maps_end > self.maps_hi:
            self.maps_hi = maps_end
        if w_addr < self.w_lo:
            self.w_lo = w_addr
        if w_end > self.w_hi:
            self.w_hi = w_end
        key = (trace, w_addr)
        group = self.groups.get(key)
        if group is None:
            self.groups[key] = [i]
        else:
            group.append(i)
        if wb:
            if written is not None:
                if written[0] < self.dram_lo:
                    self.dram_lo = written[0]
                if written[1] > self.dram_hi:
                    self.dram_hi = written[1]
            self.wb.append(i)
            self.out_at.append(out_addr)
            self.relu.append(relu)
            if self.bias_changed:
                self.biases.append(st.bias.copy() if indp else st.bias[:, :, 0].copy())
                self.bias_changed = False
            self.wb_bias.append(len(self.biases) - 1)
            if self.bypass_changed:
                self.bypasses.append(st.bypass.copy() if indp else st.bypass[:, :, 0].copy())
                self.bypass_changed = False
            self.wb_bypass.append(len(self.bypasses) - 1)
            if st.bypass_held:  # consumed by this write-back, as in MachineState.mac
                st.consume_bypass()
                self.bypass_changed = True
        if i + 1 >= FLUSH_AT:
            self.flush()
        return written

    def _written(self, indp: bool, base: int) -> tuple[int, int, int] | None:
        """The DRAM bytes a write-back at `base` touches (lo, hi, bytes), checked as
        `MachineState._store` does."""
        st = self.st
        key = (st.wb_mask, st.cu_stride, indp)
        known = self._spans.get(key)
        if known is not None:
            lo, hi = base + known[0], base + known[1]
            if not base & 1 and lo >= 0 and hi <= st.dram.size:
                if known[3] is None:
                    return lo, hi, known[2]
                return lo, hi, known[2], tuple((base + a, base + b) for a, b in known[3])
        # a new layout, or a write-back the checks may refuse: in full (this raises the fault)
        span = st.writeback_span(base, self._per_cu(indp), st.hw.vmacs_per_cu, st._stride(indp, st.hw.lanes), "MAC")
        if span is None:
            return None
        offsets, lo, hi = span
        runs = page_runs(offsets)
        self._spans[key] = (lo - base, hi - base, 2 * int(offsets.size), runs)
        if runs is None:
            return lo, hi, 2 * int(offsets.size)
        return lo, hi, 2 * int(offsets.size), tuple((base + a, base + b) for a, b in runs)

    def load_conflicts(self, target: str, lo: int, hi: int, src_lo: int, src_hi: int) -> bool:
        """Whether an LD of DRAM [src_lo, src_hi) into buffer elements [lo, hi) of `target`
        ("maps", "weights", "icache") may touch what the recorded MACs read or write: if not,
        it changes nothing they compute and they need not be flushed before it."""
        if not self.pcs:
            return False
        if src_lo < self.dram_hi and self.dram_lo < src_hi:
            return True
        if target == "maps":
            return lo < self.maps_hi and self.maps_lo < hi
        if target == "weights":
            return lo < self.w_hi and self.w_lo < hi
        return True

    def _per_cu(self, indp: bool) -> int:
        hw = self.st.hw
        return hw.vmacs_per_cu * (hw.lanes if indp else 1)

    # ------------------------------------------------------------------ evaluation
    def flush(self) -> None:
        n = len(self.pcs)
        if not n:
            return
        try:
            self._evaluate(n)
        finally:
            self.pcs, self.maps_at, self.groups = [], [], {}
            self.wb, self.out_at, self.relu = [], [], []
            self.biases, self.bypasses, self.wb_bias, self.wb_bypass = [], [], [], []
            self.bias_changed = self.bypass_changed = True
            self.maps_lo = self.w_lo = self.dram_lo = _FAR
            self.maps_hi = self.w_hi = self.dram_hi = -_FAR

    def _products(self, n: int) -> np.ndarray:
        """products[i, c, v(, k)]: record i's sum of products on CU c, vMAC v (INDP: lane k)."""
        st, hw = self.st, self.st.hw
        cus, vmacs, lanes = hw.cus, hw.vmacs_per_cu, hw.lanes
        width = vmacs * lanes if self.indp else vmacs
        out = np.empty((n, cus, width), np.float64)
        maps_at = np.asarray(self.maps_at, np.int64)
        for (trace, w), members in self.groups.items():
            view = self._windows.get(trace)
            if view is None:  # st.maps_f is only ever written in place, so the view stays valid
                view = self._windows[trace] = sliding_window_view(st.maps_f, trace, axis=1)
            if self.indp:
                wt = st.weights_f[:, :, w:w + lanes * trace].reshape(cus, vmacs, trace, lanes)
                wt = wt.transpose(0, 2, 1, 3).reshape(cus, trace, width)
            else:
                wt = st.weights_f[:, :, w:w + trace].transpose(0, 2, 1)
            if len(members) >= 32:  # BLAS takes contiguous operands only: worth a copy
                wt = np.ascontiguousarray(wt)
            step = max(1, GATHER_WORDS // (cus * trace))
            if len(members) == n <= step:  # one group: every record, in order
                out = np.matmul(view[:, maps_at], wt).transpose(1, 0, 2)
                break
            for lo in range(0, len(members), step):
                idx = np.asarray(members[lo:lo + step], np.int64)
                out[idx] = np.matmul(view[:, maps_at[idx]], wt).transpose(1, 0, 2)
        return out.astype(np.int64).reshape((n, cus, vmacs, lanes) if self.indp else (n, cus, vmacs))

    def _evaluate(self, n: int) -> None:
        st = self.st
        products = self._products(n)
        acc = st.acc if self.indp else st.acc[:, :, 0]
        wb = self.wb
        starts = [0] + [i + 1 for i in wb if i + 1 < n]
        sums = np.add.reduceat(products, starts, axis=0)
        sums[0] += acc
        k = len(wb)
        done = sums[:k]
        if k:
            over = (done >= ACC_LIMIT) | (done < -ACC_LIMIT)
            bad = over.reshape(k, -1).any(axis=1)
            first_bad = int(np.argmax(bad)) if bad.any() else k
            if not self.indp:
                # lanes 1..15 still hold what an INDP MAC without write-back left; a COOP
                # write-back checks and clears every lane, as MachineState.mac does
                rest = st.acc[:, :, 1:]
                if rest.any():
                    if ((rest >= ACC_LIMIT) | (rest < -ACC_LIMIT)).any():
                        first_bad = 0
                    else:
                        rest[...] = 0
            self._store(done[:first_bad], first_bad)
            if first_bad < k:
                st.acc[:] = 0
                pc = self.pcs[wb[first_bad]]
                raise MachineFault("48-bit accumulator overflow").at(pc, self.describe(pc))
        acc[...] = sums[k] if k < len(sums) else 0

    def _store(self, sums: np.ndarray, k: int) -> None:
        if not k:
            return
        st, hw = self.st, self.st.hw
        bias = _seen(self.biases, self.wb_bias, k)
        bypass = _seen(self.bypasses, self.wb_bypass, k)
        relu = self.relu[:k]
        vals, rounded = st.write_back_values(sums, bias, bypass, relu)
        # every write-back of the run has the same layout (a mask or stride VMOV ends the run);
        # its address checks were made when each MAC was recorded
        per_cu = self._per_cu(self.indp)
        span = st.writeback_span(self.out_at[0], per_cu, hw.vmacs_per_cu, st._stride(self.indp, hw.lanes), "MAC")
        if span is None:
            return
        offsets, lo, hi = span
        enabled = st._mask(per_cu, hw.vmacs_per_cu)
        st.count_saturated(rounded, relu, enabled)
        out = np.asarray(self.out_at[:k], np.int64)
        addr = (out[:, None] + offsets[None, :]).ravel() // 2
        values = vals[:, enabled].ravel()
        # write-backs in increasing order, each past the last one's bytes, cannot collide
        apart = k == 1 or bool((np.diff(out) >= hi - lo).all())
        if apart or self._distinct(addr):
            st.dram16[addr] = values
        else:  # write-backs over one another: the later one wins, as in program order
            width = offsets.size
            for j in range(k):
                st.dram16[addr[j * width:(j + 1) * width]] = values[j * width:(j + 1) * width]

    def _distinct(self, addr: np.ndarray) -> bool:
        """No element address twice (a mark per DRAM word, cleared after)."""
        marks = self._marks
        if marks is None or marks.size != self.st.dram16.size:
            marks = self._marks = np.zeros(self.st.dram16.size, bool)
        marks[addr] = True
        lo, hi = int(addr.min()), int(addr.max()) + 1
        distinct = int(np.count_nonzero(marks[lo:hi])) == addr.size
        marks[addr] = False
        return distinct


def _seen(values: list[np.ndarray], which: list[int], k: int) -> np.ndarray:
    """The operand values each of the first k write-backs saw: one array for all, or stacked
    per write-back (`which` counts up from 0 in steps of 0 or 1)."""
    if len(values) == 1:
        return values[0]
    if which[k - 1] == k - 1:  # one each: which[:k] is 0..k-1
        return np.stack(values[:k])
    return np.stack(values)[np.asarray(which[:k], np.int64)]
