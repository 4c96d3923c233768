"""One source of truth for hardware parameters: no module outside snowir/hw.py spells a
hardware size as a literal (numbers in code, not in comments or docstrings).

Two checks: the ZC706 build's sizes (a fixed list) anywhere in the tree, and, in the planning
and code-generation modules, any literal equal to a value SnowflakeConfig() has (its fields and
derived properties, read from hw.py, so a new field is covered too) of at least 16: a lane
count, a queue depth, a buffer size there comes from `hw` (issue 40: the fixed list let
plan/pool.py's 16-lane constants pass). Smaller values (1, 2, 4, ...) are everywhere as plain
counts and are not checked."""

from __future__ import annotations

import dataclasses
import io
import tokenize
from collections.abc import Iterator
from pathlib import Path

from snowir.hw import DEFAULT, SnowflakeConfig

ROOT = Path(__file__).parent.parent
# sizes and rates of the ZC706 build: buffer words/bytes, bank sizes, trace and icache limits, clock, bandwidth
HARDWARE = {"4096", "4080", "2048", "8192", "16384", "32768", "65536", "1023", "1024", "512", "250", "250.0",
            "4.2", "8.4", "666", "666.0"}
ALLOWED = {
    ("passes/asm/balance_loads.py", "512"): "the split option's default: a tuning knob in elements, not hardware",
    ("snowir/api.py", "32768"): "int16 range of raw input words",
    ("snowir/golden.py", "32768.0"): "Q1.15 reciprocal of an average's count",
    ("snowir/host_model.py", "666.0"): "the host CPU's clock, in HostCPU (the host is not Snowflake)",
}


def _literals(folders=("snowir", "passes", "dialects")):  # tools/ builds models: 4096 there is an FC width
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == "snowir/hw.py":
                continue
            for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
                if tok.type == tokenize.NUMBER:
                    yield rel, tok.start[0], tok.string


# -------------------------------------------------------------- values of SnowflakeConfig()
PLANNING = ("snowir/plan", "snowir/codegen")
SMALLEST = 16
HW_ALLOWED = {
    ("snowir/plan/shapes.py", "256"): "ALIGN: bytes between a program image's DRAM regions (a layout choice)",
}


def hardware_values(hw: SnowflakeConfig = DEFAULT) -> dict[float, list[str]]:
    """{value: names} of the configuration's fields and derived properties, values >= SMALLEST."""
    names = [f.name for f in dataclasses.fields(hw)]
    names += [n for n, v in vars(SnowflakeConfig).items() if isinstance(v, property)]
    values: dict[float, list[str]] = {}
    for name in names:
        value = getattr(hw, name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= SMALLEST:
            values.setdefault(value, []).append(name)
    return values


def planning_literals(source: str) -> Iterator[tuple[int, str]]:
    """(line, literal) of the numbers in `source` that may be hardware sizes: not a shift count
    (`1 << 16`: an encoding's field width) nor a register number (`R_X, R_Y = 4, 16`)."""
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
              if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)]
    lines = source.splitlines()
    for i, tok in enumerate(tokens):
        if tok.type != tokenize.NUMBER:
            continue
        if i and tokens[i - 1].string == "<<":
            continue
        if lines[tok.start[0] - 1].lstrip().startswith("R_"):
            continue
        yield tok.start[0], tok.string


def _planning_hardware_literals() -> list[str]:
    values = hardware_values()
    found = []
    for folder in PLANNING:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for line, text in planning_literals(path.read_text()):
                names = values.get(float(text) if "." in text else int(text, 0))
                if names and (rel, text) not in HW_ALLOWED:
                    found.append(f"{rel}:{line}: {text} (hw.{' / hw.'.join(names)}?)")
    return found


def test_no_hardware_literals_outside_hw_py():
    found = [f"{rel}:{line}: {text}" for rel, line, text in _literals()
             if text in HARDWARE and (rel, text) not in ALLOWED]
    assert not found, "hardware sizes belong in snowir/hw.py:\n" + "\n".join(found)


def test_the_check_sees_literals_not_comments():
    sample = "x = 4096  # 8192\n"
    nums = [t.string for t in tokenize.generate_tokens(io.StringIO(sample).readline) if t.type == tokenize.NUMBER]
    assert nums == ["4096"]


def test_no_hardware_values_in_planning_and_codegen():
    found = _planning_hardware_literals()
    assert not found, "hardware values come from `hw` (or hw.DEFAULT) in plan/ and codegen/:\n" + "\n".join(found)


def test_the_planning_check_finds_lane_counts():
    """What it looks for: the lanes, vector queue depth and buffer sizes of the default machine,
    spelled as literals; what it leaves: shift counts and register numbers."""
    values = hardware_values()
    assert "lanes" in values[16] and "vector_queue_depth" in values[16]
    assert "weights_buffer_elements" in values[4096]
    sample = ("def f(p, hw):\n"
              "    R_A, R_B = 4, 16\n"
              "    limit = 1 << 16  # 16 in a comment\n"
              "    return p.c % 16 + hw.cus * 4096\n")
    assert list(planning_literals(sample)) == [(3, "1"), (4, "16"), (4, "4096")]
