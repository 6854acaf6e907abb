"""The change-rate estimator and the order a limited recrawl budget follows."""

from __future__ import annotations

import math

import pytest

from crawl.frontier.tiers import DueCandidate, change_rate, choose_due, importance_of, p_changed, tier_of

DAY = 86_400.0


def test_the_estimate_moves_from_the_prior_towards_the_observed_rate() -> None:
    assert change_rate(0, 0.0, prior_s=DAY) == pytest.approx(1 / DAY)
    # One change an hour observed: the estimate sits between that and the prior's one a day,
    # and the more hours observed, the closer it comes to one an hour.
    hourly = [1 / change_rate(n, n * 3600.0, prior_s=DAY) for n in (10, 100, 1000)]
    assert all(3600.0 < mean_s < DAY for mean_s in hourly)
    assert hourly[0] > hourly[1] > hourly[2]
    assert hourly[2] == pytest.approx(3600.0, rel=0.03)
    assert change_rate(0, 30 * DAY, prior_s=DAY) < change_rate(0, DAY, prior_s=DAY)


def test_probability_of_change_is_poisson_and_lastmod_makes_it_certain() -> None:
    assert p_changed(1 / 3600, 3600.0) == pytest.approx(1 - math.exp(-1))
    assert p_changed(1 / 3600, 0.0) == 0.0
    assert p_changed(1e-9, 60.0, lastmod=200.0, last_fetch=100.0) == 1.0
    assert p_changed(1e-9, 60.0, lastmod=50.0, last_fetch=100.0) < 1e-6


def test_tiers_name_the_mean_time_between_changes() -> None:
    assert [tier_of(1 / s) for s in (600, 7200, 3 * DAY, 60 * DAY)] == ["hot", "daily", "weekly", "tail"]


def test_importance_is_pagerank_else_inbound_links() -> None:
    assert importance_of("a", {"a": 3.0, "b": 0.5}, {}) == 3.0
    assert importance_of("c", {"a": 3.0, "b": 0.5}, {}) == 0.5
    assert importance_of("a", {}, {"a": 9}) == pytest.approx(1 + math.log(10))
    assert importance_of("z", {}, {}) == 1.0


def test_the_budget_goes_to_the_highest_probability_times_importance() -> None:
    now = 100 * DAY
    busy = DueCandidate("http://s/busy", now - 10 * DAY, now - DAY, fetch_count=50, change_count=40)
    static = DueCandidate("http://s/static", now - 10 * DAY, now - DAY, fetch_count=50, change_count=0)
    stale_static = DueCandidate("http://s/old", now - 90 * DAY, now - 60 * DAY, fetch_count=3, change_count=0)
    candidates = [static, busy, stale_static]
    assert choose_due(candidates, now, 1, prior_s=DAY) == [busy.url]
    assert choose_due(candidates, now, 3, prior_s=DAY) == [busy.url, stale_static.url, static.url]
    # An important static page can outrank an unimportant busy one.
    ranks = {static.url: 1000.0, busy.url: 0.01, stale_static.url: 0.01}
    assert choose_due(candidates, now, 1, prior_s=DAY, importance=(ranks, {}))[0] == static.url
    assert choose_due(candidates, now, 0, prior_s=DAY) == []
