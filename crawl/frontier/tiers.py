"""Recrawl by change and importance: which due pages a limited crawl budget refetches first.

A page's changes are a Poisson process of rate λ, estimated from the content-hash changes
the crawl observed, with a prior of one change per ``prior_s`` weighing as one
observation. P(changed since the last fetch Δt ago) = ``1 − e^(−λ·Δt)`` (1 after a newer
sitemap ``lastmod``), times the page's importance (scaled PageRank, else
1 + ln(1 + inbound links)), is the value of refetching it; the budget goes to the highest.
Tiers name the expected time between changes: ``hot`` (under an hour), ``daily``,
``weekly``, ``tail``.

Example::

    rate = change_rate(changes=3, observed_s=7200, prior_s=86400)
    score = recrawl_score(rate, since_fetch_s=1800, importance=2.0)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from core.crawldir import CrawlDir

__all__ = [
    "DueCandidate",
    "Importance",
    "change_rate",
    "choose_due",
    "importance_of",
    "load_importance",
    "p_changed",
    "recrawl_score",
    "tier_of",
]

Importance = tuple[Mapping[str, float], Mapping[str, int]]
"""(PageRank by URL, inbound links by URL), as :func:`load_importance` reads them."""

_TIERS = ((3_600.0, "hot"), (86_400.0, "daily"), (7 * 86_400.0, "weekly"))


def change_rate(changes: int, observed_s: float, *, prior_s: float, prior_weight: float = 1.0) -> float:
    """Changes per second: (changes + w) / (observed seconds + w · prior_s).

    >>> round(change_rate(0, 0.0, prior_s=100.0), 4)
    0.01
    >>> change_rate(10, 900.0, prior_s=100.0) > change_rate(0, 900.0, prior_s=100.0)
    True
    """
    return (max(0, changes) + prior_weight) / (max(0.0, observed_s) + prior_weight * max(prior_s, 1e-9))


def p_changed(
    rate: float, since_fetch_s: float, *, lastmod: float | None = None, last_fetch: float = 0.0
) -> float:
    """P(changed since the last fetch); a sitemap ``lastmod`` newer than the fetch is a certain change."""
    if lastmod is not None and lastmod > last_fetch:
        return 1.0
    return 1.0 - math.exp(-max(0.0, rate) * max(0.0, since_fetch_s))


def recrawl_score(rate: float, since_fetch_s: float, importance: float, **hint: float | None) -> float:
    return p_changed(rate, since_fetch_s, **hint) * importance  # type: ignore[arg-type]


def tier_of(rate: float) -> str:
    mean_s = 1.0 / rate if rate > 0 else math.inf
    return next((name for bound, name in _TIERS if mean_s < bound), "tail")


def importance_of(url: str, ranks: Mapping[str, float], inlinks: Mapping[str, int]) -> float:
    """PageRank (mean 1) when the crawl has it, else 1 + ln(1 + inbound links)."""
    if ranks:
        return float(ranks.get(url, min(ranks.values(), default=1.0)))
    return 1.0 + math.log1p(inlinks.get(url, 0))


def load_importance(data_dir: Path) -> tuple[dict[str, float], dict[str, int]]:
    """(PageRank by URL, inbound links by URL) of a crawl directory; empty where absent."""
    import polars as pl

    crawl = CrawlDir(data_dir)
    if crawl.pagerank.exists():
        frame = pl.read_parquet(crawl.pagerank, columns=["url", "pagerank_scaled"])
        return dict(zip(frame["url"].to_list(), frame["pagerank_scaled"].to_list(), strict=True)), {}
    inlinks: dict[str, int] = {}
    # lazy: the link graph store loads polars; a crawl worker that never ranks recrawls skips it
    from core.linkgraph import LinkGraphStore

    links = LinkGraphStore(crawl.links)
    if links.files():
        counts = links.read_edges().group_by("dst_url").len()
        inlinks = dict(zip(counts["dst_url"].to_list(), counts["len"].to_list(), strict=True))
    return {}, inlinks


@dataclass(frozen=True, slots=True)
class DueCandidate:
    """What the crawl database knows of a fetched page, enough to price its refetch."""

    url: str
    first_fetch: float
    last_fetch: float
    fetch_count: int
    change_count: int
    lastmod: float | None = None


def choose_due(
    candidates: Iterable[DueCandidate],
    now: float,
    budget: int,
    *,
    prior_s: float,
    importance: Importance = ({}, {}),
) -> list[str]:
    """The ``budget`` URLs with the highest P(changed) × importance, best first (ties by URL)."""
    ranks, inlinks = importance
    scored: list[tuple[float, str]] = []
    for c in candidates:
        rate = change_rate(c.change_count, c.last_fetch - c.first_fetch, prior_s=prior_s)
        score = recrawl_score(
            rate,
            now - c.last_fetch,
            importance_of(c.url, ranks, inlinks),
            lastmod=c.lastmod,
            last_fetch=c.last_fetch,
        )
        scored.append((score, c.url))
    scored.sort(key=lambda item: (-item[0], item[1]))
    return [url for _, url in scored[: max(0, budget)]]
