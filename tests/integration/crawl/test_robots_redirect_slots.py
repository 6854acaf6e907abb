"""A robots.txt that redirects to another host asks that host in its own politeness slot.

Host A's robots.txt answers 301 to host B's robots.txt (``example.com`` →
``www.example.com``). RFC 9309 says to follow it, and the rules found there are A's. B
is slow and is crawled at the same time, so a hop made in A's slot alone would overlap
B's own requests or follow them sooner than B's delay allows. Both frontier backends.
The two origins share one answer: B's robots.txt is asked once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from core.crawldir import CrawlDir
from core.settings import CrawlSettings
from crawl.run.loop import Crawler
from crawl.state.postgres import PgCrawlDb
from crawl.state.sqlite import CrawlDb
from tests.fixtures.crawl.web import HostServer, Site, html_page, prose, sleep_then

_MIN_DELAY_S = 0.3
_SLOW_S = 0.4


def _site_b() -> Site:
    site = Site()

    async def robots(request: Request) -> Response:
        return await sleep_then(_SLOW_S, PlainTextResponse("User-agent: *\nDisallow: /secret\n"))

    site.routes["/robots.txt"] = robots
    site.page("/", html_page("B home", prose(1), links=[("/b1", "one"), ("/b2", "two")]))
    for i in (1, 2):
        body = html_page(f"B page {i}", prose(10 + i))

        async def slow(request: Request, body: str = body) -> Response:
            from starlette.responses import HTMLResponse

            return await sleep_then(_SLOW_S, HTMLResponse(body))

        site.routes[f"/b{i}"] = slow
    return site


def _site_a(b: HostServer) -> Site:
    site = Site()

    async def robots(request: Request) -> Response:
        return Response(status_code=301, headers={"location": b.url("/robots.txt")})

    site.routes["/robots.txt"] = robots
    site.page("/", html_page("A home", prose(2), links=[("/open", "open"), ("/secret", "secret")]))
    site.page("/open", html_page("A open", prose(3)))
    site.page("/secret", html_page("A secret", prose(4)))
    return site


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_robots_redirect_to_another_host_waits_for_that_hosts_slot(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    b = HostServer(_site_b(), "127.0.0.3").start()
    a = HostServer(_site_a(b), "127.0.0.2").start()
    frontier_url = request.getfixturevalue("pg_dsn") if backend == "postgresql" else None
    settings = CrawlSettings(
        min_delay_s=_MIN_DELAY_S,
        response_time_factor=0.0,
        fetch_timeout_s=5.0,
        max_retries=1,
        concurrency=4,
        flush_interval_s=0.2,
        allowed_networks=["127.0.0.2/32", "127.0.0.3/32"],
        frontier_url=frontier_url,
    )
    try:
        asyncio.run(Crawler(tmp_path / "crawl", settings, seeds=[b.url("/"), a.url("/")]).run())
    finally:
        a.stop()
        b.stop()

    # B was never asked twice at once, nor sooner than its delay after an answer.
    assert b.recorder.max_in_flight == 1
    asked = b.recorder.sorted_requests()
    gaps = [later.start - earlier.end for earlier, later in zip(asked, asked[1:], strict=False)]
    assert min(gaps) >= _MIN_DELAY_S * 0.9, (gaps, [r.path for r in asked])
    # B's robots.txt was asked once: for B, or for A on the way there, and whichever came
    # second took the answer without asking. A's rules are B's file: /secret is disallowed
    # on A too, /open is fetched.
    assert b.recorder.paths().count("/robots.txt") == 1
    assert a.recorder.paths().count("/robots.txt") == 1
    assert "/open" in a.recorder.paths() and "/secret" not in a.recorder.paths()
    db = PgCrawlDb(frontier_url) if frontier_url else CrawlDb(CrawlDir(tmp_path / "crawl").db)
    try:
        row = db.row(a.url("/secret"))
    finally:
        db.close()
    assert row is not None and row["blocked_reason"] == "disallowed by robots.txt"
