"""One source of truth for hardware parameters: no module outside snowir/hw.py spells a
hardware size as a literal (numbers in code, not in comments or docstrings)."""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

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


def _literals():
    for folder in ("snowir", "passes", "dialects"):  # tools/ builds models: 4096 there is an FC width
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == "snowir/hw.py":
                continue
            for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
                if tok.type == tokenize.NUMBER:
                    yield rel, tok.start[0], tok.string


def test_no_hardware_literals_outside_hw_py():
    found = [f"{rel}:{line}: {text}" for rel, line, text in _literals()
             if text in HARDWARE and (rel, text) not in ALLOWED]
    assert not found, "hardware sizes belong in snowir/hw.py:\n" + "\n".join(found)


def test_the_check_sees_literals_not_comments():
    sample = "x = 4096  # 8192\n"
    nums = [t.string for t in tokenize.generate_tokens(io.StringIO(sample).readline) if t.type == tokenize.NUMBER]
    assert nums == ["4096"]
