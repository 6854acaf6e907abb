"""Prometheus metrics of freshness, updated by the incremental indexer.

They live in their own registry (``REGISTRY``) so that ``trawl run --metrics-port``
serves exactly these, and the service's ``/metrics`` registers the same collectors
beside its own (``api.metrics``), so a service running an indexer in-process shows them.
Lag is observed per indexed document: the step's publish time minus the document's
fetch time, the same figure ``ROOT/freshness.sqlite`` keeps per URL.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["BACKLOG", "COLLECTORS", "DELETIONS", "LAG", "REGISTRY"]

REGISTRY = CollectorRegistry(auto_describe=True)

LAG = Histogram(
    "trawl_crawl_to_searchable_seconds",
    "Seconds from a document's fetch to the index step that made it searchable",
    buckets=(0.5, 1, 2, 5, 10, 15, 20, 30, 45, 60, 120, 300, 600, 1800, 3600),
    registry=REGISTRY,
)
BACKLOG = Gauge(
    "trawl_unindexed_backlog",
    "Docstore rows the crawl had written and the serving generation did not hold, at the last index step",
    registry=REGISTRY,
    multiprocess_mode="mostrecent",
)
DELETIONS = Counter(
    "trawl_deletions_applied_total",
    "Documents taken out of the serving generation by removals (404/410, noindex, robots, blocks, ...)",
    registry=REGISTRY,
)
COLLECTORS = (LAG, BACKLOG, DELETIONS)
