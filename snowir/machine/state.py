"""
Architectural state of Snowflake and the functional semantics of its data-path
instructions (MAC, MAX, VMOV, LD, TMOV), shared by both engines.

Buffers are numpy int16 arrays addressed in 16-bit elements; DRAM is a byte array
addressed in bytes (16-bit aligned for data). Rules a program can break (ranges,
alignment, accumulator overflow) raise `MachineFault`; the engine adds the program
counter and the disassembled instruction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from snowir.dialects.snowflake_asm import SELECT_ALL
from snowir.errors import SnowError
from snowir import writeback
from snowir.fixedpoint import (INT16_MAX, INT16_MIN, MAX_WB_SHIFT, accumulator_overflows, clipped, saturate,
                               writeback_rounded)
from snowir.hw import DRAM_PAGE_BYTES, MASK_WORD_BITS, MASK_WORD_MAX, SnowflakeConfig


class MachineFault(SnowError):
    """A hardware rule broken by the program. `pc` is filled in by the engine."""

    def __init__(self, message: str, pc: int | None = None, instruction: str = ""):
        self.message = message
        self.pc = pc
        self.instruction = instruction
        self.source: str | None = None
        super().__init__(self._text())

    def _text(self) -> str:
        if self.pc is None:
            return f"machine fault: {self.message}"
        where = f"pc {self.pc}" + (f" ({self.instruction})" if self.instruction else "")
        if self.source:
            where += f" in {self.source}"
        return f"machine fault at {where}: {self.message}"

    def located(self, source: str | None) -> MachineFault:
        """Name where the faulting instruction came from (ProgramImage.source)."""
        if source and self.source is None and self.pc is not None:
            self.source = source
            self.args = (self._text(),)
        return self

    def at(self, pc: int, instruction: str) -> MachineFault:
        if self.pc is None:
            self.pc, self.instruction = pc, instruction
            self.args = (self._text(),)
        return self


@dataclass
class MachineState:
    hw: SnowflakeConfig
    frac: int
    dram: np.ndarray
    regs: list[int] = field(default_factory=lambda: [0] * 32)
    maps: np.ndarray = field(init=False)
    weights: np.ndarray = field(init=False)
    acc: np.ndarray = field(init=False)
    bias: np.ndarray = field(init=False)
    bypass: np.ndarray = field(init=False)
    pool: np.ndarray = field(init=False)
    wb_mask: int = -1  # reset: every vMAC enabled (set from hw in __post_init__)
    cu_stride: int | None = None
    wb_shift: int | None = None  # None: the program's frac_bits
    wb_units: dict[str, int] = field(default_factory=dict)
    """The write-back units' words (`VMOV <unit>`, snowir/writeback.py) by unit name; absent or 0:
    the unit passes values through, the stock write-back."""
    saturated: int = 0
    """Write-back values the saturation changed (`fixedpoint.clipped`), of enabled vMACs."""

    def __post_init__(self) -> None:
        hw = self.hw
        if self.dram.size % 2:
            raise ValueError("DRAM size must be even")
        self.dram16 = self.dram.view(np.int16)
        if self.wb_mask < 0:
            self.wb_mask = hw.all_vmacs_mask
        # 16-bit words (only LDs from DRAM write them) held as int64: the MAC arithmetic then
        # reads views, not per-instruction int64 copies
        self.maps = np.zeros((hw.cus, hw.maps_buffer_elements), np.int64)
        self.weights = np.zeros((hw.cus, hw.vmacs_per_cu, hw.weights_buffer_elements), np.int64)
        # and as float64, written alongside: the deferred MACs' matrix products (mac_batch.py)
        # gather their windows from these rather than converting every gathered word
        self.maps_f = np.zeros(self.maps.shape, np.float64)
        self.weights_f = np.zeros(self.weights.shape, np.float64)
        self._masks: dict[tuple[int, int, int], np.ndarray] = {}
        self._bypass_offsets: dict[tuple[int, int], np.ndarray] = {}
        self._layouts: dict[tuple[int, int, int, int], tuple[np.ndarray, int, int] | None] = {}
        self._enabled: dict[int, int] = {}
        lanes = hw.lanes
        self.acc = np.zeros((hw.cus, hw.vmacs_per_cu, lanes), np.int64)
        self.bias = np.zeros((hw.cus, hw.vmacs_per_cu, lanes), np.int64)
        self.bypass = np.zeros((hw.cus, hw.vmacs_per_cu, lanes), np.int64)
        self.pool = np.full((hw.cus, lanes), INT16_MIN, np.int16)
        self.bypass_held = False  # a VMOV bypass since the last write-back (`consume_bypass`)
        # the units a write-back runs through, with their words, in order: kept with `wb_units`
        # so a write-back does not walk the registry
        self.wb_active: tuple[tuple[writeback.WritebackUnit, int], ...] = ()

    # ------------------------------------------------------------------ helpers
    def _dram_index(self, address: int, elements: int, what: str) -> int:
        if address % 2:
            raise MachineFault(f"{what} DRAM address {address:#x} is not 16-bit aligned")
        if address < 0 or address + 2 * elements > self.dram.size:
            raise MachineFault(
                f"{what} DRAM range [{address:#x}, +{2 * elements} B) outside DRAM of {self.dram.size:#x} bytes")
        return address // 2

    def _maps_range(self, address: int, elements: int, what: str) -> None:
        if address < 0 or address + elements > self.hw.maps_buffer_elements:
            raise MachineFault(
                f"{what} maps-buffer range [{address}, +{elements}) outside [0, {self.hw.maps_buffer_elements})")

    def _weights_range(self, address: int, elements: int, what: str) -> None:
        if address < 0 or address + elements > self.hw.weights_buffer_elements:
            raise MachineFault(
                f"{what} weights-buffer range [{address}, +{elements}) outside [0, {self.hw.weights_buffer_elements})")

    def _stride(self, indp: bool, lanes_per_vmac: int) -> int:
        if self.cu_stride is not None:
            return self.cu_stride
        return 2 * self.hw.vmacs_per_cu * lanes_per_vmac if indp else 2 * self.hw.vmacs_per_cu

    def bypass_layout(self, indp: bool, select: str = "bypass", shared: bool = False) -> tuple[int, int]:
        """(elements between the CUs' blocks, elements per CU) a `vmov bypass` (or `mbias`) reads:
        the write-back layout (CU stride S, so CU c starts c*S/2 elements on), so a residual
        input (a bias block) stored like the output lines up with it in the maps buffer; a
        `shared` mbias: every CU's block at rs1 itself (0 between them)."""
        count = self.hw.vmacs_per_cu * (self.hw.lanes if indp else 1)
        if shared:
            return 0, count
        stride = self._stride(indp, self.hw.lanes)
        if stride % 2:
            raise MachineFault(f"VMOV {select} with CU stride {stride}: not 16-bit aligned")
        return stride // 2, count

    def _maps_block(self, value: int, step: int, count: int, what: str) -> np.ndarray:
        """Element j of CU c's block at value + c*step, per CU (C x count), range-checked."""
        hw = self.hw
        self._maps_range(value, (hw.cus - 1) * step + count, what)
        offsets = self._bypass_offsets.get((step, count))
        if offsets is None:  # element c*step + j of CU c's buffer, as a flat index (one per pixel in ResNet)
            cus = np.arange(hw.cus)[:, None]
            offsets = self._bypass_offsets[(step, count)] = (
                cus * (hw.maps_buffer_elements + step) + np.arange(count)[None, :])
        return self.maps.reshape(-1)[value + offsets]

    def writeback_span(self, base: int, per_cu: int, bits_per_cu: int, stride: int,
                       what: str) -> tuple[np.ndarray, int, int] | None:
        """Check a write-back of `per_cu` results per CU at `base` (CU c's at c*stride bytes on,
        result j at 2j): (byte offsets from `base` of the results the mask enables, in store
        order; the byte range touched), None when it enables none."""
        if base % 2 or stride % 2:
            raise MachineFault(f"{what} write-back address {base:#x} / CU stride {stride} not 16-bit aligned")
        key = (self.wb_mask, per_cu, bits_per_cu, stride)
        layout = self._layouts.get(key)
        if layout is None:
            offsets = np.arange(self.hw.cus, dtype=np.int64)[:, None] * stride \
                + 2 * np.arange(per_cu, dtype=np.int64)[None, :]
            offsets = offsets[self._mask(per_cu, bits_per_cu)]
            layout = self._layouts[key] = (offsets, int(offsets.min()), int(offsets.max()) + 2) if offsets.size else None
        if layout is None:
            return None
        offsets, lo, hi = layout
        lo, hi = base + lo, base + hi
        if lo < 0 or hi > self.dram.size:
            raise MachineFault(f"{what} write-back [{lo:#x}, {hi:#x}) outside DRAM of {self.dram.size:#x} bytes")
        return offsets, lo, hi

    def _store(self, base: int, values: np.ndarray, per_cu: int, bits_per_cu: int, stride: int,
               what: str) -> tuple[int, int, int] | None:
        """Write values[c, j] where the mask enables it (`writeback_span`); returns the byte range
        touched and the bytes written."""
        span = self.writeback_span(base, per_cu, bits_per_cu, stride, what)
        if span is None:
            return None
        offsets, lo, hi = span
        self.dram16[(base + offsets) // 2] = values[self._mask(per_cu, bits_per_cu)]
        runs = page_runs(offsets)
        if runs is None:
            return lo, hi, 2 * int(offsets.size)
        return lo, hi, 2 * int(offsets.size), tuple((base + a, base + b) for a, b in runs)

    def enabled_vmacs(self) -> int:
        """vMACs whose results the write-back mask keeps: the ones doing useful work."""
        count = self._enabled.get(self.wb_mask)
        if count is None:  # asked once per MAC
            count = self._enabled[self.wb_mask] = bin(self.wb_mask & ((1 << self.hw.vmacs) - 1)).count("1")
        return count

    def _mask(self, per_cu: int, bits_per_cu: int) -> np.ndarray:
        """enabled[c, j]: write-back enable of lane group j of CU c from the VMOV mask."""
        key = (self.wb_mask, per_cu, bits_per_cu)
        if key not in self._masks:
            self._masks[key] = self._mask_of(per_cu, bits_per_cu)
        return self._masks[key]

    def _mask_of(self, per_cu: int, bits_per_cu: int) -> np.ndarray:
        hw = self.hw
        bits = np.array([(self.wb_mask >> (c * hw.vmacs_per_cu + v)) & 1
                         for c in range(hw.cus) for v in range(hw.vmacs_per_cu)], bool)
        bits = bits.reshape(hw.cus, hw.vmacs_per_cu)
        if bits_per_cu == 1:  # pool unit: one bit (vMAC 0's) per CU
            return np.repeat(bits[:, :1], per_cu, axis=1)
        return np.repeat(bits, per_cu // hw.vmacs_per_cu, axis=1)

    # ------------------------------------------------------------------ vector ops
    def mac(self, indp: bool, out_addr: int, maps_addr: int, w_addr: int, trace: int,
            wb: bool, relu: bool) -> tuple[int, int, int] | None:
        hw = self.hw
        lanes = hw.lanes
        self._maps_range(maps_addr, trace, "MAC")
        m = self.maps[:, maps_addr:maps_addr + trace]
        if indp:
            self._weights_range(w_addr, lanes * trace, "MAC")
            w = self.weights[:, :, w_addr:w_addr + lanes * trace]
            w = w.reshape(hw.cus, hw.vmacs_per_cu, trace, lanes)
            self.acc += np.einsum("cl,cvlk->cvk", m, w)
        else:
            self._weights_range(w_addr, trace, "MAC")
            w = self.weights[:, :, w_addr:w_addr + trace]
            self.acc[:, :, 0] += np.einsum("cl,cvl->cv", m, w)
        if not wb:
            return None
        if accumulator_overflows(self.acc):
            raise MachineFault("48-bit accumulator overflow")
        if indp:
            sums, bias, bypass = self.acc, self.bias, self.bypass
        else:
            sums, bias, bypass = self.acc[:, :, 0], self.bias[:, :, 0], self.bypass[:, :, 0]
        vals, rounded = self.write_back_values(sums[None], bias, bypass, [relu])
        self.acc[:] = 0
        self.consume_bypass()
        vals, rounded = vals[0], rounded[0]
        written = self._store(out_addr, vals, vals.shape[1], hw.vmacs_per_cu, self._stride(indp, lanes), "MAC")
        if written is not None:
            self.count_saturated(rounded[None], [relu], self._mask(vals.shape[1], hw.vmacs_per_cu))
        return written

    def write_back_values(self, sums: np.ndarray, bias: np.ndarray, bypass: np.ndarray,
                          relu: list[bool]) -> tuple[np.ndarray, np.ndarray]:
        """The one MAC write-back, of both engines: k write-backs' accumulator sums
        (k x C x V(, lanes)), with the bias and bypass each saw (broadcast against them), ->
        (int16 values k x C x per-CU, the rounded values before saturation). Bias and bypass
        added at the accumulator's scale, the write-back shift with rounding (`writeback_rounded`),
        the write-back units whose word is set (`wb_active`), 16-bit saturation, then ReLU
        where `relu[i]`."""
        shift = self.frac if self.wb_shift is None else self.wb_shift
        rounded = writeback_rounded(sums, bias, bypass, shift)
        for unit, word in self.wb_active:
            rounded = unit.apply(word, rounded)
        rounded = rounded.reshape(rounded.shape[0], self.hw.cus, -1)
        vals = saturate(rounded, False)
        if all(relu):
            np.maximum(vals, 0, out=vals)
        elif any(relu):
            keep = np.asarray(relu, bool)
            vals[keep] = np.maximum(vals[keep], 0)
        return vals, rounded

    def count_saturated(self, rounded: np.ndarray, relu: list[bool], enabled: np.ndarray) -> None:
        """Add to `saturated` the enabled values saturation changed (`fixedpoint.clipped`) of k
        write-backs' rounded values (k x C x per-CU)."""
        if int(rounded.max()) > INT16_MAX or int(rounded.min()) < INT16_MIN:
            lost = clipped(rounded, np.asarray(relu, bool)[:, None, None])
            self.saturated += int(np.count_nonzero(lost[:, enabled]))

    def consume_bypass(self) -> None:
        """A write-back uses up the bypass operand it added (docs/machine.md [P]: one VMOV bypass
        per write-back MAC), so a conv after a residual one adds nothing."""
        if self.bypass_held:
            self.bypass[:] = 0
            self.bypass_held = False

    def pool_stride(self) -> int:
        """Bytes between the CUs' MAX write-backs, and (halved, in elements) between their reads."""
        stride = self.cu_stride if self.cu_stride is not None else 2 * self.hw.lanes
        if stride % 2:
            raise MachineFault(f"MAX with CU stride {stride}: not 16-bit aligned")
        return stride

    def max(self, out_addr: int, maps_addr: int, step: int, trace: int, wb: bool) -> tuple[int, int, int] | None:
        hw = self.hw
        lanes = hw.lanes
        stride = self.pool_stride()
        # CU c reads c*S/2 elements on, mirroring its write-back: with maps broadcast, one copy
        # of a strip gives CU c channels 16c..16c+15 (S = 32 B) or rows c*R.. (S = R rows)
        cus = np.arange(hw.cus, dtype=np.int64)[:, None, None]
        idx = maps_addr + cus * (stride // 2) + step * np.arange(trace, dtype=np.int64)[None, :, None] \
            + np.arange(lanes)[None, None, :]
        lo, hi = int(idx.min()), int(idx.max()) + 1
        self._maps_range(lo, hi - lo, "MAX")
        window = self.maps[cus, idx]  # cus x trace x lanes
        self.pool = np.maximum(self.pool, window.max(axis=1).astype(np.int16))
        if not wb:
            return None
        written = self._store(out_addr, self.pool.copy(), lanes, 1, stride, "MAX")
        self.pool[:] = INT16_MIN
        return written

    def vmov(self, indp: bool, select: str, value: int, word: int = 0, shared: bool = False) -> None:
        hw = self.hw
        lanes = hw.lanes
        if select == "bias":
            self._weights_range(value, lanes, "VMOV bias")
            self.bias[:] = self.weights[:, :, value:value + lanes]
        elif select in ("bypass", "mbias"):
            # mbias reads a bias block as bypass reads the residual input (docs/isa.md, VMOV)
            block = self._maps_block(value, *self.bypass_layout(indp, select, shared), f"VMOV {select}")
            if select == "bypass":
                self.bypass_held = True
            operand = self.bypass if select == "bypass" else self.bias
            if indp:
                operand[:] = block.reshape(hw.cus, hw.vmacs_per_cu, lanes)
            else:
                operand.fill(0)
                operand[:, :, 0] = block
        elif select == "mask":
            if word >= hw.mask_words:
                raise MachineFault(f"VMOV mask word {word} names no vMAC (this machine has {hw.vmacs})")
            at = MASK_WORD_BITS * word
            kept = self.wb_mask & ~(MASK_WORD_MAX << at)
            self.wb_mask = (kept | (value & MASK_WORD_MAX) << at) & hw.all_vmacs_mask
        elif select == "stride":
            self.cu_stride = value
        elif select == "shift":
            if not 1 <= value <= MAX_WB_SHIFT:
                raise MachineFault(f"VMOV shift {value} out of range [1, {MAX_WB_SHIFT}]")
            self.wb_shift = value
        else:  # a write-back unit's word (snowir/writeback.py)
            unit = writeback.unit(select)
            if unit is None:  # pragma: no cover - a VMOV select of the ISA table no unit declares
                raise MachineFault(f"VMOV {select}: no write-back unit of that name is registered")
            if not unit.machine_has(hw):
                raise MachineFault(f"VMOV {select} on a machine {unit.absent()}")
            self.wb_units[select] = value & 0xFFFFFFFF
            self.wb_active = tuple((u, self.wb_units[u.name]) for u in writeback.units() if self.wb_units.get(u.name))

    def unit_cycles(self, indp: bool) -> int:
        """Cycles a write-back spends in the units whose word is set, in series, before the
        result pipeline (0 on the stock machine)."""
        return sum(unit.cycles(self.hw.lanes, indp) for unit, _ in self.wb_active)

    # ------------------------------------------------------------------ memory ops
    def load_maps(self, buf: int, src: int, length: int, select: int) -> list[int]:
        """LD into maps buffers; returns the CUs written."""
        if length <= 0:
            raise MachineFault(f"LD of length {length}")
        start = self._dram_index(src, length, "LD")
        self._maps_range(buf, length, "LD")
        cus = list(range(self.hw.cus)) if select == SELECT_ALL else [select]
        if select != SELECT_ALL and not 0 <= select < self.hw.cus:
            raise MachineFault(f"LD maps select {select} names no CU")
        data = self.dram16[start:start + length]
        rows = slice(None) if select == SELECT_ALL else select
        self.maps[rows, buf:buf + length] = data
        self.maps_f[rows, buf:buf + length] = data
        return cus

    def load_weights(self, buf: int, src: int, length: int, select: int) -> list[tuple[int, int]]:
        """LD into weights buffers; returns the (cu, vmac) pairs written."""
        hw = self.hw
        if length <= 0:
            raise MachineFault(f"LD of length {length}")
        start = self._dram_index(src, length, "LD")
        self._weights_range(buf, length, "LD")
        if select == SELECT_ALL:
            targets = [(c, v) for c in range(hw.cus) for v in range(hw.vmacs_per_cu)]
            at: tuple = (slice(None), slice(None))
        elif select < hw.vmacs:
            targets = [divmod(select, hw.vmacs_per_cu)]
            at = targets[0]
        elif select < hw.vmacs + hw.vmacs_per_cu:
            targets = [(c, select - hw.vmacs) for c in range(hw.cus)]
            at = (slice(None), select - hw.vmacs)
        else:
            raise MachineFault(f"LD weights select {select} names no vMAC")
        data = self.dram16[start:start + length]
        self.weights[(*at, slice(buf, buf + length))] = data
        self.weights_f[(*at, slice(buf, buf + length))] = data
        return targets

    def tmov(self, dst: int, buf: int, length: int, cu: int) -> tuple[int, int]:
        if length <= 0:
            raise MachineFault(f"TMOV of length {length}")
        if not 0 <= cu < self.hw.cus:
            raise MachineFault(f"TMOV select {cu} names no CU")
        start = self._dram_index(dst, length, "TMOV")
        self._maps_range(buf, length, "TMOV")
        self.dram16[start:start + length] = self.maps[cu, buf:buf + length]
        return dst, dst + 2 * length


_RUNS: dict[bytes, tuple[tuple[int, int], ...] | None] = {}
_RUNS_KEPT = 2000  # a memo bound, not a hardware size


def page_runs(offsets: np.ndarray) -> tuple[tuple[int, int], ...] | None:
    """The byte runs a write-back at these offsets writes, apart where a gap could hold a whole
    DRAM page (the page interlock then marks only the pages written: an INDP write-back puts
    each CU's results R rows apart); None when its [lo, hi) span has no such gap."""
    key = offsets.tobytes()
    if key in _RUNS:
        return _RUNS[key]
    ordered = np.sort(offsets)
    gaps = np.nonzero(np.diff(ordered) - 2 >= DRAM_PAGE_BYTES)[0]
    runs = None
    if gaps.size:
        starts = [int(ordered[0]), *(int(ordered[g + 1]) for g in gaps)]
        ends = [*(int(ordered[g]) + 2 for g in gaps), int(ordered[-1]) + 2]
        runs = tuple(zip(starts, ends))
    if len(_RUNS) > _RUNS_KEPT:
        _RUNS.clear()
    _RUNS[key] = runs
    return runs
