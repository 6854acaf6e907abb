"""What one crawl run is made of, built in one place: the crawl database and the frontier
over it, the seen filter, the dedup index, the document, link and WARC stores, the
address guard, the HTTP client with the fetcher on it, and the HTML parse pool.

Why one record: the crawl loop uses every part from its first URL to its last, so it
gets them all at once, already open, rather than creating them as it starts and
checking each for ``None`` afterwards. And the parts that touch the network can be
supplied: an ``httpx.AsyncBaseTransport`` (recording, fault-injecting, a proxy) or a
ready ``httpx.AsyncClient`` goes to the fetcher, a ``Resolver`` to the address guard.

Example: ``parts = CrawlerParts.open(CrawlDir(data), settings, transport=transport)``, then
``await parts.aclose()`` when the run ends.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass

import httpx

from core.crawldir import CrawlDir, worker_folder
from core.dirlock import DirLock
from core.docstore import DocStore
from core.linkgraph import LinkGraphStore
from core.settings import CrawlSettings
from crawl.extraction.dedup import NearDupIndex
from crawl.extraction.parsing import ParsePool
from crawl.fetch.fetcher import Fetcher, make_client
from crawl.fetch.guard import AddressGuard, DnsCache, Resolver, system_resolver
from crawl.frontier.interface import CrawlStore, FrontierApi, open_frontier, open_store
from crawl.frontier.seen import SeenUrls
from crawl.frontier.tiers import load_importance
from crawl.run.warc import WarcSink
from crawl.state.postgres import PgCrawlDb
from crawl.state.sqlite import CrawlDb

logger = logging.getLogger(__name__)

__all__ = ["CrawlerParts"]


def schedule_recrawl(db: CrawlStore, layout: CrawlDir, settings: CrawlSettings) -> int:
    """Make due pages pending again: ``settings.recrawl_budget`` of them, the best first, and
    failed pages ``settings.failed_retry_s`` after their last attempt.

    Importance (PageRank, else inbound links) is read only when a budget has to choose.
    """
    retry = settings.failed_retry_s or None
    if settings.recrawl_budget == 0:
        return db.schedule_recrawl(time.time(), failed_retry_s=retry)
    importance = load_importance(layout.root)
    return db.schedule_recrawl(
        time.time(), budget=settings.recrawl_budget, importance=importance, failed_retry_s=retry
    )


@dataclass(frozen=True, slots=True)
class CrawlerParts:
    """The open collaborators of one crawl run; ``aclose`` releases them."""

    layout: CrawlDir
    db: CrawlDb | PgCrawlDb
    seen: SeenUrls
    frontier: FrontierApi
    dedup: NearDupIndex
    docstore: DocStore
    links: LinkGraphStore
    warc: WarcSink
    guard: AddressGuard
    client: httpx.AsyncClient
    fetcher: Fetcher
    parser: ParsePool
    """HTML parsing in worker processes, off the event loop (``crawl.extraction.parsing``)."""
    owns_client: bool
    """False when the caller passed the client in: the caller closes it."""
    lock: DirLock | None = None
    """The crawl directory's writer lock (``CrawlDir.writer_lock``), released by ``aclose``."""

    @classmethod
    def open(
        cls,
        layout: CrawlDir,
        settings: CrawlSettings,
        *,
        recrawl: bool = False,
        resolver: Resolver = system_resolver,
        transport: httpx.AsyncBaseTransport | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> CrawlerParts:
        """Open the crawl directory (creating it) and build every part over it.

        ``recrawl`` first makes the pages whose next fetch is due pending again.
        ``transport`` goes into the client built here; ``client`` replaces that client.
        """
        if transport is not None and client is not None:
            raise ValueError("Pass a transport or a client, not both: the transport belongs to the client.")
        s = settings
        layout.root.mkdir(parents=True, exist_ok=True)
        with contextlib.ExitStack() as undo:
            # One crawl per directory (a fleet: one per worker name); refused, naming the
            # holder, before anything is opened. Re-entrant: `trawl run` holds it between rounds.
            lock = layout.writer_lock(s.frontier_url, s.worker_id)
            if lock is not None:
                lock.acquire()
                undo.callback(lock.release)
            # ``frontier_url`` names a PostgreSQL frontier shared by a fleet of workers; then
            # this worker writes its documents, edges and WARC files in folders of its own.
            db = open_store(layout, s.frontier_url)
            undo.callback(db.close)
            if isinstance(db, PgCrawlDb):
                db.outage_s = s.db_outage_s
            if recrawl:
                due = schedule_recrawl(db, layout, s)
                logger.info("Recrawl: %d pages due", due)
            seen = SeenUrls(db)
            frontier = open_frontier(s, db, seen, count_existing_pages=not recrawl, worker_id=s.worker_id)
            worker_id = getattr(frontier, "worker_id", None)
            worker = worker_folder(worker_id) if worker_id else None
            dedup = NearDupIndex(s.near_dup_max_distance)
            for url, text_hash, fingerprint in db.indexed_fingerprints():
                dedup.add(url, text_hash, fingerprint)
            warc = WarcSink(
                layout.warc_for(worker),
                max_file_bytes=s.warc_max_file_bytes,
                history=layout.warc,
                gzip_level=s.warc_gzip_level,
            )
            undo.callback(warc.close)
            guard = AddressGuard(
                DnsCache(resolver),
                allow_loopback=s.allow_loopback,
                allow_private=s.allow_private,
                allowed_networks=s.allowed_networks,
            )
            owns_client = client is None
            if client is None:
                # One request in flight per host: a pool smaller than the number of hosts
                # would close and reopen connections constantly, so size it for many hosts.
                client = make_client(
                    timeout_s=s.fetch_timeout_s,
                    max_connections=max(256, 4 * s.concurrency),
                    transport=transport,
                    guard=guard,
                )
            parser = ParsePool(s.parse_workers, timeout_s=s.parse_timeout_s)
            undo.callback(parser.close)
            parts = cls(
                layout=layout,
                db=db,
                seen=seen,
                frontier=frontier,
                dedup=dedup,
                docstore=DocStore(layout.docs, worker=worker, row_segments=True),
                links=LinkGraphStore(layout.links, worker=worker, row_segments=True),
                warc=warc,
                guard=guard,
                client=client,
                fetcher=Fetcher.from_settings(s, client, guard),
                parser=parser,
                owns_client=owns_client,
                lock=lock,
            )
            undo.pop_all()
        return parts

    async def aclose(self) -> None:
        """Close the parse pool, the WARC sink, the database and (when built here) the client."""
        try:
            self.parser.close()
            self.warc.close()
        finally:
            try:
                self.db.close()
            finally:
                try:
                    if self.owns_client:
                        await self.client.aclose()
                finally:
                    if self.lock is not None:
                        self.lock.release()
