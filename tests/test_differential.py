"""The fast and the reference engine: identical outputs, state, cycles and stalls."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from machine_util import assert_same
from snowir import api
from snowir.machine.image import assemble
from snowir.machine.run import run_image
from snowir.machine.state import MachineFault
from snowir.tools.asm_kernels import conv3x3, scalar_loop

SEG = "snowflake_asm.segment input @x at 0 size 8192\nsnowflake_asm.segment output @y at 8192 size 8192\n"
_LABELS = itertools.count()
LOW = st.integers(0, 8)  # registers random code may touch; r9/r10 are loop counters


@st.composite
def random_body(draw, depth: int = 0) -> list[str]:
    lines: list[str] = []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["movi", "alu", "alui", "mov", "mac", "max", "vmov", "ld", "loop", "skip"]
                                    if depth < 2 else ["movi", "alu", "alui", "mov", "mac", "ld"]))
        r = lambda: f"r{draw(LOW)}"
        if kind == "movi":
            lines.append(f"snowflake_asm.movi {r()}, {draw(st.integers(-64, 4000))}")
        elif kind == "alu":
            lines.append(f"snowflake_asm.{draw(st.sampled_from(['add', 'mul']))} {r()}, {r()}, {r()}")
        elif kind == "alui":
            lines.append(f"snowflake_asm.{draw(st.sampled_from(['addi', 'muli']))} {r()}, {r()}, {draw(st.integers(-300, 300))}")
        elif kind == "mov":
            lines.append(f"snowflake_asm.mov {r()}, {r()} shl {draw(st.integers(0, 3))}")
        elif kind == "mac":
            wb = draw(st.booleans())
            mode = draw(st.sampled_from(["coop", "indp"]))
            lines.append(f"snowflake_asm.movi r7, {draw(st.sampled_from([8192, 8256, 9000]))}")
            lines.append(f"snowflake_asm.mac {mode} r7, {r()}, {r()} trace {draw(st.integers(1, 64))}{' wb' if wb else ''}")
        elif kind == "max":
            lines.append(f"snowflake_asm.max r7, {r()}, {r()} trace {draw(st.integers(1, 8))}{' wb' if draw(st.booleans()) else ''}")
        elif kind == "vmov":
            lines.append(f"snowflake_asm.vmov {draw(st.sampled_from(['coop', 'indp']))} "
                         f"{draw(st.sampled_from(['bias', 'bypass', 'mask', 'stride', 'shift']))} {r()}")
        elif kind == "ld":
            lines.append(f"snowflake_asm.movi r8, {draw(st.integers(1, 300))}")
            target = draw(st.sampled_from(["maps", "weights"]))
            select = draw(st.sampled_from([0, 3, "all"] if target == "maps" else [0, 5, 17, "all"]))
            lines.append(f"snowflake_asm.ld {target} {r()}, {r()}, r8 unit {draw(st.integers(0, 3))} to {select}")
        elif kind == "loop":
            counter = 9 + depth
            label = f"loop{next(_LABELS)}"
            lines += [f"snowflake_asm.movi r{counter}, {draw(st.integers(0, 4))}", f"snowflake_asm.label @{label}"]
            lines += draw(random_body(depth + 1))
            lines += [f"snowflake_asm.addi r{counter}, r{counter}, -1",
                      f"snowflake_asm.bgt r{counter}, r0, @{label}"]
            lines += ["snowflake_asm.mov r0, r0"] * 4
        elif kind == "skip":
            label = f"skip{next(_LABELS)}"
            lines.append(f"snowflake_asm.beq {r()}, {r()}, @{label}")
            lines += ["snowflake_asm.mov r0, r0"] * 4
            lines += draw(random_body(depth + 1))
            lines.append(f"snowflake_asm.label @{label}")
    return lines


def _run(engine: str, image, module, x: np.ndarray):
    try:
        return run_image(image, engine=engine, inputs={"x": x}, module=module, max_instructions=20_000), None
    except MachineFault as fault:
        return None, (fault.pc, fault.message)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_body(), st.integers(0, 2**32 - 1))
def test_random_programs_agree(lines: list[str], seed: int) -> None:
    text = SEG + "snowflake_asm.program @r {\n" + "\n".join(lines) + "\n}\n"
    module = api.parse_text(text)
    module.verify()
    image = assemble(module)
    x = np.random.default_rng(seed).integers(-512, 512, 4096).astype(np.int16)
    ref, ref_fault = _run("reference", image, module, x)
    fast, fast_fault = _run("fast", image, None, x)
    assert ref_fault == fast_fault
    if ref is not None:
        assert_same(ref, fast)
        assert all(np.array_equal(ref.outputs[k], fast.outputs[k]) for k in ref.outputs)


@pytest.mark.parametrize("h, w", [(5, 6), (8, 8)])
def test_conv_layer_bit_exact_on_both_engines(h: int, w: int) -> None:
    kernel = conv3x3(h, w, seed=h * w)
    module = api.parse_text(kernel.text)
    image = assemble(module)
    ref = run_image(image, engine="reference", inputs=kernel.inputs, module=module)
    fast = run_image(image, engine="fast", inputs=kernel.inputs)
    assert_same(ref, fast)
    assert np.array_equal(fast.outputs["y"], kernel.expected["y"])
    assert fast.timing.macs == (h - 2) * (w - 2) * 3 * 48 * 16


def test_scalar_loop_agrees() -> None:
    kernel = scalar_loop(300)
    module = api.parse_text(kernel.text)
    image = assemble(module)
    ref = run_image(image, engine="reference", inputs={}, module=module)
    fast = run_image(image, engine="fast", inputs={})
    assert_same(ref, fast)
    assert fast.machine.state.regs[1] == 300 and fast.machine.dynamic == 4 + 9 * 300


# ---------------------------------------------------------------- deferred MACs (mac_batch.py)
def _mac_program(body: list[str]) -> tuple:
    setup = ["snowflake_asm.movi r1, 0", "snowflake_asm.movi r2, 4096",
             "snowflake_asm.ld maps r0, r1, r2 unit 0 to all",
             "snowflake_asm.ld weights r0, r1, r2 unit 1 to all"]
    text = SEG + "snowflake_asm.program @d {\n" + "\n".join(setup + body) + "\n}\n"
    module = api.parse_text(text)
    module.verify()
    return assemble(module), module


def _loop(label: str, count: int, body: list[str]) -> list[str]:
    return ([f"snowflake_asm.movi r9, {count}", f"snowflake_asm.label @{label}"] + body
            + ["snowflake_asm.addi r9, r9, -1", f"snowflake_asm.bgt r9, r0, @{label}"]
            + ["snowflake_asm.mov r0, r0"] * 4)


def test_deferred_macs_mixed_runs_agree() -> None:
    """COOP and INDP MACs, traces and weights addresses varying, partial sums across a
    VMOV, write-backs landing on one another: the batch equals the one-by-one engine."""
    body = ["snowflake_asm.movi r3, 8192", "snowflake_asm.movi r4, 0", "snowflake_asm.movi r5, 16"]
    body += _loop("a", 37, ["snowflake_asm.mac coop r3, r4, r5 trace 40",
                            "snowflake_asm.mac coop r3, r5, r4 trace 33 wb relu",
                            "snowflake_asm.addi r4, r4, 3", "snowflake_asm.addi r3, r3, 6"])
    body += ["snowflake_asm.mac indp r3, r4, r5 trace 9", "snowflake_asm.movi r6, 9",
             "snowflake_asm.vmov coop shift r6", "snowflake_asm.mac indp r3, r4, r5 trace 7 wb"]
    body += _loop("b", 20, ["snowflake_asm.mac coop r3, r4, r0 trace 64 wb",
                            "snowflake_asm.addi r4, r4, 1"])  # every write-back to one address
    body += ["snowflake_asm.mac coop r3, r4, r5 trace 5"]  # left in the accumulator at the end
    image, module = _mac_program(body)
    x = np.random.default_rng(7).integers(-3000, 3000, 4096).astype(np.int16)
    ref, ref_fault = _run("reference", image, module, x)
    fast, fast_fault = _run("fast", image, None, x)
    assert ref_fault is None and fast_fault is None
    assert_same(ref, fast)
    assert np.array_equal(ref.machine.state.acc, fast.machine.state.acc)
    assert ref.machine.state.acc.any()  # the trailing partial sum is really there
    assert fast.machine.state.saturated > 0  # counted alike by both (assert_same): write-backs do clip here


@pytest.mark.parametrize("then", ["mac coop r3, r10, r0 trace 1000", "ld maps r0, r0, r0 unit 0 to all"])
def test_deferred_overflow_is_the_first_fault(then: str) -> None:
    """An accumulator overflow found at the flush is reported at its write-back MAC, not at a
    later instruction with a fault of its own."""
    body = ["snowflake_asm.movi r3, 8192", "snowflake_asm.movi r10, 1000000"]
    body += _loop("a", 3, ["snowflake_asm.mac coop r3, r0, r0 trace 64 wb", "snowflake_asm.addi r3, r3, 8"])
    body += _loop("b", 200, ["snowflake_asm.mac coop r3, r0, r0 trace 1000"])
    body += ["snowflake_asm.mac coop r3, r0, r0 trace 1 wb", f"snowflake_asm.{then}"]
    image, module = _mac_program(body)
    x = np.full(4096, 32767, np.int16)
    ref, ref_fault = _run("reference", image, module, x)
    fast, fast_fault = _run("fast", image, None, x)
    assert ref_fault is not None and ref_fault == fast_fault
    assert "accumulator overflow" in ref_fault[1]


# ---------------------------------------------------------------- steady loops (steady.py)
def _both(body: list[str], seed: int = 3):
    image, module = _mac_program(body)
    x = np.random.default_rng(seed).integers(-3000, 3000, 4096).astype(np.int16)
    ref, ref_fault = _run("reference", image, module, x)
    fast, fast_fault = _run("fast", image, None, x)
    assert ref_fault is None and fast_fault is None, (ref_fault, fast_fault)
    assert_same(ref, fast)
    assert all(np.array_equal(ref.outputs[k], fast.outputs[k]) for k in ref.outputs)
    return fast


STEADY_LOOPS = {
    # a pixel loop: a MAC per kernel row, write-back on the last, addresses stepping
    "coop pixels": ["snowflake_asm.movi r3, 8192", "snowflake_asm.movi r4, 0", "snowflake_asm.movi r5, 64",
                    *_loop("p", 300, ["snowflake_asm.mac coop r3, r4, r5 trace 48",
                                      "snowflake_asm.mac coop r3, r4, r5 trace 48 wb relu",
                                      "snowflake_asm.addi r4, r4, 7", "snowflake_asm.addi r3, r3, 8"])],
    # a residual conv's pixel: bypass VMOV then MAC, counted up with BLE
    "bypass, counted up": ["snowflake_asm.movi r3, 8192", "snowflake_asm.movi r4, 16", "snowflake_asm.movi r6, 1",
                           "snowflake_asm.movi r7, 250", "snowflake_asm.label @q",
                           "snowflake_asm.vmov coop bypass r4", "snowflake_asm.mac coop r3, r4, r0 trace 24 wb",
                           "snowflake_asm.addi r6, r6, 1", "snowflake_asm.addi r4, r4, 5",
                           "snowflake_asm.ble r6, r7, @q", "snowflake_asm.addi r3, r3, 8",
                           *["snowflake_asm.mov r0, r0"] * 3],
    # short traces: the write-backs, not the CUs, set the pace
    "bus-bound write-backs": ["snowflake_asm.movi r3, 8192", *_loop("w", 400, [
        "snowflake_asm.mac coop r3, r0, r0 trace 2 wb", "snowflake_asm.addi r3, r3, 8"])],
    # INDP write-backs of 256 words share the bus with each other
    "indp": ["snowflake_asm.movi r3, 8192", "snowflake_asm.movi r4, 0", *_loop("i", 120, [
        "snowflake_asm.mac indp r3, r4, r0 trace 9 wb", "snowflake_asm.addi r4, r4, 1"])],
    # pool rows: MAX with write-back
    "max": ["snowflake_asm.movi r3, 8192", "snowflake_asm.movi r4, 0", "snowflake_asm.movi r5, 64", *_loop("m", 200, [
        "snowflake_asm.max r3, r4, r5 trace 3 wb", "snowflake_asm.addi r4, r4, 16", "snowflake_asm.addi r3, r3, 8"])],
}


@pytest.mark.parametrize("name", STEADY_LOOPS)
def test_steady_loops_agree_with_stepping(name: str) -> None:
    """Loops timed in closed form once periodic: outputs, cycles, stalls, bus bytes and when
    every DRAM page was last written are the reference engine's."""
    fast = _both(STEADY_LOOPS[name])
    if name in ("coop pixels", "bypass, counted up", "max"):
        assert fast.machine.steady_iterations > 100  # the closed form was really used


def test_steady_loop_waits_out_a_load_landing_mid_loop() -> None:
    """An LD still landing when the loop starts (a prefetch) keeps the state from being
    periodic until it has landed; the loop's MACs that read its region wait for it."""
    body = ["snowflake_asm.movi r3, 8192", "snowflake_asm.movi r4, 0", "snowflake_asm.movi r11, 30000",
            "snowflake_asm.movi r12, 0", "snowflake_asm.movi r13, 3000",
            "snowflake_asm.ld maps r11, r12, r13 unit 2 to all"]
    body += _loop("l", 500, ["snowflake_asm.mac coop r3, r4, r0 trace 32 wb", "snowflake_asm.addi r4, r4, 64",
                             "snowflake_asm.addi r3, r3, 8"])
    fast = _both(body)
    assert fast.machine.steady_iterations > 0 and fast.timing.stalls["load_wait"] > 0


def test_steady_loop_respects_the_instruction_limit() -> None:
    image, module = _mac_program(STEADY_LOOPS["coop pixels"])
    x = np.zeros(4096, np.int16)
    for engine, mod in (("reference", module), ("fast", None)):
        with pytest.raises(MachineFault, match="instruction limit 2000"):
            run_image(image, engine=engine, inputs={"x": x}, module=mod, max_instructions=2000)


STEADY_TRIES = 8
"""Random loops drawn per seed until one is timed in closed form (about one in six is not:
an LD landing through the whole loop, write-backs sharing the bus at fractional cycles, a
period longer than one iteration); each drawn loop is compared either way."""


def _random_steady_loop(rng: np.random.Generator) -> list[str]:
    """A random pixel loop: MAC / MAX / VMOV bias|bypass mixes (at least one MAC or MAX: a loop of
    VMOVs alone is not a block steady.py times), traces from write-back-bound to CU-bound, address
    steps, trip counts, BGT or BLE, an LD landing or not."""
    i = lambda lo, hi: int(rng.integers(lo, hi + 1))  # noqa: E731
    body = ["snowflake_asm.movi r3, 8192", f"snowflake_asm.movi r4, {i(0, 2000)}", f"snowflake_asm.movi r5, {i(0, 200)}",
            f"snowflake_asm.movi r6, {i(0, 500)}"]
    if rng.random() < 0.4:  # a prefetch still landing when the loop starts
        body += [f"snowflake_asm.movi r11, {i(40000, 60000)}", "snowflake_asm.movi r12, 0",
                 f"snowflake_asm.movi r13, {i(100, 4000)}", f"snowflake_asm.ld maps r11, r12, r13 unit {i(0, 3)} to all"]
    ops = []
    for n in range(i(1, 4)):
        kind = rng.choice(["mac", "max"] if n == 0 else ["mac", "mac", "max", "bias", "bypass"])
        if kind == "mac":
            indp = rng.random() < 0.25
            trace = i(1, 20) if indp else i(1, 200)
            wb = " wb" if rng.random() < 0.6 else ""
            ops.append(f"snowflake_asm.mac {'indp' if indp else 'coop'} r3, r4, r5 trace {trace}{wb}")
        elif kind == "max":
            ops.append(f"snowflake_asm.max r3, r4, r6 trace {i(1, 4)}{rng.choice(['', ' wb'])}")
        else:
            ops.append(f"snowflake_asm.vmov coop {kind} r{5 if kind == 'bias' else 4}")
    rng.shuffle(ops)
    steps = [f"snowflake_asm.addi r4, r4, {i(0, 40)}", f"snowflake_asm.addi r3, r3, {2 * i(0, 40)}"]
    count = i(20, 300)
    if rng.random() < 0.5:
        return body + _loop("s", count, ops + steps)
    return body + ["snowflake_asm.movi r9, 1", f"snowflake_asm.movi r10, {count}", "snowflake_asm.label @s", *ops,
                   "snowflake_asm.addi r9, r9, 1", steps[0], "snowflake_asm.ble r9, r10, @s", steps[1],
                   *["snowflake_asm.mov r0, r0"] * 3]


def _closed_form_loop(seed: int) -> int | None:
    """The number of the first of the seed's random loops the fast engine timed in closed form
    (all of them drawn so far agreeing with the reference engine), None if none of STEADY_TRIES."""
    rng = np.random.default_rng(seed)
    for attempt in range(STEADY_TRIES):
        if _both(_random_steady_loop(rng), seed).machine.steady_iterations > 0:
            return attempt
    return None


@pytest.mark.parametrize("seed", range(40))
def test_random_steady_loops_agree(seed: int) -> None:
    """Random pixel loops: stepping and the closed form agree on everything the reference engine
    computes, and the closed form really ran (issue 40: a third of the loops drawn before never
    reached it, so the test could pass with steady.py switched off)."""
    assert _closed_form_loop(seed) is not None, f"none of {STEADY_TRIES} random loops was timed in closed form"


def test_random_steady_loops_need_the_closed_form(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above is not vacuous: with the steady-state watcher never looking, it fails."""
    from snowir.machine import steady

    monkeypatch.setattr(steady, "WATCH", 0)
    assert _closed_form_loop(0) is None
