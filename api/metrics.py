"""Prometheus metrics of the service. Labels are bounded: never a URL or a query."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

REQUESTS = Counter(
    "trawl_http_requests_total",
    "HTTP requests by route and status class",
    ["route", "status"],
    registry=REGISTRY,
)
QUERIES = Counter("trawl_queries_total", "Search queries by ranker", ["ranker"], registry=REGISTRY)
QUERY_SECONDS = Histogram(
    "trawl_query_seconds",
    "End-to-end search latency",
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
ZERO_RESULTS = Counter("trawl_zero_result_queries_total", "Queries with no result", registry=REGISTRY)
PARTIAL = Counter("trawl_partial_responses_total", "Responses missing a shard", registry=REGISTRY)
SHARD_MISSING = Counter(
    "trawl_shard_missing_total",
    "Shards missing from a response (error or deadline)",
    ["shard"],
    registry=REGISTRY,
)
RATE_LIMITED = Counter("trawl_rate_limited_total", "Requests answered 429", registry=REGISTRY)
GENERATION = Gauge("trawl_generation_info", "Serving generation", ["generation"], registry=REGISTRY)
