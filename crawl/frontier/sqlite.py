"""The two-level frontier (Mercator) over SQLite: priority order within each host, politeness across hosts.

* **Back queues:** one priority heap of pending URLs per host (seeds and sitemap entries
  first, then shallower links). **Host heap:** hosts ordered by the time they may next be
  asked; a worker takes the host at the top once its time has come, so at most one request
  is in flight per host (``Politeness``: min delay, response time, Crawl-delay, backoff).
* **Leases:** a URL handed to a worker is leased; it is acknowledged (``finish``) when its
  result is stored, and a lease that expires returns the URL to its queue.
* **Persistence:** every change goes into a batch the crawl loop commits to SQLite after
  it has written that batch's documents (``take_batch``, ``write_batch``,
  ``batch_committed``), so a crash resumes from the database: leased URLs pending again,
  finished ones finished. Pending URLs are held in memory, bounded by the page budgets;
  spilling back queues to disk, as Mercator does, is the next step for many millions.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from typing import NamedTuple, Self, Unpack

from core.settings import CrawlSettings
from crawl.frontier.base import FrontierBase, FrontierOptions, frontier_options, wanting
from crawl.frontier.leases import Batch, Feedback, Lease
from crawl.frontier.recrawl import due_since
from crawl.frontier.seen import SeenUrls
from crawl.state.records import HostState, NewUrl, Outcome, UrlKind, UrlStatus, UrlUpdate
from crawl.state.sqlite import CrawlDb

logger = logging.getLogger(__name__)

__all__ = ["Frontier"]


class _Queued(NamedTuple):
    """A pending URL in its host's heap; a tuple so the heap compares it in C.

    Ordered by ``neg_priority`` then ``seq`` (unique), so the other fields are never compared.
    """

    neg_priority: float
    seq: int
    url: str
    depth: int
    kind: UrlKind
    retries: int
    redirects: int
    has_history: bool
    """False for URLs discovered in this run: they have no validators or previous hash
    in the table, so leasing them needs no table lookup."""


class Frontier(FrontierBase[CrawlDb]):
    """Schedules leases across hosts and batches crawl-state writes for SQLite."""

    def __init__(
        self,
        db: CrawlDb,
        seen: SeenUrls,
        *,
        count_existing_pages: bool = True,
        **options: Unpack[FrontierOptions],
    ) -> None:
        super().__init__(db, seen, **options)
        self._seq = itertools.count()
        self._queues: dict[str, list[_Queued]] = {}
        self._ready: list[tuple[float, str]] = []
        self._scheduled: dict[str, float] = {}
        self._next_allowed: dict[str, float] = {}
        self._backoff: dict[str, float] = {}
        self._errors: dict[str, int] = {}
        self._busy: set[str] = set()
        # ``flush_wanted`` is never set: one process owns the crawl, so no other worker waits
        # for its commits.
        self._leases: list[tuple[str, float]] = []
        self._dirty_hosts: set[str] = set()
        self._admitted = db.admitted_pages_by_host()
        self._pages_done = db.count_finished_pages() if count_existing_pages else 0
        released = db.release_leases(max_retries=self._max_retries)
        if released:
            logger.info("Returned %d URLs leased by a previous run to pending", released)
        for host, (next_allowed, backoff, errors) in db.host_states().items():
            self._next_allowed[host] = next_allowed
            self._backoff[host] = backoff
            self._errors[host] = errors  # a host's next write stores the total, not the count since resume
        loaded = 0
        for row in db.iter_pending():
            self._push(
                row["host"],
                _Queued(
                    neg_priority=-row["priority"],
                    seq=next(self._seq),
                    url=row["url"],
                    depth=row["depth"],
                    kind=UrlKind(row["kind"]),
                    retries=row["retries"],
                    redirects=row["redirects"],
                    has_history=True,
                ),
            )
            loaded += 1
        if loaded:
            logger.info("Frontier resumed with %d pending URLs", loaded)

    @classmethod
    def from_settings(
        cls, s: CrawlSettings, db: CrawlDb, seen: SeenUrls, *, count_existing_pages: bool = True
    ) -> Self:
        return cls(db, seen, **frontier_options(s), count_existing_pages=count_existing_pages)

    # -- queues --------------------------------------------------------------

    def _push(self, host: str, item: _Queued) -> None:
        queue = self._queues.setdefault(host, [])
        heapq.heappush(queue, item)
        self._schedule(host)

    def _schedule(self, host: str) -> None:
        if (
            host in self._busy
            or host in self._wanted
            or host in self._scheduled
            or not self._queues.get(host)
        ):
            return
        at = self._next_allowed.get(host, 0.0)
        self._scheduled[host] = at
        heapq.heappush(self._ready, (at, host))
        self._notify()

    @property
    def pending(self) -> int:
        return sum(len(q) for q in self._queues.values())

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def add(self, new: NewUrl) -> bool:
        """Admit a canonical URL if it was never seen; True when admitted as pending.

        A page over its host's budget is recorded as blocked, so the seen filter
        stops it from coming back and ``inspect`` can say why.
        """
        if not self._admit(new):
            return False
        if new.status == UrlStatus.PENDING:
            self._push(
                new.host,
                _Queued(
                    -new.priority, next(self._seq), new.url, new.depth, new.kind, 0, new.redirects, False
                ),
            )
            return True
        return False

    # -- leasing -------------------------------------------------------------

    def _budget_left(self) -> bool:
        return self._pages_done + self._pages_in_flight < self._max_pages

    async def lease(self) -> Lease | None:
        """The next URL whose host may be asked now, waiting as long as politeness needs.

        Returns None when the crawl is over: stopped, out of budget, or nothing left
        pending and nothing in flight that could add more.
        """
        while True:
            if self._stopping:
                return None
            wakeup = self._wakeup
            self._reap_expired()
            now = time.time()
            while self._ready:
                at, host = self._ready[0]
                if (
                    self._scheduled.get(host) != at
                    or host in self._busy
                    or host in self._wanted
                    or not self._queues.get(host)
                ):
                    heapq.heappop(self._ready)
                    if self._scheduled.get(host) == at:
                        del self._scheduled[host]
                    continue
                break
            if not self._budget_left() or not self._ready:
                if not (self._in_flight or self._borrowed or self._wanted):
                    return None
                try:  # bounded, so expired leases are reaped even if nothing else happens
                    await asyncio.wait_for(wakeup.wait(), timeout=1.0)
                except TimeoutError:
                    pass
                continue
            at, host = self._ready[0]
            if at > now:
                try:
                    await asyncio.wait_for(wakeup.wait(), timeout=at - now)
                except TimeoutError:
                    pass
                continue
            heapq.heappop(self._ready)
            del self._scheduled[host]
            item = heapq.heappop(self._queues[host])
            return self._make_lease(host, item)

    def _make_lease(self, host: str, item: _Queued) -> Lease:
        url = item.url
        state = self._db.fetch_state(url) if item.has_history else None
        expires_at = time.time() + self._lease_s
        lease = Lease(
            url=url,
            host=host,
            depth=item.depth,
            kind=item.kind,
            priority=-item.neg_priority,
            retries=item.retries,
            redirects=item.redirects,
            etag=state["etag"] if state else "",
            last_modified=state["last_modified"] if state else "",
            previous_hash=state["content_hash"] if state else "",
            interval_s=state["interval_s"] if state else 0.0,
            fetch_count=state["fetch_count"] if state else 0,
            due_at=due_since(state["next_fetch"], state["lastmod"], state["last_fetch"])
            if state and state["fetch_count"]
            else 0.0,
            has_history=item.has_history,
            expires_at=expires_at,
        )
        self._busy.add(host)
        self._in_flight[url] = lease
        if item.kind == UrlKind.PAGE:
            self._pages_in_flight += 1
        self._leases.append((url, expires_at))
        return lease

    def _reap_expired(self) -> None:
        now = time.time()
        for url, lease in list(self._in_flight.items()):
            if lease.expires_at <= now:
                # An expired lease is an attempt: a URL that hangs its worker every time
                # must end failed, not come back for ever.
                self._end_lease(lease)
                if lease.retries >= self._max_retries:
                    logger.warning("Lease on %s expired and its retries are used up: failed", url)
                    self._updates.append(
                        UrlUpdate(url, UrlStatus.FAILED, Outcome.LEASE_EXPIRED, retries=lease.retries)
                    )
                else:
                    logger.warning("Lease on %s expired; returning it to pending", url)
                    self._requeue(lease, lease.retries + 1)
                    self._updates.append(
                        UrlUpdate(url, UrlStatus.PENDING, Outcome.LEASE_EXPIRED, retries=lease.retries + 1)
                    )
                self._release_host(lease.host, Feedback(error=True))

    def _requeue(self, lease: Lease, retries: int, outcome: str | None = None) -> None:
        """Back into its host's queue (the outcome travels with the result, in the batch)."""
        self._push(
            lease.host,
            _Queued(
                -lease.priority,
                next(self._seq),
                lease.url,
                lease.depth,
                lease.kind,
                retries,
                lease.redirects,
                lease.has_history,
            ),
        )

    def _release_host(self, host: str, feedback: Feedback) -> None:
        now = time.time()
        self._busy.discard(host)
        delay, backoff = self.politeness.after(feedback, self._backoff.get(host, 0.0))
        if feedback.error:
            self._errors[host] = self._errors.get(host, 0) + 1
        if feedback.error or feedback.requested:
            self._backoff[host] = backoff
        if feedback.requested or delay > 0:
            self._next_allowed[host] = max(now + delay, self._next_allowed.get(host, 0.0))
            self._dirty_hosts.add(host)
        self._schedule(host)
        self._notify()

    async def borrow_host(self, host: str, *, wait_s: float) -> bool:
        """Take a host's politeness slot for a request that is none of its URLs; False after ``wait_s``.

        A robots.txt redirect to another host is such a request (``crawl.frontier.host_slots``): it
        waits, like a lease, until no URL of the host is out and its next allowed time
        has come, and holds the host until ``return_host``. Meanwhile none of the host's
        own URLs is leased, so a busy host is lent at its next turn.
        """
        deadline = time.monotonic() + wait_s
        try:
            with wanting(self._wanted, host):
                while True:
                    wakeup = self._wakeup
                    now = time.time()
                    ready_at = now + 1.0 if host in self._busy else self._next_allowed.get(host, 0.0)
                    if ready_at <= now:
                        self._busy.add(host)
                        self._borrowed.add(host)
                        return True
                    left = deadline - time.monotonic()
                    if left <= 0 or self._stopping:  # a stopping crawl does not wait
                        return False
                    try:  # a release notifies; a next allowed time passes by itself
                        await asyncio.wait_for(wakeup.wait(), timeout=min(left, ready_at - now))
                    except TimeoutError:
                        pass
        finally:
            self._schedule(host)  # its URLs may be leased again (a no-op while lent or still wanted)

    # -- persistence ---------------------------------------------------------

    def take_batch(self) -> Batch | None:
        """Hand over the changes since the last batch (None when there are none).

        Call on the event loop; the batch is then the caller's to write.
        """
        if not (self._unwritten or self._leases or self._updates or self._dirty_hosts):
            return None
        hosts = [
            HostState(h, self._next_allowed.get(h, 0.0), self._backoff.get(h, 0.0), self._errors.get(h, 0))
            for h in self._dirty_hosts
        ]
        batch = Batch(self._unwritten, self._leases, self._updates, hosts)
        self._unwritten, self._leases, self._updates = [], [], []
        self._dirty_hosts = set()
        return batch
