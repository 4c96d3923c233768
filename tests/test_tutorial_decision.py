"""
docs/tutorial.md section 8 ("Add a decision") executed: its declaration and generator blocks are
the repository's text, its code runs (the digits CNN with conv2's `prefetch_after` edited through
its declaration, each run checked bit-exact against the golden model) and prints what the
section quotes, and the edit is followed: the cycles move with the value.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from tests.tutorial_util import tutorial_blocks

ROOT = Path(__file__).resolve().parent.parent


def _blocks(lang: str) -> list[str]:
    return tutorial_blocks(lang, 8)


def test_the_declaration_and_the_generator_line_are_the_repositorys() -> None:
    declaration, generator, _ = _blocks("python")
    assert declaration in (ROOT / "dialects" / "tile" / "decisions.py").read_text()
    assert generator in (ROOT / "snowir" / "codegen" / "pixels.py").read_text()


def test_the_section_runs_and_prints_what_it_quotes(monkeypatch: pytest.MonkeyPatch) -> None:
    *_, code = _blocks("python")
    (quoted,) = _blocks("text")
    monkeypatch.chdir(ROOT)  # the model path in the block is the repository's
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/tutorial.md section 8", "exec"), {"__name__": "tutorial_section_8"})
    printed = out.getvalue().splitlines()
    assert printed == quoted.splitlines(), "section 8 quotes other lines than its code prints:\n" + out.getvalue()
    cycles = [int(m.group(1).replace(",", "")) for m in (re.search(r"conv2 ([\d,]+) cycles", line)
                                                         for line in printed) if m]
    assert len(set(cycles)) == len(cycles) == 3, cycles  # the edit is followed: every value its own code
