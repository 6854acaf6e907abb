"""One original per content across a fleet (``crawl.state.content_claims``, ``PgCrawlDb.claim_contents``).

Each worker's in-memory duplicate index knows only the documents indexed when it started
and its own, so two workers that fetched copies of one page both indexed it (two bench
workers: 5,003 to 5,016 documents for 5,000 distinct pages). New documents are now claimed
in PostgreSQL when their batch is stored; a copy of another URL's document loses and is
recorded as its duplicate. Real PostgreSQL throughout; the crawl test is in-process and
deterministic (the "other worker" is a claim made beforehand).
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import psycopg

from core.settings import CrawlSettings
from crawl.extraction.dedup import ContentClaim, fingerprints
from crawl.extraction.page import parse_html
from crawl.run.loop import Crawler
from crawl.state.postgres import PgCrawlDb
from crawl.state.records import NewUrl, Outcome, UrlStatus, UrlUpdate
from crawl.state.sqlite import CrawlDb
from retrieval.index.docs_source import crawled_documents
from tests.fixtures.crawl.web import HostServer, Site, html_page, prose

_S = 0x8123_4567_89AB_CDEF  # top bit set: stored as a negative BIGINT


def test_a_copy_of_another_urls_document_loses_its_claim(pg_dsn: str) -> None:
    w1, w2 = PgCrawlDb(pg_dsn), PgCrawlDb(pg_dsn)
    try:
        assert w1.claim_contents([ContentClaim("http://a/1", "h1", _S)], 3) == {}
        lost = w2.claim_contents(
            [
                ContentClaim("http://b/copy", "h1", _S),  # the same text
                ContentClaim("http://b/near", "h2", _S ^ (1 << 5) ^ (1 << 62)),  # two bits apart
                ContentClaim("http://b/far", "h3", _S ^ 0xF0F0),  # shares three blocks, 8 bits apart
                ContentClaim("http://a/1", "h1", _S),  # a URL never loses to itself (a retried batch)
            ],
            3,
        )
        assert {url: (v.kind, v.of_url, v.distance) for url, v in lost.items()} == {
            "http://b/copy": ("exact", "http://a/1", 0),
            "http://b/near": ("near", "http://a/1", 2),
        }
        # The winners are originals from now on, the losers are not.
        again = w1.claim_contents(
            [ContentClaim("http://c/x", "h3", _S ^ 0xF0F0), ContentClaim("http://c/y", "h2", _S ^ (1 << 5))],
            3,
        )
        assert {url: v.of_url for url, v in again.items()} == {
            "http://c/x": "http://b/far",
            "http://c/y": "http://a/1",
        }
        # With no near-duplicates allowed, only the same content hash loses.
        strict = w2.claim_contents(
            [ContentClaim("http://d/1", "h9", _S ^ 1), ContentClaim("http://d/2", "h1", 0)], 0
        )
        assert {url: v.kind for url, v in strict.items()} == {"http://d/2": "exact"}
    finally:
        w1.close()
        w2.close()


def test_a_crawl_database_from_before_the_claims_knows_its_documents(pg_dsn: str) -> None:
    """A fleet database made before ``contents`` existed has it filled from its indexed URLs on
    start, so a new worker's copy of a page indexed back then loses its claim."""
    db = PgCrawlDb(pg_dsn)
    now = time.time()
    db.apply(inserts=[NewUrl("http://a/old", "a", 0, 0.5)], leases=[], updates=[], hosts=[], now=now)
    indexed = UrlUpdate("http://a/old", UrlStatus.DONE, Outcome.INDEXED, 200, content_hash="old", simhash=_S)
    db.apply(inserts=[], leases=[], updates=[indexed], hosts=[], now=now)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE contents")  # as it was before,
        conn.execute("DROP TABLE trawl_schema")  # and before workers recorded the schema they made
    db.close()
    reopened = PgCrawlDb(pg_dsn)
    try:
        lost = reopened.claim_contents([ContentClaim("http://b/new", "old", _S)], 3)
        assert {url: (v.kind, v.of_url) for url, v in lost.items()} == {
            "http://b/new": ("exact", "http://a/old")
        }
    finally:
        reopened.close()


def test_the_sqlite_backend_never_loses_a_claim(tmp_path: Path) -> None:
    """One process crawls a SQLite frontier; its in-memory index is the only arbiter needed."""
    db = CrawlDb(tmp_path / "crawl.db")
    try:
        assert db.claim_contents([ContentClaim("http://a/1", "h1", _S)], 3) == {}
        assert db.claim_contents([ContentClaim("http://b/1", "h1", _S)], 3) == {}
    finally:
        db.close()


def _race(pg_dsn: str, claims: list[ContentClaim]) -> list[dict[str, str]]:
    """Every claim made at once, each by its own worker (connection); what each lost, by URL."""
    workers = [PgCrawlDb(pg_dsn) for _ in claims]
    start = threading.Barrier(len(claims))
    results: list[dict[str, str]] = [{} for _ in claims]

    def claim(i: int) -> None:
        start.wait()
        results[i] = {url: v.of_url for url, v in workers[i].claim_contents([claims[i]], 3).items()}

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(len(claims))]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    finally:
        for worker in workers:
            worker.close()
    return results


def test_workers_claiming_copies_at_the_same_moment_leave_one_original(pg_dsn: str) -> None:
    """Six workers claim one content (then six near-duplicates, each a bit apart from the
    first) at once: the block locks order them, so exactly one wins and the others name it."""
    for round_, make in enumerate(
        (
            lambda i: ContentClaim(f"http://w{i}/exact", "same", _S),
            lambda i: ContentClaim(f"http://w{i}/near", f"near{i}", (_S ^ 0xFFFF_0000) ^ (1 << (3 * i))),
        )
    ):
        results = _race(pg_dsn, [make(i) for i in range(6)])
        winners = [i for i, lost in enumerate(results) if not lost]
        assert len(winners) == 1, (round_, results)
        winner = make(winners[0]).url
        assert all(set(lost.values()) == {winner} for lost in results if lost), results


def _served(path: str, html: str) -> ContentClaim:
    """What the crawler will claim for ``html`` at ``path``: its URL's content hash and SimHash."""
    text_hash, simhash, _ = fingerprints(parse_html(html, path).body)
    return ContentClaim(path, text_hash, simhash)


def test_a_page_another_worker_holds_is_stored_as_its_duplicate(pg_dsn: str, tmp_path: Path) -> None:
    """A crawl whose page copies a document another worker claimed first stores no document
    for it: its URL is a duplicate of that one, counted so; on a recrawl, a page whose new
    text another worker holds loses its old document too."""
    copy_html = html_page("Copy", prose(31, 200))
    versions = {"now": html_page("Mine", prose(32, 200))}
    web = Site()
    web.page("/", html_page("Home", prose(30), links=[("/copy", "copy"), ("/mine", "mine")]))
    web.page("/copy", copy_html)

    async def mine(request: object) -> object:
        from starlette.responses import HTMLResponse

        return HTMLResponse(versions["now"])

    web.handler("/mine")(mine)  # type: ignore[arg-type]
    server = HostServer(web, "127.0.0.46").start()
    elsewhere = "http://elsewhere.test/original"
    other = PgCrawlDb(pg_dsn)  # another worker of the fleet
    data = tmp_path / "crawl"
    settings = CrawlSettings(allow_loopback=True, min_delay_s=0, frontier_url=pg_dsn, flush_interval_s=0.1)
    try:
        claim = _served(server.url("/copy"), copy_html)
        assert other.claim_contents([ContentClaim(elsewhere, claim.content_hash, claim.simhash)], 3) == {}
        summary = asyncio.run(Crawler(data, settings, seeds=[server.url("/")]).run())
        urls = {doc.url for doc in crawled_documents(data)}
        assert urls == {server.url("/"), server.url("/mine")}
        row = other.row(server.url("/copy"))
        assert row is not None and (row["outcome"], row["dup_of"]) == ("duplicate (exact)", elsewhere)
        assert (summary.indexed, summary.duplicates) == (2, 1)
        outcomes = dict(summary.outcomes)
        assert (outcomes["indexed"], outcomes["duplicate (exact)"]) == (2, 1)

        # "/mine" changes to a text another worker indexed meanwhile, under another URL.
        versions["now"] = html_page("Mine", prose(33, 200))
        mine_claim = _served(server.url("/mine"), versions["now"])
        other.claim_contents([ContentClaim(elsewhere + "2", mine_claim.content_hash, mine_claim.simhash)], 3)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("UPDATE urls SET next_fetch = 0 WHERE next_fetch IS NOT NULL")  # time passes
        asyncio.run(Crawler(data, settings, seeds=[server.url("/")], recrawl=True).run())
        assert {doc.url for doc in crawled_documents(data)} == {server.url("/")}
        row = other.row(server.url("/mine"))
        assert row is not None and (row["outcome"], row["dup_of"]) == ("duplicate (exact)", elsewhere + "2")
    finally:
        other.close()
        server.stop()
