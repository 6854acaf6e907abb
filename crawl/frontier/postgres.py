"""The fleet frontier: the same contract as ``crawl.frontier.sqlite.Frontier``, with the queue in PostgreSQL.

The SQLite frontier keeps the queues in memory because one process owns the crawl.
Here many workers share it, so the database is the queue: leases come from PostgreSQL
(``PgCrawlDb.exchange``: ready host rows locked ``FOR UPDATE SKIP LOCKED``, leased with
an expiry, each with its best pending URL).

* **One conversation with PostgreSQL:** a single pump task talks to the database, off
  the event loop (one thread call per round), so the loop never waits on a lock or a
  socket. A round writes what finished since the last one (URLs back to pending, hosts
  released) and leases as many hosts as there are ``lease`` callers waiting, within
  the page budget, in one pipelined round trip: the number of round trips follows the
  rounds, not the pages.
* **Politeness across the fleet:** a host stays leased from the moment its URL is
  handed out until the response is in; ``finish`` computes its next allowed time
  (``Politeness``: min delay, response time, Crawl-delay, backoff) and the next round
  releases it with that time, so no other worker can ask it sooner (a release waiting
  for its round only keeps the host longer). A worker has at most one URL per host out.
* **A host's next URLs come with it:** a round leases a host with up to
  ``_URLS_PER_HOST`` of its best pending URLs; while the host stays healthy and its next
  allowed time is near, the worker keeps it and hands out the next URL at that time
  without a round, so rounds follow hosts rather than pages. An error, a long delay or a
  stop sends the rest back to pending with the host's release.
* **Acknowledgement:** the URL's result waits in the batch and is written after the
  batch's documents (``write_batch``), exactly as in SQLite; until then the URL stays
  leased, so nobody fetches it again. A retry or a deferral goes back to pending in the
  next round, before its host is released.
* **New URLs** are inserted by a round when ``_INSERT_ROWS`` wait, every
  ``_INSERT_EVERY_S``, and at once when they may be what a waiting caller needs: a round
  found nothing to lease and nothing is pending in the fleet, a URL of a host new to this
  worker came, or this worker releases a host it found URLs of (``ON CONFLICT DO
  NOTHING``: the table's key is the seen check of record), so other workers see them
  without waiting for this worker's next commit. Inserting at once after every round that
  leased nothing (while other workers held every pending host) made two bench workers
  insert ~45 times a second each, a handful of URLs a time; now ~200 rounds each for the
  bench crawl instead of ~330, PostgreSQL's CPU ~30% lower.
* **Hosts are shared when they are fewer than the callers:** while another worker is short
  of hosts, a round leases only up to one host more than that worker holds (DECISIONS
  51); the one that leased first otherwise leased back every host it released.
* **Slow commits are not deaths:** the heartbeat renews this worker's leases (URLs being
  fetched, queued with a kept host, or finished and waiting for their batch, and the hosts
  it holds), so only a worker that stopped (killed, hung) lets leases expire.
* **Dead workers:** expired URL leases return to pending with one more attempt and
  expired host leases are freed, by whichever worker looks first.
* **The end:** a worker stops when nothing is pending, no other worker holds a lease
  (it could still add links), and it has nothing in flight. Releases still waiting for
  a round are written before ``lease`` says so (and by ``commit``). A worker with nothing
  pending and nothing out asks the loop to commit its results at once (``flush_wanted``):
  until they are committed their URLs are leased and keep the other workers waiting.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections import Counter, deque
from typing import Self

from core.settings import CrawlSettings
from crawl.frontier.recrawl import due_since
from crawl.frontier.seen import SeenUrls
from crawl.frontier.sqlite import Batch, Feedback, Lease, Politeness, _blocked, frontier_options, wanting
from crawl.state.postgres import PgCrawlDb, wait_hint
from crawl.state.sqlite import HostState, NewUrl, UrlKind, UrlStatus, UrlUpdate

logger = logging.getLogger(__name__)

__all__ = ["PgFrontier", "default_worker_id"]

_REAP_EVERY_S = 1.0
"""Expired leases are rare (a dead worker); looking for them costs a transaction each time."""
_HEARTBEAT_EVERY_S = 1.0
_INSERT_EVERY_S = 0.25
_INSERT_ROWS = 500
"""New URLs go to the shared frontier when this many wait, at least every ``_INSERT_EVERY_S``,
and at once when a waiting caller may need them (module docstring): one insert per page found
would cost three round trips per page (measured: a third of a worker's time waiting on PostgreSQL)."""
_FINISHED = (UrlStatus.DONE, UrlStatus.FAILED)
_URLS_PER_HOST = 16
"""URLs leased with a host in one round. On the crawl bench one URL per host meant ~900 rounds
for 5,000 pages, each ~1.3 ms of the pump's CPU plus PostgreSQL's, on the cores that fetch.
Four meant ~670 rounds (a host's batch runs out every four pages); sixteen ~390, with 45%
less of the pump's CPU in rounds and 17% less of PostgreSQL's, and one worker finished the
bench 7.5% sooner (four interleaved pairs, 2026-12-05); 32 measured the same as 16. The
price: a host's newly found better URLs wait behind the batch it holds (sixteen fetches at
its delay), and a dead worker's batch waits for its lease to expire, as any lease does."""
_BORROW_POLL_S = 0.1
"""How often ``borrow_host`` asks the database again for a busy host."""
_KEEP_HOST_DELAY_S = 5.0
"""A host whose next allowed time is further off than this goes back to the fleet (with its
queued URLs) instead of waiting here, idle and leased (the heartbeat renews a kept host's
leases, so they do not run out while it waits)."""


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
        """Pages leased here and not finished (handed out, or in ``_ready``): part of the budget."""
        self._stopping = False
        self._wakeup = asyncio.Event()
        """Set (and replaced) when the pump has something new: a result, a stop, a first new URL."""
        self._waiters: deque[asyncio.Future[Lease | None]] = deque()
        """``lease`` callers waiting, oldest first; a round leases at most one host for each."""
        self._ready: deque[Lease] = deque()
        """Leases whose caller stopped waiting, or a kept host's next URL: the next ``lease`` takes them."""
        self._queued: dict[str, deque[Lease]] = {}
        """host → its further URLs leased in the same round, best first (out one at a time)."""
        self._kept: dict[str, float] = {}
        """Hosts kept for their next queued URL → their next allowed time, not come yet."""
        self._borrowed: set[str] = set()
        """Hosts leased for a request that is none of their URLs (``borrow_host``)."""
        self._wanted: Counter[str] = Counter()
        """Host → ``borrow_host`` calls waiting for it: this worker's rounds do not lease it,
        and it does not keep it for its next URL, or the borrower would never get it."""
        self._pump: asyncio.Future[None] | None = None
        self._no_hosts = False
        """The pump's last round wanted hosts and got none: a further caller does not wake it
        (``_start_pump``)."""
        self._starved = False
        """The next round inserts the new URLs at once (a waiting caller may need them)."""
        self._requeues: list[tuple[str, int, str | None]] = []
        self._releases: dict[str, HostState] = {}
        """Results of this tick for the next round: URLs back to pending, hosts to release."""
        self._unwritten: list[NewUrl] = []
        self._storing = 0
        """New URLs in batches taken for the store step and not yet committed: not pending in
        the database and no longer in ``_unwritten``, yet the crawl is not over while there are.
        Counted on the event loop: batches are taken there and settled by the store's callback."""
        self._updates: list[UrlUpdate] = []
        self._unacknowledged: set[str] = set()
        """URLs finished here whose results are not committed yet: their leases are renewed."""
        self.flush_wanted = asyncio.Event()
        """Set when the fleet has nothing pending, this worker has nothing out and results wait
        for their batch: the loop commits them now, not at its next timed flush, because their
        URLs stay leased until then and keep every other worker's crawl open (DECISIONS 55)."""
        self._renewed: dict[str, float] = {}
        """URL in flight → the expiry its last heartbeat renewal gave it (past its lease's own)."""
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
        db.admission_cap = max_pages_per_host
        self._fleet_budget: int | None = max_pages if count_existing_pages else None
        """``max_pages`` for the whole fleet (shares taken at lease time, ``PgCrawlDb.exchange``).
        A recrawl's budget is its own run's, counted here as on one machine."""
        self._spent_confirmed = False
        self._fleet_left: int | None = None
        """Pages left of the fleet's budget as the last round saw it, plus the shares this
        worker gave back since (a retry, a robots.txt deferral); None before the first round."""

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
        return max(0, len(self._in_flight) - sum(map(len, self._queued.values())))

    @property
    def pages_done(self) -> int:
        return self._pages_done

    def surely_seen(self, url: str) -> bool:
        """True when ``add`` would certainly refuse the URL as seen (no table lookup)."""
        return self._seen.surely_seen(url)

    def add(self, new: NewUrl) -> bool:
        """Admit a canonical URL this worker has not seen; True when admitted as pending."""
        if not self._seen.add_if_new(new.url):
            return False
        new_host = new.host not in self._admitted
        if new.status == UrlStatus.PENDING and new.kind == UrlKind.PAGE:
            admitted = self._admitted.get(new.host, 0)
            if admitted >= self._max_pages_per_host:
                self._unwritten.append(_blocked(new, "host page budget reached"))
                return False
            self._admitted[new.host] = admitted + 1
        self._unwritten.append(new)
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

    def stop(self) -> None:
        self._stopping = True
        self._notify()

    def _housekeeping(self, now: float) -> tuple[bool, bool]:
        """On the loop: expire local leases; say whether this round reaps and heartbeats."""
        reap = now - self._last_reap >= _REAP_EVERY_S
        if reap:
            self._last_reap = now
            for url, lease in list(self._in_flight.items()):
                if max(lease.expires_at, self._renewed.get(url, 0.0)) <= now:
                    logger.warning("Lease on %s expired; returning it to pending", url)
                    self._end_lease(lease)
        beat = now - self._last_heartbeat >= _HEARTBEAT_EVERY_S
        if beat:
            self._last_heartbeat = now
        return reap, beat

    def heartbeat(self, now: float | None = None) -> None:
        """Tell the fleet this worker is alive, with its counters (``trawl crawl status`` reads them)."""
        self._db.heartbeat(self.worker_id, time.time() if now is None else now, self._counters())

    def _counters(self) -> dict[str, int]:
        return {"pages_done": self._pages_done, "fetched": self.fetched, "in_flight": len(self._in_flight)}

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

    def _start_pump(self, *, another_caller: bool = False) -> None:
        """Run the pump, or wake it for a round. One more caller waiting does not wake a pump
        whose last round found no host to lease: the fleet had nothing for the callers already
        waiting, and the pump asks again when the next host is due (at most 0.25 s), when this
        worker releases a host or finds a URL of a host new to it, or when it stops. Woken by
        every caller (and every first URL found after an insert), two bench workers sharing 20
        hosts ran ~480 rounds each, eight in ten leasing nothing (``bench/results/crawl.md``)."""
        if self._pump is None or self._pump.done():
            self._pump = asyncio.ensure_future(self._run_pump())
        elif not (another_caller and self._no_hosts):
            self._notify()

    def _live_waiters(self) -> int:
        while self._waiters and self._waiters[0].done():
            self._waiters.popleft()
        return sum(1 for w in self._waiters if not w.done())

    def _hand_out(self, lease: Lease | None) -> bool:
        """Give ``lease`` (None: the end) to the first caller still waiting; False when none waits."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(lease)
                return True
        return False

    def _end_all(self) -> None:
        while self._hand_out(None):
            pass

    def _has_writes(self) -> bool:
        return bool(self._requeues or self._releases)

    async def _run_pump(self) -> None:
        """Rounds with the database until no caller waits and nothing waits to be written."""
        try:
            while True:
                wakeup = self._wakeup
                if self._stopping:
                    self._end_all()
                    self._give_back_ready()
                while self._ready and self._hand_out(self._ready[0]):
                    self._ready.popleft()
                waiting = self._live_waiters()
                room = self._room()
                want = max(0, min(waiting, room))
                if waiting and not want and not self._in_flight:
                    if self._fleet_budget is not None and not self._spent_confirmed:
                        # What this worker knows of the fleet's budget may be stale (shares
                        # given back by retries are counted when written): ask once more.
                        self._spent_confirmed = True
                        want = waiting
                    else:
                        self._end_all()  # the page budget is spent
                        waiting = 0
                if not want and not self._has_writes():
                    if not waiting:
                        return
                    await self._sleep(wakeup, 0.25)  # budget spent with pages in flight
                    continue
                per_host = max(1, min(_URLS_PER_HOST, room // want)) if want else 1
                leased, idle = await self._round(want, per_host)
                self._no_hosts = want > 0 and not leased
                if leased:
                    self._spent_confirmed = False
                for lease in leased:
                    if not self._hand_out(lease):
                        self._ready.append(lease)
                if idle is None or not self._live_waiters():
                    continue
                pending, others, ready_at = idle
                if self._unwritten and not leased and not pending:
                    # Nothing pending in the fleet: this worker's new URLs are the work, and
                    # the next round inserts them first. While other hosts are pending (held,
                    # or not due yet) they wait for the timed insert, a new host (``add``) or
                    # a release of their host (``_release_soon``).
                    self._starved = True
                    continue
                if not pending:
                    self._backlog = 0
                    if self._updates and not self._in_flight:
                        self.flush_wanted.set()
                if not (
                    pending
                    or others
                    or self._in_flight
                    or self._unwritten
                    or self._storing
                    or self._has_writes()
                ):
                    self._end_all()
                    continue
                await self._sleep(wakeup, wait_hint(ready_at, time.time()))
        except BaseException as exc:
            failure = exc if isinstance(exc, Exception) else RuntimeError("the frontier's pump was cancelled")
            for waiter in self._waiters:
                if not waiter.done():
                    waiter.set_exception(failure)  # the callers see the database's error
            self._waiters.clear()
            if self._has_writes():
                self._write_now()  # a cancelled pump must not leave hosts leased until they expire
            if not isinstance(exc, Exception):
                raise

    def _room(self) -> int:
        """Pages this worker may still lease: of its own budget, or of the fleet's (unknown
        before the first round: the whole budget, which the database caps)."""
        if self._fleet_budget is None:
            return self._max_pages - self._pages_done - self._pages_in_flight
        return self._fleet_budget if self._fleet_left is None else self._fleet_left

    @staticmethod
    async def _sleep(wakeup: asyncio.Event, timeout: float) -> None:
        try:
            await asyncio.wait_for(wakeup.wait(), timeout=timeout)
        except TimeoutError:
            pass

    async def _round(
        self, want: int, per_host: int = 1
    ) -> tuple[list[Lease], tuple[bool, bool, float | None] | None]:
        """One round's work on a thread: the leases it got and, when short, the fleet's state."""
        now = time.time()
        reap, beat = self._housekeeping(now)
        inserts: list[NewUrl] = []
        if self._unwritten and (
            self._starved
            or len(self._unwritten) >= _INSERT_ROWS
            or now - self._last_insert >= _INSERT_EVERY_S
        ):
            inserts, self._unwritten = self._unwritten, []
            self._last_insert = now
        self._starved = False
        requeues, self._requeues = self._requeues, []
        releases, self._releases = self._releases, {}
        until = now + self._lease_s
        held_hosts = self._held_hosts()
        try:
            rows, idle, renewed = await asyncio.to_thread(
                self._round_sync,
                inserts,
                requeues,
                list(releases.values()),
                want,
                now,
                until,
                per_host=per_host,
                reap=reap,
                counters=self._counters() if beat else None,
                renew=[*self._unacknowledged, *self._in_flight] if beat else [],
                renew_hosts=held_hosts if beat else [],
                skip_hosts=list(self._wanted),
                held=len(held_hosts),
            )
        except BaseException:
            self._unwritten[:0] = inserts
            self._requeues[:0] = requeues
            self._releases = {**releases, **self._releases}
            raise
        for url in renewed:
            if url in self._in_flight:
                self._renewed[url] = until
        if self._fleet_budget is not None and want > 0:
            self._fleet_left = self._db.pages_left
        if inserts:
            self._seen.committed(n.url for n in inserts)
        firsts: list[Lease] = []
        for row in rows:  # a host's URLs arrive together, best first
            lease = self._make_lease(row, until)
            if firsts and firsts[-1].host == lease.host:
                self._queued.setdefault(lease.host, deque()).append(lease)
            else:
                firsts.append(lease)
        return firsts, idle

    def _round_sync(
        self,
        inserts: list[NewUrl],
        requeues: list[tuple[str, int, str | None]],
        releases: list[HostState],
        want: int,
        now: float,
        until: float,
        *,
        per_host: int,
        reap: bool,
        counters: dict[str, int] | None,
        renew: list[str],
        renew_hosts: list[str],
        skip_hosts: list[str],
        held: int,
    ) -> tuple[list[dict[str, object]], tuple[bool, bool, float | None] | None, set[str]]:
        db = self._db
        renewed: set[str] = set()
        if reap:
            db.reap_expired(now, max_retries=self._max_retries)
        if counters is not None:
            db.heartbeat(self.worker_id, now, counters)
            # A live worker's leases are not a dead worker's: a URL being fetched or queued with
            # its kept host, a result waiting for its batch, a host between two of its URLs.
            renewed = db.renew_leases(self.worker_id, renew, until, hosts=renew_hosts)
            self._backlog = db.backlog(self.worker_id)[0]
        rows = db.exchange(
            self.worker_id,
            requeues=requeues,
            releases=releases,
            n=want,
            now=now,
            until=until,
            inserts=inserts,
            per_host=per_host,
            budget=self._fleet_budget,
            skip_hosts=skip_hosts,
            held=held,
        )
        idle = db.idle(self.worker_id) if want and len(rows) < want else None
        return rows, idle, renewed

    def _held_hosts(self) -> list[str]:
        """Hosts this worker holds: those of its URLs out or queued, those it keeps, those it borrowed."""
        return sorted({lease.host for lease in self._in_flight.values()} | set(self._kept) | self._borrowed)

    def _write_now(self) -> None:
        """Write waiting requeues and releases synchronously (the pump is gone or the caller is sync)."""
        requeues, self._requeues = self._requeues, []
        releases, self._releases = self._releases, {}
        try:
            self._db.exchange(
                self.worker_id, requeues=requeues, releases=list(releases.values()), n=0, now=0.0, until=0.0
            )
        except Exception:
            logger.exception("Could not release %d hosts; their leases will expire", len(releases))

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
                self._requeues.append((lease.url, lease.retries, None))
                self._give_back_queued(lease.host)
                backoff, errors = self._host_state.pop(lease.host, (0.0, 0))
                self._releases[lease.host] = HostState(lease.host, 0.0, backoff, errors)

    def _give_back_queued(self, host: str) -> None:
        """The host's further URLs go back to pending unchanged (its release follows)."""
        for lease in self._queued.pop(host, ()):
            if self._end_lease(lease):
                self._requeues.append((lease.url, lease.retries, None))

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
        if self._in_flight.get(lease.url) is not lease:
            return False
        del self._in_flight[lease.url]
        self._renewed.pop(lease.url, None)
        if lease.kind == UrlKind.PAGE:
            self._pages_in_flight -= 1
            if self._fleet_left is not None and not fetched_page:
                self._fleet_left += 1
        return True

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

    def finish(self, lease: Lease, update: UrlUpdate, feedback: Feedback) -> bool:
        """Acknowledge a lease with its result; False when the lease had expired."""
        counted = lease.kind == UrlKind.PAGE and update.status in _FINISHED and update.fetched
        if not self._end_lease(lease, fetched_page=counted):
            return False
        if update.status == UrlStatus.PENDING:
            self._requeues.append((lease.url, update.retries, update.outcome_text))
        else:
            self._unacknowledged.add(lease.url)
            if counted:
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
        self._requeues.append((lease.url, lease.retries, None))
        self._release_host(lease.host, feedback)

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

    def return_host(self, host: str, feedback: Feedback) -> None:
        """Release a host taken with ``borrow_host``; its next allowed time follows ``feedback``."""
        self._borrowed.discard(host)
        self._release_host(host, feedback)

    @property
    def uncommitted(self) -> int:
        return len(self._updates) + len(self._unwritten)

    def take_batch(self) -> Batch | None:
        """Hand over the results (and URLs not yet inserted) since the last batch; call on the event loop."""
        if not (self._updates or self._unwritten):
            return None
        batch = Batch(self._unwritten, [], self._updates, [])
        self._unwritten, self._updates = [], []
        self._storing += len(batch.inserts)
        return batch

    def write_batch(self, batch: Batch) -> None:
        self._db.apply(inserts=batch.inserts, leases=[], updates=batch.updates, hosts=[], now=time.time())

    def batch_lost(self, batch: Batch) -> None:
        """The batch was not stored (the store step failed): its URLs no longer keep the crawl open."""
        self._storing -= len(batch.inserts)

    def batch_committed(self, batch: Batch) -> None:
        self._seen.committed(new.url for new in batch.inserts)
        self._unacknowledged.difference_update(u.url for u in batch.updates)
        self._storing -= len(batch.inserts)
        if batch.inserts and self._waiters:
            self._notify()  # workers may be waiting for exactly these URLs

    def commit(self) -> None:
        if self._has_writes():
            self._write_now()
        batch = self.take_batch()
        if batch is not None:
            self.write_batch(batch)
            self.batch_committed(batch)
