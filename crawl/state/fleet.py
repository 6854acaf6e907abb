"""The state of a crawl as ``trawl crawl status`` and ``GET /v1/crawl/status`` report it.

On a PostgreSQL frontier that is the fleet's: workers alive (heartbeat rows), pages/s
over the last minute, the backlog, and errors by class; on SQLite, the one crawl's
backlog and errors (one process, no heartbeats). On both, the recrawl's lag: fetched
pages whose refetch is due and has not happened, and how long the oldest has waited.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from core.crawldir import CrawlDir
from crawl.state.postgres import PgCrawlDb, is_postgres_url
from crawl.state.sqlite import CrawlDb

__all__ = ["crawl_status", "errors_by_class"]

_WINDOW_S = 60.0


def errors_by_class(status_counts: dict[str, int]) -> dict[str, int]:
    """``status:outcome`` counts → failures by class (``error: timeout`` → ``error``, ``http 503``)."""
    out: dict[str, int] = {}
    for key, n in status_counts.items():
        status, _, outcome = key.partition(":")
        failing = status == "failed" or outcome.startswith(("error", "http 5", "http 429", "robots.txt unav"))
        if failing:
            kind = outcome.split(":", 1)[0] if outcome else status
            out[kind] = out.get(kind, 0) + n
    return out


def crawl_status(data_dir: Path, frontier_url: str | None = None) -> dict[str, Any]:
    """Workers, throughput, backlog and errors of the crawl at ``frontier_url`` (else ``data_dir``'s)."""
    now = time.time()
    db: CrawlDb | PgCrawlDb
    if is_postgres_url(frontier_url):
        db = PgCrawlDb(str(frontier_url), readonly=True)
    elif CrawlDir(data_dir).exists():
        db = CrawlDb(CrawlDir(data_dir).db, readonly=True)
    else:
        return {
            "backend": "sqlite",
            "urls": 0,
            "backlog": 0,
            "done": 0,
            "errors": {},
            "by_status": {},
            "recrawl_overdue": 0,
            "recrawl_oldest_overdue_s": 0.0,
        }
    try:
        counts = db.status_counts()
        status: dict[str, Any] = {
            "backend": "postgresql" if isinstance(db, PgCrawlDb) else "sqlite",
            "urls": sum(counts.values()),
            "backlog": sum(n for k, n in counts.items() if k.split(":", 1)[0] in ("pending", "leased")),
            "done": sum(n for k, n in counts.items() if k.split(":", 1)[0] == "done"),
            "errors": errors_by_class(counts),
            "by_status": counts,
        }
        overdue, since = db.recrawl_overdue(now)
        status["recrawl_overdue"] = overdue
        status["recrawl_oldest_overdue_s"] = round(now - since, 1) if since is not None else 0.0
        if isinstance(db, PgCrawlDb):
            workers = db.workers(now)
            status["workers_alive"] = sum(1 for w in workers if w["alive"])
            status["workers"] = workers
            status["pages_per_s"] = round(db.fetches_since(now - _WINDOW_S) / _WINDOW_S, 2)
    finally:
        db.close()
    return status
