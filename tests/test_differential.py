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
            select = draw(st.sampled_from([0, 3, 31] if target == "maps" else [0, 5, 17, 31]))
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
