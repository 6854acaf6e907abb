"""The crawl database: per-URL state, host politeness state, fetch history, robots cache.

SQLite in WAL mode: crash-safe, zero setup, cheap random updates, and readable by
``trawl inspect`` while a crawl runs. The frontier batches its writes and applies a
batch in one transaction (``apply``), after the documents of that batch are on disk,
so an acknowledged URL is always a stored one. ``synchronous=NORMAL`` keeps commits
cheap: in WAL mode it can lose the last transactions on power loss but never corrupts
the database, and a lost acknowledgement only means a page is fetched again.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["CrawlDb", "NewUrl", "UrlUpdate", "to_signed64", "to_unsigned64"]

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
    lease_until REAL
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

_MASK64 = (1 << 64) - 1


def to_signed64(value: int) -> int:
    """SQLite integers are signed: store a 64-bit fingerprint in two's complement."""
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


def to_unsigned64(value: int) -> int:
    return value & _MASK64


@dataclass(frozen=True, slots=True)
class NewUrl:
    """A URL entering the frontier."""

    url: str
    host: str
    depth: int
    priority: float
    kind: str = "page"
    parent: str = ""
    redirects: int = 0
    status: str = "pending"
    blocked_reason: str = ""
    outcome: str = ""
    dup_of: str = ""


@dataclass(frozen=True, slots=True)
class UrlUpdate:
    """The result of handling one leased URL."""

    url: str
    status: str
    """``done``, ``failed``, ``blocked`` or ``pending`` (a retry)."""
    outcome: str
    http_status: int | None = None
    content_hash: str = ""
    simhash: int = 0
    etag: str = ""
    last_modified: str = ""
    last_fetch: float | None = None
    next_fetch: float | None = None
    interval_s: float = 0.0
    retries: int = 0
    blocked_reason: str = ""
    dup_of: str = ""
    fetched: bool = False
    changed: bool = False
    bytes: int = 0
    elapsed_s: float = 0.0


class CrawlDb:
    """One crawl's SQLite database (``CrawlDir.db``)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA busy_timeout=5000")
        self._conn.executescript(_SCHEMA)

    def close(self) -> None:
        self._conn.close()

    # -- reads ---------------------------------------------------------------

    def exists(self, url: str) -> bool:
        return self._conn.execute("SELECT 1 FROM urls WHERE url = ?", (url,)).fetchone() is not None

    def iter_urls(self) -> Iterator[str]:
        for (url,) in self._conn.execute("SELECT url FROM urls"):
            yield url

    def count_urls(self) -> int:
        return int(self._conn.execute("SELECT COUNT(*) FROM urls").fetchone()[0])

    def iter_pending(self) -> Iterator[sqlite3.Row]:
        yield from self._conn.execute(
            "SELECT url, host, depth, priority, kind, retries, redirects FROM urls "
            "WHERE status = 'pending' ORDER BY priority DESC, rowid"
        )

    def fetch_state(self, url: str) -> sqlite3.Row | None:
        """What a recrawl needs: validators, previous hash and interval."""
        row: sqlite3.Row | None = self._conn.execute(
            "SELECT etag, last_modified, content_hash, interval_s, fetch_count FROM urls WHERE url = ?",
            (url,),
        ).fetchone()
        return row

    def admitted_pages_by_host(self) -> dict[str, int]:
        rows = self._conn.execute(
            "SELECT host, COUNT(*) FROM urls WHERE kind = 'page' AND status != 'blocked' GROUP BY host"
        )
        return {host: int(n) for host, n in rows}

    def count_finished_pages(self) -> int:
        return int(
            self._conn.execute(
                "SELECT COUNT(*) FROM urls WHERE kind = 'page' AND status IN ('done', 'failed') "
                "AND fetch_count > 0"
            ).fetchone()[0]
        )

    def host_states(self) -> dict[str, tuple[float, float]]:
        """host → (next_allowed, backoff_s) as of the last commit."""
        rows = self._conn.execute("SELECT host, next_allowed, backoff_s FROM hosts")
        return {host: (float(t), float(b)) for host, t, b in rows}

    def indexed_fingerprints(self) -> Iterator[tuple[str, str, int]]:
        """(url, content_hash, simhash) of every indexed document: dedup's originals."""
        rows = self._conn.execute(
            "SELECT url, content_hash, simhash FROM urls WHERE outcome = 'indexed' ORDER BY rowid"
        )
        for url, text_hash, simhash in rows:
            yield url, text_hash, to_unsigned64(simhash)

    def row(self, url: str) -> dict[str, Any] | None:
        found = self._conn.execute("SELECT * FROM urls WHERE url = ?", (url,)).fetchone()
        return dict(found) if found is not None else None

    def history(self, url: str) -> list[dict[str, Any]]:
        rows = self._conn.execute(
            "SELECT at, http_status, outcome, bytes, elapsed_s FROM fetch_log WHERE url = ? ORDER BY at",
            (url,),
        )
        return [dict(r) for r in rows]

    def duplicates_of(self, url: str) -> list[str]:
        rows = self._conn.execute("SELECT url FROM urls WHERE dup_of = ? ORDER BY url", (url,))
        return [r[0] for r in rows]

    def duplicate_counts(self) -> dict[str, int]:
        """original URL → how many URLs were recorded as its exact or near duplicates."""
        rows = self._conn.execute(
            "SELECT dup_of, COUNT(*) FROM urls WHERE outcome LIKE 'duplicate%' GROUP BY dup_of"
        )
        return {url: int(n) for url, n in rows}

    def status_counts(self) -> dict[str, int]:
        rows = self._conn.execute("SELECT status, outcome, COUNT(*) FROM urls GROUP BY status, outcome")
        return {f"{status}:{outcome}" if outcome else status: int(n) for status, outcome, n in rows}

    def load_robots(self, origin: str) -> tuple[int, str, float, float] | None:
        found = self._conn.execute(
            "SELECT status, body, fetched_at, expires_at FROM robots WHERE origin = ?", (origin,)
        ).fetchone()
        return (int(found[0]), str(found[1]), float(found[2]), float(found[3])) if found else None

    # -- writes --------------------------------------------------------------

    def save_robots(self, policy: Any) -> None:
        self._conn.execute(
            "INSERT OR REPLACE INTO robots(origin, status, body, fetched_at, expires_at) VALUES (?,?,?,?,?)",
            (policy.origin, policy.status, policy.body, policy.fetched_at, policy.expires_at),
        )

    def release_leases(self) -> int:
        """Return every leased URL to pending (a crawl process died holding them)."""
        cursor = self._conn.execute(
            "UPDATE urls SET status = 'pending', lease_until = NULL WHERE status = 'leased'"
        )
        return cursor.rowcount

    def schedule_recrawl(self, now: float) -> int:
        """Make fetched pages whose next fetch is due pending again; returns how many."""
        cursor = self._conn.execute(
            "UPDATE urls SET status = 'pending', retries = 0 WHERE kind = 'page' AND status = 'done' "
            "AND next_fetch IS NOT NULL AND next_fetch <= ? AND fetch_count > 0",
            (now,),
        )
        return cursor.rowcount

    def apply(
        self,
        *,
        inserts: list[NewUrl],
        leases: list[tuple[str, float]],
        updates: list[UrlUpdate],
        hosts: list[tuple[str, float, float, int]],
        now: float,
    ) -> None:
        """Write one batch in one transaction: new URLs, leases, results, host state."""
        conn = self._conn
        conn.execute("BEGIN")
        try:
            conn.executemany(
                "INSERT OR IGNORE INTO urls(url, host, kind, depth, priority, status, outcome, "
                "discovered_at, parent, redirects, blocked_reason, dup_of) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                [
                    (
                        n.url,
                        n.host,
                        n.kind,
                        n.depth,
                        n.priority,
                        n.status,
                        n.outcome,
                        now,
                        n.parent,
                        n.redirects,
                        n.blocked_reason,
                        n.dup_of,
                    )
                    for n in inserts
                ],
            )
            conn.executemany(
                "UPDATE urls SET status = 'leased', lease_until = ? WHERE url = ? AND status = 'pending'",
                [(until, url) for url, until in leases],
            )
            conn.executemany(
                "UPDATE urls SET status = ?, outcome = ?, http_status = COALESCE(?, http_status), "
                "content_hash = CASE WHEN ? != '' THEN ? ELSE content_hash END, "
                "simhash = CASE WHEN ? != '' THEN ? ELSE simhash END, "
                "etag = CASE WHEN ? THEN ? ELSE etag END, "
                "last_modified = CASE WHEN ? THEN ? ELSE last_modified END, "
                "last_fetch = COALESCE(?, last_fetch), next_fetch = ?, "
                "interval_s = CASE WHEN ? > 0 THEN ? ELSE interval_s END, retries = ?, "
                "blocked_reason = ?, dup_of = ?, fetch_count = fetch_count + ?, "
                "change_count = change_count + ?, lease_until = NULL WHERE url = ?",
                [
                    (
                        u.status,
                        u.outcome,
                        u.http_status,
                        u.content_hash,
                        u.content_hash,
                        u.content_hash,
                        to_signed64(u.simhash),
                        u.fetched,
                        u.etag,
                        u.fetched,
                        u.last_modified,
                        u.last_fetch,
                        u.next_fetch,
                        u.interval_s,
                        u.interval_s,
                        u.retries,
                        u.blocked_reason,
                        u.dup_of,
                        int(u.fetched),
                        int(u.changed),
                        u.url,
                    )
                    for u in updates
                ],
            )
            conn.executemany(
                "INSERT INTO fetch_log(url, at, http_status, outcome, bytes, elapsed_s) VALUES (?,?,?,?,?,?)",
                [
                    (u.url, u.last_fetch or now, u.http_status, u.outcome, u.bytes, u.elapsed_s)
                    for u in updates
                    if u.fetched or u.status == "failed" or u.retries
                ],
            )
            conn.executemany(
                "INSERT INTO hosts(host, next_allowed, backoff_s, errors) VALUES (?,?,?,?) "
                "ON CONFLICT(host) DO UPDATE SET next_allowed = excluded.next_allowed, "
                "backoff_s = excluded.backoff_s, errors = excluded.errors",
                hosts,
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
