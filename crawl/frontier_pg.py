"""The fleet frontier: the same contract as ``crawl.frontier.Frontier``, with the queue in PostgreSQL.

The SQLite frontier keeps the queues in memory because one process owns the crawl.
Here many workers share it, so the database is the queue: ``lease`` asks PostgreSQL
for the host whose time has come (``PgCrawlDb.lease_next``: host row locked ``FOR
UPDATE SKIP LOCKED``, leased with an expiry) and that host's best pending URL.

* **Politeness across the fleet:** a host stays leased from the moment its URL is
  handed out until the response is in; ``finish`` releases it at once with its next
  allowed time (``Politeness``: min delay, response time, Crawl-delay, backoff), so no
  other worker can ask it sooner.
* **Acknowledgement:** the URL's result waits in the batch and is written after the
  batch's documents (``write_batch``), exactly as in SQLite; until then the URL stays
  leased, so nobody fetches it again. A retry or a deferral goes back to pending at once.
* **New URLs** are inserted before each lease request (``ON CONFLICT DO NOTHING``: the
  table's key is the seen check of record), so other workers see them without waiting
  for this worker's next commit.
* **Slow commits are not deaths:** the heartbeat renews the leases of results waiting
  for their batch, so only a worker that stopped (killed, hung) lets leases expire.
* **Dead workers:** expired URL leases return to pending with one more attempt and
  expired host leases are freed, by whichever worker looks first.
* **The end:** a worker stops when nothing is pending, no other worker holds a lease
  (it could still add links), and it has nothing in flight.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from typing import Self

from core.settings import CrawlSettings
from crawl.frontier import Batch, Feedback, Lease, Politeness, _blocked, frontier_options
from crawl.seen import SeenUrls
from crawl.state import HostState, NewUrl, UrlKind, UrlStatus, UrlUpdate
from crawl.state_pg import PgCrawlDb, wait_hint

logger = logging.getLogger(__name__)

__all__ = ["PgFrontier", "default_worker_id"]

_REAP_EVERY_S = 1.0
"""Expired leases are rare (a dead worker); looking for them costs a transaction each time."""
_HEARTBEAT_EVERY_S = 1.0
_INSERT_EVERY_S = 0.25
_INSERT_ROWS = 500
"""New URLs go to the shared frontier when this many wait, at least every ``_INSERT_EVERY_S``,
and at once when nothing else is leasable: one insert per page found would cost three
round trips per page (measured: a third of a worker's time waiting on PostgreSQL)."""
_FINISHED = (UrlStatus.DONE, UrlStatus.FAILED)


def default_worker_id() -> str:
    """``host-pid``: unique among live workers; a restarted process leaves its old leases to expire."""
    return f"{socket.gethostname()}-{os.getpid()}"


class PgFrontier:
    """Leases hosts and URLs from the shared PostgreSQL frontier and batches this worker's results."""

    def __init__(
        self,
        db: PgCrawlDb,
        seen: SeenUrls,
        *,
        worker_id: str | None = None,
        min_delay_s: float = 1.0,
        response_time_factor: float = 2.0,
        max_pages: int = 10_000,
        max_pages_per_host: int = 5_000,
        backoff_base_s: float = 2.0,
        max_backoff_s: float = 600.0,
        lease_s: float = 300.0,
        max_retries: int = 3,
        count_existing_pages: bool = True,
    ) -> None:
        self._db = db
        self._seen = seen
        self.worker_id = worker_id or default_worker_id()
        self.politeness = Politeness(min_delay_s, response_time_factor, backoff_base_s, max_backoff_s)
        self._max_pages = max_pages
        self._max_pages_per_host = max_pages_per_host
        self._lease_s = lease_s
        self._max_retries = max_retries
        self._in_flight: dict[str, Lease] = {}
        self._host_state: dict[str, tuple[float, int]] = {}
        """host → (backoff, errors) as read when it was leased."""
        self._pages_in_flight = 0
        self._leasing = 0
        """Lease requests waiting on the database (they hold a place in the page budget)."""
        self._stopping = False
        self._wakeup = asyncio.Event()
        self._unwritten: list[NewUrl] = []
        self._inserts: list[NewUrl] = []
        self._updates: list[UrlUpdate] = []
        self._unacknowledged: set[str] = set()
        """URLs finished here whose results are not committed yet: their leases are renewed."""
        self._backlog = 0
        self._last_reap = 0.0
        self._last_heartbeat = 0.0
        self._last_insert = 0.0
        self.fetched = 0
        released = db.release_leases(self.worker_id, max_retries=max_retries)
        if released:
            logger.info("Returned %d URLs this worker held before it restarted to pending", released)
        self._admitted = db.admitted_pages_by_host()
        self._pages_done = db.count_finished_pages() if count_existing_pages else 0

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

    def _notify(self) -> None:
        self._wakeup.set()
        self._wakeup = asyncio.Event()

    @property
    def pending(self) -> int:
        """The fleet's pending URLs as of the last look, plus this worker's not yet inserted."""
        return self._backlog + len(self._unwritten)

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    @property
    def pages_done(self) -> int:
        return self._pages_done

    def add(self, new: NewUrl) -> bool:
        """Admit a canonical URL this worker has not seen; True when admitted as pending."""
        if not self._seen.add_if_new(new.url):
            return False
        if new.status == UrlStatus.PENDING and new.kind == UrlKind.PAGE:
            admitted = self._admitted.get(new.host, 0)
            if admitted >= self._max_pages_per_host:
                self._unwritten.append(_blocked(new, "host page budget reached"))
                return False
            self._admitted[new.host] = admitted + 1
        self._unwritten.append(new)
        self._notify()
        return new.status == UrlStatus.PENDING

    def stop(self) -> None:
        self._stopping = True
        self._notify()

    def _budget_left(self) -> bool:
        return self._pages_done + self._pages_in_flight + self._leasing < self._max_pages

    def _write_new_urls(self) -> None:
        self._last_insert = time.time()
        if not self._unwritten:
            return
        written, self._unwritten = self._unwritten, []
        self._db.insert_urls(written, time.time())
        self._seen.committed(n.url for n in written)

    def _housekeeping(self, now: float) -> None:
        if now - self._last_reap >= _REAP_EVERY_S:
            self._last_reap = now
            for url, lease in list(self._in_flight.items()):
                if lease.expires_at <= now:
                    logger.warning("Lease on %s expired; returning it to pending", url)
                    self._end_lease(lease)
            self._db.reap_expired(now, max_retries=self._max_retries)
        if now - self._last_heartbeat >= _HEARTBEAT_EVERY_S:
            self._last_heartbeat = now
            self.heartbeat(now)
            # A result waiting for its batch is not a dead worker's: keep it leased until stored.
            self._db.renew_leases(self.worker_id, list(self._unacknowledged), now + self._lease_s)

    def heartbeat(self, now: float | None = None) -> None:
        """Tell the fleet this worker is alive, with its counters (``trawl crawl status`` reads them)."""
        self._db.heartbeat(
            self.worker_id,
            time.time() if now is None else now,
            {"pages_done": self._pages_done, "fetched": self.fetched, "in_flight": len(self._in_flight)},
        )

    async def lease(self) -> Lease | None:
        """The next URL of a host the fleet may ask now; None once the crawl is over for this worker."""
        while True:
            if self._stopping:
                return None
            wakeup = self._wakeup
            now = time.time()
            if len(self._unwritten) >= _INSERT_ROWS or now - self._last_insert >= _INSERT_EVERY_S:
                self._write_new_urls()
            self._housekeeping(now)
            if self._budget_left():
                # Off the event loop: fetches in flight go on while PostgreSQL answers (waiting
                # here on the loop left a worker idle a third of its time on a busy machine).
                self._leasing += 1
                try:
                    row = await asyncio.to_thread(
                        self._db.lease_next, self.worker_id, now, now + self._lease_s
                    )
                finally:
                    self._leasing -= 1
                if row is not None:
                    return self._make_lease(row, now + self._lease_s)
                if self._unwritten:  # nothing leasable in the fleet's rows: maybe among ours
                    self._write_new_urls()
                    continue
                pending, others = self._db.backlog(self.worker_id)
                self._backlog = pending
                if not (pending or others or self._in_flight or self._unwritten):
                    return None
                timeout = wait_hint(self._db.next_ready_at(), time.time())
            elif not self._in_flight:
                return None
            else:
                timeout = 0.25
            try:
                await asyncio.wait_for(wakeup.wait(), timeout=timeout)
            except TimeoutError:
                pass

    def _make_lease(self, row: dict[str, object], expires_at: float) -> Lease:
        host = str(row["host"])
        kind = UrlKind(str(row["kind"]))
        lease = Lease(
            url=str(row["url"]),
            host=host,
            depth=int(row["depth"]),  # type: ignore[call-overload]
            kind=kind,
            priority=float(row["priority"]),  # type: ignore[arg-type]
            retries=int(row["retries"]),  # type: ignore[call-overload]
            redirects=int(row["redirects"]),  # type: ignore[call-overload]
            etag=str(row["etag"]),
            last_modified=str(row["last_modified"]),
            previous_hash=str(row["content_hash"]),
            interval_s=float(row["interval_s"]),  # type: ignore[arg-type]
            fetch_count=int(row["fetch_count"]),  # type: ignore[call-overload]
            has_history=bool(row["has_history"]),
            expires_at=expires_at,
        )
        self._host_state[host] = (float(row["backoff_s"]), int(row["errors"]))  # type: ignore[arg-type, call-overload]
        self._in_flight[lease.url] = lease
        if kind == UrlKind.PAGE:
            self._pages_in_flight += 1
        return lease

    def _end_lease(self, lease: Lease) -> bool:
        if self._in_flight.get(lease.url) is not lease:
            return False
        del self._in_flight[lease.url]
        if lease.kind == UrlKind.PAGE:
            self._pages_in_flight -= 1
        return True

    def _release_host(self, host: str, feedback: Feedback) -> None:
        backoff, errors = self._host_state.pop(host, (0.0, 0))
        delay, backoff = self.politeness.after(feedback, backoff)
        if feedback.error:
            errors += 1
        next_allowed = time.time() + delay if (feedback.requested or delay > 0) else 0.0
        self._db.release_host(self.worker_id, HostState(host, next_allowed, backoff, errors))
        self._notify()

    def finish(self, lease: Lease, update: UrlUpdate, feedback: Feedback) -> bool:
        """Acknowledge a lease with its result; False when the lease had expired."""
        if not self._end_lease(lease):
            return False
        if update.status == UrlStatus.PENDING:
            self._db.requeue(self.worker_id, lease.url, update.retries, update.outcome_text)
        else:
            self._unacknowledged.add(lease.url)
            if lease.kind == UrlKind.PAGE and update.status in _FINISHED and update.fetched:
                self._pages_done += 1
        if update.fetched:
            self.fetched += 1
        self._updates.append(update)
        self._release_host(lease.host, feedback)
        return True

    def defer(self, lease: Lease, feedback: Feedback) -> None:
        """Put a leased URL back unchanged (its slot was spent on robots.txt)."""
        if not self._end_lease(lease):
            return
        self._db.requeue(self.worker_id, lease.url, lease.retries, None)
        self._release_host(lease.host, feedback)

    @property
    def uncommitted(self) -> int:
        return len(self._updates) + len(self._unwritten)

    def take_batch(self) -> Batch | None:
        """Hand over the results (and URLs not yet inserted) since the last batch; call on the event loop."""
        if not (self._updates or self._unwritten):
            return None
        batch = Batch(self._unwritten, [], self._updates, [])
        self._unwritten, self._updates = [], []
        return batch

    def write_batch(self, batch: Batch) -> None:
        self._db.apply(inserts=batch.inserts, leases=[], updates=batch.updates, hosts=[], now=time.time())

    def batch_committed(self, batch: Batch) -> None:
        self._seen.committed(new.url for new in batch.inserts)
        self._unacknowledged.difference_update(u.url for u in batch.updates)

    def commit(self) -> None:
        batch = self.take_batch()
        if batch is not None:
            self.write_batch(batch)
            self.batch_committed(batch)
