"""Explain one URL from a crawl's database: canonical form, robots decision, state, dedup.

Everything comes from the crawl database (robots policies are stored there too), so
the answer is offline and consistent with what the crawler decided. That database is
the fleet's PostgreSQL frontier when ``frontier_url`` names one: a fleet's state is
there, and the data directory's SQLite file holds nothing of it. Whether and where
the document is indexed is added by the index side (``api``), which reads the index.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.crawldir import CrawlDir
from core.types import DocId, doc_id_for
from crawl.fetch.guard import redact_addresses
from crawl.fetch.robots import agent_token, policy_from_response
from crawl.frontier.interface import open_store
from crawl.urls import canonicalize_url, origin_of

__all__ = ["UrlReport", "inspect_url"]


@dataclass(frozen=True, slots=True)
class UrlReport:
    url: str
    canonical_url: str
    doc_id: DocId | None
    robots: str
    """``allowed``, ``disallowed``, ``unavailable`` (5xx/unreachable) or ``unknown``."""
    state: dict[str, Any] | None
    """The URL's row in the crawl database; None when the crawl never saw it."""
    history: tuple[dict[str, Any], ...]
    dup_of: str
    cluster: tuple[str, ...]
    """The original and every URL recorded as its duplicate (or redirect/canonical alias)."""


def inspect_url(url: str, data_dir: Path, *, user_agent: str, frontier_url: str | None = None) -> UrlReport:
    """Report on ``url`` as the crawl in ``data_dir`` (or the PostgreSQL frontier at
    ``frontier_url``) sees it."""
    canonical = canonicalize_url(url)
    layout = CrawlDir(data_dir)
    if not canonical:
        return UrlReport(url, "", None, "unknown", None, (), "", ())
    if not layout.has_crawl(frontier_url):
        return UrlReport(url, canonical, doc_id_for(canonical), "unknown", None, (), "", ())
    db = open_store(layout, frontier_url, readonly=True)
    try:
        origin = origin_of(canonical)
        robots = "unknown"
        stored = db.load_robots(origin)
        if stored is not None:
            status, body, fetched_at, expires_at = stored
            policy = policy_from_response(
                origin, status, body.encode(), now=fetched_at, ttl_s=expires_at - fetched_at, error_ttl_s=0
            )
            if policy.mode == "deny_all":
                robots = "unavailable"
            else:
                robots = "allowed" if policy.can_fetch(canonical, agent_token(user_agent)) else "disallowed"
            if expires_at < time.time():
                robots += " (expired; refetched on the next crawl)"
        state = db.row(canonical)
        if state is not None and state.get("blocked_reason"):
            # The report is public (``/v1/inspect``): a refusal must not tell which
            # internal address a name resolves to.
            state["blocked_reason"] = redact_addresses(state["blocked_reason"])
        history = tuple(db.history(canonical))
        dup_of = state["dup_of"] if state else ""
        original = dup_of or canonical
        cluster = (original, *[u for u in db.duplicates_of(original)])
        return UrlReport(
            url=url,
            canonical_url=canonical,
            doc_id=doc_id_for(canonical),
            robots=robots,
            state=state,
            history=history,
            dup_of=dup_of,
            cluster=cluster if len(cluster) > 1 else (),
        )
    finally:
        db.close()
