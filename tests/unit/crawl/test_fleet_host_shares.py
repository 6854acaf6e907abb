"""Hosts shared fairly across the fleet when there are fewer of them than callers: while
another worker is short of hosts, a worker leases only up to one host more than that
worker holds (``crawl.state.pg_leasing._LEASE``). Without it, the worker that leased first kept
its hosts (a release and the next lease share a round) and two bench workers split the
5,000 pages 3,915 to 1,105."""

from __future__ import annotations

import time
from typing import Any

from crawl.state.postgres import PgCrawlDb
from crawl.state.records import HostState, NewUrl


def _seed(db: PgCrawlDb, hosts: int, now: float) -> None:
    inserts = [NewUrl(f"http://h{i}/{j}", f"h{i}", 1, 0.5) for i in range(hosts) for j in range(3)]
    db.apply(inserts=inserts, leases=[], updates=[], hosts=[], now=now)


def _lease(
    db: PgCrawlDb, owner: str, n: int, *, held: int, now: float, releases: list[HostState] | None = None
) -> set[str]:
    rows: list[dict[str, Any]] = db.exchange(
        owner, requeues=[], releases=releases or [], n=n, now=now, until=now + 60, held=held
    )
    return {str(r["host"]) for r in rows}


def test_a_worker_leases_no_more_than_one_host_past_a_short_workers_count(pg_dsn: str) -> None:
    db = PgCrawlDb(pg_dsn)
    try:
        now = time.time()
        _seed(db, 6, now)
        for owner in ("w1", "w2"):
            db.heartbeat(owner, now, {})
        first = _lease(db, "w1", 4, held=0, now=now)  # nobody short: as many as asked
        second = _lease(db, "w2", 4, held=0, now=now)  # two left: w2 is short, holding two
        assert len(first) == 4 and len(second) == 2 and not first & second
        # w1 releases a host and asks for one: it holds three, one past w2's two, so it
        # leaves the host it released to the short worker.
        released = sorted(first)[0]
        again = _lease(db, "w1", 1, held=3, now=now, releases=[HostState(released, 0.0, 0.0, 0)])
        assert again == set()
        taken = _lease(db, "w2", 2, held=2, now=now)
        assert taken == {released}
        # Three each now; w2, still short (it asked for two), holds three, so w1 may hold four.
        back = _lease(db, "w1", 1, held=3, now=now, releases=[HostState(sorted(first)[1], 0.0, 0.0, 0)])
        assert back == {sorted(first)[1]}
    finally:
        db.close()


def test_a_worker_that_got_what_it_asked_for_or_stopped_asking_restrains_nobody(pg_dsn: str) -> None:
    db = PgCrawlDb(pg_dsn)
    try:
        now = time.time()
        _seed(db, 6, now)
        for owner in ("w1", "w2", "w3"):
            db.heartbeat(owner, now, {})
        (own,) = _lease(db, "w2", 1, held=0, now=now)  # satisfied: not short
        assert len(_lease(db, "w1", 4, held=0, now=now)) == 4  # so w2's one host restrains nobody
        assert len(_lease(db, "w3", 4, held=0, now=now)) == 1  # short, holding one
        db.exchange("w2", requeues=[], releases=[HostState(own, 0.0, 0.0, 0)], n=0, now=now, until=now)
        assert _lease(db, "w1", 1, held=4, now=now + 0.5) == set()  # w3's mark is fresh: the free host waits
        assert _lease(db, "w1", 1, held=4, now=now + 2.0) == {own}  # w3 stopped asking a second ago
    finally:
        db.close()
