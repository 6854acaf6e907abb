"""A URL leased by a crawl that died counts an attempt, so a poison URL ends failed."""

from __future__ import annotations

import asyncio
from pathlib import Path

from crawl.frontier.seen import SeenUrls
from crawl.frontier.sqlite import Frontier
from crawl.state.records import NewUrl
from crawl.state.sqlite import CrawlDb

URL = "http://poison.test/bomb"


def _crash_holding_the_lease(path: Path, max_retries: int) -> None:
    """Open the frontier as a restarted crawl does, lease the URL, commit the lease, and 'die'."""
    db = CrawlDb(path)
    frontier = Frontier(db, SeenUrls(db), min_delay_s=0, max_retries=max_retries)
    frontier.add(NewUrl(URL, "poison.test", 0, 1.0))
    lease = asyncio.run(frontier.lease())
    if lease is not None:
        frontier.commit()  # the lease is on disk; then the process is killed (no finish)
    db.close()


def test_a_poison_url_fails_after_max_retries_of_crashes(tmp_path: Path) -> None:
    path = tmp_path / "frontier.sqlite"
    retries = []
    for _ in range(4):
        _crash_holding_the_lease(path, max_retries=2)
        db = CrawlDb(path)
        row = db.row(URL)
        db.close()
        assert row is not None
        retries.append((row["status"], row["retries"]))
    # Each restart counts the crashed attempt; once the retries are used up it is failed, not leased again.
    db = CrawlDb(path)
    db.release_leases(max_retries=2)
    final = db.row(URL)
    db.close()
    assert retries[:2] == [("leased", 0), ("leased", 1)]
    assert final is not None and (final["status"], final["outcome"]) == ("failed", "lease expired")
