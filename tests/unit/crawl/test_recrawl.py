"""Adaptive recrawl intervals."""

from __future__ import annotations

from crawl.frontier.recrawl import next_interval

BOUNDS = {"initial_s": 100.0, "min_s": 10.0, "max_s": 1000.0}


def test_first_interval_then_adapts_within_bounds() -> None:
    assert next_interval(0, changed=True, **BOUNDS) == 100.0
    assert next_interval(100, changed=True, **BOUNDS) == 50.0
    assert next_interval(100, changed=False, **BOUNDS) == 150.0
    assert next_interval(12, changed=True, **BOUNDS) == 10.0
    assert next_interval(900, changed=False, **BOUNDS) == 1000.0


def test_a_page_that_never_changes_converges_to_the_maximum() -> None:
    interval = 0.0
    for _ in range(20):
        interval = next_interval(interval, changed=False, **BOUNDS)
    assert interval == 1000.0
