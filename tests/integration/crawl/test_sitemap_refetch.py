"""A continuous crawl fetches known sitemaps again, so a newer ``<lastmod>`` makes its page due."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from core.crawldir import CrawlDir
from core.docstore import DocStore
from core.settings import CrawlSettings
from crawl.run.continuous import ContinuousCrawl
from crawl.state.records import NewUrl, Outcome, UrlKind, UrlStatus, UrlUpdate
from tests.fixtures.crawl.web import HostServer, Site, html_page, prose

REFETCH_S = 1.0


class ChangingSite:
    """``/a`` and the sitemap that lists it; at the sitemap's first refetch the page changes
    and the sitemap dates the change. Each request notes the crawl round it came in."""

    def __init__(self) -> None:
        self.crawl: ContinuousCrawl | None = None
        self.changed_at: float | None = None
        self.sitemap: list[tuple[int, float, str]] = []
        """(round, time, If-None-Match) per sitemap request."""
        self.page: list[int] = []
        """The round of each request for ``/a``."""
        self.base = ""

    def _round(self) -> int:
        assert self.crawl is not None
        return self.crawl.rounds

    async def sitemap_xml(self, request: Request) -> Response:
        sent = request.headers.get("if-none-match", "")
        self.sitemap.append((self._round(), time.time(), sent))
        if len(self.sitemap) == 2:
            self.changed_at = time.time()
        version = '"v2"' if self.changed_at else '"v1"'
        if sent == version:
            return Response(status_code=304, headers={"etag": version})
        when = datetime.fromtimestamp(self.changed_at, UTC).isoformat() if self.changed_at else "2024-01-01"
        body = (
            '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            f"<url><loc>{self.base}/a</loc><lastmod>{when}</lastmod></url></urlset>"
        )
        return Response(body.encode(), headers={"content-type": "application/xml", "etag": version})

    async def a(self, request: Request) -> Response:
        self.page.append(self._round())
        words = "zebraquasar " if self.changed_at else ""
        return Response(html_page("A", words + prose(2)), media_type="text/html")


def test_a_newer_lastmod_makes_the_page_due_the_round_after_the_sitemap_refetch(
    crawl_store: Callable[[], Any], tmp_path: Path
) -> None:
    site = ChangingSite()
    web = Site()
    web.raw("/robots.txt", b"User-agent: *\nSitemap: /sitemap.xml\n", content_type="text/plain")
    web.page("/", html_page("Home", prose(1)))
    web.routes["/sitemap.xml"] = site.sitemap_xml
    web.routes["/a"] = site.a
    server = HostServer(web, "127.0.0.45").start()
    site.base = server.url("").rstrip("/")
    settings = CrawlSettings(
        min_delay_s=0.0, response_time_factor=0, allow_loopback=True, flush_interval_s=0.1,
        recrawl_initial_s=3_600, sitemap_refetch_s=REFETCH_S,
        frontier_url=crawl_store.frontier_url,  # type: ignore[attr-defined]
    )  # fmt: skip
    crawl = site.crawl = ContinuousCrawl(tmp_path, settings, seeds=[server.url("/")], idle_s=0.1)

    async def until_refetched() -> None:
        running = asyncio.create_task(crawl.run())
        deadline = time.monotonic() + 30
        while len(site.page) < 2 and time.monotonic() < deadline and not running.done():
            await asyncio.sleep(0.05)
        crawl.request_stop()
        await running

    try:
        asyncio.run(until_refetched())
    finally:
        server.stop()

    assert site.page[0] == 0 and site.sitemap[0][0] == 0
    assert len(site.sitemap) >= 2, "the sitemap was never fetched again"
    (_, first_at, _), (refetch_round, refetch_at, validator) = site.sitemap[:2]
    assert refetch_at - first_at >= REFETCH_S and refetch_round >= 1
    assert validator == '"v1"'  # a conditional GET
    assert site.page == [0, refetch_round + 1]  # not before the lastmod was read, and at once after
    db = crawl_store()
    url = server.url("/a")
    assert db.row(url)["fetch_count"] == 2 and db.row(url)["last_fetch"] > (site.changed_at or 0)
    doc = DocStore(CrawlDir(tmp_path).docs).documents_by_url([url])[url]
    assert "zebraquasar" in doc.body


def test_which_fetched_sitemaps_come_due(crawl_store: Callable[[], Any]) -> None:
    db = crawl_store()
    now = 1_000_000.0
    scheduled, unscheduled, redirected, page = (f"http://s.test/{n}" for n in ("s1", "s2", "s3", "p"))
    inserts = [
        NewUrl(u, "s.test", 0, 0.9, kind=UrlKind.SITEMAP) for u in (scheduled, unscheduled, redirected)
    ]
    db.apply(inserts=[*inserts, NewUrl(page, "s.test", 0, 1.0)], leases=[], updates=[], hosts=[], now=now)

    def done(url: str, outcome: Outcome, status: int, next_fetch: float | None = None) -> UrlUpdate:
        return UrlUpdate(
            url, UrlStatus.DONE, outcome, status, fetched=True, last_fetch=now, next_fetch=next_fetch
        )

    updates = [
        done(scheduled, Outcome.SITEMAP, 200, now + REFETCH_S),
        done(unscheduled, Outcome.SITEMAP, 200),  # read by a version that did not schedule sitemaps
        done(redirected, Outcome.REDIRECT, 301),
        done(page, Outcome.INDEXED, 200, now + 3_600),
    ]
    db.apply(inserts=[], leases=[], updates=updates, hosts=[], now=now)

    def pending() -> set[str]:
        return {u for u in (scheduled, unscheduled, redirected, page) if db.row(u)["status"] == "pending"}

    assert db.schedule_recrawl(now) == 0  # sitemaps are not counted against the page budget
    assert pending() == {unscheduled}
    assert db.schedule_recrawl(now + REFETCH_S, budget=1) == 0
    assert pending() == {unscheduled, scheduled}


def test_a_stop_from_another_thread_wakes_the_idle_crawl(
    crawl_store: Callable[[], Any], tmp_path: Path
) -> None:
    """``trawl run``'s indexer thread stops the crawl when it fails. From another thread the
    stop set the loop's ``asyncio.Event`` without waking the loop, so an idle crawl slept
    out its whole ``idle_s`` (here 60 s) before it noticed."""
    import threading

    web = Site()
    web.page("/", html_page("Home", prose(1)))
    server = HostServer(web, "127.0.0.46").start()
    settings = CrawlSettings(
        min_delay_s=0.0, response_time_factor=0, allow_loopback=True, flush_interval_s=0.1,
        recrawl_initial_s=3_600, frontier_url=crawl_store.frontier_url,  # type: ignore[attr-defined]
    )  # fmt: skip
    crawl = ContinuousCrawl(tmp_path, settings, seeds=[server.url("/")], idle_s=60.0)
    done = threading.Event()

    def crawl_thread() -> None:
        asyncio.run(crawl.run())
        done.set()

    runner = threading.Thread(target=crawl_thread, daemon=True)
    try:
        runner.start()
        deadline = time.monotonic() + 30
        while crawl.rounds < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert crawl.rounds == 1  # idle now, for up to 60 s
        crawl.request_stop()  # from this thread, as the indexer thread does
        assert done.wait(20), "the idle crawl did not wake up for a stop from another thread"
    finally:
        server.stop()
