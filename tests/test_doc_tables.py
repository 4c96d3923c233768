"""
The measured numbers in README.md and docs/*.md are generated from the tracked bench results
(bench/results/*.json) by tools/gen_doc_tables.py: every marked table and inline value must be
what the generator renders from the JSON today, and a changed result or a hand-edited number
makes the check fail.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from snowir.tools import gen_doc_tables as gen

ROOT = Path(__file__).resolve().parent.parent


def test_the_docs_render_the_tracked_bench_results(capsys) -> None:
    rc = gen.main(["--check"])
    out = capsys.readouterr()
    assert rc == 0, f"stale doc regions (run python tools/gen_doc_tables.py):\n{out.out}{out.err}"


def test_every_table_and_value_is_in_a_doc() -> None:
    text = "\n".join(p.read_text() for p in gen.doc_files(ROOT))
    used = {m.split()[0] for m in re.findall(r"<!-- (?:table|value): ([^>]*?) -->", text)}
    assert set(gen.TABLES) <= used, f"tables no doc shows: {sorted(set(gen.TABLES) - used)}"
    assert set(gen.VALUES) <= used, f"values no doc shows: {sorted(set(gen.VALUES) - used)}"


def _results_copy(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    shutil.copytree(ROOT / "bench" / "results", results)
    return results


@pytest.mark.parametrize("file, change, region", [
    # a model's conv time: the Table 2 table of docs/lowering.md
    ("models.json", lambda d: d[2].__setitem__("conv_ms", d[2]["conv_ms"] + 0.5), "table2"),
    # a Table 1 layer's ms: docs/calibration.md's table and the inline range of its differences
    ("table1.json", lambda d: d["rows"][0].__setitem__("vs_hand_pct", -2.5), "table1-vs-hand"),
    # a scaling-study point's bound: docs/dse.md's table (issue 38 item 4)
    ("dse_scaling.json", lambda d: d["resnet50"][0].__setitem__("conv_bound_ms", 1.0), "dse-scaling"),
    # the digits CNN's accuracy, quoted in README.md
    ("digits_accuracy.json", lambda d: d["rows"][0].__setitem__("accuracy", 0.95), "digits-accuracy"),
])
def test_a_changed_result_fails_the_check(tmp_path: Path, capsys, file: str, change, region: str) -> None:
    results = _results_copy(tmp_path)
    assert gen.main(["--check", "--results", str(results)]) == 0
    data = json.loads((results / file).read_text())
    change(data)
    (results / file).write_text(json.dumps(data))
    capsys.readouterr()
    assert gen.main(["--check", "--results", str(results)]) == 1
    out = capsys.readouterr().out
    assert f"'{region}" in out, out


def _docs_copy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    shutil.copy(ROOT / "README.md", root / "README.md")
    for p in (ROOT / "docs").glob("*.md"):
        shutil.copy(p, root / "docs" / p.name)
    shutil.copytree(ROOT / "bench" / "results", root / "bench" / "results")
    return root


def test_a_hand_edited_number_fails_and_the_generator_restores_it(tmp_path: Path, capsys) -> None:
    root = _docs_copy(tmp_path)
    doc = root / "docs" / "calibration.md"
    text = doc.read_text()
    edited = re.sub(r"(<!-- value: table1-vs-hand -->)(.*?)(<!-- end value -->)", r"\1within 3%\3", text)
    edited = edited.replace("| 27², 5×5, 64→192 | ", "| 27², 5×5, 64→192 | 9", 1)
    assert edited.count("within 3%") == 1 and edited != text
    doc.write_text(edited)
    assert gen.main(["--check", "--root", str(root)]) == 1
    out = capsys.readouterr().out
    assert "docs/calibration.md" in out and "'table1'" in out and "'table1-vs-hand'" in out, out
    assert gen.main(["--root", str(root)]) == 0
    assert doc.read_text() == text  # only the regions changed back; the prose around them is the author's
    assert gen.main(["--check", "--root", str(root)]) == 0


def test_broken_markers_are_refused(tmp_path: Path, capsys) -> None:
    root = _docs_copy(tmp_path)
    doc = root / "docs" / "calibration.md"
    text = doc.read_text()
    for broken, says in [(text.replace("<!-- end table -->", "", 1), "complete regions"),
                         (text.replace("<!-- table: table1 -->", "<!-- table: table_one -->", 1), "unknown table"),
                         (text + "\n<!-- value: table1-vs-hand -->x<!-- end value --> starts a line\n", "starts its line")]:
        doc.write_text(broken)
        assert gen.main(["--check", "--root", str(root)]) == 2
        assert says in capsys.readouterr().err


def test_update_results_help_says_whether_the_docs_quote_the_file() -> None:
    """A bench's --update-results help calls its JSON the tracked copy the docs quote only when
    bench/results/ holds it (ablation.json does not: its doc table is historical)."""
    import argparse
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_output", ROOT / "bench" / "_output.py")
    assert spec is not None and spec.loader is not None
    output = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(output)
    for name, tracked in (("ablation.json", False), ("models.json", True)):
        assert (ROOT / "bench" / "results" / name).exists() == tracked
        parser = argparse.ArgumentParser()
        output.add_output_options(parser, name)
        text = " ".join(parser.format_help().split())
        assert ("the tracked copy the docs quote" in text) == tracked, text
        assert ("not tracked" in text) != tracked, text
