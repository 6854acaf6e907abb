"""Sitemap ``<lastmod>`` is kept per URL and makes a page fetched before it due, on both backends."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.crawldir import CrawlDir
from core.settings import CrawlSettings
from crawl.run.loop import Crawler
from crawl.state.records import NewUrl, Outcome, UrlStatus, UrlUpdate
from crawl.state.sqlite import CrawlDb
from tests.fixtures.crawl.web import HostServer, Site, html_page, prose

A, B = "http://s.test/a", "http://s.test/b"
JAN_2024 = 1_704_067_200.0


def _fetched(db: Any, urls: tuple[str, ...], now: float) -> None:
    db.apply(inserts=[NewUrl(u, "s.test", 0, 1.0) for u in urls], leases=[], updates=[], hosts=[], now=now)
    done = dict(fetched=True, last_fetch=now, next_fetch=now + 3600)
    updates = [UrlUpdate(u, UrlStatus.DONE, Outcome.INDEXED, 200, **done) for u in urls]  # type: ignore[arg-type]
    db.apply(inserts=[], leases=[], updates=updates, hosts=[], now=now)


def test_a_lastmod_after_the_fetch_makes_the_page_due(crawl_store: Callable[[], Any]) -> None:
    db = crawl_store()
    now = 1_000_000.0
    _fetched(db, (A, B), now)
    assert db.schedule_recrawl(now + 10) == 0  # neither is due for an hour

    assert db.record_lastmod({A: now - 50, "http://s.test/unknown": now + 5}) == 1
    assert db.schedule_recrawl(now + 10) == 0  # changed before the fetch: nothing new
    assert db.record_lastmod({A: now + 5}) == 1
    assert db.record_lastmod({A: now - 100}) == 0  # an older hint never replaces a newer one
    assert db.row(A)["lastmod"] == now + 5 and db.row(B)["lastmod"] is None

    assert db.schedule_recrawl(now + 10, budget=1, prior_s=86_400) == 1  # P(changed) = 1 wins the budget
    assert db.row(A)["status"] == "pending" and db.row(B)["status"] == "done"
    db.close()

    reopened = crawl_store()  # kept across a restart
    assert reopened.row(A)["lastmod"] == now + 5


def test_an_older_sqlite_database_gains_the_column_and_keeps_its_rows(tmp_path: Path) -> None:
    path = CrawlDir(tmp_path).db
    db = CrawlDb(path)
    _fetched(db, (A,), 1_000.0)
    db.close()
    conn = sqlite3.connect(path)  # as an earlier version left it
    conn.execute("ALTER TABLE urls DROP COLUMN lastmod")
    conn.commit()
    conn.close()

    db = CrawlDb(path)
    row = db.row(A)
    assert row is not None and row["status"] == "done" and row["last_fetch"] == 1_000.0
    assert row["lastmod"] is None
    assert db.record_lastmod({A: 2_000.0}) == 1
    assert db.schedule_recrawl(1_500.0) == 1
    db.close()


def test_the_crawler_stores_the_lastmod_of_each_listed_page(
    crawl_store: Callable[[], Any], tmp_path: Path
) -> None:
    web = Site()
    web.raw("/robots.txt", b"User-agent: *\nSitemap: /sitemap.xml\n", content_type="text/plain")
    web.page("/", html_page("Home", prose(1), links=[("/a", "a")]))
    for path, seed in (("/a", 2), ("/b", 3), ("/c", 4)):
        web.page(path, html_page(path, prose(seed)))
    server = HostServer(web, "127.0.0.42").start()
    try:
        urlset = (
            '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            f"<url><loc>{server.url('/a')}</loc><lastmod>2024-01-01</lastmod></url>"
            f"<url><loc>{server.url('/b')}</loc></url>"
            f"<url><loc>{server.url('/c')}</loc><lastmod>2999-01-01T00:00:00Z</lastmod></url></urlset>"
        )
        web.raw("/sitemap.xml", urlset.encode(), content_type="application/xml")
        settings = CrawlSettings(
            min_delay_s=0.0, response_time_factor=0, allow_loopback=True, flush_interval_s=0.1,
            frontier_url=crawl_store.frontier_url,  # type: ignore[attr-defined]
        )  # fmt: skip
        before = time.time()
        asyncio.run(Crawler(tmp_path, settings, seeds=[server.url("/")]).run())
        db = crawl_store()
        assert db.row(server.url("/a"))["lastmod"] == JAN_2024
        assert db.row(server.url("/b"))["lastmod"] is None
        assert before <= db.row(server.url("/c"))["lastmod"] <= time.time()  # a future date: now
        assert all(db.row(server.url(p))["fetch_count"] == 1 for p in ("/a", "/b", "/c"))
    finally:
        server.stop()
