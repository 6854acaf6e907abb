"""A failed ``trawl`` command ends with one line that says what and where, not a traceback.

:class:`TrawlGroup` is the ``trawl`` app's command group: every command runs inside its
``invoke``, so whatever a command raises passes :func:`describe` on its way out. Trawl's
own errors say what to do already; the libraries' are given their place (the file, the
frontier setting, the Ray job). ``trawl --debug …`` prints the traceback first. Exit
status: ``TrawlError.exit_status`` (2 for a command that cannot run as given, as for a
usage error), 1 for every other failure. Typer's own exits and usage errors pass as they are.
"""

from __future__ import annotations

import errno
import traceback
from typing import Any

import typer
from rich.text import Text
from typer.core import TyperGroup

from cli.console import make_console
from core.errors import TrawlError

console = make_console(stderr=True)

FRONTIER_SETTING = "--frontier / TRAWL_CRAWL__FRONTIER_URL"


def _flat(text: str) -> str:
    """``text`` on one line (libraries' messages often span several)."""
    return " ".join(text.split())


def _first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return _flat(lines[0]) if lines else type(exc).__name__


def describe(exc: BaseException) -> tuple[str, int]:
    """(one line, exit status) for a failure."""
    library = type(exc).__module__.partition(".")[0]
    if library == "ray":
        cause = getattr(exc, "cause", None)  # a task's own error, raised again by ray.get
        if isinstance(cause, BaseException) and cause is not exc:
            line, status = describe(cause)
            return f"a Ray task failed: {line}", status
        return f"a Ray worker or task failed: {_first_line(exc)}", 1
    if isinstance(exc, TrawlError):
        return _flat(str(exc)), exc.exit_status
    if library == "psycopg":
        return f"the PostgreSQL frontier ({FRONTIER_SETTING}) failed: {_flat(str(exc))}", 1
    if isinstance(exc, OSError):
        where = f" {exc.filename}" if exc.filename else ""
        if exc.errno == errno.ENOSPC:
            return f"disk full: no space left on the device writing{where or ' a file'}", 1
        if exc.filename:
            return f"{exc.filename}: {exc.strerror or _first_line(exc)}", 1
    if library in ("polars", "pyarrow", "pyo3_runtime"):
        return f"reading data failed ({type(exc).__name__}): {_first_line(exc)}", 1
    return f"{type(exc).__name__}: {_first_line(exc)} (run `trawl --debug …` for the traceback)", 1


class TrawlGroup(TyperGroup):
    """The ``trawl`` group: a failure of any command becomes one line and an exit status."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort):
            raise
        except BaseException as exc:
            if not isinstance(exc, Exception) and type(exc).__name__ != "PanicException":
                raise  # KeyboardInterrupt, SystemExit
            if hasattr(exc, "exit_code"):
                raise  # typer's usage errors (BadParameter, …) print themselves
            if ctx.params.get("debug"):
                traceback.print_exception(exc)
            line, status = describe(exc)
            console.print(Text.assemble(("error:", "red"), " ", line), soft_wrap=True)
            raise typer.Exit(status) from None
