"""The crawl database in PostgreSQL: one frontier shared by every crawl worker of a fleet.

The same tables as the SQLite database plus what coordination needs (``crawl.state.pg_schema``).
``urls.url`` is the primary key, so an ``INSERT … ON CONFLICT DO NOTHING`` is the seen check of
record (each worker's Bloom filter only saves the round trip for repeats). ``hosts`` rows are
leased, so one request per host is in flight across the fleet (``crawl.state.pg_leasing``);
``robots`` is shared, so a host's robots.txt is fetched once per fleet; ``workers`` holds a
heartbeat per worker for ``trawl crawl status``.

``PgCrawlDb`` is assembled from its jobs: the reads and writes both engines share
(``crawl.state.base``), connections (``pg_session``), leasing (``pg_leasing``), content
claims (``pg_claims``) and batch writes (``pg_batch``); what is left here differs from SQLite.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from crawl.frontier.tiers import Importance
from crawl.state.pg_batch import SET_CLUSTER_SIZES, write_results
from crawl.state.pg_claims import PgContentClaims
from crawl.state.pg_leasing import PgLeasing
from crawl.state.pg_schema import ensure_schema
from crawl.state.pg_session import retry_on_conflict
from crawl.state.records import HostState, NewUrl, UrlUpdate

__all__ = ["PgCrawlDb", "is_postgres_url"]


def is_postgres_url(url: str | None) -> bool:
    """True for a ``postgresql://`` (or ``postgres://``) frontier URL."""
    return bool(url) and str(url).startswith(("postgresql://", "postgres://"))


class PgCrawlDb(PgLeasing, PgContentClaims):
    """One crawl's PostgreSQL database; the methods of ``crawl.state.sqlite.CrawlDb`` plus leasing."""

    def __init__(self, dsn: str, *, readonly: bool = False) -> None:
        super().__init__(dsn)
        if not readonly:
            self._ensure_schema()

    @retry_on_conflict
    def _ensure_schema(self) -> None:
        with self._lock:
            ensure_schema(self._conn)

    def _host_counts(self) -> list[dict[str, Any]]:
        return self._all(
            """
            SELECT u.host,
                   COUNT(*) FILTER (WHERE status = 'done') AS done,
                   COUNT(*) FILTER (WHERE status = 'done' AND outcome = 'indexed') AS indexed,
                   COUNT(*) FILTER (WHERE status IN ('pending', 'leased')) AS pending,
                   COUNT(*) FILTER (WHERE status = 'failed') AS failed,
                   COUNT(*) FILTER (WHERE status = 'blocked') AS blocked,
                   COUNT(*) FILTER (WHERE http_status BETWEEN 400 AND 499) AS c4,
                   COUNT(*) FILTER (WHERE http_status BETWEEN 500 AND 599) AS c5,
                   MAX(h.next_allowed) AS next_allowed, MAX(h.backoff_s) AS backoff, MAX(h.errors) AS errors
            FROM urls u LEFT JOIN hosts h ON h.host = u.host GROUP BY u.host ORDER BY u.host
            """
        )

    # -- reads ---------------------------------------------------------------

    def knows_host(self, host: str) -> bool:
        """As ``CrawlDb.knows_host``: every host with URLs has a ``hosts`` row here (``insert_urls``)."""
        return self._one("SELECT 1 AS x FROM hosts WHERE host = %s", (host,)) is not None

    def iter_urls(self) -> Iterator[str]:
        import psycopg  # lazy: as ``crawl.state.pg_session.connect``

        with psycopg.connect(self.dsn) as conn, conn.cursor(name="iter_urls") as cursor:
            cursor.execute("SELECT url FROM urls")
            for (url,) in cursor:
                yield url

    def workers(self, now: float, *, alive_s: float = 30.0) -> list[dict[str, Any]]:
        """Every worker that ever heartbeat: alive when its last heartbeat is within ``alive_s``."""
        rows = self._all("SELECT worker, started_at, heartbeat_at, counters FROM workers ORDER BY worker")
        return [
            {
                "worker": r["worker"],
                "alive": now - float(r["heartbeat_at"]) <= alive_s,
                "heartbeat_age_s": round(now - float(r["heartbeat_at"]), 1),
                **dict(r["counters"] or {}),
            }
            for r in rows
        ]

    def fetches_since(self, since: float) -> int:
        """Fetches the fleet logged after ``since`` (pages/s over a window)."""
        return int(self._scalar("SELECT COUNT(*) FROM fetch_log WHERE at > %s", (since,)))

    # -- writes (the shared ones run again when chosen as a deadlock victim) ---

    @retry_on_conflict
    def schedule_recrawl(self, now: float, *, budget: int | None = None, prior_s: float = 86_400.0,
                         importance: Importance = ({}, {}),
                         failed_retry_s: float | None = None) -> int:  # fmt: skip
        return super().schedule_recrawl(
            now, budget=budget, prior_s=prior_s, importance=importance, failed_retry_s=failed_retry_s
        )

    @retry_on_conflict
    def record_lastmod(self, lastmods: Mapping[str, float]) -> int:
        return super().record_lastmod(lastmods)

    @retry_on_conflict
    def push(self, inserts: Sequence[NewUrl], now: float) -> None:
        super().push(inserts, now)

    @retry_on_conflict
    def record_cluster_sizes(self, sizes: Mapping[str, int]) -> None:
        """As ``CrawlDb.record_cluster_sizes``, in one statement: one per URL cost the batch
        writer as much client CPU as the batch's results."""
        if not sizes:
            return
        urls = sorted(sizes)  # one lock order across workers
        with self._lock:
            self._conn.execute(SET_CLUSTER_SIZES, {"urls": urls, "sizes": [sizes[u] for u in urls]})

    @retry_on_conflict
    def apply(
        self,
        *,
        inserts: Sequence[NewUrl],
        leases: Sequence[tuple[str, float]],
        updates: Sequence[UrlUpdate],
        hosts: Sequence[HostState],
        now: float,
    ) -> None:
        """Write one batch in one transaction (``CrawlDb.apply``'s contract); any thread may call it."""
        with self._batch_transaction() as cur:
            self._insert_urls(cur, inserts, now)
            write_results(cur, leases, updates, hosts, now)
