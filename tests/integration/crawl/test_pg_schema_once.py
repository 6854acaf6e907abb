"""A worker joining a running PostgreSQL crawl does not re-run the schema's DDL.

``ALTER TABLE ... ADD COLUMN IF NOT EXISTS`` takes an ACCESS EXCLUSIVE lock on ``urls``
even when the column is there; a fleet test died on ``DeadlockDetected`` when a late
worker's schema set-up met the earlier workers' crawl transactions. The schema's digest
in ``trawl_schema`` lets a worker skip it, and a changed schema still gets applied.
"""

from __future__ import annotations

import threading

import psycopg

from crawl.state.pg_schema import _SCHEMA_DIGEST
from crawl.state.postgres import PgCrawlDb


def test_a_worker_opens_the_database_while_another_holds_a_transaction_on_urls(pg_dsn: str) -> None:
    PgCrawlDb(pg_dsn).close()
    reader = psycopg.connect(pg_dsn)
    reader.execute("SELECT COUNT(*) FROM urls").fetchone()  # holds ACCESS SHARE until it ends
    opened = threading.Event()

    def join_the_crawl() -> None:
        db = PgCrawlDb(pg_dsn)
        opened.set()
        db.close()

    worker = threading.Thread(target=join_the_crawl, daemon=True)
    worker.start()
    try:
        joined = opened.wait(15)
    finally:
        reader.rollback()  # releases the lock either way, so a blocked worker ends too
        worker.join(15)
        reader.close()
    assert joined, "the joining worker queued for an exclusive lock on urls"


def test_a_database_with_another_schema_digest_is_brought_up_to_date(pg_dsn: str) -> None:
    PgCrawlDb(pg_dsn).close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DROP INDEX urls_status")
        conn.execute("UPDATE trawl_schema SET digest = 'older code'")
    PgCrawlDb(pg_dsn).close()
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT to_regclass('urls_status') IS NOT NULL").fetchone() == (True,)
        assert conn.execute("SELECT digest FROM trawl_schema").fetchone() == (_SCHEMA_DIGEST,)


def test_a_database_with_the_current_digest_is_left_as_it_is(pg_dsn: str) -> None:
    PgCrawlDb(pg_dsn).close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DROP INDEX urls_status")
    PgCrawlDb(pg_dsn).close()
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT to_regclass('urls_status') IS NOT NULL").fetchone() == (False,)
