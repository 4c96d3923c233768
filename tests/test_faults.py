"""Machine faults: a broken hardware rule is a one-line error naming the PC and instruction, rc != 0."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from machine_util import movi
from snowir.tools.snow_run import main as snow_run

NOP = "snowflake_asm.mov r0, r0"
SEG = "snowflake_asm.segment input @x at 0 size 4096\nsnowflake_asm.segment output @y at 4096 size 64"

CASES = {
    "maps buffer overflow": (
        [movi(1, 65530), "snowflake_asm.mac coop r0, r1, r0 trace 16"],
        "pc 1 (snowflake_asm.mac coop r0, r1, r0 trace 16): MAC maps-buffer range [65530, +16) outside [0, 65536)"),
    "weights buffer overflow": (
        [movi(1, 4000), "snowflake_asm.mac indp r0, r0, r1 trace 10"],
        "weights-buffer range [4000, +160) outside [0, 4096)"),
    "dram out of range": (
        [movi(1, 4194000), "snowflake_asm.mov r1, r1 shl 8", movi(2, 16), "snowflake_asm.ld maps r0, r1, r2 unit 0 to 0"],
        "pc 3 (snowflake_asm.ld maps r0, r1, r2 unit 0 to 0): LD DRAM range"),
    "unaligned dram": (
        [movi(1, 3), movi(2, 4), "snowflake_asm.ld maps r0, r1, r2 unit 0 to 0"],
        "LD DRAM address 0x3 is not 16-bit aligned"),
    "write-back outside dram": (
        [movi(1, -64), "snowflake_asm.mac coop r1, r0, r0 trace 16 wb"],
        "MAC write-back"),
    "branch in delay slot": (
        ["snowflake_asm.label @a", "snowflake_asm.beq r0, r1, @a", "snowflake_asm.beq r0, r1, @a", NOP, NOP, NOP, NOP],
        "branch in a branch delay slot"),
    "two raw pairs in delay slots": (
        ["snowflake_asm.label @a", "snowflake_asm.beq r0, r1, @a", movi(1, 1), "snowflake_asm.addi r2, r1, 1",
         "snowflake_asm.addi r3, r2, 1", NOP],
        "more than one RAW-dependent pair in the branch delay slots"),
    "program ends in delay slots": (
        ["snowflake_asm.label @a", "snowflake_asm.beq r0, r1, @a", NOP],
        "the program ends inside branch delay slots"),
    "load unit the machine lacks": (
        [movi(2, 16), "snowflake_asm.ld maps r0, r0, r2 unit 5 to all"],
        "LD on load unit 5: the machine has 4 load units"),
    "zero-length load": (
        ["snowflake_asm.ld weights r0, r0, r0 unit 1 to all"], "LD of length 0"),
    "load overwrites a region still being read": (
        [movi(1, 0), movi(2, 2000), movi(3, 500), "snowflake_asm.ld maps r0, r1, r2 unit 0 to all",
         "snowflake_asm.mac coop r0, r0, r0 trace 1000", "snowflake_asm.ld maps r3, r1, r2 unit 1 to all"],
        "LD overwrites the maps buffer of CU 0 [500, 2500) while an earlier vector op still reads [0, 1000)"),
    "accumulator overflow": (
        [movi(1, 32767), movi(9, 0), movi(8, 140), "snowflake_asm.label @l",
         "snowflake_asm.mac coop r0, r0, r0 trace 1023", "snowflake_asm.addi r9, r9, 1",
         "snowflake_asm.ble r9, r8, @l", NOP, NOP, NOP, NOP,
         "snowflake_asm.mac coop r0, r0, r0 trace 1 wb"],
        None),
}


def _write(tmp_path: Path, body: list[str]) -> Path:
    path = tmp_path / "prog.mlir"
    path.write_text(SEG + "\nsnowflake_asm.program @p {\n" + "\n".join(body) + "\n}\n")
    return path


@pytest.mark.parametrize("engine", ["fast", "reference"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_fault(tmp_path: Path, capsys, case: str, engine: str) -> None:
    body, message = CASES[case]
    if case == "accumulator overflow":
        return _accumulator_overflow(tmp_path, capsys, engine)
    rc = snow_run([str(_write(tmp_path, body)), "--engine", engine, "--quiet", "--report", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "machine fault at pc" in err and message in err
    assert not (tmp_path / "r.json").exists()


def _accumulator_overflow(tmp_path: Path, capsys, engine: str) -> None:
    # maps and weights all 32767: each COOP trace of 1023 adds 1023 * 32767^2 ~ 2^39.9;
    # 141 traces exceed the 48-bit accumulator (2^47) before the write-back.
    x = np.full(2048, 32767, np.int16)
    np.save(tmp_path / "x.npy", x)
    body = [movi(1, 0), movi(2, 2048), "snowflake_asm.ld maps r0, r1, r2 unit 0 to all",
            "snowflake_asm.ld weights r0, r1, r2 unit 1 to all",
            movi(9, 0), movi(8, 140), "snowflake_asm.label @l",
            "snowflake_asm.mac coop r0, r0, r0 trace 1023", "snowflake_asm.addi r9, r9, 1", NOP, NOP,
            "snowflake_asm.ble r9, r8, @l", NOP, NOP, NOP, NOP,
            movi(3, 4096), "snowflake_asm.mac coop r3, r0, r0 trace 1 wb"]
    rc = snow_run([str(_write(tmp_path, body)), "--engine", engine, "--quiet", "--input", str(tmp_path / "x.npy")])
    err = capsys.readouterr().err
    assert rc == 1 and "48-bit accumulator overflow" in err and err.count("\n") == 1


def test_branch_across_banks(tmp_path: Path, capsys) -> None:
    body = ["snowflake_asm.label @top"] + [NOP] * 600 + ["snowflake_asm.beq r0, r0, @top", NOP, NOP, NOP, NOP]
    rc = snow_run([str(_write(tmp_path, body)), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 1 and "pc 600" in err and "outside the instruction-cache bank [512, 605)" in err


def test_fetch_outside_cache(tmp_path: Path, capsys) -> None:
    rc = snow_run([str(_write(tmp_path, [NOP] * 1030)), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 1 and "machine fault at pc 1024" in err and "no instruction-cache bank" in err


def test_icache_load_into_executing_bank(tmp_path: Path, capsys) -> None:
    body = [movi(1, 8192), movi(2, 4), "snowflake_asm.ld icache r0, r1, r2 unit 0 to 0"] + [NOP] * 1030
    rc = snow_run([str(_write(tmp_path, body)), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 1 and "pc 2" in err and "holds the executing code" in err


def test_illegal_opcode_in_image(tmp_path: Path, capsys) -> None:
    from snowir.machine.image import ProgramImage

    image = ProgramImage("p", 8, np.array([0x10800001, 0xE0000000], np.uint32), 0, [])
    path = tmp_path / "bad.sfb"
    path.write_bytes(image.to_bytes())
    rc = snow_run([str(path), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 1 and "pc 1: word 0xe0000000 has illegal opcode 14" in err and err.count("\n") == 1


def test_endless_loop_is_bounded() -> None:
    from machine_util import program
    from snowir.machine.run import run_image
    from snowir.machine.state import MachineFault

    image, module = program("snowflake_asm.label @l\nsnowflake_asm.beq r0, r0, @l\n" + "\n".join([NOP] * 4))
    for engine in ("fast", "reference"):
        with pytest.raises(MachineFault, match="instruction limit"):
            run_image(image, engine=engine, inputs={}, module=module, max_instructions=10_000)
