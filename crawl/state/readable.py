"""Crawl-state values written for people (hosts and inspect pages, `trawl inspect`): times, sizes.

The crawl database stores Unix seconds, byte counts and seconds as floats; a page that
prints ``1796109490.1565`` or ``86400.0`` makes the reader do the arithmetic. Each field
has a kind by its name (``*_at``, ``last_fetch`` are times, ``bytes`` a size, ``*_s``
and ``*_ms`` durations) and a label; empty values are left out by the callers.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["HOST_COLUMNS", "STATE_LABELS", "duration", "readable", "size", "timestamp"]

HOST_COLUMNS: dict[str, str] = {
    "host": "Host",
    "done": "Done",
    "indexed": "Indexed",
    "pending": "Backlog",
    "failed": "Failed",
    "blocked": "Blocked",
    "http_4xx": "4xx",
    "http_5xx": "5xx",
    "errors": "Errors",
    "fetches": "Fetches",
    "mean_response_ms": "Mean response",
    "backoff_s": "Back-off",
    "next_allowed_in_s": "Next fetch in",
}
"""The hosts table's columns, in order, with their headings."""

STATE_LABELS: dict[str, str] = {
    "url": "URL as given",
    "canonical_url": "Canonical URL",
    "robots": "robots.txt",
    "indexed": "In the index",
    "generation": "Index generation",
    "doc_id": "Document id",
    "shard": "Shard",
    "dup_of": "Duplicate of",
    "cluster": "Same-content cluster",
    "status": "Crawl status",
    "outcome": "Last outcome",
    "http_status": "HTTP status",
    "kind": "Kind",
    "depth": "Link depth from a seed",
    "parent": "Found on",
    "discovered_at": "Discovered",
    "last_fetch": "Last fetched",
    "next_fetch": "Next fetch due",
    "interval_s": "Recrawl interval",
    "fetch_count": "Fetches",
    "change_count": "Changes seen",
    "retries": "Retries",
    "redirects": "Redirects",
    "blocked_reason": "Blocked because",
    "etag": "ETag",
    "last_modified": "Last-Modified header",
    "content_hash": "Content hash",
    "simhash": "SimHash",
    "lease_until": "Leased until",
    "priority": "Priority",
    "lastmod": "Sitemap lastmod",
    "cluster_written": "Copies of this page (last indexed)",
}
"""Labels of an inspect report's fields, in display order (unknown fields follow)."""

_TIMES = frozenset(
    {"discovered_at", "last_fetch", "next_fetch", "lease_until", "at", "fetched_at", "lastmod"}
)
_HIDDEN = frozenset({"host", "bytes_total"})


def timestamp(seconds: float) -> str:
    """``YYYY-MM-DD hh:mm:ss UTC``."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def duration(seconds: float) -> str:
    """``4 ms``, ``1.5 s``, ``12 min``, ``1 day``: one unit, the largest that fits."""
    if seconds < 0:
        return "now"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    for unit, length in (("day", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= length:
            value = seconds / length
            text = f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"
            return f"{text} {unit}" + ("s" if unit == "day" and text != "1" else "")
    return f"{seconds:.0f} s"


def size(count: float) -> str:
    """``812 B``, ``105.3 KB``, ``4.2 MB`` (powers of 1024)."""
    value = float(count)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def readable(name: str, value: Any) -> str:
    """``value`` of field ``name`` as a person reads it; "" for nothing to show."""
    if value is None or value == "" or value == [] or value == () or name in _HIDDEN:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if name in _TIMES and isinstance(value, int | float):
        return timestamp(float(value)) if value else ""
    if name == "bytes" and isinstance(value, int | float):
        return size(value)
    if name.endswith("_ms") and isinstance(value, int | float):
        return duration(value / 1000)
    if name.endswith("_s") and isinstance(value, int | float):
        return duration(float(value))
    if name == "priority" and isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, list | tuple):
        return "\n".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
