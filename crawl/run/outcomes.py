"""How a fetch's outcome becomes crawl state: retries, the next fetch time, removals.

Pure rules over a lease and an update, shared by the per-URL handling
(:mod:`crawl.run.loop`, :mod:`crawl.run.responses`) and the batch writer
(:mod:`crawl.run.batch_writer`).
"""

from __future__ import annotations

import time
from dataclasses import replace
from email.utils import parsedate_to_datetime

from core.errors import CrawlError, FetchError, OutOfScope, RobotsDenied, TooLarge
from core.settings import CrawlSettings
from crawl.frontier.leases import Lease
from crawl.frontier.recrawl import next_interval
from crawl.state.records import Outcome, UrlKind, UrlStatus, UrlUpdate

_REMOVING = frozenset(
    {
        Outcome.HTTP,
        Outcome.NOINDEX,
        Outcome.CANONICALIZED,
        Outcome.DUPLICATE,
        Outcome.REDIRECT,
        Outcome.BLOCKED,
        Outcome.NOT_HTML,
    }
)


def removal_reason(lease: Lease, update: UrlUpdate) -> str:
    """Why a page fetched before must leave the index now (``""``: it need not).

    Only a page with an earlier fetch can have a document to remove; transient
    failures (5xx, timeouts, retries) remove nothing.
    """
    if not lease.fetch_count or lease.kind != UrlKind.PAGE or update.outcome not in _REMOVING:
        return ""  # a sitemap gone or disallowed has no document to remove
    if update.outcome == Outcome.HTTP and (update.http_status or 0) < 400:
        return ""
    return update.outcome_key


def retry_after_s(value: str, now: float) -> float | None:
    """``Retry-After`` as seconds from now (delta-seconds or an HTTP date)."""
    value = value.strip()
    if not value:
        return None
    if value.isdigit():
        return float(value)
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - now)
    except (TypeError, ValueError):
        return None


def error_kind(exc: CrawlError) -> str:
    """The name a failed fetch is counted under (``CrawlStats.errors``) and recorded with."""
    if isinstance(exc, TooLarge):
        return "too_large"
    if isinstance(exc, RobotsDenied):
        return "robots"
    if isinstance(exc, OutOfScope):
        return "guard"
    if isinstance(exc, FetchError):
        return exc.kind.value
    return type(exc).__name__


def retry_or_fail(
    lease: Lease, outcome: Outcome, http_status: int | None, *, max_retries: int, detail: str = ""
) -> UrlUpdate:
    """Pending again while retries are left, else failed for good."""
    if lease.retries < max_retries:
        return UrlUpdate(
            lease.url, UrlStatus.PENDING, outcome, http_status, retries=lease.retries + 1, detail=detail
        )
    return UrlUpdate(
        lease.url,
        UrlStatus.FAILED,
        outcome,
        http_status,
        detail=detail,
        retries=lease.retries,
        fetched=True,
        last_fetch=time.time(),
    )


def scheduled(update: UrlUpdate, lease: Lease, settings: CrawlSettings, *, changed: bool) -> UrlUpdate:
    """The update with the next fetch time after a fetch that did (not) see a change."""
    s = settings
    interval = next_interval(
        lease.interval_s,
        changed=changed,
        initial_s=s.recrawl_initial_s,
        min_s=s.recrawl_min_s,
        max_s=s.recrawl_max_s,
    )
    return replace(update, next_fetch=(update.last_fetch or time.time()) + interval, interval_s=interval)
