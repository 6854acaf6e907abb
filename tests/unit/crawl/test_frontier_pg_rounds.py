"""The PostgreSQL frontier's rounds: callers waiting together are served by one lease
statement, a host comes with its next URLs, and never more than one URL of a host is out
at a time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from crawl.frontier import pg_pump
from crawl.frontier.leases import Feedback, Lease
from crawl.frontier.postgres import PgFrontier
from crawl.frontier.seen import SeenUrls
from crawl.state.postgres import PgCrawlDb
from crawl.state.records import NewUrl, Outcome, UrlStatus, UrlUpdate


class _CountingDb(PgCrawlDb):
    """The real database, remembering per round the hosts asked for, the hosts and URLs got."""

    rounds: list[tuple[int, int, int]]

    def exchange(self, owner: str, **kw: Any) -> list[dict[str, Any]]:
        rows = super().exchange(owner, **kw)
        if kw["n"]:
            self.rounds.append((kw["n"], len({r["host"] for r in rows}), len(rows)))
        return rows


async def _until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Wait for ``condition`` however loaded the machine is; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def _done(lease: Lease) -> UrlUpdate:
    return UrlUpdate(lease.url, UrlStatus.DONE, Outcome.INDEXED, 200, fetched=True, last_fetch=time.time())


async def _first_of_three(frontier: PgFrontier) -> Lease:
    """Give the frontier three URLs of host ``a``; lease and finish the first (so ``a`` is kept)."""
    for i in range(3):
        frontier.add(NewUrl(f"http://a/{i}", "a", 1, 0.5))
    first = await frontier.lease()
    assert first is not None
    frontier.finish(first, _done(first), Feedback())
    return first


def test_waiting_callers_share_a_round_and_get_one_url_per_host(pg_dsn: str) -> None:
    db = _CountingDb(pg_dsn)
    db.rounds = []

    async def scenario() -> tuple[list[list[str]], list[tuple[int, int, int]]]:
        frontier = PgFrontier(db, SeenUrls(db, capacity=100), min_delay_s=0.0, response_time_factor=0.0)
        for host in "abc":
            for i in range(2):
                frontier.add(NewUrl(f"http://{host}/{i}", host, 1, 0.5))
        callers = [asyncio.ensure_future(frontier.lease()) for _ in range(7)]
        waves: list[list[str]] = []
        for _ in range(2):
            await _until(lambda cs=callers: sum(c.done() for c in cs) >= 3)  # one URL per host
            await asyncio.sleep(0.05)  # room for a (wrong) fourth lease to show
            wave = [c.result() for c in callers if c.done() and c.result() is not None]
            callers = [c for c in callers if not c.done()]
            assert all(lease is not None for lease in wave)
            waves.append(sorted(lease.url for lease in wave if lease is not None))
            first_round = list(db.rounds[:1])
            assert all(got == 0 for _, got, _ in db.rounds[1:])  # the second wave came with the first
            for lease in wave:
                assert lease is not None
                frontier.finish(lease, _done(lease), Feedback())
        rest = await asyncio.wait_for(asyncio.gather(*callers), timeout=5)
        assert rest == [None]  # the crawl is over for the caller still waiting
        return waves, first_round

    waves, first_round = asyncio.run(scenario())
    # Seven callers, three hosts: one round asks for seven hosts, gets the three with both
    # their URLs, and hands out one URL of each; each host's second URL follows its first.
    assert first_round == [(7, 3, 6)]
    assert waves == [["http://a/0", "http://b/0", "http://c/0"], ["http://a/1", "http://b/1", "http://c/1"]]
    assert db.count_finished_pages() == 0  # acknowledged only by a batch write
    db.close()


def test_a_kept_host_waits_its_delay_and_an_error_gives_its_urls_back(pg_dsn: str) -> None:
    db = _CountingDb(pg_dsn)
    db.rounds = []

    async def scenario() -> tuple[float, float, list[str]]:
        frontier = PgFrontier(
            db,
            SeenUrls(db, capacity=100),
            min_delay_s=0.4,
            response_time_factor=0.0,
            backoff_base_s=0.8,
        )
        first = await _first_of_three(frontier)
        finished = time.monotonic()
        second = await asyncio.wait_for(frontier.lease(), timeout=5)
        kept_wait = time.monotonic() - finished
        assert second is not None
        rounds_with_leases = sum(1 for _, hosts, _ in db.rounds if hosts)
        frontier.finish(second, _done(second), Feedback(error=True))
        failed = time.monotonic()
        third = await asyncio.wait_for(frontier.lease(), timeout=5)
        backoff_wait = time.monotonic() - failed
        assert third is not None
        assert sum(1 for _, hosts, _ in db.rounds if hosts) == rounds_with_leases + 1  # leased again
        assert rounds_with_leases == 1
        return kept_wait, backoff_wait, [first.url, second.url, third.url]

    kept_wait, backoff_wait, urls = asyncio.run(scenario())
    # One round leased the host with all three URLs; the second came after the host's
    # delay without a round; the error sent the third back to the fleet with the host,
    # which no one may ask before its backoff.
    assert db.rounds[0][1:] == (1, 3)
    assert urls == ["http://a/0", "http://a/1", "http://a/2"]
    assert kept_wait >= 0.4
    assert backoff_wait >= 0.8
    db.close()


def test_a_stop_gives_a_kept_hosts_urls_back_at_once_and_keeps_its_delay(pg_dsn: str) -> None:
    first_db, second_db = PgCrawlDb(pg_dsn), PgCrawlDb(pg_dsn)

    async def scenario() -> tuple[float, str]:
        stopping = PgFrontier(
            first_db,
            SeenUrls(first_db, capacity=100),
            worker_id="a",
            min_delay_s=2.0,
            response_time_factor=0.0,
        )
        await _first_of_three(stopping)  # kept: its next URL is due in 2 s
        finished, finished_wall = time.monotonic(), time.time()
        stopping.stop()
        assert await stopping.lease() is None

        def given_back() -> bool:  # the stopping pump's round gives the kept host back
            stopping.commit()
            return second_db.idle("b")[0]

        await _until(given_back)
        seen_at = time.time()
        pending, others, ready_at = second_db.idle("b")
        assert (pending, others) == (True, False)
        assert ready_at is not None and ready_at >= finished_wall + 1.9  # with the host's delay
        assert seen_at < ready_at  # back at once, not when the delay is over
        other = PgFrontier(
            second_db,
            SeenUrls(second_db, capacity=100),
            worker_id="b",
            min_delay_s=2.0,
            response_time_factor=0.0,
        )
        taken = await asyncio.wait_for(other.lease(), timeout=10)  # not the 300 s lease expiry
        assert taken is not None
        return time.monotonic() - finished, taken.url

    waited, url = asyncio.run(scenario())
    assert url == "http://a/1"
    assert waited >= 1.9  # the host's delay holds for the other worker too
    first_db.close()
    second_db.close()


def test_urls_in_a_batch_being_stored_keep_the_crawl_open(pg_dsn: str) -> None:
    """A page found while the only other URL is being stored: its URL is neither pending in
    the database nor waiting to be inserted, yet the crawl is not over (the race that ended a
    ``trawl run`` round before robots.txt's sitemap was fetched)."""
    db = PgCrawlDb(pg_dsn)

    async def scenario() -> tuple[bool, str | None, Lease | None]:
        frontier = PgFrontier(db, SeenUrls(db, capacity=100), min_delay_s=0.0, response_time_factor=0.0)
        frontier.add(NewUrl("http://s/", "s", 0, 1.0))
        first = await frontier.lease()
        assert first is not None
        frontier.finish(first, _done(first), Feedback())
        frontier.add(NewUrl("http://s/sitemap.xml", "s", 0, 0.9))
        batch = frontier.take_batch()  # the store step has it; nothing is pending or unwritten
        assert batch is not None
        waiting = asyncio.ensure_future(frontier.lease())
        await asyncio.sleep(0.6)  # a few pump rounds
        ended_early = waiting.done()
        await asyncio.to_thread(frontier.write_batch, batch)
        frontier.batch_committed(batch)
        second = await asyncio.wait_for(waiting, timeout=5)
        assert second is not None
        frontier.finish(second, _done(second), Feedback())
        lost_batch = frontier.take_batch()
        assert lost_batch is not None
        frontier.batch_lost(lost_batch)  # a failed store step must not keep the crawl open
        last = await asyncio.wait_for(frontier.lease(), timeout=5)
        return ended_early, second.url, last

    ended_early, url, last = asyncio.run(scenario())
    assert not ended_early
    assert url == "http://s/sitemap.xml"
    assert last is None
    db.close()


async def _held_by_another_worker(db: PgCrawlDb, host: str) -> PgFrontier:
    """A worker ("holder") holding ``host``, leased with 16 of its 20 URLs: 4 stay pending."""
    holder = PgFrontier(db, SeenUrls(db, capacity=100), worker_id="holder", min_delay_s=0.0,
                        response_time_factor=0.0)  # fmt: skip
    for i in range(20):
        holder.add(NewUrl(f"http://{host}/{i}", host, 1, 0.5))
    held = await holder.lease()
    assert held is not None and held.host == host
    return holder


def _worker(db: PgCrawlDb, worker_id: str) -> PgFrontier:
    return PgFrontier(db, SeenUrls(db, capacity=100), worker_id=worker_id, min_delay_s=0.0,
                      response_time_factor=0.0)  # fmt: skip


def test_callers_left_without_a_host_do_not_each_run_a_round(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a round found no host (another worker holds the only one), one more caller is no
    reason to ask the database again; a URL of a host new to this worker is.

    The pump's timed round (due at most 0.25 s after the last) is pushed out of the test's
    reach, so only the callers and the new URL can cause a round, however slow the machine."""
    monkeypatch.setattr(pg_pump, "wait_hint", lambda ready_at, now: 60.0)
    holder_db, db = PgCrawlDb(pg_dsn), _CountingDb(pg_dsn)
    db.rounds = []

    async def scenario() -> None:
        holder = await _held_by_another_worker(holder_db, "a")
        idle = _worker(db, "idle")
        callers = [asyncio.ensure_future(idle.lease()) for _ in range(2)]
        # The round is recorded from the database thread before the pump reads its answer:
        # wait until the pump knows it found no host, as a caller arriving later would see it.
        await _until(lambda: bool(db.rounds) and idle._no_hosts)
        assert all(got == 0 for _, got, _ in db.rounds)
        asked = len(db.rounds)
        callers += [asyncio.ensure_future(idle.lease()) for _ in range(3)]
        await asyncio.sleep(0.1)  # room for a (wrong) round per caller; no timed round is due
        assert len(db.rounds) == asked
        idle.add(NewUrl("http://z/0", "z", 1, 0.5))
        done, _ = await asyncio.wait(callers, timeout=5, return_when=asyncio.FIRST_COMPLETED)
        assert [task.result().url for task in done if task.result() is not None] == ["http://z/0"]
        idle.stop()
        holder.stop()
        await asyncio.wait_for(asyncio.gather(*callers), timeout=5)

    asyncio.run(scenario())
    holder_db.close()
    db.close()


class _InsertsDb(PgCrawlDb):
    """The real database, remembering per exchange the URLs inserted and the hosts released."""

    exchanges: list[tuple[list[str], list[str]]]

    def exchange(self, owner: str, **kw: Any) -> list[dict[str, Any]]:
        self.exchanges.append(([n.url for n in kw.get("inserts", ())], [h.host for h in kw["releases"]]))
        return super().exchange(owner, **kw)


def test_a_released_host_takes_the_urls_found_of_it_along(pg_dsn: str) -> None:
    """While other hosts are pending (held by another worker), new URLs wait for the timed
    insert, except those of a host this worker releases: they go in with its release, so the
    host's next lease can have them."""
    holder_db, db = PgCrawlDb(pg_dsn), _InsertsDb(pg_dsn)
    db.exchanges = []

    async def scenario() -> None:
        holder = await _held_by_another_worker(holder_db, "b")
        worker = _worker(db, "worker")
        worker.add(NewUrl("http://a/0", "a", 1, 0.5))
        first = await worker.lease()
        assert first is not None and first.url == "http://a/0"
        worker.add(NewUrl("http://a/1", "a", 1, 0.5))  # found on a/0
        waiting = asyncio.ensure_future(worker.lease())
        await asyncio.sleep(0.02)
        worker.finish(first, _done(first), Feedback())
        second = await asyncio.wait_for(waiting, timeout=5)
        assert second is not None and second.url == "http://a/1"
        released = next(i for i, (_, hosts) in enumerate(db.exchanges) if "a" in hosts)
        inserted = next(i for i, (urls, _) in enumerate(db.exchanges) if "http://a/1" in urls)
        assert inserted <= released, db.exchanges
        worker.stop()
        holder.stop()

    asyncio.run(scenario())
    holder_db.close()
    db.close()


def test_a_worker_with_nothing_left_asks_for_its_results_to_be_committed_at_once(pg_dsn: str) -> None:
    """Its finished URLs stay leased until committed, and a leased URL keeps every other
    worker's crawl open: waiting for the timed flush idled a two-worker bench crawl ~1.8 s."""
    first_db, second_db = PgCrawlDb(pg_dsn), PgCrawlDb(pg_dsn)

    async def scenario() -> tuple[bool, bool, bool, bool, Lease | None]:
        done_first, waiting_other = (
            PgFrontier(d, SeenUrls(d, capacity=100), worker_id=w, min_delay_s=0.0, response_time_factor=0.0)
            for d, w in ((first_db, "a"), (second_db, "b"))
        )
        for i in range(2):
            done_first.add(NewUrl(f"http://a/{i}", "a", 1, 0.5))
        first = await done_first.lease()
        assert first is not None
        done_first.finish(first, _done(first), Feedback())
        second = await done_first.lease()  # the host's next URL, still out
        assert second is not None
        again = asyncio.ensure_future(done_first.lease())
        other = asyncio.ensure_future(waiting_other.lease())
        await asyncio.sleep(0.6)  # pump rounds with a URL out: no early commit yet
        wanted_while_out = done_first.flush_wanted.is_set()
        done_first.finish(second, _done(second), Feedback())
        await asyncio.wait_for(done_first.flush_wanted.wait(), timeout=5)
        other_waited = not other.done()  # the finished URLs are leased until committed
        done_first.flush_wanted.clear()
        batch = done_first.take_batch()
        assert batch is not None
        await asyncio.to_thread(done_first.write_batch, batch)
        done_first.batch_committed(batch)
        ended = await asyncio.wait_for(other, timeout=5)
        first_ended = await asyncio.wait_for(again, timeout=5)
        return wanted_while_out, other_waited, first_ended is None, waiting_other.flush_wanted.is_set(), ended

    wanted_while_out, other_waited, first_ended, other_wanted, ended = asyncio.run(scenario())
    assert not wanted_while_out
    assert other_waited
    assert first_ended and ended is None  # the crawl is over for both once the results are in
    assert not other_wanted  # it finished nothing: nothing of it to commit
    assert first_db.count_finished_pages() == 2
    first_db.close()
    second_db.close()
