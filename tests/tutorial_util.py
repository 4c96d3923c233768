"""docs/tutorial.md's fenced blocks, for the tests that run its sections."""

from __future__ import annotations

import re
from pathlib import Path

TUTORIAL = Path(__file__).resolve().parent.parent / "docs" / "tutorial.md"


def tutorial_section(number: int) -> str:
    """Section `number` ("## N. ..."), up to the next section."""
    text = TUTORIAL.read_text()
    start = text.index(f"\n## {number}. ")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def tutorial_blocks(lang: str, number: int) -> list[str]:
    """Section `number`'s fenced blocks of `lang`, each as the text between its fences."""
    return re.findall(rf"^```{lang}\n(.*?)^```$", tutorial_section(number), flags=re.S | re.M)
