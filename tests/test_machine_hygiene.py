"""Found by reading the tree (issue 40): dead code in the machine model (core.py `RunStats` and
`opcounts`, trace.py `trace_events`, fast.py `BlockFn`), docstrings pointing at DESIGN.md /
SNOWFLAKE.md (not in the repository), and docs/lowering.md placing `choose_mode` in codegen
(it is in plan/indp.py). These keep them from coming back."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MACHINE = sorted((ROOT / "snowir" / "machine").glob("*.py"))
SOURCES = {p: p.read_text() for d in ("snowir", "passes", "dialects", "tools", "tests", "bench")
           for p in (ROOT / d).rglob("*.py")}


def _top_level_names(tree: ast.Module) -> list[str]:
    names = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [t.id for t in targets if isinstance(t, ast.Name)]
    return names


@pytest.mark.parametrize("path", MACHINE, ids=lambda p: p.name)
def test_every_machine_name_is_used(path: Path) -> None:
    """A top-level name of snowir/machine used nowhere (its module, the package, tests, bench)
    but where it is defined is dead."""
    text = SOURCES[path]
    dead = []
    for name in _top_level_names(ast.parse(text)):
        word = re.compile(rf"\b{re.escape(name)}\b")
        if len(word.findall(text)) <= 1 and not any(word.search(t) for q, t in SOURCES.items() if q != path):
            dead.append(name)
    assert not dead, f"{path.name}: defined, never used: {dead}"


@pytest.mark.parametrize("path", MACHINE, ids=lambda p: p.name)
def test_every_machine_attribute_is_read(path: Path) -> None:
    """An attribute the machine sets (`self.x = ...`) that nothing reads is dead state."""
    unread = []
    for name in sorted(set(re.findall(r"\bself\.([A-Za-z_]\w*)(?:: [^=\n]+)? = ", SOURCES[path]))):
        use = re.compile(rf"\.{re.escape(name)}\b|[\"']{re.escape(name)}[\"']")
        if sum(len(use.findall(t)) for t in SOURCES.values()) <= 1:
            unread.append(name)
    assert not unread, f"{path.name}: set, never read: {unread}"


def test_docstrings_point_into_the_repository() -> None:
    """No module of the library, its tools or its tests cites DESIGN.md / SNOWFLAKE.md (not in the
    repository): a reader of a fresh clone cannot follow the reference."""
    outside = sorted(str(p.relative_to(ROOT)) for p, text in SOURCES.items()
                     if p.name != Path(__file__).name and re.search(r"\b(DESIGN|SNOWFLAKE)\.md", text))
    assert not outside, f"cite a file outside the repository (docs/machine.md, docs/isa.md, docs/lowering.md instead): {outside}"


def test_docs_name_functions_where_they_are_defined() -> None:
    """`path.py: name` in README.md and docs/*.md: the file exists and defines `name`."""
    wrong = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for path, name in re.findall(r"`((?:snowir|passes|dialects|tools)/[\w/]+\.py): (\w+)`", doc.read_text()):
            source = ROOT / path
            if not source.is_file() or name not in _top_level_names(ast.parse(source.read_text())):
                wrong.append(f"{doc.name}: {path}: {name}")
    assert not wrong, wrong
