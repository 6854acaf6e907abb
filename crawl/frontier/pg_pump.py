"""The pump: the one task that talks to PostgreSQL for a fleet worker, one round at a time.

A round runs off the event loop (one thread call), so the loop never waits on a lock or a
socket. It writes what finished since the last one (URLs back to pending, hosts released,
new URLs when due), reaps expired leases and beats the heart when their time has come, and
leases as many hosts as there are ``lease`` callers waiting, within the page budget, in one
pipelined round trip: round trips follow the rounds, not the pages. Between rounds it
sleeps until the next host is due (``wait_hint``) or something new wakes it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

from core.errors import DatabaseUnavailable
from crawl.frontier.leases import Lease
from crawl.frontier.pg_worker import PgWorkerState
from crawl.state.records import HostState, NewUrl

logger = logging.getLogger(__name__)

__all__ = ["PgPump", "wait_hint"]

_REAP_EVERY_S = 1.0
"""Expired leases are rare (a dead worker); looking for them costs a transaction each time."""
_HEARTBEAT_EVERY_S = 1.0
_INSERT_EVERY_S = 0.25
_INSERT_ROWS = 500
"""New URLs go to the shared frontier when this many wait, at least every ``_INSERT_EVERY_S``,
and at once when a waiting caller may need them (``PgPump``): one insert per page found
would cost three round trips per page."""
_URLS_PER_HOST = 16
"""URLs leased with a host in one round: rounds follow hosts rather than pages, which saves
the pump's CPU and PostgreSQL's on the cores that fetch (DECISIONS 33); more than this saved
no more. The price: a host's newly found better URLs wait behind the batch it holds (sixteen
fetches at its delay), and a dead worker's batch waits for its lease to expire, as any lease does."""


def wait_hint(ready_at: float | None, now: float) -> float:
    """How long to sleep before asking for a lease again: until the next host is ready, within bounds."""
    if ready_at is None:
        return 0.1
    return min(0.25, max(0.005, ready_at - now))


class PgPump(PgWorkerState):
    """The rounds of one worker with the fleet frontier.

    * **New URLs** are inserted by a round when ``_INSERT_ROWS`` wait, every
      ``_INSERT_EVERY_S``, and at once when they may be what a waiting caller needs: a round
      found nothing to lease and nothing is pending in the fleet, a URL of a host new to this
      worker came, or this worker releases a host it found URLs of (``ON CONFLICT DO
      NOTHING``: the table's key is the seen check of record). Inserting at once after every
      round that leased nothing, while other workers held every pending host, cost far more
      rounds and PostgreSQL CPU.
    * **Hosts are shared when they are fewer than the callers:** while another worker is
      short of hosts, a round leases only up to one host more than that worker holds
      (DECISIONS 51).
    * **Slow commits are not deaths:** the heartbeat renews this worker's leases (URLs being
      fetched, queued with a kept host, or finished and waiting for their batch, and the
      hosts it holds), so only a worker that stopped lets leases expire; expired leases of a
      dead worker return to pending with one more attempt, reaped by whichever worker looks first.
    * **The end:** a worker stops when nothing is pending, no other worker holds a lease (it
      could still add links), and it has nothing in flight. Releases still waiting for a
      round are written before ``lease`` says so (and by ``commit``). A worker with nothing
      pending and nothing out asks the loop to commit its results at once (``flush_wanted``).
    """

    def heartbeat(self, now: float | None = None) -> None:
        """Tell the fleet this worker is alive, with its counters (``trawl crawl status`` reads them)."""
        self._db.heartbeat(self.worker_id, time.time() if now is None else now, self._counters())

    def _counters(self) -> dict[str, int]:
        return {"pages_done": self._pages_done, "fetched": self.fetched, "in_flight": len(self._in_flight)}

    def _start_pump(self, *, another_caller: bool = False) -> None:
        """Run the pump, or wake it for a round. One more caller waiting does not wake a pump
        whose last round found no host to lease: the fleet had nothing for the callers already
        waiting, and the pump asks again when the next host is due (at most 0.25 s), when this
        worker releases a host or finds a URL of a host new to it, or when it stops. Woken by
        every caller (and every first URL found after an insert), most rounds leased nothing."""
        if self._pump is None or self._pump.done():
            self._pump = asyncio.ensure_future(self._run_pump())
        elif not (another_caller and self._no_hosts):
            self._notify()

    def _live_waiters(self) -> int:
        while self._waiters and self._waiters[0].done():
            self._waiters.popleft()
        return sum(1 for w in self._waiters if not w.done())

    def _end_all(self) -> None:
        while self._hand_out(None):
            pass

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

    def _housekeeping(self, now: float) -> tuple[bool, bool]:
        """On the loop: expire local leases; say whether this round reaps and heartbeats.

        Nothing is reaped for one lease period after PostgreSQL came back from an outage
        (``PgCrawlDb.reconnected_at``): leases that ran out while no worker could renew
        them are not a dead worker's, and every live worker renews its own meanwhile."""
        reap = now - self._last_reap >= _REAP_EVERY_S and now - self._db.reconnected_at >= self._lease_s
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

    def _write_now(self) -> None:
        """Write waiting requeues and releases synchronously (the pump is gone or the caller is sync)."""
        requeues, self._requeues = self._requeues, []
        releases, self._releases = self._releases, {}
        try:
            self._db.exchange(
                self.worker_id, requeues=requeues, releases=list(releases.values()), n=0, now=0.0, until=0.0
            )
        except Exception as exc:
            if not isinstance(exc, DatabaseUnavailable):
                logger.exception("Could not release %d hosts; their leases will expire", len(releases))
