"""The first write that fails for lack of space stops the crawl, cleanly.

Fetching on would only fetch pages that cannot be stored: each one work lost, and a
traceback. So a full disk wherever the crawl writes (WARC, docstore, link graph, crawl
database) stops the frontier at once: no more leases, the fetches in flight end and
their URLs stay queued, what was stored is kept, and the run ends with ``DiskFull``
naming the crawl directory and the space left there, which the command says in one
line. Run again once there is space, and the crawl resumes where it stopped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from core.diskspace import database_disk_full, disk_full_at, is_disk_full
from core.errors import DiskFull

logger = logging.getLogger(__name__)

__all__ = ["DiskStop"]


class DiskStop:
    """Recognises a full disk in any failed write and stops the crawl on the first one."""

    def __init__(self, root: Path, stop: Callable[[], None]) -> None:
        self.root = Path(root)
        self._stop = stop
        self.error: DiskFull | None = None
        """The first full disk met, for the run to raise when it has wound down."""

    def caught(self, exc: BaseException) -> bool:
        """True when ``exc`` says a disk is full; the first such stops the crawl (call on its loop)."""
        if not is_disk_full(exc):
            return False
        if self.error is None:
            if database_disk_full(exc):
                self.error = DiskFull("the PostgreSQL frontier's database", None)
            else:
                self.error = disk_full_at(self.root)
            logger.info("Stopping the crawl: %s", self.error)
            self._stop()
        return True
