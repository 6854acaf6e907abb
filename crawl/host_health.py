"""Per-host crawl health for the host dashboard and ``GET /v1/hosts``.

Read-only over the crawl database (SQLite WAL lets it run while a crawl writes):
pages done, pending (the host's backlog), failed and blocked, HTTP error classes,
the politeness state (next allowed time, current backoff) and response times.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from core.crawldir import CrawlDir


@dataclass(frozen=True, slots=True)
class HostHealth:
    host: str
    done: int
    pending: int
    failed: int
    blocked: int
    http_4xx: int
    http_5xx: int
    errors: int
    backoff_s: float
    next_allowed_in_s: float
    mean_response_ms: float
    fetches: int


def host_health(data_dir: Path, *, limit: int = 500) -> list[HostHealth]:
    """Hosts ordered by backlog then errors; empty when the crawl has no database yet."""
    path = CrawlDir(data_dir).db
    if not path.exists():
        return []
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    try:
        counts = conn.execute(
            """
            SELECT host,
                   SUM(status = 'done'), SUM(status IN ('pending', 'leased')), SUM(status = 'failed'),
                   SUM(status = 'blocked'),
                   SUM(http_status BETWEEN 400 AND 499), SUM(http_status BETWEEN 500 AND 599)
            FROM urls GROUP BY host
            """
        ).fetchall()
        politeness = {
            row[0]: (row[1], row[2], row[3])
            for row in conn.execute("SELECT host, next_allowed, backoff_s, errors FROM hosts")
        }
        timing: dict[str, tuple[float, int]] = {}
        for host, mean_s, n in conn.execute(
            "SELECT u.host, AVG(f.elapsed_s), COUNT(*) "
            "FROM fetch_log f JOIN urls u ON u.url = f.url GROUP BY u.host"
        ):
            timing[host] = (float(mean_s or 0.0), int(n))
    finally:
        conn.close()
    now = time.time()
    out = []
    for host, done, pending, failed, blocked, c4, c5 in counts:
        next_allowed, backoff, errors = politeness.get(host, (0.0, 0.0, 0))
        mean_s, fetches = timing.get(host, (0.0, 0))
        out.append(
            HostHealth(
                host=host,
                done=int(done or 0),
                pending=int(pending or 0),
                failed=int(failed or 0),
                blocked=int(blocked or 0),
                http_4xx=int(c4 or 0),
                http_5xx=int(c5 or 0),
                errors=int(errors or 0),
                backoff_s=round(float(backoff or 0.0), 3),
                next_allowed_in_s=round(max(0.0, float(next_allowed or 0.0) - now), 3),
                mean_response_ms=round(mean_s * 1000, 1),
                fetches=fetches,
            )
        )
    out.sort(key=lambda h: (-h.pending, -(h.failed + h.errors), h.host))
    return out[:limit]
