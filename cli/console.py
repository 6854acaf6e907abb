"""The consoles ``trawl`` prints through, readable line by line when the output is a log.

Rich wraps at 80 columns when its output is not a terminal (a file, a pipe, CI, nohup, a
service manager), so a URL or a one-line message broke in the middle in a log. A console
made here that is not a terminal never wraps what it prints (``soft_wrap``), and tables
and help screens get :data:`LOG_WIDTH` columns unless ``COLUMNS`` says otherwise.
"""

from __future__ import annotations

import os

from rich.console import Console

__all__ = ["LOG_WIDTH", "make_console", "widen_help_for_logs"]

LOG_WIDTH = 160
"""Columns of a table or help screen written to a log: docstring lines (at most ~105
characters) and option help fit without a break in the middle of a sentence."""


def _log_width() -> int | None:
    """None (rich's own choice) when ``COLUMNS`` is set: the user asked for that width."""
    return None if os.environ.get("COLUMNS", "").isdigit() else LOG_WIDTH


def make_console(*, stderr: bool = False) -> Console:
    """Rich's console on stdout (or stderr); one that is not a terminal prints whole lines."""
    console = Console(stderr=stderr)
    if console.is_terminal:
        return console
    return Console(stderr=stderr, soft_wrap=True, width=_log_width())


def widen_help_for_logs() -> None:
    """Help and usage screens on a non-terminal stdout get :data:`LOG_WIDTH` columns.

    Typer makes its own console for them, as wide as ``TERMINAL_WIDTH`` says; called by
    the entry point (not at import, so tests that set ``COLUMNS`` keep their width).
    """
    from typer import rich_utils

    if rich_utils.MAX_WIDTH is None and not Console().is_terminal:
        rich_utils.MAX_WIDTH = _log_width()
