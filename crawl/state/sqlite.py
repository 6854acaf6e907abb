"""The crawl database in SQLite: per-URL state, host politeness state, fetch history, robots cache.

SQLite in WAL mode: crash-safe, zero setup, cheap random updates, and readable by
``trawl inspect`` while a crawl runs. The frontier batches its writes and applies a
batch in one transaction (``apply``), after the documents of that batch are on disk,
so an acknowledged URL is always a stored one. ``synchronous=NORMAL`` keeps commits
cheap: in WAL mode it can lose the last transactions on power loss but never corrupts
the database, and a lost acknowledgement only means a page is fetched again. What reads
and writes the same on PostgreSQL lives in ``crawl.state.base``.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from crawl.state.base import LEASE_URL, SQLITE, CrawlDbBase, Row, Writer, render
from crawl.state.records import (
    HostState,
    NewUrl,
    Outcome,
    UrlUpdate,
    fetch_log_rows,
    record_params,
    to_signed64,
)

if TYPE_CHECKING:
    from crawl.extraction.dedup import ContentClaim, DupVerdict

logger = logging.getLogger(__name__)

__all__ = ["CrawlDb"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS urls (
    url TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    kind TEXT NOT NULL DEFAULT 'page',
    depth INTEGER NOT NULL,
    priority REAL NOT NULL,
    status TEXT NOT NULL,
    outcome TEXT NOT NULL DEFAULT '',
    discovered_at REAL NOT NULL,
    parent TEXT NOT NULL DEFAULT '',
    http_status INTEGER,
    content_hash TEXT NOT NULL DEFAULT '',
    simhash INTEGER NOT NULL DEFAULT 0,
    etag TEXT NOT NULL DEFAULT '',
    last_modified TEXT NOT NULL DEFAULT '',
    last_fetch REAL,
    next_fetch REAL,
    interval_s REAL NOT NULL DEFAULT 0,
    retries INTEGER NOT NULL DEFAULT 0,
    redirects INTEGER NOT NULL DEFAULT 0,
    fetch_count INTEGER NOT NULL DEFAULT 0,
    change_count INTEGER NOT NULL DEFAULT 0,
    blocked_reason TEXT NOT NULL DEFAULT '',
    dup_of TEXT NOT NULL DEFAULT '',
    lease_until REAL,
    lastmod REAL,
    cluster_written INTEGER
);
CREATE INDEX IF NOT EXISTS urls_pending ON urls(status, host);
CREATE INDEX IF NOT EXISTS urls_dup_of ON urls(dup_of) WHERE dup_of != '';
CREATE TABLE IF NOT EXISTS hosts (
    host TEXT PRIMARY KEY,
    next_allowed REAL NOT NULL DEFAULT 0,
    backoff_s REAL NOT NULL DEFAULT 0,
    errors INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS fetch_log (
    url TEXT NOT NULL,
    at REAL NOT NULL,
    http_status INTEGER,
    outcome TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    elapsed_s REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS fetch_log_url ON fetch_log(url);
CREATE TABLE IF NOT EXISTS robots (
    origin TEXT PRIMARY KEY,
    status INTEGER NOT NULL,
    body TEXT NOT NULL,
    fetched_at REAL NOT NULL,
    expires_at REAL NOT NULL
);
"""

_COLUMNS_ADDED = (("lastmod", "REAL"), ("cluster_written", "INTEGER"))
"""Columns a database made by an earlier version lacks: added on open, rows kept."""
_INSERT_URL = (
    "INSERT OR IGNORE INTO urls(url, host, kind, depth, priority, status, outcome, "
    "discovered_at, parent, redirects, blocked_reason, dup_of, lastmod) "
    "VALUES (:url, :host, :kind, :depth, :priority, :status, :outcome, "
    ":now, :parent, :redirects, :blocked_reason, :dup_of, :lastmod)"
)
_LEASE_URL = render(LEASE_URL, SQLITE)
_UPDATE_URL = (
    "UPDATE urls SET status = :status, outcome = :outcome, "
    "http_status = COALESCE(:http_status, http_status), "
    "content_hash = CASE WHEN :content_hash != '' THEN :content_hash ELSE content_hash END, "
    "simhash = CASE WHEN :content_hash != '' THEN :simhash ELSE simhash END, "
    "etag = CASE WHEN :fetched THEN :etag ELSE etag END, "
    "last_modified = CASE WHEN :fetched THEN :last_modified ELSE last_modified END, "
    "last_fetch = COALESCE(:last_fetch, last_fetch), next_fetch = :next_fetch, "
    "interval_s = CASE WHEN :interval_s > 0 THEN :interval_s ELSE interval_s END, retries = :retries, "
    "blocked_reason = :blocked_reason, dup_of = :dup_of, fetch_count = fetch_count + :fetched, "
    "change_count = change_count + :changed, lease_until = NULL WHERE url = :url"
)
_LOG_FETCH = (
    "INSERT INTO fetch_log(url, at, http_status, outcome, bytes, elapsed_s) "
    "VALUES (:url, :at, :http_status, :outcome, :bytes, :elapsed_s)"
)
_SAVE_HOST = (
    "INSERT INTO hosts(host, next_allowed, backoff_s, errors) "
    "VALUES (:host, :next_allowed, :backoff_s, :errors) "
    "ON CONFLICT(host) DO UPDATE SET next_allowed = excluded.next_allowed, "
    "backoff_s = excluded.backoff_s, errors = excluded.errors"
)


class CrawlDb(CrawlDbBase):
    """One crawl's SQLite database (``CrawlDir.db``)."""

    _STYLE = SQLITE
    _ORDER = "rowid"

    def __init__(self, path: Path, *, readonly: bool = False) -> None:
        """Open (creating it unless ``readonly``) the database at ``path``.

        ``readonly`` is for dashboards beside a running crawl: it never creates the
        file or the schema and cannot take the writer's lock.
        """
        self.path = path
        if readonly:
            self._conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5, check_same_thread=False)
            self._conn.row_factory = sqlite3.Row
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self._conn.row_factory = sqlite3.Row
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA busy_timeout=5000")
            self._conn.executescript(_SCHEMA)
            self._add_missing_columns()
        # The crawl loop commits batches from a worker thread while the event loop keeps
        # reading and saving robots policies on the same connection: writes take turns.
        self._lock = threading.RLock()

    def _add_missing_columns(self) -> None:
        have = {row[1] for row in self._conn.execute("PRAGMA table_info(urls)")}
        for name, sql_type in _COLUMNS_ADDED:
            if name not in have:
                self._conn.execute(f"ALTER TABLE urls ADD COLUMN {name} {sql_type}")

    def close(self) -> None:
        self._conn.close()

    # -- primitives (``CrawlDbBase``) ------------------------------------------

    def _one(self, sql: str, params: Any) -> Row | None:
        return cast(Row | None, self._conn.execute(sql, params).fetchone())

    def _all(self, sql: str, params: Any) -> list[Row]:
        return cast(list[Row], self._conn.execute(sql, params).fetchall())

    def _iter(self, sql: str, params: Any) -> Iterator[Row]:
        yield from self._conn.execute(sql, params)

    def _execute(self, sql: str, params: Any) -> int:
        with self._lock:
            return self._conn.execute(sql, params).rowcount

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction under the writer's lock, rolled back if the block raises."""
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def _insert_urls(self, cur: Writer, inserts: Sequence[NewUrl], now: float) -> None:
        cur.executemany(_INSERT_URL, [record_params(n, now=now) for n in inserts])

    def _host_counts(self) -> Sequence[Row]:
        """Counts per host, then politeness from ``hosts`` (a host without a row has none yet)."""
        counts = self._conn.execute(
            """
            SELECT host,
                   SUM(status = 'done') AS done, SUM(status = 'done' AND outcome = 'indexed') AS indexed,
                   SUM(status IN ('pending', 'leased')) AS pending,
                   SUM(status = 'failed') AS failed, SUM(status = 'blocked') AS blocked,
                   SUM(http_status BETWEEN 400 AND 499) AS c4, SUM(http_status BETWEEN 500 AND 599) AS c5
            FROM urls GROUP BY host
            """
        ).fetchall()
        politeness = {
            r["host"]: {"next_allowed": r["next_allowed"], "backoff": r["backoff_s"], "errors": r["errors"]}
            for r in self._conn.execute("SELECT host, next_allowed, backoff_s, errors FROM hosts")
        }
        unknown = {"next_allowed": 0.0, "backoff": 0.0, "errors": 0}
        return [{**dict(r), **politeness.get(r["host"], unknown)} for r in counts]

    # -- reads only SQLite has -------------------------------------------------

    def knows_host(self, host: str) -> bool:
        """True when the crawl holds a URL of ``host`` (``host[:port]``), whatever its status.

        The status list lets SQLite answer from the ``(status, host)`` index, one probe per
        status, instead of scanning every URL."""
        row = self._conn.execute(
            "SELECT 1 FROM hosts WHERE host = ? UNION ALL SELECT 1 FROM urls "
            "WHERE status IN ('pending', 'leased', 'done', 'failed', 'blocked') AND host = ? LIMIT 1",
            (host, host),
        ).fetchone()
        return row is not None

    def iter_urls(self) -> Iterator[str]:
        for (url,) in self._conn.execute("SELECT url FROM urls"):
            yield url

    def iter_pending(self) -> Iterator[sqlite3.Row]:
        yield from self._conn.execute(
            "SELECT url, host, depth, priority, kind, retries, redirects FROM urls "
            "WHERE status = 'pending' ORDER BY priority DESC, rowid"
        )

    # -- writes --------------------------------------------------------------

    def release_leases(self, *, max_retries: int | None = None) -> int:
        """Return every leased URL to pending (a crawl process died holding them).

        Each counts as an attempt: a URL that kills the crawler (a bomb, a parser crash)
        would otherwise be fetched again on every resume. With ``max_retries``, one that
        has used them up ends ``failed`` instead.
        """
        with self._transaction() as conn:
            failed = 0
            if max_retries is not None:
                failed = conn.execute(
                    "UPDATE urls SET status = 'failed', outcome = :outcome, lease_until = NULL, "
                    "last_fetch = :now WHERE status = 'leased' AND retries >= :max",
                    {"outcome": Outcome.LEASE_EXPIRED.value, "max": max_retries, "now": time.time()},
                ).rowcount
            released = conn.execute(
                "UPDATE urls SET status = 'pending', retries = retries + 1, outcome = :outcome, "
                "lease_until = NULL WHERE status = 'leased'",
                {"outcome": Outcome.LEASE_EXPIRED.value},
            ).rowcount
        if failed:
            logger.warning("%d URLs leased by crashed runs used up their retries: marked failed", failed)
        return released

    def record_cluster_sizes(self, sizes: Mapping[str, int]) -> None:
        """Remember the ``dup_cluster_size`` each URL's latest document has (0: no document)."""
        if not sizes:
            return
        with self._transaction() as conn:
            conn.executemany(
                "UPDATE urls SET cluster_written = ? WHERE url = ?", [(n, url) for url, n in sizes.items()]
            )

    def claim_contents(self, claims: Sequence[ContentClaim], max_distance: int) -> dict[str, DupVerdict]:
        """No claim is ever lost here: one process crawls a SQLite frontier, and its in-memory
        ``NearDupIndex`` already holds every original (``PgCrawlDb.claim_contents`` arbitrates
        between the workers of a fleet)."""
        return {}

    def apply(
        self,
        *,
        inserts: Sequence[NewUrl],
        leases: Sequence[tuple[str, float]],
        updates: Sequence[UrlUpdate],
        hosts: Sequence[HostState],
        now: float,
    ) -> None:
        """Write one batch in one transaction: new URLs, leases (url, until), results, host state.

        Safe to call from a worker thread while the event loop reads.
        """
        with self._transaction() as conn:
            self._insert_urls(conn, inserts, now)
            conn.executemany(_LEASE_URL, [{"url": url, "until": until} for url, until in leases])
            conn.executemany(
                _UPDATE_URL,
                [
                    record_params(
                        u,
                        last_fetch=u.attempt_time(now),
                        outcome=u.outcome_text,
                        simhash=to_signed64(u.simhash),
                        fetched=int(u.fetched),
                        changed=int(u.changed),
                    )
                    for u in updates
                ],
            )
            conn.executemany(_LOG_FETCH, fetch_log_rows(updates, now))
            conn.executemany(_SAVE_HOST, [record_params(h) for h in hosts])
