"""A recrawl budget refetches a page that keeps changing more often than a static one, on both backends."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from crawl.state.records import NewUrl, Outcome, UrlStatus, UrlUpdate

BUSY, STATIC = "http://s.test/busy", "http://s.test/static"


def _fetched(url: str, now: float, *, changed: bool) -> UrlUpdate:
    return UrlUpdate(
        url,
        UrlStatus.DONE,
        Outcome.INDEXED,
        200,
        fetched=True,
        changed=changed,
        last_fetch=now,
        next_fetch=now + 60,
    )


def test_budget_follows_the_change_rate(crawl_store: Callable[[], Any]) -> None:
    db = crawl_store()
    now = 1_000_000.0
    db.apply(
        inserts=[NewUrl(u, "s.test", 0, 1.0) for u in (BUSY, STATIC)],
        leases=[],
        updates=[],
        hosts=[],
        now=now,
    )
    db.apply(
        inserts=[],
        leases=[],
        updates=[_fetched(u, now, changed=False) for u in (BUSY, STATIC)],
        hosts=[],
        now=now,
    )
    fetches: Counter[str] = Counter()
    for _ in range(20):
        now += 120  # both are due again every round
        assert db.schedule_recrawl(now, budget=1, prior_s=3600) == 1
        [chosen] = [u for u in (BUSY, STATIC) if db.row(u)["status"] == "pending"]
        fetches[chosen] += 1
        db.apply(
            inserts=[], leases=[], updates=[_fetched(chosen, now, changed=chosen == BUSY)], hosts=[], now=now
        )
    assert fetches[BUSY] > 2 * fetches[STATIC] > 0
    # Without a budget every due page comes back, as before.
    now += 120
    assert db.schedule_recrawl(now) == 2
    db.close()
