"""The frontier interface and its two backends: SQLite (one process, the default), PostgreSQL (a fleet).

Two contracts, both structural (``typing.Protocol``), so the classes satisfy them as they
are (what each pair shares lives in ``crawl.state.base`` and ``crawl.frontier.base``):

* ``CrawlStore``: the crawl database as the crawl loop, the seen filter, robots.txt
  and the dashboards use it (``crawl.state.sqlite.CrawlDb``, ``crawl.state.postgres.PgCrawlDb``).
* ``FrontierApi``: leasing and acknowledging URLs (``crawl.frontier.sqlite.Frontier`` keeps the
  queues in memory over SQLite; ``crawl.frontier.postgres.PgFrontier`` leases hosts from
  PostgreSQL so many workers share one crawl).

``open_store`` picks the backend from the frontier URL (``--frontier`` /
``TRAWL_CRAWL__FRONTIER_URL``): a ``postgresql://`` URL means PostgreSQL, nothing means
the crawl directory's SQLite file.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

from core.crawldir import CrawlDir
from core.settings import CrawlSettings
from crawl.extraction.dedup import ContentClaim, DupVerdict
from crawl.frontier.leases import Batch, Feedback, Lease
from crawl.frontier.postgres import PgFrontier
from crawl.frontier.seen import SeenUrls
from crawl.frontier.sqlite import Frontier
from crawl.frontier.tiers import Importance
from crawl.state.postgres import PgCrawlDb, is_postgres_url
from crawl.state.records import HostHealth, HostState, NewUrl, UrlUpdate
from crawl.state.sqlite import CrawlDb

__all__ = ["CrawlStore", "FrontierApi", "is_postgres_url", "open_frontier", "open_store"]


class CrawlStore(Protocol):
    """The crawl database, whichever engine holds it."""

    def close(self) -> None: ...
    def exists(self, url: str) -> bool: ...
    def knows_host(self, host: str) -> bool: ...
    def iter_urls(self) -> Iterator[str]: ...
    def count_urls(self) -> int: ...
    def row(self, url: str) -> dict[str, Any] | None: ...
    def host_health(self, now: float) -> list[HostHealth]: ...
    def count_finished_pages(self) -> int: ...
    def indexed_fingerprints(self) -> Iterator[tuple[str, str, int]]: ...
    def duplicate_counts(self) -> dict[str, int]: ...
    def stale_clusters(self) -> dict[str, tuple[int, int | None]]: ...
    def record_cluster_sizes(self, sizes: Mapping[str, int]) -> None: ...
    def claim_contents(self, claims: Sequence[ContentClaim], max_distance: int) -> dict[str, DupVerdict]: ...
    def forget_cluster_sizes(self) -> None: ...
    def status_counts(self) -> dict[str, int]: ...
    def load_robots(self, origin: str) -> tuple[int, str, float, float] | None: ...
    def save_robots(self, policy: Any) -> None: ...
    def schedule_recrawl(
        self, now: float, *, budget: int | None = None, prior_s: float = 86_400.0,
        importance: Importance = ({}, {}), failed_retry_s: float | None = None,
    ) -> int: ...  # fmt: skip
    def push(self, inserts: Sequence[NewUrl], now: float) -> None: ...
    def record_lastmod(self, lastmods: Mapping[str, float]) -> int: ...
    def apply(
        self,
        *,
        inserts: Sequence[NewUrl],
        leases: Sequence[tuple[str, float]],
        updates: Sequence[UrlUpdate],
        hosts: Sequence[HostState],
        now: float,
    ) -> None: ...


class FrontierApi(Protocol):
    """What the crawl loop asks of a frontier."""

    @property
    def pending(self) -> int: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def pages_done(self) -> int: ...
    @property
    def uncommitted(self) -> int: ...

    flush_wanted: asyncio.Event
    """Set by the frontier when the loop should commit its batch now, not at its next timed flush."""

    def add(self, new: NewUrl) -> bool: ...
    def surely_seen(self, url: str) -> bool: ...
    def stop(self) -> None: ...
    async def lease(self) -> Lease | None: ...
    def finish(self, lease: Lease, update: UrlUpdate, feedback: Feedback) -> bool: ...
    def defer(self, lease: Lease, feedback: Feedback) -> None: ...
    async def borrow_host(self, host: str, *, wait_s: float) -> bool: ...
    def return_host(self, host: str, feedback: Feedback) -> None: ...
    def take_batch(self) -> Batch | None: ...
    def write_batch(self, batch: Batch) -> None: ...
    def batch_committed(self, batch: Batch) -> None: ...
    def batch_lost(self, batch: Batch) -> None: ...
    def commit(self) -> None: ...
    def abandon(self) -> None: ...


def open_store(layout: CrawlDir, frontier_url: str | None, *, readonly: bool = False) -> CrawlDb | PgCrawlDb:
    """The crawl database: PostgreSQL at ``frontier_url`` when it is one, else ``layout.db``."""
    if is_postgres_url(frontier_url):
        return PgCrawlDb(str(frontier_url), readonly=readonly)
    if frontier_url:
        raise ValueError(f"Unsupported frontier URL {frontier_url!r}: expected postgresql://…")
    return CrawlDb(layout.db, readonly=readonly)


def open_frontier(
    settings: CrawlSettings,
    store: CrawlDb | PgCrawlDb,
    seen: SeenUrls,
    *,
    count_existing_pages: bool = True,
    worker_id: str | None = None,
) -> FrontierApi:
    """The frontier for the store's engine, configured from ``settings``."""
    if isinstance(store, PgCrawlDb):
        return PgFrontier.from_settings(
            settings, store, seen, count_existing_pages=count_existing_pages, worker_id=worker_id
        )
    return Frontier.from_settings(settings, store, seen, count_existing_pages=count_existing_pages)
