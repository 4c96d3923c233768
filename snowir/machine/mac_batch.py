"""
Deferred MAC arithmetic for the fast engine: a run of MACs is recorded as it dispatches and
computed as a few matrix products when something could observe its results.

A MAC only reads the maps and weights buffers and the accumulator, and only its write-back
touches DRAM, so MACs between two other data-path instructions (LD, TMOV, VMOV, MAX) can be
evaluated together. Faults a MAC can raise on its own (buffer ranges, write-back address and
alignment) are checked when it is recorded, so they name the instruction that breaks the rule;
the one fault that needs the arithmetic, 48-bit accumulator overflow, is found at the flush and
reported with the program counter of the write-back MAC that overflowed, after the write-backs
before it have landed, as in the reference engine.

Exactness: every buffer word is a 16-bit integer, so one MAC's sum of products is below
2^30 * trace < 2^53 and float64 matrix products (BLAS) are exact; sums across MACs are int64.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from snowir.fixedpoint import ACC_LIMIT, writeback
from snowir.machine.state import MachineFault, MachineState

FLUSH_AT = 3000
"""MACs recorded before a flush is forced."""
GATHER_WORDS = 1 << 20
"""Maps words gathered for one matrix product (8 MB of float64 at most)."""


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
        # points at a copy of the values it saw instead of the run being cut there
        self.operands: list[tuple[np.ndarray, np.ndarray]] = []
        self.wb_operands: list[int] = []
        self.operands_changed = True
        self._windows: dict[int, np.ndarray] = {}
        self._marks: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.pcs)

    # ------------------------------------------------------------------ recording
    def add(self, pc: int, indp: bool, out_addr: int, maps_addr: int, w_addr: int, trace: int,
            wb: bool, relu: bool) -> tuple[int, int, int] | None:
        """Check and record one MAC; returns its write-back's (lo, hi, bytes) like `MachineState.mac`."""
        st = self.st
        lanes = st.hw.lanes
        st._maps_range(maps_addr, trace, "MAC")
        st._weights_range(w_addr, lanes * trace if indp else trace, "MAC")
        if self.pcs and indp != self.indp:
            self.flush()
        self.indp = indp
        written = self._written(indp, out_addr) if wb else None
        i = len(self.pcs)
        self.pcs.append(pc)
        self.maps_at.append(maps_addr)
        key = (trace, w_addr)
        group = self.groups.get(key)
        if group is None:
            self.groups[key] = [i]
        else:
            group.append(i)
        if wb:
            self.wb.append(i)
            self.out_at.append(out_addr)
            self.relu.append(relu)
            if self.operands_changed:
                self.operands.append((st.bias.copy(), st.bypass.copy()))
                self.operands_changed = False
            self.wb_operands.append(len(self.operands) - 1)
            if st.bypass_held:  # consumed by this write-back (MachineState.mac)
                st.bypass[:] = 0
                st.bypass_held = False
                self.operands_changed = True
        if i + 1 >= FLUSH_AT:
            self.flush()
        return written

    def _written(self, indp: bool, base: int) -> tuple[int, int, int] | None:
        """The DRAM bytes a write-back at `base` touches, checked as `MachineState._store` does."""
        st = self.st
        span = st.writeback_span(base, self._per_cu(indp), st.hw.vmacs_per_cu, st._stride(indp, st.hw.lanes), "MAC")
        if span is None:
            return None
        offsets, lo, hi = span
        return lo, hi, 2 * int(offsets.size)

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
            self.operands, self.wb_operands, self.operands_changed = [], [], True

    def _products(self, n: int) -> np.ndarray:
        """products[i, c, v(, k)]: record i's sum of products on CU c, vMAC v (INDP: lane k)."""
        st, hw = self.st, self.st.hw
        cus, vmacs, lanes = hw.cus, hw.vmacs_per_cu, hw.lanes
        width = vmacs * lanes if self.indp else vmacs
        out = np.empty((n, cus, width), np.float64)
        maps_at = np.asarray(self.maps_at, np.int64)
        for (trace, w), members in self.groups.items():
            view = self._windows.get(trace)
            if view is None:  # st.maps is only ever written in place, so the view stays valid
                view = self._windows[trace] = sliding_window_view(st.maps, trace, axis=1)
            if self.indp:
                wt = st.weights[:, :, w:w + lanes * trace].reshape(cus, vmacs, trace, lanes)
                wt = wt.transpose(0, 2, 1, 3).reshape(cus, trace, width)
            else:
                wt = st.weights[:, :, w:w + trace].transpose(0, 2, 1)
            wt = wt.astype(np.float64)
            step = max(1, GATHER_WORDS // (cus * trace))
            for lo in range(0, len(members), step):
                idx = np.asarray(members[lo:lo + step], np.int64)
                windows = view[:, maps_at[idx]].astype(np.float64)
                out[idx] = np.matmul(windows, wt).transpose(1, 0, 2)
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
        shift = st.frac if st.wb_shift is None else st.wb_shift
        if len(self.operands) == 1:
            bias, bypass = self.operands[0]
        else:
            which = np.asarray(self.wb_operands[:k], np.int64)
            bias = np.stack([b for b, _ in self.operands])[which]
            bypass = np.stack([b for _, b in self.operands])[which]
        if self.indp:
            vals = writeback(sums, bias, bypass, shift, False).reshape(k, hw.cus, -1)
        else:
            vals = writeback(sums, bias[..., 0], bypass[..., 0], shift, False)
        relu = np.asarray(self.relu[:k], bool)
        if relu.any():
            vals[relu] = np.maximum(vals[relu], 0)
        # every write-back of the run has the same layout (a mask or stride VMOV ends the run);
        # its address checks were made when each MAC was recorded
        per_cu = self._per_cu(self.indp)
        span = st.writeback_span(self.out_at[0], per_cu, hw.vmacs_per_cu, st._stride(self.indp, hw.lanes), "MAC")
        if span is None:
            return
        offsets = span[0]
        enabled = st._mask(per_cu, hw.vmacs_per_cu)
        out = np.asarray(self.out_at[:k], np.int64)
        addr = (out[:, None] + offsets[None, :]).ravel() // 2
        values = vals[:, enabled].ravel()
        # write-backs in increasing order, each past the last one's bytes, cannot collide
        apart = k == 1 or bool((np.diff(out) >= int(offsets.max() - offsets.min()) + 2).all())
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
