"""
The host kernels of snowir's own `nn.host` kinds (domain "snowir"): what a graph pass leaves on the
host of an ONNX node once it has moved the rest to the device. The golden model and every runner
evaluate them here (`NodeRunner.cached` dispatches on the domain), snowir/host_nodes.py prices them.

  * LSTMRecurrence (split-lstm): an ONNX LSTM's recurrence given its input projection.
    Operands by slot: 0 gates [T, B, D·4H] = X·W^T + Wb + Rb of every step and direction (direction
    d's four gates in columns d·4H .. (d+1)·4H, ONNX's order i, o, f, c), 1 R [D, 4H, H], 2 initial_h
    [D, B, H] and 3 initial_c [D, B, H] (optional: zeros); R may be 8-bit, as DynamicQuantizeLSTM
    ships it, with 4 R_scale and 5 R_zero_point ([D], or [D, 4H] per gate row): the recurrence then
    multiplies by (R_q - R_zp) · R_scale, the float R it stands for, computed as split-lstm would
    dequantize it (the same float32 values), while the host streams R's 8-bit words at every step
    instead of four times as many bytes. Attributes direction ("forward", "reverse",
    "bidirectional") and hidden_size. Results Y [T, D, B, H], Y_h [D, B, H], Y_c [D, B, H] as ONNX
    lays them out (a prefix of them: the node's present outputs). Activations sigmoid / tanh / tanh,
    no peepholes, no clip, input_forget 0, every sequence T long: the forms split-lstm splits.

Float32 throughout, as onnxruntime's LSTM computes: per step and direction
g = gates[t] + H·R^T, i = σ(g_i), o = σ(g_o), f = σ(g_f), c̃ = tanh(g_c), C = f ⊙ C + i ⊙ c̃,
H = o ⊙ tanh(C); the reverse direction walks t = T-1 .. 0, and its Y_h / Y_c are those after t = 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

DOMAIN = "snowir"
"""The nn.host domain of snowir's own kinds."""
LSTM_RECURRENCE = "LSTMRecurrence"
DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-x))).astype(np.float32)


def dequantized_rows(q: np.ndarray, scale: np.ndarray, zero: np.ndarray) -> np.ndarray | None:
    """(q - zp) · scale of an 8-bit recurrent weight [D, 4H, cols]: a scale and zero point per
    direction ([D]) or per direction and gate row ([D, 4H]); None for another shape. Subtracted in
    integers, multiplied in float32, as onnxruntime dequantizes."""
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


def lstm_recurrence(gates: np.ndarray, r: np.ndarray, initial_h: np.ndarray | None, initial_c: np.ndarray | None,
                    direction: str, n_outputs: int = 3, r_scale: np.ndarray | None = None,
                    r_zero: np.ndarray | None = None) -> list[np.ndarray]:
    """Y, Y_h, Y_c (the first `n_outputs`) of an LSTM whose input projection is `gates` (R 8-bit
    with `r_scale` and `r_zero`: the float R it stands for)."""
    gates = np.asarray(gates, np.float32)
    if r_scale is not None:
        r = dequantized_rows(np.asarray(r), r_scale, np.zeros_like(r_scale, np.int64) if r_zero is None else r_zero)
    r = np.asarray(r, np.float32)
    steps, batch, _ = gates.shape
    dirs, four_h, hidden = r.shape
    y = np.zeros((steps, dirs, batch, hidden), np.float32)
    y_h = np.zeros((dirs, batch, hidden), np.float32)
    y_c = np.zeros((dirs, batch, hidden), np.float32)
    for d in range(dirs):
        h = np.zeros((batch, hidden), np.float32) if initial_h is None else np.asarray(initial_h[d], np.float32)
        c = np.zeros((batch, hidden), np.float32) if initial_c is None else np.asarray(initial_c[d], np.float32)
        rt = np.ascontiguousarray(r[d].T)
        backward = direction == "reverse" or (direction == "bidirectional" and d == 1)
        for t in (range(steps - 1, -1, -1) if backward else range(steps)):
            g = gates[t, :, d * four_h:(d + 1) * four_h] + h @ rt
            i, o, f = _sigmoid(g[:, :hidden]), _sigmoid(g[:, hidden:2 * hidden]), _sigmoid(g[:, 2 * hidden:3 * hidden])
            c = (f * c + i * np.tanh(g[:, 3 * hidden:])).astype(np.float32)
            h = (o * np.tanh(c)).astype(np.float32)
            y[t, d] = h
        y_h[d], y_c[d] = h, c
    return [y, y_h, y_c][:n_outputs]


def lstm_recurrence_shapes(gates: Sequence[int], r: Sequence[int], direction: str) -> tuple[list[int], list[int]] | str:
    """(Y's shape, Y_h's and Y_c's) of LSTMRecurrence over operands of these shapes, or why not."""
    if direction not in DIRECTIONS:
        return f"direction must be one of {', '.join(DIRECTIONS)}, not '{direction}'"
    if len(gates) != 3 or len(r) != 3:
        return f"gates must be [T, B, D·4H] and R [D, 4H, H], not {list(gates)} and {list(r)}"
    steps, batch, width = gates
    dirs, four_h, hidden = r
    if dirs != DIRECTIONS[direction] or four_h != 4 * hidden or width != dirs * four_h:
        return (f"R {list(r)} must be [{DIRECTIONS[direction]}, 4H, H] ({direction}) and gates {list(gates)} "
                f"[T, B, {DIRECTIONS[direction]}·4H]")
    return [steps, dirs, batch, hidden], [dirs, batch, hidden]


class SnowirKernel:
    """A snowir-domain nn.host kind as a callable on numpy arrays, as NodeRunner is for ONNX nodes."""

    def __init__(self, op_type: str, attrs: dict, slots: Sequence[int], n_outputs: int):
        if op_type != LSTM_RECURRENCE:
            raise ValueError(f"nn.host domain '{DOMAIN}' has no kind '{op_type}'")
        self.direction = str(attrs.get("direction", "forward"))
        self.slots = list(slots)
        self.n_outputs = n_outputs

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        by_slot = dict(zip(self.slots, arrays))
        return lstm_recurrence(by_slot[0], by_slot[1], by_slot.get(2), by_slot.get(3), self.direction, self.n_outputs,
                               by_slot.get(4), by_slot.get(5))
