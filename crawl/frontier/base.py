"""What the SQLite and PostgreSQL frontiers share: admission, the end of a lease, and the batches.

``FrontierBase`` holds the state both keep (the leases out, the hosts lent or wanted by a
borrower, the page counts, the results and new URLs waiting for their batch) and the steps
both take the same way: admitting a new URL under its host's budget, acknowledging a result,
handing the batch to the store step. Where a URL goes back to and how a host is released
are each backend's (``_requeue``, ``_release_host``).
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Generic, TypedDict, TypeVar

from core.settings import CrawlSettings
from crawl.frontier.leases import Batch, Feedback, Lease, Politeness
from crawl.frontier.seen import SeenUrls
from crawl.state.base import CrawlDbBase
from crawl.state.records import NewUrl, Outcome, UrlKind, UrlStatus, UrlUpdate

__all__ = ["FrontierBase", "FrontierOptions", "frontier_options", "wanting"]

DbT = TypeVar("DbT", bound=CrawlDbBase)
_FINISHED = (UrlStatus.DONE, UrlStatus.FAILED)


class FrontierOptions(TypedDict, total=False):
    """The crawl settings every frontier backend takes as keyword arguments."""

    min_delay_s: float
    response_time_factor: float
    max_pages: int
    max_pages_per_host: int
    backoff_base_s: float
    max_backoff_s: float
    lease_s: float
    max_retries: int


def frontier_options(s: CrawlSettings) -> FrontierOptions:
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


class FrontierBase(ABC, Generic[DbT]):
    """The part of ``crawl.frontier.interface.FrontierApi`` both backends implement alike."""

    def __init__(
        self,
        db: DbT,
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
    ) -> None:
        self._db = db
        self._seen = seen
        self.politeness = Politeness(min_delay_s, response_time_factor, backoff_base_s, max_backoff_s)
        self._max_pages = max_pages
        self._max_pages_per_host = max_pages_per_host
        self._lease_s = lease_s
        self._max_retries = max_retries
        self._in_flight: dict[str, Lease] = {}
        self._borrowed: set[str] = set()
        """Hosts lent for a request that is none of their URLs (``borrow_host``)."""
        self._wanted: Counter[str] = Counter()
        """Host → ``borrow_host`` calls waiting for it: not leased meanwhile, or a busy host's
        own URLs would take every turn and the borrower would never get it."""
        self._admitted: dict[str, int] = {}
        """Host → its pages admitted (the per-host budget), as read at start and counted since."""
        self._pages_done = 0
        self._pages_in_flight = 0
        """Pages leased here and not finished: part of the page budget."""
        self._stopping = False
        self._wakeup = asyncio.Event()
        """Set (and replaced) when there is something new: a result, a release, a stop, a new URL."""
        self.flush_wanted = asyncio.Event()
        """Set when the loop should commit its batch now, not at its next timed flush."""
        self._unwritten: list[NewUrl] = []
        """New URLs for the next batch (on PostgreSQL, or the next round that inserts)."""
        self._updates: list[UrlUpdate] = []
        """Results for the next batch."""

    # -- what each backend does its own way --------------------------------------

    @abstractmethod
    def _requeue(self, lease: Lease, retries: int, outcome: str | None = None) -> None:
        """A leased URL goes back to pending with ``retries`` (``outcome`` None: the stored one)."""

    @abstractmethod
    def _release_host(self, host: str, feedback: Feedback) -> None:
        """After an exchange with ``host``: its next allowed time follows ``feedback``."""

    # -- shared --------------------------------------------------------------

    def _notify(self) -> None:
        self._wakeup.set()
        self._wakeup = asyncio.Event()

    @property
    def pages_done(self) -> int:
        return self._pages_done

    @property
    def uncommitted(self) -> int:
        return len(self._updates) + len(self._unwritten)

    def surely_seen(self, url: str) -> bool:
        """True when ``add`` would certainly refuse the URL as seen (no table lookup)."""
        return self._seen.surely_seen(url)

    def _admit(self, new: NewUrl) -> bool:
        """Take a canonical URL never seen into the next batch; False when it is refused: seen,
        or a pending page over its host's budget (recorded blocked, so the seen filter stops
        it from coming back and ``inspect`` can say why)."""
        if not self._seen.add_if_new(new.url):
            return False
        if new.status == UrlStatus.PENDING and new.kind == UrlKind.PAGE:
            admitted = self._admitted.get(new.host, 0)
            if admitted >= self._max_pages_per_host:
                self._unwritten.append(_blocked(new, "host page budget reached"))
                return False
            self._admitted[new.host] = admitted + 1
        self._unwritten.append(new)
        return True

    def stop(self) -> None:
        """Hand out no more leases; ``lease`` returns None once called."""
        self._stopping = True
        self._notify()

    def _end_lease(self, lease: Lease, *, fetched_page: bool = False) -> bool:
        """Forget a lease; False when it is no longer out (expired and handed out again meanwhile)."""
        if self._in_flight.get(lease.url) is not lease:
            return False
        del self._in_flight[lease.url]
        if lease.kind == UrlKind.PAGE:
            self._pages_in_flight -= 1
        return True

    def finish(self, lease: Lease, update: UrlUpdate, feedback: Feedback) -> bool:
        """Acknowledge a lease with its result; False when the lease had expired."""
        counted = lease.kind == UrlKind.PAGE and update.status in _FINISHED and update.fetched
        if not self._end_lease(lease, fetched_page=counted):
            return False
        if update.status == UrlStatus.PENDING:
            self._requeue(lease, update.retries, update.outcome_text)
        elif counted:
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

    def return_host(self, host: str, feedback: Feedback) -> None:
        """Release a host taken with ``borrow_host``; its next allowed time follows ``feedback``."""
        self._borrowed.discard(host)
        self._release_host(host, feedback)

    # -- persistence ---------------------------------------------------------

    def write_batch(self, batch: Batch) -> None:
        """Write a batch in one transaction; touches only the database, so any thread may call it."""
        self._db.apply(
            inserts=batch.inserts,
            leases=batch.leases,
            updates=batch.updates,
            hosts=batch.hosts,
            now=time.time(),
        )

    @abstractmethod
    def take_batch(self) -> Batch | None:
        """Hand over the changes since the last batch (None when there are none); call on the event loop."""

    def batch_committed(self, batch: Batch) -> None:
        """The batch is in the table: its new URLs no longer need the seen filter's own record."""
        self._seen.committed(new.url for new in batch.inserts)

    def batch_lost(self, batch: Batch) -> None:
        """The batch was not stored; nothing here counts on it (its URLs stay in the seen filter)."""

    def abandon(self) -> None:
        """The run stops without storing what it holds (a full disk). Here nothing: the next
        run over the crawl directory returns its leases to pending as it opens."""

    def commit(self) -> None:
        """Take, write and acknowledge the batch at once."""
        batch = self.take_batch()
        if batch is not None:
            self.write_batch(batch)
            self.batch_committed(batch)


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
