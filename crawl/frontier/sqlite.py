"""The two-level frontier (Mercator): priority order within each host, politeness across hosts.

* **Back queues:** one priority heap of pending URLs per host (the front-queue
  priority decides the order inside a host: seeds and sitemap entries first, then
  shallower links).
* **Host heap:** hosts ordered by the time they may next be asked. A worker takes the
  host at the top once its time has come, so at most one request is in flight per
  host and ``next_allowed = max(min_delay, k × last response time, Crawl-delay)``
  after each response, or an exponential backoff (with ``Retry-After`` honoured) after
  errors, 429 and 503.
* **Leases:** a URL handed to a worker is leased; it is acknowledged (``finish``) when
  its result is stored, and a lease that expires returns the URL to its queue.
* **Persistence:** every change goes into a batch the crawl loop commits to SQLite
  after it has written that batch's documents, so after a crash the crawl resumes
  from the database: leased URLs are pending again, finished ones stay finished. The
  loop takes the batch on the event loop (``take_batch``), writes it from a worker
  thread (``write_batch``), then tells the frontier (``batch_committed``); ``commit``
  does the three in a row.

Pending URLs are held in memory (tens of bytes each plus the URL); per-host and total
budgets bound them. Spilling back queues to disk, as Mercator does, is the next step
for crawls of many millions of URLs.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple, Self

from core.settings import CrawlSettings
from crawl.frontier.recrawl import due_since
from crawl.frontier.seen import SeenUrls
from crawl.state.sqlite import CrawlDb, HostState, NewUrl, Outcome, UrlKind, UrlStatus, UrlUpdate

logger = logging.getLogger(__name__)

__all__ = ["Batch", "Feedback", "Frontier", "Lease", "Politeness"]


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


@dataclass(frozen=True, slots=True)
class Lease:
    """A URL handed to one worker, with what its fetch needs."""

    url: str
    host: str
    depth: int
    kind: UrlKind
    priority: float
    retries: int = 0
    redirects: int = 0
    etag: str = ""
    last_modified: str = ""
    previous_hash: str = ""
    interval_s: float = 0.0
    fetch_count: int = 0
    has_history: bool = False
    expires_at: float = 0.0
    due_at: float = 0.0
    """When this refetch of a fetched page came due (``recrawl.due_since``); 0 for a first fetch."""


@dataclass(frozen=True, slots=True)
class Feedback:
    """What the host's last exchange says about when to ask it again."""

    requested: bool = True
    """False when no request reached the host (robots-blocked, refused by the guard)."""
    response_s: float = 0.0
    error: bool = False
    retry_after_s: float | None = None
    crawl_delay_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Politeness:
    """When a host may be asked again after an exchange: the rule both frontier backends share.

    ``max(min_delay, factor × response time, Crawl-delay)`` after a response; after an
    error the backoff doubles (from ``backoff_base_s`` up to ``max_backoff_s``) and a
    ``Retry-After`` wins when it asks for longer.
    """

    min_delay_s: float
    response_time_factor: float
    backoff_base_s: float
    max_backoff_s: float

    def after(self, feedback: Feedback, backoff_s: float) -> tuple[float, float]:
        """(delay before the next request, the host's backoff now) given its backoff before."""
        delay = 0.0
        if feedback.requested:
            delay = max(
                self.min_delay_s, self.response_time_factor * feedback.response_s, feedback.crawl_delay_s
            )
        if feedback.error:
            backoff_s = min(self.max_backoff_s, max(self.backoff_base_s, backoff_s * 2))
            delay = max(delay, backoff_s)
        elif feedback.requested:
            backoff_s = 0.0
        if feedback.retry_after_s is not None:
            delay = max(delay, min(feedback.retry_after_s, self.max_backoff_s))
        return delay, backoff_s


@dataclass(frozen=True, slots=True)
class Batch:
    """The crawl-state changes since the last batch, to be written in one transaction."""

    inserts: list[NewUrl]
    leases: list[tuple[str, float]]
    """(url, lease expiry)."""
    updates: list[UrlUpdate]
    hosts: list[HostState]


def frontier_options(s: CrawlSettings) -> dict[str, Any]:
    """The crawl settings every frontier backend takes, as keyword arguments (one list for both)."""
    return {
        "min_delay_s": s.min_delay_s,
        "response_time_factor": s.response_time_factor,
        "max_pages": s.max_pages,
        "max_pages_per_host": s.max_pages_per_host,
        "backoff_base_s": s.backoff_base_s,
        "max_backoff_s": s.max_backoff_s,
        "lease_s": s.lease_s,
        "max_retries": s.max_retries,
    }


@contextmanager
def wanting(wanted: Counter[str], host: str) -> Iterator[None]:
    """Count one ``borrow_host`` call waiting for ``host`` while the block runs (both frontiers
    keep such a host from their own leases); the host leaves ``wanted`` with its last waiter."""
    wanted[host] += 1
    try:
        yield
    finally:
        wanted[host] -= 1
        if wanted[host] <= 0:
            del wanted[host]


class Frontier:
    """Schedules leases across hosts and batches crawl-state writes for SQLite."""

    def __init__(
        self,
        db: CrawlDb,
        seen: SeenUrls,
        *,
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
        self._max_pages = max_pages
        self._max_pages_per_host = max_pages_per_host
        self._lease_s = lease_s
        self._max_retries = max_retries
        self.politeness = Politeness(min_delay_s, response_time_factor, backoff_base_s, max_backoff_s)
        self._seq = itertools.count()
        self._queues: dict[str, list[_Queued]] = {}
        self._ready: list[tuple[float, str]] = []
        self._scheduled: dict[str, float] = {}
        self._next_allowed: dict[str, float] = {}
        self._backoff: dict[str, float] = {}
        self._errors: dict[str, int] = {}
        self._busy: set[str] = set()
        self._in_flight: dict[str, Lease] = {}
        self._borrowed: set[str] = set()
        """Hosts lent for a request that is none of their URLs (``borrow_host``)."""
        self._wanted: Counter[str] = Counter()
        """Host → ``borrow_host`` calls waiting for it: not leased meanwhile, or a busy host's
        own URLs would take every turn and the borrower would never get it."""
        self._admitted = db.admitted_pages_by_host()
        self._pages_done = db.count_finished_pages() if count_existing_pages else 0
        self._pages_in_flight = 0
        self._stopping = False
        self._wakeup = asyncio.Event()
        self.flush_wanted = asyncio.Event()
        """Never set: one process owns the crawl, so no other worker waits for its commits."""
        self._inserts: list[NewUrl] = []
        self._leases: list[tuple[str, float]] = []
        self._updates: list[UrlUpdate] = []
        self._dirty_hosts: set[str] = set()
        released = db.release_leases(max_retries=max_retries)
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

    def _notify(self) -> None:
        self._wakeup.set()
        self._wakeup = asyncio.Event()

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

    @property
    def pages_done(self) -> int:
        return self._pages_done

    def surely_seen(self, url: str) -> bool:
        """True when ``add`` would certainly refuse the URL as seen (no table lookup)."""
        return self._seen.surely_seen(url)

    def add(self, new: NewUrl) -> bool:
        """Admit a canonical URL if it was never seen; True when admitted as pending.

        A page over its host's budget is recorded as blocked, so the seen filter
        stops it from coming back and ``inspect`` can say why.
        """
        if not self._seen.add_if_new(new.url):
            return False
        if new.status == UrlStatus.PENDING and new.kind == UrlKind.PAGE:
            admitted = self._admitted.get(new.host, 0)
            if admitted >= self._max_pages_per_host:
                self._inserts.append(_blocked(new, "host page budget reached"))
                return False
            self._admitted[new.host] = admitted + 1
        self._inserts.append(new)
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

    def stop(self) -> None:
        """Hand out no more leases; ``lease`` returns None once called."""
        self._stopping = True
        self._notify()

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

    def _end_lease(self, lease: Lease) -> bool:
        if self._in_flight.get(lease.url) is not lease:
            return False  # expired and handed to someone else meanwhile
        del self._in_flight[lease.url]
        if lease.kind == UrlKind.PAGE:
            self._pages_in_flight -= 1
        return True

    def _requeue(self, lease: Lease, retries: int) -> None:
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

    def finish(self, lease: Lease, update: UrlUpdate, feedback: Feedback) -> bool:
        """Acknowledge a lease with its result; False when the lease had expired."""
        if not self._end_lease(lease):
            return False
        if update.status == UrlStatus.PENDING:
            self._requeue(lease, update.retries)
        elif lease.kind == UrlKind.PAGE and update.status in _FINISHED and update.fetched:
            self._pages_done += 1
        self._updates.append(update)
        self._release_host(lease.host, feedback)
        return True

    def defer(self, lease: Lease, feedback: Feedback) -> None:
        """Put a leased URL back unchanged (its slot was spent on robots.txt)."""
        if not self._end_lease(lease):
            return
        self._requeue(lease, lease.retries)
        self._release_host(lease.host, feedback)

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

    def return_host(self, host: str, feedback: Feedback) -> None:
        """Release a host taken with ``borrow_host``; its next allowed time follows ``feedback``."""
        self._borrowed.discard(host)
        self._release_host(host, feedback)

    # -- persistence ---------------------------------------------------------

    @property
    def uncommitted(self) -> int:
        return len(self._updates) + len(self._inserts)

    def take_batch(self) -> Batch | None:
        """Hand over the changes since the last batch (None when there are none).

        Call on the event loop; the batch is then the caller's to write.
        """
        if not (self._inserts or self._leases or self._updates or self._dirty_hosts):
            return None
        hosts = [
            HostState(h, self._next_allowed.get(h, 0.0), self._backoff.get(h, 0.0), self._errors.get(h, 0))
            for h in self._dirty_hosts
        ]
        batch = Batch(self._inserts, self._leases, self._updates, hosts)
        self._inserts, self._leases, self._updates = [], [], []
        self._dirty_hosts = set()
        return batch

    def write_batch(self, batch: Batch) -> None:
        """Write a batch in one transaction; touches only the database, so any thread may call it."""
        self._db.apply(
            inserts=batch.inserts,
            leases=batch.leases,
            updates=batch.updates,
            hosts=batch.hosts,
            now=time.time(),
        )

    def batch_committed(self, batch: Batch) -> None:
        """The batch is in the table: its new URLs no longer need the seen filter's own record."""
        self._seen.committed(new.url for new in batch.inserts)

    def batch_lost(self, batch: Batch) -> None:
        """The batch was not stored; nothing here counts on it (its URLs stay in the seen filter)."""

    def commit(self) -> None:
        """Take, write and acknowledge the batch (new URLs, leases, results, host state) at once."""
        batch = self.take_batch()
        if batch is not None:
            self.write_batch(batch)
            self.batch_committed(batch)


_FINISHED = (UrlStatus.DONE, UrlStatus.FAILED)


def _blocked(new: NewUrl, reason: str) -> NewUrl:
    return NewUrl(
        url=new.url,
        host=new.host,
        depth=new.depth,
        priority=new.priority,
        kind=new.kind,
        parent=new.parent,
        redirects=new.redirects,
        status=UrlStatus.BLOCKED,
        blocked_reason=reason,
        outcome=Outcome.BLOCKED,
    )
