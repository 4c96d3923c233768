"""
Cycle counts of small programs, derived in each test from the rules of docs/machine.md
(default config: scalar result readable 3 cycles after dispatch, 4 delay slots,
queue of 16 vector ops, LD start-up 32 cycles, 8 B/cycle per load unit, 16.8 B/cycle DRAM).
Every case runs on both engines, which must agree exactly.
"""

from __future__ import annotations

import numpy as np

from machine_util import movi, run_both

NOP = "snowflake_asm.mov r0, r0"


def test_independent_scalars_issue_one_per_cycle() -> None:
    res = run_both("\n".join(movi(r, r) for r in range(1, 11)))
    assert res.cycles == 10 and not res.timing.stalls


def test_raw_dependency_stalls_decode() -> None:
    # movi r1 @0 -> r1 readable at 3; addi waits from 1 to 3 (2 stall cycles), t = 4
    res = run_both(movi(1, 5) + "\nsnowflake_asm.addi r2, r1, 1")
    assert res.cycles == 4
    assert res.timing.stalls["raw"] == 2
    assert res.machine.state.regs[2] == 6


def test_branch_loop_with_delay_slots() -> None:
    k = 6
    body = "\n".join([movi(1, 0), movi(2, k), "snowflake_asm.label @loop",
                      "snowflake_asm.addi r1, r1, 1", "snowflake_asm.ble r1, r2, @loop",
                      NOP, NOP, NOP, "snowflake_asm.addi r3, r3, 1"])
    res = run_both(body)
    # first addi: r1 (movi @0) readable at 3 -> dispatch 3 (1 stall).
    # each iteration: addi @d, ble @d+3 (2 stall cycles), 4 slots d+4..d+7, next addi @d+8.
    # the body runs while r1 <= k after the increment: k+1 iterations; the last slot
    # (addi r3) runs every iteration.
    iterations = k + 1
    assert res.cycles == 3 + 8 * iterations
    assert res.timing.stalls["raw"] == 1 + 2 * iterations
    assert res.machine.state.regs[1] == k + 1 and res.machine.state.regs[3] == iterations
    assert res.machine.dynamic == 2 + 6 * iterations


def test_vector_queue_fills() -> None:
    # 20 COOP MACs of trace 1023 (ceil(1023/16) = 64 cycles), operands ready at 0.
    # MAC k < 16 dispatches at k; the CUs run back to back from cycle 1: MAC k ends at 1 + 64(k+1).
    # MAC 16 finds 16 in flight and waits for the oldest (ends 65): stall 65 - 16 = 49;
    # MACs 17..19 dispatch one cycle after the previous and wait for the next completion
    # (129, 193, 257): stalls 129-66, 193-130, 257-194 = 63 each.
    res = run_both("\n".join(["snowflake_asm.mac coop r0, r0, r0 trace 1023"] * 20))
    assert res.cycles == 1 + 64 * 20
    assert res.timing.stalls["vector_queue"] == 49 + 3 * 63
    assert res.timing.stalls.get("cu_starved", 0) == 0
    assert res.timing.macs == 20 * 1023 * 16


def test_indp_mac_and_max_take_trace_cycles() -> None:
    res = run_both("snowflake_asm.mac indp r0, r0, r0 trace 10\nsnowflake_asm.max r0, r0, r0 trace 7")
    # INDP: L cycles (10) from cycle 1; MAX: L cycles (7) right after -> ends 18
    assert res.cycles == 18
    assert res.timing.macs == 10 * 16 * 16


def test_load_units_share_dram_bandwidth() -> None:
    seg = "snowflake_asm.segment input @x at 0 size 24000"
    body = "\n".join([movi(1, 0), movi(2, 4000), movi(3, 8000), movi(4, 16000),
                      "snowflake_asm.ld maps r0, r1, r2 unit 0 to 0",
                      "snowflake_asm.ld maps r0, r3, r2 unit 1 to 1",
                      "snowflake_asm.ld maps r0, r4, r2 unit 2 to 2"])
    res = run_both(body, seg, inputs={"x": np.zeros(12000, np.int16)})
    # LDs dispatch at 4, 5, 6; data starts 32 cycles after the request (d + 1):
    #   A: 37, 8000 B at the unit cap 8 B/cycle -> done 1037
    #   B: 38, 8 B/cycle (16 <= 16.8 total) -> done 1038
    #   C: 39, gets the 0.8 B/cycle left until 1037 (798.4 B), 8 B in [1037, 1038),
    #      then its own cap: 8000 - 806.4 = 7193.6 B in 899.2 cycles -> 1937.2 -> 1938
    assert res.cycles == 1938
    assert res.timing.load_bytes == 24000


def test_compute_waits_for_its_operand_bank() -> None:
    seg = "snowflake_asm.segment input @x at 0 size 1600"
    body = "\n".join([movi(1, 0), movi(2, 800),
                      "snowflake_asm.ld maps r0, r1, r2 unit 0 to all",
                      "snowflake_asm.mac coop r0, r0, r0 trace 16",
                      "snowflake_asm.mac coop r0, r0, r0 trace 16"])
    res = run_both(body, seg, inputs={"x": np.zeros(800, np.int16)})
    # LD @4 (r2 readable at 4): data 37..37+1600/8 = 237. MAC @5 starts at 237, ends 238;
    # the second MAC follows: 239. CU load wait of the first MAC is not counted (CUs
    # were never busy before); nothing else stalls.
    assert res.cycles == 239
    assert res.timing.stalls.get("cu_load_wait", 0) == 0


def test_icache_refill_stalls_fetch() -> None:
    body = [movi(1, 4096), movi(2, 76)] + [NOP] * 1018
    body += ["snowflake_asm.ld icache r0, r1, r2 unit 0 to 0"] + [NOP] * 79
    assert len(body) == 1100
    res = run_both("\n".join(body))
    # code_base is 0 (no segments): instruction 1024 is at byte 4096.
    # LD @1020: data 1053.., 76 x 4 B at 8 B/cycle = 38 cycles -> bank 0 ready at 1091.
    # 1021..1023 issue at 1021..1023; fetching 1024 at 1024 waits until 1091 (67 cycles);
    # the last 76 instructions issue 1091..1166.
    assert res.cycles == 1167
    assert res.timing.stalls["icache"] == 67
