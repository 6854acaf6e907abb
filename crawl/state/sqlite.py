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
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crawl.frontier.tiers import DueCandidate, Importance, choose_due

if TYPE_CHECKING:
    from crawl.extraction.dedup import ContentClaim, DupVerdict

logger = logging.getLogger(__name__)

__all__ = [
    "CrawlDb",
    "HostHealth",
    "HostState",
    "NewUrl",
    "Outcome",
    "UrlKind",
    "UrlStatus",
    "UrlUpdate",
    "to_signed64",
    "to_unsigned64",
]


class UrlStatus(StrEnum):
    """Where a URL is in its life; the values are what the ``urls.status`` column holds."""

    PENDING = "pending"
    LEASED = "leased"
    DONE = "done"
    FAILED = "failed"
    BLOCKED = "blocked"


class UrlKind(StrEnum):
    """What a URL is fetched as (``urls.kind``)."""

    PAGE = "page"
    SITEMAP = "sitemap"


class Outcome(StrEnum):
    """What handling a URL found.

    The ``urls.outcome`` column stores one text per outcome, and for four kinds it
    carries a qualifier: the blocking rule (``blocked: robots.txt``), the fetch error
    (``error: timeout``), the exception class (``internal error: KeyError``), the
    duplicate kind (``duplicate (near)``); ``http`` adds the HTTP status (``http 404``).
    The qualifier travels beside the kind (``UrlUpdate.detail``) and is joined only
    when written (:func:`outcome_text`), so code compares kinds, never parses text,
    and databases written before the kinds were typed read the same.
    """

    NONE = ""
    INDEXED = "indexed"
    DUPLICATE = "duplicate"
    CANONICALIZED = "canonicalized"
    NOINDEX = "noindex"
    NOT_HTML = "not html"
    NOT_MODIFIED = "not modified"
    TOO_LARGE = "too large"
    REDIRECT = "redirect"
    FETCHED_VIA_REDIRECT = "fetched via redirect"
    SITEMAP = "sitemap"
    HTTP = "http"
    ERROR = "error"
    BLOCKED = "blocked"
    ROBOTS_UNAVAILABLE = "robots.txt unavailable"
    LEASE_EXPIRED = "lease expired"
    """The lease ran out, or a crawl process died holding it: counted as an attempt."""
    INTERNAL_ERROR = "internal error"
    PARSE_TIMEOUT = "parse timeout"
    """The page took longer than the parse budget; not retried."""


_OUTCOME_FORMATS = {
    Outcome.DUPLICATE: "{kind} ({detail})",
    Outcome.HTTP: "{kind} {detail}",
    Outcome.ERROR: "{kind}: {detail}",
    Outcome.BLOCKED: "{kind}: {detail}",
    Outcome.INTERNAL_ERROR: "{kind}: {detail}",
}


def outcome_text(outcome: Outcome, detail: object = "") -> str:
    """The ``urls.outcome`` text of a kind and its qualifier (the kind alone without one)."""
    if detail == "" or detail is None or outcome not in _OUTCOME_FORMATS:
        return str(outcome)
    return _OUTCOME_FORMATS[outcome].format(kind=outcome.value, detail=detail)


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
    kind: UrlKind = UrlKind.PAGE
    parent: str = ""
    redirects: int = 0
    status: UrlStatus = UrlStatus.PENDING
    blocked_reason: str = ""
    outcome: Outcome = Outcome.NONE
    dup_of: str = ""
    lastmod: float | None = None
    """The sitemap's ``<lastmod>`` of a URL found in one (Unix seconds)."""


@dataclass(frozen=True, slots=True)
class UrlUpdate:
    """The result of handling one leased URL."""

    url: str
    status: UrlStatus
    """``done``, ``failed``, ``blocked`` or ``pending`` (a retry)."""
    outcome: Outcome
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
    detail: str = ""
    """The outcome's qualifier: blocking rule, fetch error, exception class, duplicate kind."""

    @property
    def outcome_text(self) -> str:
        """The stored outcome (``http`` is qualified by the HTTP status)."""
        detail = self.http_status if self.outcome is Outcome.HTTP else self.detail
        return outcome_text(self.outcome, detail)

    def attempt_time(self, now: float) -> float | None:
        """The ``last_fetch`` to store: a failure always records when it was tried (the
        recrawl tries a failed page again ``failed_retry_s`` after its last attempt)."""
        if self.last_fetch is None and self.status == UrlStatus.FAILED:
            return now
        return self.last_fetch

    @property
    def outcome_key(self) -> str:
        """The outcome as crawl statistics count it: the kind, and the status or duplicate kind."""
        if self.outcome in (Outcome.HTTP, Outcome.DUPLICATE):
            return self.outcome_text
        return str(self.outcome)


@dataclass(frozen=True, slots=True)
class HostState:
    """A host's politeness state as the frontier persists it."""

    host: str
    next_allowed: float
    backoff_s: float
    errors: int


@dataclass(frozen=True, slots=True)
class HostHealth:
    """One host's URL counts, politeness state and response times (``crawl.state.host_health``)."""

    host: str
    done: int
    pending: int
    """Pending and leased: the host's backlog."""
    failed: int
    blocked: int
    http_4xx: int
    http_5xx: int
    errors: int
    backoff_s: float
    next_allowed_in_s: float
    mean_response_ms: float
    fetches: int


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def fetch_log_rows(updates: Sequence[UrlUpdate], now: float) -> list[dict[str, object]]:
    """The fetch-log rows of a batch's results, for both frontier backends: one per fetch,
    failure or retry (a deferral that fetched nothing is not a fetch)."""
    return [
        {
            "url": u.url,
            "at": u.last_fetch or now,
            "http_status": u.http_status,
            "outcome": u.outcome_text,
            "bytes": u.bytes,
            "elapsed_s": u.elapsed_s,
        }
        for u in updates
        if u.fetched or u.status == UrlStatus.FAILED or u.retries
    ]


def _params(record: Any, **overrides: object) -> dict[str, object]:
    """A dataclass record's fields as named SQL parameters (``:name``), some values replaced."""
    names = _FIELD_NAMES.get(type(record))
    if names is None:
        names = _FIELD_NAMES[type(record)] = tuple(f.name for f in fields(record))
    params: dict[str, object] = {name: getattr(record, name) for name in names}
    params.update(overrides)
    return params


_DUE = (
    "kind = 'page' AND status = 'done' AND next_fetch IS NOT NULL AND fetch_count > 0 "
    "AND (next_fetch <= :now OR lastmod > last_fetch)"
)
"""Fetched pages whose next fetch has come, or whose sitemap says they changed since."""
_DUE_AT = (
    "CASE WHEN lastmod > last_fetch AND (next_fetch IS NULL OR lastmod < next_fetch) "
    "THEN lastmod ELSE next_fetch END"
)
RECRAWL_OVERDUE = (
    f"SELECT COUNT(*) AS n, MIN({_DUE_AT}) AS since FROM urls WHERE kind = 'page' AND fetch_count > 0 "
    f"AND status IN ('done', 'pending', 'leased') AND ({_DUE_AT}) <= {{now}}"
)
"""Fetched pages whose refetch has come and has not happened: how many, and the earliest time
one came due (``crawl.frontier.recrawl.due_since`` in SQL); ``{now}`` is the backend's parameter."""
_FAILED_DUE = (
    "UPDATE urls SET status = 'pending', retries = 0 WHERE kind = 'page' AND status = 'failed' "
    "AND COALESCE(last_fetch, 0) <= :before"
)
"""Failed pages whose last attempt was before ``:before``: tried again with fresh retries."""
_SITEMAPS_DUE = (
    "UPDATE urls SET status = 'pending', retries = 0 WHERE kind = 'sitemap' AND status = 'done' "
    "AND fetch_count > 0 AND (next_fetch <= :now OR (next_fetch IS NULL AND outcome = 'sitemap'))"
)
"""Fetched sitemaps whose refetch has come. One read before refetches were scheduled is due
now; one that redirected (its target is a sitemap of its own) or was too large is not."""
_COLUMNS_ADDED = (("lastmod", "REAL"), ("cluster_written", "INTEGER"))
"""Columns a database made by an earlier version lacks: added on open, rows kept."""
STALE_CLUSTERS = (
    "SELECT d.dup_of AS url, 1 + COUNT(*) AS size, o.cluster_written AS written "
    "FROM urls d JOIN urls o ON o.url = d.dup_of WHERE d.outcome LIKE 'duplicate%' "
    "GROUP BY d.dup_of, o.cluster_written "
    "HAVING o.cluster_written IS NULL OR (o.cluster_written > 0 AND o.cluster_written != 1 + COUNT(*))"
)
"""Originals whose duplicate cluster size in the docstore is unknown or out of date.

``urls.cluster_written`` is the ``dup_cluster_size`` of the URL's latest docstore version:
NULL when not known (a database from before the column, or after a reprocess), 0 when the
URL has no document. Shared by both backends."""
_SET_LASTMOD = "UPDATE urls SET lastmod = ? WHERE url = ? AND (lastmod IS NULL OR lastmod < ?)"
_INSERT_URL = (
    "INSERT OR IGNORE INTO urls(url, host, kind, depth, priority, status, outcome, "
    "discovered_at, parent, redirects, blocked_reason, dup_of, lastmod) "
    "VALUES (:url, :host, :kind, :depth, :priority, :status, :outcome, "
    ":now, :parent, :redirects, :blocked_reason, :dup_of, :lastmod)"
)
_LEASE_URL = "UPDATE urls SET status = 'leased', lease_until = :until WHERE url = :url AND status = 'pending'"
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


class CrawlDb:
    """One crawl's SQLite database (``CrawlDir.db``)."""

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
        self._write_lock = threading.Lock()

    def _add_missing_columns(self) -> None:
        have = {row[1] for row in self._conn.execute("PRAGMA table_info(urls)")}
        for name, sql_type in _COLUMNS_ADDED:
            if name not in have:
                self._conn.execute(f"ALTER TABLE urls ADD COLUMN {name} {sql_type}")

    def close(self) -> None:
        self._conn.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction under the writer's lock, rolled back if the block raises."""
        with self._write_lock:
            self._conn.execute("BEGIN")
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    # -- reads ---------------------------------------------------------------

    def exists(self, url: str) -> bool:
        return self._conn.execute("SELECT 1 FROM urls WHERE url = ?", (url,)).fetchone() is not None

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

    def count_urls(self) -> int:
        return int(self._conn.execute("SELECT COUNT(*) FROM urls").fetchone()[0])

    def iter_pending(self) -> Iterator[sqlite3.Row]:
        yield from self._conn.execute(
            "SELECT url, host, depth, priority, kind, retries, redirects FROM urls "
            "WHERE status = 'pending' ORDER BY priority DESC, rowid"
        )

    def fetch_state(self, url: str) -> sqlite3.Row | None:
        """What a recrawl needs: validators, previous hash, interval, and when it came due."""
        row: sqlite3.Row | None = self._conn.execute(
            "SELECT etag, last_modified, content_hash, interval_s, fetch_count, "
            "next_fetch, lastmod, last_fetch FROM urls WHERE url = ?",
            (url,),
        ).fetchone()
        return row

    def admitted_pages_by_host(self) -> dict[str, int]:
        rows = self._conn.execute(
            "SELECT host, COUNT(*) FROM urls WHERE kind = 'page' AND status != 'blocked' GROUP BY host"
        )
        return {host: int(n) for host, n in rows}

    def host_health(self, now: float) -> list[HostHealth]:
        """Every host with URLs: counts by status and HTTP class, politeness as of ``now``, timing."""
        counts = self._conn.execute(
            """
            SELECT host,
                   SUM(status = 'done'), SUM(status IN ('pending', 'leased')), SUM(status = 'failed'),
                   SUM(status = 'blocked'),
                   SUM(http_status BETWEEN 400 AND 499), SUM(http_status BETWEEN 500 AND 599)
            FROM urls GROUP BY host
            """
        ).fetchall()
        politeness = {
            host: (float(t or 0.0), float(b or 0.0), int(e or 0))
            for host, t, b, e in self._conn.execute("SELECT host, next_allowed, backoff_s, errors FROM hosts")
        }
        timing = {
            host: (float(mean_s or 0.0), int(n))
            for host, mean_s, n in self._conn.execute(
                "SELECT u.host, AVG(f.elapsed_s), COUNT(*) "
                "FROM fetch_log f JOIN urls u ON u.url = f.url GROUP BY u.host"
            )
        }
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
                    errors=errors,
                    backoff_s=round(backoff, 3),
                    next_allowed_in_s=round(max(0.0, next_allowed - now), 3),
                    mean_response_ms=round(mean_s * 1000, 1),
                    fetches=fetches,
                )
            )
        return out

    def count_finished_pages(self) -> int:
        return int(
            self._conn.execute(
                "SELECT COUNT(*) FROM urls WHERE kind = 'page' AND status IN ('done', 'failed') "
                "AND fetch_count > 0"
            ).fetchone()[0]
        )

    def host_states(self) -> dict[str, tuple[float, float, int]]:
        """host → (next_allowed, backoff_s, errors) as of the last commit.

        All three: a resumed frontier writes a host's whole state back with its next
        change, so what it did not read would be overwritten."""
        rows = self._conn.execute("SELECT host, next_allowed, backoff_s, errors FROM hosts")
        return {host: (float(t), float(b), int(e)) for host, t, b, e in rows}

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

    def stale_clusters(self) -> dict[str, tuple[int, int | None]]:
        """original URL → (its cluster size now, the size its document was written with or
        None if unknown), for the originals whose document may need rewriting."""
        rows = self._conn.execute(STALE_CLUSTERS)
        return {url: (int(size), None if written is None else int(written)) for url, size, written in rows}

    def recrawl_overdue(self, now: float) -> tuple[int, float | None]:
        """Fetched pages due for a refetch that has not happened, and since when the oldest is due."""
        n, since = self._conn.execute(RECRAWL_OVERDUE.format(now=":now"), {"now": now}).fetchone()
        return int(n), None if since is None else float(since)

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
        with self._write_lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO robots(origin, status, body, fetched_at, expires_at) "
                "VALUES (:origin, :status, :body, :fetched_at, :expires_at)",
                {
                    "origin": policy.origin,
                    "status": policy.status,
                    "body": policy.body,
                    "fetched_at": policy.fetched_at,
                    "expires_at": policy.expires_at,
                },
            )

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

    def schedule_recrawl(self, now: float, *, budget: int | None = None, prior_s: float = 86_400.0,
                         importance: Importance = ({}, {}),
                         failed_retry_s: float | None = None) -> int:  # fmt: skip
        """Make fetched pages whose next fetch is due pending again; returns how many.

        With ``budget``, only that many: the due pages with the highest P(changed) ×
        importance (``crawl.frontier.tiers``); the rest stay due for a later round. Due sitemaps
        become pending too, outside the budget and the count: their ``<lastmod>`` is what
        makes the pages they list due. With ``failed_retry_s``, failed pages whose last
        attempt is that old become pending with fresh retries, outside the budget too and
        counted.
        """
        with self._write_lock:
            self._conn.execute(_SITEMAPS_DUE, {"now": now})
            retried = 0
            if failed_retry_s is not None:
                retried = self._conn.execute(_FAILED_DUE, {"before": now - failed_retry_s}).rowcount
            if retried:
                logger.info("%d failed pages tried again", retried)
            if budget is None:
                cursor = self._conn.execute(
                    f"UPDATE urls SET status = 'pending', retries = 0 WHERE {_DUE}", {"now": now}
                )
                return cursor.rowcount + retried
            rows = self._conn.execute(
                "SELECT url, discovered_at AS first_fetch, last_fetch, fetch_count, change_count, lastmod "
                f"FROM urls WHERE {_DUE}",
                {"now": now},
            ).fetchall()
            candidates = (DueCandidate(**dict(row)) for row in rows)
            chosen = choose_due(candidates, now, budget, prior_s=prior_s, importance=importance)
            self._conn.execute("BEGIN")
            self._conn.executemany(
                "UPDATE urls SET status = 'pending', retries = 0 WHERE url = ?", [(u,) for u in chosen]
            )
            self._conn.execute("COMMIT")
        return len(chosen) + retried

    def record_lastmod(self, lastmods: Mapping[str, float]) -> int:
        """Keep sitemap ``<lastmod>`` hints of known URLs (the newest per URL); returns how many
        changed. (A new URL takes its hint in with its ``NewUrl``.)"""
        rows = [(when, url, when) for url, when in lastmods.items()]
        with self._transaction() as conn:
            changed = sum(conn.execute(_SET_LASTMOD, row).rowcount for row in rows)
        return changed

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

    def forget_cluster_sizes(self) -> None:
        """The docstore was rebuilt (``trawl reprocess``): every document's size is unknown again."""
        with self._write_lock:
            self._conn.execute("UPDATE urls SET cluster_written = NULL WHERE cluster_written IS NOT NULL")

    def push(self, inserts: Sequence[NewUrl], now: float) -> None:
        """Queue ``inserts`` ahead of the frontier: new URLs are added; known fetched pages
        (``done``) become pending again at the given priority. Blocked, leased and failed
        URLs are left alone (robots and operator blocks still hold)."""
        with self._write_lock:
            self._conn.execute("BEGIN")
            self._conn.executemany(_INSERT_URL, [_params(n, now=now) for n in inserts])
            self._conn.executemany(
                "UPDATE urls SET status = 'pending', retries = 0, priority = ? "
                "WHERE url = ? AND status = 'done'",
                [(n.priority, n.url) for n in inserts],
            )
            self._conn.execute("COMMIT")

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
            conn.executemany(_INSERT_URL, [_params(n, now=now) for n in inserts])
            conn.executemany(_LEASE_URL, [{"url": url, "until": until} for url, until in leases])
            conn.executemany(
                _UPDATE_URL,
                [
                    _params(
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
            conn.executemany(_SAVE_HOST, [_params(h) for h in hosts])
