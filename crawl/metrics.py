"""Prometheus metrics of one crawl worker, served on ``trawl crawl --metrics-port``.

Read at scrape time from what the crawl already counts, so the numbers a scrape shows
are the numbers the crawl's summary prints, and the crawl loop pays nothing per URL:

* ``trawl_crawl_fetches_total{outcome}``: handled URLs by outcome class — HTTP status
  class (``2xx`` … ``5xx``), ``dns``, ``timeout``, ``tls``, ``connect``, ``robots_blocked``,
  ``guard_refused``, ``other``.
* ``trawl_crawl_exchanges_total`` and ``trawl_crawl_bytes_total``: HTTP exchanges
  (robots.txt and sitemaps included) and their body bytes.
* ``trawl_crawl_frontier_backlog``: pending URLs; ``trawl_crawl_in_flight``.
* ``trawl_crawl_errors_total{kind}``: fetch errors by kind.
* ``trawl_crawl_duplicates_total``: pages found to duplicate an indexed one.
* ``trawl_crawl_pages_total``: HTML pages parsed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from crawl.stats import CrawlStats

__all__ = ["CrawlMetrics", "fetch_outcome_class", "serve_metrics"]


def fetch_outcome_class(outcome_key: str) -> str:
    """The metric's outcome class of one ``UrlUpdate.outcome_key`` / error kind."""
    key = outcome_key.lower()
    if key.startswith("http "):
        code = key.split()[1]
        return f"{code[0]}xx" if code[:1].isdigit() else "other"
    if key.startswith("http_"):
        return f"{key[5]}xx"
    for needle, name in (("dns", "dns"), ("timeout", "timeout"), ("tls", "tls"), ("ssl", "tls")):
        if needle in key:
            return name
    if key.startswith("connect"):
        return "connect"
    if "robots" in key:
        return "robots_blocked"
    if "guard" in key:
        return "guard_refused"
    if key in (
        "indexed",
        "duplicate",
        "canonicalized",
        "noindex",
        "not html",
        "redirect",
        "sitemap",
        "too large",
    ):
        return "2xx" if key != "redirect" else "3xx"
    if key == "not modified":
        return "3xx"
    return "other"


class CrawlMetrics(Collector):
    """Collects a crawl's live ``CrawlStats`` at each scrape, into a registry of its own."""

    def __init__(self, stats: CrawlStats, registry: CollectorRegistry | None = None) -> None:
        self.stats = stats
        self.registry = registry or CollectorRegistry()
        self.registry.register(self)

    def collect(self) -> Iterator[Any]:
        s = self.stats
        fetches = CounterMetricFamily(
            "trawl_crawl_fetches", "Handled URLs by outcome class.", labels=["outcome"]
        )
        by_class: dict[str, int] = {}
        for key, n in list(s.outcomes.items()):
            name = fetch_outcome_class(key)
            by_class[name] = by_class.get(name, 0) + n
        for name, n in sorted(by_class.items()):
            fetches.add_metric([name], n)
        yield fetches
        yield CounterMetricFamily(
            "trawl_crawl_exchanges", "HTTP exchanges, robots.txt included.", value=s.fetches
        )
        yield CounterMetricFamily("trawl_crawl_bytes", "Body bytes received.", value=s.bytes)
        yield CounterMetricFamily("trawl_crawl_pages", "HTML pages parsed.", value=s.pages)
        yield CounterMetricFamily("trawl_crawl_duplicates", "Duplicate pages found.", value=s.duplicates)
        yield GaugeMetricFamily("trawl_crawl_frontier_backlog", "Pending URLs.", value=s.queued)
        yield GaugeMetricFamily("trawl_crawl_in_flight", "Fetches in flight.", value=s.in_flight)
        errors = CounterMetricFamily("trawl_crawl_errors", "Fetch errors by kind.", labels=["kind"])
        for kind, n in sorted(s.errors.items()):
            errors.add_metric([kind], n)
        yield errors


def serve_metrics(metrics: CrawlMetrics, port: int, *, addr: str = "127.0.0.1") -> Any:
    """Serve ``/metrics`` on ``addr:port`` from a daemon thread; returns the server (``shutdown()``)."""
    server, _thread = start_http_server(port, addr=addr, registry=metrics.registry)
    return server
