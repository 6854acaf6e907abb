"""Per-host crawl health for the host dashboard and ``GET /v1/hosts``.

Read-only over the crawl database (SQLite WAL lets it run while a crawl writes):
pages done, pending (the host's backlog), failed and blocked, HTTP error classes,
the politeness state (next allowed time, current backoff) and response times.
"""

from __future__ import annotations

import time
from pathlib import Path

from core.crawldir import CrawlDir
from crawl.state.postgres import PgCrawlDb
from crawl.state.records import HostHealth
from crawl.state.sqlite import CrawlDb

__all__ = ["HostHealth", "host_health"]


def host_health(data_dir: Path, *, limit: int = 500, frontier_url: str | None = None) -> list[HostHealth]:
    """Hosts ordered by backlog then errors; empty when the crawl has no database yet.

    ``frontier_url`` reads a PostgreSQL frontier instead of the directory's SQLite file.
    """
    layout = CrawlDir(data_dir)
    db: CrawlDb | PgCrawlDb
    if frontier_url:
        db = PgCrawlDb(frontier_url, readonly=True)
    elif not layout.exists():
        return []
    else:
        db = CrawlDb(layout.db, readonly=True)
    try:
        hosts = db.host_health(time.time())
    finally:
        db.close()
    hosts.sort(key=lambda h: (-h.pending, -(h.failed + h.errors), h.host))
    return hosts[:limit]
