"""The fleet's page budgets in PostgreSQL (DECISIONS 41): a leased page takes a share of
``--max-pages``; a fetch keeps it, every other way out of the lease gives it back; the
per-host cap counts the pages every worker admitted."""

from __future__ import annotations

import time
from typing import Any

import psycopg
from psycopg.rows import dict_row

from crawl.state.pg_batch import insert_urls
from crawl.state.postgres import PgCrawlDb
from crawl.state.records import NewUrl, Outcome, UrlStatus, UrlUpdate


def _spent(db: PgCrawlDb) -> int:
    return int(db._scalar("SELECT spent FROM page_budget WHERE id = 1"))


def _lease(db: PgCrawlDb, owner: str, n: int, budget: int | None, per_host: int = 4) -> list[dict[str, Any]]:
    now = time.time()
    return db.exchange(owner, requeues=[], releases=[], n=n, now=now, until=now + 60, per_host=per_host,
                       budget=budget)  # fmt: skip


def test_leased_pages_take_shares_that_fetches_keep_and_the_rest_give_back(pg_dsn: str) -> None:
    db = PgCrawlDb(pg_dsn)
    try:
        now = time.time()
        urls = [f"http://h{i}/p" for i in range(6)]
        db.apply(inserts=[NewUrl(u, f"h{i}", 1, 0.5) for i, u in enumerate(urls)], leases=[], updates=[],
                 hosts=[], now=now)  # fmt: skip
        assert _spent(db) == 0
        got = _lease(db, "w1", n=6, budget=4)
        assert len(got) == 4 and _spent(db) == 4 and db.pages_left == 0
        assert _lease(db, "w2", n=6, budget=4) == [] and db.pages_left == 0  # another worker: none left
        fetched, retried, refused, dropped = (r["url"] for r in got)
        db.apply(
            inserts=[],
            leases=[],
            updates=[
                UrlUpdate(fetched, UrlStatus.DONE, Outcome.INDEXED, 200, fetched=True, last_fetch=now),
                UrlUpdate(refused, UrlStatus.BLOCKED, Outcome.BLOCKED, detail="robots.txt"),
            ],
            hosts=[],
            now=now,
        )
        assert _spent(db) == 3  # the fetch keeps its share; robots.txt's refusal gives it back
        db.exchange("w1", requeues=[(retried, 1, "error")], releases=[], n=0, now=now, until=now)
        assert _spent(db) == 2  # a retry back to pending gives it back
        db.release_leases("w1")
        assert _spent(db) == 1  # so does a lease its worker died holding
        assert db.row(dropped)["status"] == "pending"
        again = _lease(db, "w2", n=6, budget=4)
        assert len(again) == 3 and _spent(db) == 4  # three shares free again, taken again
        unbudgeted = _lease(db, "w3", n=6, budget=None)  # a recrawl's leases take no share
        assert len(unbudgeted) == 1 and _spent(db) == 4
        db.release_leases("w3")
        assert _spent(db) == 4
    finally:
        db.close()


def test_the_host_cap_counts_every_workers_admissions(pg_dsn: str) -> None:
    one, two = PgCrawlDb(pg_dsn), PgCrawlDb(pg_dsn)
    try:
        one.admission_cap = two.admission_cap = 3
        now = time.time()
        # Each worker admits two new pages of host h (its own count says it may); the fleet holds
        # three, the fourth is stored blocked. URLs the fleet knows already are not counted again.
        for db, pages in ((one, (1, 2)), (two, (2, 3, 4))):
            inserts = [NewUrl(f"http://h/{i}", "h", 1, 0.5) for i in pages]
            db.apply(inserts=inserts, leases=[], updates=[], hosts=[], now=now)
        statuses = {i: one.row(f"http://h/{i}")["status"] for i in (1, 2, 3, 4)}
        assert statuses == {1: "pending", 2: "pending", 3: "pending", 4: "blocked"}
        assert one.row("http://h/4")["blocked_reason"] == "host page budget reached"
        assert one.admitted_pages_by_host() == {"h": 3}
        # Without a cap (an operator's seeds, IndexNow) a URL is admitted as asked.
        seeds = PgCrawlDb(pg_dsn)
        seeds.apply(inserts=[NewUrl("http://h/5", "h", 0, 1.0)], leases=[], updates=[], hosts=[], now=now)
        seeds.close()
        assert one.row("http://h/5")["status"] == "pending"
    finally:
        one.close()
        two.close()


def test_counting_admissions_leaves_the_host_free_to_lease(pg_dsn: str) -> None:
    """A worker admitting new pages of a host must not hold that host away from the fleet:
    while its insert's transaction is open, another worker still leases the host."""
    two = PgCrawlDb(pg_dsn)
    try:
        now = time.time()
        two.apply(inserts=[NewUrl("http://h/1", "h", 1, 0.5)], leases=[], updates=[], hosts=[], now=now)
        with psycopg.connect(pg_dsn, row_factory=dict_row) as one:  # a transaction left open
            with one.cursor() as cur:
                insert_urls(cur, [NewUrl("http://h/2", "h", 1, 0.5)], now, cap=10)
            got = _lease(two, "w2", n=1, budget=None)
            assert [r["url"] for r in got] == ["http://h/1"]
            one.commit()
        assert two.row("http://h/2")["status"] == "pending"
    finally:
        two.close()


def test_a_count_kept_on_the_host_row_by_an_older_database_carries_on(pg_dsn: str) -> None:
    db = PgCrawlDb(pg_dsn)
    try:
        db.admission_cap = 3
        now = time.time()
        db.apply(inserts=[NewUrl("http://h/1", "h", 1, 0.5)], leases=[], updates=[], hosts=[], now=now)
        # As an earlier version left it: the count on ``hosts``, no counter of its own yet.
        db._conn.execute("DELETE FROM host_admissions")
        db._conn.execute("UPDATE hosts SET admitted = 2 WHERE host = 'h'")
        inserts = [NewUrl(f"http://h/{i}", "h", 1, 0.5) for i in (2, 3)]
        db.apply(inserts=inserts, leases=[], updates=[], hosts=[], now=now)
        assert [db.row(f"http://h/{i}")["status"] for i in (2, 3)] == ["pending", "blocked"]
    finally:
        db.close()
