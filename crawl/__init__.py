"""The crawler: polite two-level frontier, guarded fetcher, extraction, dedup, WARC.

It writes the docstore and the link graph (``core.docstore``, ``core.linkgraph``);
it never imports ``retrieval``: storage is the seam. Entry point: ``Crawler``.
"""

from crawl.run.counters import CrawlStats, CrawlSummary
from crawl.run.loop import Crawler
from crawl.scope import Scope
from crawl.urls import canonicalize_url

__all__ = ["CrawlStats", "CrawlSummary", "Crawler", "Scope", "canonicalize_url"]
