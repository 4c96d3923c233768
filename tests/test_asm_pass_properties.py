"""
The snowflake_asm passes are safe on any program (issue 25 item 6): balance-loads,
schedule-asm, fill-delay-slots and icache-banking, each alone and in the order the
`snowflake-lower` pipeline runs them, over 600 seeded random programs (`PROGRAMS`; more with
SNOWIR_FUZZ_DEPTH, tests/fuzz_depth.py), every transformed
program run on the machine model (the fast engine) against the original.

The programs come from test_fuzz's generator, extended (`PassGen`) with what the passes act
on or must step around: counted loops (backward branches) and forward skips of every branch
kind, skips with an empty body and skips whose target is followed only by no-ops at the end of
the program, no-ops of every spelling (scalar ops writing r0) inside blocks, delay slots that
already hold instructions, `ld icache` (a program that loads its own cache is left alone by
every pass but icache-banking refuses in one line), LDs large enough for balance-loads to split, LD, TMOV, vector-op bursts and LDs
racing the vector ops that read their region. Every `LONG_EVERY`-th program is long (more
than a bank of 512 instructions, no `ld icache`) so icache-banking lays it out, half of them
with a loop starting at the second block: its original runs on a machine whose one bank holds
it whole, its banked forms on the default machine.

For every program and pass (or pass sequence):

  * a program that runs to the end runs to the end transformed, with identical outputs,
    registers (r30/r31 aside once icache-banking reserved them), DRAM (the program's own code
    words aside) and maps and weights buffers;
  * a program that faults faults the same way transformed (the message with its numbers left
    out: cycles and ranges move);
  * except for the one fault that depends on timing, an LD racing a vector op that reads its
    region (`RACE`): a program that lost such a race may win it transformed or lose another,
    and one that won it may lose it transformed only if it loses it untransformed on a
    machine that loads faster (it was correct by luck);
  * no pass leaves a label after the program's last instruction (a branch to it would leave
    the instruction-cache bank) unless the original had one there;
  * no pass makes a program that runs to the end slower on the machine it runs on (the passes
    measure with the machine model and keep the original where their rewrite would lose:
    passes/asm/guard.py);
  * schedule-asm and fill-delay-slots keep the vector ops and loads, in their order;
  * icache-banking runs each instruction it adds at most once (a loop that starts a bank's
    block does not run the block's bank load again);
  * a pass may refuse a program only in one line: icache-banking a loop longer than a bank,
    the others a program that loads its own instruction cache (they cannot act on it, and say
    so rather than leave it as it is in silence).
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from snowir import api
from snowir.asm_analysis import is_machine
from snowir.dialects import snowflake_asm as sf
from snowir.hw import SnowflakeConfig
from snowir.machine.image import assemble
from snowir.machine.run import run_image
from snowir.machine.state import MachineFault
from snowir.passes.pipelines import PIPELINE, SnowflakeLowerPass
from fuzz_depth import scaled
from test_fuzz import NOP, SEG, Gen, _code_base

BATCH = 50
PROGRAMS = scaled(600, BATCH)
LONG_EVERY = 40  # seeds 39, 79, ... make long programs (icache-banking lays them out)
LIMIT = 30_000  # dynamic instructions of an original program (a simulator guard)

ASM_PASSES = tuple(p for p in PIPELINE[PIPELINE.index("tile-to-asm") + 1:] if p != "link-segments")  # one layer: nothing to link
"""The passes `snowflake-lower` runs on snowflake_asm programs, in its order."""
CONFIGS = [(name,) for name in ASM_PASSES] + [ASM_PASSES]
RESERVED = {30, 31}  # icache-banking's bank-load registers

DEFAULT = SnowflakeConfig()
WHOLE = SnowflakeConfig(icache_bank_instructions=4096)
"""A machine whose bank (the largest a configuration may have) holds a long program whole:
where its unbanked forms run."""

RACE = "LD overwrites"
"""The one fault that depends on timing: an LD whose data lands in a buffer region an earlier
vector op is still reading. The compiler must order such an LD after the read (C17 §5.2,
docs/machine.md); a program that has it follow only by the cycles between them is correct on
this machine by luck, and faults on a faster one (`FASTER`: timing fields only, which an image
may run on). The passes change timing (fewer no-ops, earlier loads, other load units): on such
a program they may lose the race, or win one the original lost. They keep the vector ops and
loads in their order (checked), which is what orders an LD after a read."""
FASTER = [{"ld_startup_cycles": startup, "scalar_latency": latency, **bandwidth}
          for startup in (0, 16) for latency in (1, 3) for bandwidth in ({}, {"unit_gbps": 1e3, "dram_gbps": 1e3})]
"""Machines whose loads start sooner, whose scalar results are ready sooner, and whose loads
need not queue behind one another."""
ORDER_KEEPING = {"schedule-asm", "fill-delay-slots"}
"""Passes that move instructions but keep every vector op and load as it is, in its order."""


def _make(name: str) -> ModulePass:
    """The pass as the pipeline configures it, with the machine-model guard each pass has alone
    (`snowflake-lower{guard=true}`; the pipeline leaves it off by default for compile time)."""
    return next(p for p in SnowflakeLowerPass(guard=True).passes(True) if p.name == name)


MAPS, WEIGHTS = DEFAULT.maps_buffer_elements, DEFAULT.weights_buffer_elements
BANK = DEFAULT.icache_bank_instructions
INPUT = 4096  # elements of the input segment @x (SEG)
MARGIN = 2000  # past its start, the most a MAX, VMOV bypass or TMOV of the generator reads


class PassGen(Gen):
    """test_fuzz's generator with what the asm passes act on (see the module docstring).
    `fenced`: the vector ops and TMOVs read the lower halves of the buffers, the LDs write the
    upper halves, so no LD races a read (the programs mostly run to the end)."""

    def __init__(self, seed: int, code_base: int, icache: bool = True, size: int = 0, fenced: bool = False):
        super().__init__(seed, code_base)
        self.icache = icache
        self.size = size  # at least this many instructions at the top level (0: 1..7 pieces, as Gen)
        self.fenced = fenced
        self.maps_fence, self.weights_fence = (MAPS // 2, WEIGHTS // 2) if fenced else (MAPS, WEIGHTS)

    def body(self, depth: int) -> list[str]:
        kinds = ["scalar"] * 4 + ["mac"] * 3 + ["max", "vmov", "ld", "ld", "bigld", "tmov", "burst", "nops", "nops"]
        if not self.fenced:
            kinds.append("hazard")
        if self.icache:
            kinds.append("icache")
        if depth < 2:
            kinds += ["loop", "loop", "skip", "skip"]
        lines: list[str] = self.preload() if depth == 0 else []
        if depth == 0 and self.size:
            aligned = self.rng.random() < 0.5  # a loop starts the second bank's block
            while _count(lines) < self.size:
                if aligned and BANK - 52 <= _count(lines) < BANK:
                    lines += [f"snowflake_asm.movi r{self.i(1, 6)}, {self.i(0, 99)}"
                              for _ in range(BANK - 1 - _count(lines))] + self._loop(depth, least=2)
                    aligned = False
                    continue
                lines += getattr(self, "_" + self.pick(*kinds))(depth)
            return lines
        for _ in range(self.i(1, 7)):
            lines += getattr(self, "_" + self.pick(*kinds))(depth)
        return lines

    def preload(self) -> list[str]:
        """Fenced: the input into the halves the vector ops read, before any reads them."""
        if not self.fenced:
            return []
        lines = [f"snowflake_asm.movi r14, {INPUT}", "snowflake_asm.movi r15, 0"]
        for at in range(0, self.maps_fence, INPUT):
            lines += [f"snowflake_asm.movi r11, {at}",
                      f"snowflake_asm.ld maps r11, r15, r14 unit {self.i(0, 3)} to all"]
        return lines + [f"snowflake_asm.movi r14, {self.weights_fence}", "snowflake_asm.movi r11, 0",
                        f"snowflake_asm.ld weights r11, r15, r14 unit {self.i(0, 3)} to all"]

    def nop(self) -> str:
        r = lambda: f"r{self.i(0, 15)}"  # noqa: E731
        return self.pick(NOP, NOP, f"snowflake_asm.movi r0, {self.i(-64, 4000)}",
                         f"snowflake_asm.addi r0, {r()}, {self.i(-300, 300)}",
                         f"snowflake_asm.add r0, {r()}, {r()}", f"snowflake_asm.mov r0, {r()} shl {self.i(0, 3)}")

    def _nops(self, depth: int) -> list[str]:
        return [self.nop() for _ in range(self.i(1, 4))]

    def _branch(self, branch: str) -> list[str]:
        """`branch` and its delay slots: no-ops, at times instructions already there (MOVIs, an LD
        -- large, at times -- whose registers are set before the branch: no RAW pair among them,
        none writes a loop counter), at times a label among them (the instruction after it is
        still a slot)."""
        before: list[str] = []
        slots = [f"snowflake_asm.movi r{self.i(1, 6)}, {self.i(-64, 4000)}" if self.rng.random() < 0.15
                 else self.pick(NOP, NOP, NOP, self.nop()) for _ in range(4)]
        if self.rng.random() < 0.1:
            ld = self._bigld(0) if self.rng.random() < 0.5 else self._ld(0)
            before, slots[self.i(0, 3)] = ld[:-1], ld[-1]
        if self.rng.random() < 0.2:
            self.labels += 1
            slots.insert(self.i(1, 3), f"snowflake_asm.label @slot{self.labels}")
        return before + [branch] + slots

    def _mac(self, depth: int, trace: int | None = None) -> list[str]:
        indp = self.rng.random() < 0.3
        trace = trace or (self.i(1, 60) if indp else self.i(1, 1023))
        if indp:
            trace = min(trace, self.weights_fence // 16 - 1)  # 16 weights per trace element
        w = self.i(0, self.weights_fence - (16 * trace if indp else trace))
        wb = " wb" if self.rng.random() < 0.5 else ""
        return [f"snowflake_asm.movi r7, {8192 + 2 * self.i(0, 2000)}",
                f"snowflake_asm.movi r11, {self.i(0, self.maps_fence - 1100)}", f"snowflake_asm.movi r12, {w}",
                f"snowflake_asm.mac {'indp' if indp else 'coop'} r7, r11, r12 trace {trace}{wb}"]

    def _max(self, depth: int) -> list[str]:
        return [f"snowflake_asm.movi r7, {8192 + 2 * self.i(0, 2000)}",
                f"snowflake_asm.movi r11, {self.i(0, self.maps_fence - MARGIN)}",
                f"snowflake_asm.movi r13, {self.i(0, 64)}",
                f"snowflake_asm.max r7, r11, r13 trace {self.i(1, 8)}{self.pick('', ' wb')}"]

    def _vmov(self, depth: int) -> list[str]:
        select = self.pick("bias", "bypass", "mask", "stride", "shift")
        value = {"bias": self.i(0, self.weights_fence - 16), "bypass": self.i(0, self.maps_fence - MARGIN),
                 "mask": self.i(1, 0xFFFF), "stride": 2 * self.i(1, 256), "shift": self.i(1, 15)}[select]
        return [f"snowflake_asm.movi r1, {value}", f"snowflake_asm.vmov {self.pick('coop', 'indp')} {select} r1"]

    def _tmov(self, depth: int) -> list[str]:
        length = self.i(1, 400)
        return [f"snowflake_asm.movi r14, {length}", f"snowflake_asm.movi r7, {8192 + 2 * self.i(0, 8192 - length)}",
                f"snowflake_asm.movi r11, {self.i(0, self.maps_fence - length)}",
                f"snowflake_asm.tmov r7, r11, r14 unit {self.i(0, 3)} from {self.i(0, 3)}"]

    def _ld(self, depth: int, buf: int | None = None, length: int | None = None) -> list[str]:
        target = self.pick("maps", "weights")
        limit = MAPS if target == "maps" else WEIGHTS
        lowest = limit - (self.maps_fence if target == "maps" else self.weights_fence) if self.fenced else 0
        length = min(length or self.i(1, 1000), limit - lowest, INPUT)
        buf = self.i(lowest, limit - length) if buf is None else min(buf, limit - length)
        select = self.pick(*([0, 3, "all"] if target == "maps" else [0, 5, 17, "all"]))
        return [f"snowflake_asm.movi r14, {length}", f"snowflake_asm.movi r15, {2 * self.i(0, INPUT - length)}",
                f"snowflake_asm.movi r11, {buf}",
                f"snowflake_asm.ld {target} r11, r15, r14 unit {self.i(0, 3)} to {select}"]

    def _bigld(self, depth: int) -> list[str]:
        """An LD of 1024 elements or more: balance-loads splits it over the load units."""
        return self._ld(depth, length=self.i(1024, INPUT))

    def _loop(self, depth: int, least: int = 0) -> list[str]:
        counter = 9 + depth
        self.labels += 1
        label = f"loop{self.labels}"
        most = 3 if self.size else 16 if depth else 8  # iterations: a few show what a pass does to a loop
        lines = [f"snowflake_asm.movi r{counter}, {self.i(least, most)}", f"snowflake_asm.label @{label}"]
        lines += self.body(depth + 1)
        return lines + [f"snowflake_asm.addi r{counter}, r{counter}, -1",
                        *self._branch(f"snowflake_asm.bgt r{counter}, r0, @{label}")]

    def _skip(self, depth: int) -> list[str]:
        self.labels += 1
        label = f"skip{self.labels}"
        branch = self.pick("beq", "beq", "ble", "bgt")
        inner = [] if self.rng.random() < 0.15 else self.body(depth + 1)
        return (self._branch(f"snowflake_asm.{branch} r{self.i(0, 6)}, r{self.i(0, 6)}, @{label}")
                + inner + [f"snowflake_asm.label @{label}"])


def _count(lines: list[str]) -> int:
    return sum(1 for line in lines if ".label" not in line)


def program_text(seed: int, code_base: int) -> str:
    """Program `seed` of the test, as MLIR text."""
    long = seed % LONG_EVERY == LONG_EVERY - 1
    rng = np.random.default_rng([seed, 1])
    gen = PassGen(seed, code_base, icache=not long and rng.random() < 0.3,
                  size=int(rng.integers(BANK + 8, BANK + 188)) if long else 0, fenced=long or rng.random() < 0.5)
    # no-ops end the program, at times after the last skip's label (a skip's label never ends
    # it: the branch would leave the bank)
    lines = gen.body(0) + [gen.nop() for _ in range(int(rng.integers(1, 3)))]
    n = _count(lines)
    lines = [re.sub(r"ICOUNT(\d+)", lambda m: str(min(int(m.group(1)), n)), line) for line in lines]
    return SEG + "snowflake_asm.program @r {\n" + "\n".join(lines) + "\n}\n"


def _kind(message: str) -> str:
    return re.sub(r"0x[0-9a-f]+|-?\d+", "#", message)


def _run(image, hw: SnowflakeConfig, x: np.ndarray, limit: int):
    try:
        return run_image(image, hw, "fast", {"x": x}, max_instructions=limit), None
    except MachineFault as fault:
        return None, fault.message


def _program(module) -> sf.ProgramOp:
    return next(op for op in module.body.block.ops if isinstance(op, sf.ProgramOp))


def _ends_in_label(module) -> bool:
    return type(_program(module).body.block.last_op) is sf.LabelOp


def _shape(module) -> list[tuple]:
    """The program's instructions and labels, for telling whether a pass changed it."""
    return [(op.name, *op.properties.values()) for op in _program(module).body.block.ops]


def _machine_ops(module) -> list[str]:
    return [str(op) for op in _program(module).body.block.ops if is_machine(op)]


def check_program(seed: int, code_base: int) -> dict[str, int]:
    """Run program `seed` and each transform of it, asserting the properties of the module
    docstring; returns counts of what happened."""
    stats = dict.fromkeys(("ran", "faulted", "inconclusive", "changed", "raced", "lost a race", "refused"), 0)
    original = api.parse_text(program_text(seed, code_base))
    image = assemble(original)
    hw = WHOLE if len(image.code) > BANK else DEFAULT
    x = np.random.default_rng(seed).integers(-512, 512, INPUT).astype(np.int16)
    ref, ref_fault = _run(image, hw, x, LIMIT)
    if ref_fault is not None and ref_fault.startswith("instruction limit"):
        stats["inconclusive"] += 1
        return stats
    stats["ran" if ref_fault is None else "faulted"] += 1
    racy = None  # whether the original loses an LD race on a machine that loads faster
    ends_in_label = _ends_in_label(original)
    shape = _shape(original)
    ctx = api.context()
    for config in CONFIGS:
        where = f"seed {seed}, {' + '.join(config)}"
        module = original.clone()
        try:
            for name in config:
                _make(name).apply(ctx, module)
        except PassFailedException as e:
            assert ("icache-banking: a loop of" in str(e) or "loads its own instruction cache" in str(e)) \
                and "\n" not in str(e), f"{where}: {e}"
            stats["refused"] += 1
            continue
        assert ends_in_label or not _ends_in_label(module), f"{where}: a label ends the program"
        if ORDER_KEEPING.issuperset(config):
            assert _machine_ops(module) == _machine_ops(original), f"{where}: vector ops or loads moved"
        if _shape(module) == shape:
            continue  # left alone
        new_image = assemble(module)  # verifies the module
        stats["changed"] += 1
        banked = "icache-banking" in config
        limit = 3 * (ref.machine.dynamic if ref is not None else LIMIT) + 1000
        new, new_fault = _run(new_image, DEFAULT if banked else hw, x, limit)
        if ref_fault is not None:
            if ref_fault.startswith(RACE) and (new_fault is None or new_fault.startswith(RACE)):
                stats["raced"] += 1
                continue
            assert new_fault is not None, f"{where}: the fault '{ref_fault}' went away"
            assert _kind(new_fault) == _kind(ref_fault), f"{where}: '{ref_fault}' became '{new_fault}'"
            continue
        if new_fault is not None and new_fault.startswith(RACE):
            if racy is None:
                racy = any((fault or "").startswith(RACE)
                           for _, fault in (_run(image, replace(hw, **fast), x, LIMIT) for fast in FASTER))
            assert racy, f"{where}: the pass introduced the fault '{new_fault}' (the original has no LD race)"
            stats["lost a race"] += 1
            continue
        assert new_fault is None, f"{where}: the pass introduced the fault '{new_fault}'"
        if config == ("icache-banking",):
            assert new.machine.dynamic - ref.machine.dynamic <= len(new_image.code) - len(image.code), \
                f"{where}: an added instruction runs more than once"
        a, b = ref.machine.state, new.machine.state
        regs = [r for r in range(len(a.regs)) if not (banked and r in RESERVED)]
        assert [a.regs[r] for r in regs] == [b.regs[r] for r in regs], f"{where}: registers differ"
        # the program's own words sit in DRAM from its code base: compare the data around them
        lo, hi = image.code_base, max(image.code_end, new_image.code_end)
        assert np.array_equal(a.dram[:lo], b.dram[:lo]) and np.array_equal(a.dram[hi:], b.dram[hi:]), \
            f"{where}: DRAM differs"
        assert np.array_equal(a.maps, b.maps), f"{where}: maps buffers differ"
        assert np.array_equal(a.weights, b.weights), f"{where}: weights buffers differ"
        for name in ref.outputs:
            assert np.array_equal(ref.outputs[name], new.outputs[name]), f"{where}: output @{name} differs"
        if not banked and hw is DEFAULT:  # never slower on the machine it runs on (the passes' guard)
            assert new.cycles <= ref.cycles, f"{where}: {ref.cycles} cycles became {new.cycles}"
    return stats


@pytest.mark.parametrize("batch", range(PROGRAMS // BATCH))
def test_asm_passes_preserve_random_programs(batch: int) -> None:
    code_base = _code_base()
    totals: dict[str, int] = {}
    for seed in range(batch * BATCH, (batch + 1) * BATCH):
        for key, value in check_program(seed, code_base).items():
            totals[key] = totals.get(key, 0) + value
    # the programs mostly run to the end, and the passes mostly change them
    assert totals["ran"] >= BATCH * 0.5, totals
    assert totals["changed"] >= 2 * BATCH, totals


def _apply(text: str, *names: str):
    module = api.parse_text(SEG + "snowflake_asm.program @r {\n" + text + "\n}\n")
    before = module.clone()
    for name in names:
        _make(name).apply(api.context(), module)
    return before, module


def test_schedule_asm_keeps_the_no_op_a_skip_lands_on() -> None:
    """A skip to the program's last instructions, all no-ops: schedule-asm keeps an instruction
    there (it used to drop them all, sending the branch to the pc past the end, outside the
    bank); outside a loop it now keeps every no-op, so no pc moves."""
    body = "\n".join(["snowflake_asm.movi r1, 5", "snowflake_asm.beq r0, r0, @end", *[NOP] * 4,
                      "snowflake_asm.movi r1, 7", "snowflake_asm.label @end", NOP, "snowflake_asm.addi r0, r1, 3"])
    before, after = _apply(body, "schedule-asm")
    assert not _ends_in_label(after)
    assert len(assemble(after).code) == len(assemble(before).code)
    result = run_image(assemble(after), DEFAULT, "fast", {})
    assert result.machine.state.regs[1] == 5


def test_icache_banking_loop_starting_a_block_runs_its_bank_load_once() -> None:
    """A loop whose first instruction falls on a block's start: its label goes after the block's
    bank load (before it, each iteration ran the 5-instruction load again)."""
    body = "\n".join([*(f"snowflake_asm.movi r1, {k}" for k in range(BANK - 1)), "snowflake_asm.movi r9, 20",
                      "snowflake_asm.label @L", "snowflake_asm.addi r1, r1, 1", "snowflake_asm.addi r9, r9, -1",
                      "snowflake_asm.bgt r9, r0, @L", *[NOP] * 4,
                      *(f"snowflake_asm.movi r2, {k}" for k in range(BANK + 100))])  # a third block
    before, after = _apply(body, "icache-banking")
    ops = list(_program(after).body.block.ops)
    label = next(k for k, op in enumerate(ops) if type(op) is sf.LabelOp)
    assert type(ops[label - 1]) is sf.LdOp and ops[label - 1].target.data == sf.LoadTarget.ICACHE
    ref = run_image(assemble(before), WHOLE, "fast", {})
    new = run_image(assemble(after), DEFAULT, "fast", {})
    assert new.machine.state.regs[:30] == ref.machine.state.regs[:30]
    assert new.machine.dynamic - ref.machine.dynamic == len(assemble(after).code) - len(assemble(before).code)


def test_icache_banking_skips_the_padding_before_a_loop() -> None:
    """Regression (issue 38): a loop that does not fit the rest of its block moves to the next
    one behind no-ops, which ran one issue cycle each (DenseNet-121's n300: 131 at its cold
    start). A branch to the block's last instruction skips them: the branch, its 4 slots and that
    instruction run, every pc stays, and the program computes what it did."""
    left = 40  # instructions of block 0 the loop (60 of them) does not fit in
    body = "\n".join([*(f"snowflake_asm.movi r1, {k}" for k in range(BANK - left)), "snowflake_asm.movi r9, 3",
                      "snowflake_asm.label @L", *(f"snowflake_asm.addi r{2 + k % 6}, r1, {k}" for k in range(54)),
                      "snowflake_asm.addi r9, r9, -1", "snowflake_asm.bgt r9, r0, @L", *[NOP] * 4,
                      *(f"snowflake_asm.movi r2, {k}" for k in range(BANK + 100))])  # a third block
    before, after = _apply(body, "icache-banking")
    ops = [op for op in _program(after).body.block.ops if type(op) is not sf.LabelOp]
    skip = next(k for k, op in enumerate(ops) if type(op) is sf.BeqOp)
    assert skip < BANK and all(type(op) is sf.MovOp for op in ops[skip + 1:BANK])  # block 0's end
    ref = run_image(assemble(before), WHOLE, "fast", {})
    new = run_image(assemble(after), DEFAULT, "fast", {})
    assert new.machine.state.regs[:30] == ref.machine.state.regs[:30]
    # added and run: two bank loads' 5 instructions each, and of the padding the skip, its 4
    # slots and the block's last instruction (all `left` of it before)
    assert new.machine.dynamic - ref.machine.dynamic == 2 * 5 + 6


@pytest.mark.parametrize("pad", [5, 6, 7, 299])
def test_icache_banking_padding_skip_runs_alike_on_both_engines(pad: int) -> None:
    """Audit (stop 54): padding of every length around the skip's threshold (up to slots + 2 = 6: no-ops
    alone; 7: the branch, its 4 slots and the skipped no-op; 299: a skip most of a bank long)
    runs on the reference engine (which reads the binary back: the branch's offset encoded) as on
    the fast one, the branch never lands on anything but the block's last instruction, and the
    loop after it is whole in the next block."""
    slots = DEFAULT.branch_delay_slots
    left = pad + 1  # block 0's rest after the movis: the loop's counter, then the padding
    span = left + 20  # the loop: too long for the rest of block 0
    body = "\n".join([*(f"snowflake_asm.movi r1, {k}" for k in range(BANK - left)), "snowflake_asm.movi r9, 3",
                      "snowflake_asm.label @L", *(f"snowflake_asm.addi r{2 + k % 6}, r1, {k}" for k in range(span - 6)),
                      "snowflake_asm.addi r9, r9, -1", "snowflake_asm.bgt r9, r0, @L", *[NOP] * slots,
                      *(f"snowflake_asm.movi r2, {k}" for k in range(BANK + 100))])
    before, after = _apply(body, "icache-banking")
    ops = list(_program(after).body.block.ops)
    code = [op for op in ops if type(op) is not sf.LabelOp]
    skips = [k for k, op in enumerate(code) if type(op) is sf.BeqOp]
    if pad <= slots + 2:
        assert skips == [] and all(type(op) is sf.MovOp for op in code[BANK - pad:BANK])
    else:
        assert skips == [BANK - pad] and all(type(op) is sf.MovOp for op in code[BANK - pad + 1:BANK])
        target = ops[ops.index(code[skips[0]]) + 1:]
        label = next(k for k, op in enumerate(target) if type(op) is sf.LabelOp)
        assert target[label].label.data == code[skips[0]].target.data
        assert target[label + 1] is code[BANK - 1]  # the block's last instruction, a no-op
    fast = run_image(assemble(after), DEFAULT, "fast", {})
    ref = run_image(assemble(after), DEFAULT, "reference", {})
    whole = run_image(assemble(before), WHOLE, "fast", {})
    assert ref.machine.state.regs == fast.machine.state.regs
    assert ref.machine.state.regs[:30] == whole.machine.state.regs[:30]
    assert (ref.machine.dynamic, ref.cycles) == (fast.machine.dynamic, fast.cycles)
    assert fast.machine.dynamic - whole.machine.dynamic == 2 * 5 + (pad if pad <= slots + 2 else slots + 2)


def test_icache_banking_padding_label_is_a_new_name() -> None:
    """Audit (stop 54): a program of its own labels `icache_pad0` (a forward skip past r10's
    movi, after the padding) is banked with the padding's skip under another name; with the
    same name the program did not verify ("label @icache_pad0 defined twice")."""
    pad = 20
    body = "\n".join([*(f"snowflake_asm.movi r1, {k}" for k in range(BANK - pad - 1)), "snowflake_asm.movi r9, 3",
                      "snowflake_asm.label @L", *(f"snowflake_asm.addi r{2 + k % 6}, r1, {k}" for k in range(pad + 15)),
                      "snowflake_asm.addi r9, r9, -1", "snowflake_asm.bgt r9, r0, @L", *[NOP] * 4,
                      "snowflake_asm.beq r0, r0, @icache_pad0", *[NOP] * 4, "snowflake_asm.movi r10, 7",
                      "snowflake_asm.label @icache_pad0", "snowflake_asm.movi r11, 5",
                      *(f"snowflake_asm.movi r2, {k}" for k in range(BANK + 100))])
    before, after = _apply(body, "icache-banking")
    skips = [op for op in _program(after).body.block.ops if type(op) is sf.BeqOp]
    assert len(skips) == 2 and skips[0].target.data not in ("icache_pad0", skips[1].target.data)
    ref = run_image(assemble(before), WHOLE, "fast", {})
    new = run_image(assemble(after), DEFAULT, "fast", {})
    assert new.machine.state.regs[:30] == ref.machine.state.regs[:30] and ref.machine.state.regs[10:12] == [0, 5]


def test_icache_banking_padding_skip_within_a_branchs_reach(tmp_path) -> None:
    """Audit (stop 54): on a machine of 4096-instruction banks, a region of two overlapping forward
    skips (each in reach, 3,400 instructions together) moves to block 1 behind 3,000 instructions
    of padding: the skip to block 0's last instruction, 2,999 on, is out of a branch's signed
    12-bit reach (it did not assemble: "branch offset 2999 does not fit 12 bits"), so it starts
    far enough in; the program runs as written on both engines."""
    import json

    from snowir.passes.asm.icache_banking import SKIP_REACH, IcacheBankingPass

    hw_file = tmp_path / "big_banks.json"
    hw_file.write_text(json.dumps({"icache_bank_instructions": 4096}))
    big = SnowflakeConfig.load(str(hw_file))
    pad = 3000
    body = "\n".join([*(f"snowflake_asm.movi r1, {1 + k % 1000}" for k in range(big.icache_bank_instructions - pad)),
                      "snowflake_asm.beq r1, r0, @F1", *[NOP] * 4, *["snowflake_asm.addi r3, r3, 1"] * 1695,
                      "snowflake_asm.beq r1, r0, @F2", *[NOP] * 4, *["snowflake_asm.addi r4, r4, 1"] * 95,
                      "snowflake_asm.label @F1", *["snowflake_asm.addi r5, r5, 1"] * 1600,
                      "snowflake_asm.label @F2", *(f"snowflake_asm.movi r2, {k % 1000}" for k in range(4196))])
    module = api.parse_text(SEG + "snowflake_asm.program @r {\n" + body + "\n}\n")
    IcacheBankingPass(hw=str(hw_file)).apply(api.context(), module)
    code = [op for op in _program(module).body.block.ops if type(op) is not sf.LabelOp]
    skip = next(k for k, op in enumerate(code) if type(op) is sf.BeqOp and op.target.data.startswith("icache_pad"))
    assert skip == big.icache_bank_instructions - 1 - SKIP_REACH  # the farthest in reach of block 0's last
    image = assemble(module)
    for engine in ("fast", "reference"):
        run = run_image(image, big, engine, {})
        assert run.machine.state.regs[1:6] == [96, 195, 1695, 95, 1600]  # r1, r2 last set; no skip taken


def _same_run(body: str, *names: str) -> None:
    """The program runs to the end transformed with the registers and buffers it ends with."""
    before, after = _apply(body, *names)
    x = np.arange(INPUT).astype(np.int16)
    ref = run_image(assemble(before), DEFAULT, "fast", {"x": x})
    new = run_image(assemble(after), DEFAULT, "fast", {"x": x})
    a, b = ref.machine.state, new.machine.state
    assert a.regs == b.regs and np.array_equal(a.maps, b.maps) and np.array_equal(a.weights, b.weights)


SLOT_LABEL = ["snowflake_asm.movi r1, 0", "snowflake_asm.beq r0, r0, @T", NOP, "snowflake_asm.label @M", NOP, NOP]
"""A taken branch, then a no-op, a label and two no-ops: three delay slots (a label is no
instruction), so the instruction after them is still the fourth."""


@pytest.mark.parametrize("name", ASM_PASSES)
def test_a_label_in_delay_slots_leaves_them_four_instructions(name: str) -> None:
    # schedule-asm took the fourth slot for the start of a block and dropped it (a no-op), so
    # the fall-through-only MOVI became a slot; fill-delay-slots moved it (not a no-op) into
    # the next branch's slots, and that branch into the first one's
    _same_run("\n".join([*SLOT_LABEL, NOP, "snowflake_asm.movi r1, 5", "snowflake_asm.label @T", NOP]), name)
    _same_run("\n".join([*SLOT_LABEL, "snowflake_asm.movi r2, 7", "snowflake_asm.movi r3, 5",
                         "snowflake_asm.bgt r0, r0, @T", *[NOP] * 4, "snowflake_asm.label @T", NOP]), name)


def test_balance_loads_leaves_an_ld_in_delay_slots_whole() -> None:
    """A large LD in a taken branch's delay slots: split, its parts and register updates ran past
    the slots, on the fall-through path only."""
    body = ["snowflake_asm.movi r14, 4000", "snowflake_asm.movi r15, 0", "snowflake_asm.movi r11, 0",
            "snowflake_asm.beq r0, r0, @L", "snowflake_asm.ld maps r11, r15, r14 unit 0 to all", NOP, NOP, NOP,
            "snowflake_asm.movi r2, 1", "snowflake_asm.label @L", NOP]
    _same_run("\n".join(body), "balance-loads")
    # after the slots, the same LD is split
    _, after = _apply("\n".join(body[:3] + body[4:]), "balance-loads")
    assert sum(1 for op in _program(after).body.block.ops if type(op) is sf.LdOp) == 4


CONV5 = (256, 13, 13, 256, 3, 3, 1, 1)
"""C17 Table 1's conv5 (13x13, 3x3, 256->256): the ONNX path lowers it as two channel parts,
linked into one program that icache-banking streams through the banks."""
GUARDED = ("balance-loads", "schedule-asm", "fill-delay-slots")
STEM = (3, 48, 48, 96, 7, 7, 2, 0)
"""ZFNet's 7x7/2 stem (3->96, no padding) on a 48x48 input: one INDP layer whose inner loop's
seven 21-cycle traces outlast its issue."""


FC = (4096, 256)
"""A fully connected 4096 -> 256 layer (AlexNet's fc6-fc8 in small): one loop over its kernel
tiles whose passes load the tile's weights (LDs in the loop) and whose traces outlast its issue."""


def _model(shape: tuple[int, ...]):
    """A conv (`shape`: c, h, w, k, kh, kw, stride, pad) or, for two numbers (inputs, outputs),
    a Gemm, each followed by a ReLU."""
    from onnx import helper

    from onnx_util import model, rand

    if len(shape) == 2:
        n_in, n_out = shape
        return model([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1), helper.make_node("Relu", ["y"], ["o"])],
                     {"x": [1, n_in]}, {"o": None},
                     {"w": rand(n_out, n_in, seed=1, scale=1 / np.sqrt(n_in)), "b": rand(n_out, seed=2, scale=0.1)})
    c, h, w, k, kh, kw, s, p = shape
    return model([helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[kh, kw], strides=[s, s], pads=[p] * 4),
                  helper.make_node("Relu", ["y"], ["o"])], {"x": [1, c, h, w]}, {"o": None},
                 {"w": rand(k, c, kh, kw, seed=1, scale=1 / np.sqrt(c * kh * kw)), "b": rand(k, seed=2, scale=0.1)})


def _layer_ends(tmp_path, shape: tuple[int, ...], drop: str | None) -> list[int]:
    """When each device layer of a conv (or Gemm) + ReLU model ends (cycles from the program's
    start), lowered by the default pipeline without `drop`. A linked program's report attributes
    cycles from one layer's marker to the next, so a layer that issues sooner hands its CUs' tail
    to the next layer: when a layer ends is what a pass must not delay."""
    import onnx

    from snowir.driver.model_api import run_model_on_device

    path = tmp_path / "layer.onnx"
    onnx.save(_model(shape), path)
    # as snowflake-lower configures them: unguarded (alone, each pass guards by default)
    passes = [f"{x}{{guard=false}}" if x in GUARDED else x for x in PIPELINE if x != drop]
    report = run_model_on_device(path, pipeline=",".join(passes)).report
    cycles = [layer["cycles"] for layer in report["layers"] if layer["op"] in ("conv2d", "dense")]
    return list(np.cumsum(cycles))


@pytest.mark.parametrize("drop", ["fill-delay-slots", "schedule-asm", "balance-loads"])
@pytest.mark.parametrize("shape", [CONV5, STEM, FC], ids=["conv5", "stem", "fc"])
def test_no_asm_pass_delays_a_layer(tmp_path, shape: tuple[int, ...], drop: str) -> None:
    """Regressions (issue 40). conv5: fill-delay-slots made the model slower, 360,823 cycles with
    it against 360,001 without. Filling slots shortened the code, so every later
    instruction-cache bank boundary moved and the bank load of the second part's main loop was
    requested behind its maps prefetch (1,661 more icache stall cycles than the slots saved).
    stem: 52,681 cycles with fill-delay-slots against 52,633 without (ZFNet's stem in
    bench/ablation.py: +43). Its loop is MAC-bound, so the filled slots saved nothing, while the
    no-ops placed before the loop's label (to keep later pcs) ran on every entry."""
    full, without = _layer_ends(tmp_path, shape, None), _layer_ends(tmp_path, shape, drop)
    assert len(full) == (2 if shape == CONV5 else 1)  # conv5: two channel parts, one program
    assert all(a <= b for a, b in zip(full, without)), f"with {drop}: layers end at {full}, without: {without}"


def test_fill_delay_slots_fills_a_loop_its_loads_pace(tmp_path) -> None:
    """Regression (issue 38): the stem's fix (a loop whose traces outlast its issue left
    unfilled) also left AlexNet's fc6-fc8 loops unfilled, whose MACs outlast the issue on paper
    (fc7: 433 CU cycles a pass against 195 issue cycles) but whose weight LDs pace every pass: a
    MAC waiting for its weights holds dispatch, and the issue after it, the slots' no-ops
    included, is then what the CUs wait for (fc7 2,185,694 cycles filled, 2,186,969 unfilled).
    A loop with an LD is filled again: the FC layer ends sooner with the pass than without it
    (137,291 cycles against 137,366), while the stem (no LD in its loop) is no slower."""
    (full,), (without,) = _layer_ends(tmp_path, FC, None), _layer_ends(tmp_path, FC, "fill-delay-slots")
    assert full < without, f"with fill-delay-slots: {full} cycles, without: {without}"


@pytest.mark.parametrize("name", ["schedule-asm", "fill-delay-slots"])
def test_passes_keep_the_pc_of_code_they_do_not_change(name: str) -> None:
    """A loop's slots filled or its no-ops dropped: the no-ops go before its label, so the code
    after the loop keeps its pc (icache-banking's bank boundaries do not move: the conv5 case)."""
    body = ["snowflake_asm.movi r1, 0", "snowflake_asm.movi r6, 0", "snowflake_asm.movi r7, 30",
            "snowflake_asm.label @loop", "snowflake_asm.addi r6, r6, 1", NOP, "snowflake_asm.addi r3, r6, 5",
            "snowflake_asm.movi r8, 1", "snowflake_asm.movi r9, 2", "snowflake_asm.addi r10, r8, 2",
            "snowflake_asm.ble r6, r7, @loop", *[NOP] * 4,
            "snowflake_asm.movi r3, 5", "snowflake_asm.label @after", "snowflake_asm.movi r4, 6"]
    before, after = _apply("\n".join(body), name)
    assert _shape(after) != _shape(before)  # the pass did change the loop

    def pcs(module) -> dict[str, int]:
        out, pc = {}, 0
        for op in _program(module).body.block.ops:
            if type(op) is sf.LabelOp:
                out[op.label.data] = pc
            else:
                out[str(op)] = pc
                pc += 1
        return out

    old, new = pcs(before), pcs(after)
    assert len(assemble(after).code) == len(assemble(before).code)
    for key in ("after", "snowflake_asm.movi r3, 5", "snowflake_asm.movi r4, 6"):
        assert new[key] == old[key], key
    _same_run("\n".join(body), name)


@pytest.mark.parametrize("name", ["balance-loads", "schedule-asm", "fill-delay-slots"])
def test_a_pass_after_link_segments_says_so(name: str, capsys) -> None:
    """Issue 40: an asm pass placed after link-segments did nothing, in silence (it skipped the
    linked segment programs). It now refuses in one line saying where it goes; the same after
    icache-banking."""
    from pathlib import Path

    from snowir.tools.snow_opt import main as snow_opt

    digits = str(Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx")
    lowered = "nn-prepare,nn-to-tile,tile-loop-order,allocate-dram,tile-to-asm,link-segments"
    assert snow_opt([digits, "-p", f"{lowered},{name}"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{name}: program @segment0.code is a segment" in err[0]
    assert f"run {name} before link-segments" in err[0]
    long = "\n".join([*(f"snowflake_asm.movi r1, {k}" for k in range(BANK + 100)), "snowflake_asm.movi r2, 1",
                      "snowflake_asm.movi r3, 0", *[NOP] * 3, "snowflake_asm.addi r3, r2, 1"])
    _, banked = _apply(long, "icache-banking")
    with pytest.raises(PassFailedException, match=f"^{name}: program @r loads its own instruction cache .*"
                       f"run {name} before icache-banking$"):
        _make(name).apply(api.context(), banked)


def test_icache_banking_requests_a_bank_load_after_the_data_loads_beside_it() -> None:
    """Regression (issue 40, ResNet-50's n54/n64/n74, 1x1 128->512 convs): a bank boundary fell
    inside a kernel tile's group of weight LDs, and schedule-asm's order of the group's scalars put
    the block's bank load before all three LDs; the bus serves requests in order, so the weights
    waited behind a block of code (912 cycles a layer, n74 ended 417 cycles later with
    schedule-asm than without). The bank load now goes after the weight LDs of its straight-line
    run, and the program runs faster than with the bank load first."""
    lds = [f"snowflake_asm.ld weights r{4 + k}, r0, r3 unit {k} to {k}" for k in range(3)]
    body = "\n".join([*(f"snowflake_asm.movi r1, {k}" for k in range(BANK - 1)), "snowflake_asm.movi r3, 1000",
                      *lds, *(f"snowflake_asm.movi r2, {k}" for k in range(BANK + 100))])  # a third block
    before, after = _apply(body, "icache-banking")
    ops = [op for op in _program(after).body.block.ops if type(op) is not sf.LabelOp]
    bank = next(k for k, op in enumerate(ops) if type(op) is sf.LdOp and op.target.data == sf.LoadTarget.ICACHE)
    data = [k for k, op in enumerate(ops) if type(op) is sf.LdOp and op.target.data != sf.LoadTarget.ICACHE]
    assert bank > max(data) and bank < 2 * BANK
    first = after.clone()  # the same layout with the bank load first, as before the fix
    prog = _program(first)
    moved = [op for op in prog.body.block.ops if type(op) is sf.LdOp and op.target.data == sf.LoadTarget.ICACHE][0]
    moved.detach()
    prog.body.block.insert_op_before(moved, next(op for op in prog.body.block.ops if type(op) is sf.LdOp))
    x = np.zeros(INPUT, np.int16)
    ref = run_image(assemble(before), WHOLE, "fast", {"x": x})
    new = run_image(assemble(after), DEFAULT, "fast", {"x": x})
    old = run_image(assemble(first), DEFAULT, "fast", {"x": x})
    assert new.machine.state.regs[:30] == ref.machine.state.regs[:30]
    assert new.cycles < old.cycles, (new.cycles, old.cycles)
