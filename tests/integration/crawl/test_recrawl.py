"""Recrawl: due pages are fetched again with conditional GET; intervals adapt; changes supersede."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.requests import Request
from starlette.responses import Response

from core.crawldir import CrawlDir
from core.docstore import DocStore
from core.settings import CrawlSettings
from crawl.run.loop import Crawler
from tests.fixtures.crawl.web import HostServer, Site, html_page, prose


class Versioned:
    """A page with an ETag whose content the test can change."""

    def __init__(self) -> None:
        self.version = 1
        self.conditional_hits: list[str] = []

    async def __call__(self, request: Request) -> Response:
        etag = f'"v{self.version}"'
        sent = request.headers.get("if-none-match", "")
        self.conditional_hits.append(sent)
        if sent == etag:
            return Response(status_code=304, headers={"etag": etag})
        body = html_page(f"Versioned v{self.version}", prose(100 + self.version))
        return Response(body, media_type="text/html", headers={"etag": etag})


@pytest.fixture
def site() -> Iterator[tuple[HostServer, Versioned]]:
    versioned = Versioned()
    web = Site()
    web.page("/", html_page("Home", prose(99), links=[("/versioned", "v"), ("/static", "s")]))
    web.page("/static", html_page("Static", prose(98)))
    web.routes["/versioned"] = versioned
    server = HostServer(web, "127.0.0.14").start()
    yield server, versioned
    server.stop()


def _crawl(data: Path, server: HostServer, *, recrawl: bool) -> None:
    settings = CrawlSettings(
        min_delay_s=0.0,
        response_time_factor=0,
        allow_loopback=True,
        recrawl_initial_s=100,
        recrawl_min_s=10,
        recrawl_max_s=1000,
        flush_interval_s=0.1,
    )
    asyncio.run(Crawler(data, settings, seeds=[server.url("/")], recrawl=recrawl).run())


def _state(data: Path, url: str) -> tuple[str, float, int, int]:
    conn = sqlite3.connect(CrawlDir(data).db)
    try:
        row = conn.execute(
            "SELECT outcome, interval_s, fetch_count, change_count FROM urls WHERE url = ?", (url,)
        ).fetchone()
        conn.execute("UPDATE urls SET next_fetch = 0 WHERE next_fetch IS NOT NULL")  # time passes
        conn.commit()
        return tuple(row)  # type: ignore[return-value]
    finally:
        conn.close()


def test_recrawl_uses_conditional_get_and_adapts(site: tuple[HostServer, Versioned], tmp_path: Path) -> None:
    server, versioned = site
    url = server.url("/versioned")
    _crawl(tmp_path, server, recrawl=False)
    assert _state(tmp_path, url) == ("indexed", 100.0, 1, 0)
    _crawl(tmp_path, server, recrawl=False)  # a plain resume fetches nothing again
    assert versioned.conditional_hits == [""]

    _crawl(tmp_path, server, recrawl=True)  # unchanged: 304, interval grows
    assert versioned.conditional_hits == ["", '"v1"']
    assert _state(tmp_path, url) == ("not modified", 150.0, 2, 0)
    assert _state(tmp_path, server.url("/static"))[1:3] == (150.0, 2)  # same text, no validator

    versioned.version = 2
    _crawl(tmp_path, server, recrawl=True)  # changed: new version supersedes, interval shrinks
    assert versioned.conditional_hits[-1] == '"v1"'
    assert _state(tmp_path, url) == ("indexed", 75.0, 3, 1)
    docs = {d.url: d for d in DocStore(CrawlDir(tmp_path).docs).iter_documents()}
    assert docs[url].title == "Versioned v2"
    assert len(docs) == 3


def test_a_page_that_moves_within_its_host_leaves_the_index(tmp_path: Path) -> None:
    """A page indexed at one URL that later redirects on the same host (the fetcher follows
    it) is indexed at its new URL; its old URL's document must go, as it does when the
    redirect leaves the host, or search shows the page twice, once at a URL that moved."""
    from starlette.responses import RedirectResponse

    from retrieval.index.docs_source import crawled_documents

    moved = {"now": False}

    async def moving(request: Request) -> Response:
        if moved["now"]:
            return RedirectResponse("/moved", status_code=301)
        return Response(html_page("Moving", prose(97)), media_type="text/html")

    web = Site()
    web.page("/", html_page("Home", prose(99), links=[("/moving", "m")]))
    web.page("/moved", html_page("Moved", prose(96)))
    web.routes["/moving"] = moving
    server = HostServer(web, "127.0.0.17").start()
    data = tmp_path / "crawl"
    try:
        _crawl(data, server, recrawl=False)
        assert server.url("/moving") in {d.url for d in crawled_documents(data)}
        moved["now"] = True
        _state(data, server.url("/moving"))  # time passes: everything is due
        _crawl(data, server, recrawl=True)
    finally:
        server.stop()
    urls = {d.url for d in crawled_documents(data)}
    assert server.url("/moved") in urls
    assert server.url("/moving") not in urls, "the moved page is still indexed at its old URL"
