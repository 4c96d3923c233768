"""
docs/tutorial.md section 7 ("Add an instruction") executed: its Python blocks run in order (one
namespace) and print what the section quotes; the instruction it adds at run time is gone after.
"""

from __future__ import annotations

from snowir.dialects import snowflake_asm as sf
from snowir.dialects.snowflake_asm import isa
from tests.tutorial_util import tutorial_blocks


def _blocks(lang: str) -> list[str]:
    return tutorial_blocks(lang, 7)


def test_add_an_instruction_runs_and_prints_what_it_quotes(capsys) -> None:
    before = (sorted(isa.ISA.by_mnemonic), len(sf.INSTRUCTIONS))
    namespace: dict = {"__name__": "tutorial_section_7"}
    for i, block in enumerate(_blocks("python")):
        exec(compile(block, f"docs/tutorial.md section 7 block {i + 1}", "exec"), namespace)
    printed = capsys.readouterr().out
    (quoted,) = _blocks("text")
    assert printed == quoted, f"docs/tutorial.md section 7 quotes other output than its code prints:\n{printed}"
    assert (sorted(isa.ISA.by_mnemonic), len(sf.INSTRUCTIONS)) == before
    assert "xor" not in isa.markdown()
