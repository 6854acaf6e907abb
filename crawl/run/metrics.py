"""Prometheus metrics of one crawl worker, served on ``trawl crawl --metrics-port``.

Read at scrape time from what the crawl already counts, so the numbers a scrape shows
are the numbers the crawl's summary prints, and the crawl loop pays nothing per URL. The
latency and discovery figures come from the loop's per-fetch hook (``FetchObserver``,
passed to ``Crawler(observer=...)``): a few integer increments per exchange. The series
are listed on :class:`CrawlMetrics`.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from crawl.run.counters import CrawlStats

__all__ = ["CrawlMetrics", "FetchObserver", "fetch_outcome_class", "serve_metrics"]

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
LAG_BUCKETS_S = (60.0, 600.0, 3600.0, 6 * 3600.0, 86_400.0, 3 * 86_400.0, 7 * 86_400.0, 30 * 86_400.0)
"""Recrawl lag: a minute to a month (recrawl intervals run from an hour to 30 days by default)."""


class FetchObserver:
    """What the crawl loop reports per exchange and per new URL, for the metrics only."""

    def __init__(self, *, max_hosts: int = 200) -> None:
        self._max_hosts = max_hosts
        self._lock = threading.Lock()  # the scrape runs on the metrics server's thread
        self._buckets: dict[str, list[int]] = {}
        self._sums: dict[str, float] = {}
        self.discovered = 0
        self._lag_counts = [0] * (len(LAG_BUCKETS_S) + 1)
        self._lag_sum = 0.0

    def fetched(self, host: str, seconds: float) -> None:
        """One HTTP exchange with ``host`` took ``seconds`` (robots.txt and sitemaps included)."""
        with self._lock:
            if host not in self._buckets and len(self._buckets) >= self._max_hosts:
                host = "other"
            counts = self._buckets.get(host)
            if counts is None:
                counts = self._buckets[host] = [0] * (len(LATENCY_BUCKETS_S) + 1)
                self._sums[host] = 0.0
            counts[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
            self._sums[host] += seconds

    def recrawled(self, lag_s: float) -> None:
        """A known page was asked again ``lag_s`` seconds after its refetch came due."""
        lag_s = max(0.0, lag_s)
        with self._lock:
            self._lag_counts[bisect.bisect_left(LAG_BUCKETS_S, lag_s)] += 1
            self._lag_sum += lag_s

    def recrawl_lag(self) -> tuple[list[tuple[str, float]], float]:
        """Cumulative ``(le, count)`` buckets of the recrawl lag and its sum of seconds."""
        with self._lock:
            return _cumulative(LAG_BUCKETS_S, self._lag_counts), self._lag_sum

    def found(self, n: int = 1) -> None:
        """``n`` URLs new to the frontier were queued."""
        self.discovered += n

    def latency(self) -> list[tuple[str, list[tuple[str, float]], float]]:
        """Per host: cumulative ``(le, count)`` buckets and the sum of seconds, Prometheus-style."""
        out = []
        with self._lock:
            for host, counts in sorted(self._buckets.items()):
                out.append((host, _cumulative(LATENCY_BUCKETS_S, counts), self._sums[host]))
        return out


def _cumulative(bounds: tuple[float, ...], counts: list[int]) -> list[tuple[str, float]]:
    """Per-bucket counts as Prometheus's cumulative ``(le, count)`` pairs, ``+Inf`` last."""
    running = 0
    buckets: list[tuple[str, float]] = []
    for bound, n in zip((*bounds, float("inf")), counts, strict=True):
        running += n
        buckets.append(("+Inf" if bound == float("inf") else str(bound), running))
    return buckets


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
    if key.split(" (", 1)[0] in (  # "duplicate (exact)": the kind qualifies it
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
    """Collects a crawl's live ``CrawlStats`` at each scrape, into a registry of its own.

    * ``trawl_crawl_fetches_total{outcome}``: handled URLs by outcome class — HTTP status
      class (``2xx`` … ``5xx``), ``dns``, ``timeout``, ``tls``, ``connect``, ``robots_blocked``,
      ``guard_refused``, ``other``.
    * ``trawl_crawl_exchanges_total`` and ``trawl_crawl_bytes_total``: HTTP exchanges
      (robots.txt and sitemaps included) and their body bytes.
    * ``trawl_crawl_frontier_backlog``: pending URLs; ``trawl_crawl_in_flight``.
    * ``trawl_crawl_errors_total{kind}``: fetch errors by kind.
    * ``trawl_crawl_duplicates_total``: pages found to duplicate an indexed one.
    * ``trawl_crawl_pages_total``: HTML pages parsed.
    * ``trawl_crawl_fetch_seconds{host}``: a histogram of exchange latency per host (the
      ``max_hosts`` first hosts by name; the rest under ``host="other"``, so a crawl of
      millions of hosts does not make millions of series).
    * ``trawl_crawl_discovered_total``: URLs the crawl found that the frontier did not know.
    * ``trawl_crawl_recrawl_lag_seconds``: a histogram of how late each refetch of a known
      page came, from when it was due (its next-fetch time, or its sitemap's newer
      ``<lastmod>``) to the request: a recrawl falling behind shows as a growing lag.
    """

    def __init__(
        self,
        stats: CrawlStats,
        registry: CollectorRegistry | None = None,
        *,
        observer: FetchObserver | None = None,
    ) -> None:
        self.stats = stats
        self.observer = observer
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
        if self.observer is not None:
            latency = HistogramMetricFamily(
                "trawl_crawl_fetch_seconds", "HTTP exchange latency by host.", labels=["host"]
            )
            for host, buckets, total in self.observer.latency():
                latency.add_metric([host], buckets, total)
            yield latency
            yield CounterMetricFamily(
                "trawl_crawl_discovered",
                "URLs found that the frontier did not know.",
                value=self.observer.discovered,
            )
            lag = HistogramMetricFamily(
                "trawl_crawl_recrawl_lag_seconds",
                "How late refetches of known pages came, from when they were due.",
            )
            buckets, total = self.observer.recrawl_lag()
            lag.add_metric([], buckets, total)
            yield lag


def serve_metrics(metrics: CrawlMetrics, port: int, *, addr: str = "127.0.0.1") -> Any:
    """Serve ``/metrics`` on ``addr:port`` from a daemon thread; returns the server (``shutdown()``)."""
    server, _thread = start_http_server(port, addr=addr, registry=metrics.registry)
    return server
