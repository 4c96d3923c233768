"""Runs lit's FileCheck tests (tests/filecheck) inside the pytest process.

lit itself finds the tests (with tests/filecheck/lit.cfg), parses their RUN lines and expands
the substitutions (%s, %t, %inputs, ...); only the shell step is done here: each pipeline runs
in order, with snow-opt, snow-run and filecheck called as functions (their `main(argv)`), and any
other command (sed, grep, wc, cmp) as a process. A snow-opt process spends about a second
importing snowir and xDSL before it reads its input, and the suite has ~150 snow-opt calls: run
by lit's shell, the FileCheck suite was 271 s of an 18-minute suite on a slow machine (issue 40).

The checks are the same: filecheck's own matcher reads what the tool wrote, and the exit codes go
through `not` and pipefail as in lit's shell. `lit -v tests/filecheck` from a shell runs the same
files the usual way (test_lit.py runs one file so, to keep lit.cfg honest)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import lit.discovery
import lit.LitConfig
import lit.Test
import lit.TestRunner
from lit.ShUtil import Command, Pipeline, Seq, ShParser

FILECHECK_DIR = Path(__file__).parent / "filecheck"


def _snow_opt(argv: list[str]) -> int | None:
    from snowir.tools.snow_opt import main

    return main(argv)


def _snow_run(argv: list[str]) -> int | None:
    from snowir.tools.snow_run import main

    return main(argv)


def _filecheck(argv: list[str]) -> int | None:
    from filecheck.main import main

    return main(["filecheck", *argv])


# what runs in this process: the tools whose start-up (imports) is the cost
IN_PROCESS: dict[str, Callable[[list[str]], int | None]] = {
    "snow-opt": _snow_opt, "snow-run": _snow_run, "filecheck": _filecheck}


class LitScriptError(Exception):
    """A RUN line this runner cannot execute as lit's shell would (say which, not guess)."""


@dataclass
class _Streams:
    """One command's stdin bytes and where its stdout / stderr go."""

    stdin: bytes
    stdout: io.BytesIO = field(default_factory=io.BytesIO)
    stderr: io.BytesIO = field(default_factory=io.BytesIO)
    merged: bool = False  # 2>&1


def discover(paths: Sequence[Path] = (FILECHECK_DIR,)) -> list[lit.Test.Test]:
    """The tests lit finds under `paths`, configured by their lit.cfg."""
    config = lit.LitConfig.LitConfig(
        progname="lit", path=[], diagnostic_level="warning", useValgrind=False, valgrindLeakCheck=False,
        valgrindArgs=[], noExecute=False, debug=False, isWindows=False, order="lexical", params={})
    return lit.discovery.find_tests_for_inputs(config, [str(p) for p in paths])


def relative_name(test: lit.Test.Test) -> str:
    """'nn/fuse_relu.mlir': the path below tests/filecheck."""
    return "/".join(test.path_in_suite)


def run_test(test: lit.Test.Test, tmp: Path) -> tuple[bool, str]:
    """(passed, log) of one lit test; its %t files go under `tmp` (not the work tree)."""
    script = lit.TestRunner.parseIntegratedTestScript(test)
    if isinstance(script, lit.Test.Result):
        return False, f"lit: {script.code.name}: {script.output}"
    tmp_base = tmp / test.path_in_suite[-1]
    substitutions = lit.TestRunner.getDefaultSubstitutions(test, str(tmp), str(tmp_base))
    conditions = {feature: True for feature in test.config.available_features}
    lines = lit.TestRunner.applySubstitutions(script, substitutions, conditions,
                                              recursion_limit=test.config.recursiveExpansionLimit)
    log: list[str] = []
    cwd = os.path.dirname(test.getExecPath())
    for line in lines:
        match = re.fullmatch(lit.TestRunner.kPdbgRegex, line)
        where, command = (match.group(1), match.group(2).strip()) if match else ("RUN", line.strip())
        if not command:
            continue
        log.append(f"# {where}\n$ {command}")
        tree = ShParser(command, False, test.config.pipefail).parse()
        code = _run_tree(tree, test, cwd, log)
        if code != 0:
            log.append(f"# exit code {code}: {where} failed")
            return False, "\n".join(log)
    return True, "\n".join(log)


def _run_tree(node, test: lit.Test.Test, cwd: str, log: list[str]) -> int:
    if isinstance(node, Seq):
        code = _run_tree(node.lhs, test, cwd, log)
        if node.op == "&&":
            return code if code != 0 else _run_tree(node.rhs, test, cwd, log)
        if node.op == "||":
            return code if code == 0 else _run_tree(node.rhs, test, cwd, log)
        if node.op == ";":
            return _run_tree(node.rhs, test, cwd, log)
        raise LitScriptError(f"unsupported shell operator {node.op!r}")
    if not isinstance(node, Pipeline):
        raise LitScriptError(f"unsupported shell construct {node!r}")
    data = b""
    statuses: list[int] = []
    for cmd in node.commands:
        streams = _Streams(stdin=data)
        statuses.append(_run_command(cmd, streams, test, cwd))
        data = streams.stdout.getvalue()
        err = streams.stderr.getvalue()
        if err:
            log.append(f"# {cmd.args[0]} stderr:\n{err.decode(errors='replace').rstrip()}")
    if data:
        log.append(f"# stdout:\n{data.decode(errors='replace').rstrip()}")
    # pipefail (lit's default): the last command to fail sets the status
    failed = [s for s in statuses if s != 0]
    code = (failed[-1] if failed else 0) if node.pipe_err else statuses[-1]
    if node.negate:
        code = 0 if code != 0 else 1
    return code


def _run_command(cmd: Command, streams: _Streams, test: lit.Test.Test, cwd: str) -> int:
    args = list(cmd.args)
    nots = 0
    while args and args[0] == "not":
        nots += 1
        args.pop(0)
    if not args or args[0] == "--crash":
        raise LitScriptError(f"unsupported command {' '.join(cmd.args)!r}")
    out_file = None
    for (op, *fd), target in cmd.redirects:
        if op == "<":
            streams.stdin = Path(target if os.path.isabs(target) else os.path.join(cwd, target)).read_bytes()
        elif op == ">&" and fd == [2] and target == "1":
            streams.merged = True
        elif op in (">", ">>") and not fd:
            out_file = (target if os.path.isabs(target) else os.path.join(cwd, target), op == ">>")
        else:
            raise LitScriptError(f"unsupported redirect {op}{fd} {target} in {' '.join(cmd.args)!r}")
    tool = IN_PROCESS.get(args[0])
    code = _call(args[0], tool, args[1:], streams) if tool else _spawn(args, streams, test, cwd)
    if out_file is not None:
        with open(out_file[0], "ab" if out_file[1] else "wb") as f:
            f.write(streams.stdout.getvalue())
        streams.stdout = io.BytesIO()
    for _ in range(nots):
        code = 0 if code != 0 else 1
    return code


def _call(name: str, tool: Callable[[list[str]], int | None], argv: list[str], streams: _Streams) -> int:
    """`tool(argv)` with sys.stdin/stdout/stderr on the streams; an exception escaping the tool
    ends it as it would end the process: a traceback on stderr, exit code 1."""
    stdin = io.TextIOWrapper(io.BytesIO(streams.stdin), encoding="utf-8")
    stdout = io.TextIOWrapper(streams.stdout, encoding="utf-8", write_through=True)
    stderr = stdout if streams.merged else io.TextIOWrapper(streams.stderr, encoding="utf-8", write_through=True)
    saved = sys.stdin, sys.stdout, sys.stderr, sys.argv
    sys.stdin, sys.stdout, sys.stderr, sys.argv = stdin, stdout, stderr, [name, *argv]  # argparse's prog
    try:
        # a fresh process's warning filters (and its once-per-location registries, which a
        # change of filters resets): what the tool warns about is printed as it would be
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.simplefilter("ignore", category)
            code = tool(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=stderr)
    except BaseException:  # noqa: BLE001 - what the process would have printed before dying
        traceback.print_exc(file=stderr)
        code = 1
    finally:
        for stream in {id(s): s for s in (stdout, stderr)}.values():
            stream.flush()
            stream.detach()  # leave the BytesIO open for the caller
        sys.stdin, sys.stdout, sys.stderr, sys.argv = saved
    return int(code or 0)


def _spawn(args: list[str], streams: _Streams, test: lit.Test.Test, cwd: str) -> int:
    proc = subprocess.run(args, input=streams.stdin, cwd=cwd, env=dict(test.config.environment),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT if streams.merged else subprocess.PIPE)
    streams.stdout.write(proc.stdout)
    if proc.stderr:
        streams.stderr.write(proc.stderr)
    return proc.returncode
