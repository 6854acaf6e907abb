"""Frontier scheduling: politeness per host, backoff, budgets, leases and resume.

Every test runs on both backends (``crawl_store``): the SQLite frontier and the
PostgreSQL one a fleet shares.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from crawl.frontier.interface import FrontierApi
from crawl.frontier.leases import Feedback, Lease
from crawl.frontier.postgres import PgFrontier
from crawl.frontier.seen import SeenUrls
from crawl.frontier.sqlite import Frontier
from crawl.state.postgres import PgCrawlDb
from crawl.state.records import NewUrl, Outcome, UrlStatus, UrlUpdate
from crawl.state.sqlite import CrawlDb


def _frontier(db: CrawlDb | PgCrawlDb, **kw: float) -> FrontierApi:
    options = {"min_delay_s": 0.2, "response_time_factor": 0.0, "backoff_base_s": 0.3, "max_backoff_s": 5.0}
    options.update(kw)
    kind = PgFrontier if isinstance(db, PgCrawlDb) else Frontier
    return kind(db, SeenUrls(db, capacity=1000), **options)  # type: ignore[arg-type]


def _add(frontier: FrontierApi, url: str, priority: float = 0.5) -> bool:
    host = url.split("/")[2]
    return frontier.add(NewUrl(url, host, 1, priority))


def _done(lease: Lease) -> UrlUpdate:
    return UrlUpdate(lease.url, UrlStatus.DONE, Outcome.INDEXED, 200, fetched=True, last_fetch=time.time())


@pytest.fixture
def db(crawl_store: Callable[[], Any]) -> CrawlDb | PgCrawlDb:
    return crawl_store()  # type: ignore[no-any-return]


def test_one_host_at_a_time_and_min_delay(db: CrawlDb) -> None:
    """A delay long enough that "not delayed" and "delayed" cannot be confused on a loaded machine."""

    async def scenario() -> list[tuple[str, float]]:
        frontier = _frontier(db, min_delay_s=2.0)
        for url in ("http://a/1", "http://a/2", "http://b/1"):
            _add(frontier, url)
        assert not _add(frontier, "http://a/1")  # seen
        started = time.monotonic()
        first = await frontier.lease()
        second = await frontier.lease()
        assert first is not None and second is not None
        order = [(first.url, 0.0), (second.url, time.monotonic() - started)]
        waiter = asyncio.ensure_future(frontier.lease())
        await asyncio.sleep(0.05)
        assert not waiter.done()  # a/2 waits: host a is busy
        frontier.finish(first, _done(first), Feedback(response_s=0.01))
        finished_at = time.monotonic()
        third = await waiter
        assert third is not None
        order.append((third.url, time.monotonic() - finished_at))
        frontier.finish(second, _done(second), Feedback())
        frontier.finish(third, _done(third), Feedback())
        assert await frontier.lease() is None  # nothing left
        return order

    order = asyncio.run(scenario())
    assert [u for u, _ in order] == ["http://a/1", "http://b/1", "http://a/2"]
    assert order[1][1] < 1.0  # another host is not delayed
    assert order[2][1] >= 1.99  # same host waits min_delay after the response


def test_priority_orders_urls_within_a_host(db: CrawlDb) -> None:
    async def scenario() -> list[str]:
        frontier = _frontier(db, min_delay_s=0.0)
        _add(frontier, "http://a/low", 0.1)
        _add(frontier, "http://a/high", 0.9)
        _add(frontier, "http://a/mid", 0.5)
        urls = []
        while (lease := await frontier.lease()) is not None:
            urls.append(lease.url)
            frontier.finish(lease, _done(lease), Feedback())
        return urls

    assert asyncio.run(scenario()) == ["http://a/high", "http://a/mid", "http://a/low"]


def test_errors_back_off_exponentially_and_retry_after_wins(db: CrawlDb) -> None:
    async def scenario() -> list[float]:
        frontier = _frontier(db, min_delay_s=0.0)
        for i in range(4):
            _add(frontier, f"http://a/{i}")
        gaps = []
        lease = await frontier.lease()
        feedbacks = [Feedback(error=True), Feedback(error=True), Feedback(error=True, retry_after_s=1.0)]
        for feedback in feedbacks:
            assert lease is not None
            frontier.finish(lease, _done(lease), feedback)
            released = time.monotonic()
            lease = await frontier.lease()
            gaps.append(time.monotonic() - released)
        return gaps

    gaps = asyncio.run(scenario())
    # Each wait is at least its backoff step and short of the next one (twice as long).
    assert 0.29 <= gaps[0] < 0.6 and 0.59 <= gaps[1] < 1.2 and 1.19 <= gaps[2] < 2.4, gaps


def test_retry_requeues_and_page_budget_stops(db: CrawlDb) -> None:
    async def scenario() -> list[str]:
        frontier = _frontier(db, min_delay_s=0.0, max_pages=2)
        for i in range(5):
            _add(frontier, f"http://h{i}/")
        seen = []
        while (lease := await frontier.lease()) is not None:
            seen.append(lease.url)
            if lease.url == "http://h0/" and lease.retries == 0:
                frontier.finish(
                    lease, UrlUpdate(lease.url, UrlStatus.PENDING, Outcome.HTTP, 503, retries=1), Feedback()
                )
            else:
                frontier.finish(lease, _done(lease), Feedback())
        frontier.commit()
        return seen

    seen = asyncio.run(scenario())
    # h0 went back to its queue for a retry; h1 and h2 finished and spent the budget.
    assert seen == ["http://h0/", "http://h1/", "http://h2/"]
    row = db.row("http://h0/")
    assert row is not None and (row["status"], row["retries"], row["outcome"]) == ("pending", 1, "http 503")
    assert db.count_finished_pages() == 2


def test_per_host_budget_records_blocked(db: CrawlDb) -> None:
    frontier = _frontier(db, max_pages_per_host=2)
    assert [_add(frontier, f"http://a/{i}") for i in range(4)] == [True, True, False, False]
    frontier.commit()
    assert db.row("http://a/3")["blocked_reason"] == "host page budget reached"  # type: ignore[index]
    assert not _add(frontier, "http://a/3")


def test_resume_after_crash_keeps_finished_and_returns_leased(
    db: CrawlDb, crawl_store: Callable[[], Any]
) -> None:
    async def first_run() -> None:
        frontier = _frontier(db, min_delay_s=0.0)
        for i in range(3):
            _add(frontier, f"http://h{i}/")
        finished = await frontier.lease()
        leased = await frontier.lease()
        assert finished is not None and leased is not None
        frontier.finish(finished, _done(finished), Feedback())
        frontier.commit()  # then the process dies holding `leased`
        assert db.row(leased.url)["status"] == "leased"  # type: ignore[index]

    asyncio.run(first_run())
    db.close()
    reopened = crawl_store()

    async def second_run() -> list[str]:
        frontier = _frontier(reopened, min_delay_s=0.0)
        assert frontier.pages_done == 1
        urls = []
        while (lease := await frontier.lease()) is not None:
            urls.append(lease.url)
            frontier.finish(lease, _done(lease), Feedback())
        return urls

    assert sorted(asyncio.run(second_run())) == ["http://h1/", "http://h2/"]


def test_expired_lease_returns_to_pending(db: CrawlDb) -> None:
    async def scenario() -> tuple[str, str, bool]:
        frontier = _frontier(db, min_delay_s=0.0, lease_s=0.1)
        _add(frontier, "http://a/1")
        lease = await frontier.lease()
        assert lease is not None
        again = await asyncio.wait_for(frontier.lease(), timeout=3)
        assert again is not None
        late = frontier.finish(lease, _done(lease), Feedback())
        return lease.url, again.url, late

    first, again, late_ack_accepted = asyncio.run(scenario())
    assert (first, again, late_ack_accepted) == ("http://a/1", "http://a/1", False)


def test_seen_filter_is_rebuilt_from_the_table(db: CrawlDb) -> None:
    frontier = _frontier(db)
    for i in range(50):
        _add(frontier, f"http://a/{i}")
    frontier.commit()
    seen = SeenUrls(db, capacity=10)  # rebuilt and grown past its capacity
    assert len(seen) == 50
    assert not seen.add_if_new("http://a/7")
    assert seen.add_if_new("http://a/new")
    assert not seen.add_if_new("http://a/new")


def test_a_borrowed_host_waits_like_a_lease_and_holds_the_host(db: CrawlDb) -> None:
    """``borrow_host`` (a robots.txt redirect's request to another host) waits until the
    host's URL is back and its delay passed, and no URL of it is leased while it is held."""

    async def scenario() -> tuple[float, bool, float]:
        frontier = _frontier(db)
        _add(frontier, "http://a/1")
        first = await frontier.lease()
        assert first is not None
        borrower = asyncio.ensure_future(frontier.borrow_host("a", wait_s=5.0))
        await asyncio.sleep(0.1)
        assert not borrower.done()  # a/1 is out
        frontier.finish(first, _done(first), Feedback(response_s=0.01))
        finished_at = time.monotonic()
        lent = await borrower
        lent_after = time.monotonic() - finished_at
        _add(frontier, "http://a/2")
        waiter = asyncio.ensure_future(frontier.lease())
        await asyncio.sleep(0.4)
        held = not waiter.done()
        frontier.return_host("a", Feedback(response_s=0.01))
        returned_at = time.monotonic()
        second = await asyncio.wait_for(waiter, timeout=5)
        assert second is not None and second.url == "http://a/2"
        leased_after = time.monotonic() - returned_at
        frontier.finish(second, _done(second), Feedback())
        assert lent
        return lent_after, held, leased_after

    lent_after, held, leased_after = asyncio.run(scenario())
    assert lent_after >= 0.19  # min_delay after a/1's answer
    assert held  # a/2 waited while the host was lent
    assert leased_after >= 0.19  # and min_delay after the borrowed request


def test_a_host_that_stays_busy_is_not_lent(db: CrawlDb) -> None:
    async def scenario() -> tuple[bool, float, bool]:
        frontier = _frontier(db)
        _add(frontier, "http://a/1")
        lease = await frontier.lease()
        assert lease is not None
        started = time.monotonic()
        lent = await frontier.borrow_host("a", wait_s=0.3)
        waited = time.monotonic() - started
        other = await frontier.borrow_host("never-seen.test", wait_s=0.3)  # a host with no URL
        frontier.return_host("never-seen.test", Feedback())
        frontier.finish(lease, _done(lease), Feedback())
        return lent, waited, other

    lent, waited, other = asyncio.run(scenario())
    assert not lent and 0.28 <= waited < 5.0  # gave up after wait_s, not never
    assert other


def test_a_host_borrowed_by_one_worker_is_not_leased_by_another(pg_dsn: str) -> None:
    """On the fleet the borrow is a lease of the host's row: another worker waits for it."""

    async def scenario() -> tuple[bool, bool, bool, float]:
        first_db, second_db = PgCrawlDb(pg_dsn), PgCrawlDb(pg_dsn)
        one = PgFrontier(first_db, SeenUrls(first_db, capacity=100), worker_id="one", min_delay_s=0.2,
                         response_time_factor=0.0)  # fmt: skip
        two = PgFrontier(second_db, SeenUrls(second_db, capacity=100), worker_id="two", min_delay_s=0.2,
                         response_time_factor=0.0)  # fmt: skip
        two.add(NewUrl("http://b/1", "b", 1, 0.5))
        two.commit()
        lent = await one.borrow_host("b", wait_s=2.0)
        waiter = asyncio.ensure_future(two.lease())
        await asyncio.sleep(0.6)
        held = not waiter.done()
        refused = not await two.borrow_host("b", wait_s=0.2)
        one.return_host("b", Feedback(response_s=0.01))
        returned_at = time.monotonic()
        lease = await asyncio.wait_for(waiter, timeout=5)
        assert lease is not None and lease.url == "http://b/1"
        after = time.monotonic() - returned_at
        two.finish(lease, _done(lease), Feedback())
        two.commit()
        one.commit()
        first_db.close()
        second_db.close()
        return lent, held, refused, after

    lent, held, refused, after = asyncio.run(scenario())
    assert lent and held and refused
    assert after >= 0.19  # the release carried the borrowed request's delay


def test_a_refetch_lease_says_when_the_page_came_due(db: CrawlDb) -> None:
    """``Lease.due_at`` (the recrawl lag metric) is the stored next-fetch time; 0 on a first fetch."""
    due = time.time() - 100.0

    async def first_fetch() -> float:
        frontier = _frontier(db, min_delay_s=0.0)
        _add(frontier, "http://a/1")
        lease = await frontier.lease()
        assert lease is not None
        frontier.finish(lease, replace(_done(lease), next_fetch=due, interval_s=3600.0), Feedback())
        frontier.commit()
        return lease.due_at

    async def refetch() -> float:
        frontier = _frontier(db, min_delay_s=0.0)
        lease = await frontier.lease()
        assert lease is not None and lease.url == "http://a/1" and lease.fetch_count == 1
        frontier.finish(lease, _done(lease), Feedback())
        frontier.commit()
        return lease.due_at

    assert asyncio.run(first_fetch()) == 0.0
    assert db.schedule_recrawl(time.time()) == 1
    assert asyncio.run(refetch()) == pytest.approx(due)


def test_a_borrower_is_not_starved_by_the_hosts_own_urls(db: CrawlDb) -> None:
    """While ``borrow_host`` waits for a host, the frontier leases none of its URLs (nor keeps
    it for its next one): the borrower gets it when its URL out comes back."""

    async def scenario() -> tuple[bool, float, int, int, int]:
        frontier = _frontier(db)
        for i in range(8):
            _add(frontier, f"http://a/{i}")
        fetched: list[str] = []

        async def worker() -> None:
            while (lease := await frontier.lease()) is not None:
                fetched.append(lease.url)
                await asyncio.sleep(0.05)
                frontier.finish(lease, _done(lease), Feedback(response_s=0.05))

        task = asyncio.ensure_future(worker())
        while not fetched:  # a/0 is out
            await asyncio.sleep(0.01)
        started = time.monotonic()
        lent = await frontier.borrow_host("a", wait_s=3.0)
        waited = time.monotonic() - started
        during = len(fetched)
        await asyncio.sleep(0.5)
        while_lent = len(fetched)
        frontier.return_host("a", Feedback())
        await asyncio.wait_for(task, timeout=20)
        frontier.commit()
        return lent, waited, during, while_lent, len(fetched)

    lent, waited, during, while_lent, total = asyncio.run(scenario())
    assert lent, waited
    assert during == 1  # one URL's fetch and min_delay, not a race lost over and over
    assert while_lent == 1  # nothing of the host was leased meanwhile
    assert total == 8  # and its URLs were all fetched after the loan


def test_a_stopping_frontier_lends_nothing(db: CrawlDb) -> None:
    async def scenario() -> tuple[bool, float]:
        frontier = _frontier(db)
        _add(frontier, "http://a/1")
        lease = await frontier.lease()
        assert lease is not None
        borrower = asyncio.ensure_future(frontier.borrow_host("a", wait_s=5.0))
        await asyncio.sleep(0.1)
        frontier.stop()
        stopped = time.monotonic()
        lent = await asyncio.wait_for(borrower, timeout=6)
        frontier.finish(lease, _done(lease), Feedback())
        return lent, time.monotonic() - stopped

    lent, after = asyncio.run(scenario())
    assert not lent and after < 4.0  # Ctrl-C does not wait out the 5 s loan
