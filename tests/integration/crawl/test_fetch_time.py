"""A fetch is dated when its request was sent: a change made while a slow answer is on its way is after it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response

from core.crawldir import CrawlDir
from core.docstore import DocStore
from core.settings import CrawlSettings
from crawl.fetch.fetcher import Fetcher, make_client
from crawl.fetch.guard import AddressGuard, DnsCache, system_resolver
from crawl.frontier.interface import open_store
from crawl.run.loop import Crawler
from tests.fixtures.crawl.web import HostServer, Site, html_page, prose

DELAY_S = 1.0


class Slow:
    """Answers after ``DELAY_S``, noting when each request arrived."""

    def __init__(self, html: str) -> None:
        self.body = html.encode()
        self.arrived: list[float] = []

    async def __call__(self, request: Request) -> Response:
        self.arrived.append(time.time())
        await asyncio.sleep(DELAY_S)
        return Response(self.body, media_type="text/html")


def _site() -> tuple[Site, Slow]:
    web = Site()
    slow = Slow(html_page("Slow", prose(7)))
    web.page("/", html_page("Home", prose(6), links=[("/slow", "slow")]))
    web.routes["/slow"] = slow
    return web, slow


def test_the_fetch_time_is_when_the_request_went_out() -> None:
    web, slow = _site()
    server = HostServer(web, "127.0.0.43").start()
    try:

        async def go() -> tuple[float, float, float]:
            guard = AddressGuard(DnsCache(system_resolver), allow_loopback=True)
            async with make_client(timeout_s=5.0) as client:
                fetcher = Fetcher(
                    client, guard, user_agent="TrawlBot/test", max_bytes=1 << 20, max_redirects=3, timeout_s=5
                )
                before = time.time()
                result = await fetcher.fetch(server.url("/slow"))
                return before, result.fetched_at, result.elapsed_s

        before, fetched_at, elapsed_s = asyncio.run(go())
        assert before <= fetched_at <= slow.arrived[0]
        assert elapsed_s >= DELAY_S  # the duration is still the whole exchange
    finally:
        server.stop()


def test_a_change_during_a_slow_fetch_leaves_the_page_due(tmp_path: Path) -> None:
    web, slow = _site()
    server = HostServer(web, "127.0.0.44").start()
    try:
        settings = CrawlSettings(
            min_delay_s=0.0, response_time_factor=0, allow_loopback=True, flush_interval_s=0.1
        )  # fmt: skip
        asyncio.run(Crawler(tmp_path, settings, seeds=[server.url("/")]).run())
        url = server.url("/slow")
        arrived = slow.arrived[0]
        doc = DocStore(CrawlDir(tmp_path).docs).documents_by_url([url])[url]
        assert doc.fetched_at is not None and doc.fetched_at <= arrived

        db = open_store(CrawlDir(tmp_path), None)
        try:
            row = db.row(url)
            assert row is not None and row["last_fetch"] <= arrived
            # The page changed half-way through the answer (its sitemap says so): the copy
            # fetched may predate the change, so the page is due again.
            db.record_lastmod({url: arrived + DELAY_S / 2})
            assert db.schedule_recrawl(arrived + 2 * DELAY_S) == 1
            assert (db.row(url) or {}).get("status") == "pending"
        finally:
            db.close()
    finally:
        server.stop()
