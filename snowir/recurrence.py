"""
The host kernels of snowir's own `nn.host` kinds (domain "snowir"): what a graph pass leaves on the
host of an ONNX node once it has moved the rest to the device. The golden model and every runner
evaluate them here (`NodeRunner.cached` dispatches on the domain), snowir/host_nodes.py prices them,
nn.host's verifier checks their operands (`recurrence_shapes`, `CELLS`).

split-recurrence leaves the recurrence of an ONNX LSTM, GRU or RNN, given its input projection:

  * operands by slot: 0 gates [T, B, D·G·H] = X·W^T + Wb (+ Rb where it adds outside the cell's
    products) of every step and direction (direction d's G gates in columns d·G·H .. (d+1)·G·H,
    ONNX's order: LSTM i, o, f, c; GRU z, r, h; RNN i), 1 R [D, G·H, H], 2 initial_h [D, B, H]
    (optional: zeros), then by kind (`CELLS`): LSTMRecurrence 3 initial_c [D, B, H], and R may be
    8-bit, as com.microsoft's DynamicQuantizeLSTM ships it, with 4 R_scale and 5 R_zero_point ([D],
    or [D, 4H] per gate row): the recurrence then multiplies by (R_q - R_zp) · R_scale, the float R
    it stands for (the same float32 values split-recurrence's dequantization gives), while the host
    streams R's 8-bit words at every step instead of four times as many bytes; GRURecurrence 3 Rb_h
    [D, H], the h gate's recurrent bias, where linear_before_reset = 1 puts it inside the reset
    gate's product (without it: zeros);
  * attributes direction ("forward", "reverse", "bidirectional"), hidden_size, and GRU's
    linear_before_reset;
  * results Y [T, D, B, H], Y_h [D, B, H] (and LSTM's Y_c) as ONNX lays them out (a prefix of
    them: the node's present outputs).

ONNX's default activations only (LSTM sigmoid / tanh / tanh, GRU sigmoid / tanh, RNN tanh), no
peepholes, no clip, input_forget 0, every sequence T long: the forms split-recurrence splits.
Float32 throughout, as onnxruntime computes: per step and direction g = gates[t] + H·R^T, then
LSTM C = σ(g_f) ⊙ C + σ(g_i) ⊙ tanh(g_c), H = σ(g_o) ⊙ tanh(C); GRU z = σ(g_z), r = σ(g_r),
h̃ = tanh(gates_h + (r ⊙ H)·R_h^T) or, with linear_before_reset, tanh(gates_h + r ⊙ (H·R_h^T + Rb_h)),
H = (1 - z) ⊙ h̃ + z ⊙ H; RNN H = tanh(g). The reverse direction walks t = T-1 .. 0, and its Y_h /
Y_c are those after t = 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DOMAIN = "snowir"
"""The nn.host domain of snowir's own kinds."""
DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}


@dataclass(frozen=True)
class Cell:
    """One recurrence kind: the ONNX operator it comes from, its gates a hidden unit, and its
    operands by slot."""

    onnx: str
    gates: int
    slots: tuple[str, ...]

    @property
    def outputs(self) -> int:
        return 3 if self.onnx == "LSTM" else 2


CELLS = {
    "LSTMRecurrence": Cell("LSTM", 4, ("gates", "R", "initial_h", "initial_c", "R_scale", "R_zero_point")),
    "GRURecurrence": Cell("GRU", 3, ("gates", "R", "initial_h", "Rb_h")),
    "RNNRecurrence": Cell("RNN", 1, ("gates", "R", "initial_h")),
}
KIND_OF = {cell.onnx: kind for kind, cell in CELLS.items()}
"""The recurrence kind of an ONNX operator."""


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-x))).astype(np.float32)


def dequantized_rows(q: np.ndarray, scale: np.ndarray, zero: np.ndarray) -> np.ndarray | None:
    """(q - zp) · scale of an 8-bit weight [D, G·H, cols]: a scale and zero point per direction
    ([D]) or per direction and gate row ([D, G·H]); None for another shape. Subtracted in integers,
    multiplied in float32, as onnxruntime dequantizes."""
    d, rows, _ = q.shape

    def shaped(a: np.ndarray) -> np.ndarray | None:
        a = np.asarray(a)
        if a.size == d:
            return a.reshape(d, 1, 1)
        return a.reshape(d, rows, 1) if a.size == d * rows else None

    s, z = shaped(scale), shaped(zero)
    if s is None or z is None:
        return None
    return ((q.astype(np.int64) - z.astype(np.int64)).astype(np.float32) * s.astype(np.float32)).astype(np.float32)


def recurrence(kind: str, by_slot: dict[int, np.ndarray], direction: str, linear_before_reset: int = 0,
               n_outputs: int = 3) -> list[np.ndarray]:
    """Y, Y_h (, Y_c) (the first `n_outputs`) of the recurrence `kind` over its operands by slot."""
    cell = CELLS[kind]
    gates = np.asarray(by_slot[0], np.float32)
    r = by_slot[1]
    if kind == "LSTMRecurrence" and 4 in by_slot:
        r = dequantized_rows(np.asarray(r), by_slot[4], by_slot.get(5, np.zeros_like(by_slot[4], np.int64)))
    r = np.asarray(r, np.float32)
    steps, batch, _ = gates.shape
    dirs, width, hidden = r.shape
    y = np.zeros((steps, dirs, batch, hidden), np.float32)
    finals = [np.zeros((dirs, batch, hidden), np.float32) for _ in range(cell.outputs - 1)]
    for d in range(dirs):
        h = np.zeros((batch, hidden), np.float32) if 2 not in by_slot else np.asarray(by_slot[2][d], np.float32)
        c = np.zeros((batch, hidden), np.float32)
        if kind == "LSTMRecurrence" and 3 in by_slot:
            c = np.asarray(by_slot[3][d], np.float32)
        rt = np.ascontiguousarray(r[d].T)
        rb_h = np.asarray(by_slot[3][d], np.float32) if kind == "GRURecurrence" and 3 in by_slot else None
        backward = direction == "reverse" or (direction == "bidirectional" and d == 1)
        for t in (range(steps - 1, -1, -1) if backward else range(steps)):
            x = gates[t, :, d * width:(d + 1) * width]
            if kind == "LSTMRecurrence":
                g = x + h @ rt
                i, o, f = _sigmoid(g[:, :hidden]), _sigmoid(g[:, hidden:2 * hidden]), _sigmoid(g[:, 2 * hidden:3 * hidden])
                c = (f * c + i * np.tanh(g[:, 3 * hidden:])).astype(np.float32)
                h = (o * np.tanh(c)).astype(np.float32)
            elif kind == "GRURecurrence":
                zr = _sigmoid(x[:, :2 * hidden] + h @ rt[:, :2 * hidden])
                z, reset = zr[:, :hidden], zr[:, hidden:]
                if linear_before_reset:
                    hh = h @ rt[:, 2 * hidden:]
                    candidate = np.tanh(x[:, 2 * hidden:] + reset * (hh if rb_h is None else hh + rb_h))
                else:
                    candidate = np.tanh(x[:, 2 * hidden:] + (reset * h) @ rt[:, 2 * hidden:])
                h = ((1 - z) * candidate + z * h).astype(np.float32)
            else:
                h = np.tanh(x + h @ rt).astype(np.float32)
            y[t, d] = h
        finals[0][d] = h
        if kind == "LSTMRecurrence":
            finals[1][d] = c
    return [y, *finals][:n_outputs]


def recurrence_shapes(kind: str, gates: Sequence[int], r: Sequence[int], direction: str) -> tuple[list[int], list[int]] | str:
    """(Y's shape, the states' [D, B, H]) of `kind` over operands of these shapes, or why not."""
    g = CELLS[kind].gates
    if direction not in DIRECTIONS:
        return f"direction must be one of {', '.join(DIRECTIONS)}, not '{direction}'"
    if len(gates) != 3 or len(r) != 3:
        return f"gates must be [T, B, D·{g}H] and R [D, {g}H, H], not {list(gates)} and {list(r)}"
    steps, batch, width = gates
    dirs, rows, hidden = r
    if dirs != DIRECTIONS[direction] or rows != g * hidden or width != dirs * rows:
        return (f"R {list(r)} must be [{DIRECTIONS[direction]}, {g}H, H] ({direction}) and gates {list(gates)} "
                f"[T, B, {DIRECTIONS[direction]}·{g}H]")
    return [steps, dirs, batch, hidden], [dirs, batch, hidden]


class SnowirKernel:
    """A snowir-domain nn.host kind as a callable on numpy arrays, as NodeRunner is for ONNX nodes."""

    def __init__(self, op_type: str, attrs: dict, slots: Sequence[int], n_outputs: int):
        if op_type not in CELLS:
            raise ValueError(f"nn.host domain '{DOMAIN}' has no kind '{op_type}'")
        self.kind = op_type
        self.direction = str(attrs.get("direction", "forward"))
        self.linear_before_reset = int(attrs.get("linear_before_reset", 0))
        self.slots = list(slots)
        self.n_outputs = n_outputs

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        return recurrence(self.kind, dict(zip(self.slots, arrays)), self.direction, self.linear_before_reset,
                          self.n_outputs)
