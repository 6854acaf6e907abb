"""What a frontier and the crawl loop pass each other, whichever backend leases.

A ``Lease`` (a URL handed to a worker, with what its fetch needs), the ``Feedback`` of the
host's exchange, the ``Politeness`` rule that turns it into the host's next allowed time,
and the ``Batch`` of crawl-state changes the loop writes after their documents.
"""

from __future__ import annotations

from dataclasses import dataclass

from crawl.state.records import HostState, NewUrl, UrlKind, UrlUpdate

__all__ = ["Batch", "Feedback", "Lease", "Politeness"]


@dataclass(frozen=True, slots=True)
class Lease:
    """A URL handed to one worker, with what its fetch needs."""

    url: str
    host: str
    depth: int
    kind: UrlKind
    priority: float
    retries: int = 0
    redirects: int = 0
    etag: str = ""
    last_modified: str = ""
    previous_hash: str = ""
    interval_s: float = 0.0
    fetch_count: int = 0
    has_history: bool = False
    expires_at: float = 0.0
    due_at: float = 0.0
    """When this refetch of a fetched page came due (``recrawl.due_since``); 0 for a first fetch."""


@dataclass(frozen=True, slots=True)
class Feedback:
    """What the host's last exchange says about when to ask it again."""

    requested: bool = True
    """False when no request reached the host (robots-blocked, refused by the guard)."""
    response_s: float = 0.0
    error: bool = False
    retry_after_s: float | None = None
    crawl_delay_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Politeness:
    """When a host may be asked again after an exchange: the rule both frontier backends share.

    ``max(min_delay, factor × response time, Crawl-delay)`` after a response; after an
    error the backoff doubles (from ``backoff_base_s`` up to ``max_backoff_s``) and a
    ``Retry-After`` wins when it asks for longer.
    """

    min_delay_s: float
    response_time_factor: float
    backoff_base_s: float
    max_backoff_s: float

    def after(self, feedback: Feedback, backoff_s: float) -> tuple[float, float]:
        """(delay before the next request, the host's backoff now) given its backoff before."""
        delay = 0.0
        if feedback.requested:
            delay = max(
                self.min_delay_s, self.response_time_factor * feedback.response_s, feedback.crawl_delay_s
            )
        if feedback.error:
            backoff_s = min(self.max_backoff_s, max(self.backoff_base_s, backoff_s * 2))
            delay = max(delay, backoff_s)
        elif feedback.requested:
            backoff_s = 0.0
        if feedback.retry_after_s is not None:
            delay = max(delay, min(feedback.retry_after_s, self.max_backoff_s))
        return delay, backoff_s


@dataclass(frozen=True, slots=True)
class Batch:
    """The crawl-state changes since the last batch, to be written in one transaction."""

    inserts: list[NewUrl]
    leases: list[tuple[str, float]]
    """(url, lease expiry)."""
    updates: list[UrlUpdate]
    hosts: list[HostState]
