"""Functional semantics of every instruction, against arithmetic written out in the test."""

from __future__ import annotations

import numpy as np
import pytest

from machine_util import movi, run_both

SEG = """
snowflake_asm.segment input @x at 0 size 2048
snowflake_asm.segment data @w at 2048 size 8192
snowflake_asm.segment output @y at 16384 size 2048
"""
Y = 16384


def _py_round(total: int, frac: int = 8) -> int:
    """Round half up, then saturate: floor((total + 2^(frac-1)) / 2^frac)."""
    v = (total + (1 << (frac - 1))) // (1 << frac)
    return max(-32768, min(32767, v))


def test_scalar_arithmetic_wraps_to_32_bits() -> None:
    body = "\n".join([
        movi(1, 4194303), "snowflake_asm.mov r2, r1 shl 9",       # 4194303 << 9 wraps
        "snowflake_asm.add r3, r2, r2", "snowflake_asm.addi r4, r0, -5",
        "snowflake_asm.mul r5, r4, r1", "snowflake_asm.muli r6, r1, 65535",
        movi(7, -4194304), "snowflake_asm.mov r0, r7", "snowflake_asm.addi r0, r7, 1",
    ])
    r = run_both(body).machine.state.regs
    wrap = lambda v: ((v + 2**31) % 2**32) - 2**31
    assert r[1] == 4194303
    assert r[2] == wrap(4194303 << 9)
    assert r[3] == wrap(2 * wrap(4194303 << 9))
    assert r[4] == -5
    assert r[5] == wrap(-5 * 4194303)
    assert r[6] == wrap(4194303 * 65535)
    assert r[7] == -4194304
    assert r[0] == 0  # writes to r0 are dropped


def _load_all(n_maps: int, n_w: int) -> list[str]:
    return [movi(1, 0), movi(2, 2048), movi(3, n_maps), movi(4, n_w),
            "snowflake_asm.ld maps r0, r1, r3 unit 0 to all",
            "snowflake_asm.ld weights r0, r2, r4 unit 1 to all"]


def test_mac_coop_with_bias_rounding_saturation_relu() -> None:
    rng = np.random.default_rng(1)
    x = rng.integers(-600, 600, 48).astype(np.int16)
    w = rng.integers(-600, 600, 48).astype(np.int16)
    bias = np.arange(16, dtype=np.int16) * 37 - 200
    wdata = np.concatenate([w, bias])
    body = "\n".join(_load_all(48, 64) + [
        movi(5, 48), movi(6, Y), movi(7, Y + 32),
        "snowflake_asm.vmov coop bias r5",
        "snowflake_asm.mac coop r6, r0, r0 trace 32",
        "snowflake_asm.addi r8, r0, 32",
        "snowflake_asm.mac coop r6, r8, r8 trace 16 wb",
        "snowflake_asm.mac coop r7, r0, r0 trace 48 wb relu",
    ])
    res = run_both(body, SEG, inputs={"x": np.pad(x, (0, 976)), "w": np.pad(wdata, (0, 4096 - 64))})
    y = res.outputs["y"]
    total = int(np.dot(x.astype(np.int64), w.astype(np.int64)))
    # bias is lane 0 of each vMAC's 16-element bias block, all vMACs hold the same block
    expected = _py_round(total + (int(bias[0]) << 8))
    assert list(y[:16]) == [expected] * 16
    assert list(y[16:32]) == [max(0, _py_round(total + (int(bias[0]) << 8)))] * 16


def test_mac_saturates() -> None:
    x = np.full(16, 32767, np.int16)
    body = "\n".join(_load_all(16, 16) + [movi(6, Y), movi(7, Y + 32), movi(8, 16), movi(9, 2048 + 32),
                                          "snowflake_asm.mac coop r6, r0, r0 trace 16 wb",
                                          "snowflake_asm.ld weights r8, r9, r8 unit 2 to all",
                                          "snowflake_asm.mac coop r7, r0, r8 trace 16 wb"])
    wneg = np.full(16, -32768, np.int16)
    res = run_both(body, SEG, inputs={"x": np.pad(x, (0, 1008)), "w": np.pad(np.concatenate([x, wneg]), (0, 4064))})
    assert list(res.outputs["y"][:16]) == [32767] * 16
    assert list(res.outputs["y"][16:32]) == [-32768] * 16


def test_mac_indp_and_per_vmac_weights() -> None:
    rng = np.random.default_rng(2)
    L = 5
    x = rng.integers(-300, 300, L).astype(np.int16)
    # vMAC j gets its own weights: 16 kernels interleaved, element i lane k at i*16+k
    ws = [rng.integers(-300, 300, 16 * L).astype(np.int16) for _ in range(16)]
    body = [movi(1, 0), movi(3, L), "snowflake_asm.ld maps r0, r1, r3 unit 0 to all", movi(4, 16 * L)]
    for j in range(16):
        body += [movi(2, 2048 + 2 * 16 * L * j), f"snowflake_asm.ld weights r0, r2, r4 unit {j % 4} to {j}"]
    body += [movi(6, Y), "snowflake_asm.mac indp r6, r0, r0 trace 5 wb"]
    res = run_both("\n".join(body), SEG, inputs={"x": np.pad(x, (0, 1024 - L)),
                                                 "w": np.pad(np.concatenate(ws), (0, 4096 - 16 * 16 * L))})
    y = res.outputs["y"][:256].reshape(16, 16)
    for j in range(16):
        acc = (x.astype(np.int64)[:, None] * ws[j].astype(np.int64).reshape(L, 16)).sum(axis=0)
        assert list(y[j]) == [_py_round(int(a)) for a in acc]


def test_bypass_mask_and_stride() -> None:
    x = np.zeros(1024, np.int16)
    x[:16] = 256             # maps: 1.0
    # bypass block as the write-back lays out outputs: CU c, vMAC v reads word 512 + 4c + v
    x[512:528] = [100, -200, 300, -400, 7, 0, 0, 0, 0, -9, 0, 0, 0, 0, 0, 0]
    w = np.full(16, 256, np.int16)        # weights 1.0 -> each output = 16.0 + bypass
    body = [movi(1, 0), movi(3, 1024), movi(2, 2048), movi(4, 16),
            "snowflake_asm.ld maps r0, r1, r3 unit 0 to all", "snowflake_asm.ld weights r0, r2, r4 unit 1 to all",
            movi(5, 512), "snowflake_asm.vmov coop bypass r5",
            movi(6, 0b0000001000010011), "snowflake_asm.vmov coop mask r6",   # CU0 v0,v1,v4? -> bits 0,1,4,9
            movi(7, 64), "snowflake_asm.vmov coop stride r7",
            movi(8, Y), "snowflake_asm.mac coop r8, r0, r0 trace 16 wb"]
    res = run_both("\n".join(body), SEG, inputs={"x": x, "w": np.pad(w, (0, 4080))})
    y = res.outputs["y"]
    base = 16 * 256
    # bit b = cu*4 + v enabled -> element (cu*64 + 2v)/2 = cu*32 + v
    assert y[0] == base + 100 and y[1] == base - 200
    assert y[32] == base + 7            # bit 4: CU 1, vMAC 0 (bypass word 4)
    assert y[64 + 1] == base - 9        # bit 9: CU 2, vMAC 1 (bypass word 9)
    assert y[2] == 0 and y[3] == 0 and y[33] == 0 and y[96] == 0


def test_max_pool_unit() -> None:
    x = np.arange(-500, 524, dtype=np.int16)
    body = [movi(1, 0), movi(3, 1024), "snowflake_asm.ld maps r0, r1, r3 unit 0 to all",
            movi(4, 48), movi(5, 100), movi(6, Y),
            "snowflake_asm.max r6, r5, r4 trace 2",
            movi(7, 300),
            "snowflake_asm.max r6, r7, r4 trace 1 wb"]
    res = run_both("\n".join(body), SEG, inputs={"x": x})
    y = res.outputs["y"]
    idx = [100 + 48 * i for i in range(2)] + [300]
    expected = np.max([x[i:i + 16] for i in idx], axis=0)
    assert list(y[:16]) == list(expected)
    # CU 1 reads and writes 16 words on (default stride 32 B): the next 16 channels
    assert list(y[16:32]) == list(np.max([x[i + 16:i + 32] for i in idx], axis=0))


def test_ld_selects_and_tmov() -> None:
    x = np.arange(1024, dtype=np.int16)
    body = [movi(1, 0), movi(3, 8), movi(2, 16),
            "snowflake_asm.ld maps r0, r1, r3 unit 0 to 2",
            "snowflake_asm.ld weights r0, r1, r3 unit 1 to 17",
            "snowflake_asm.ld weights r2, r1, r3 unit 2 to 6",
            movi(6, Y), "snowflake_asm.tmov r6, r0, r3 unit 3 from 2"]
    res = run_both("\n".join(body), SEG, inputs={"x": x})
    st = res.machine.state
    assert list(st.maps[2, :8]) == list(range(8)) and not st.maps[[0, 1, 3], :8].any()
    assert all(list(st.weights[c, 1, :8]) == list(range(8)) for c in range(4))
    assert not st.weights[:, [0, 2, 3], :8].any()
    assert list(st.weights[1, 2, 16:24]) == list(range(8))
    assert list(res.outputs["y"][:8]) == list(range(8))


@pytest.mark.parametrize("frac", [8, 11])
def test_writeback_matches_fixedpoint_definition(frac: int) -> None:
    from snowir.fixedpoint import writeback

    acc = np.array([127, 128, 129, -128, -129, 1 << 30, -(1 << 30)], np.int64) << (frac - 7)
    got = writeback(acc, 0, 0, frac, False)
    want = [_py_round(int(a), frac) for a in acc]
    assert list(got) == want


def test_writeback_shift_for_q1_15_weights() -> None:
    # data Q8.8, weights Q1.15: 0.5 -> 16384; write-back shift 15 returns to Q8.8
    x = np.full(16, 3 * 256, np.int16)         # 3.0
    w = np.full(16, 16384, np.int16)           # 0.5 in Q1.15
    body = "\n".join(_load_all(16, 16) + [movi(5, 15), "snowflake_asm.vmov coop shift r5",
                                          movi(6, Y), "snowflake_asm.mac coop r6, r0, r0 trace 16 wb"])
    res = run_both(body, SEG, inputs={"x": np.pad(x, (0, 1008)), "w": np.pad(w, (0, 4080))})
    total = 16 * (3 * 256) * 16384            # scale 2^(8 + 15)
    assert list(res.outputs["y"][:16]) == [_py_round(total, 15)] * 16 == [24 * 256] * 16
