"""
snow-opt: xdsl-opt with the snowir dialects, passes, frontends and targets.

Built on `xDSLOptMain`, so every xdsl-opt flag behaves the same. Additions:
  * `--pass-pipeline=PIPELINE` (MLIR spelling) as an alias of `-p`, accepting
    MLIR's `builtin.module(a,b{k=v})` wrapping;
  * frontends for `.onnx` models and `.sfb` program images, target `snowflake-bin`;
  * every error (unknown pass, bad option, parse error, verifier failure, bad input)
    is one line on stderr and a non-zero exit code, never a traceback.
"""

from __future__ import annotations

import os
import dataclasses
import sys
import time
from collections.abc import Sequence
from typing import IO

from xdsl.dialects.builtin import ModuleOp
from xdsl.xdsl_opt_main import xDSLOptMain

from snowir.version import __version__
from snowir.dialects import all_dialects
from snowir.driver.pipeline_spec import explain_pipeline, unwrap_pipeline
from snowir.driver.targets import BINARY_TARGETS
from snowir.errors import SnowError, report_failure, wants_traceback
from snowir.machine.image import ImageError
from snowir.passes import all_passes


class SnowOptMain(xDSLOptMain):
    """xDSLOptMain with the snowir registrations (also an xDSL plugin: snowir/universe.py)."""

    version_format = f"snow-opt (snowir {__version__}) built on xdsl {{xdsl_version}}"
    pass_times: list[tuple[str, float]] | None = None

    def setup_pipeline(self) -> None:
        """--time-passes: each pass's seconds collected for a table on stderr (xdsl-opt prints
        raw floats into stdout, beside the IR). --print-ir-after / --mlir-print-ir-after-all:
        the IR after the chosen passes on stderr, also the parts of composite passes
        (snowir/pass_steps.py)."""
        timing = self.args.time_passes
        self.args.time_passes = False
        try:
            super().setup_pipeline()
        except (ValueError, TypeError) as e:
            why = explain_pipeline(self.args.passes or "", self.available_passes)
            where = self.args.input_file or "<stdin>"
            raise (SnowError(f"{where}: error: {why}") if why else e) from None
        if (why := explain_pipeline(self.args.passes or "", self.available_passes)) is not None:
            raise SnowError(f"{self.args.input_file or '<stdin>'}: error: {why}")  # built from a value of the wrong kind
        self._print_after()
        if not timing:
            return
        inner = self.pipeline.callback
        times: list[tuple[str, float, int]] = []
        self.pass_times = times
        started = [time.perf_counter()]
        # the parts of a composite pass, as they end (snowir/pass_steps.py): a part at depth d
        # began when the previous one at depth <= d ended
        parts: list[tuple[str, float, int]] = []
        step_start: dict[int, float] = {}

        def part_done(p, module: ModuleOp, depth: int) -> None:
            now = time.perf_counter()
            parts.append((p.name, now - step_start.get(depth, started[0]), depth))
            for d in [d for d in step_start if d >= depth] + [depth]:
                step_start[d] = now

        def callback(previous, module, following) -> None:
            if previous is not None:
                times.append((previous.name, time.perf_counter() - started[0], 0))
                times.extend(preorder(parts))
            parts.clear()
            if inner is not None:
                inner(previous, module, following)
            started[0] = time.perf_counter()
            step_start.clear()

        self.pipeline = dataclasses.replace(self.pipeline, callback=callback)
        self._add_observer(part_done)

    def _print_after(self) -> None:
        wanted = {n.strip() for n in (self.args.print_ir_after or "").split(",") if n.strip()}
        for name in sorted(wanted - set(self.available_passes)):  # a typo would print nothing
            raise SnowError("--print-ir-after: " + (explain_pipeline(name, self.available_passes) or name))
        every = self.args.mlir_print_ir_after_all
        if not wanted and not every:
            return
        from xdsl.printer import Printer

        def dump(p, module: ModuleOp, depth: int) -> None:
            if every or p.name in wanted:
                print(f"// -----// IR Dump After {p.name}{' (in a composite pass)' if depth else ''} //----- //",
                      file=sys.stderr)
                Printer(stream=sys.stderr).print_op(module)
                print(file=sys.stderr)

        inner = self.pipeline.callback

        def callback(previous, module, following) -> None:
            if previous is not None:
                dump(previous, module, 0)
            if inner is not None:
                inner(previous, module, following)

        self.pipeline = dataclasses.replace(self.pipeline, callback=callback)
        self._add_observer(dump)

    def _add_observer(self, observer) -> None:
        if not hasattr(self, "_observers"):
            self._observers: list = []
        self._observers.append(observer)

    def run(self) -> None:
        from contextlib import ExitStack

        from snowir.pass_steps import observing

        with ExitStack() as stack:
            for observer in getattr(self, "_observers", []):
                stack.enter_context(observing(observer))
            return super().run()

    def register_all_dialects(self) -> None:
        super().register_all_dialects()  # with snowir installed, its xdsl.universe entry point is among them
        for name, factory in all_dialects().items():
            if name not in self.ctx.registered_dialect_names:  # also when run from a tree not installed
                self.ctx.register_dialect(name, factory)
        # passes create dense_resource blobs; printing them needs builtin loaded even
        # when the input never names a builtin op
        self.ctx.get_optional_dialect("builtin")

    def register_all_arguments(self, arg_parser) -> None:
        super().register_all_arguments(arg_parser)
        arg_parser.add_argument(
            "--pass-pipeline", default=None, metavar="PIPELINE",
            help="MLIR spelling of -p: 'builtin.module(snowflake-lower{loop-order=Mloop})' or 'a,b{k=v}'")
        arg_parser.add_argument("--print-ir-after", default=None, metavar="PASS[,PASS]",
                                help="print the IR to stderr after these passes, also inside composite passes "
                                     "(snowflake-lower, nn-prepare)")
        arg_parser.add_argument("--mlir-print-ir-after-all", action="store_true",
                                help="print the IR to stderr after every pass, also inside composite passes")
        arg_parser.add_argument("--traceback", action="store_true",
                                help="on an error, print the full Python traceback too (or set SNOWIR_TRACEBACK=1)")
        arg_parser.add_argument("--list-passes", action="store_true",
                                help="list snowir's passes with their descriptions and options, then exit")
        arg_parser.add_argument(
            "--elide-resources-if-larger", type=int, default=None, metavar="BYTES",
            help="print dense_resource blobs (weights) larger than BYTES as __elided__: readable real-model "
                 "IR (as MLIR's --mlir-elide-resource-strings-if-larger); it parses back, the elided blobs "
                 "without data (a run that needs one says so)")
        arg_parser.add_argument(
            "--input-shape", default=None,
            help="static shape for ONNX inputs with dynamic dimensions: 1,3,224,224 or NAME=1,3,224,224[;NAME2=...]")

    def output_resulting_program(self, prog: ModuleOp) -> str:
        limit = self.args.elide_resources_if_larger
        if limit is None:
            if self.args.target not in BINARY_TARGETS:
                return super().output_resulting_program(prog)
            try:
                return super().output_resulting_program(prog)
            except ImageError as e:  # what cannot be assembled is the input's: say which
                raise SnowError(f"{self.args.input_file or '<stdin>'}: error: {e}") from None
        if self.args.target in BINARY_TARGETS:
            raise SnowError(f"--elide-resources-if-larger is for text output, not -t {self.args.target} "
                            "(a binary holds the data)")
        from snowir.resources import elided_blobs

        with elided_blobs(limit):
            return super().output_resulting_program(prog)

    def register_all_passes(self) -> None:
        super().register_all_passes()
        for name, factory in all_passes().items():
            self.register_pass(name, factory)

    def register_all_frontends(self) -> None:
        super().register_all_frontends()
        parse_mlir = self.available_frontends["mlir"]

        def parse_fresh(stream: IO[bytes]) -> ModuleOp:
            from snowir.resources import reset_blobs

            reset_blobs()  # each input (or split chunk) gets its own resource table
            return parse_mlir(stream)

        self.available_frontends["mlir"] = parse_fresh
        from snowir.frontend.frontends import all_frontends

        for ext, frontend in all_frontends(self).items():
            self.available_frontends[ext] = frontend

    def register_all_targets(self) -> None:
        super().register_all_targets()
        from snowir.driver.targets import all_targets

        for name, target in all_targets().items():
            self.available_targets[name] = target


def rewrite_argv(argv: Sequence[str]) -> list[str]:
    out: list[str] = []
    it = iter(argv)
    for arg in it:
        if arg.startswith("--pass-pipeline="):
            out += ["-p", unwrap_pipeline(arg.split("=", 1)[1])]
        elif arg == "--pass-pipeline":
            out += ["-p", unwrap_pipeline(next(it, ""))]
        elif arg.startswith("--passes=") or arg.startswith("-p="):
            out += ["-p", unwrap_pipeline(arg.split("=", 1)[1])]
        elif arg in ("-p", "--passes"):
            out += ["-p", unwrap_pipeline(next(it, ""))]
        else:
            out.append(arg)
    return out


def _write_atomically(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def list_passes() -> str:
    """Every snowir pass: name, the first line of its docstring, its options with defaults."""
    import dataclasses

    lines = []
    for name, load in all_passes().items():
        cls = load()
        own = cls.__dict__.get("__doc__") or ""
        # one pass per file: its module docstring; a file of several (pipelines.py): the class's own
        doc = (own if own and not own.startswith(cls.__name__ + "(") else sys.modules[cls.__module__].__doc__ or "").strip()
        paragraph = " ".join(doc.split("\n\n", 1)[0].split())
        first = paragraph.split(": ", 1)[1] if paragraph.startswith(name) and ": " in paragraph else paragraph
        first = first.split(". ", 1)[0].rstrip(".:") + "."
        options = " ".join(f"{f.name.replace('_', '-')}={'' if f.default is dataclasses.MISSING else f.default}" for f in dataclasses.fields(cls)
                           if f.name != "name")
        lines.append(f"{name}{'{' + options + '}' if options else ''}\n    {first}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    from snowir.pass_steps import gc_paused
    from snowir.resources import reset_blobs

    reset_blobs()  # one invocation, one blob table, as in a process of its own
    args = rewrite_argv(sys.argv[1:] if argv is None else argv)
    full = wants_traceback(args)
    args = [a for a in args if a != "--traceback"]
    if "--list-passes" in args:
        sys.stdout.write(list_passes())
        return 0
    input_name = next((a for a in args if not a.startswith("-") and os.path.exists(a)), "<stdin>")
    try:
        tool = SnowOptMain(description="snowir optimizer driver", args=args)
        input_name = tool.args.input_file or "<stdin>"
        from snowir.driver.files import missing_directories

        if tool.args.output_file is not None and missing_directories([tool.args.output_file]):
            raise SnowError(f"no such directory for -o {tool.args.output_file} (nothing run, nothing written)")
        with gc_paused():  # snowir/pass_steps.py: the collector re-scans the whole IR otherwise
            if tool.args.output_file is None and tool.args.target not in BINARY_TARGETS:
                tool.run()
            else:
                _run_to_file(tool)
        if tool.pass_times is not None:
            _print_pass_times(tool.pass_times)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        print("snow-opt: interrupted", file=sys.stderr)
        return 130
    except BaseException as e:  # noqa: BLE001 - the one place errors become one line
        report_failure("snow-opt", e, input_name, full)
        return 1
    return 0


def preorder(parts: list[tuple[str, float, int]]) -> list[tuple[str, float, int]]:
    """Parts recorded as they end (a composite after its own parts) in the order they nest."""
    stack: list[tuple[tuple[str, float, int], list]] = []
    for entry in parts:
        children = []
        while stack and stack[-1][0][2] > entry[2]:
            children.insert(0, stack.pop())
        stack.append((entry, children))

    def flat(node) -> list[tuple[str, float, int]]:
        entry, children = node
        return [entry, *(e for child in children for e in flat(child))]

    return [e for node in stack for e in flat(node)]


def _print_pass_times(times: list[tuple[str, float, int]]) -> None:
    """Top-level passes with their share; a composite's parts indented below it."""
    total = sum(t for _, t, depth in times if depth == 0) or 1.0
    names = [("  " * depth) + name for name, _, depth in times]
    width = max([4, *(len(n) for n in names)])
    print(f"{'pass':<{width}} {'seconds':>9} {'share':>6}", file=sys.stderr)
    for label, (_, t, _) in zip(names, times):
        print(f"{label:<{width}} {t:>9.3f} {100 * t / total:>5.1f}%", file=sys.stderr)
    print(f"{'total':<{width}} {sum(t for _, t, depth in times if depth == 0):>9.3f}", file=sys.stderr)


def _run_to_file(tool: SnowOptMain) -> None:
    """Run with output captured in memory, then replace the output file in one step."""
    from io import StringIO

    captured = StringIO()
    tool.prepare_output = lambda: captured  # type: ignore[method-assign]
    original_close = captured.close
    captured.close = lambda: None  # type: ignore[method-assign]
    tool.run()
    text = captured.getvalue()
    original_close()
    if tool.args.target in BINARY_TARGETS:
        from snowir.driver.targets import write_binary_text

        write_binary_text(tool.args.output_file, text)
    else:
        _write_atomically(tool.args.output_file, text)


__all__ = ["SnowOptMain", "main", "rewrite_argv", "unwrap_pipeline"]

if __name__ == "__main__":
    sys.exit(main())
