"""Where each URL is on its way from the crawl to search: fetch, index and publish times.

One SQLite file per index root (``layout.freshness_file``), written only by the
incremental indexer, read by ``trawl inspect`` and the freshness figures. A row is
replaced whenever its document is applied again, so a replay after a crash leaves one
row per URL. Lags are kept per applied version for the p50/p95 figures.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from retrieval.index.layout import freshness_file

__all__ = ["FreshnessLog", "FreshnessSummary", "UrlFreshness", "percentile"]


@dataclass(frozen=True, slots=True)
class UrlFreshness:
    url: str
    state: str
    """``searchable`` or ``removed``."""
    fetched_at: float | None
    indexed_at: float
    published_at: float
    generation: str
    reason: str


@dataclass(frozen=True, slots=True)
class FreshnessSummary:
    applied: int
    removals: int
    lag_p50_s: float | None
    lag_p95_s: float | None


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class FreshnessLog:
    def __init__(self, root: Path) -> None:
        path = freshness_file(Path(root))
        path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(path, timeout=30, check_same_thread=False)  # one user at a time
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.executescript(
            """
            CREATE TABLE IF NOT EXISTS urls (url TEXT PRIMARY KEY, state TEXT NOT NULL,
                fetched_at REAL, indexed_at REAL NOT NULL, published_at REAL NOT NULL,
                generation TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '');
            CREATE TABLE IF NOT EXISTS lags (version TEXT PRIMARY KEY, at REAL NOT NULL,
                lag_s REAL NOT NULL, removal INTEGER NOT NULL);
            """
        )

    def record(
        self,
        generation: str,
        *,
        indexed: Iterable[tuple[str, str, float | None]],
        removed: Iterable[tuple[str, str, float]],
        indexed_at: float,
        published_at: float,
    ) -> None:
        """``indexed``: (url, content hash, fetched_at); ``removed``: (url, reason, removed at)."""
        urls: list[tuple[object, ...]] = []
        lags: list[tuple[object, ...]] = []
        for url, content_hash, fetched_at in indexed:
            urls.append((url, "searchable", fetched_at, indexed_at, published_at, generation, ""))
            if fetched_at:
                lags.append((f"{url}#{content_hash}", published_at, published_at - fetched_at, 0))
        for url, reason, at in removed:
            urls.append((url, "removed", None, indexed_at, published_at, generation, reason))
            lags.append((f"{url}#removed@{at}", published_at, published_at - at, 1))
        with self._conn:
            self._conn.executemany("INSERT OR REPLACE INTO urls VALUES (?, ?, ?, ?, ?, ?, ?)", urls)
            self._conn.executemany("INSERT OR IGNORE INTO lags VALUES (?, ?, ?, ?)", lags)

    def lookup(self, url: str) -> UrlFreshness | None:
        row = self._conn.execute("SELECT * FROM urls WHERE url = ?", (url,)).fetchone()
        return UrlFreshness(*row) if row else None

    def summary(self, *, window_s: float | None = None) -> FreshnessSummary:
        since = time.time() - window_s if window_s else 0.0
        rows = self._conn.execute("SELECT lag_s, removal FROM lags WHERE at >= ?", (since,)).fetchall()
        lags = [float(lag) for lag, _ in rows]
        return FreshnessSummary(
            applied=len(rows),
            removals=sum(int(r) for _, r in rows),
            lag_p50_s=percentile(lags, 0.5),
            lag_p95_s=percentile(lags, 0.95),
        )

    def close(self) -> None:
        self._conn.close()
