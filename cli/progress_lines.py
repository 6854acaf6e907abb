"""Progress as whole log lines, for output that is not a terminal.

A rich bar redraws one line in place; written to a file (CI, nohup, a service manager) it
became one line cut at 80 columns. :class:`ProgressLines` prints complete sentences such as
``embeddings: 4,096 of 12,277 passages (33%), 59/s, about 2 min left`` instead: the first
report, then one line each time the work moves on by a tenth of the total or 10 s have
passed since the last line (whichever comes first), and the end. It decides when a report
arrives, never on a timer: a job that reports nothing prints nothing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

__all__ = ["ProgressLines", "progress_line"]

STEP = 0.1
"""A line each time this fraction of the total is done: ten lines for a whole job."""
EVERY_S = 10.0
"""…or when this long has passed since the last line, for a slow job's log to show it moving."""


def _rate(per_s: float) -> str:
    return f"{per_s:,.0f}/s" if per_s >= 10 else f"{per_s:.1f}/s"


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{max(1, math.ceil(seconds))} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"


def progress_line(label: str, unit: str, done: int, total: int, elapsed_s: float, rate: float | None) -> str:
    """One sentence: how far, how fast, and the time left (or taken, at the end).

    >>> progress_line("embeddings", "passages", 4096, 12277, 69.4, 59.0)
    'embeddings: 4,096 of 12,277 passages (33%), 59/s, about 2 min left'
    """
    if total <= 0:
        return f"{label}: nothing to do"
    what = f" {unit}" if unit else ""
    line = f"{label}: {done:,} of {total:,}{what} ({100 * done // total}%)"
    if rate:
        line += f", {_rate(rate)}"
    if done >= total:
        return f"{line}, done in {_duration(elapsed_s)}"
    if rate:
        line += f", about {_duration((total - done) / rate)} left"
    return line


class ProgressLines:
    """An ``on_progress(done, total)`` callback that writes :func:`progress_line` now and then."""

    def __init__(
        self,
        write: Callable[[str], None],
        label: str,
        unit: str = "",
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.write = write
        self.label = label
        self.unit = unit
        self.clock = clock
        self._start: tuple[float, int] | None = None  # (time, done) of the first report
        self._last: tuple[float, int] | None = None  # (time, done) of the last line written
        self._finished = False

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        if self._start is None:
            self._start = (now, done)
        if self._finished or not self._due(now, done, total):
            return
        self._finished = done >= total
        started, first = self._start
        elapsed = now - started
        rate = (done - first) / elapsed if elapsed > 0 and done > first else None
        self._last = (now, done)
        self.write(progress_line(self.label, self.unit, done, total, elapsed, rate))

    def _due(self, now: float, done: int, total: int) -> bool:
        if self._last is None or done >= total:
            return True
        at, said = self._last
        return done - said >= STEP * total or (done > said and now - at >= EVERY_S)
