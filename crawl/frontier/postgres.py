"""The fleet frontier: the same contract as ``crawl.frontier.sqlite.Frontier``, with the queue in PostgreSQL.

The SQLite frontier keeps the queues in memory because one process owns the crawl. Here
many workers share it, so the database is the queue: leases come from PostgreSQL
(``PgCrawlDb.exchange``: ready host rows locked ``FOR UPDATE SKIP LOCKED``, leased with an
expiry, each with its best pending URLs). ``PgFrontier`` is built in layers, each feeding
the next: what a worker holds between rounds (``crawl.frontier.pg_worker``), the pump that
talks to the database (``crawl.frontier.pg_pump``), and here the contract the crawl loop
calls: new URLs in, leases out, results back, batches for the store step.

A URL's result waits in the batch and is written after the batch's documents
(``write_batch``), exactly as in SQLite; until then the URL stays leased, so nobody fetches
it again. A retry or a deferral goes back to pending in the next round, before its host is
released.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Self

from core.settings import CrawlSettings
from crawl.frontier.base import frontier_options
from crawl.frontier.leases import Batch, Feedback, Lease
from crawl.frontier.pg_pump import PgPump
from crawl.frontier.pg_worker import default_worker_id
from crawl.frontier.seen import SeenUrls
from crawl.state.postgres import PgCrawlDb
from crawl.state.records import NewUrl, UrlStatus, UrlUpdate

logger = logging.getLogger(__name__)

__all__ = ["PgFrontier", "default_worker_id"]


class PgFrontier(PgPump):
    """Leases hosts and URLs from the shared PostgreSQL frontier and batches this worker's results."""

    @classmethod
    def from_settings(
        cls,
        s: CrawlSettings,
        db: PgCrawlDb,
        seen: SeenUrls,
        *,
        count_existing_pages: bool = True,
        worker_id: str | None = None,
    ) -> Self:
        return cls(
            db, seen, worker_id=worker_id, **frontier_options(s), count_existing_pages=count_existing_pages
        )

    @property
    def pending(self) -> int:
        """The fleet's pending URLs as of the last look, plus this worker's not yet inserted."""
        return self._backlog + len(self._unwritten)

    @property
    def in_flight(self) -> int:
        return max(0, len(self._in_flight) - sum(map(len, self._queued.values())))

    def add(self, new: NewUrl) -> bool:
        """Admit a canonical URL this worker has not seen; True when admitted as pending."""
        new_host = new.host not in self._admitted
        if not self._admit(new):
            return False
        # Callers may be waiting for exactly this URL's host: a host new to this worker is
        # worth a round that inserts it at once. A known one is held (by this worker, whose
        # release inserts its URLs, or by another) or had nothing pending, and the timed
        # insert (within 0.25 s) takes the URL.
        if self._waiters and new_host:
            self._starved = True  # the round inserts it, so that a caller can have its host
            self._notify()
        elif self._waiters and len(self._unwritten) == 1 and not self._no_hosts:
            self._notify()
        return new.status == UrlStatus.PENDING

    async def lease(self) -> Lease | None:
        """The next URL of a host the fleet may ask now; None once the crawl is over for this worker."""
        if self._stopping:
            self._start_pump()  # what finished before the stop is still released
            return None
        if self._ready:
            return self._ready.popleft()
        waiter: asyncio.Future[Lease | None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._start_pump(another_caller=True)
        return await waiter

    def finish(self, lease: Lease, update: UrlUpdate, feedback: Feedback) -> bool:
        """Acknowledge a lease with its result; False when the lease had expired. A finished
        URL stays leased to this worker (its lease renewed) until its batch is committed."""
        if not super().finish(lease, update, feedback):
            return False
        if update.status != UrlStatus.PENDING:
            self._unacknowledged.add(lease.url)
        if update.fetched:
            self.fetched += 1
        return True

    # -- persistence ---------------------------------------------------------

    def take_batch(self) -> Batch | None:
        """Hand over the results (and URLs not yet inserted) since the last batch; call on the event loop."""
        if not (self._updates or self._unwritten):
            return None
        batch = Batch(self._unwritten, [], self._updates, [])
        self._unwritten, self._updates = [], []
        self._storing += len(batch.inserts)
        return batch

    def batch_lost(self, batch: Batch) -> None:
        """The batch was not stored (the store step failed): its URLs no longer keep the crawl open."""
        self._storing -= len(batch.inserts)

    def batch_committed(self, batch: Batch) -> None:
        super().batch_committed(batch)
        self._unacknowledged.difference_update(u.url for u in batch.updates)
        self._storing -= len(batch.inserts)
        if batch.inserts and self._waiters:
            self._notify()  # workers may be waiting for exactly these URLs

    def abandon(self) -> None:
        """The run stops without storing its results (a full disk): every URL and host this
        worker holds goes back to the fleet at once and unchanged (no attempt counted), so
        neither the other workers nor a resume wait for the leases to expire."""
        released = self._db.release_leases(self.worker_id, attempt=False)
        if released:
            logger.info("Returned %d URLs this worker could not store to pending", released)

    def commit(self) -> None:
        """Write the releases waiting for a round, then take, write and acknowledge the batch."""
        if self._has_writes():
            self._write_now()
        super().commit()
