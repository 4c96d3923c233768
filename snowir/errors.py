"""One-line diagnostics: every user-facing failure becomes `where: what`."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable, Sequence

from xdsl.utils.exceptions import ParseError


class SnowError(Exception):
    """An error whose message is already a complete one-line diagnostic."""


def unreadable(path: object, e: OSError) -> SnowError:
    """`path: no such file` for a missing file, as every command says it; else the system's reason."""
    return SnowError(f"{path}: {'no such file' if isinstance(e, FileNotFoundError) else e.strerror or e}")


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line
    return text.strip()


def pipeline_error(e: BaseException) -> str:
    """xDSL's pass-pipeline parse error ("Error parsing ...:\n<where>\n<spec>\n<caret>\n<reason>")
    as one line that keeps where and why."""
    message = str(e.args[0]) if e.args else type(e).__name__
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    where = next((line.removeprefix("pass-pipeline:") for line in lines if line.startswith("pass-pipeline:")), "?")
    reason = lines[-1] if len(lines) > 1 else message
    return f"bad pass pipeline (column {where.split(':')[-1]}): {reason}"


def wants_traceback(argv: Sequence[str] | None = None) -> bool:
    """`--traceback` on the command line, or SNOWIR_TRACEBACK=1: print the full Python traceback."""
    argv = sys.argv[1:] if argv is None else argv
    return "--traceback" in argv or os.environ.get("SNOWIR_TRACEBACK", "") not in ("", "0")


def report_failure(prog: str, e: BaseException, input_name: str, full: bool) -> None:
    """The one-line diagnostic (an internal error also says where it was raised), after the
    full traceback if asked for."""
    if full:
        traceback.print_exception(e, file=sys.stderr)
    line = one_line(e, input_name)
    where = raised_at(e)
    if where is not None and not full:
        line += f" (raised at {where}; --traceback for the full trace)"
    print(f"{prog}: {line}", file=sys.stderr)


BUG_TYPES = (AttributeError, TypeError, KeyError, IndexError, AssertionError, NameError, ZeroDivisionError,
             RecursionError, NotImplementedError)
"""Exceptions no diagnostic raises on purpose: a bug, whose one line says where it was raised."""


def raised_at(e: BaseException) -> str | None:
    """file:line of the innermost frame of a pass or snowir module, for an error that is not a
    diagnostic of its own (a bug in a pass: the author wants to know where)."""
    if not isinstance(e, BUG_TYPES):  # a user's mistake is reported by what it is, not where
        return None
    frames = traceback.extract_tb(e.__traceback__)
    ours = [f for f in frames if "/xdsl/" not in f.filename and "site-packages" not in f.filename]
    frame = (ours or frames)[-1] if frames else None
    if frame is None:
        return None
    path = frame.filename
    for root in ("/passes/", "/snowir/", "/dialects/", "/tools/"):
        if root in path:
            path = root.strip("/") + "/" + path.split(root, 1)[1]
            break
    return f"{path}:{frame.lineno}"


def run_cli(prog: str, body: Callable[[], int], input_name: str, full_traceback: bool | None = None) -> int:
    """A command's body with every failure as one line on stderr (`prog: where: what`), exit 1;
    Ctrl-C exits 130; argparse's own exits pass through. `full_traceback` (default: --traceback
    or SNOWIR_TRACEBACK=1) prints the Python traceback first."""
    full = wants_traceback() if full_traceback is None else full_traceback
    try:
        return body()
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BaseException as e:  # noqa: BLE001 - the one place errors become one line
        if isinstance(e, SystemExit):
            raise
        report_failure(prog, e, input_name, full)
        return 1


def one_line(e: BaseException, input_name: str = "<input>") -> str:
    if isinstance(e, SnowError) or getattr(e, "names_its_file", False):  # hw.ConfigError: "FILE: what"
        return _first_line(str(e))
    if isinstance(e, ParseError):
        loc = e.span.get_location()
        return f"{input_name}:{loc.line}:{loc.col}: error: {_first_line(e.msg)}"
    if isinstance(e, FileNotFoundError):
        return f"{e.filename}: no such file"
    if isinstance(e, (OSError,)) and getattr(e, "filename", None):
        return f"{e.filename}: {e.strerror}"
    message = str(e.args[0]) if e.args else type(e).__name__
    if type(e).__name__ == "ArgSpecParseError":
        return f"{input_name}: error: {pipeline_error(e)}"
    first = _first_line(message)
    if type(e).__name__ in ("VerifyException", "DiagnosticException"):
        return f"{input_name}: error: verification failed: {first}"
    if type(e).__name__ in ("ValueError", "Exception", "PassFailedException"):
        return f"{input_name}: error: {first}"
    return f"{input_name}: error: {type(e).__name__}: {first}"
