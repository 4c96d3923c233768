"""
Developer utility: regenerate the instruction table of docs/isa.md from the ISA records
(dialects/snowflake_asm/isa.py), so the reference cannot drift from the encoder and the engines
(tests/test_isa.py fails when it has).  Run: python tools/gen_isa_docs.py
"""

from __future__ import annotations

from pathlib import Path

from snowir.dialects.snowflake_asm.isa import with_table

DOC = Path(__file__).resolve().parent.parent / "docs" / "isa.md"


def main() -> None:
    DOC.write_text(with_table(DOC.read_text()))


if __name__ == "__main__":
    main()
