"""
Cycle counts of small programs, derived in each test from the rules of docs/machine.md
(default config: scalar result readable 3 cycles after dispatch, 4 delay slots,
queue of 16 vector ops, LD start-up 32 cycles, 8 B/cycle per port, 16.8 B/cycle bus,
write-backs requested 6 cycles after their trace ends).
Every case runs on both engines, which must agree exactly.

Every program starts with the host's instruction-cache preload: bank b's block (4 B per
instruction) on load unit b from cycle 0, so bank 0 is ready at 32 + ceil(4n / 8) for a
program of n <= 512 instructions; `preload(n)` below is that number.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right

import numpy as np
import pytest

from machine_util import movi, run_both
from snowir.machine.ledgers import BandwidthLedger, PendingLoads

NOP = "snowflake_asm.mov r0, r0"


def preload(n: int) -> int:
    return 32 + math.ceil(4 * n / 8)


def test_independent_scalars_issue_one_per_cycle() -> None:
    res = run_both("\n".join(movi(r, r) for r in range(1, 11)))
    p = preload(10)  # 32 + 5 = 37
    assert res.cycles == p + 10
    # no vector op: the CUs idle the whole program (cu_drain)
    assert dict(res.timing.stalls) == {"icache": p, "cu_drain": p + 10}


def test_raw_dependency_stalls_decode() -> None:
    # movi r1 @P -> r1 readable at P+3; addi waits from P+1 to P+3 (2 stall cycles)
    res = run_both(movi(1, 5) + "\nsnowflake_asm.addi r2, r1, 1")
    assert res.cycles == preload(2) + 4
    assert res.timing.stalls["raw"] == 2
    assert res.machine.state.regs[2] == 6


def test_branch_loop_with_delay_slots() -> None:
    k = 6
    body = "\n".join([movi(1, 0), movi(2, k), "snowflake_asm.label @loop",
                      "snowflake_asm.addi r1, r1, 1", "snowflake_asm.ble r1, r2, @loop",
                      NOP, NOP, NOP, "snowflake_asm.addi r3, r3, 1"])
    res = run_both(body)
    # first addi: r1 (movi @P) readable at P+3 -> dispatch P+3 (1 stall).
    # each iteration: addi @d, ble @d+3 (2 stall cycles), 4 slots d+4..d+7, next addi @d+8.
    # the body runs while r1 <= k after the increment: k+1 iterations; the last slot
    # (addi r3) runs every iteration.
    iterations = k + 1
    assert res.cycles == preload(8) + 3 + 8 * iterations
    assert res.timing.stalls["raw"] == 1 + 2 * iterations
    assert res.machine.state.regs[1] == k + 1 and res.machine.state.regs[3] == iterations
    assert res.machine.dynamic == 2 + 6 * iterations


def test_vector_queue_fills() -> None:
    # 20 COOP MACs of trace 1023 (ceil(1023/16) = 64 cycles), operands ready at 0.
    # MAC k < 16 dispatches at P+k; the CUs run back to back from P+1: MAC k ends at P+1+64(k+1).
    # MAC 16 finds 16 in flight and waits for the oldest (ends P+65): stall 65 - 16 = 49;
    # MACs 17..19 dispatch one cycle after the previous and wait for the next completion:
    # stalls 63 each.
    res = run_both("\n".join(["snowflake_asm.mac coop r0, r0, r0 trace 1023"] * 20))
    p = preload(20)
    assert res.cycles == p + 1 + 64 * 20
    assert res.timing.stalls["vector_queue"] == 49 + 3 * 63
    # the CUs wait for the first dispatch only (preload + 1 issue cycle)
    assert res.timing.stalls["cu_starved"] == p + 1
    # useful MACs: 1023 trace elements on each of the 16 vMACs; the lanes ran 64 cycles x 16
    assert res.timing.macs == 20 * 1023 * 16
    assert res.timing.lane_macs == 20 * 64 * 16 * 16
    _cu_time_adds_up(res)


def test_indp_mac_and_max_take_trace_cycles() -> None:
    res = run_both("snowflake_asm.mac indp r0, r0, r0 trace 10\nsnowflake_asm.max r0, r0, r0 trace 7")
    # INDP: L cycles (10) from P+1; MAX: L cycles (7) right after -> ends P+18
    assert res.cycles == preload(2) + 18
    assert res.timing.macs == 10 * 16 * 16


def test_masked_vmacs_do_no_useful_work() -> None:
    # mask 0x000F: only CU 0's four vMACs keep results
    res = run_both("\n".join([movi(1, 15), "snowflake_asm.vmov coop mask r1",
                              "snowflake_asm.mac coop r0, r0, r0 trace 40",
                              "snowflake_asm.mac indp r0, r0, r0 trace 3"]))
    assert res.timing.macs == 40 * 4 + 3 * 16 * 4
    assert res.timing.lane_macs == 3 * 16 * 16 + 3 * 16 * 16  # 3 cycles each, 16 lanes x 16 vMACs


def test_load_units_share_dram_bandwidth() -> None:
    seg = "snowflake_asm.segment input @x at 0 size 24000"
    body = "\n".join([movi(1, 0), movi(2, 4000), movi(3, 8000), movi(4, 16000),
                      "snowflake_asm.ld maps r0, r1, r2 unit 0 to 0",
                      "snowflake_asm.ld maps r0, r3, r2 unit 1 to 1",
                      "snowflake_asm.ld maps r0, r4, r2 unit 2 to 2"])
    res = run_both(body, seg, inputs={"x": np.zeros(12000, np.int16)})
    # the preload (28 B) is done at P = 36, before any LD. LDs dispatch at P+4, P+5, P+6;
    # data starts 32 cycles after the request (d + 1):
    #   A: P+37, 8000 B at the port cap 8 B/cycle -> done P+1037
    #   B: P+38, 8 B/cycle (16 <= 16.8 total) -> done P+1038
    #   C: P+39, gets the 0.8 B/cycle left until P+1037 (798.4 B), 8 B in [P+1037, P+1038),
    #      then its own cap: 8000 - 806.4 = 7193.6 B in 899.2 cycles -> P+1937.2 -> P+1938
    assert res.cycles == preload(7) + 1938
    assert res.timing.load_bytes == 24000 + 4 * 7


def test_dispatch_waits_for_the_operand_region() -> None:
    seg = "snowflake_asm.segment input @x at 0 size 1600"
    body = "\n".join([movi(1, 0), movi(2, 800),
                      "snowflake_asm.ld maps r0, r1, r2 unit 0 to all",
                      "snowflake_asm.mac coop r0, r0, r0 trace 16",
                      "snowflake_asm.mac coop r0, r0, r0 trace 16"])
    res = run_both(body, seg, inputs={"x": np.zeros(800, np.int16)})
    p = preload(5)
    # LD @P+4 (r2 readable at P+4): data P+37..P+37+1600/8 = P+237. The first MAC reads
    # [0, 16), which the LD fills: dispatch holds it from P+5 to P+236 (load_wait 231), it
    # starts at P+237; the second MAC dispatches at P+237 and runs P+238..P+239.
    assert res.cycles == p + 239
    assert res.timing.stalls["load_wait"] == 231
    # CU side: idle until the first issue (P+6, starved), then for the data (231)
    assert res.timing.stalls["cu_starved"] == p + 6
    assert res.timing.stalls["cu_load_wait"] == 231
    _cu_time_adds_up(res)


def _cu_time_adds_up(res) -> None:
    """CU busy cycles + idle cycles by cause = the program's cycles."""
    idle = sum(v for k, v in res.timing.stalls.items() if k.startswith("cu_"))
    assert res.timing.busy_cycles + idle == res.cycles


def test_vector_op_outside_the_loaded_region_does_not_wait() -> None:
    seg = "snowflake_asm.segment input @x at 0 size 1600"
    body = "\n".join([movi(1, 0), movi(2, 800), movi(3, 1000),
                      "snowflake_asm.ld maps r0, r1, r2 unit 0 to all",
                      "snowflake_asm.mac coop r0, r3, r0 trace 16",
                      "snowflake_asm.ld maps r3, r1, r2 unit 1 to all"])
    res = run_both(body, seg, inputs={"x": np.zeros(800, np.int16)})
    p = preload(6)
    # LD A @P+4 (raw 1): data P+37..P+237 into [0, 800). The MAC reads maps [1000, 1016),
    # which no LD writes: dispatched at P+5, it runs P+6..P+7 without waiting. LD B @P+6
    # writes [1000, 1800) from P+39, after the MAC's read ends: it proceeds, done P+239.
    assert "load_wait" not in res.timing.stalls and "cu_load_wait" not in res.timing.stalls
    assert res.cycles == p + 239


def test_icache_preload_costs_bus_time() -> None:
    res = run_both("\n".join([NOP] * 600))
    # bank 0: 512 instructions (2048 B) on unit 0, bank 1: 88 (352 B) on unit 1, both from
    # cycle 32 at 8 B/cycle each (16 <= 16.8): bank 0 ready at 32 + 256 = 288
    assert res.timing.stalls["icache"] == 288
    assert res.cycles == 288 + 600
    assert res.timing.load_bytes == 2400


def test_writebacks_share_the_bus() -> None:
    seg = ("snowflake_asm.segment input @x at 0 size 16000\n"
           "snowflake_asm.segment output @y at 16384 size 64")
    body = "\n".join([movi(1, 0), movi(2, 4000), movi(3, 8000), movi(4, 16384), movi(5, 20000),
                      "snowflake_asm.ld maps r0, r1, r2 unit 0 to all",
                      "snowflake_asm.ld maps r3, r3, r2 unit 1 to all",
                      "snowflake_asm.mac coop r4, r5, r0 trace 1023 wb"])
    res = run_both(body, seg, inputs={"x": np.zeros(8000, np.int16)})
    p = preload(8)  # 36
    # LD A @P+5 -> data P+38..P+1038, LD B @P+6 -> P+39..P+1039: 16 of the 16.8 B/cycle.
    # The MAC (maps [20000, 21023), nothing loaded there) dispatches at P+7 and runs
    # P+8..P+72; its 16 results (32 B) are requested at P+78 and get the 0.8 B/cycle the
    # loads leave: 40 cycles -> in DRAM at P+118.
    assert res.timing.writeback_bytes == 32
    assert max(res.timing.page_written.values()) == p + 118
    assert res.cycles == p + 1039
    assert res.timing.dram_bytes == 16000 + 32 + 4 * 8


def test_icache_refill_stalls_fetch() -> None:
    body = [movi(1, 4096), movi(2, 76)] + [NOP] * 1018
    body += ["snowflake_asm.ld icache r0, r1, r2 unit 0 to 0"] + [NOP] * 79
    assert len(body) == 1100
    res = run_both("\n".join(body))
    # preload: banks 0 and 1 (512 instructions each) ready at 288 (both ports at 8 B/cycle).
    # code_base is 0 (no segments): instruction 1024 is at byte 4096.
    # LD @288+1020: data from +1053, 76 x 4 B at 8 B/cycle = 38 cycles -> bank 0 ready at
    # 288+1091; fetching 1024 at 288+1024 waits 67 cycles; the last 76 instructions follow.
    assert res.cycles == 288 + 1167
    assert res.timing.stalls["icache"] == 288 + 67


def test_same_block_in_both_banks_runs_from_the_ready_one() -> None:
    # From bank 1 ([512, 1024)) the program loads its own block into bank 0 as well, then
    # loops. A fetch uses the bank holding the pc that is ready first (bank 1): no stall.
    loop = ["snowflake_asm.label @l", "snowflake_asm.addi r3, r3, 1", "snowflake_asm.ble r3, r4, @l",
            NOP, NOP, NOP, NOP]
    body = [NOP] * 512 + [movi(1, 2048), movi(2, 512), "snowflake_asm.ld icache r0, r1, r2 unit 0 to 0",
                          movi(3, 0), movi(4, 20)] + loop
    body += [NOP] * (1024 - sum(1 for line in body if "label" not in line))
    res = run_both("\n".join(body))
    # preload ready at 288; nops 288..799; movi @800, @801; LD waits for r2 until 804 (raw 2);
    # movi @805, @806; addi @808 (raw 1), ble @811 (raw 2), an iteration is 8 cycles, 21 of
    # them (r3 = 1..21): the last slot at 808 + 168 - 1 = 975; 501 nops 976..1476.
    assert res.timing.stalls["icache"] == 288
    assert res.cycles == 1477


class _PlainLedger:
    """The bus ledger as first written: every segment kept, every transfer walks them all (the
    reference for `BandwidthLedger`, which must give the same end times to the bit)."""

    def __init__(self, total: float):
        self.total = total
        self.times: list[float] = [0.0]
        self.used: list[float] = [0.0]

    def _split(self, t: float) -> int:
        times = self.times
        i = bisect_right(times, t) - 1
        if times[i] == t:
            return i
        times.insert(i + 1, t)
        self.used.insert(i + 1, self.used[i])
        return i + 1

    def prune(self, now: float) -> None:
        times = self.times
        if len(times) < 64 or times[1] > now:
            return
        k = 0
        while k + 1 < len(times) and times[k + 1] <= now:
            k += 1
        del times[:k]
        del self.used[:k]

    def transfer(self, start: float, nbytes: int, cap: float) -> float:
        if start < self.times[0]:
            start = self.times[0]
        i = self._split(start)
        remaining = float(nbytes)
        times, used = self.times, self.used
        while True:
            seg_end = times[i + 1] if i + 1 < len(times) else float("inf")
            avail = min(cap, self.total - used[i])
            if avail > 1e-9:
                need = remaining / avail
                if times[i] + need <= seg_end + 1e-9:
                    end = times[i] + need
                    if end < seg_end:
                        self._split(end)
                    used[i] += avail
                    return end
                used[i] += avail
                remaining -= avail * (seg_end - times[i])
            i += 1


@pytest.mark.parametrize("total, cap", [(16.8, 8.0), (16.0, 8.0), (10.0, 10.0), (16.8, 2.3), (7.3, 5.1)])
@pytest.mark.parametrize("seed", range(4))
def test_ledger_end_times_equal_a_plain_walk(total: float, cap: float, seed: int) -> None:
    # as Timing uses it: a clock that only moves on, transfers requested from it on (loads a
    # little ahead, write-backs in bursts that oversubscribe the bus), pruned at the clock
    rng = random.Random(seed)
    fast, plain = BandwidthLedger(total), _PlainLedger(total)
    now = 0
    for _ in range(3000):
        now += rng.choice((0, 1, 3, 9, 40, 200))
        if rng.random() < 0.3:
            fast.prune(now)
            plain.prune(now)
        start = now + rng.choice((0, 6, 33, 120)) + (rng.random() if rng.random() < 0.1 else 0)
        nbytes = rng.choice((1, 2, 32, 512, 2048, 4096, 20000))  # Timing moves no 0-byte transfer
        assert fast.transfer(start, nbytes, cap) == plain.transfer(start, nbytes, cap)
    # what the plain walk does not: a backlog of full segments stays one segment
    assert len(fast.times) < len(plain.times) or len(plain.times) < 64


def test_oversubscribed_write_backs_keep_the_ledger_short() -> None:
    ledger = BandwidthLedger(16.8)
    for k in range(20_000):  # 4 KB every 9 cycles: 27x what the bus moves
        ledger.transfer(9 * k + 6, 4096, 8.0)
    assert len(ledger.times) < 16


def test_pending_loads_answer_as_a_scan() -> None:
    rng = random.Random(7)
    index, plain = PendingLoads(), []
    now = 0
    for _ in range(20_000):
        now += rng.choice((0, 1, 2, 10))
        if rng.random() < 0.3:
            lo = rng.randrange(0, 60_000)
            hi = lo + rng.choice((1, 16, 300, 2000, 5000))
            done = now + rng.randrange(1, 3000)
            mask = rng.randrange(1, 16)
            index.add(lo, hi, done, mask, now)
            plain.append((lo, hi, done, mask))
        else:
            lo = rng.randrange(0, 62_000)
            hi = lo + rng.choice((0, 1, 9, 192, 1000))
            mask = rng.choice((-1, 1, 2, 4, 8))
            want = max((d for a, b, d, m in plain if d > now and a < hi and lo < b and m & mask), default=0)
            got = index.ready(lo, hi, now, mask)
            assert got == want if max(got, want) > now else True, (got, want, now)
