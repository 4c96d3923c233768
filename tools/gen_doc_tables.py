"""
Developer utility: the measured numbers in the docs, rendered from the tracked bench results
(bench/results/*.json), so a doc cannot quote a number its bench no longer gives.

A doc marks what is generated, and nothing else is touched:

    <!-- table: NAME -->                          a block: the table NAME renders, with a caption
    ...                                           line naming its JSON
    <!-- end table -->

    text <!-- value: NAME ARG... -->313 k<!-- end value --> text     one number inside prose

NAME is one of TABLES / VALUES (tools/doc_tables.py); a value's words after its name are its arguments (a model,
a layer, a format). The JSON is the single source: what a region says is computed from it here,
never typed into the doc. To change a number, rerun its bench (writing to bench/results/) and
this script; to quote a new one, add a table or value here and its marker in the doc.

    python tools/gen_doc_tables.py            # rewrite every region in README.md and docs/*.md in place
    python tools/gen_doc_tables.py --check    # exit 1 listing the regions that differ (tests/test_doc_tables.py)
    python tools/gen_doc_tables.py --list     # each region, where it is and the JSON it reads
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

from snowir.tools.doc_tables import TABLES, VALUES, DocTableError, Results

ROOT = Path(__file__).resolve().parent.parent

BLOCK = re.compile(r"^<!-- table: (?P<name>[^>]*?) -->\n(?P<body>.*?)^<!-- end table -->$", re.M | re.S)
INLINE = re.compile(r"<!-- value: (?P<name>[^>]*?) -->(?P<body>.*?)<!-- end value -->")
OPENERS = re.compile(r"<!-- (table|value): ")

__all__ = ["TABLES", "VALUES", "main", "regenerate", "doc_files"]


# ---------------------------------------------------------------------------------------------
# the regions


def doc_files(root: Path) -> list[Path]:
    return [p for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))] if p.is_file()]


def render(kind: str, spec: str, results: Results) -> str:
    name, *args = spec.split()
    registry = TABLES if kind == "table" else VALUES
    if name not in registry:
        raise DocTableError(f"unknown {kind} {name!r} (known: {', '.join(sorted(registry))})")
    try:
        return registry[name](results, *args)
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise DocTableError(f"{kind} {spec!r}: {type(e).__name__}: {e}") from e


def regenerate(text: str, results: Results, where: str) -> tuple[str, list[tuple[int, str, str, str, str, list[str]]]]:
    """The text with every region rendered, and its regions as (line, kind, spec, body in the doc,
    generated body, JSON files read), in the order of the doc."""
    regions: list[tuple[int, str, str, str, str, list[str]]] = []
    opened = len(OPENERS.findall(text))
    starts = re.search(r"^[ \t]*<!-- value: ", text, re.M)
    if starts:  # CommonMark: a line opening with a comment is an HTML block, cut out of its paragraph
        raise DocTableError(f"{where}:{text.count(chr(10), 0, starts.start()) + 1}: a value marker starts its line; "
                            "put a word of the sentence before it")

    def inline(m: re.Match) -> str:
        results.read = []
        body = render("value", m["name"], results)
        if "\n" in body:
            raise DocTableError(f"value {m['name']!r} renders more than one line")
        regions.append((text.count("\n", 0, m.start()) + 1, "value", m["name"], m["body"], body, results.read))
        return f"<!-- value: {m['name']} -->{body}<!-- end value -->"

    def block(m: re.Match) -> str:  # on the text with its values rendered: values are one line, lines stay
        results.read = []
        body = "\n" + render("table", m["name"], results).strip("\n") + "\n\n"
        regions.append((valued.count("\n", 0, m.start()) + 1, "table", m["name"], m["body"], body, results.read))
        return f"<!-- table: {m['name']} -->\n{body}<!-- end table -->"

    try:
        valued = INLINE.sub(inline, text)
        out = BLOCK.sub(block, valued)
    except DocTableError as e:
        raise DocTableError(f"{where}: {e}") from e
    if len(regions) != opened:
        raise DocTableError(f"{where}: {opened} region markers but {len(regions)} complete regions "
                            "(a table needs '<!-- end table -->' on its own line, a value '<!-- end value -->' on its line)")
    return out, sorted(regions)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].strip(),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 listing the regions that differ")
    p.add_argument("--list", action="store_true", help="list each region and the JSON it reads")
    p.add_argument("--root", type=Path, default=ROOT, help="the repository whose README.md and docs/*.md to read")
    p.add_argument("--results", type=Path, help="the bench results directory (default ROOT/bench/results)")
    args = p.parse_args(argv)
    results = Results(args.results or args.root / "bench" / "results")
    stale: list[str] = []
    try:
        for path in doc_files(args.root):
            text = path.read_text()
            rel = path.relative_to(args.root)
            new, regions = regenerate(text, results, str(rel))
            if args.list:
                for line, kind, spec, _, _, read in regions:
                    print(f"{rel}:{line}: {kind} {spec}  <- {', '.join(read)}")
            if new == text:
                continue
            for line, kind, spec, old, body, read in regions:
                if body != old:
                    stale.append(f"{rel}:{line}: {kind} '{spec}' differs from bench/results/{', '.join(read)}")
                    if kind == "table":
                        diff = difflib.unified_diff(old.splitlines(), body.splitlines(), "doc", "generated", lineterm="", n=0)
                        stale += ["    " + d for d in list(diff)[2:12]]
                    else:
                        stale.append(f"    doc says {old!r}, generated {body!r}")
            if not args.check and not args.list:
                path.write_text(new)
                print(f"rewrote {rel}")
    except DocTableError as e:
        print(f"gen_doc_tables: {e}", file=sys.stderr)
        return 2
    if args.check and stale:
        print("\n".join(stale))
        print("docs quote numbers bench/results no longer gives: run python tools/gen_doc_tables.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
