"""One-line diagnostics: every user-facing failure becomes `where: what`."""

from __future__ import annotations

import sys
from collections.abc import Callable

from xdsl.utils.exceptions import ParseError


class SnowError(Exception):
    """An error whose message is already a complete one-line diagnostic."""


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


def run_cli(prog: str, body: Callable[[], int], input_name: str) -> int:
    """A command's body with every failure as one line on stderr (`prog: where: what`), exit 1;
    Ctrl-C exits 130; argparse's own exits pass through."""
    try:
        return body()
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BaseException as e:  # noqa: BLE001 - the one place errors become one line
        if isinstance(e, SystemExit):
            raise
        print(f"{prog}: {one_line(e, input_name)}", file=sys.stderr)
        return 1


def one_line(e: BaseException, input_name: str = "<input>") -> str:
    if isinstance(e, SnowError):
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
