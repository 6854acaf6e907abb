"""The PostgreSQL frontier's rounds: callers waiting together are served by one lease
statement, with never more than one URL of a host out at a time."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from crawl.frontier import Feedback, Lease
from crawl.frontier_pg import PgFrontier
from crawl.seen import SeenUrls
from crawl.state import NewUrl, Outcome, UrlStatus, UrlUpdate
from crawl.state_pg import PgCrawlDb


class _CountingDb(PgCrawlDb):
    """The real database, remembering how many leases each round asked for and got."""

    rounds: list[tuple[int, int]]

    def exchange(self, owner: str, **kw: Any) -> list[dict[str, Any]]:
        rows = super().exchange(owner, **kw)
        if kw["n"]:
            self.rounds.append((kw["n"], len(rows)))
        return rows


def _done(lease: Lease) -> UrlUpdate:
    return UrlUpdate(lease.url, UrlStatus.DONE, Outcome.INDEXED, 200, fetched=True, last_fetch=time.time())


def test_waiting_callers_share_a_round_and_get_one_url_per_host(pg_dsn: str) -> None:
    db = _CountingDb(pg_dsn)
    db.rounds = []

    async def scenario() -> tuple[list[list[str]], list[tuple[int, int]]]:
        frontier = PgFrontier(db, SeenUrls(db, capacity=100), min_delay_s=0.0, response_time_factor=0.0)
        for host in "abc":
            for i in range(2):
                frontier.add(NewUrl(f"http://{host}/{i}", host, 1, 0.5))
        callers = [asyncio.ensure_future(frontier.lease()) for _ in range(7)]
        waves: list[list[str]] = []
        for _ in range(2):
            await asyncio.sleep(0.3)
            wave = [c.result() for c in callers if c.done() and c.result() is not None]
            callers = [c for c in callers if not c.done()]
            assert all(lease is not None for lease in wave)
            waves.append(sorted(lease.url for lease in wave if lease is not None))
            first_round = list(db.rounds[:1])
            for lease in wave:
                assert lease is not None
                frontier.finish(lease, _done(lease), Feedback())
        rest = await asyncio.wait_for(asyncio.gather(*callers), timeout=5)
        assert rest == [None]  # the crawl is over for the caller still waiting
        return waves, first_round

    waves, first_round = asyncio.run(scenario())
    # Seven callers, three hosts: one round asks for seven, gets one URL of each host.
    assert first_round == [(7, 3)]
    assert waves == [["http://a/0", "http://b/0", "http://c/0"], ["http://a/1", "http://b/1", "http://c/1"]]
    assert db.count_finished_pages() == 0  # acknowledged only by a batch write
    db.close()
