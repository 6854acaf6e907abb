"""Frontier scheduling: politeness per host, backoff, budgets, leases and resume.

Every test runs on both backends (``crawl_store``): the SQLite frontier and the
PostgreSQL one a fleet shares.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from crawl.frontier import Feedback, Frontier, Lease
from crawl.frontier_pg import PgFrontier
from crawl.frontier_store import FrontierApi
from crawl.seen import SeenUrls
from crawl.state import CrawlDb, NewUrl, Outcome, UrlStatus, UrlUpdate
from crawl.state_pg import PgCrawlDb


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
    async def scenario() -> list[tuple[str, float]]:
        frontier = _frontier(db)
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
    assert order[1][1] < 0.05  # another host is not delayed
    assert order[2][1] >= 0.19  # same host waits min_delay after the response


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
    assert 0.29 <= gaps[0] < 0.45 and 0.59 <= gaps[1] < 0.8 and 1.19 <= gaps[2] < 1.5, gaps


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
