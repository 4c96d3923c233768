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
    assert "balance-loads{metric=cl units=0 split=512 hw= guard=True}\n    spread the loads over the load units (C17 §6.3)." in out
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "--pass-pipeline" in capsys.readouterr().out


def test_version_names_snowir(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--version"])
    out = capsys.readouterr().out
    assert "snowir 0.1.0" in out and "xdsl" in out


def test_time_passes_is_a_table_on_stderr(tmp_path: Path, capsys) -> None:
    digits = Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx"
    assert main([str(digits), "-p", "nn-prepare,nn-to-tile", "--time-passes"]) == 0
    captured = capsys.readouterr()
    assert "took" not in captured.out and captured.out.lstrip().startswith("builtin.module")
    rows = captured.err.strip().splitlines()
    assert rows[0].split() == ["pass", "seconds", "share"]
    assert [r.split()[0] for r in rows[1:] if not r.startswith(" ")] == ["nn-prepare", "nn-to-tile", "total"]
    # a composite pass's parts, indented below it, in order
    parts = [r.split()[0] for r in rows[2:] if r.startswith("  ")]
    assert parts[:2] == ["resize-to-conv-transpose", "conv-transpose-to-conv"] and parts[-1] == "quantize" and "fold-batch-norm" in parts
    assert rows[1].startswith("nn-prepare") and rows[len(parts) + 2].startswith("nn-to-tile")


def test_bench_output_never_overwrites_tracked_results_for_a_custom_hw(tmp_path: Path, monkeypatch) -> None:
    from snowir.driver.files import bench_output

    script = str(Path(__file__).resolve().parent.parent / "bench" / "models.py")
    assert bench_output(script, "m.json").parent.name == "results"
    monkeypatch.chdir(tmp_path)
    assert bench_output(script, "m.json", custom_hw=True) == Path("build") / "bench" / "m.json"
    assert bench_output(script, "m.json", str(tmp_path / "x")) == tmp_path / "x" / "m.json"
    assert (tmp_path / "x").is_dir()


def test_elide_resources(capsys) -> None:
    digits = Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx"
    assert main([str(digits), "-p", "nn-prepare"]) == 0
    full = capsys.readouterr().out
    assert main([str(digits), "-p", "nn-prepare", "--elide-resources-if-larger=64"]) == 0
    short = capsys.readouterr().out
    assert "__elided__" in short and "__elided__" not in full and len(short) < len(full) / 4
    assert short.split("{-#")[0] == full.split("{-#")[0]  # the IR itself is untouched
    assert main([str(digits), "-p", "nn-prepare"]) == 0  # blobs are back afterwards
    assert capsys.readouterr().out == full


def test_elided_output_parses_back_and_a_run_that_needs_the_data_says_so(tmp_path: Path, capsys) -> None:
    from snowir.tools.snow_run import main as snow_run

    digits = Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx"
    short = tmp_path / "short.mlir"
    assert main([str(digits), "-p", "snowflake-lower", "--elide-resources-if-larger=64", "-o", str(short)]) == 0
    assert main([str(short), "-o", str(tmp_path / "again.mlir")]) == 0  # parses, prints the same
    assert (tmp_path / "again.mlir").read_text() == short.read_text()
    capsys.readouterr()
    assert snow_run([str(short), "--quiet"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "was elided when the IR was printed" in err, err
    assert main([str(digits), "-p", "snowflake-lower", "--elide-resources-if-larger=64", "-t", "snowflake-bin",
                 "-o", str(tmp_path / "m.sfb")]) == 1
    assert "is for text output" in capsys.readouterr().err and not (tmp_path / "m.sfb").exists()


def test_plain_xdsl_opt_loads_snowir_as_a_plugin() -> None:
    """snowir registers through xDSL's own extension mechanism (the xdsl.universe entry point)."""
    import shutil
    import subprocess
    import sys

    ops = Path(__file__).parent / "filecheck" / "nn" / "ops.mlir"
    exe = shutil.which("xdsl-opt")
    cmd = [exe] if exe else [sys.executable, "-m", "xdsl.tools.xdsl_opt"]
    proc = subprocess.run([*cmd, str(ops), "-p", "drop-identity"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "nn.conv2d" in proc.stdout


def test_print_ir_after_sees_inside_composite_passes(tmp_path: Path, capsys) -> None:
    digits = str(Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx")
    out = tmp_path / "o.mlir"
    assert main([digits, "-p", "snowflake-lower", "--print-ir-after=fuse-relu,tile-to-asm,snowflake-lower",
                     "-o", str(out)]) == 0
    err = capsys.readouterr().err
    dumps = [line for line in err.splitlines() if "IR Dump After" in line]
    assert dumps == ["// -----// IR Dump After fuse-relu (in a composite pass) //----- //",
                     "// -----// IR Dump After tile-to-asm (in a composite pass) //----- //",
                     "// -----// IR Dump After snowflake-lower //----- //"]
    after_relu = err.split(dumps[0])[1].split(dumps[1])[0]
    assert "relu" in after_relu and "tile.layer" not in after_relu and "!nn.fixed" not in after_relu
    assert main([digits, "-p", "nn-prepare", "--mlir-print-ir-after-all", "-o", str(out)]) == 0
    assert capsys.readouterr().err.count("IR Dump After") == 27  # 26 parts (drop-identity twice), then nn-prepare


def test_each_pass_of_the_default_pipeline_verifies_on_a_downsample_block(tmp_path: Path) -> None:
    """Pass by pass, the IR verifies at every level: a strided 1x1 residual conv (ResNet's
    downsample) loads only the pixels it reads, and its tile.load says so; it used to describe
    the uncompacted rows (114688 words in a 65536-word buffer) and fail verification between
    passes, which the composite snowflake-lower did not check."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from snowir.passes.pipelines import PIPELINE

    rng = np.random.default_rng(0)
    wa = (rng.standard_normal((512, 256, 1, 1)) * 0.05).astype(np.float32)
    wb = (rng.standard_normal((512, 256, 1, 1)) * 0.05).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], strides=[2, 2]),
             helper.make_node("Conv", ["x", "wb"], ["b"], strides=[2, 2]),
             helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    g = helper.make_graph(nodes, "down", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256, 56, 56])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 512, 28, 28])],
                          [numpy_helper.from_array(wa, "wa"), numpy_helper.from_array(wb, "wb")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    path = tmp_path / "down.onnx"
    onnx.save(model, path)
    tiled = tmp_path / "tiled.mlir"
    assert main([str(path), "-p", ",".join(PIPELINE[:3]), "-o", str(tiled)]) == 0
    text = tiled.read_text()
    assert "bypass" in text and "65536" not in text  # the residual conv is tiled, its loads fit
    assert main([str(tiled), "-p", ",".join(PIPELINE[3:]), "-o", str(tmp_path / "asm.mlir")]) == 0


def test_a_crash_in_a_pass_names_where_it_was_raised_and_traceback_prints_it(monkeypatch, capsys) -> None:
    """A pass author's bug: one line naming the file:line that raised; --traceback (or
    SNOWIR_TRACEBACK=1) prints the whole Python traceback first."""
    from snowir.passes.asm.schedule_asm import ScheduleAsmPass
    from snowir.tools.snow_opt import main as snow_opt

    def broken(self, ctx, op):
        return None._int  # type: ignore[attr-defined]

    monkeypatch.setattr(ScheduleAsmPass, "apply", broken)
    digits = str(Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx")
    assert snow_opt([digits, "-p", "nn-prepare,nn-to-tile,tile-loop-order,tile-to-asm,schedule-asm"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "AttributeError" in err[0] and "raised at tests/" not in err[0]
    assert "(raised at " in err[0] and "test_snow_opt.py:" in err[0] and "--traceback" in err[0]
    assert snow_opt([digits, "-p", "nn-prepare,nn-to-tile,tile-loop-order,tile-to-asm,schedule-asm", "--traceback"]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.strip().splitlines()[-1].startswith("snow-opt: ")
    monkeypatch.setenv("SNOWIR_TRACEBACK", "1")
    assert snow_opt([digits, "-p", "nn-prepare,nn-to-tile,tile-loop-order,tile-to-asm,schedule-asm"]) == 1
    assert "Traceback (most recent call last)" in capsys.readouterr().err


def test_pipeline_mistakes_name_the_pass_and_option(capsys) -> None:
    from snowir.tools.snow_opt import main as snow_opt

    digits = str(Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx")
    cases = {"nn-prepar": "unknown pass 'nn-prepar': did you mean 'nn-prepare'?",
             "nn-prepare,balance-loads{units=two}": "pass 'balance-loads': option units=two: expected an integer",
             "nn-prepare,balance-loads{unit=2}": "pass 'balance-loads' has no option 'unit'",
             # a number where a boolean or a string goes (it once raised a TypeError of its own)
             "nn-prepare{split-kernel-parts=2}":
                 "pass 'nn-prepare': option split-kernel-parts=2: expected true or false (or absent)",
             "split-kernels{kernel-parts=0}": "pass 'split-kernels': option kernel-parts=0: expected true or false",
             "nn-prepare{hw=3}": "pass 'nn-prepare': option hw=3: expected a string",
             # stop 55's measured slot choice: refused in one line, not taken as true or ignored
             "nn-prepare,fill-delay-slots{measure=2}": "pass 'fill-delay-slots': option measure=2: expected true or false",
             "snowflake-lower{measure-slots=yes}":
                 "pass 'snowflake-lower': option measure-slots=yes: expected true or false",
             "snowflake-lower{measure-slot=true}": "pass 'snowflake-lower' has no option 'measure-slot'",
             # asked to measure where nothing is lowered: refused, not a silent no-op
             "fill-delay-slots{measure=true}": "fill-delay-slots: no snowflake_asm program in the module",
             # asked for kernel parts where nothing would weigh them: refused, not ignored
             "split-kernels{by-cost=false kernel-parts=true}": "split-kernels: kernel-parts=true needs by-cost=true",
             "nn-prepare{split-by-cost=false split-kernel-parts=true}": "kernel-parts=true needs by-cost=true",
             # a boolean where an integer goes: xDSL took it as 1 (a bool is an int)
             "split-kernels{max-words=true}": "pass 'split-kernels': option max-words=true: expected an integer"}
    for pipeline, want in cases.items():
        assert snow_opt([digits, "-p", pipeline]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and want in err[0], err
    from snowir.driver.model_run import parse_pipeline
    from snowir.errors import SnowError

    with pytest.raises(SnowError, match="option max-words=true: expected an integer"):  # snow-run --pipeline, the API
        parse_pipeline("split-kernels{max-words=true}")
    assert parse_pipeline("split-kernels{max-words=100}") is not None
    assert snow_opt([digits, "-p", "nn-prepare", "--print-ir-after", "tile-loop-ordr"]) == 1
    assert "did you mean 'tile-loop-order'" in capsys.readouterr().err


@pytest.mark.parametrize("tool", ["snow_run", "snow_report", "snow_dse"])
def test_every_tool_has_version(tool: str, capsys) -> None:
    import importlib

    with pytest.raises(SystemExit) as done:
        importlib.import_module(f"snowir.tools.{tool}").main(["--version"])
    assert done.value.code == 0 and "snowir" in capsys.readouterr().out


def test_snowflake_bin_of_an_unlowered_module_says_what_to_do(tmp_path: Path, capsys) -> None:
    """-t snowflake-bin without the lowering names the input and the missing -p snowflake-lower;
    per-layer images (whole-model=false) say how to get a .sfb; nothing is written."""
    digits = Path(__file__).resolve().parent.parent / "snowir" / "data" / "digits_cnn.onnx"
    out = tmp_path / "m.sfb"
    assert main([str(digits), "-t", "snowflake-bin", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(digits) in err and "add -p snowflake-lower" in err, err
    per_layer = tmp_path / "layers.mlir"
    per_layer.write_text("".join(f"snowflake_asm.image @{n} {{\n  {PROGRAM}}}\n" for n in ("a", "b")))
    assert main([str(per_layer), "-t", "snowflake-bin", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(per_layer) in err and "2 per-layer" in err and "whole-model" in err, err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["layers.mlir"]
