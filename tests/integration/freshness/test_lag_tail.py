"""Changes that never reached search: a page's new version judged a copy of another page.

A recrawl whose text is a (near-)duplicate of another indexed page removes the page
(dedup keeps one document per content). When that other page changes, the copy is
unique again although its own text is the same: the next recrawl must index it again,
or it stays out of search for good. And the freshness benchmark's pages must not be
near-duplicates of each other, or its lag figures measure dedup, not freshness.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from bench.bench_freshness import ChangingSite
from core.crawldir import CrawlDir
from core.settings import CrawlSettings
from crawl.extraction.dedup import NearDupIndex, fingerprints
from crawl.extraction.page import parse_html
from crawl.run.loop import Crawler
from retrieval.index.incremental import IncrementalIndexer
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from tests.fixtures.crawl.web import HostServer, Site, html_page, prose


class Mutable:
    """A page whose text the test sets."""

    def __init__(self, title: str, text: str) -> None:
        self.title = title
        self.text = text

    async def __call__(self, request: Request) -> Response:
        return HTMLResponse(html_page(self.title, self.text))


@pytest.fixture
def site() -> Iterator[tuple[HostServer, Mutable, Mutable]]:
    a = Mutable("Same title", prose(1) + " alphaonly")
    b = Mutable("Same title", prose(2) + " betaonly")
    web = Site()
    web.page("/", html_page("Home", prose(3), links=[("/a", "a"), ("/b", "b")]))
    web.routes["/a"], web.routes["/b"] = a, b
    server = HostServer(web, "127.0.0.41").start()
    yield server, a, b
    server.stop()


def _round(data: Path, server: HostServer) -> None:
    settings = CrawlSettings(
        min_delay_s=0.0, response_time_factor=0, allow_loopback=True, recrawl_initial_s=100,
        recrawl_min_s=10, recrawl_max_s=1000, flush_interval_s=0.1,
    )  # fmt: skip
    asyncio.run(Crawler(data, settings, seeds=[server.url("/")], recrawl=True).run())
    conn = sqlite3.connect(CrawlDir(data).db)
    with conn:
        conn.execute("UPDATE urls SET next_fetch = 0 WHERE next_fetch IS NOT NULL")  # time passes
    conn.close()


def _outcome(data: Path, url: str) -> str:
    conn = sqlite3.connect(CrawlDir(data).db)
    try:
        return str(conn.execute("SELECT outcome FROM urls WHERE url = ?", (url,)).fetchone()[0])
    finally:
        conn.close()


def _found(index: Path, query: str) -> set[str]:
    return {
        h.url for h in SearchService.open(index).search(SearchRequest(query, size=10, snippets=False)).hits
    }


def test_a_copy_that_is_unique_again_is_indexed_again(
    site: tuple[HostServer, Mutable, Mutable], tmp_path: Path
) -> None:
    server, a, b = site
    data, index = tmp_path / "crawl", tmp_path / "index"
    indexer = IncrementalIndexer(data, index)
    _round(data, server)
    indexer.compact()
    assert _found(index, "betaonly") == {server.url("/b")}

    b.text = a.text  # b's new version copies a
    _round(data, server)
    indexer.step()
    assert _outcome(data, server.url("/b")).startswith("duplicate")
    assert _found(index, "betaonly") == set()
    assert _found(index, "alphaonly") == {server.url("/a")}

    a.text = prose(4)  # a moves on: b's unchanged text is nobody's copy any more
    _round(data, server)
    _round(data, server)  # (the first may fetch b before a and still see a's old text)
    indexer.step()
    assert _outcome(data, server.url("/b")) == "indexed"
    assert _found(index, "alphaonly") == {server.url("/b")}


def test_the_benchmark_pages_are_not_copies_of_each_other() -> None:
    changing = ChangingSite(200)
    seen = NearDupIndex()
    for version in range(6):
        for i in range(200):
            changing.version[i] = version
            page = parse_html(html_page(changing.title(i), changing.text(i)), f"http://bench/p{i}")
            text_hash, fingerprint, _ = fingerprints(page.body)
            verdict = seen.check(text_hash, fingerprint)
            assert verdict.kind == "unique" or verdict.of_url == f"p{i}", (i, version, verdict)
            seen.add(f"p{i}", text_hash, fingerprint)
