"""A page that ended ``failed`` comes back in a recrawl ``failed_retry_s`` after its last attempt.

Found by CI: ``trawl run`` killed five times in a row, each time about a second after it
started, held the same URL every time (the first in its queue, its fetch waiting for the
parse worker to boot). Each restart counted that as an attempt, so an innocent page ended
``failed`` like a poison URL, and a continuous crawl never fetched it again. Both backends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from core.settings import CrawlSettings
from crawl.run.loop import Crawler
from crawl.state.records import NewUrl, Outcome, UrlStatus, UrlUpdate
from tests.fixtures.crawl.web import HostServer, Site, html_page, prose


@pytest.fixture
def server() -> Iterator[HostServer]:
    web = Site()
    web.page("/", html_page("Home", prose(6), links=[("/a", "page a")]))
    web.page("/a", html_page("Page a", prose(7)))
    server = HostServer(web, "127.0.0.45").start()
    yield server
    server.stop()


def _fetches(server: HostServer, path: str) -> int:
    return sum(1 for r in server.recorder.requests if r.path == path)


def _crawl(data: Path, server: HostServer, frontier_url: str | None, **settings: Any) -> None:
    s = CrawlSettings(allow_loopback=True, min_delay_s=0, frontier_url=frontier_url, **settings)
    asyncio.run(Crawler(data, s, seeds=[server.url("/")], recrawl=True).run())


def test_a_page_failed_by_crashes_is_fetched_again_after_the_retry_time(
    server: HostServer, crawl_store: Callable[[], Any], tmp_path: Path
) -> None:
    frontier_url = crawl_store.frontier_url  # type: ignore[attr-defined]
    _crawl(tmp_path, server, frontier_url)
    page = server.url("/a")
    assert _fetches(server, "/a") == 1

    # Crawl processes died holding the page until its retries were used up.
    db = crawl_store()
    now = time.time()
    db.schedule_recrawl(now + 60 * 86_400)  # due: pending again, as in a recrawl round
    db.apply(inserts=[], leases=[], updates=[UrlUpdate(page, UrlStatus.PENDING, Outcome.ERROR, retries=3)],
             hosts=[], now=now)  # fmt: skip
    db.apply(inserts=[], leases=[(page, now + 60)], updates=[], hosts=[], now=now)
    db.release_leases(max_retries=3)
    failed = db.row(page)
    assert (failed["status"], failed["outcome"]) == ("failed", "lease expired")
    assert now - 1 <= failed["last_fetch"] <= time.time() + 1  # the attempt is dated
    db.close()

    _crawl(tmp_path, server, frontier_url, failed_retry_s=3600)  # not yet: tried a moment ago
    assert _fetches(server, "/a") == 1
    _crawl(tmp_path, server, frontier_url, failed_retry_s=0)  # 0: failed stays failed
    assert _fetches(server, "/a") == 1

    time.sleep(0.3)
    _crawl(tmp_path, server, frontier_url, failed_retry_s=0.2)
    assert _fetches(server, "/a") == 2
    db = crawl_store()
    fetched = db.row(page)
    assert (fetched["status"], fetched["retries"]) == ("done", 0)
    db.close()


def test_a_recrawl_retries_failed_pages_only_after_their_last_attempt(crawl_store: Callable[[], Any]) -> None:
    """The database rule alone: failed pages older than the retry time, pages only, fresh retries."""
    db = crawl_store()
    try:
        now = 1_000_000.0
        urls = {name: f"http://h/{name}" for name in ("old", "recent", "undated", "sitemap")}
        inserts = [NewUrl(u, "h", 1, 0.5) for n, u in urls.items() if n != "sitemap"]
        db.apply(inserts=inserts, leases=[], updates=[], hosts=[], now=now)
        failed = [
            UrlUpdate(urls["old"], UrlStatus.FAILED, Outcome.HTTP, 503, retries=3, last_fetch=now - 100),
            UrlUpdate(urls["recent"], UrlStatus.FAILED, Outcome.HTTP, 503, retries=3, last_fetch=now - 5),
            UrlUpdate(urls["undated"], UrlStatus.FAILED, Outcome.INTERNAL_ERROR, fetched=True),
        ]
        db.apply(inserts=[], leases=[], updates=failed, hosts=[], now=now - 50)
        assert db.row(urls["undated"])["last_fetch"] == now - 50  # a failure is dated by its batch
        assert db.schedule_recrawl(now) == 0  # without a retry time, failed stays failed
        assert db.schedule_recrawl(now, failed_retry_s=30) == 2
        rows = {name: db.row(u) for name, u in urls.items() if name != "sitemap"}
        assert {n: (r["status"], r["retries"]) for n, r in rows.items()} == {
            "old": ("pending", 0),
            "recent": ("failed", 3),
            "undated": ("pending", 0),
        }
    finally:
        db.close()
