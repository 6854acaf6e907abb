"""The PostgreSQL crawl database's schema, and bringing a database to it once per version.

The same tables as the SQLite database (``crawl.state.sqlite``) plus what a fleet needs:
host leases, worker heartbeats, the fleet's page budget and per-host admissions, and the
content claims that decide duplicates across workers. ``ensure_schema`` runs the DDL under
an advisory lock, and only when the database's recorded digest differs from this one.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

__all__ = ["ensure_schema"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS urls (
    id BIGSERIAL,
    url TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    kind TEXT NOT NULL DEFAULT 'page',
    depth INTEGER NOT NULL,
    priority DOUBLE PRECISION NOT NULL,
    status TEXT NOT NULL,
    outcome TEXT NOT NULL DEFAULT '',
    discovered_at DOUBLE PRECISION NOT NULL,
    parent TEXT NOT NULL DEFAULT '',
    http_status INTEGER,
    content_hash TEXT NOT NULL DEFAULT '',
    simhash BIGINT NOT NULL DEFAULT 0,
    etag TEXT NOT NULL DEFAULT '',
    last_modified TEXT NOT NULL DEFAULT '',
    last_fetch DOUBLE PRECISION,
    next_fetch DOUBLE PRECISION,
    interval_s DOUBLE PRECISION NOT NULL DEFAULT 0,
    retries INTEGER NOT NULL DEFAULT 0,
    redirects INTEGER NOT NULL DEFAULT 0,
    fetch_count INTEGER NOT NULL DEFAULT 0,
    change_count INTEGER NOT NULL DEFAULT 0,
    blocked_reason TEXT NOT NULL DEFAULT '',
    dup_of TEXT NOT NULL DEFAULT '',
    lease_until DOUBLE PRECISION,
    lease_owner TEXT NOT NULL DEFAULT '',
    lastmod DOUBLE PRECISION,
    cluster_written INTEGER
);
ALTER TABLE urls ADD COLUMN IF NOT EXISTS lastmod DOUBLE PRECISION;
ALTER TABLE urls ADD COLUMN IF NOT EXISTS cluster_written INTEGER;
CREATE INDEX IF NOT EXISTS urls_pending ON urls(host, priority DESC, id) WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS urls_status ON urls(status);
CREATE INDEX IF NOT EXISTS urls_dup_of ON urls(dup_of) WHERE dup_of != '';
CREATE TABLE IF NOT EXISTS hosts (
    seq BIGSERIAL,
    host TEXT PRIMARY KEY,
    next_allowed DOUBLE PRECISION NOT NULL DEFAULT 0,
    backoff_s DOUBLE PRECISION NOT NULL DEFAULT 0,
    errors INTEGER NOT NULL DEFAULT 0,
    lease_owner TEXT NOT NULL DEFAULT '',
    lease_until DOUBLE PRECISION NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS fetch_log (
    url TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL,
    http_status INTEGER,
    outcome TEXT NOT NULL,
    bytes BIGINT NOT NULL,
    elapsed_s DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS fetch_log_url ON fetch_log(url);
CREATE INDEX IF NOT EXISTS fetch_log_at ON fetch_log(at);
CREATE TABLE IF NOT EXISTS robots (
    origin TEXT PRIMARY KEY,
    status INTEGER NOT NULL,
    body TEXT NOT NULL,
    fetched_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE IF NOT EXISTS workers (
    worker TEXT PRIMARY KEY,
    started_at DOUBLE PRECISION NOT NULL,
    heartbeat_at DOUBLE PRECISION NOT NULL,
    counters JSONB NOT NULL DEFAULT '{}'
);
ALTER TABLE urls ADD COLUMN IF NOT EXISTS reserved BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE hosts ADD COLUMN IF NOT EXISTS admitted INTEGER;
ALTER TABLE workers ADD COLUMN IF NOT EXISTS short_at DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE workers ADD COLUMN IF NOT EXISTS hosts_held INTEGER NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS host_admissions (
    host TEXT PRIMARY KEY,
    admitted INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS contents (
    content_hash TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    simhash BIGINT NOT NULL,
    seq BIGSERIAL,
    b0 INTEGER GENERATED ALWAYS AS ((simhash & 65535)::int) STORED,
    b1 INTEGER GENERATED ALWAYS AS (((simhash >> 16) & 65535)::int) STORED,
    b2 INTEGER GENERATED ALWAYS AS (((simhash >> 32) & 65535)::int) STORED,
    b3 INTEGER GENERATED ALWAYS AS (((simhash >> 48) & 65535)::int) STORED
);
CREATE INDEX IF NOT EXISTS contents_b0 ON contents(b0);
CREATE INDEX IF NOT EXISTS contents_b1 ON contents(b1);
CREATE INDEX IF NOT EXISTS contents_b2 ON contents(b2);
CREATE INDEX IF NOT EXISTS contents_b3 ON contents(b3);
INSERT INTO contents(content_hash, url, simhash)
SELECT DISTINCT ON (content_hash) content_hash, url, simhash FROM urls
WHERE outcome = 'indexed' AND content_hash <> '' AND NOT EXISTS (SELECT 1 FROM contents)
ORDER BY content_hash, id
ON CONFLICT (content_hash) DO NOTHING;
CREATE TABLE IF NOT EXISTS page_budget (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    spent BIGINT NOT NULL
);
INSERT INTO page_budget(id, spent)
SELECT 1, (SELECT COUNT(*) FROM urls WHERE kind = 'page'
           AND (status = 'leased' OR (status IN ('done', 'failed') AND fetch_count > 0)))
WHERE NOT EXISTS (SELECT 1 FROM page_budget);
CREATE OR REPLACE FUNCTION trawl_refund_page() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT (NEW.status IN ('done', 'failed') AND NEW.fetch_count > OLD.fetch_count) THEN
        UPDATE page_budget SET spent = spent - 1 WHERE id = 1;
    END IF;
    NEW.reserved := FALSE;
    RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER urls_refund_page BEFORE UPDATE ON urls FOR EACH ROW
    WHEN (OLD.reserved AND NEW.status <> 'leased') EXECUTE FUNCTION trawl_refund_page();
CREATE TABLE IF NOT EXISTS trawl_schema (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    digest TEXT NOT NULL
);
"""
"""The fleet's page budget (``--max-pages`` across workers, DECISIONS 41): ``page_budget.spent``
counts pages fetched (done or failed with a fetch) and pages leased with a share of it
(``urls.reserved``). The trigger settles a share when its URL leaves the lease, on every
path (result, retry, robots deferral, expiry, a dead worker's release): a fetch keeps it,
anything else gives it back. The per-host cap counts in ``host_admissions`` (a host
without a row: not counted yet, read from ``hosts.admitted``, which databases from before
that table kept, or from ``urls`` once)."""
_SCHEMA_LOCK = 7_316_016  # pg_advisory_xact_lock key: workers starting together create the schema once
_SCHEMA_DIGEST = hashlib.sha256(_SCHEMA.encode()).hexdigest()
"""Which schema a database was last brought to: ``trawl_schema.digest``. A worker whose
``_SCHEMA`` matches skips the DDL; running it again is not free even when every statement
says ``IF NOT EXISTS``: ``ALTER TABLE ... ADD COLUMN IF NOT EXISTS`` and ``CREATE OR REPLACE
TRIGGER`` take an ACCESS EXCLUSIVE lock on ``urls``, and a worker joining a crawl already
running would queue behind the others' reads and deadlock with their writes."""


def ensure_schema(conn: psycopg.Connection[dict[str, Any]]) -> None:
    """Create or upgrade the schema once per version, under the fleet's schema lock (the
    caller holds the connection's lock and retries a deadlock victim)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        if _schema_digest(conn) == _SCHEMA_DIGEST:
            return
        conn.execute(_SCHEMA)
        conn.execute(
            "INSERT INTO trawl_schema(id, digest) VALUES (1, %s) "
            "ON CONFLICT (id) DO UPDATE SET digest = EXCLUDED.digest",
            (_SCHEMA_DIGEST,),
        )


def _schema_digest(conn: psycopg.Connection[dict[str, Any]]) -> str | None:
    """The digest recorded by the last worker that ran the DDL (None: never, or older code)."""
    found = conn.execute("SELECT to_regclass('trawl_schema') IS NOT NULL AS t").fetchone()
    if not (found and found["t"]):
        return None
    row = conn.execute("SELECT digest FROM trawl_schema WHERE id = 1").fetchone()
    return None if row is None else str(row["digest"])
