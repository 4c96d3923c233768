"""
Hand-written snowflake_asm kernels used by tests and benchmarks of the machine model
(developer utility; the compiler's own code generation is a pass, not this).

  * `scalar_loop(n)`: a counted loop of scalar bookkeeping, n iterations;
  * `conv3x3(h, w)`: a 3x3, 16 -> 16 channel, stride-1 convolution in COOP mode with
    the K/Y/X/T loop nest of the paper's Figure 3 (one kernel per vMAC, maps broadcast
    to every CU, channel-innermost data so a kernel row is one trace of 48 elements).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from snowir.fixedpoint import writeback

NOP = "snowflake_asm.mov r0, r0"


@dataclass(frozen=True)
class Kernel:
    text: str
    inputs: dict[str, np.ndarray]
    expected: dict[str, np.ndarray] | None = None


def scalar_loop(iterations: int) -> Kernel:
    body = [
        "snowflake_asm.movi r1, 0", f"snowflake_asm.movi r2, {iterations - 1}",
        "snowflake_asm.movi r3, 0", "snowflake_asm.movi r4, 7",
        "snowflake_asm.label @loop",
        "snowflake_asm.addi r1, r1, 1",
        "snowflake_asm.add r3, r3, r4",
        "snowflake_asm.muli r5, r4, 3",
        "snowflake_asm.mov r6, r3 shl 1",
        "snowflake_asm.ble r1, r2, @loop",
        "snowflake_asm.addi r7, r7, 2", "snowflake_asm.add r8, r8, r5", NOP, NOP,
    ]
    text = "snowflake_asm.program @scalar_loop {\n" + "\n".join(body) + "\n}\n"
    return Kernel(text, {})


def conv3x3(h: int, w: int, seed: int = 0, relu: bool = True) -> Kernel:
    c = k = 16
    oh, ow = h - 2, w - 2
    rng = np.random.default_rng(seed)
    x = rng.integers(-256, 256, (h, w, c)).astype(np.int16)          # HWC, Q8.8 in [-1, 1)
    wts = rng.integers(-64, 64, (k, 3, 3, c)).astype(np.int16)        # K x ky x kx x C
    bias = rng.integers(-256, 256, k).astype(np.int16)
    # per-vMAC weights block: 144 weights then a 16-element bias block (lane 0 used)
    wblock = np.zeros((k, 160), np.int16)
    wblock[:, :144] = wts.reshape(k, 144)
    wblock[:, 144] = bias
    maps_bytes, w_bytes, out_bytes = x.size * 2, wblock.size * 2, oh * ow * k * 2
    maps_at, w_at = 0, maps_bytes + (-maps_bytes) % 64
    out_at = w_at + w_bytes + (-(w_at + w_bytes)) % 64
    row = w * c  # maps elements per input row
    lines = [
        f"snowflake_asm.segment input @x at {maps_at} size {maps_bytes}",
        f"snowflake_asm.segment input @w at {w_at} size {w_bytes}",
        f"snowflake_asm.segment output @y at {out_at} size {out_bytes}",
        "snowflake_asm.program @conv3x3 {",
        f"snowflake_asm.movi r20, {maps_at}", f"snowflake_asm.movi r21, {x.size}",
        "snowflake_asm.movi r23, 160",
        "snowflake_asm.ld maps r0, r20, r21 unit 0 to all",
    ]
    for j in range(k):
        lines += [f"snowflake_asm.movi r22, {w_at + 320 * j}",
                  f"snowflake_asm.ld weights r0, r22, r23 unit {j % 4} to {j}"]
    lines += [
        "snowflake_asm.movi r24, 144", "snowflake_asm.vmov coop bias r24",
        "snowflake_asm.movi r1, 0", f"snowflake_asm.movi r10, {out_at}",
        "snowflake_asm.movi r12, 1", f"snowflake_asm.movi r13, {oh - 1}", f"snowflake_asm.movi r14, {ow - 1}",
        "snowflake_asm.label @Yloop",
        "snowflake_asm.movi r2, 0",
        f"snowflake_asm.muli r5, r1, {row}",
        "snowflake_asm.label @Xloop",
        "snowflake_asm.mov r6, r5", "snowflake_asm.movi r7, 0", "snowflake_asm.movi r8, 0",
        "snowflake_asm.label @Tloop",
        "snowflake_asm.mac coop r10, r6, r7 trace 48",
        f"snowflake_asm.addi r6, r6, {row}",
        "snowflake_asm.addi r8, r8, 1",
        "snowflake_asm.ble r8, r12, @Tloop",
        "snowflake_asm.addi r7, r7, 48", NOP, NOP, NOP,
        f"snowflake_asm.mac coop r10, r6, r7 trace 48 wb{' relu' if relu else ''}",
        "snowflake_asm.addi r10, r10, 32",
        "snowflake_asm.addi r2, r2, 1",
        "snowflake_asm.addi r5, r5, 16",
        "snowflake_asm.ble r2, r14, @Xloop",
        NOP, NOP, NOP, NOP,
        "snowflake_asm.addi r1, r1, 1",
        NOP, NOP,
        "snowflake_asm.ble r1, r13, @Yloop",
        NOP, NOP, NOP, NOP,
        "}",
    ]
    # independent numpy reference of the same fixed-point arithmetic
    acc = np.zeros((oh, ow, k), np.int64)
    for ky in range(3):
        for kx in range(3):
            patch = x[ky:ky + oh, kx:kx + ow, :].astype(np.int64)
            acc += np.einsum("yxc,kc->yxk", patch, wts[:, ky, kx, :].astype(np.int64))
    y = writeback(acc, bias.astype(np.int64), 0, 8, relu)
    return Kernel("\n".join(lines) + "\n", {"x": x.ravel(), "w": wblock.ravel()}, {"y": y.ravel()})


def write_example(path: str, h: int = 18, w: int = 18) -> None:
    """examples/conv3x3.mlir: the conv kernel with its weights in the file (a data segment)."""
    from xdsl.dialects.builtin import Builtin
    from xdsl.printer import Printer

    from snowir import api
    from snowir.dialects import snowflake_asm as sf
    from snowir.resources import int16_resource

    kernel = conv3x3(h, w)
    module = api.parse_text(kernel.text)
    for op in list(module.ops):
        if isinstance(op, sf.SegmentOp) and op.sym_name.data == "w":
            data = sf.SegmentOp("w", sf.SegmentKind.DATA, op.address.data, op.size.data,
                                int16_resource("conv_w", kernel.inputs["w"]))
            module.body.block.insert_op_before(data, op)
            op.detach()
            op.erase()
    import io

    out = io.StringIO()
    out.write(f"// A 3x3 16->16 convolution on {h}x{w}x16 (Q8.8, ReLU) in COOP mode with the paper's\n"
              f"// Y/X/T loop nest. Generated by tools/asm_kernels.py. Run: snow-run {path}\n")
    printer = Printer(stream=out)
    printer.print_op(module)
    printer.print_metadata([Builtin])
    from snowir.driver.files import write_text_atomic

    write_text_atomic(path, out.getvalue() + "\n")


if __name__ == "__main__":
    import sys

    write_example(sys.argv[1] if len(sys.argv) > 1 else "examples/conv3x3.mlir")
