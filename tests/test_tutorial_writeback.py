"""
docs/tutorial.md section 9 ("Add a write-back unit") executed: its Python blocks run in order (one
namespace) and print what the section quotes. The toy unit it registers goes through every
consumer of the write-back unit registry (nn-prepare, the conv's shape and tile-to-asm, both
engines, the golden model, the write-back timing, the DSE), so a consumer that ignored the
registry would print otherwise; the unit and its VMOV select are gone after.
"""

from __future__ import annotations

from pathlib import Path

from snowir import writeback
from snowir.dialects import snowflake_asm as sf
from snowir.dialects.snowflake_asm import isa
from tests.tutorial_util import tutorial_blocks

ROOT = Path(__file__).resolve().parent.parent


def _blocks(lang: str) -> list[str]:
    return tutorial_blocks(lang, 9)


def test_add_a_write_back_unit_runs_and_prints_what_it_quotes(capsys, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)  # the blocks read examples/ and the library by relative path
    before = ([u.name for u in writeback.units()], list(sf.VmovSelect), isa.ISA["vmov"])
    namespace: dict = {"__name__": "tutorial_section_9"}
    for i, block in enumerate(_blocks("python")):
        # dont_inherit: not this file's `from __future__ import annotations` (the block's dataclass
        # would then need its module in sys.modules), as a reader running the blocks has it
        exec(compile(block, f"docs/tutorial.md section 9 block {i + 1}", "exec", dont_inherit=True), namespace)
    printed = capsys.readouterr().out
    (quoted,) = _blocks("text")
    assert printed == quoted, f"docs/tutorial.md section 9 quotes other output than its code prints:\n{printed}"
    # what the quote must say, so an edit of the doc cannot weaken the check
    assert quoted.count("golden bit-exact: True") == 3 and "'abs0'" not in quoted.split("with it:")[1]
    assert "2 programs set the unit's word" in quoted and "'abs_unit': 16.0" in quoted
    assert "abs  fast      y[0] = 320, 92 cycles" in quoted and "none fast      y[0] = -320, 91 cycles" in quoted
    assert ([u.name for u in writeback.units()], list(sf.VmovSelect), isa.ISA["vmov"]) == before
