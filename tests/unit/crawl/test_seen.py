"""The seen-URL filter keeps every URL it was told about across the rebuilds that grow it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from crawl.frontier.seen import SeenUrls
from crawl.frontier.sqlite import Frontier
from crawl.state.records import NewUrl
from crawl.state.sqlite import CrawlDb


def _url(i: int) -> str:
    return f"http://seen.test/page/{i}"


def test_urls_stay_seen_through_growth_both_committed_and_not(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = CrawlDb(tmp_path / "frontier.sqlite")
    frontier = Frontier(db, SeenUrls(db, capacity=8), min_delay_s=0)
    for i in range(30):
        frontier.add(NewUrl(_url(i), "seen.test", 1, 1.0))
    frontier.commit()  # 30 URLs in the table

    seen = SeenUrls(db, capacity=8)  # a restarted crawl: loads the table, room for 60
    assert len(seen) == 30
    with caplog.at_level(logging.INFO, logger="crawl.frontier.seen"):
        assert all(seen.add_if_new(_url(i)) for i in range(30, 130))  # uncommitted, past capacity
    assert sum("rebuilding with capacity" in r.getMessage() for r in caplog.records) >= 1
    assert len(seen) == 130
    assert not any(seen.add_if_new(_url(i)) for i in range(130))  # table or held set, all known
    assert seen.add_if_new(_url(130))
    db.close()
