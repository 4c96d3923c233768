"""snow-opt as a Python function: exit codes, one-line errors, atomic output files."""

from pathlib import Path

import pytest

from snowir.tools.snow_opt import main, rewrite_argv, unwrap_pipeline

PROGRAM = "snowflake_asm.program @p {\n  snowflake_asm.movi r1, 3\n}\n"


def test_unwrap_pipeline() -> None:
    assert unwrap_pipeline("builtin.module(canonicalize,cse)") == "canonicalize,cse"
    assert unwrap_pipeline("canonicalize") == "canonicalize"
    assert rewrite_argv(["x.mlir", "--pass-pipeline=builtin.module(a{k=1})"]) == ["x.mlir", "-p", "a{k=1}"]


def test_output_file_written(tmp_path: Path) -> None:
    src = tmp_path / "in.mlir"
    src.write_text(PROGRAM)
    out = tmp_path / "out.mlir"
    assert main([str(src), "-o", str(out)]) == 0
    assert "snowflake_asm.movi r1, 3" in out.read_text()


def test_failure_leaves_no_output(tmp_path: Path, capsys) -> None:
    src = tmp_path / "in.mlir"
    src.write_text(PROGRAM.replace("r1, 3", "r1, 99999999"))
    out = tmp_path / "out.mlir"
    assert main([str(src), "-o", str(out)]) == 1
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [src]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "23-bit" in err


def test_failure_keeps_previous_output(tmp_path: Path) -> None:
    src = tmp_path / "in.mlir"
    src.write_text("this is not mlir")
    out = tmp_path / "out.mlir"
    out.write_text("previous")
    assert main([str(src), "-o", str(out)]) == 1
    assert out.read_text() == "previous"


def test_list_passes_describes_every_snowir_pass(capsys) -> None:
    from snowir.passes import all_passes

    assert main(["--list-passes"]) == 0
    out = capsys.readouterr().out
    for name in all_passes():
        assert f"\n{name}" in "\n" + out
    assert "balance-loads{metric=cl units=0 split=512}\n    spread the loads over the load units (C17 §6.3)." in out
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "--pass-pipeline" in capsys.readouterr().out
