"""Frontier and fleet bugs found by the correctness review, each pinned by what the real
PostgreSQL frontier ends up holding (no mocks: two ``PgFrontier`` workers on one database)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from crawl.frontier.leases import Feedback, Lease
from crawl.frontier.postgres import PgFrontier
from crawl.frontier.seen import SeenUrls
from crawl.frontier.sqlite import Frontier
from crawl.state.postgres import PgCrawlDb
from crawl.state.records import NewUrl, Outcome, UrlStatus, UrlUpdate
from crawl.state.sqlite import CrawlDb


def _worker(db: PgCrawlDb, name: str, **options: float) -> PgFrontier:
    settings: dict[str, float] = {"min_delay_s": 0.0, "response_time_factor": 0.0, "backoff_base_s": 0.0}
    settings.update(options)
    return PgFrontier(db, SeenUrls(db, capacity=100), worker_id=name, **settings)  # type: ignore[arg-type]


def _done(lease: Lease) -> UrlUpdate:
    return UrlUpdate(lease.url, UrlStatus.DONE, Outcome.INDEXED, 200, fetched=True, last_fetch=time.time())


def test_a_late_retry_result_does_not_reopen_a_page_another_worker_finished(pg_dsn: str) -> None:
    """Worker A's fetch fails and is retried: the URL goes back to pending at once, worker B
    fetches it and commits ``done``; A's batch, committed later, carried the retry's
    ``pending`` row and set the page pending again, so the fleet fetched it a third time."""
    db_a, db_b = PgCrawlDb(pg_dsn), PgCrawlDb(pg_dsn)
    url = "http://127.0.0.61/page"

    async def scenario() -> None:
        a, b = _worker(db_a, "a"), _worker(db_b, "b")
        a.add(NewUrl(url, "127.0.0.61", 0, 1.0))
        first = await asyncio.wait_for(a.lease(), timeout=5)
        assert first is not None and first.url == url
        retry = UrlUpdate(url, UrlStatus.PENDING, Outcome.ERROR, retries=1, detail="timeout")
        a.finish(first, retry, Feedback(error=True))  # A's batch is not stored yet
        again = await asyncio.wait_for(b.lease(), timeout=5)
        assert again is not None and again.url == url and again.retries == 1
        b.finish(again, _done(again), Feedback())
        b.commit()
        a.commit()  # A's store step was slower than B's

    asyncio.run(scenario())
    row = db_a.row(url)
    assert row is not None
    assert (row["status"], row["outcome"], row["fetch_count"]) == ("done", "indexed", 1)
    db_a.close()
    db_b.close()


def test_a_kept_host_and_its_urls_stay_leased_while_its_worker_works_through_them(pg_dsn: str) -> None:
    """A round leases a host with four URLs and the worker keeps it, handing them out one
    host delay apart: with a 1 s delay the last starts 3 s after the round, past a 2 s lease.
    Nothing renewed the host's lease or the queued URLs' (only results waiting for their
    batch), so the reaper counted a live worker's URLs as lost attempts and freed its host
    for another worker in the middle of its delay."""
    db_a, db_b = PgCrawlDb(pg_dsn), PgCrawlDb(pg_dsn)
    host = "127.0.0.62"
    urls = [f"http://{host}/{i}" for i in range(4)]

    async def scenario() -> list[tuple[str, str, int]]:
        options = {"min_delay_s": 1.0, "lease_s": 2.0}
        a, b = _worker(db_a, "a", **options), _worker(db_b, "b", **options)
        for url in urls:
            a.add(NewUrl(url, host, 1, 0.5))
        handed: list[tuple[str, str, int]] = []

        async def work(frontier: PgFrontier, name: str) -> None:
            while (lease := await asyncio.wait_for(frontier.lease(), timeout=10)) is not None:
                handed.append((lease.url, name, lease.retries))
                frontier.finish(lease, _done(lease), Feedback())
                if len(handed) == len(urls):
                    frontier.commit()

        first = await asyncio.wait_for(a.lease(), timeout=5)  # A holds the host and all four URLs
        assert first is not None
        handed.append((first.url, "a", first.retries))
        a.finish(first, _done(first), Feedback())
        await asyncio.gather(work(a, "a"), work(b, "b"))
        return handed

    handed = asyncio.run(scenario())
    assert handed == [(url, "a", 0) for url in urls]
    assert {db_a.row(url)["status"] for url in urls} == {"done"}  # type: ignore[index]
    db_a.close()
    db_b.close()


def test_a_resumed_sqlite_crawl_keeps_counting_a_hosts_errors(tmp_path: Path) -> None:
    """The SQLite frontier restored a host's next allowed time and backoff on resume but not its
    error count, and its next write stored the count since the restart over the total (the
    host dashboard ranks hosts by it); PostgreSQL keeps counting from the stored row."""
    host = "127.0.0.63"

    async def fail_once(db: CrawlDb, path: str) -> None:
        frontier = Frontier(db, SeenUrls(db, capacity=100), min_delay_s=0.0, backoff_base_s=0.0)
        frontier.add(NewUrl(f"http://{host}/{path}", host, 0, 1.0))
        lease = await asyncio.wait_for(frontier.lease(), timeout=5)
        assert lease is not None
        failed = UrlUpdate(lease.url, UrlStatus.FAILED, Outcome.ERROR, fetched=True, detail="timeout")
        frontier.finish(lease, failed, Feedback(error=True))
        frontier.commit()

    for path in ["a", "b", "c"]:  # three runs of one crawl, one failure each
        db = CrawlDb(tmp_path / "crawl.sqlite3")
        asyncio.run(fail_once(db, path))
        db.close()
    db = CrawlDb(tmp_path / "crawl.sqlite3")
    assert [h.errors for h in db.host_health(time.time())] == [3]
    db.close()
