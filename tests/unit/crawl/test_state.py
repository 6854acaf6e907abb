"""The crawl database: typed outcomes stored as their historical texts, per-host activity.

Both backends (``crawl_store``): SQLite and PostgreSQL.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crawl.state.host_health import host_health
from crawl.state.records import HostState, NewUrl, Outcome, UrlStatus, UrlUpdate
from crawl.state.sqlite import CrawlDb


def _crawl_db(open_db: Callable[[], CrawlDb]) -> None:
    now = time.time()
    db = open_db()
    inserts = [NewUrl(f"http://a/{i}", "a", 1, 0.5) for i in range(6)]
    inserts.append(NewUrl("http://b/", "b", 0, 1.0, status=UrlStatus.BLOCKED, outcome=Outcome.BLOCKED))
    db.apply(inserts=inserts, leases=[], updates=[], hosts=[HostState("a", now + 5, 2.0, 3)], now=now)
    done, failed, pending = UrlStatus.DONE, UrlStatus.FAILED, UrlStatus.PENDING
    updates = [
        UrlUpdate("http://a/0", done, Outcome.INDEXED, 200, fetched=True, elapsed_s=0.2, content_hash="h"),
        UrlUpdate("http://a/1", failed, Outcome.HTTP, 503, fetched=True, elapsed_s=0.4),
        UrlUpdate("http://a/2", done, Outcome.HTTP, 404, fetched=True, elapsed_s=0.1),
        UrlUpdate("http://a/3", pending, Outcome.ERROR, detail="connect: ConnectError", retries=1),
        UrlUpdate(
            "http://a/4", done, Outcome.DUPLICATE, 200, detail="near", dup_of="http://a/0", fetched=True
        ),
        UrlUpdate("http://a/5", UrlStatus.BLOCKED, Outcome.BLOCKED, detail="robots.txt"),
    ]
    db.apply(inserts=[], leases=[], updates=updates, hosts=[], now=now)
    db.close()


def test_outcomes_are_stored_as_the_texts_older_databases_hold(crawl_store: Callable[[], Any]) -> None:
    _crawl_db(crawl_store)
    db = crawl_store()
    try:
        assert db.status_counts() == {
            "blocked:blocked": 1,
            "blocked:blocked: robots.txt": 1,
            "done:duplicate (near)": 1,
            "done:http 404": 1,
            "done:indexed": 1,
            "failed:http 503": 1,
            "pending:error: connect: ConnectError": 1,
        }
        assert db.duplicate_counts() == {"http://a/0": 1}
        assert [url for url, _, _ in db.indexed_fingerprints()] == ["http://a/0"]
    finally:
        db.close()


def test_stale_clusters_follow_the_recorded_document_sizes(crawl_store: Callable[[], Any]) -> None:
    _crawl_db(crawl_store)  # http://a/4 is a near duplicate of http://a/0
    db = crawl_store()
    try:
        # Nothing recorded (a database from before the column): the size is unknown.
        assert db.stale_clusters() == {"http://a/0": (2, None)}
        db.record_cluster_sizes({"http://a/0": 1})  # written before its duplicate came
        assert db.stale_clusters() == {"http://a/0": (2, 1)}
        db.record_cluster_sizes({"http://a/0": 2})  # repaired
        assert db.stale_clusters() == {}
        db.record_cluster_sizes({"http://a/0": 0})  # no document to repair
        assert db.stale_clusters() == {}
        db.record_cluster_sizes({"http://a/0": 1})  # refetched and written again as size 1
        assert db.stale_clusters() == {"http://a/0": (2, 1)}
        db.forget_cluster_sizes()
        assert db.stale_clusters() == {"http://a/0": (2, None)}
    finally:
        db.close()


def test_host_health_reads_the_activity_of_each_host(tmp_path: Path, crawl_store: Callable[[], Any]) -> None:
    url = crawl_store.frontier_url  # type: ignore[attr-defined]
    if url:
        crawl_store().close()  # an empty PostgreSQL frontier: the schema, no rows
    assert host_health(tmp_path, frontier_url=url) == []
    _crawl_db(crawl_store)
    a, b = host_health(tmp_path, frontier_url=url)
    assert (a.host, a.done, a.pending, a.failed, a.blocked, a.http_4xx, a.http_5xx) == ("a", 3, 1, 1, 1, 1, 1)
    assert (a.errors, a.backoff_s, a.fetches, a.mean_response_ms) == (3, 2.0, 5, 140.0)
    assert 4.0 < a.next_allowed_in_s <= 5.0
    assert (b.host, b.blocked, b.pending, b.fetches) == ("b", 1, 0, 0)


def test_released_leases_count_an_attempt_and_fail_when_used_up(crawl_store: Callable[[], Any]) -> None:
    """A crawl that died holding a lease spent an attempt; a URL out of retries ends failed."""
    now = time.time()
    db = crawl_store()
    try:
        urls = [f"http://p/{name}" for name in ("fresh", "spent", "expired", "expired-spent")]
        db.apply(inserts=[NewUrl(u, "p", 0, 1.0) for u in urls], leases=[], updates=[], hosts=[], now=now)
        spent = [UrlUpdate(u, UrlStatus.PENDING, Outcome.ERROR, retries=2) for u in urls[1::2]]
        db.apply(inserts=[], leases=[], updates=spent, hosts=[], now=now)
        db.apply(inserts=[], leases=[(u, now + 60) for u in urls[:2]], updates=[], hosts=[], now=now)
        assert db.release_leases(max_retries=2) == 1
        fresh, used_up = db.row(urls[0]), db.row(urls[1])
        assert (fresh["status"], fresh["retries"], fresh["outcome"]) == ("pending", 1, "lease expired")
        assert (used_up["status"], used_up["outcome"]) == ("failed", "lease expired")
        if crawl_store.frontier_url:  # type: ignore[attr-defined]
            # Shared leases run out in the database: reaping follows the same rule.
            db.apply(inserts=[], leases=[(u, now - 1) for u in urls[2:]], updates=[], hosts=[], now=now)
            assert sorted(db.reap_expired(now, max_retries=2)) == sorted(urls[2:])
            expired, expired_spent = db.row(urls[2]), db.row(urls[3])
            assert (expired["status"], expired["retries"]) == ("pending", 1)
            assert (expired_spent["status"], expired_spent["outcome"]) == ("failed", "lease expired")
    finally:
        db.close()


def test_a_host_is_known_once_the_crawl_holds_a_url_of_it(crawl_store: Callable[[], Any]) -> None:
    """IndexNow takes notifications only for hosts the crawl knows (``knows_host``), whatever
    the status of their URLs, with the port as part of the host; pushed URLs count too."""
    db = crawl_store()
    assert not db.knows_host("a")
    db.close()
    _crawl_db(crawl_store)
    db = crawl_store()
    db.push([NewUrl("http://c.test:8080/new", "c.test:8080", 0, 2.0)], time.time())
    assert db.knows_host("a")  # pending, done, failed and blocked URLs
    assert db.knows_host("b")  # only a blocked URL
    assert db.knows_host("c.test:8080")
    assert not db.knows_host("c.test")  # another port is another host
    assert not db.knows_host("d")
    assert not db.knows_host("")
