"""A fleet worker's hold on the PostgreSQL frontier: its leases and hosts between rounds.

A round (``crawl.frontier.pg_pump``) leases a host with its best pending URLs; this worker
hands them out one at a time and, while the host answers well and its next allowed time is
near, keeps the host for its next URL without a round. A host goes back to the fleet, with
its next allowed time, through the next round (``_release_soon``): after an error, a long
delay, a stop, or when a borrower (``borrow_host``, a robots.txt redirect) waits for it.
URLs not fetched go back to pending in that round, before their host is released.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from abc import abstractmethod
from collections import deque
from typing import Unpack

from crawl.frontier.base import FrontierBase, FrontierOptions, wanting
from crawl.frontier.leases import Feedback, Lease
from crawl.frontier.recrawl import due_since
from crawl.frontier.seen import SeenUrls
from crawl.state.postgres import PgCrawlDb
from crawl.state.records import HostState, UrlKind

logger = logging.getLogger(__name__)

__all__ = ["PgWorkerState", "default_worker_id"]

_BORROW_POLL_S = 0.1
"""How often ``borrow_host`` asks the database again for a busy host."""
_KEEP_HOST_DELAY_S = 5.0
"""A host whose next allowed time is further off than this goes back to the fleet (with its
queued URLs) instead of waiting here, idle and leased (the heartbeat renews a kept host's
leases, so they do not run out while it waits)."""


def default_worker_id() -> str:
    """``host-pid``: unique among live workers; a restarted process leaves its old leases to expire."""
    return f"{socket.gethostname()}-{os.getpid()}"


class PgWorkerState(FrontierBase[PgCrawlDb]):
    """One worker's state over the fleet frontier, and the leases and hosts it holds between rounds.

    Politeness across the fleet: a host stays leased from the moment its URL is handed out
    until the response is in; ``finish`` computes its next allowed time and the next round
    releases it with that time, so no other worker can ask it sooner. A worker has at most
    one URL per host out.
    """

    def __init__(
        self,
        db: PgCrawlDb,
        seen: SeenUrls,
        *,
        worker_id: str | None = None,
        count_existing_pages: bool = True,
        **options: Unpack[FrontierOptions],
    ) -> None:
        super().__init__(db, seen, **options)
        self.worker_id = worker_id or default_worker_id()
        self._host_state: dict[str, tuple[float, int]] = {}
        """host → (backoff, errors) as read when it was leased."""
        # ``_pages_in_flight`` counts the pages handed out and those in ``_ready``.
        self._waiters: deque[asyncio.Future[Lease | None]] = deque()
        """``lease`` callers waiting, oldest first; a round leases at most one host for each."""
        self._ready: deque[Lease] = deque()
        """Leases whose caller stopped waiting, or a kept host's next URL: the next ``lease`` takes them."""
        self._queued: dict[str, deque[Lease]] = {}
        """host → its further URLs leased in the same round, best first (out one at a time)."""
        self._kept: dict[str, float] = {}
        """Hosts kept for their next queued URL → their next allowed time, not come yet."""
        self._pump: asyncio.Future[None] | None = None
        self._no_hosts = False
        """The pump's last round wanted hosts and got none: a further caller does not wake it
        (``_start_pump``)."""
        self._starved = False
        """The next round inserts the new URLs at once (a waiting caller may need them)."""
        self._requeues: list[tuple[str, int, str | None]] = []
        self._releases: dict[str, HostState] = {}
        """Results of this tick for the next round: URLs back to pending, hosts to release."""
        self._storing = 0
        """New URLs in batches taken for the store step and not yet committed: not pending in
        the database and no longer in ``_unwritten``, yet the crawl is not over while there are.
        Counted on the event loop: batches are taken there and settled by the store's callback."""
        self._unacknowledged: set[str] = set()
        """URLs finished here whose results are not committed yet: their leases are renewed."""
        # ``flush_wanted`` is set when the fleet has nothing pending, this worker has nothing out
        # and results wait for their batch: the loop commits them now, not at its next timed
        # flush, because their URLs stay leased until then and keep every other worker's crawl
        # open (DECISIONS 55).
        self._renewed: dict[str, float] = {}
        """URL in flight → the expiry its last heartbeat renewal gave it (past its lease's own)."""
        self._backlog = 0
        self._last_reap = 0.0
        self._last_heartbeat = 0.0
        self._last_insert = 0.0
        self.fetched = 0
        released = db.release_leases(self.worker_id, max_retries=self._max_retries)
        if released:
            logger.info("Returned %d URLs this worker held before it restarted to pending", released)
        self._admitted = db.admitted_pages_by_host()
        self._pages_done = db.count_finished_pages() if count_existing_pages else 0
        db.admission_cap = self._max_pages_per_host
        self._fleet_budget: int | None = self._max_pages if count_existing_pages else None
        """``max_pages`` for the whole fleet (shares taken at lease time, ``PgCrawlDb.exchange``).
        A recrawl's budget is its own run's, counted here as on one machine."""
        self._spent_confirmed = False
        self._fleet_left: int | None = None
        """Pages left of the fleet's budget as the last round saw it, plus the shares this
        worker gave back since (a retry, a robots.txt deferral); None before the first round."""

    @abstractmethod
    def _start_pump(self, *, another_caller: bool = False) -> None:
        """Run the pump, or wake it for a round (``crawl.frontier.pg_pump``)."""

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
            due_at=due_since(row["next_fetch"], row["lastmod"], row["last_fetch"])  # type: ignore[arg-type]
            if row["fetch_count"]
            else 0.0,
        )
        self._host_state[host] = (float(row["backoff_s"]), int(row["errors"]))  # type: ignore[arg-type, call-overload]
        self._in_flight[lease.url] = lease
        if kind == UrlKind.PAGE:
            self._pages_in_flight += 1
        return lease

    def _end_lease(self, lease: Lease, *, fetched_page: bool = False) -> bool:
        """Forget a lease; a page's share of the fleet budget is kept when it was fetched and
        given back otherwise (the database's trigger does the same when the result is stored)."""
        if not super()._end_lease(lease):
            return False
        self._renewed.pop(lease.url, None)
        if lease.kind == UrlKind.PAGE and self._fleet_left is not None and not fetched_page:
            self._fleet_left += 1
        return True

    def _requeue(self, lease: Lease, retries: int, outcome: str | None = None) -> None:
        """Back to pending in the next round, before its host is released."""
        self._requeues.append((lease.url, retries, outcome))

    def _held_hosts(self) -> list[str]:
        """Hosts this worker holds: those of its URLs out or queued, those it keeps, those it borrowed."""
        return sorted({lease.host for lease in self._in_flight.values()} | set(self._kept) | self._borrowed)

    def _has_writes(self) -> bool:
        return bool(self._requeues or self._releases)

    def _hand_out(self, lease: Lease | None) -> bool:
        """Give ``lease`` (None: the end) to the first caller still waiting; False when none waits."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(lease)
                return True
        return False

    # -- hosts held between rounds -------------------------------------------

    def _release_host(self, host: str, feedback: Feedback) -> None:
        """After an exchange: keep the host for its next queued URL, or release it to the fleet."""
        backoff, errors = self._host_state.pop(host, (0.0, 0))
        delay, backoff = self.politeness.after(feedback, backoff)
        if feedback.error:
            errors += 1
        if self._queued.get(host):
            if not (feedback.error or self._stopping or delay > _KEEP_HOST_DELAY_S or host in self._wanted):
                self._host_state[host] = (backoff, errors)
                self._kept[host] = time.time() + delay
                asyncio.get_running_loop().call_later(delay, self._next_of, host)
                return
            self._give_back_queued(host)
        next_allowed = time.time() + delay if (feedback.requested or delay > 0) else 0.0
        self._release_soon(HostState(host, next_allowed, backoff, errors))

    def _release_soon(self, state: HostState) -> None:
        """Release a host in the next round; the URLs of it this worker found meanwhile go in
        with that round (not with the timed insert), so that the host's next lease can take them."""
        self._releases[state.host] = state
        if any(new.host == state.host for new in self._unwritten):
            self._starved = True
        self._start_pump()

    def _next_of(self, host: str) -> None:
        """The kept host's next allowed time has come: hand out its next URL, or release it."""
        next_allowed = self._kept.pop(host, None)
        if next_allowed is None:
            return  # given back meanwhile (the worker stopped)
        if host in self._wanted:  # a borrower waits for it: its queued URLs go back with it
            self._give_back_queued(host)
        queued = self._queued.pop(host, deque())
        while queued and self._in_flight.get(queued[0].url) is not queued[0]:
            queued.popleft()  # expired meanwhile
        if not queued:
            backoff, errors = self._host_state.pop(host, (0.0, 0))
            self._release_soon(HostState(host, next_allowed, backoff, errors))
            return
        lease = queued.popleft()
        if queued:
            self._queued[host] = queued
        if not self._hand_out(lease):
            self._ready.append(lease)  # a stopping pump gives it back with the rest

    def _give_back_ready(self) -> None:
        """Leases nobody will take (the worker is stopping): their URLs and hosts go back unchanged."""
        for host, next_allowed in list(self._kept.items()):
            del self._kept[host]
            self._give_back_queued(host)
            backoff, errors = self._host_state.pop(host, (0.0, 0))
            self._releases[host] = HostState(host, next_allowed, backoff, errors)
        while self._ready:
            lease = self._ready.popleft()
            if self._end_lease(lease):
                self._requeue(lease, lease.retries)
                self._give_back_queued(lease.host)
                backoff, errors = self._host_state.pop(lease.host, (0.0, 0))
                self._releases[lease.host] = HostState(lease.host, 0.0, backoff, errors)

    def _give_back_queued(self, host: str) -> None:
        """The host's further URLs go back to pending unchanged (its release follows)."""
        for lease in self._queued.pop(host, ()):
            if self._end_lease(lease):
                self._requeue(lease, lease.retries)

    # -- hosts borrowed for a request that is none of their URLs ---------------

    async def borrow_host(self, host: str, *, wait_s: float) -> bool:
        """Lease a host for a request that is none of its URLs; False after ``wait_s``.

        As ``Frontier.borrow_host``, with the fleet: the host's row is leased in the
        database (nobody holds it, its next allowed time has come), so no worker asks it
        meanwhile; ``return_host`` releases it through the next round. Busy here means
        one of this worker's URLs of the host is out or kept, or its release is not
        written yet; elsewhere, another worker's lease. Asked again every
        ``_BORROW_POLL_S``: a robots.txt redirect to another host is rare. Meanwhile this
        worker's rounds do not lease the host and it is not kept for its next URL, so this
        worker's own fetches of a busy host do not take every turn (another worker's may
        win a turn, as any lease may).
        """
        with wanting(self._wanted, host):
            return await self._borrow(host, time.monotonic() + wait_s)

    async def _borrow(self, host: str, deadline: float) -> bool:
        while True:
            if host not in self._releases and host not in self._held_hosts():
                now = time.time()
                until = now + self._lease_s
                task = asyncio.ensure_future(
                    asyncio.to_thread(self._db.borrow_host, self.worker_id, host, now=now, until=until)
                )
                try:
                    got = await asyncio.shield(task)
                except asyncio.CancelledError:
                    task.add_done_callback(lambda done: self._give_back_borrowed(host, done))
                    raise
                if got is not None:
                    self._host_state[host] = got
                    self._borrowed.add(host)
                    return True
            left = deadline - time.monotonic()
            if left <= 0 or self._stopping:  # a stopping crawl does not wait
                return False
            await asyncio.sleep(min(left, _BORROW_POLL_S))

    def _give_back_borrowed(self, host: str, done: asyncio.Future[tuple[float, int] | None]) -> None:
        """The borrower was cancelled while the database leased the host to it: release it unchanged."""
        if done.cancelled() or done.exception() is not None or done.result() is None:
            return
        backoff, errors = done.result()  # type: ignore[misc]
        self._releases[host] = HostState(host, 0.0, backoff, errors)
        self._start_pump()
