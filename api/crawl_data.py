"""The crawl data directory the API reads (``TRAWL_API__CRAWL_DATA``), and what it and the
serving index know about one URL (``/v1/inspect`` and the web page's inspector)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from fastapi import Request

from core.errors import BadParameter, ConfigError
from crawl.run.inspect import inspect_url
from crawl.urls import canonicalize_url
from retrieval.index.page_quality import describe
from retrieval.query.service import SearchService


def crawl_dir(request: Request) -> Path:
    path = request.app.state.settings.api.crawl_data
    if path is None:
        raise ConfigError("No crawl data directory is configured; set TRAWL_API__CRAWL_DATA=DIR.")
    return Path(path)


def inspection(request: Request, service: SearchService, url: str) -> dict[str, Any]:
    """What the crawl and the serving index know about ``url``."""
    if not url.strip() or len(url) > 4096:
        raise BadParameter("Give a URL of at most 4096 characters, like ?url=https://example.org/page.")
    canonical = canonicalize_url(url)
    if not canonical:
        raise BadParameter(f"{url!r} is not a URL Trawl can crawl (http or https, with a host).")
    crawl_path = request.app.state.settings.api.crawl_data
    report: dict[str, Any] = {"url": url, "canonical_url": canonical}
    if crawl_path is not None:
        crawl = request.app.state.settings.crawl
        found = inspect_url(
            url, Path(crawl_path), user_agent=crawl.user_agent, frontier_url=crawl.frontier_url
        )
        report.update(
            {
                "robots": found.robots,
                "state": found.state,
                "history": list(found.history),
                "dup_of": found.dup_of,
                "cluster": list(found.cluster),
            }
        )
    located = service.locate_url(canonical)
    report["indexed"] = located is not None
    report["generation"] = service.generation.id
    if located is not None:
        report["doc_id"], report["shard"] = str(int(located[0])), located[1]
        until = time.perf_counter() + service.settings.deadline_s
        stored = service.generation.broker.fetch({located[1]: [located[0]]}, until)
        if (doc := stored.get(located[0])) is not None:
            shown = describe(doc.quality, doc.quality_reasons)
            report["page_quality"] = f"{shown}; {doc.link_density:.0%} of its words are links"
    return report
