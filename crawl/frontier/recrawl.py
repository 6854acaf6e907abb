"""Adaptive recrawl intervals: visit pages that change often more often.

Each fetched page gets a next-fetch time. The interval halves after an observed
change and grows by half after none, bounded by a minimum and a maximum, which
tracks a page's change rate without storing its whole history (the classic
"adaptive fetch schedule" of Nutch). Change is judged by a 304 from a conditional GET
or by comparing the hash of the clean text, so a new ad or timestamp in the markup
does not count as a change.
"""

from __future__ import annotations

__all__ = ["due_since", "next_interval"]


def due_since(next_fetch: float | None, lastmod: float | None, last_fetch: float | None) -> float:
    """When a fetched page's refetch came due: its next-fetch time, or its sitemap's newer
    ``<lastmod>`` when that came first (the recrawl lag metric counts from here); 0 when unknown.

    >>> due_since(1000.0, None, 500.0)
    1000.0
    >>> due_since(1000.0, 800.0, 500.0)
    800.0
    >>> due_since(None, None, None)
    0.0
    """
    due = next_fetch or 0.0
    if lastmod is not None and last_fetch is not None and lastmod > last_fetch:
        due = min(due, lastmod) if due else lastmod
    return float(due)


def next_interval(previous_s: float, *, changed: bool, initial_s: float, min_s: float, max_s: float) -> float:
    """The interval until the next fetch of a page just fetched.

    >>> next_interval(0, changed=True, initial_s=86400, min_s=3600, max_s=2592000)
    86400
    >>> next_interval(86400, changed=False, initial_s=86400, min_s=3600, max_s=2592000)
    129600.0
    """
    if previous_s <= 0:
        return min(max(initial_s, min_s), max_s)
    interval = previous_s / 2 if changed else previous_s * 1.5
    return min(max(interval, min_s), max_s)
