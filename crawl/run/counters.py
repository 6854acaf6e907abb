"""Live crawl counters (for the progress display) and the end-of-crawl summary."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

__all__ = ["CrawlStats", "CrawlSummary"]


@dataclass(slots=True)
class CrawlStats:
    """Mutable counters, updated by the loop and read by the progress display."""

    started_at: float = field(default_factory=time.monotonic)
    fetches: int = 0
    pages: int = 0
    bytes: int = 0
    indexed: int = 0
    duplicates: int = 0
    robots_fetches: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    queued: int = 0
    in_flight: int = 0

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started_at

    def pages_per_s(self) -> float:
        elapsed = self.elapsed_s()
        return self.pages / elapsed if elapsed > 0 else 0.0

    def summary(self, *, stopped: bool) -> CrawlSummary:
        return CrawlSummary(
            elapsed_s=self.elapsed_s(),
            fetches=self.fetches,
            pages=self.pages,
            bytes=self.bytes,
            indexed=self.indexed,
            duplicates=self.duplicates,
            pending=self.queued,
            outcomes=tuple(sorted(self.outcomes.items())),
            errors=tuple(sorted(self.errors.items())),
            stopped=stopped,
        )


@dataclass(frozen=True, slots=True)
class CrawlSummary:
    """What a crawl run did."""

    elapsed_s: float
    fetches: int
    """HTTP exchanges, robots.txt and sitemaps included."""
    pages: int
    bytes: int
    indexed: int
    duplicates: int
    pending: int
    """URLs left in the frontier (a later run resumes them)."""
    outcomes: tuple[tuple[str, int], ...]
    errors: tuple[tuple[str, int], ...]
    stopped: bool
    """True when the crawl was stopped before it ran out of work or budget."""

    @property
    def pages_per_s(self) -> float:
        return self.pages / self.elapsed_s if self.elapsed_s > 0 else 0.0
