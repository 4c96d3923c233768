"""
The house kept by a check rather than by memory (issue 26): read from the imports of snowir/,
passes/, dialects/ and tools/ (function-local and TYPE_CHECKING imports count: an import is an arrow
wherever it stands):

* no import circle between modules;
* the floors of the flow: the machine model, dialects and ground modules (hw, errors,
  fixedpoint, resources) import no compiler level; plan/ imports no tile IR code, code generator,
  driver or pass; codegen/ no tile IR code, driver, frontend or pass; tile/ no code generator,
  driver or pass; passes/ no driver;
* the library never imports tools/;
* no module imports another's private name;
* at most 5 function-local imports of the project's own modules, each with a comment saying why.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"snowir": ROOT / "snowir", "snowir.passes": ROOT / "passes", "snowir.dialects": ROOT / "dialects",
            "snowir.tools": ROOT / "tools"}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            name = ".".join((pkg, *parts))
            out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _imports(path: Path) -> list[tuple[ast.ImportFrom | ast.Import, bool]]:
    """Every import of the project's own modules, and whether it stands inside a function."""
    tree = ast.parse(path.read_text())
    local = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
             for n in ast.walk(f)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("snowir"):
            out.append((node, id(node) in local))
        elif isinstance(node, ast.Import) and any(a.name.startswith("snowir") for a in node.names):
            out.append((node, id(node) in local))
    return out


def _targets(node: ast.ImportFrom | ast.Import) -> list[str]:
    """The project modules an import reads (`from snowir.x import y` reads snowir.x.y if that is a module)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in MODULES]
    out = []
    for a in node.names:
        sub = f"{node.module}.{a.name}"
        out.append(sub if sub in MODULES else node.module)
    return [m for m in out if m in MODULES]


def _graph() -> dict[str, set[str]]:
    return {name: {t for node, _ in _imports(path) for t in _targets(node) if t != name}
            for name, path in MODULES.items()}


def test_no_import_circles() -> None:
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                circles.append(sorted(part))

    for v in graph:
        if v not in index:
            visit(v)
    assert circles == [], circles


# (module prefix, prefixes it may not import)
FLOORS = [
    ("snowir.machine", ["snowir.plan", "snowir.tile", "snowir.codegen", "snowir.driver", "snowir.frontend",
                        "snowir.passes", "snowir.golden", "snowir.tools"]),
    ("snowir.dialects", ["snowir.plan", "snowir.tile", "snowir.codegen", "snowir.driver", "snowir.frontend",
                         "snowir.passes", "snowir.machine", "snowir.tools"]),
    ("snowir.hw", ["snowir."]), ("snowir.errors", ["snowir."]), ("snowir.fixedpoint", ["snowir.plan", "snowir.tile"]),
    ("snowir.plan", ["snowir.tile", "snowir.codegen", "snowir.driver", "snowir.passes", "snowir.frontend"]),
    ("snowir.codegen", ["snowir.tile", "snowir.driver", "snowir.passes", "snowir.frontend"]),
    ("snowir.tile", ["snowir.codegen", "snowir.driver", "snowir.passes"]),
    ("snowir.frontend", ["snowir.plan", "snowir.tile", "snowir.codegen", "snowir.driver", "snowir.passes"]),
    ("snowir.passes", ["snowir.driver"]),
    ("snowir", ["snowir.tools"]),
]


def test_floors_of_the_flow() -> None:
    graph = _graph()
    wrong = [f"{a} -> {b}" for a, deps in graph.items() if not a.startswith("snowir.tools") for b in deps
             for floor, banned in FLOORS if a == floor or a.startswith(floor + ".")
             for x in banned if b == x.rstrip(".") or b.startswith(x if x.endswith(".") else x + ".")]
    assert wrong == []


def test_no_private_names_across_modules() -> None:
    wrong = [f"{path.relative_to(ROOT)}:{node.lineno} {node.module}.{a.name}"
             for name, path in MODULES.items() if not name.startswith("snowir.tools") for node, _ in _imports(path) if isinstance(node, ast.ImportFrom)
             for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    assert wrong == []


def test_few_function_local_imports_each_with_its_reason() -> None:
    local = []
    for name, path in MODULES.items():
        if name.startswith("snowir.tools"):
            continue  # the drivers may load heavy parts (plots, Ray) on demand
        lines = path.read_text().splitlines()
        for node, inside in _imports(path):
            if inside:
                said = "#" in lines[node.lineno - 1] or lines[node.lineno - 2].strip().startswith("#")
                local.append((f"{path.relative_to(ROOT)}:{node.lineno}", said))
    assert len(local) <= 5, local
    assert all(said for _, said in local), local
