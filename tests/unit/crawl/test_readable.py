"""Crawl-state values written for people: times, sizes, durations, and a label for every column."""

from __future__ import annotations

from crawl.state.readable import STATE_LABELS, duration, readable, size, timestamp


def test_times_sizes_and_durations() -> None:
    assert timestamp(1796109490.1565) == "2026-12-01 07:18:10 UTC"
    assert (duration(0.0042), duration(1.5), duration(90), duration(86_400), duration(3 * 86_400)) == (
        "4 ms", "1.5 s", "1.5 min", "1 day", "3 days",
    )  # fmt: skip
    assert (size(812), size(107_870), size(5 * 1024**2)) == ("812 B", "105.3 KB", "5.0 MB")
    assert readable("last_fetch", 1796109490.1565) == "2026-12-01 07:18:10 UTC"
    assert readable("interval_s", 86_400.0) == "1 day"
    assert readable("mean_response_ms", 12.0) == "12 ms"
    assert [readable("cluster", []), readable("dup_of", ""), readable("lease_until", None)] == ["", "", ""]
    assert readable("indexed", True) == "yes"


def test_every_column_of_the_crawl_state_has_a_label() -> None:
    """A column added to ``urls`` must get a label here, or the inspect pages show its raw name."""
    import re

    from crawl.state import sqlite

    urls = sqlite.__dict__["_SCHEMA"].split("CREATE TABLE IF NOT EXISTS urls (", 1)[1].split(");", 1)[0]
    columns = set(re.findall(r"^\s+(\w+) (?:TEXT|INTEGER|REAL)", urls, re.M))
    assert {"url", "cluster_written", "lastmod"} <= columns
    assert columns - {"host"} <= set(STATE_LABELS), sorted(columns - set(STATE_LABELS))
