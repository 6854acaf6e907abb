"""Crawl metrics: scraped from a worker's /metrics after a small crawl, equal to the crawl's summary."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from core.crawldir import CrawlDir
from core.settings import CrawlSettings
from crawl.run.loop import Crawler
from crawl.run.metrics import CrawlMetrics, FetchObserver, serve_metrics
from crawl.state.sqlite import CrawlDb
from tests.fixtures.crawl.web import HostServer, Site, html_page, prose


def test_scraped_counts_equal_the_summary(tmp_path: Path) -> None:
    site = Site()
    site.page("/", html_page("Home", prose(1), links=[(f"/p{i}", "p") for i in range(5)] + [("/gone", "x")]))
    for i in range(4):
        site.page(f"/p{i}", html_page(f"P{i}", prose(i + 2)))
    site.page("/p4", html_page("P0", prose(2)))  # a copy of /p0: a duplicate, a 2xx fetch
    server = HostServer(site, "127.0.0.2").start()
    settings = CrawlSettings(min_delay_s=0.0, allowed_networks=["127.0.0.2/32"], flush_interval_s=0.2)
    crawler = Crawler(tmp_path, settings, seeds=[server.url("/")])
    crawler.observer = FetchObserver()
    metrics = CrawlMetrics(crawler.stats, observer=crawler.observer)
    http = serve_metrics(metrics, 0)
    try:
        summary = asyncio.run(crawler.run())
        text = httpx.get(f"http://127.0.0.1:{http.server_port}/metrics").text
    finally:
        http.shutdown()
        server.stop()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("trawl_crawl_exchanges_total", ())] == summary.fetches
    assert samples[("trawl_crawl_bytes_total", ())] == summary.bytes
    assert samples[("trawl_crawl_pages_total", ())] == summary.pages == 6
    by_outcome = {dict(k[1])["outcome"]: v for k, v in samples.items() if k[0] == "trawl_crawl_fetches_total"}
    assert sum(by_outcome.values()) == sum(n for _, n in summary.outcomes)
    assert by_outcome["4xx"] == 1 and by_outcome["2xx"] == 6
    assert samples[("trawl_crawl_duplicates_total", ())] == summary.duplicates == 1
    host = server.authority
    assert samples[("trawl_crawl_fetch_seconds_count", (("host", host),))] == summary.fetches
    assert samples[("trawl_crawl_fetch_seconds_bucket", (("host", host), ("le", "+Inf")))] == summary.fetches
    assert 0 < samples[("trawl_crawl_fetch_seconds_sum", (("host", host),))] < summary.elapsed_s
    db = CrawlDb(CrawlDir(tmp_path).db, readonly=True)
    try:
        known = sum(db.status_counts().values())
    finally:
        db.close()
    assert samples[("trawl_crawl_discovered_total", ())] == known - 1 == 6  # all but the seed
    assert samples[("trawl_crawl_recrawl_lag_seconds_count", ())] == 0  # first fetches only


def _scrape(crawler: Crawler) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Run the crawl with a metrics server and return the scraped samples."""
    crawler.observer = FetchObserver()
    http = serve_metrics(CrawlMetrics(crawler.stats, observer=crawler.observer), 0)
    try:
        asyncio.run(crawler.run())
        text = httpx.get(f"http://127.0.0.1:{http.server_port}/metrics").text
    finally:
        http.shutdown()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_recrawl_lag_counts_from_when_each_page_came_due(tmp_path: Path) -> None:
    site = Site()
    site.page("/", html_page("Home", prose(1), links=[(f"/p{i}", "p") for i in range(3)]))
    for i in range(3):
        site.page(f"/p{i}", html_page(f"P{i}", prose(i + 2)))
    server = HostServer(site, "127.0.0.2").start()
    settings = CrawlSettings(min_delay_s=0.0, allowed_networks=["127.0.0.2/32"], flush_interval_s=0.2)
    try:
        asyncio.run(Crawler(tmp_path, settings, seeds=[server.url("/")]).run())
        # Two pages came due two hours ago, one a day ago; the home page is not due.
        now = time.time()
        with sqlite3.connect(CrawlDir(tmp_path).db) as conn:
            for path, ago in (("/p0", 7200), ("/p1", 7200), ("/p2", 86_400 + 600)):
                conn.execute("UPDATE urls SET next_fetch = ? WHERE url = ?", (now - ago, server.url(path)))
        samples = _scrape(Crawler(tmp_path, settings, seeds=[server.url("/")], recrawl=True))
    finally:
        server.stop()
    assert samples[("trawl_crawl_recrawl_lag_seconds_count", ())] == 3
    assert 0 <= samples[("trawl_crawl_recrawl_lag_seconds_sum", ())] - (7200 + 7200 + 87_000) < 60
    buckets = {
        dict(k[1])["le"]: v for k, v in samples.items() if k[0] == "trawl_crawl_recrawl_lag_seconds_bucket"
    }
    assert (buckets["3600.0"], buckets["21600.0"], buckets["86400.0"], buckets["259200.0"]) == (0, 2, 2, 3)
