"""Prometheus metrics of the service. Labels are bounded: never a URL or a query.

Every HTTP request is counted by its route template (``/v1/search``, not the URL) and
status by :class:`RequestMetrics`, the outermost middleware, so rate-limited and
failed requests count too. Every answered search is counted by entry point (``api``
for ``/v1/search``, ``web`` for the search page) and ranker by :func:`record_search`.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess

from api.workers import metrics_shared
from retrieval.index import freshness_metrics

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from core.types import SearchResponse

REGISTRY = CollectorRegistry(auto_describe=True)
for _freshness in freshness_metrics.COLLECTORS:  # an indexer in this process (``trawl run`` metrics)
    REGISTRY.register(_freshness)

REQUESTS = Counter(
    "trawl_http_requests_total",
    "HTTP requests by route template and status code",
    ["route", "status"],
    registry=REGISTRY,
)
REQUEST_SECONDS = Histogram(
    "trawl_http_request_seconds",
    "HTTP request latency by route template",
    ["route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
    registry=REGISTRY,
)
QUERIES = Counter(
    "trawl_queries_total",
    "Answered searches by entry point and ranker",
    ["entry", "ranker"],
    registry=REGISTRY,
)
QUERY_SECONDS = Histogram(
    "trawl_query_seconds",
    "Search latency (the service's own timing) by entry point and ranker",
    ["entry", "ranker"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
    registry=REGISTRY,
)
STAGE_SECONDS = Histogram(
    "trawl_query_stage_seconds",
    "Search latency per stage",
    ["stage"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
    registry=REGISTRY,
)
CACHE = Counter("trawl_query_cache_total", "Response cache lookups", ["result"], registry=REGISTRY)
ZERO_RESULTS = Counter(
    "trawl_zero_result_queries_total", "Searches with no result by entry point", ["entry"], registry=REGISTRY
)
PARTIAL = Counter("trawl_partial_responses_total", "Responses missing a shard", registry=REGISTRY)
SHARD_MISSING = Counter(
    "trawl_shard_missing_total",
    "Shards missing from a response (error or deadline)",
    ["shard"],
    registry=REGISTRY,
)
RATE_LIMITED = Counter("trawl_rate_limited_total", "Requests answered 429", registry=REGISTRY)
GENERATION = Gauge(
    "trawl_generation_info",
    "Serving generation (with several workers, 1 while any worker serves it)",
    ["generation"],
    registry=REGISTRY,
    multiprocess_mode="livemax",
)
SHARD_SKIPPED = Gauge(
    "trawl_shard_circuit_open",
    "1 while a shard's circuit is open (searches skip it until a probe answers; with several workers,"
    " 1 while one of them skips it as of its last scrape)",
    ["shard"],
    registry=REGISTRY,
    multiprocess_mode="livemax",
)

SHARD_REPLICAS = Gauge(
    "trawl_shard_replicas",
    "On Ray Serve: a shard's replicas in each state (RUNNING, STARTING, RECOVERING, …)",
    ["shard", "state"],
    registry=REGISTRY,
)
CLUSTER_NODES = Gauge(
    "trawl_cluster_nodes", "On Ray Serve: the cluster's nodes, alive or lost", ["state"], registry=REGISTRY
)

UNMATCHED_ROUTE = "unmatched"
"""The route label of a request no route matched (404s for arbitrary paths stay one series)."""
_serving: list[str] = []
"""The generation this process last reported serving."""


def serving_generation(generation: str) -> None:
    """Report ``generation`` as the one served. A process's own series of the one before is
    removed; several workers share files that keep every series, so there it is set to 0."""
    if _serving and _serving[0] != generation:
        if metrics_shared():
            GENERATION.labels(_serving[0]).set(0)
        else:
            GENERATION.remove(_serving[0])
    _serving[:] = [generation]
    GENERATION.labels(generation).set(1)


def worker_exiting() -> None:
    """Drop this worker's live gauges from the shared files (its counters still count)."""
    if metrics_shared():
        multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]


def exposition() -> bytes:
    """The text ``/metrics`` answers: this process's registry, or every worker's values."""
    if not metrics_shared():
        return generate_latest(REGISTRY)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return generate_latest(registry)


def record_search(response: SearchResponse, *, entry: str) -> None:
    """Counters and histograms for one answered search; ``entry`` is ``api`` or ``web``."""
    QUERIES.labels(entry, response.ranker).inc()
    QUERY_SECONDS.labels(entry, response.ranker).observe(response.took_ms / 1000)
    CACHE.labels("hit" if response.cached else "miss").inc()
    if not response.cached:
        for stage, ms in response.timings_ms.items():
            STAGE_SECONDS.labels(stage).observe(ms / 1000)
    if response.total == 0:
        ZERO_RESULTS.labels(entry).inc()
    if response.partial:
        PARTIAL.inc()
        for shard in response.missing_shards:
            SHARD_MISSING.labels(str(shard)).inc()


class RequestMetrics:
    """ASGI middleware: count each HTTP request by route template and status, and time it.

    The router stores the matched route in the request scope; a request that raised
    before a response started counts as 500 (what the server then sends).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        started = time.perf_counter()

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            route = scope.get("route")
            label = getattr(route, "path", None) or UNMATCHED_ROUTE
            REQUESTS.labels(label, str(status)).inc()
            REQUEST_SECONDS.labels(label).observe(time.perf_counter() - started)
