"""What the SQLite and PostgreSQL crawl databases share: the SQL both run and the methods built on it.

``CrawlDbBase`` holds every read and write whose statement and handling are the same on both
engines. A backend supplies the primitives (``_one``, ``_all``, ``_execute``,
``_transaction``, ``_insert_urls``, ``_host_counts``), its lock and its parameter style:
statements here name their parameters ``{name}``, and ``render`` turns them into sqlite3's
``:name`` or psycopg's ``%(name)s`` once per statement and style.
"""

from __future__ import annotations

import functools
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeAlias

from crawl.frontier.tiers import DueCandidate, Importance, choose_due
from crawl.state.records import HostHealth, HostState, NewUrl, UrlUpdate, to_unsigned64

if TYPE_CHECKING:
    from crawl.extraction.dedup import ContentClaim, DupVerdict

logger = logging.getLogger(__name__)

__all__ = ["LEASE_URL", "POSTGRES", "SQLITE", "CrawlDbBase", "Row", "Writer", "render"]

SQLITE = ":{}"
POSTGRES = "%({})s"
"""Parameter styles: how a named parameter is written for sqlite3 and for psycopg."""

Row: TypeAlias = Mapping[str, Any]
"""A result row, read by column name (a ``sqlite3.Row`` or psycopg's ``dict_row``)."""


class Writer(Protocol):
    """What a write transaction hands its block: a ``sqlite3.Connection`` or a psycopg cursor."""

    def execute(self, sql: str, params: Any = ..., /) -> Any: ...
    def executemany(self, sql: str, params: Iterable[Any], /) -> Any: ...


class _Placeholders(dict[str, str]):
    def __init__(self, style: str) -> None:
        super().__init__()
        self.style = style

    def __missing__(self, name: str) -> str:
        return self.style.format(name)


@functools.cache
def render(template: str, style: str) -> str:
    """``template`` with each ``{name}`` written as ``style``'s named parameter (psycopg's literal
    ``%`` doubled, so statements here always run with a parameter mapping, if an empty one)."""
    if style == POSTGRES:
        template = template.replace("%", "%%")
    return template.format_map(_Placeholders(style))


_DUE = (
    "kind = 'page' AND status = 'done' AND next_fetch IS NOT NULL AND fetch_count > 0 "
    "AND (next_fetch <= {now} OR lastmod > last_fetch)"
)
"""Fetched pages whose next fetch has come, or whose sitemap says they changed since."""
_DUE_AT = (
    "CASE WHEN lastmod > last_fetch AND (next_fetch IS NULL OR lastmod < next_fetch) "
    "THEN lastmod ELSE next_fetch END"
)
_RECRAWL_OVERDUE = (
    f"SELECT COUNT(*) AS n, MIN({_DUE_AT}) AS since FROM urls WHERE kind = 'page' AND fetch_count > 0 "
    f"AND status IN ('done', 'pending', 'leased') AND ({_DUE_AT}) <= {{now}}"
)
"""Fetched pages whose refetch has come and has not happened: how many, and the earliest time
one came due (``crawl.frontier.recrawl.due_since`` in SQL)."""
_FAILED_DUE = (
    "UPDATE urls SET status = 'pending', retries = 0 WHERE kind = 'page' AND status = 'failed' "
    "AND COALESCE(last_fetch, 0) <= {before}"
)
"""Failed pages whose last attempt was before ``before``: tried again with fresh retries."""
_SITEMAPS_DUE = (
    "UPDATE urls SET status = 'pending', retries = 0 WHERE kind = 'sitemap' AND status = 'done' "
    "AND fetch_count > 0 AND (next_fetch <= {now} OR (next_fetch IS NULL AND outcome = 'sitemap'))"
)
"""Fetched sitemaps whose refetch has come. One read before refetches were scheduled is due
now; one that redirected (its target is a sitemap of its own) or was too large is not."""
_REQUEUE_DUE = f"UPDATE urls SET status = 'pending', retries = 0 WHERE {_DUE}"
_SELECT_DUE = (
    "SELECT url, discovered_at AS first_fetch, last_fetch, fetch_count, change_count, lastmod "
    f"FROM urls WHERE {_DUE}"
)
_REQUEUE_CHOSEN = "UPDATE urls SET status = 'pending', retries = 0 WHERE url = {url}"
_STALE_CLUSTERS = (
    "SELECT d.dup_of AS url, 1 + COUNT(*) AS size, o.cluster_written AS written "
    "FROM urls d JOIN urls o ON o.url = d.dup_of WHERE d.outcome LIKE 'duplicate%' "
    "GROUP BY d.dup_of, o.cluster_written "
    "HAVING o.cluster_written IS NULL OR (o.cluster_written > 0 AND o.cluster_written != 1 + COUNT(*))"
)
"""Originals whose duplicate cluster size in the docstore is unknown or out of date.

``urls.cluster_written`` is the ``dup_cluster_size`` of the URL's latest docstore version:
NULL when not known (a database from before the column, or after a reprocess), 0 when the
URL has no document."""
_SET_LASTMOD = "UPDATE urls SET lastmod = {when} WHERE url = {url} AND (lastmod IS NULL OR lastmod < {when})"
LEASE_URL = (
    "UPDATE urls SET status = 'leased', lease_until = {until} WHERE url = {url} AND status = 'pending'"
)
"""A URL leased in a batch (``apply``): only while still pending."""
_REQUEUE_DONE = (
    "UPDATE urls SET status = 'pending', retries = 0, priority = {priority} "
    "WHERE url = {url} AND status = 'done'"
)
_SAVE_ROBOTS = (
    "INSERT INTO robots(origin, status, body, fetched_at, expires_at) "
    "VALUES ({origin}, {status}, {body}, {fetched_at}, {expires_at}) "
    "ON CONFLICT (origin) DO UPDATE SET status = excluded.status, body = excluded.body, "
    "fetched_at = excluded.fetched_at, expires_at = excluded.expires_at"
)
_HOST_TIMING = (
    "SELECT u.host, AVG(f.elapsed_s) AS mean_s, COUNT(*) AS n "
    "FROM fetch_log f JOIN urls u ON u.url = f.url GROUP BY u.host"
)


class CrawlDbBase(ABC):
    """The crawl database's methods that run alike on both engines (``frontier.interface.CrawlStore``)."""

    _STYLE: ClassVar[str]
    """``SQLITE`` or ``POSTGRES``: how the backend's driver writes a named parameter."""
    _ORDER: ClassVar[str]
    """The ``urls`` column that follows insertion order (SQLite's ``rowid``, PostgreSQL's ``id``)."""
    _lock: threading.RLock
    """Held by every write on the main connection, across a write of several statements too."""

    def _sql(self, template: str) -> str:
        return render(template, self._STYLE)

    # -- primitives (each backend's) -------------------------------------------

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def _one(self, sql: str, params: Any) -> Row | None:
        """The first row of a read, or None."""

    @abstractmethod
    def _all(self, sql: str, params: Any) -> Sequence[Row]:
        """Every row of a read."""

    def _iter(self, sql: str, params: Any) -> Iterator[Row]:
        """The rows of a read, one at a time where the driver can stream them."""
        yield from self._all(sql, params)

    def _scalar(self, sql: str, params: Any = ()) -> Any:
        row = self._one(sql, params)
        return next(iter(dict(row).values())) if row is not None else None

    @abstractmethod
    def _execute(self, sql: str, params: Any) -> int:
        """Run one write statement on its own, under ``_lock``; returns the rows it changed."""

    @abstractmethod
    def _transaction(self) -> AbstractContextManager[Writer]:
        """One write transaction on the main connection, under ``_lock``; rolled back if the block raises."""

    @abstractmethod
    def _insert_urls(self, cur: Writer, inserts: Sequence[NewUrl], now: float) -> None:
        """Inside ``cur``'s transaction: add the URLs the crawl does not know yet."""

    @abstractmethod
    def _host_counts(self) -> Sequence[Row]:
        """Per host with URLs: ``host``, counts ``done``, ``pending``, ``failed``, ``blocked``, ``c4``,
        ``c5`` (HTTP 4xx, 5xx), and its politeness ``next_allowed``, ``backoff``, ``errors``."""

    # -- what each backend does its own way --------------------------------------

    @abstractmethod
    def knows_host(self, host: str) -> bool:
        """True when the crawl holds a URL of ``host`` (``host[:port]``), whatever its status."""

    @abstractmethod
    def iter_urls(self) -> Iterator[str]: ...

    @abstractmethod
    def record_cluster_sizes(self, sizes: Mapping[str, int]) -> None:
        """Remember the ``dup_cluster_size`` each URL's latest document has (0: no document)."""

    @abstractmethod
    def claim_contents(self, claims: Sequence[ContentClaim], max_distance: int) -> dict[str, DupVerdict]:
        """Claim new documents as their content's originals: ``{url: verdict}`` for each claim lost."""

    @abstractmethod
    def apply(
        self,
        *,
        inserts: Sequence[NewUrl],
        leases: Sequence[tuple[str, float]],
        updates: Sequence[UrlUpdate],
        hosts: Sequence[HostState],
        now: float,
    ) -> None:
        """Write one batch in one transaction: new URLs, leases (url, until), results, host state."""

    # -- reads ---------------------------------------------------------------

    def exists(self, url: str) -> bool:
        return self._one(self._sql("SELECT 1 AS x FROM urls WHERE url = {url}"), {"url": url}) is not None

    def count_urls(self) -> int:
        return int(self._scalar("SELECT COUNT(*) AS n FROM urls", {}))

    def fetch_state(self, url: str) -> Row | None:
        """What a recrawl needs: validators, previous hash, interval, and when it came due."""
        return self._one(
            self._sql(
                "SELECT etag, last_modified, content_hash, interval_s, fetch_count, "
                "next_fetch, lastmod, last_fetch FROM urls WHERE url = {url}"
            ),
            {"url": url},
        )

    def admitted_pages_by_host(self) -> dict[str, int]:
        rows = self._all(
            "SELECT host, COUNT(*) AS n FROM urls WHERE kind = 'page' AND status != 'blocked' GROUP BY host",
            {},
        )
        return {r["host"]: int(r["n"]) for r in rows}

    def host_health(self, now: float) -> list[HostHealth]:
        """Every host with URLs: counts by status and HTTP class, politeness as of ``now``, timing."""
        counts = self._host_counts()
        timing = {r["host"]: (float(r["mean_s"] or 0.0), int(r["n"])) for r in self._all(_HOST_TIMING, {})}
        out = []
        for r in counts:
            mean_s, fetches = timing.get(r["host"], (0.0, 0))
            out.append(
                HostHealth(
                    host=r["host"],
                    done=int(r["done"] or 0),
                    pending=int(r["pending"] or 0),
                    failed=int(r["failed"] or 0),
                    blocked=int(r["blocked"] or 0),
                    http_4xx=int(r["c4"] or 0),
                    http_5xx=int(r["c5"] or 0),
                    errors=int(r["errors"] or 0),
                    backoff_s=round(float(r["backoff"] or 0.0), 3),
                    next_allowed_in_s=round(max(0.0, float(r["next_allowed"] or 0.0) - now), 3),
                    mean_response_ms=round(mean_s * 1000, 1),
                    fetches=fetches,
                    indexed=int(r["indexed"] or 0),
                )
            )
        return out

    def count_finished_pages(self) -> int:
        return int(
            self._scalar(
                "SELECT COUNT(*) AS n FROM urls WHERE kind = 'page' AND status IN ('done', 'failed') "
                "AND fetch_count > 0",
                {},
            )
        )

    def host_states(self) -> dict[str, tuple[float, float, int]]:
        """host → (next_allowed, backoff_s, errors) as of the last commit.

        All three: a resumed frontier writes a host's whole state back with its next
        change, so what it did not read would be overwritten."""
        rows = self._all("SELECT host, next_allowed, backoff_s, errors FROM hosts", {})
        return {r["host"]: (float(r["next_allowed"]), float(r["backoff_s"]), int(r["errors"])) for r in rows}

    def indexed_fingerprints(self) -> Iterator[tuple[str, str, int]]:
        """(url, content_hash, simhash) of every indexed document: dedup's originals."""
        rows = self._iter(
            f"SELECT url, content_hash, simhash FROM urls WHERE outcome = 'indexed' ORDER BY {self._ORDER}",
            {},
        )
        for r in rows:
            yield r["url"], r["content_hash"], to_unsigned64(r["simhash"])

    def row(self, url: str) -> dict[str, Any] | None:
        found = self._one(self._sql("SELECT * FROM urls WHERE url = {url}"), {"url": url})
        return dict(found) if found is not None else None

    def history(self, url: str) -> list[dict[str, Any]]:
        rows = self._all(
            self._sql(
                "SELECT at, http_status, outcome, bytes, elapsed_s FROM fetch_log "
                "WHERE url = {url} ORDER BY at"
            ),
            {"url": url},
        )
        return [dict(r) for r in rows]

    def duplicates_of(self, url: str) -> list[str]:
        rows = self._all(self._sql("SELECT url FROM urls WHERE dup_of = {url} ORDER BY url"), {"url": url})
        return [r["url"] for r in rows]

    def duplicate_counts(self) -> dict[str, int]:
        """original URL → how many URLs were recorded as its exact or near duplicates."""
        rows = self._all(
            self._sql(
                "SELECT dup_of, COUNT(*) AS n FROM urls WHERE outcome LIKE 'duplicate%' GROUP BY dup_of"
            ),
            {},
        )
        return {r["dup_of"]: int(r["n"]) for r in rows}

    def stale_clusters(self) -> dict[str, tuple[int, int | None]]:
        """original URL → (its cluster size now, the size its document was written with or
        None if unknown), for the originals whose document may need rewriting."""
        rows = self._all(self._sql(_STALE_CLUSTERS), {})
        return {r["url"]: (int(r["size"]), None if r["written"] is None else int(r["written"])) for r in rows}

    def recrawl_overdue(self, now: float) -> tuple[int, float | None]:
        """Fetched pages due for a refetch that has not happened, and since when the oldest is due."""
        r = self._one(self._sql(_RECRAWL_OVERDUE), {"now": now})
        if r is None:
            return 0, None
        return int(r["n"]), None if r["since"] is None else float(r["since"])

    def status_counts(self) -> dict[str, int]:
        rows = self._all("SELECT status, outcome, COUNT(*) AS n FROM urls GROUP BY status, outcome", {})
        return {f"{r['status']}:{r['outcome']}" if r["outcome"] else r["status"]: int(r["n"]) for r in rows}

    def load_robots(self, origin: str) -> tuple[int, str, float, float] | None:
        r = self._one(
            self._sql("SELECT status, body, fetched_at, expires_at FROM robots WHERE origin = {origin}"),
            {"origin": origin},
        )
        return (
            (int(r["status"]), str(r["body"]), float(r["fetched_at"]), float(r["expires_at"])) if r else None
        )

    # -- writes --------------------------------------------------------------

    def save_robots(self, policy: Any) -> None:
        self._execute(
            self._sql(_SAVE_ROBOTS),
            {
                "origin": policy.origin,
                "status": policy.status,
                "body": policy.body,
                "fetched_at": policy.fetched_at,
                "expires_at": policy.expires_at,
            },
        )

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
        with self._lock:
            self._execute(self._sql(_SITEMAPS_DUE), {"now": now})
            retried = 0
            if failed_retry_s is not None:
                retried = self._execute(self._sql(_FAILED_DUE), {"before": now - failed_retry_s})
            if retried:
                logger.info("%d failed pages tried again", retried)
            if budget is None:
                return self._execute(self._sql(_REQUEUE_DUE), {"now": now}) + retried
            rows = self._all(self._sql(_SELECT_DUE), {"now": now})
            candidates = (DueCandidate(**dict(row)) for row in rows)
            chosen = choose_due(candidates, now, budget, prior_s=prior_s, importance=importance)
            with self._transaction() as cur:
                cur.executemany(self._sql(_REQUEUE_CHOSEN), [{"url": u} for u in chosen])
        return len(chosen) + retried

    def record_lastmod(self, lastmods: Mapping[str, float]) -> int:
        """Keep sitemap ``<lastmod>`` hints of known URLs (the newest per URL); returns how many
        changed. (A new URL takes its hint in with its ``NewUrl``.)"""
        if not lastmods:
            return 0
        changed = 0
        sql = self._sql(_SET_LASTMOD)
        with self._transaction() as cur:
            for url, when in sorted(lastmods.items()):  # one lock order across workers
                changed += cur.execute(sql, {"when": when, "url": url}).rowcount
        return changed

    def forget_cluster_sizes(self) -> None:
        """The docstore was rebuilt (``trawl reprocess``): every document's size is unknown again."""
        self._execute("UPDATE urls SET cluster_written = NULL WHERE cluster_written IS NOT NULL", {})

    def push(self, inserts: Sequence[NewUrl], now: float) -> None:
        """Queue ``inserts`` ahead of the frontier: new URLs are added; known fetched pages
        (``done``) become pending again at the given priority. Blocked, leased and failed
        URLs are left alone (robots and operator blocks still hold)."""
        if not inserts:
            return
        with self._transaction() as cur:
            self._insert_urls(cur, inserts, now)
            cur.executemany(
                self._sql(_REQUEUE_DONE),
                [{"priority": n.priority, "url": n.url} for n in sorted(inserts, key=lambda n: n.url)],
            )
